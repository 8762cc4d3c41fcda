"""Time and truth over the record: a subject's history, what changed between two dates, and
manual corrections (supersede, archive) without a language model.

Corrections go to the same append-only change log as consolidation (a run whose settings
name the ``operation``, the ``actor`` and the ``reason``), so they are listed, attributed and
undone like a consolidation run. Erasure (:func:`redact`) is the one change of content; it is
logged the same way and cannot be undone. Reading functions never change anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from mempp.dates import key_to_datetime, parse_as_of, parse_event_date
from mempp.errors import InvalidInput, RecordNotFound
from mempp.filters import Filters
from mempp.records import Record
from mempp.store.base import (
    ConsolidationStore,
    GroupOutcome,
    RedactionStore,
    RunInfo,
    StateChange,
    StateConflict,
    TimelineStore,
    supports,
)

if TYPE_CHECKING:
    from mempp.dates import DateLike
    from mempp.search.reader import Reader

# A neighbour found by the legs joins a subject's history when its fused score is at least
# this share of the anchor's: the anchor's own lexical and vector ranks are 1, so a row needs
# roughly the anchor's standing in one leg, or a good place in two, to count as "about it".
NEIGHBOUR_SHARE = 0.5
# Supersession chains and threads are followed this many steps from the anchor.
LINK_DEPTH = 8
DEFAULT_HISTORY_LIMIT = 50
DEFAULT_CHANGES_LIMIT = 200
CORRECTIONS = ("supersede", "archive", "redact")


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One record of a subject's history: why it belongs, and what superseded it."""

    record: Record
    # "subject" (the anchor), "thread", "superseded" (a row of the history superseded it),
    # "successor" (it superseded a row of the history), "neighbour" (ranked close to it)
    reasons: tuple[str, ...]
    superseded_by: Record | None = None

    @property
    def state(self) -> str:
        return self.record.state

    def to_dict(self) -> dict[str, object]:
        out = self.record.to_dict()
        out["reasons"] = list(self.reasons)
        out["superseded_by_record"] = (
            None if self.superseded_by is None else self.superseded_by.to_dict()
        )
        return out


