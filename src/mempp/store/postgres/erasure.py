"""The PostgreSQL engine's erasure (``Memory.redact``): the one sanctioned change of content.

The triggers of migration 4 let a record's content change, and its tag rows go, only while a
``redactions`` row for it is pending, and only to the erased values; this module writes that
row, erases, and settles it, in one transaction under the scope lock. The old row versions
stay in the heap, TOAST, indexes and WAL until VACUUM FULL and WAL recycling: docs/time.md.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mempp.errors import InvalidInput, RecordNotFound
from mempp.store.base import StateChange
from mempp.store.postgres.changelog import _ChangeLogMixin
from mempp.store.postgres.context import drop_contexts_of, remake_contexts

if TYPE_CHECKING:
    import psycopg


class _ErasureMixin(_ChangeLogMixin):
    """Redaction: erase content, keep a tombstone, log it."""

    def redact(
        self, scope: str, record_id: int, *, reason: str, actor: str | None
    ) -> tuple[int, list[int]]:
        with self._connection() as conn:
            self._lock_scope(conn, scope)
            erased = self._erasable(conn, scope, record_id)
            at = datetime.now(UTC)
            settings = {"operation": "redact", "reason": reason, "actor": actor}
            run_id = conn.execute(
                """INSERT INTO consolidation_runs
                       (scope, kind, dry_run, started_at, finished_at, settings, counts)
                   VALUES (%s, 'consolidate', false, %s, %s, %s::jsonb, %s::jsonb)
                   RETURNING id""",
                (
                    scope,
                    at,
                    at,
                    json.dumps(settings, sort_keys=True),
                    json.dumps({"redacted": len(erased)}),
                ),
            ).fetchone()[0]
            states = conn.execute(
                """SELECT id, state, superseded_by FROM records
                   WHERE scope = %s AND id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE""",
                (scope, erased),
            ).fetchall()
            self._log_changes(
                conn,
                scope,
                run_id,
                [
                    (0, "redact", StateChange(row, state, by, "archived", by), None)
                    for row, state, by in states
                ],
            )
            params: dict[str, Any] = {"scope": scope, "ids": erased}
            conn.execute(
                """INSERT INTO redactions (scope, record_id, run_id, redacted_at, reason, actor)
                   SELECT %(scope)s, id, %(run)s, %(at)s, %(reason)s, %(actor)s
                   FROM unnest(%(ids)s::bigint[]) AS id""",
                {**params, "run": run_id, "at": at, "reason": reason, "actor": actor},
            )
            conn.execute(
                "DELETE FROM record_tags WHERE scope = %(scope)s AND record_id = ANY(%(ids)s)",
                params,
            )
            conn.execute(
                "DELETE FROM graph_triples WHERE scope = %(scope)s AND record_id = ANY(%(ids)s)",
                params,
            )
            # A re-encoding under way staged a vector of the text: it goes too.
            conn.execute("DELETE FROM reembed_vectors WHERE record_id = ANY(%(ids)s)", params)
            # Before the rows leave their threads: the contexts that read them go.
            remade = drop_contexts_of(conn, scope, erased)
            conn.execute(
                """UPDATE records SET text = '', terms = '', text_hash = '\\x'::bytea,
                       author = NULL, tags = '{}', source = NULL, thread = NULL, metadata = NULL,
                       state = 'archived',
                       embedding = array_fill(0, ARRAY[vector_dims(embedding)])::vector
                   WHERE scope = %(scope)s AND id = ANY(%(ids)s)""",
                params,
            )
            conn.execute(
                """UPDATE redactions SET pending = false
                   WHERE scope = %(scope)s AND record_id = ANY(%(ids)s)""",
                params,
            )
            remake_contexts(conn, remade)
        # The scope's replicas in this process still hold the erased words, labels and
        # vectors.
        self._replicas.drop(scope)
        self._tag_replicas.drop(scope)
        self._vector_replicas.drop(scope)
        return run_id, erased

    @staticmethod
    def _erasable(conn: psycopg.Connection[Any], scope: str, record_id: int) -> list[int]:
        """The row and every merged row made from it (and from those), none yet redacted."""
        row = conn.execute(
            """SELECT r.id, x.record_id FROM records r
               LEFT JOIN redactions x ON x.scope = r.scope AND x.record_id = r.id
               WHERE r.scope = %s AND r.id = %s""",
            (scope, record_id),
        ).fetchone()
        if row is None:
            raise RecordNotFound(f"no record {record_id} in scope {scope!r}")
        if row[1] is not None:
            raise InvalidInput(f"record {record_id} is already redacted")
        found = [record_id]
        frontier = [record_id]
        while frontier:
            merged = conn.execute(
                """SELECT DISTINCT c.merged_id FROM consolidation_changes c
                   WHERE c.scope = %s AND c.record_id = ANY(%s::bigint[])
                     AND c.merged_id IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM redactions x
                                     WHERE x.scope = c.scope AND x.record_id = c.merged_id)""",
                (scope, frontier),
            ).fetchall()
            frontier = [m for (m,) in merged if m not in found]
            found += frontier
        return found
