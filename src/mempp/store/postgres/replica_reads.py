"""Reading rows for the in-RAM replicas, and keeping the active rows of what they rank
(``mempp.store.postgres.replicas``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.filters import Filters
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.records import _RecordsMixin
from mempp.store.postgres.replicas import UNDATED

if TYPE_CHECKING:
    import psycopg


class _ReplicasMixin(_RecordsMixin):
    """Reading rows for a replica, and keeping the active rows of what it ranks."""

    @staticmethod
    def _ids_and_keys_after(
        conn: psycopg.Connection[Any], scope: str, after: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids (ascending) and event keys of the scope's rows with ids above ``after``."""
        rows = conn.execute(
            """SELECT id, coalesce(event_key, %s) FROM records
               WHERE scope = %s AND id > %s ORDER BY id""",
            (int(UNDATED), scope, after),
        ).fetchall()
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        keys = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        return ids, keys

    def _kept_in_order(
        self, scope: str, ranked: Callable[[int], np.ndarray], limit: int, filters: Filters
    ) -> list[int]:
        """The first ``limit`` active rows meeting ``filters`` of a replica's ranking
        (``ranked(n)``: its best ``n`` ids of any state), asked again for four times more in
        the rare case too few of them are."""
        want = limit
        while True:
            found = ranked(want)
            active = self._active_among(scope, found, filters)
            kept = [int(i) for i in found if int(i) in active]
            if len(kept) >= limit or len(found) < want:
                return kept[:limit]
            want *= 4

    def _active_among(self, scope: str, ids: np.ndarray, filters: Filters) -> set[int]:
        """The rows of ``ids`` that are active and meet the filters."""
        if len(ids) == 0:
            return set()
        where, params = filter_condition(filters, "r", "postgres")
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM records r
                    WHERE r.scope = %(scope)s AND r.id = ANY(%(ids)s)
                      AND r.state = 'active'{where}""",
                {"scope": scope, "ids": ids.tolist(), **params},
            ).fetchall()
        return {row[0] for row in rows}
