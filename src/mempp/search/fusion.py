"""The ranking math of the read path, as pure functions: weighted RRF, the date leg and thread
context (the recency reserve that follows is ``mempp.search.reserve``).

Ids are integers that grow with ingest order, so "ingest recency" is simply "larger id".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Fused:
    """A row's fused score and its 1-based position in every leg that returned it."""

    id: int
    score: float
    leg_ranks: dict[str, int] = field(default_factory=dict)


def rrf(
    legs: Mapping[str, Sequence[int]], weights: Mapping[str, float], gamma: float
) -> list[Fused]:
    """Weighted reciprocal rank fusion: ``sum_l w_l / (gamma + rank_l)``, ranks from 0.

    Rows are ordered by score, ties by ingest recency (newer first). A leg of weight 0 is
    switched off: its rows neither score nor count as matched.
    """
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    for leg, ids in legs.items():
        weight = weights.get(leg, 0.0)
        if weight <= 0:
            continue
        for position, row in enumerate(ids):
            row_ranks = ranks.setdefault(row, {})
            if leg in row_ranks:  # a leg lists each row once; ignore repeats defensively
                continue
            row_ranks[leg] = position + 1
            scores[row] = scores.get(row, 0.0) + weight / (gamma + position)
    return _ranked(scores, ranks)


def _ranked(scores: Mapping[int, float], ranks: Mapping[int, dict[str, int]]) -> list[Fused]:
    """Rows by score, ties to the newer ingest (larger id)."""
    order = sorted(scores, key=lambda row: (-scores[row], -row))
    return [Fused(row, scores[row], ranks[row]) for row in order]


def _editable(fused: Sequence[Fused]) -> tuple[dict[int, float], dict[int, dict[str, int]]]:
    """Copies of the fused scores and leg ranks, for a stage that adds to them."""
    return {f.id: f.score for f in fused}, {f.id: dict(f.leg_ranks) for f in fused}


DATE = "date"


def add_date_leg(
    fused: Sequence[Fused], dated: Collection[int], weight: float, gamma: float, limit: int
) -> list[Fused]:
    """The date leg: rows dated within a day or month the question names, ranked by the other
    legs' fused order (rows no leg found come after, newest first), at most ``limit``, fused
    in with ``weight / (gamma + rank)`` like any leg.

    It is a second stage because a date says *when*, not *what*: among the rows of the
    named day, the ones that also match the question's words and meaning come first.
    """
    if weight <= 0 or not dated:
        return list(fused)
    wanted = set(dated)
    found = [f.id for f in fused if f.id in wanted]
    rest = sorted(wanted.difference(found), reverse=True)
    scores, ranks = _editable(fused)
    for position, row in enumerate((found + rest)[:limit]):
        scores[row] = scores.get(row, 0.0) + weight / (gamma + position)
        ranks.setdefault(row, {})[DATE] = position + 1
    return _ranked(scores, ranks)


THREAD = "thread"  # pseudo-leg name: the row was lifted by an earlier row of its thread


def add_thread_context(
    fused: Sequence[Fused], followers: Mapping[int, Sequence[int]], weight: float
) -> list[Fused]:
    """Each fused row lends ``weight ** h`` of its score to the ``h``-th row after it in its
    thread (``followers[row]``, nearest first), so a reply that shares no words with the query
    ("5 years already!") rises with the question it answers, and may enter the ranking.

    Only fused scores are lent (not scores already received), so the effect is a fixed,
    decaying window over the preceding rows. ``leg_ranks["thread"]`` of a row that received
    context is the fused position (1-based) of the row that lent it the most.
    """
    if weight <= 0 or not followers:
        return list(fused)
    scores, ranks = _editable(fused)
    best: dict[int, tuple[float, int]] = {}
    for position, row in enumerate(fused, start=1):
        share = row.score
        for follower in followers.get(row.id, ()):
            share *= weight
            scores[follower] = scores.get(follower, 0.0) + share
            if share > best.get(follower, (0.0, 0))[0]:
                best[follower] = (share, position)
    for follower, (_, position) in best.items():
        ranks.setdefault(follower, {})[THREAD] = position
    return _ranked(scores, ranks)
