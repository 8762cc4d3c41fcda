"""The PostgreSQL engine's change log: consolidation runs, their groups and state changes
(compare-and-set under the scope lock, append-only), and undo."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.dates import now_key
from mempp.errors import InvalidInput, StoreError
from mempp.index.analysis import terms_of
from mempp.store.base import (
    ChangeRecord,
    GroupOutcome,
    GroupRecord,
    MergedRow,
    RunInfo,
    StateChange,
    StateConflict,
)
from mempp.store.context import Encode
from mempp.store.postgres.records import _INSERT, _as_float32, _RecordsMixin, _row_params
from mempp.store.undo_rules import (
    check_undoable,
    inverse_change,
    refuse_duplicates,
    refuse_erased,
    undo_counts,
)

if TYPE_CHECKING:
    import psycopg

_RUN_COLUMNS = (
    "id, scope, kind, dry_run, started_at, finished_at, settings, counts, undoes, undone_by"
)
_CHANGE_COLUMNS = (
    "run_id, group_no, label, record_id, old_state, old_superseded_by, new_state, "
    "new_superseded_by, merged_id"
)

# Compare-and-set of one row's state, one statement per change (pipelined by
# ``executemany``), so changes apply in order exactly as SQLite's loop applies them. Under
# READ COMMITTED a row another transaction changed meanwhile is re-read before the WHERE is
# re-checked, so a stale expectation updates nothing instead of overwriting.
_COMPARE_AND_SET = """
UPDATE records SET state = %(new_state)s, superseded_by = %(new_by)s
WHERE scope = %(scope)s AND id = %(id)s
  AND state = %(old_state)s AND superseded_by IS NOT DISTINCT FROM %(old_by)s
