"""The PostgreSQL engine's tag leg: each scope's tag postings in RAM (``mempp.index.tags``).

In SQL the leg joins ``record_tags`` to ``records`` and groups: every posting of every asked
label is visited and its row looked up, and a frequent author's label holds a sixth of a
scope (p99 215 ms at 100k rows, docs/scaling.md). Here a scope's postings and its rows' event
keys are held in RAM, caught up like the BM25 replica (``replicas``): the ranking touches only
what decides it (``mempp.index.tags``) with the as-of bound applied from the keys, and
PostgreSQL keeps the active rows of the result that meet the search's filters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.search.query import UNSTORABLE
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.replica_reads import _ReplicasMixin
from mempp.store.postgres.replicas import ScopeCache, ScopeTags

# Rows held by the tag replicas of one store, all scopes together: about 0.5 GB at 16 bytes a
# row and 8 a label of a row.
TAGS_MAX_ROWS = 20_000_000


class _TagLegMixin(_ReplicasMixin):
    """``tagged``, from the scope's tag replica."""

    tags_max_rows: int = TAGS_MAX_ROWS
    _tag_replicas: ScopeCache[ScopeTags]

    def tagged(
        self,
        scope: str,
        labels: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if not labels or limit <= 0:
            return []
        stored = [UNSTORABLE.sub("", label) for label in labels]
        replica = self._tags_caught_up(scope)
        return self._kept_in_order(
            scope, lambda n: replica.ranked(stored, as_of, n), limit, filters
        )

    def _tagged_sql(
        self,
        scope: str,
        labels: Sequence[str],
        as_of: int | None,
        limit: int,
        filters: Filters,
    ) -> list[int]:
        """The same ranking in SQL, as the leg ran before its replica: the reference the
        replica is tested against (``tests/test_tag_index.py``) and measured against
        (``benchmarks/bench_read_path.py``), like SQLite's ``_tagged_sql``."""
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        where, params = filter_condition(filters, "r", "postgres")
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM record_tags t
                    JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %(scope)s AND t.label = ANY(%(labels)s::text[])
                      AND r.state = 'active'{date_condition}{where}
                    GROUP BY r.id ORDER BY count(*) DESC, r.id DESC LIMIT %(limit)s""",
                {
                    "scope": scope,
                    "labels": [UNSTORABLE.sub("", label) for label in labels],
                    "as_of": as_of,
                    "limit": limit,
                    **params,
                },
            ).fetchall()
        return [row[0] for row in rows]

    def _tags_caught_up(self, scope: str) -> ScopeTags:
        replica = self._tag_replicas.use(scope, self._erasures(scope))
        with replica.lock:  # one catch-up at a time; ranking may run beside another one
            replica.catch_up(lambda after: self._tag_rows_after(scope, after))
        self._tag_replicas.evict(scope, self.tags_max_rows)
        return replica

    def _tag_rows_after(
        self, scope: str, after: int
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Ids, event keys and labels of the scope's rows with ids above ``after``, read in
        one snapshot."""
        with self._connection() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            ids, keys = self._ids_and_keys_after(conn, scope, after)
            if len(ids) == 0:
                return ids, keys, {}
            # Each label's ids as text parsed by numpy (see the BM25 replica's postings).
            groups = conn.execute(
                """SELECT label, string_agg(record_id::text, ' ' ORDER BY record_id)
                   FROM record_tags WHERE scope = %s AND record_id > %s
                   GROUP BY label""",
                (scope, after),
            ).fetchall()
        labelled = {
            label: np.fromstring(ids_text, dtype=np.int64, sep=" ") for label, ids_text in groups
        }
        return ids, keys, labelled
