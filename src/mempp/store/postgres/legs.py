"""The PostgreSQL engine's retrieval legs: lexical (BM25 from the in-RAM replica of
``mempp.store.postgres.bm25``, or ``ts_rank_cd``; query words analysed as SQLite's FTS5 reads
them, ``mempp.index.analysis``), dated spans, thread followers, recency keys
and the latest unmatched rows; the tag leg is in ``tags``, the vector leg in ``nearest``."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.index.analysis import analyze, first_per_key
from mempp.search.query import LexicalQuery, storable_query
from mempp.store.base import followers_in_order
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.bm25 import Postings, ScopeReplica
from mempp.store.postgres.nearest import _NearestMixin
from mempp.store.postgres.tags import _TagLegMixin

# Terms per round trip when a BM25 replica reads postings.
_POSTINGS_CHUNK = 2000
# PostgreSQL's longest lexeme, in bytes.
_LEXEME_MAX_BYTES = 2047
# Query words whose tokens are remembered; the cache is emptied when it is full.
_QUERY_CACHE = 50_000
_query_cache: dict[str, tuple[str, ...]] = {}


def _query_tokens(items: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The tokens of each query term or phrase by the analysis both engines share (FTS5's,
    ``mempp.index.analysis``), cached across searches."""
    cache = _query_cache
    # Read the cache once: another thread may clear it at any moment.
    found = {item: cache.get(item) for item in dict.fromkeys(items)}
    missing = [item for item, tokens in found.items() if tokens is None]
    if missing:
        fetched = {item: tuple(t) for item, t in zip(missing, analyze(missing), strict=True)}
        if len(cache) > _QUERY_CACHE:  # bounded; a dict clear is atomic
            cache.clear()
        cache.update(fetched)
        found.update(fetched)
    return {item: tokens or () for item, tokens in found.items()}


def _fts_phrases(query: LexicalQuery) -> tuple[bool, list[tuple[str, ...]]] | None:
    """Whether the query is conjunctive, and its FTS5 phrases, each the tokens the shared
    analysis gives it, as SQLite's FTS5 reads its MATCH expression: every term, and every
    phrase in disjunctive mode, is one phrase. None when nothing can match."""
    query = storable_query(query)
    conjunctive = query.mode == "conjunctive"
    phrases = () if conjunctive else query.phrases
    if not query.terms and not phrases:
        return None  # (a disjunctive query of phrases alone matches them, as in FTS5's OR)
    tokens = _query_tokens([*query.terms, *phrases])
    terms = query.terms
    if query.unique_stems:  # the first term (and phrase) of each token sequence
        terms = first_per_key(terms, [tokens[t] for t in terms])
        phrases = first_per_key(phrases, [tokens[p] for p in phrases])
    sequences = [tokens[item] for item in (*terms, *phrases)]
    if conjunctive and any(not found for found in sequences):
        return None  # FTS5: a phrase with no token matches no row
    sequences = [found for found in sequences if found]
    return (conjunctive, sequences) if sequences else None


def _tsquery(tokens: Sequence[str]) -> str:
    """A ``tsquery`` of one FTS5 phrase: its tokens as quoted lexemes, in turn (``<->``)."""
    return " <-> ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in tokens)