RETURNING id
"""

_LOG_CHANGE = """
INSERT INTO consolidation_changes (scope, run_id, group_no, label, record_id, old_state,
    old_superseded_by, new_state, new_superseded_by, merged_id)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def _iso(moment: datetime | None) -> str | None:
    """A timestamptz as the UTC ISO text the SQLite engine stores."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _row_to_run(row: Sequence[Any]) -> RunInfo:
    started = _iso(row[4])
    assert started is not None  # NOT NULL column
    return RunInfo(
        id=row[0],
        scope=row[1],
        kind=row[2],
        dry_run=row[3],
        started_at=started,
        finished_at=_iso(row[5]),
        settings=row[6] or {},
        counts=row[7],
        undoes=row[8],
        undone_by=row[9],
    )


def _row_to_change(row: Sequence[Any]) -> ChangeRecord:
    return ChangeRecord(
        row[0], row[1], row[2], StateChange(row[3], row[4], row[5], row[6], row[7]), row[8]
    )


def _json(value: Mapping[str, Any]) -> str:
    """A settings or counts object as JSON text, written as the SQLite engine writes it."""
    return json.dumps(dict(value), sort_keys=True)


class _ChangeLogMixin(_RecordsMixin):
    """Consolidation runs, their groups and logged state changes, and undo."""

    # -- consolidation (mempp.llm.consolidate) ---------------------------------------------
    def current_vectors(self, scope: str) -> tuple[np.ndarray, np.ndarray]:
        dim = self._bound_dim() or 0
        # Binary results: pgvector's binary loader copies the floats, where the text format
        # would parse a decimal string per component (a run reads every current vector).
        with self._connection() as conn, conn.cursor(binary=True) as cursor:
            rows = cursor.execute(
                """SELECT id, embedding FROM records
                   WHERE scope = %s AND state = 'active' AND superseded_by IS NULL
                   ORDER BY id""",
                (scope,),
            ).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if not rows:
            return ids, np.empty((0, dim), dtype=np.float32)
        return ids, np.stack([_as_float32(r[1]) for r in rows])

    def begin_run(
        self, scope: str, *, kind: str, dry_run: bool, settings: Mapping[str, Any]
    ) -> int:
        if kind not in ("consolidate", "undo"):
            raise InvalidInput(f"unknown run kind {kind!r}")
        with self._connection() as conn:
            return conn.execute(
                """INSERT INTO consolidation_runs (scope, kind, dry_run, started_at, settings)
                   VALUES (%s, %s, %s, %s, %s::jsonb) RETURNING id""",
                (scope, kind, bool(dry_run), datetime.now(UTC), _json(settings)),
            ).fetchone()[0]

    def record_group(
        self,
        scope: str,
        run_id: int,
        outcome: GroupOutcome,
        *,
        encode_context: Encode | None = None,
    ) -> int | None:
        if any(change.old_state is None for change in outcome.changes):
            raise ValueError("a group's changes name existing rows; merged rows are implicit")
        with self._connection() as conn:
            # Held until commit: the merged row's insert is ordered with every other insert
            # of the scope, and no other mempp writer moves these rows in between.
            self._lock_scope(conn, scope)
            self._run_row(conn, scope, run_id)
            self._compare_and_set(conn, scope, outcome.changes)
            merged_id = None
            if outcome.merged is not None:
                merged_id = self._insert_merged(conn, scope, outcome.merged)
                # Its context in this transaction, as any write's (store/context.py).
                self._write_contexts(conn, [merged_id], encode_context)
            conn.execute(
                """INSERT INTO consolidation_groups (scope, run_id, group_no, label, members,
                       detail) VALUES (%s, %s, %s, %s, %s::bigint[], %s)""",
                (
                    scope,
                    run_id,
                    outcome.group,
                    outcome.label,
                    [int(m) for m in outcome.members],
                    outcome.detail,
                ),
            )
            changes = list(outcome.changes)
            if merged_id is not None:
                changes.append(StateChange(merged_id, None, None, "active", None))
            self._log_changes(
                conn,
                scope,
                run_id,
                [(outcome.group, outcome.label, change, merged_id) for change in changes],
            )
            return merged_id

    def _run_row(
        self, conn: psycopg.Connection[Any], scope: str, run_id: int, *, lock: bool = False
    ) -> RunInfo:
        lock_clause = " FOR UPDATE" if lock else ""
        row = conn.execute(
            f"""SELECT {_RUN_COLUMNS} FROM consolidation_runs
                WHERE scope = %s AND id = %s{lock_clause}""",
            (scope, run_id),
        ).fetchone()
        if row is None:
            raise InvalidInput(f"no consolidation run {run_id} in scope {scope!r}")
        return _row_to_run(row)

    def _compare_and_set(
        self, conn: psycopg.Connection[Any], scope: str, changes: Sequence[StateChange]
    ) -> None:
        """Apply each change only where the row still has its expected state (the caller
        holds the transaction); raise ``StateConflict`` naming the rows that did not."""
        if not changes:
            return
        params = [
            {
                "scope": scope,
                "id": change.record_id,
                "old_state": change.old_state,
                "old_by": change.old_superseded_by,
                "new_state": change.new_state,
                "new_by": change.new_superseded_by,
            }
            for change in changes
        ]
        stale = []
        try:
            with conn.cursor() as cursor:
                cursor.executemany(_COMPARE_AND_SET, params, returning=True)
                for change in changes:
                    if cursor.fetchone() is None:
                        stale.append(change.record_id)
                    cursor.nextset()
        except self._psycopg.errors.UniqueViolation:
            # Making a row active while an active row of the same author holds its text:
            # the dedupe index refuses, as it does for set_state.
            raise StoreError(
                f"{self.location}: cannot make a row active while an active row of the same "
                "scope and author has the same text; nothing was changed"
            ) from None
        if stale:
            raise StateConflict(f"records {stale} changed since they were read", stale)

    def _insert_merged(self, conn: psycopg.Connection[Any], scope: str, merged: MergedRow) -> int:
        params = _row_params(
            scope,
            merged.document,
            merged.vector,
            merged.labels,
            datetime.now(UTC),
            now_key(),
            terms_of([merged.document.text])[0],
        )
        # The insert's own NOT EXISTS runs after the originals were archived in this
        # transaction, so only *other* active rows count as duplicates (as in SQLite).
        row = conn.execute(_INSERT, params).fetchone()
        if row is None:
            raise StateConflict("the merged text repeats an active row of the same author")
        return int(row[0])

    @staticmethod
    def _log_changes(
        conn: psycopg.Connection[Any],
        scope: str,
        run_id: int,
        entries: Sequence[tuple[int | None, str, StateChange, int | None]],
    ) -> None:
        """Log ``(group, label, change, merged_id)`` entries of a run, in order."""
        if not entries:
            return
        with conn.cursor() as cursor:
            cursor.executemany(
                _LOG_CHANGE,
                [
                    (
                        scope,
                        run_id,
                        group,
                        label,
                        c.record_id,
                        c.old_state,
                        c.old_superseded_by,
                        c.new_state,
                        c.new_superseded_by,
                        merged_id,
                    )
                    for group, label, c, merged_id in entries
                ],
            )

    def finish_run(self, scope: str, run_id: int, counts: Mapping[str, Any]) -> None:
        with self._connection() as conn:
            conn.execute(
                """UPDATE consolidation_runs SET finished_at = %s, counts = %s::jsonb
                   WHERE scope = %s AND id = %s""",
                (datetime.now(UTC), _json(counts), scope, run_id),
            )

    def runs(self, scope: str) -> list[RunInfo]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM consolidation_runs WHERE scope = %s ORDER BY id",
                (scope,),
            ).fetchall()
        return [_row_to_run(row) for row in rows]

    def run_groups(self, scope: str, run_id: int) -> list[GroupRecord]:
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT run_id, group_no, label, members, detail FROM consolidation_groups
                   WHERE scope = %s AND run_id = %s ORDER BY group_no""",
                (scope, run_id),
            ).fetchall()
        return [GroupRecord(r[0], r[1], r[2], tuple(r[3]), r[4]) for r in rows]

    def run_changes(self, scope: str, run_id: int) -> list[ChangeRecord]:
        with self._connection() as conn:
            return self._changes(conn, scope, run_id)

    @staticmethod
    def _changes(conn: psycopg.Connection[Any], scope: str, run_id: int) -> list[ChangeRecord]:
        rows = conn.execute(
            f"""SELECT {_CHANGE_COLUMNS} FROM consolidation_changes
                WHERE scope = %s AND run_id = %s ORDER BY id""",
            (scope, run_id),
        ).fetchall()
        return [_row_to_change(row) for row in rows]

    def undo_run(self, scope: str, run_id: int) -> tuple[int, list[ChangeRecord]]:
        with self._connection() as conn:
            self._lock_scope(conn, scope)
            # FOR UPDATE as well as the scope lock: a writer that does not take mempp's lock
            # (another tool) still cannot undo the same run concurrently; the loser re-reads
            # the row, sees undone_by and is refused.
            run = self._run_row(conn, scope, run_id, lock=True)
            check_undoable(run)
            changes = self._changes(conn, scope, run_id)
            inverse = [inverse_change(record.change) for record in changes]
            erased = conn.execute(
                "SELECT record_id FROM redactions WHERE scope = %s AND record_id = ANY(%s)",
                (scope, [change.record_id for change in inverse]),
            ).fetchall()
            if erased:
                raise refuse_erased(run_id, [row[0] for row in erased])
            self._refuse_duplicate_restores(conn, scope, run_id, inverse)
            # Rows leaving 'active' first: a merged row may repeat an original's text and
            # author, and the dedupe index must never see both active, even mid-statement.
            # A run names each row once, so the order changes nothing else.
            ordered = sorted(inverse, key=lambda change: change.new_state != "archived")
            try:
                self._compare_and_set(conn, scope, ordered)
            except StateConflict as exc:
                stale = [c.record_id for c in inverse if c.record_id in set(exc.ids)]
                raise StateConflict(
                    f"cannot undo run {run_id}: records {stale} were changed again after it "
                    "(undo the later runs first, newest first); nothing was changed",
                    stale,
                ) from None
            now = datetime.now(UTC)
            undo_id = conn.execute(
                """INSERT INTO consolidation_runs
                       (scope, kind, dry_run, started_at, finished_at, settings, counts, undoes)
                   VALUES (%s, 'undo', false, %s, %s, '{}', %s::jsonb, %s) RETURNING id""",
                (scope, now, now, _json(undo_counts(changes)), run_id),
            ).fetchone()[0]
            self._log_changes(
                conn,
                scope,
                undo_id,
                [
                    (record.group, "undo", change, record.merged_id)
                    for record, change in zip(changes, inverse, strict=True)
                ],
            )
            conn.execute(
                "UPDATE consolidation_runs SET undone_by = %s WHERE scope = %s AND id = %s",
                (undo_id, scope, run_id),
            )
            return undo_id, self._changes(conn, scope, undo_id)

    def _refuse_duplicate_restores(
        self,
        conn: psycopg.Connection[Any],
        scope: str,
        run_id: int,
        inverse: Sequence[StateChange],
    ) -> None:
        """Refuse, naming them, to re-activate rows that an active row repeats now (the same
        author, text and event date, added after the run archived them)."""
        restoring = [c.record_id for c in inverse if c.new_state == "active"]
        if not restoring:
            return
        leaving = [c.record_id for c in inverse if c.new_state == "archived"]
        rows = conn.execute(
            """SELECT r.id FROM records r
               WHERE r.scope = %(scope)s AND r.id = ANY(%(restoring)s::bigint[])
                 AND r.state = 'archived'
                 AND EXISTS (
                     SELECT 1 FROM records o
                     WHERE o.scope = r.scope AND o.state = 'active'
                       AND coalesce(o.author, '') = coalesce(r.author, '')
                       AND o.text_hash = r.text_hash
                       AND o.event_key IS NOT DISTINCT FROM r.event_key AND o.id <> r.id
                       AND NOT (o.id = ANY(%(leaving)s::bigint[])))
               ORDER BY r.id""",
            {"scope": scope, "restoring": restoring, "leaving": leaving},
        ).fetchall()
        if rows:
            raise refuse_duplicates(run_id, [row[0] for row in rows])
