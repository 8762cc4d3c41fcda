"""The SQLite engine's timeline lookups (mempp.timeline): a subject's linked rows and the rows
that entered between two dates. Every state counts: history shows what was there."""

from __future__ import annotations

import json
from collections.abc import Collection

from mempp.store.base import first_reasons
from mempp.store.sqlite.records import _RecordsMixin


class _TimelineMixin(_RecordsMixin):
    def linked(self, scope: str, ids: Collection[int], as_of: int | None) -> dict[int, str]:
        if not ids:
            return {}
        date_condition = "" if as_of is None else " AND n.event_key <= :as_of"
        params = {"ids": json.dumps([int(i) for i in ids]), "scope": scope, "as_of": as_of}
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT n.id, 'successor', 0 FROM records c JOIN records n
                        ON n.id = c.superseded_by
                    WHERE c.id IN (SELECT value FROM json_each(:ids)) AND +c.scope = :scope
                      AND n.scope = :scope{date_condition}
                    UNION ALL
                    SELECT n.id, 'superseded', 1 FROM records n
                    WHERE n.superseded_by IN (SELECT value FROM json_each(:ids))
                      AND n.scope = :scope{date_condition}
                    UNION ALL
                    SELECT n.id, 'thread', 2 FROM records c JOIN records n
                        ON n.scope = c.scope AND n.thread = c.thread
                    WHERE c.id IN (SELECT value FROM json_each(:ids)) AND +c.scope = :scope
                      AND c.thread IS NOT NULL AND n.thread IS NOT NULL{date_condition}
                    ORDER BY 3""",
                params,
            ).fetchall()
        return first_reasons(rows, ids)

    def entered(
        self,
        scope: str,
        since: int,
        until: int,
        known_since: int | None,
        known_until: int | None,
        limit: int,
    ) -> list[int]:
        known = ""
        if known_since is not None:
            known += " AND ingested_key >= :known_since"
        if known_until is not None:
            known += " AND ingested_key <= :known_until"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT id FROM records
                    WHERE scope = :scope AND event_key >= :since AND event_key <= :until{known}
                    ORDER BY event_key, id LIMIT :limit""",
                {
                    "scope": scope,
                    "since": since,
                    "until": until,
                    "known_since": known_since,
                    "known_until": known_until,
                    "limit": limit,
                },
            ).fetchall()
        return [row[0] for row in rows]

    def superseded_by_any(self, scope: str, ids: Collection[int]) -> list[int]:
        if not ids:
            return []
        with self._lock:
            rows = self._conn.execute(
                """SELECT id FROM records
                   WHERE superseded_by IN (SELECT value FROM json_each(?)) AND scope = ?
                   ORDER BY id""",
                (json.dumps([int(i) for i in ids]), scope),
            ).fetchall()
        return [row[0] for row in rows]

    def state_log(self, scope: str, ids: Collection[int]) -> list[tuple[int, str, int | None, str]]:
        if not ids:
            return []
        with self._lock:
            rows = self._conn.execute(
                """SELECT c.record_id, c.new_state, c.new_superseded_by, r.started_at
                   FROM consolidation_changes c JOIN consolidation_runs r ON r.id = c.run_id
                   WHERE r.scope = ? AND NOT r.dry_run
                     AND c.record_id IN (SELECT value FROM json_each(?))
                   ORDER BY c.id""",
                (scope, json.dumps([int(i) for i in ids])),
            ).fetchall()
        return [(int(a), b, c, d) for a, b, c, d in rows]
