"""Corrections where an agent reads them: which hits say "superseded by record N (DATE)" or
"archived (DATE)", and only when the question could know it.

A hit's correction is shown only when it is visible under the question's ``as_of`` (event
time) and ``known_at`` (what the memory held then):

* superseded: the successor is visible (dated on or before ``as_of``; ingested by
  ``known_at``) and the link was logged by ``known_at``. In event time a supersession takes
  effect at its successor's date, so an as-of question before that date does not see it; in
  known time it exists from the moment it was logged. DATE is the successor's event day
  (the link's logged day when the successor is undated).
* archived: the archive was logged by ``known_at`` and by ``as_of``.

A link the question cannot see is taken off the hit (``superseded_by`` is None), so neither
the evidence header, the JSON of ``search`` and HTTP, nor MCP carries a correction made later
than the question's moment. A link with no logged change (written by another tool) is shown
only when the question has no ``known_at``: without a time it cannot be placed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mempp.dates import key_to_datetime, parse_as_of, parse_event_date
from mempp.records import Hit, Record
from mempp.store.base import Store, TimelineStore


def with_corrections(
    store: Store, scope: str, hits: Sequence[Hit], as_of: int | None, known_at: int | None
) -> list[Hit]:
    """``hits`` with each link the question can see dated and each one it cannot removed."""
    linked = [h for h in hits if h.record.superseded_by is not None or h.record.state == "archived"]
    if not linked:
        return list(hits)
    if not isinstance(store, TimelineStore):  # an engine without a log: no time to check
        return list(hits) if as_of is None and known_at is None else _unlinked(hits)
    log = store.state_log(scope, [h.id for h in linked])
    linked_at, archived_at = _moments(log)
    successors = store.get(
        scope, {h.record.superseded_by for h in linked if h.record.superseded_by is not None}
    )
    out = []
    for hit in hits:
        record = hit.record
        superseded_on = archived_on = None
        successor = None if record.superseded_by is None else successors.get(record.superseded_by)
        if successor is not None:
            link = linked_at.get(record.id)
            if link is not None and link[0] != record.superseded_by:
                link = None  # the log's last link is not the row's: it cannot be placed
            moment = None if link is None else link[1]
            if _successor_visible(successor, moment, as_of, known_at):
                superseded_on = successor.day or _day(moment)
        if record.state == "archived":
            moment = archived_at.get(record.id)
            if moment is not None and all(b is None or moment <= b for b in (as_of, known_at)):
                archived_on = _day(moment)
        if superseded_on is None and record.superseded_by is not None:
            record = dataclasses.replace(record, superseded_by=None)
        out.append(
            dataclasses.replace(
                hit, record=record, superseded_on=superseded_on, archived_on=archived_on
            )
        )
    return out


def _moments(
    log: Sequence[tuple[int, str, int | None, str]],
) -> tuple[dict[int, tuple[int | None, int]], dict[int, int]]:
    """From the log, oldest first: when each row's last link was set (with the link), and
    when it was last archived (rows archived now; a later restore clears it)."""
    linked_at: dict[int, tuple[int | None, int]] = {}
    archived_at: dict[int, int] = {}
    state: dict[int, tuple[str | None, int | None]] = {}
    for record_id, new_state, new_by, at in log:
        moment = parse_as_of(at)
        assert moment is not None
        old_state, old_by = state.get(record_id, (None, None))
        if new_by != old_by:
            linked_at[record_id] = (new_by, moment)
        if new_state == "archived" and old_state != "archived":
            archived_at[record_id] = moment
        elif new_state != "archived":
            archived_at.pop(record_id, None)
        state[record_id] = (new_state, new_by)
    return linked_at, archived_at


def _successor_visible(
    successor: Record, logged: int | None, as_of: int | None, known_at: int | None
) -> bool:
    if successor.state == "redacted":
        return False
    if as_of is not None:
        dated = parse_event_date(successor.date) if successor.date else None
        if dated is None or dated.key > as_of:
            return False
    if known_at is not None:
        ingested = parse_as_of(successor.ingested_at)
        if logged is None or logged > known_at or ingested is None or ingested > known_at:
            return False
    return True


def _day(key: int | None) -> str | None:
    return None if key is None else key_to_datetime(key).date().isoformat()


def _unlinked(hits: Sequence[Hit]) -> list[Hit]:
    return [
        dataclasses.replace(hit, record=dataclasses.replace(hit.record, superseded_by=None))
        for hit in hits
    ]
