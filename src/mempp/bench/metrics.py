"""Retrieval metrics against gold evidence, as pure functions (no model, no store).

A system's answer to one question is a ranked list of *entries* (a stored record, or a RAG
chunk); each entry carries a set of gold-comparable item ids (one for a record; every item a
chunk overlaps). Metrics of a question without gold are ``None`` and left out of means.

* ``recall_at(k)``: share of gold items carried by the first ``k`` entries.
* ``reciprocal_rank``: 1 / rank of the first entry carrying any gold item (0 if none).
* ``ndcg_at(k)``: binary gain, an entry gains the number of gold items it is the *first* to
  carry, discounted by ``log2(rank + 1)``; the ideal places one gold item per rank. With one
  item per entry this is textbook binary nDCG; a chunk carrying several gold items could beat
  the one-per-rank ideal, so the value is capped at 1.
* ``window_recall``: where the rendered evidence is read only up to ``window`` characters,
  the share of gold items that start inside it ("start": some entry carrying the item begins
  that item's text before ``window``) and that lie wholly inside it ("full": every part of the
  item is in an entry that ends at or before ``window``).
* ``text_visible``: the share of the gold items' characters shown inside the window, pooled
  over the question's gold items (an item's characters are those of the record that stores
  it; an entry records which of them it shows, so an excerpt or a cut entry counts only what
  it holds, and an item no entry shows counts 0).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from mempp.search.evidence import note_allowance

Ranked = Sequence[Collection[str]]


def _gold(gold: Collection[str]) -> set[str]:
    return set(gold)


def covered(ranked: Ranked, k: int) -> set[str]:
    """Every item id carried by the first ``k`` entries."""
    out: set[str] = set()
    for entry in ranked[:k]:
        out.update(entry)
    return out


def recall_at(ranked: Ranked, gold: Collection[str], k: int) -> float | None:
    """Share of the gold items carried by the first ``k`` entries (``None`` without gold)."""
    wanted = _gold(gold)
    if not wanted:
        return None
    return len(wanted & covered(ranked, k)) / len(wanted)


def first_rank(ranked: Ranked, gold: Collection[str]) -> int | None:
    """1-based rank of the first entry carrying a gold item, ``None`` if there is none."""
    wanted = _gold(gold)
    for rank, entry in enumerate(ranked, start=1):
        if wanted.intersection(entry):
            return rank
    return None


def reciprocal_rank(ranked: Ranked, gold: Collection[str]) -> float | None:
    if not gold:
        return None
    rank = first_rank(ranked, gold)
    return 0.0 if rank is None else 1.0 / rank


def ndcg_at(ranked: Ranked, gold: Collection[str], k: int = 10) -> float | None:
    wanted = _gold(gold)
    if not wanted:
        return None
    seen: set[str] = set()
    dcg = 0.0
    for rank, entry in enumerate(ranked[:k], start=1):
        new = (wanted & set(entry)) - seen
        if new:
            dcg += len(new) / math.log2(rank + 1)
            seen |= new
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return min(1.0, dcg / ideal)


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """One rendered entry: where it sits and, per item it carries, where that item's text starts
    inside it (0 = at the entry's start; a chunk's later items start further in).

    ``spans`` (records only) place the text of the record the entry shows:
    ``(offset in the entry, offset in the record, length)`` per contiguous piece; empty where
    that is not recorded (chunks). ``note``: the length of the correction note ending the
    entry's header (``mempp.search.evidence``), which a budget does not count.
    """

    offset: int
    length: int
    items: Mapping[str, int]
    spans: tuple[tuple[int, int, int], ...] = ()
    note: int = 0

    @property
    def end(self) -> int:
        return self.offset + self.length


def as_budgeted(entries: Sequence[WindowEntry], window: int) -> list[WindowEntry]:
    """The entries placed as a budget of ``window`` characters counts them: each correction
    note left out while ``note_allowance(window)`` lasts, as ``render_evidence`` does. A note
    ends its entry's header, so the entry's text moves back by it."""
    free = note_allowance(window)
    placed = []
    skipped = 0  # note characters not counted before the entry
    for entry in entries:
        own = min(entry.note, free)
        free -= own
        spans = tuple((inside - own, source, length) for inside, source, length in entry.spans)
        placed.append(WindowEntry(entry.offset - skipped, entry.length - own, entry.items, spans))
        skipped += own
    return placed


def window_chars(entries: Sequence[WindowEntry], window: int) -> int:
    """How many characters of the rendered text a budget of ``window`` covers: ``window``
    plus the notes it did not count in the entries that start inside it."""
    placed = as_budgeted(entries, window)
    return window + sum(
        entry.length - moved.length
        for entry, moved in zip(entries, placed, strict=True)
        if moved.offset < window
    )


def window_recall(
    entries: Sequence[WindowEntry],
    gold: Collection[str],
    window: int,
    parts: Mapping[str, int] | None = None,
) -> tuple[float, float] | None:
    """(start, full) window recall. ``parts[item]`` is how many entries an item is split over
    (chunks); it defaults to 1, so a record's item is "full" when its one entry fits."""
    wanted = _gold(gold)
    if not wanted:
        return None
    start: set[str] = set()
    inside: dict[str, int] = {}
    for entry in entries:
        for item, position in entry.items.items():
            if item not in wanted:
                continue
            if entry.offset + position < window:
                start.add(item)
            if entry.end <= window:
                inside[item] = inside.get(item, 0) + 1
    full = {item for item, n in inside.items() if n >= (parts or {}).get(item, 1)}
    return len(start) / len(wanted), len(full) / len(wanted)


def text_visible(
    entries: Sequence[WindowEntry],
    gold: Collection[str],
    window: int,
    sizes: Mapping[str, int],
) -> float | None:
    """Share of the gold items' characters shown before ``window``: the characters of every
    gold item's record that some entry's ``spans`` place before the window (each counted once),
    over the sum of ``sizes[item]`` (the record's length; items missing from ``sizes`` have
    none). ``None`` without gold or when the gold items have no characters at all."""
    wanted = _gold(gold)
    total = sum(sizes.get(item, 0) for item in wanted)
    if not wanted or total <= 0:
        return None
    seen: dict[str, list[tuple[int, int]]] = {}
    for entry in entries:
        carried = [item for item in entry.items if item in wanted]
        if not carried:
            continue
        for inside, source, length in entry.spans:
            visible = min(length, window - (entry.offset + inside))
            if visible > 0:
                for item in carried:
                    seen.setdefault(item, []).append((source, source + visible))
    shown = 0
    for item, pieces in seen.items():
        covered, reach = 0, 0
        for start, end in sorted(pieces):  # union of the record's characters shown
            start = max(start, reach)
            if end > start:
                covered += end - start
                reach = end
        shown += min(covered, sizes.get(item, 0))
    return shown / total
