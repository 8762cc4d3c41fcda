"""The SQLite engine's keyword leg (``mempp.search.keyword``): substrings of the record text,
found through an FTS5 table with the ``trigram`` tokenizer (``keyword_schema``), an optional
index the store must have enabled (``mempp.store.indexes``).

For an ASCII term, FTS5's match is the leg's rule itself (its case folding turns into ASCII
letters exactly what ``fold`` does), so each match is read from the index and checked
against the scope through ``records_kw_rows`` (id, scope, state, event key), a narrow index
enabled with the trigram table: no record row, no text. A term with other letters is
checked on each row's folded text, since FTS5 folds those more widely than the rule does
(``Zürich`` matches ``ZÜRICH`` there). Filters other than the as-of bound read the row.

``keyword_prefix`` (``kw_match="prefix"``) needs no optional index: each word is a prefix
query of the lexical FTS5 table (``"word" *``), which FTS5 reads through its own tokenizer,
the one ``mempp.index.analysis`` shares with PostgreSQL, so the prefix is the word's token.
Its ids are checked against the scope in RAM, by the vector index's eligibility (tenant,
active, as-of, the filters' ids), as the lexical and tag legs check theirs, a batch at a
time until more than ``MAX_TERM_ROWS`` are in scope: reading each matched row to check it
was most of the leg's time at 1M (47 / 97 ms p50 / p95 a question, against 13-15 ms p95 for
FTS5's ids alone). Without a vector index (a store never written with vectors) the check is
the SQL join.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.search.keyword import (
    FOLD_FROM,
    FOLD_TO,
    MAX_TERM_ROWS,
    rank_matches,
    rows_to_measure,
)
from mempp.store.filter_sql import filter_condition
from mempp.store.sqlite.keyword_schema import KEYWORD_ROWS_INDEX, KEYWORD_TABLE
from mempp.store.sqlite.schema import _SQLiteBase

# FTS5 ids checked against the scope per round of the prefix match.
_PREFIX_BATCH = 2048
# Row ids per read of FTS5's docsize table (under SQLite's host-parameter limit).
_LENGTH_BATCH = 500


def _varint(blob: bytes) -> int:
    """The first varint of an FTS5 ``docsize`` blob (SQLite's format: 7 bits a byte, high
    bit set on every byte but the last, the ninth byte whole)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _folded(column: str) -> str:
    """SQL for ``fold(column)``: ``lower()`` folds A-Z only (SQLite without ICU), then the
    two characters beyond ASCII."""
    sql = f"lower({column})"
    for source, target in zip(FOLD_FROM[26:], FOLD_TO[26:], strict=True):
        sql = f"replace({sql}, char({ord(source)}), '{target}')"
    return sql


