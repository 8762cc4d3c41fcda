"""The rules an undo obeys on every engine: which runs can be undone, the change that
restores each row, the refusals that keep a store restorable into either engine (an erased
row stays a tombstone; no row becomes active beside its duplicate), and the counts an undo
reports. Each engine applies them inside its own undo transaction."""

from __future__ import annotations

from collections.abc import Sequence

from mempp.errors import InvalidInput
from mempp.store.base import ChangeRecord, RunInfo, State, StateChange, StateConflict


def check_undoable(run: RunInfo) -> None:
    if run.settings.get("operation") == "redact":
        raise InvalidInput(f"run {run.id} erased records; an erasure cannot be undone")
    if run.kind != "consolidate":
        raise InvalidInput(f"run {run.id} is an undo of run {run.undoes}; it cannot be undone")
    if run.dry_run:
        raise InvalidInput(f"run {run.id} was a dry run: it changed nothing to undo")
    if run.undone_by is not None:
        raise InvalidInput(f"run {run.id} was already undone by run {run.undone_by}")


def refuse_erased(run_id: int, erased: Sequence[int]) -> StateConflict:
    """An undo that would give an erased row back a state: its tombstone must stay archived
    (and a snapshot of the store restorable), so the whole undo is refused."""
    ids = sorted(erased)
    return StateConflict(
        f"cannot undo run {run_id}: records {ids} were erased after it (an erasure cannot be "
        "undone); nothing was changed",
        ids,
    )


def refuse_duplicates(run_id: int, ids: Sequence[int]) -> StateConflict:
    """An undo that would make a row active beside its duplicate (the same author, text and
    event date, added after the run archived it): one engine's dedupe index forbids two
    such rows and the other would keep both, so a snapshot would not restore across
    engines. The whole undo is refused on both."""
    ids = sorted(ids)
    return StateConflict(
        f"cannot undo run {run_id}: records {ids} would be active beside a row of the same "
        "author, text and date added after the run (archive that row first); nothing was "
        "changed",
        ids,
    )


def inverse_change(change: StateChange) -> StateChange:
    """The change that restores a row; a row the run created is archived, never deleted."""
    if change.old_state is None:
        restored: tuple[State, int | None] = ("archived", change.new_superseded_by)
    else:
        restored = (change.old_state, change.old_superseded_by)
    return StateChange(
        change.record_id, change.new_state, change.new_superseded_by, restored[0], restored[1]
    )


def undo_counts(changes: Sequence[ChangeRecord]) -> dict[str, int]:
    created = sum(1 for c in changes if c.change.old_state is None)
    return {"restored": len(changes) - created, "archived_merged": created}
