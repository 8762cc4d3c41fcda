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
"""

from __future__ import annotations

from collections.abc import Sequence

from mempp.filters import NO_FILTERS, Filters
from mempp.search.keyword import FOLD_FROM, FOLD_TO, MAX_TERM_ROWS, rank_matches
from mempp.store.filter_sql import filter_condition
from mempp.store.sqlite.keyword_schema import KEYWORD_ROWS_INDEX, KEYWORD_TABLE
from mempp.store.sqlite.schema import _SQLiteBase


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
        return rank_matches(matches, limit)

    def keyword_prefix(
        self,
        scope: str,
        words: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if not words or limit <= 0:
            return []
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
        return rank_matches(matches, limit)
