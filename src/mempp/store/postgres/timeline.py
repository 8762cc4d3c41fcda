"""The PostgreSQL engine's timeline lookups (mempp.timeline): a subject's linked rows and the
rows that entered between two dates. Every state counts: history shows what was there."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC

from mempp.store.base import first_reasons
from mempp.store.postgres.records import _RecordsMixin


class _TimelineMixin(_RecordsMixin):
    def linked(self, scope: str, ids: Collection[int], as_of: int | None) -> dict[int, str]:
        if not ids:
            return {}
        date_condition = "" if as_of is None else " AND n.event_key <= %(as_of)s"
        params = {"ids": [int(i) for i in ids], "scope": scope, "as_of": as_of}
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT n.id, 'successor', 0 FROM records c JOIN records n
                        ON n.scope = c.scope AND n.id = c.superseded_by
                    WHERE c.scope = %(scope)s AND c.id = ANY(%(ids)s::bigint[]){date_condition}
                    UNION ALL
                    SELECT n.id, 'superseded', 1 FROM records n
                    WHERE n.scope = %(scope)s
                      AND n.superseded_by = ANY(%(ids)s::bigint[]){date_condition}
                    UNION ALL
                    SELECT n.id, 'thread', 2 FROM records c JOIN records n
                        ON n.scope = c.scope AND n.thread = c.thread
                    WHERE c.scope = %(scope)s AND c.id = ANY(%(ids)s::bigint[])
                      AND c.thread IS NOT NULL{date_condition}
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
            known += " AND ingested_key >= %(known_since)s"
        if known_until is not None:
            known += " AND ingested_key <= %(known_until)s"
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT id FROM records
                    WHERE scope = %(scope)s AND event_key >= %(since)s
                      AND event_key <= %(until)s{known}
                    ORDER BY event_key, id LIMIT %(limit)s""",
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
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT id FROM records
                   WHERE scope = %s AND superseded_by = ANY(%s::bigint[]) ORDER BY id""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return [row[0] for row in rows]

    def state_log(self, scope: str, ids: Collection[int]) -> list[tuple[int, str, int | None, str]]:
        if not ids:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT c.record_id, c.new_state, c.new_superseded_by, r.started_at
                   FROM consolidation_changes c
                   JOIN consolidation_runs r ON r.scope = c.scope AND r.id = c.run_id
                   WHERE c.scope = %s AND NOT r.dry_run AND c.record_id = ANY(%s::bigint[])
                   ORDER BY c.id""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return [(int(a), b, c, d.astimezone(UTC).isoformat()) for a, b, c, d in rows]