@dataclass(frozen=True, slots=True)
class Correction:
    """A logged manual correction: which run, what was done to which rows, by whom and why."""

    run_id: int
    operation: str
    record_ids: tuple[int, ...]
    reason: str
    actor: str | None
    at: str
    by: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "operation": self.operation,
            "record_ids": list(self.record_ids),
            "by": self.by,
            "reason": self.reason,
            "actor": self.actor,
            "at": self.at,
        }

    @classmethod
    def from_run(cls, run: RunInfo, record_ids: Sequence[int]) -> Correction:
        return cls(
            run.id,
            str(run.settings.get("operation")),
            tuple(record_ids),
            str(run.settings.get("reason", "")),
            run.settings.get("actor"),
            run.started_at,
            run.settings.get("by"),
        )


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed between two event dates: rows that entered, rows superseded by a row that
    entered, and rows archived or redacted by a correction logged in the window."""

    since: str
    until: str
    entered: list[Record] = field(default_factory=list)
    superseded: list[Record] = field(default_factory=list)
    archived: list[Correction] = field(default_factory=list)
    redacted: list[Correction] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "since": self.since,
            "until": self.until,
            "entered": [r.to_dict() for r in self.entered],
            "superseded": [r.to_dict() for r in self.superseded],
            "archived": [c.to_dict() for c in self.archived],
            "redacted": [c.to_dict() for c in self.redacted],
        }


# -- reading -----------------------------------------------------------------------------------
def history(
    memory: Reader,
    query: str | None = None,
    *,
    record_id: int | None = None,
    as_of: DateLike = None,
    limit: int = DEFAULT_HISTORY_LIMIT,
) -> list[HistoryEntry]:
    """The records about one subject, oldest event first (undated rows at their ingest time).

    The subject is ``record_id``, or the best hit of ``query``. Its history holds the anchor,
    the rows of its thread, the rows it supersedes or that supersede it (followed
    ``LINK_DEPTH`` steps, any state: archived and redacted rows show what was there), and the
    active rows the legs rank close to it (fused score >= ``NEIGHBOUR_SHARE`` of the anchor's).
    With ``as_of``, only rows dated up to it.
    """
    if (query is None) == (record_id is None):
        raise InvalidInput("history needs a query or a record_id (one of them)")
    _positive("limit", limit)
    bound = parse_as_of(as_of)
    store = _timeline_store(memory)
    reasons: dict[int, list[str]] = {}

    def note(row: int, why: str) -> None:
        if why not in reasons.setdefault(row, []):
            reasons[row].append(why)

    if record_id is not None:
        anchor = memory.get(_record_id(record_id, "record_id"))
        if bound is not None and not _within(anchor, bound):
            raise InvalidInput(f"record {anchor.id} is not dated on or before as_of")
        probe = anchor.text if anchor.text.strip() else None
    else:
        hits = memory.search(str(query), as_of=as_of, k=limit)
        if not hits:
            return []
        anchor = hits[0].record
        probe = str(query)
    note(anchor.id, "subject")
    if probe is not None:
        hits = memory.search(probe, as_of=as_of, k=limit)
        own = next((h.score for h in hits if h.id == anchor.id), hits[0].score if hits else 0.0)
        for hit in hits:
            if hit.id != anchor.id and not hit.reserved and hit.score >= NEIGHBOUR_SHARE * own:
                note(hit.id, "neighbour")
    frontier = {anchor.id}
    for _ in range(LINK_DEPTH):
        found = store.linked(memory.scope, frontier, bound)
        fresh = {row: why for row, why in found.items() if row not in reasons}
        for row, why in found.items():
            note(row, why)
        if not fresh:
            break
        frontier = set(fresh)
    records = memory.store.get(memory.scope, list(reasons))
    chosen = sorted(records.values(), key=_timeline_order)[:limit]
    successors = memory.store.get(
        memory.scope, {r.superseded_by for r in chosen if r.superseded_by is not None}
    )
    return [
        HistoryEntry(
            record,
            tuple(reasons[record.id]),
            None if record.superseded_by is None else successors.get(record.superseded_by),
        )
        for record in chosen
    ]


def changes(
    memory: Reader,
    since: DateLike,
    until: DateLike,
    *,
    query: str | None = None,
    known_since: DateLike = None,
    known_until: DateLike = None,
    limit: int = DEFAULT_CHANGES_LIMIT,
) -> Changes:
    """What changed between the event dates ``since`` and ``until`` (both days included):
    rows dated in the window (ingested between ``known_since`` and ``known_until`` when
    given), the rows those supersede, and archive and redaction corrections logged in the
    window (a correction has no event date, so its log time counts). With ``query``, the
    entered rows are the ones the read path finds, in its order; else oldest event first."""
    _positive("limit", limit)
    start, end = _window("since", since, "until", until)
    known_start, known_end = (
        _window("known_since", known_since, "known_until", known_until)
        if known_since is not None or known_until is not None
        else (None, None)
    )
    store = _timeline_store(memory)
    ids = store.entered(memory.scope, start, end, known_start, known_end, limit)
    records = memory.store.get(memory.scope, ids)
    if query is not None:
        window = Filters.create(since=since, known_at=known_until)
        hits = memory.search(query, as_of=until, k=limit, filters=window)
        entered = [h.record for h in hits if h.id in records]
    else:
        entered = sorted(records.values(), key=_timeline_order)
    entered_ids = {r.id for r in entered}
    superseded_ids = store.superseded_by_any(memory.scope, entered_ids)
    superseded = sorted(
        memory.store.get(memory.scope, superseded_ids).values(), key=_timeline_order
    )
    archived: list[Correction] = []
    redacted: list[Correction] = []
    for correction in corrections(memory):
        moment = parse_as_of(correction.at)
        assert moment is not None
        if not start <= moment <= end:
            continue
        if correction.operation == "archive":
            archived.append(correction)
        elif correction.operation == "redact":
            redacted.append(correction)
    return Changes(
        key_to_datetime(start).date().isoformat(),
        key_to_datetime(end).date().isoformat(),
        entered,
        superseded,
        archived,
        redacted,
    )


def corrections(memory: Reader) -> list[Correction]:
    """Every manual correction of the scope, oldest first (undone ones included)."""
    store = _consolidation_store(memory)
    out = []
    for run in store.runs(memory.scope):
        if run.settings.get("operation") in CORRECTIONS:
            changed = [c.change.record_id for c in store.run_changes(memory.scope, run.id)]
            out.append(Correction.from_run(run, changed))
    return out


# -- corrections ---------------------------------------------------------------------------------
def supersede(
    memory: Reader, old_id: int, *, by: int, reason: str, actor: str | None = None
) -> Correction:
    """Mark ``old_id`` as superseded by ``by`` (its state unchanged: the read path lets a
    superseded row compete, and ``history`` shows the link). Refused, with nothing changed:
    unknown ids (ids of another scope are unknown here), a row superseding itself, a
    redacted row on either side, a cycle, a link that already holds."""
    old_id = _record_id(old_id, "old_id")
    by = _record_id(by, "by")
    why, who = _reason(reason), _actor(actor)
    if old_id == by:
        raise InvalidInput(f"record {old_id} cannot supersede itself")
    rows = _existing(memory, [old_id, by])
    old, new = rows[old_id], rows[by]
    for record in (old, new):
        if record.state == "redacted":
            raise InvalidInput(f"record {record.id} is redacted")
    if old.superseded_by == by:
        raise InvalidInput(f"record {old_id} is already superseded by {by}")
    _refuse_cycle(memory, old_id, new)
    change = StateChange(old_id, old.state, old.superseded_by, old.state, by)
    return _correct(memory, "supersede", (old_id, by), (change,), why, who, by=by)


def archive(memory: Reader, record_id: int, *, reason: str, actor: str | None = None) -> Correction:
    """Archive a record: it leaves every search and stays in the record (and in ``history``).
    Refused, with nothing changed, for an unknown or already archived or redacted row."""
    record_id = _record_id(record_id, "record_id")
    why, who = _reason(reason), _actor(actor)
    record = _existing(memory, [record_id])[record_id]
    if record.state != "active":
        raise InvalidInput(f"record {record_id} is already {record.state}")
    change = StateChange(
        record_id, "active", record.superseded_by, "archived", record.superseded_by
    )
    return _correct(memory, "archive", (record_id,), (change,), why, who)


def redact(memory: Reader, record_id: int, *, reason: str, actor: str | None = None) -> Correction:
    """Erase a record for good (a legal erasure request): its content and everything derived
    from it go; a tombstone (id, dates, state ``redacted``, when, why, by whom) stays, so the
    history still shows that something was there. Logged; cannot be undone. Refused, with
    nothing changed, for an unknown or already redacted row."""
    record_id = _record_id(record_id, "record_id")
    why, who = _reason(reason), _actor(actor)
    _existing(memory, [record_id])
    store = memory.store
    supports(store, RedactionStore, "redaction")
    assert isinstance(store, RedactionStore)
    run_id, erased = store.redact(memory.scope, record_id, reason=why, actor=who)
    run = next(r for r in _consolidation_store(memory).runs(memory.scope) if r.id == run_id)
    return Correction.from_run(run, erased)


def _correct(
    memory: Reader,
    operation: str,
    members: tuple[int, ...],
    changes: tuple[StateChange, ...],
    reason: str,
    actor: str | None,
    by: int | None = None,
) -> Correction:
    store = _consolidation_store(memory)
    settings: dict[str, Any] = {"operation": operation, "reason": reason, "actor": actor}
    if by is not None:
        settings["by"] = by
    run_id = store.begin_run(memory.scope, kind="consolidate", dry_run=False, settings=settings)
    try:
        store.record_group(memory.scope, run_id, GroupOutcome(0, operation, members, changes))
    except StateConflict:
        store.finish_run(memory.scope, run_id, {"changed": 0, "conflicts": 1})
        raise
    store.finish_run(memory.scope, run_id, {"changed": len(changes)})
    run = next(r for r in store.runs(memory.scope) if r.id == run_id)
    return Correction.from_run(run, [c.record_id for c in changes])


# -- helpers ----------------------------------------------------------------------------------
def _refuse_cycle(memory: Reader, old_id: int, new: Record) -> None:
    """Follow ``new``'s chain of successors: reaching ``old_id`` would close a loop."""
    seen = {new.id}
    current = new
    path = [new.id]
    while current.superseded_by is not None:
        path.append(current.superseded_by)
        if current.superseded_by == old_id:
            steps = ", ".join(f"{a} by {b}" for a, b in pairwise(path))
            raise InvalidInput(
                f"record {old_id} cannot be superseded by {new.id}: that would make a cycle "
                f"(already superseded: {steps})"
            )
        if current.superseded_by in seen:
            break
        seen.add(current.superseded_by)
        found = memory.store.get(memory.scope, [current.superseded_by])
        if current.superseded_by not in found:
            break
        current = found[current.superseded_by]


def _existing(memory: Reader, ids: Sequence[int]) -> dict[int, Record]:
    found = memory.store.get(memory.scope, ids)
    for row in ids:
        if row not in found:
            raise RecordNotFound(f"no record {row} in scope {memory.scope!r}")
    return found


def _timeline_order(record: Record) -> tuple[int, int]:
    """Event date, undated rows at their ingest time, then ingest order."""
    dated = parse_event_date(record.date) if record.date else None
    key = dated.key if dated is not None else parse_as_of(record.ingested_at)
    assert key is not None
    return (key, record.id)


def _within(record: Record, bound: int) -> bool:
    parsed = parse_event_date(record.date) if record.date else None
    return parsed is not None and parsed.key <= bound


def _window(start_name: str, start: DateLike, end_name: str, end: DateLike) -> tuple[int, int]:
    filters = Filters.create(since=start, known_at=end)
    if filters.since is None:
        raise InvalidInput(f"{start_name} is required")
    if filters.known_at is None:
        raise InvalidInput(f"{end_name} is required")
    if filters.since > filters.known_at:
        raise InvalidInput(f"{start_name} is later than {end_name}")
    return filters.since, filters.known_at


def _record_id(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be a record id (an integer), got {value!r}")
    return value


def _reason(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("reason must be a non-empty string")
    if "\x00" in value:
        raise InvalidInput("reason contains a NUL character")
    return value.strip()


def _actor(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise InvalidInput("actor must be a non-empty string without NUL characters")
    return value.strip()


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{name} must be an integer >= 1, got {value!r}")


def _timeline_store(memory: Reader) -> TimelineStore:
    store = memory.store
    supports(store, TimelineStore, "history and changes")
    assert isinstance(store, TimelineStore)
    return store


def _consolidation_store(memory: Reader) -> ConsolidationStore:
    store = memory.store
    supports(store, ConsolidationStore, "corrections")
    assert isinstance(store, ConsolidationStore)
    return store
