"""What a record page shows around a record: its supersession chain both ways and the
change-log entries that name it.

Every supersession is written through the change log (consolidation runs, and manual
corrections log there too), so the records a record replaced are found in the log and then
confirmed against their current state: an undone run leaves no false link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mempp.records import Record
from mempp.store.base import ChangeRecord, ConsolidationStore, RunInfo

CHAIN_LIMIT = 50  # supersession steps shown either way


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One change-log row naming the record: the run it belongs to and what it changed."""

    run: RunInfo
    change: ChangeRecord


def read_log(memory: Any) -> list[LogEntry]:
    """The scope's whole change log, oldest run first (empty on an engine without one)."""
    store = memory.store
    if not isinstance(store, ConsolidationStore):
        return []
    return [
        LogEntry(run, change)
        for run in store.runs(memory.scope)
        for change in store.run_changes(memory.scope, run.id)
    ]


def entries_about(log: list[LogEntry], record_id: int) -> list[LogEntry]:
    """Log rows that changed the record, or made it the replacement of another."""
    return [
        entry
        for entry in log
        if record_id
        in (
            entry.change.change.record_id,
            entry.change.change.new_superseded_by,
            entry.change.merged_id,
        )
    ]


def newer_chain(memory: Any, record: Record) -> list[Record]:
    """The records that replaced this one, in order: its superseder, that one's, and so on."""
    chain: list[Record] = []
    seen = {record.id}
    current = record
    while current.superseded_by is not None and len(chain) < CHAIN_LIMIT:
        if current.superseded_by in seen:
            break
        found = memory.store.get(memory.scope, [current.superseded_by])
        if current.superseded_by not in found:
            break
        current = found[current.superseded_by]
        seen.add(current.id)
        chain.append(current)
    return chain


def older_chain(memory: Any, record: Record, log: list[LogEntry]) -> list[list[Record]]:
    """The records this one replaced, step by step back: ``[[replaced by it], [replaced by
    those], ...]``. Log rows are candidates; a record's current ``superseded_by`` confirms."""
    steps: list[list[Record]] = []
    frontier = [record.id]
    seen = {record.id}
    while frontier and len(steps) < CHAIN_LIMIT:
        found = _replaced_by(memory, log, frontier)
        found = [r for r in found if r.id not in seen]
        if not found:
            break
        seen.update(r.id for r in found)
        steps.append(found)
        frontier = [r.id for r in found]
    return steps


def _replaced_by(memory: Any, log: list[LogEntry], ids: list[int]) -> list[Record]:
    wanted = set(ids)
    candidates = {
        entry.change.change.record_id
        for entry in log
        if entry.change.change.new_superseded_by in wanted
    }
    rows = memory.store.get(memory.scope, sorted(candidates))
    return sorted(
        (r for r in rows.values() if r.superseded_by in wanted), key=lambda r: (r.date or "", r.id)
    )
