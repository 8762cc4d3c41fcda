"""The PostgreSQL engine's keyword leg (``mempp.search.keyword``): substrings of the record
text, found through the ``pg_trgm`` index of ``keyword_schema``, an optional index the store
must have enabled (``mempp.store.indexes``).

The index holds the text as the leg folds it (``mempp_kw_fold``), so ``LIKE '%term%'`` on
that expression is the leg's rule itself: PostgreSQL's own recheck of the index's candidates
makes the match exact, and it agrees with SQLite's, whatever the database's locale.

``keyword_prefix`` (``kw_match="prefix"``) needs no optional index: each word's token (the
shared analysis, ``mempp.index.analysis``, as SQLite's FTS5 reads it) becomes a prefix
``tsquery`` (``'hike':*``) on ``tsv``, the row's FTS5 tokens as lexemes with no parser in
between, through its GIN index: a lexeme begins with the token exactly where an FTS5 token
does (both compare bytes). Like the lexical leg, a token over 2,047 bytes is in no tsvector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mempp.filters import NO_FILTERS, Filters
from mempp.search.keyword import MAX_TERM_ROWS, prefix_token, rank_matches, rows_to_measure
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.keyword_schema import FOLD_FUNCTION
from mempp.store.postgres.schema import _PostgresBase


def _token_counts(conn: Any, scope: str, matches: dict[str, list[int]]) -> dict[int, int]:
    """The full-text token count of each row ``rank_matches`` counts: the words of its
    ``terms`` (FTS5's tokens of the text joined by spaces, ``mempp.index.analysis``), the
    count SQLite's FTS5 keeps in its ``docsize`` table. Read by the primary key, (scope,
    id)."""
    ids = sorted(rows_to_measure(matches))
    if not ids:
        return {}
    rows = conn.execute(
        """SELECT id, coalesce(array_length(string_to_array(terms, ' '), 1), 0)
           FROM records WHERE scope = %(scope)s AND id = ANY(%(ids)s)""",
        {"scope": scope, "ids": ids},
    ).fetchall()
    counts = {row[0]: row[1] for row in rows}
    return {row: counts.get(row, 0) for row in ids}


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
        max_tokens: int | None = None,
    ) -> list[int]:
        if not terms or limit <= 0:
            return []
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "r", "postgres")
        sql = f"""SELECT r.id FROM records r
                  WHERE r.scope = %(scope)s AND r.state = 'active'
                    AND {FOLD_FUNCTION}(r.text) LIKE %(pattern)s
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
                        "as_of": as_of,
                        "cap": MAX_TERM_ROWS + 1,
                        **params,
                    },
                ).fetchall()
                matches[term] = [row[0] for row in rows]
            lengths = _token_counts(conn, scope, matches) if max_tokens is not None else None
        return rank_matches(matches, limit, lengths, max_tokens)

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
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "r", "postgres")
        sql = f"""SELECT r.id FROM records r
                  WHERE r.tsv @@ %(q)s::tsquery AND r.scope = %(scope)s AND r.state = 'active'
                    {date_condition}{where}
                  LIMIT %(cap)s"""
        matches: dict[str, list[int]] = {}
        with self._connection() as conn:
            for word in words:
                token = prefix_token(word)
                quoted = token.replace("\\", "\\\\").replace("'", "''")
                rows = conn.execute(
                    sql,
                    {
                        "q": f"'{quoted}':*",
                        "scope": scope,
                        "as_of": as_of,
                        "cap": MAX_TERM_ROWS + 1,
                        **params,
                    },
                ).fetchall()
                matches[word] = [row[0] for row in rows]
            lengths = _token_counts(conn, scope, matches) if max_tokens is not None else None
        return rank_matches(matches, limit, lengths, max_tokens)
