"""The SQLite engine's change log: consolidation runs, their groups and state changes
(compare-and-set, append-only), and undo."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from mempp.dates import now_key
from mempp.errors import InvalidInput, StoreError
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
from mempp.store.sqlite.records import _RecordsMixin
from mempp.store.sqlite.schema import _now
from mempp.store.undo_rules import (
    check_undoable,
    inverse_change,
    refuse_duplicates,
    refuse_erased,
    undo_counts,
)

_RUN_COLUMNS = (
    "id, scope, kind, dry_run, started_at, finished_at, settings, counts, undoes, undone_by"
)


def _row_to_run(row: sqlite3.Row | tuple) -> RunInfo:
    return RunInfo(
        id=row[0],
        scope=row[1],
        kind=row[2],
        dry_run=bool(row[3]),
        started_at=row[4],
        finished_at=row[5],
        settings=json.loads(row[6] or "{}"),
        counts=json.loads(row[7]) if row[7] else None,
        undoes=row[8],
        undone_by=row[9],
    )


class _ChangeLogMixin(_RecordsMixin):
    """Consolidation runs, their groups and logged state changes, and undo."""

    # -- consolidation (mempp.llm.consolidate) ---------------------------------------------
    def current_vectors(self, scope: str) -> tuple[np.ndarray, np.ndarray]:
        encoder = self.encoder()
        dim = encoder[1] if encoder else 0
        with self._lock:
            rows = self._conn.execute(
                """SELECT id, embedding FROM records
                   WHERE scope = ? AND state = 'active' AND superseded_by IS NULL
                   ORDER BY id""",
                (scope,),
            ).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if not rows:
            return ids, np.empty((0, dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4")
        return ids, matrix.reshape(len(rows), -1).astype(np.float32)

    def begin_run(
        self, scope: str, *, kind: str, dry_run: bool, settings: Mapping[str, Any]
    ) -> int:
        if kind not in ("consolidate", "undo"):
            raise InvalidInput(f"unknown run kind {kind!r}")
        with self._write() as conn:
            cursor = conn.execute(
                """INSERT INTO consolidation_runs (scope, kind, dry_run, started_at, settings)
                   VALUES (?, ?, ?, ?, ?)""",
                (scope, kind, int(dry_run), _now(), json.dumps(dict(settings), sort_keys=True)),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

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
        try:
            with self._write() as conn:
                self._run_row(conn, scope, run_id)
                self._compare_and_set(conn, scope, outcome.changes)
                merged_id = None
                if outcome.merged is not None:
                    merged_id = self._insert_merged(conn, scope, outcome.merged)
                    # Its context in this transaction, as any write's (store/context.py).
                    self._write_contexts(conn, [merged_id], encode_context)
                conn.execute(
                    """INSERT INTO consolidation_groups (run_id, group_no, label, members, detail)
                       VALUES (?, ?, ?, ?, ?)""",
                    (
                        run_id,
                        outcome.group,
                        outcome.label,
                        json.dumps(list(outcome.members)),
                        outcome.detail,
                    ),
                )
                changes = list(outcome.changes)
                if merged_id is not None:
                    changes.append(StateChange(merged_id, None, None, "active", None))
                self._log_changes(conn, run_id, outcome.group, outcome.label, changes, merged_id)
                return merged_id
        except sqlite3.Error as exc:
            raise StoreError(f"could not record a consolidation step: {exc}") from None

    def _run_row(self, conn: sqlite3.Connection, scope: str, run_id: int) -> RunInfo:
        row = conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM consolidation_runs WHERE id = ? AND scope = ?",
            (run_id, scope),
        ).fetchone()
        if row is None:
            raise InvalidInput(f"no consolidation run {run_id} in scope {scope!r}")
        return _row_to_run(row)

    @staticmethod
    def _compare_and_set(
        conn: sqlite3.Connection, scope: str, changes: Sequence[StateChange]
    ) -> None:
        """Apply each change only where the row still has its expected state."""
        stale = []
        for change in changes:
            cursor = conn.execute(
                """UPDATE records SET state = ?, superseded_by = ?
                   WHERE id = ? AND scope = ? AND state = ? AND superseded_by IS ?""",
                (
                    change.new_state,
                    change.new_superseded_by,
                    change.record_id,
                    scope,
                    change.old_state,
                    change.old_superseded_by,
                ),
            )
            if cursor.rowcount != 1:
                stale.append(change.record_id)
        if stale:
            raise StateConflict(f"records {stale} changed since they were read", stale)

    def _insert_merged(self, conn: sqlite3.Connection, scope: str, merged: MergedRow) -> int:
        # Checked after the originals are archived, so only *other* active rows count.
        if self._duplicate_of(conn, scope, merged.document) is not None:
            raise StateConflict("the merged text repeats an active row of the same author")
        return self._insert_row(
            conn,
            scope,
            merged.document,
            merged.vector,
            merged.labels,
            datetime.now(UTC).isoformat(),
            now_key(),
        )

    @staticmethod
    def _log_changes(
        conn: sqlite3.Connection,
        run_id: int,
        group: int | None,
        label: str,
        changes: Sequence[StateChange],
        merged_id: int | None,
    ) -> None:
        conn.executemany(
            """INSERT INTO consolidation_changes (run_id, group_no, label, record_id, old_state,
                   old_superseded_by, new_state, new_superseded_by, merged_id)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                (
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
                for c in changes
            ],
        )

    def finish_run(self, scope: str, run_id: int, counts: Mapping[str, Any]) -> None:
        with self._write() as conn:
            conn.execute(
                """UPDATE consolidation_runs SET finished_at = ?, counts = ?
                   WHERE id = ? AND scope = ?""",
                (_now(), json.dumps(dict(counts), sort_keys=True), run_id, scope),
            )

    def runs(self, scope: str) -> list[RunInfo]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM consolidation_runs WHERE scope = ? ORDER BY id",
                (scope,),
            ).fetchall()
        return [_row_to_run(row) for row in rows]

    def run_groups(self, scope: str, run_id: int) -> list[GroupRecord]:
        with self._lock:
            rows = self._conn.execute(
                """SELECT g.run_id, g.group_no, g.label, g.members, g.detail
                   FROM consolidation_groups g JOIN consolidation_runs r ON r.id = g.run_id
                   WHERE g.run_id = ? AND r.scope = ? ORDER BY g.group_no""",
                (run_id, scope),
            ).fetchall()
        return [GroupRecord(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4]) for r in rows]

    def run_changes(self, scope: str, run_id: int) -> list[ChangeRecord]:
        with self._lock:
            return self._changes(self._conn, scope, run_id)

    @staticmethod
    def _changes(conn: sqlite3.Connection, scope: str, run_id: int) -> list[ChangeRecord]:
        rows = conn.execute(
            """SELECT c.run_id, c.group_no, c.label, c.record_id, c.old_state,
                      c.old_superseded_by, c.new_state, c.new_superseded_by, c.merged_id
               FROM consolidation_changes c JOIN consolidation_runs r ON r.id = c.run_id
               WHERE c.run_id = ? AND r.scope = ? ORDER BY c.id""",
            (run_id, scope),
        ).fetchall()
        return [
            ChangeRecord(r[0], r[1], r[2], StateChange(r[3], r[4], r[5], r[6], r[7]), r[8])
            for r in rows
        ]

    def undo_run(self, scope: str, run_id: int) -> tuple[int, list[ChangeRecord]]:
        try:
            with self._write() as conn:
                run = self._run_row(conn, scope, run_id)
                check_undoable(run)
                changes = self._changes(conn, scope, run_id)
                inverse = [inverse_change(record.change) for record in changes]
                self._compare_and_set_for_undo(conn, scope, run_id, inverse)
                cursor = conn.execute(
                    """INSERT INTO consolidation_runs
                           (scope, kind, dry_run, started_at, finished_at, settings, counts, undoes)
                       VALUES (?, 'undo', 0, ?, ?, '{}', ?, ?)""",
                    (scope, _now(), _now(), json.dumps(undo_counts(changes)), run_id),
                )
                undo_id = cursor.lastrowid
                assert undo_id is not None
                for record, change in zip(changes, inverse, strict=True):
                    self._log_changes(
                        conn, undo_id, record.group, "undo", [change], record.merged_id
                    )
                conn.execute(
                    "UPDATE consolidation_runs SET undone_by = ? WHERE id = ?", (undo_id, run_id)
                )
                return undo_id, self._changes(conn, scope, undo_id)
        except sqlite3.Error as exc:
            raise StoreError(f"could not undo run {run_id}: {exc}") from None

    def _compare_and_set_for_undo(
        self, conn: sqlite3.Connection, scope: str, run_id: int, inverse: Sequence[StateChange]
    ) -> None:
        ids = [change.record_id for change in inverse]
        erased = [  # one bound JSON array: a run may change more rows than SQLite has variables
            row[0]
            for row in conn.execute(
                "SELECT record_id FROM redactions WHERE scope = ? "
                "AND record_id IN (SELECT value FROM json_each(?))",
                (scope, json.dumps(ids)),
            )
        ]
        if erased:
            raise refuse_erased(run_id, erased)
        restoring = [c.record_id for c in inverse if c.new_state == "active"]
        leaving = [c.record_id for c in inverse if c.new_state == "archived"]
        repeated = (
            [
                row[0]
                for row in conn.execute(
                    """SELECT r.id FROM records r
                   WHERE r.scope = ? AND r.id IN (SELECT value FROM json_each(?))
                     AND r.state = 'archived'
                     AND EXISTS (
                         SELECT 1 FROM records o
                         WHERE o.scope = r.scope AND o.state = 'active'
                           AND coalesce(o.author, '') = coalesce(r.author, '')
                           AND o.text_hash = r.text_hash
                           AND o.event_key IS r.event_key AND o.id <> r.id
                           AND o.id NOT IN (SELECT value FROM json_each(?)))""",
                    (scope, json.dumps(restoring), json.dumps(leaving)),
                )
            ]
            if restoring
            else []
        )
        if repeated:
            raise refuse_duplicates(run_id, repeated)
        try:
            self._compare_and_set(conn, scope, inverse)
        except StateConflict as exc:
            raise StateConflict(
                f"cannot undo run {run_id}: records {exc.ids} were changed again after it "
                "(undo the later runs first, newest first); nothing was changed",
                exc.ids,
            ) from None
