"""The context leg without an index (``ctx_source="query"``): the sum rule's contexts scored
at query time.

Under the sum rule (``mempp.store.context.ContextRule``) a record's context is
normalise(v_r + 0.5 v_p1 + 0.25 v_p2), its predecessors p1, p2 picked by the rule every
engine shares (``pick_members``), so its cosine with the question is made of the question's
cosines with stored record vectors, the ones the vector leg scores. This leg takes the
vector leg's candidates, adds their thread followers (the rows whose contexts may read
them), reads each candidate's predecessors and stored vectors by the same rule, and scores
each candidate's context exactly, as the index would hold it. What it cannot see: a record
that is none of these (its own vector and every predecessor's outside the vector leg's
candidates and the record not a follower of one). docs/retrieval.md, "The context leg at
query time", measures what that costs.

It keeps the index's scope rule: the candidates are in-scope rows (the vector leg's and
``thread_followers``'s lookups apply the scope, ``as_of`` and filters), and a candidate's
predecessors are, by the rule, stored before it and dated no later, so a context never
reads a record outside any bound its record is inside.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.store.base import Store
from mempp.store.context import ContextRule, ContextStore

#: The rule scored at query time: the index's default (sum rule, depth 2, decay 0.5).
QUERY_RULE = ContextRule()


def query_contexts(
    store: Store,
    scope: str,
    vector_rows: Sequence[int],
    vector: np.ndarray,
    as_of: int | None,
    limit: int,
    *,
    filters: Filters = NO_FILTERS,
    rule: ContextRule = QUERY_RULE,
) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    """The context leg's rows, best first (at most ``limit``), and the predecessors each
    one's context read (oldest first), from the vector leg's rows ``vector_rows``. A row with
    no predecessor is left out, as the index leaves it (its context is its own vector)."""
    if not vector_rows or limit <= 0 or not isinstance(store, ContextStore):
        return [], {}
    followers = store.thread_followers(scope, vector_rows, as_of, rule.depth, filters=filters)
    candidates = list(
        dict.fromkeys([*vector_rows, *(row for rows in followers.values() for row in rows)])
    )
    # Scored as the index's exact rescoring scores (float64 sums of float32 vectors), ties
    # to the newer row, so that where both see a row they rank it alike.
    question = np.asarray(vector, dtype=np.float32).reshape(-1).astype(np.float64)
    scored: list[tuple[float, int]] = []
    found = store.sum_sources(candidates, rule.depth)
    for row, (_, vectors) in found.items():
        context = rule.combine(vectors).astype(np.float64)
        scored.append((float(context @ question), row))
    scored.sort(key=lambda pair: (-pair[0], -pair[1]))
    ranked = [row for _, row in scored[:limit]]
    return ranked, {row: found[row][0] for row in ranked}
