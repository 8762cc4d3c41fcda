"""The recency reserve, the read path's last choice (pure functions): ``k - slots`` rows in fused
order, then slots for the latest-dated rows that remain, so the newest word on a subject is
shown even when older rows outrank it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mempp.search.fusion import Fused

RecencyKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Selection:
    """The ``k`` rows handed on: fused rows, then the reserve (matched, then unmatched fill)."""

    fused: list[Fused]
    reserved: list[Fused]


def select_with_reserve(
    fused: Sequence[Fused],
    k: int,
    reserve: int,
    recency_key: Callable[[int], RecencyKey],
    unmatched_fill: Callable[[set[int], int], Sequence[int]],
) -> Selection:
    """Keep ``k - reserve`` rows in fused order, then ``reserve`` recency slots.

    The slots go to the remaining matched rows with the largest ``recency_key`` (ties to the
    newer ingest). Slots still empty are filled by ``unmatched_fill(exclude, n)``: the most
    recently ingested in-scope rows matched by no leg.
    """
    slots = min(reserve, k)
    head = list(fused[: k - slots])
    if slots == 0:
        return Selection(head, [])
    rest = fused[k - slots :]
    latest = sorted(rest, key=lambda f: (recency_key(f.id), f.id), reverse=True)[:slots]
    missing = slots - len(latest)
    if missing > 0:
        exclude = {f.id for f in fused}
        latest += [Fused(row, 0.0) for row in unmatched_fill(exclude, missing)][:missing]
    return Selection(head, latest)


def recency(event_key: int | None, ingested_key: int, *, undated_last: bool) -> RecencyKey:
    """A row's place in the reserve's order (larger is more recent): its event date, else its
    ingest time; with ``undated_last``, every dated row before every undated one, so rows with
    no date (a wiki page, a pasted note) do not take the slots meant for the latest news."""
    if event_key is None:
        return (0 if undated_last else 1, ingested_key)
    return (1, event_key)