class _KeywordMixin(_SQLiteBase):
    """``keyword``: the in-scope rows holding each term, ranked by ``rank_matches``."""

    def keyword(
        self,
        scope: str,
        terms: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
        max_tokens: int | None = None,
    ) -> list[int]:
        if not terms or limit <= 0:
            return []
        date_condition = "" if as_of is None else " AND r.event_key <= :as_of"
        where, params = filter_condition(filters, "r", "sqlite")
        matches: dict[str, list[int]] = {}
        with self._lock:
            for term in terms:
                exact = term.isascii()
                # CROSS JOIN fixes the join order (the index's matches first): otherwise
                # SQLite may walk every row of the scope and look each up in the index.
                narrow = f" INDEXED BY {KEYWORD_ROWS_INDEX}" if exact and not where else ""
                check = "" if exact else f" AND instr({_folded('r.text')}, :term) > 0"
                sql = f"""SELECT r.id FROM {KEYWORD_TABLE} k
                          CROSS JOIN records r{narrow} ON r.id = k.rowid
                          WHERE {KEYWORD_TABLE} MATCH :match{check}
                            AND r.scope = :scope AND r.state = 'active'{date_condition}{where}
                          LIMIT :cap"""
                rows = self._conn.execute(
                    sql,
                    {
                        "match": _quoted(term),
                        "term": term,
                        "scope": scope,
                        "as_of": as_of,
                        "cap": MAX_TERM_ROWS + 1,
                        **params,
                    },
                ).fetchall()
                matches[term] = [row[0] for row in rows]
            lengths = self._token_counts(matches) if max_tokens is not None else None
        return rank_matches(matches, limit, lengths, max_tokens)

    def _token_counts(self, matches: dict[str, list[int]]) -> dict[int, int]:
        """The full-text token count of each row ``rank_matches`` counts, from FTS5's own
        ``docsize`` table (one varint per row: the text column's token count), a narrow
        table read by id. Callers hold the lock."""
        ids = sorted(rows_to_measure(matches))
        counts: dict[int, int] = {}
        for start in range(0, len(ids), _LENGTH_BATCH):
            chunk = ids[start : start + _LENGTH_BATCH]
            marks = ",".join("?" * len(chunk))
            for row, size in self._conn.execute(
                f"SELECT id, sz FROM records_fts_docsize WHERE id IN ({marks})", chunk
            ):
                counts[row] = _varint(size)
        # An in-scope row always has its FTS5 entry; none missing is a row of no tokens.
        return {row: counts.get(row, 0) for row in ids}

    def keyword_prefix(
        self,
        scope: str,
        words: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
        max_tokens: int | None = None,
    ) -> list[int]:
        if not words or limit <= 0:
            return []
        index = self._vector_index()  # type: ignore[attr-defined]
        if index is None:
            return self._keyword_prefix_joined(scope, words, as_of, limit, filters, max_tokens)
        matches: dict[str, list[int]] = {}
        with self._lock:
            allowed = self._filtered_ids(scope, filters, index)  # type: ignore[attr-defined]
            for word in words:
                cursor = self._conn.execute(
                    "SELECT rowid FROM records_fts WHERE records_fts MATCH ?",
                    (_quoted(word) + " *",),
                )
                found: list[int] = []
                while len(found) <= MAX_TERM_ROWS:
                    batch = cursor.fetchmany(_PREFIX_BATCH)
                    if not batch:
                        break
                    ids = np.fromiter((row[0] for row in batch), dtype=np.int64, count=len(batch))
                    found += ids[index.eligible(ids, scope, as_of, allowed)].tolist()
                cursor.close()
                matches[word] = found
            lengths = self._token_counts(matches) if max_tokens is not None else None
        return rank_matches(matches, limit, lengths, max_tokens)

    def _keyword_prefix_joined(
        self,
        scope: str,
        words: Sequence[str],
        as_of: int | None,
        limit: int,
        filters: Filters,
        max_tokens: int | None = None,
    ) -> list[int]:
        """``keyword_prefix`` checking each match's row in SQL (no vector index to ask)."""
        date_condition = "" if as_of is None else " AND r.event_key <= :as_of"
        where, params = filter_condition(filters, "r", "sqlite")
        # CROSS JOIN: the index's matches first, each looked up by id (see ``keyword``).
        sql = f"""SELECT r.id FROM records_fts f CROSS JOIN records r ON r.id = f.rowid
                  WHERE records_fts MATCH :match
                    AND r.scope = :scope AND r.state = 'active'{date_condition}{where}
                  LIMIT :cap"""
        matches: dict[str, list[int]] = {}
        with self._lock:
            for word in words:
                rows = self._conn.execute(
                    sql,
                    {
                        "match": _quoted(word) + " *",
                        "scope": scope,
                        "as_of": as_of,
                        "cap": MAX_TERM_ROWS + 1,
                        **params,
                    },
                ).fetchall()
                matches[word] = [row[0] for row in rows]
            lengths = self._token_counts(matches) if max_tokens is not None else None
        return rank_matches(matches, limit, lengths, max_tokens)
