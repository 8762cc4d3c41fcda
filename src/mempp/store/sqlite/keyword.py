"""The SQLite engine's keyword leg (``mempp.search.keyword``): substrings of the record text,
found through an FTS5 table with the ``trigram`` tokenizer (``keyword_schema``), an optional
index the store must have enabled (``mempp.store.indexes``).

The trigram table indexes the same text as ``records_fts`` (external content: the text is
stored once, in ``records``); it is filled by a trigger on insert, and an erasure takes a
redacted row's text out of it as out of ``records_fts`` (``mempp.store.sqlite.erasure``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mempp.filters import NO_FILTERS, Filters
from mempp.search.keyword import MAX_TERM_ROWS, rank_matches
from mempp.store.filter_sql import filter_condition
from mempp.store.sqlite.keyword_schema import KEYWORD_TABLE
from mempp.store.sqlite.schema import _SQLiteBase


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


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
        # The trigram index folds case in every script and so finds a superset; instr on the
        # ASCII-lower-cased text is the match itself, the rule PostgreSQL applies too.
        # CROSS JOIN fixes the join order (the index's matches first): otherwise SQLite may
        # walk every row of the scope and look each up in the index (seconds at 100k rows).
        sql = f"""SELECT r.id FROM {KEYWORD_TABLE} k CROSS JOIN records r ON r.id = k.rowid
                  WHERE {KEYWORD_TABLE} MATCH :match AND instr(lower(r.text), :term) > 0
                    AND r.scope = :scope AND r.state = 'active'{date_condition}{where}
                  LIMIT :cap"""
        matches: dict[str, list[int]] = {}
        with self._lock:
            for term in terms:
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
