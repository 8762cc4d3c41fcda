"""The PostgreSQL engine's vector leg: an exact search from the scope's in-RAM replica.

pgvector's HNSW walk, the only fast way in SQL past a few thousand rows, is approximate, and
under an as-of bound or on vectors without clusters far from exact: recall@50 0.125 at 100k
rows and 0.020 at 1M on the benchmark corpus (docs/scaling.md). Here each scope's vectors are
held as the embedded engine holds them (``mempp.index.vectors.ExactVectorIndex``: int8 in date
order, the candidates rescored with float32 rows read back from PostgreSQL, exact by its
rounding bound), caught up before each search like the other replicas (``replicas``).
PostgreSQL keeps the active rows of the ranking that meet the search's filters, asked again
for more while too few do. Under a narrow filter, and under an author filter always (an
index holds those ids, ``records_author_active``), it gives the ids of the active rows the
filters keep and the replica ranks among those; when they are at most
``exact_scan_max_rows``, an exact scan in SQL ranks them instead.

The price: 0.44 kB of RAM a row at 384-d in each searching process (and 1.5 kB more in a
scope of up to ``vectors_float32_rows`` rows, whose float32 rows are held too, so that its
rescoring needs no round trip), a binary COPY of the scope's vectors on first use (14 s at
1M rows), and at 1M a leg 20 ms slower at p50 than the HNSW walk; at 100k it is faster
(docs/scaling.md). With ``vector_replica`` off the leg is what it was: the exact
SQL scan up to ``exact_scan_max_rows`` eligible rows, the HNSW walk above.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.errors import EncoderMismatch
from mempp.filters import NO_FILTERS, Filters
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.replica_reads import _ReplicasMixin
from mempp.store.postgres.replicas import ScopeCache, ScopeVectors
from mempp.store.postgres.schema import HNSW_MAX_DIM

if TYPE_CHECKING:
    import psycopg

# hnsw.ef_search accepts 1..1000.
EF_SEARCH_CEILING = 1000
# Rows held by the vector replicas of one store, all scopes together: about 2.2 GB at 384-d
# (0.44 kB a row: the int8 codes and, per row, id, event key, scale and places).
VECTORS_MAX_ROWS = 5_000_000
# A filtered search either asks the replica for more of its best rows until enough pass (a
# filter keeping a share s of N rows: about 2 * limit / s rows rescored, ~35 us each when read
# from PostgreSQL) or reads the ids the filters keep (~8 us a row kept: s * N * 8 us), both
# measured at 1M rows. The rounds cost less while s > sqrt(70 * limit / (8 * N)), 3% at 1M
# rows and limit 100, so they may ask for up to 2 * limit over that share, this times
# sqrt(N * limit): 6,800 rows at 1M, 2,150 at 100k.
_ROUNDS_SCALE = 0.68
# A scope of up to this many rows also holds its float32 vectors (1.5 kB a row at 384-d, at
# most 300 MB): its rescoring needs no round trip to PostgreSQL.
VECTORS_FLOAT32_ROWS = 200_000


def _kept_ids_from_an_index(filters: Filters) -> bool:
    """Whether records_author_active alone answers which ids the filters keep: an author,
    with or without date bounds (its included columns). Such ids cost ~0.3 us each (50 ms for
    170k at 1M rows) against ~8 us for a row read from the heap, so reading them first beats
    any round of checks (docs/scaling.md)."""
    return filters.author is not None and not (filters.tags or filters.thread or filters.source)


class _NearestMixin(_ReplicasMixin):
    """``nearest``, from the scope's vector replica or in SQL."""

    vector_replica: bool = True
    vectors_max_rows: int = VECTORS_MAX_ROWS
    vectors_float32_rows: int = VECTORS_FLOAT32_ROWS
    exact_scan_max_rows: int = 10_000
    hnsw_ef_search: int = 100
    # Extra HNSW candidates fetched past ``limit`` so equal distances at the cut are ordered
    # by id like every other ranking.
    tie_margin: int = 16
    _vector_replicas: ScopeCache[ScopeVectors]

    def nearest(
        self,
        scope: str,
        vector: np.ndarray,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if limit <= 0:
            return []
        dim = self._bound_dim()
        if dim is None:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != dim:
            raise EncoderMismatch(
                f"{self.location} holds {dim}-d vectors; the query vector has {query.shape[0]}"
            )
        if self.vector_replica and filters.is_empty:
            replica = self._vectors_caught_up(scope, dim)
            return self._kept_in_order(
                scope, lambda n: replica.ranked(query, as_of, n), limit, filters
            )
        # The HNSW path orders by the index's own expression (the cast), so the planner can
        # walk the index; the exact path orders by the bare column, which no index matches,
        # so it always computes every eligible distance (in parallel workers when the
        # planner wants). Both give the same numbers. ``dim`` is an int from mempp_meta.
        distance = f"embedding::vector({int(dim)}) <=> %(q)s"
        # The filters join the date condition: both engines apply them before the ranking.
        where, filter_params = filter_condition(filters, "records", "postgres")
        date_condition = (" AND event_key <= %(as_of)s" if as_of is not None else "") + where
        params = {"scope": scope, "as_of": as_of, "q": query, "limit": limit, **filter_params}
        with self._connection() as conn:
            # Counting stops at the threshold, so this costs at most that many index entries.
            eligible = conn.execute(
                f"""SELECT count(*) FROM (
                        SELECT 1 FROM records
                        WHERE scope = %(scope)s AND state = 'active'{date_condition}
                        LIMIT %(cap)s) eligible""",
                {**params, "cap": self.exact_scan_max_rows + 1},
            ).fetchone()[0]
            if eligible == 0:
                return []
            if eligible <= self.exact_scan_max_rows:
                return self._nearest_exact(conn, date_condition, params)
            if not self.vector_replica:
                if dim <= HNSW_MAX_DIM:
                    found = self._nearest_hnsw(conn, distance, date_condition, params)
                    # The iterative scan gives up after hnsw.max_scan_tuples; when it comes
                    # back short, an exact scan keeps the promise that all slots go to
                    # eligible rows.
                    if len(found) >= limit:
                        return found
                return self._nearest_exact(conn, date_condition, params)
        replica = self._vectors_caught_up(scope, dim)
        if not _kept_ids_from_an_index(filters):
            # Under a broad filter a few rounds of the replica's best rows hold enough that
            # pass; under a narrow one the replica ranks among the ids the filters keep (see
            # _ROUNDS_SCALE for the choice).
            found = self._kept_within(
                scope,
                lambda n: replica.ranked(query, as_of, n),
                limit,
                filters,
                int(_ROUNDS_SCALE * math.sqrt(len(replica) * limit)),
            )
            if found is not None:
                return found
        with self._connection() as conn:
            kept = conn.execute(self.kept_ids_sql(date_condition), params).fetchone()[0]
        allowed = np.fromstring(kept, dtype=np.int64, sep=" ") if kept else np.empty(0, np.int64)
        return replica.ranked(query, as_of, limit, allowed).tolist()

    def _vectors_caught_up(self, scope: str, dim: int) -> ScopeVectors:
        replica = self._vector_replicas.use(scope, self._erasures(scope))
        with replica.lock:  # one catch-up at a time; ranking may run beside another one
            replica.catch_up(
                lambda after: self._vector_rows_after(scope, after, dim),
                dim,
                lambda ids: self._unit_rows(scope, ids),
                self.vectors_float32_rows,
            )
        self._vector_replicas.evict(scope, self.vectors_max_rows)
        return replica

    @staticmethod
    def kept_ids_sql(date_condition: str) -> str:
        """The ids the filters keep, ascending, as one text value for numpy to parse (public
        so tests can EXPLAIN it)."""
        return f"""SELECT string_agg(id::text, ' ' ORDER BY id) FROM records
                   WHERE scope = %(scope)s AND state = 'active'{date_condition}"""

    @staticmethod
    def exact_sql(date_condition: str) -> str:
        """The exact strategy's statement (public so tests can EXPLAIN it)."""
        return f"""SELECT id FROM records
                   WHERE scope = %(scope)s AND state = 'active'{date_condition}
                   ORDER BY embedding <=> %(q)s, id DESC LIMIT %(limit)s"""

    @staticmethod
    def hnsw_sql(distance: str, date_condition: str) -> str:
        """The HNSW strategy's statement (public so tests can EXPLAIN it)."""
        # The inner ORDER BY is the index's own expression, so it becomes an HNSW index scan
        # with the scope as its filter; the outer sort only orders equal distances by id.
        return f"""SELECT id FROM (
                       SELECT id, {distance} AS distance FROM records
                       WHERE scope = %(scope)s AND state = 'active'{date_condition}
                       ORDER BY {distance} LIMIT %(fetch)s) candidates
                   ORDER BY distance, id DESC LIMIT %(limit)s"""

    def _nearest_exact(
        self, conn: psycopg.Connection[Any], date_condition: str, params: dict[str, Any]
    ) -> list[int]:
        rows = conn.execute(self.exact_sql(date_condition), params)
        return [row[0] for row in rows]

    def _nearest_hnsw(
        self,
        conn: psycopg.Connection[Any],
        distance: str,
        date_condition: str,
        params: dict[str, Any],
    ) -> list[int]:
        fetch = params["limit"] + self.tie_margin
        ef_search = min(EF_SEARCH_CEILING, max(self.hnsw_ef_search, fetch))
        # strict_order: results stay in exact distance order while the scan keeps going
        # past filtered-out rows, so the WHERE clause acts before the LIMIT.
        conn.execute(
            """SELECT set_config('hnsw.iterative_scan', 'strict_order', true),
                      set_config('hnsw.ef_search', %s, true)""",
            (str(ef_search),),
        )
        rows = conn.execute(self.hnsw_sql(distance, date_condition), {**params, "fetch": fetch})
        return [row[0] for row in rows]
