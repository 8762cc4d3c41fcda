"""The PostgreSQL engine's keyword leg (``mempp.search.keyword``): substrings of the record
text, found through the ``pg_trgm`` index of ``keyword_schema``, an optional index the store
must have enabled (``mempp.store.indexes``).

``text ILIKE '%term%'`` is what the index answers; it folds case by the database's locale, so
it finds a superset of the leg's rule, which is then checked on each row found: the term is a
substring of the text lower-cased in ASCII only (``translate``), as SQLite's ``lower()`` does.
Both engines thus match the same rows and rank them alike (``rank_matches``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mempp.filters import NO_FILTERS, Filters
from mempp.search.keyword import MAX_TERM_ROWS, rank_matches
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.schema import _PostgresBase

_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class _KeywordMixin(_PostgresBase):
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
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "r", "postgres")
        sql = f"""SELECT r.id FROM records r
                  WHERE r.scope = %(scope)s AND r.state = 'active'
                    AND r.text ILIKE %(pattern)s
                    AND strpos(translate(r.text, %(upper)s, %(lower)s), %(term)s) > 0
                    {date_condition}{where}
                  LIMIT %(cap)s"""
        matches: dict[str, list[int]] = {}
        with self._connection() as conn:
            for term in terms:
                rows = conn.execute(
                    sql,
                    {
                        "scope": scope,
                        # Terms are letters and digits only: nothing in them is a wildcard.
                        "pattern": f"%{term}%",
                        "upper": _UPPER,
                        "lower": _UPPER.lower(),
                        "term": term,
                        "as_of": as_of,
                        "cap": MAX_TERM_ROWS + 1,
                        **params,
                    },
                ).fetchall()
                matches[term] = [row[0] for row in rows]
        return rank_matches(matches, limit)
