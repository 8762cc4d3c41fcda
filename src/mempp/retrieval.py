"""The read path ``Phi(q, theta)``: temporal scope, three legs, fusion, recency reserve.

No language model is called here. The scope (tenant, active rows, ``event_date <= as_of``)
is applied inside every leg's lookup, before ranking, so every slot goes to an eligible row.
The read path never looks at ``superseded_by``: a superseded row competes like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mempp.fusion import Fused, rrf, select_with_reserve
from mempp.query import lexical_query, tag_labels
from mempp.records import Hit
from mempp.settings import LEGS, Settings
from mempp.store.base import Store


@dataclass(frozen=True, slots=True)
class LegLists:
    """What each leg returned, best first (for inspection and benchmarks)."""

    lex: list[int]
    tag: list[int]
    vec: list[int]

    def as_dict(self) -> dict[str, list[int]]:
        return {"lex": self.lex, "tag": self.tag, "vec": self.vec}


def run_legs(
    store: Store,
    scope: str,
    question: str,
    query_vector: np.ndarray | None,
    as_of: int | None,
    settings: Settings,
) -> LegLists:
    """Each leg returns at most ``C`` in-scope rows. A leg of weight 0 is not queried."""
    limit = settings.candidates
    lex = tag = vec = []
    if settings.w_lex > 0:
        lex = store.lexical(scope, lexical_query(question, settings), as_of, limit)
    if settings.w_tag > 0:
        tag = store.tagged(scope, tag_labels(question, settings), as_of, limit)
    if settings.w_vec > 0 and query_vector is not None:
        vec = store.nearest(scope, query_vector, as_of, limit)
    return LegLists(lex, tag, vec)


def fuse_and_select(
    store: Store, scope: str, legs: LegLists, as_of: int | None, settings: Settings, k: int
) -> list[tuple[Fused, bool]]:
    """Weighted RRF, then ``k - reserve`` fused rows and ``reserve`` recency slots."""
    weights = {leg: settings.weight(leg) for leg in LEGS}
    fused = rrf(legs.as_dict(), weights, settings.gamma)
    slots = min(settings.reserve, k)
    remaining = [f.id for f in fused[k - slots :]]
    keys = store.recency_keys(scope, remaining) if slots else {}
    selection = select_with_reserve(
        fused,
        k,
        settings.reserve,
        recency_key=lambda row: keys[row],
        unmatched_fill=lambda exclude, n: store.latest_unmatched(scope, exclude, as_of, n),
    )
    return [(f, False) for f in selection.fused] + [(f, True) for f in selection.reserved]


def to_hits(store: Store, scope: str, chosen: list[tuple[Fused, bool]]) -> list[Hit]:
    records = store.get(scope, [f.id for f, _ in chosen])
    present = [(f, reserved) for f, reserved in chosen if f.id in records]
    return [
        Hit(records[f.id], rank, f.score, dict(f.leg_ranks), reserved)
        for rank, (f, reserved) in enumerate(present, start=1)
    ]