class _LegsMixin(_TagLegMixin, _NearestMixin):
    """The retrieval legs, and the read-time lookups beside them (threads, recency)."""

    def warm(self, scope: str) -> None:
        # The scope's BM25, tag and vector replicas are built here.
        self._caught_up(scope)
        self._tags_caught_up(scope)
        dim = self._bound_dim()
        if self.vector_replica and dim is not None:
            self._vectors_caught_up(scope, dim)
        # The context leg's int8 copy too (no-op while the index is off): PostgreSQL keeps
        # none between processes, so a server pays its read here, not on its first question.
        self._context_index()  # type: ignore[attr-defined]

    def lexical(
        self,
        scope: str,
        query: LexicalQuery,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        prepared = None if limit <= 0 else _fts_phrases(query)
        if prepared is None:
            return []
        conjunctive, sequences = prepared
        if query.ranking == "bm25":
            return self._lexical_bm25(scope, sequences, conjunctive, as_of, limit, filters)
        # (``query.unique_stems`` changes nothing here: ts_rank_cd counts a lexeme the query
        # repeats once.) A tsvector holds no lexeme over 2,047 bytes (nor does a tsquery):
        # such a token is found by no row's tsvector.
        held = [all(len(t.encode()) <= _LEXEME_MAX_BYTES for t in found) for found in sequences]
        if conjunctive and not all(held):
            return []
        sequences = [found for found, ok in zip(sequences, held, strict=True) if ok]
        if not sequences:
            return []
        tsquery = (" & " if conjunctive else " | ").join(_tsquery(found) for found in sequences)
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "r", "postgres")
        statement = f"""SELECT r.id FROM records r, (SELECT %(q)s::tsquery AS q) query
               WHERE r.tsv @@ query.q AND r.scope = %(scope)s AND r.state = 'active'
                 {date_condition}{where}
               ORDER BY ts_rank_cd(r.tsv, query.q) DESC, r.id DESC LIMIT %(limit)s"""
        params.update(q=tsquery, scope=scope, as_of=as_of, limit=limit)
        with self._connection() as conn:
            return [row[0] for row in conn.execute(statement, params)]

    def bm25_scores(self, scope: str, query: LexicalQuery) -> dict[int, float]:
        """The BM25 of every row of the scope (any state or date) the query matches, as the
        lexical leg ranks them under ``lexical_rank="bm25"``: for diagnosis, and for the
        conformance tests, which compare it with SQLite's FTS5 ``bm25()``."""
        prepared = _fts_phrases(query)
        if prepared is None:
            return {}
        conjunctive, sequences = prepared
        replica = self._caught_up(scope)
        lexemes = [found[0] for found in sequences if len(found) == 1]
        longer = [found for found in sequences if len(found) > 1]
        phrase_rows = self._phrase_rows(scope, replica, longer)
        ids, scores = replica.scored(lexemes, conjunctive, phrase_rows)
        return dict(zip(ids.tolist(), scores.tolist(), strict=True))

    def _lexical_bm25(
        self,
        scope: str,
        sequences: list[tuple[str, ...]],
        conjunctive: bool,
        as_of: int | None,
        limit: int,
        filters: Filters,
    ) -> list[int]:
        """BM25 over the scope's in-RAM replica (``mempp.store.postgres.bm25``); PostgreSQL
        then keeps the active rows, asked again for more in the rare case too few are.
        ``sequences``: the query's FTS5 phrases, each its tokens; one token is a term."""
        lexemes = [found[0] for found in sequences if len(found) == 1]
        longer = [found for found in sequences if len(found) > 1]
        replica = self._caught_up(scope)
        phrase_rows = self._phrase_rows(scope, replica, longer)
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

    def _rows_after(self, scope: str, after: int) -> tuple[np.ndarray, np.ndarray, Postings]:
        """Ids, event keys and postings (with positions) of the scope's rows with ids above
        ``after``, read in one snapshot, from each row's ``terms`` (schema 10)."""
        with self._connection() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            ids, keys = self._ids_and_keys_after(conn, scope, after)
            if len(ids) == 0:
                return ids, keys, {}
            # Each term's ids, frequencies and positions as text parsed by numpy, streamed
            # from a server-side cursor: a list of Python ints per posting, fetched all at
            # once, cost ten times the replica's own arrays at its peak.
            postings: Postings = {}
            with conn.cursor(name="mempp_bm25_postings") as cursor:
                cursor.itersize = _POSTINGS_CHUNK
                cursor.execute(
                    """SELECT p.term, string_agg(p.id::text, ' ' ORDER BY p.id),
                              string_agg(p.tf::text, ' ' ORDER BY p.id),
                              string_agg(p.positions, ' ' ORDER BY p.id)
                       FROM (SELECT r.id, u.term, count(*) AS tf,
                                    string_agg(u.n::text, ' ' ORDER BY u.n) AS positions
                             FROM records r,
                                  unnest(string_to_array(r.terms, ' '))
                                      WITH ORDINALITY AS u(term, n)
                             WHERE r.scope = %s AND r.id > %s
                             GROUP BY r.id, u.term) p
                       GROUP BY p.term""",
                    (scope, after),
                )
                for term, row_ids, tf, positions in cursor:
                    postings[term] = (
                        np.fromstring(row_ids, dtype=np.int64, sep=" "),
                        np.fromstring(tf, dtype=np.float64, sep=" "),
                        np.fromstring(positions, dtype=np.int32, sep=" "),
                    )
        return ids, keys, postings

    def _phrase_rows(
        self, scope: str, replica: ScopeReplica, phrases: list[tuple[str, ...]]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per phrase (its tokens): the ids of the scope's rows where the tokens stand in
        turn, and how often they do, from the replica's positions
        (``benchmarks/bench_read_path.py`` swaps in ``_phrase_rows_sql``)."""
        return replica.phrase_rows(phrases)

    def _phrase_rows_sql(
        self, scope: str, phrases: list[tuple[str, ...]], newest: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The same as ``_phrase_rows`` for the rows up to ``newest``, in SQL from the rows'
        ``terms`` (the GIN index finds the rows holding every token of a phrase): the
        reference ``ScopeReplica.phrase_rows`` is tested against (``tests/test_pg_phrases.py``)
        and measured against (``benchmarks/bench_read_path.py``)."""
        if not phrases:
            return []
        with self._connection() as conn:
            # An occurrence is a place in " terms " where the tokens stand between spaces;
            # the lookahead matches nothing, so overlapping ones ("great great" in "great
            # great great") count apart, as FTS5 counts them.
            rows = conn.execute(
                """SELECT p.n, r.id, c.occurrences
                   FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS p(pattern, q, n)
                   JOIN LATERAL (
                       SELECT id, terms FROM records
                       WHERE scope = %s AND id <= %s AND tsv @@ p.q::tsquery) r ON true
                   CROSS JOIN LATERAL (
                       SELECT count(*) AS occurrences
                       FROM regexp_matches(' ' || r.terms || ' ', p.pattern, 'g')) c
                   WHERE c.occurrences > 0""",
                (
                    ["(?= " + " ".join(re.escape(t) for t in found) + " )" for found in phrases],
                    [" & ".join(_tsquery((token,)) for token in found) for found in phrases],
                    scope,
                    newest,
                ),
            ).fetchall()
        found: list[tuple[list[int], list[float]]] = [([], []) for _ in phrases]
        for n, record_id, occurrences in rows:
            found[n - 1][0].append(record_id)
            found[n - 1][1].append(float(occurrences))
        return [
            (np.asarray(ids, dtype=np.int64), np.asarray(tf, dtype=np.float64)) for ids, tf in found
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
