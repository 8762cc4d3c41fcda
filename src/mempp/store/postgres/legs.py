"""The PostgreSQL engine's retrieval legs: lexical (BM25 from the in-RAM replica of
``mempp.store.postgres.bm25``, or ``ts_rank_cd``), dated spans, thread followers, recency keys
and the latest unmatched rows; the tag leg is in ``tags``, the vector leg in ``nearest``."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.search.query import LexicalQuery, storable_query
from mempp.store.base import followers_in_order
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.bm25 import Postings, ScopeReplica
from mempp.store.postgres.nearest import _NearestMixin
from mempp.store.postgres.tags import _TagLegMixin

# Lexemes per round trip when a BM25 replica reads postings.
_POSTINGS_CHUNK = 2000
# Stands for the one position of a lexeme stored without positions: above PostgreSQL's
# highest (16,383) and one past it, so never next to a position of another word.
_NO_POSITION = 16385


class _LegsMixin(_TagLegMixin, _NearestMixin):
    """The retrieval legs, and the read-time lookups beside them (threads, recency)."""

    def warm(self, scope: str) -> None:
        # The scope's BM25, tag and vector replicas are built here.
        self._caught_up(scope)
        self._tags_caught_up(scope)
        dim = self._bound_dim()
        if self.vector_replica and dim is not None:
            self._vectors_caught_up(scope, dim)

    def lexical(
        self,
        scope: str,
        query: LexicalQuery,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        query = storable_query(query)
        terms = list(query.terms)
        phrases = list(query.phrases) if query.mode == "disjunctive" else []
        if not terms or limit <= 0:
            return []
        if query.ranking == "bm25":
            return self._lexical_bm25(scope, query, terms, phrases, as_of, limit, filters)
        # ``query.unique_stems`` needs nothing here: ts_rank_cd already counts a lexeme the
        # query repeats once (tested in the conformance suite).
        sql = self._psycopg.sql
        joiner = sql.SQL(" && " if query.mode == "conjunctive" else " || ")
        # The SQL text depends only on the counts; every term is a bound parameter.
        tsquery = joiner.join(
            [
                *(
                    sql.SQL("plainto_tsquery('english', {})").format(sql.Placeholder(f"t{i}"))
                    for i in range(len(terms))
                ),
                *(
                    sql.SQL("phraseto_tsquery('english', {})").format(sql.Placeholder(f"p{i}"))
                    for i in range(len(phrases))
                ),
            ]
        )
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "r", "postgres")
        statement = sql.SQL(
            """SELECT r.id FROM records r, (SELECT {tsquery} AS q) query
               WHERE r.tsv @@ query.q AND r.scope = %(scope)s AND r.state = 'active'{date}
               ORDER BY ts_rank_cd(r.tsv, query.q) DESC, r.id DESC LIMIT %(limit)s"""
        ).format(tsquery=tsquery, date=sql.SQL(date_condition + where))
        params.update({f"t{i}": term for i, term in enumerate(terms)})
        params.update({f"p{i}": phrase for i, phrase in enumerate(phrases)})
        params.update(scope=scope, as_of=as_of, limit=limit)
        with self._connection() as conn:
            return [row[0] for row in conn.execute(statement, params)]

    def _lexical_bm25(
        self,
        scope: str,
        query: LexicalQuery,
        terms: list[str],
        phrases: list[str],
        as_of: int | None,
        limit: int,
        filters: Filters,
    ) -> list[int]:
        """BM25 over the scope's in-RAM replica (``mempp.store.postgres.bm25``); PostgreSQL
        then keeps the active rows, asked again for more in the rare case too few are."""
        words = self._lexemes([*terms, *(word for phrase in phrases for word in phrase.split())])
        lexemes = [lexeme for term in terms for lexeme in words[term]]
        if query.unique_stems:
            lexemes = list(dict.fromkeys(lexemes))
        if not lexemes:
            return []
        conjunctive = query.mode == "conjunctive"
        pairs: dict[tuple[str, str] | str, tuple[str, str, str]] = {}
        for phrase in phrases:
            pair = phrase.split()
            if len(pair) != 2:
                continue
            first, second = (words[word] for word in pair)
            if len(first) == 1 and len(second) == 1:  # a stop word has no lexeme
                key = (first[0], second[0]) if query.unique_stems else phrase
                pairs.setdefault(key, (phrase, first[0], second[0]))
        replica = self._caught_up(scope)
        phrase_rows = self._phrase_rows(scope, replica, list(pairs.values()))
        return self._kept_in_order(
            scope,
            lambda n: replica.ranked(lexemes, conjunctive, as_of, n, phrase_rows),
            limit,
            filters,
        )

    def _caught_up(self, scope: str) -> ScopeReplica:
        """The scope's replica, holding every committed row."""
        replica = self._replicas.use(scope, self._erasures(scope))
        with replica.lock:  # one catch-up at a time; ranking may run beside another one
            replica.catch_up(lambda after: self._rows_after(scope, after))
        self._replicas.evict(scope, self.bm25_max_rows)
        return replica

    def _lexemes(self, words: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """PostgreSQL's lexemes of each query word (none for a stop word), cached; the words
        not yet cached cost one round trip together."""
        cache = self._lexeme_cache
        # Read the cache once: another thread may clear it at any moment.
        found = {word: cache.get(word) for word in dict.fromkeys(words)}
        missing = [word for word, lexemes in found.items() if lexemes is None]
        if missing:
            with self._connection() as conn:
                rows = conn.execute(
                    """SELECT w, tsvector_to_array(to_tsvector('english', w))
                       FROM unnest(%s::text[]) AS w""",
                    (missing,),
                ).fetchall()
            fetched = {word: tuple(lexemes) for word, lexemes in rows}
            if len(cache) > 50_000:  # bounded; a dict clear is atomic
                cache.clear()
            cache.update(fetched)
            found.update(fetched)
        return {word: found.get(word) or () for word in words}

    def _rows_after(self, scope: str, after: int) -> tuple[np.ndarray, np.ndarray, Postings]:
        """Ids, event keys and postings (with positions) of the scope's rows with ids above
        ``after``, read in one snapshot."""
        with self._connection() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            ids, keys = self._ids_and_keys_after(conn, scope, after)
            if len(ids) == 0:
                return ids, keys, {}
            # Each lexeme's ids and frequencies as text parsed by numpy, streamed from a
            # server-side cursor: a list of Python ints per posting, fetched all at once,
            # cost ten times the replica's own arrays at its peak.
            postings: Postings = {}
            with conn.cursor(name="mempp_bm25_postings") as cursor:
                cursor.itersize = _POSTINGS_CHUNK
                # A lexeme without positions (a stripped tsvector; the generated column
                # always has them) counts once, at a position no phrase can reach.
                cursor.execute(
                    f"""SELECT u.lexeme, string_agg(r.id::text, ' ' ORDER BY r.id),
                              string_agg(coalesce(cardinality(u.positions), 1)::text, ' '
                                         ORDER BY r.id),
                              string_agg(coalesce(array_to_string(u.positions, ' '),
                                                  '{_NO_POSITION}'), ' ' ORDER BY r.id)
                       FROM records r, unnest(r.tsv) u
                       WHERE r.scope = %s AND r.id > %s
                       GROUP BY u.lexeme""",
                    (scope, after),
                )
                for lexeme, row_ids, tf, positions in cursor:
                    postings[lexeme] = (
                        np.fromstring(row_ids, dtype=np.int64, sep=" "),
                        np.fromstring(tf, dtype=np.float64, sep=" "),
                        np.fromstring(positions, dtype=np.int16, sep=" "),
                    )
        return ids, keys, postings

    def _phrase_rows(
        self, scope: str, replica: ScopeReplica, phrases: list[tuple[str, str, str]]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per (phrase, first lexeme, second lexeme) found: the ids of the scope's rows where
        the two words stand side by side, and how often they do, from the replica's
        positions (``benchmarks/bench_read_path.py`` swaps in ``_phrase_rows_sql``)."""
        return replica.phrase_rows([(first, second) for _, first, second in phrases])

    def _phrase_rows_sql(
        self, scope: str, phrases: list[tuple[str, str, str]], newest: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per (phrase, first lexeme, second lexeme): the ids of the scope's rows up to
        ``newest`` where the two words stand side by side, and how often they do, in SQL, as
        the lexical leg found them before the replica held positions: the reference
        ``ScopeReplica.phrase_rows`` is tested against (``tests/test_pg_phrases.py``) and
        measured against (``benchmarks/bench_read_path.py``)."""
        if not phrases:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT p.n, r.id,
                          (SELECT u.positions FROM unnest(r.tsv) u WHERE u.lexeme = p.a),
                          (SELECT u.positions FROM unnest(r.tsv) u WHERE u.lexeme = p.b)
                   FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY
                        AS p(phrase, a, b, n)
                   JOIN LATERAL (
                       SELECT id, tsv FROM records
                       WHERE scope = %s AND id <= %s
                         AND tsv @@ phraseto_tsquery('english', p.phrase)) r ON true""",
                (
                    [phrase for phrase, _, _ in phrases],
                    [a for _, a, _ in phrases],
                    [b for _, _, b in phrases],
                    scope,
                    newest,
                ),
            ).fetchall()
        found: list[tuple[list[int], list[float]]] = [([], []) for _ in phrases]
        for n, record_id, first, second in rows:
            follows = {p - 1 for p in second or ()}
            # PostgreSQL keeps at most 255 positions a lexeme; it matched, so at least once.
            occurrences = max(1, sum(1 for p in first or () if p in follows))
            found[n - 1][0].append(record_id)
            found[n - 1][1].append(float(occurrences))
        return [
            (np.asarray(ids, dtype=np.int64), np.asarray(tf, dtype=np.float64))
            for ids, tf in found
            if ids
        ]

    def dated_within(
        self,
        scope: str,
        spans: Sequence[tuple[int, int]],
        as_of: int | None,
        limit: int,
        among: Collection[int] | None = None,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if not spans or limit <= 0 or (among is not None and not among):
            return []
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "records", "postgres")
        among_condition = "" if among is None else " AND id = ANY(%(ids)s::bigint[])"
        found: set[int] = set()
        with self._connection() as conn:
            for start, end in spans:  # one index range per span
                rows = conn.execute(
                    f"""SELECT id FROM records
                        WHERE scope = %(scope)s AND state = 'active'
                          AND event_key >= %(start)s AND event_key < %(end)s{date_condition}
                          {among_condition}{where}
                        ORDER BY id DESC LIMIT %(limit)s""",
                    {
                        "scope": scope,
                        "start": start,
                        "end": end,
                        "as_of": as_of,
                        "ids": None if among is None else [int(i) for i in among],
                        "limit": limit,
                        **params,
                    },
                ).fetchall()
                found.update(row[0] for row in rows)
        return sorted(found, reverse=True)[:limit]

    def thread_followers(
        self,
        scope: str,
        ids: Collection[int],
        as_of: int | None,
        depth: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> dict[int, list[int]]:
        if not ids or depth < 1:
            return {}
        where, params = filter_condition(filters, "n", "postgres")
        # Every row within an as-of bound has its thread key within it too (undated rows fail
        # the bound anyway), so the bound also ends the index walk.
        date_condition = (
            " AND n.event_key <= %(as_of)s AND coalesce(n.event_key, n.ingested_key) <= %(as_of)s"
            if as_of is not None
            else ""
        )
        with self._connection() as conn:
            rows = conn.execute(
                # One short index walk on records_thread per row that has a thread, from the
                # row's own place, stopping after ``depth`` eligible rows.
                f"""SELECT c.id, f.id, f.key FROM records c CROSS JOIN LATERAL (
                        SELECT n.id, coalesce(n.event_key, n.ingested_key) AS key
                        FROM records n
                        WHERE n.scope = c.scope AND n.thread = c.thread
                          AND n.state = 'active'{date_condition}{where}
                          AND (coalesce(n.event_key, n.ingested_key), n.id)
                              > (coalesce(c.event_key, c.ingested_key), c.id)
                        ORDER BY coalesce(n.event_key, n.ingested_key), n.id
                        LIMIT %(depth)s) f
                    WHERE c.scope = %(scope)s AND c.id = ANY(%(ids)s::bigint[])
                      AND c.thread IS NOT NULL""",
                {
                    "scope": scope,
                    "ids": [int(i) for i in ids],
                    "as_of": as_of,
                    "depth": depth,
                    **params,
                },
            ).fetchall()
        return followers_in_order(rows)

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, tuple[int | None, int]]:
        if not ids:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT id, event_key, ingested_key FROM records
                   WHERE scope = %s AND id = ANY(%s::bigint[])""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return {row: (event, ingested) for row, event, ingested in rows}

    def latest_unmatched(
        self,
        scope: str,
        exclude: Collection[int],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if limit <= 0:
            return []
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "records", "postgres")
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT id FROM records
                    WHERE scope = %(scope)s AND state = 'active'{date_condition}{where}
                      AND NOT (id = ANY(%(exclude)s::bigint[]))
                    ORDER BY id DESC LIMIT %(limit)s""",
                {
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                    "exclude": [int(i) for i in exclude],
                    **params,
                },
            ).fetchall()
        return [row[0] for row in rows]
