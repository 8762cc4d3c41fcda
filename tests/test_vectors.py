"""The in-RAM vector index: int8 scan in date order, exact float32 rescoring, exact results.

Every search is checked against a float64 ranking of the same rows (tenant, state and as-of
applied, ties to the newer id), across appends that land in the unsorted tail, reorderings,
state changes and both sources of exact vectors.
"""

from __future__ import annotations

import numpy as np
import pytest

from mempp import vectors
from mempp.vectors import ExactVectorIndex


def _reference(
    matrix: np.ndarray,
    ids: np.ndarray,
    scopes: np.ndarray,
    keys: np.ndarray,
    active: np.ndarray,
    query: np.ndarray,
    scope: str,
    as_of: int | None,
    limit: int,
) -> list[int]:
    eligible = active & (scopes == scope)
    if as_of is not None:
        eligible &= keys <= as_of
    scores = matrix.astype(np.float64) @ query.astype(np.float64)
    order = np.lexsort((-ids, -scores))
    return [int(ids[i]) for i in order if eligible[i]][:limit]


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@pytest.mark.parametrize("store_rows", [False, True])
def test_search_equals_exact_ranking_across_appends_and_reorders(
    monkeypatch: pytest.MonkeyPatch, store_rows: bool
) -> None:
    monkeypatch.setattr(vectors, "_MIN_TAIL", 300)  # reorder often
    rng = np.random.default_rng(4)
    dim, count = 48, 6000
    # Clustered rows, so that many scores crowd near the top (the hard case for int8).
    centres = _unit(rng.standard_normal((12, dim)))
    matrix = _unit(centres[rng.integers(0, 12, count)] + 0.15 * rng.standard_normal((count, dim)))
    matrix[10] = matrix[3]  # an exact tie: the newer row must come first
    ids = np.arange(1, count + 1, dtype=np.int64) * 2
    scopes = np.where(rng.random(count) < 0.8, "a", "b")
    keys = rng.integers(0, 1000, count)
    undated = rng.random(count) < 0.05
    event_keys = [None if u else int(k) for u, k in zip(undated, keys, strict=True)]
    ref_keys = np.where(undated, vectors.UNDATED, keys)
    active = np.ones(count, dtype=bool)
    by_id = dict(zip(ids.tolist(), matrix, strict=True))
    fetched: list[int] = []

    def exact_rows(wanted: np.ndarray) -> np.ndarray:
        fetched.append(len(wanted))
        return np.stack([by_id[int(i)] for i in wanted])

    index = ExactVectorIndex(dim, exact_rows if store_rows else None)
    held = 0
    for chunk in (2000, 120, 50, 1500, 2330):
        index.append(
            ids[held : held + chunk],
            matrix[held : held + chunk],
            scopes[held : held + chunk].tolist(),
            event_keys[held : held + chunk],
            [True] * chunk,
        )
        held += chunk
        archived = rng.choice(held, size=held // 20, replace=False)
        active[:held] = True
        active[archived] = False
        index.set_active((int(ids[i]), bool(active[i])) for i in range(held))
        for trial in range(24):
            query = _unit(matrix[int(rng.integers(held))] + 0.1 * rng.standard_normal(dim))
            as_of = (None, int(rng.integers(0, 1000)), int(rng.integers(0, 40)))[trial % 3]
            limit = (1, 10, 50, 200)[trial % 4]
            scope = "ab"[trial % 2]
            expected = _reference(
                matrix[:held], ids[:held], scopes[:held], ref_keys[:held], active[:held],
                query, scope, as_of, limit,
            )  # fmt: skip
            assert index.search(query, scope, as_of, limit) == expected, (held, trial)
    tied = index.search(matrix[3], str(scopes[3]), None, 2)
    if scopes[10] == scopes[3] and active[3] and active[10]:
        assert tied == [int(ids[10]), int(ids[3])]
    assert len(index) == count and index.max_id == int(ids[-1])
    assert bool(fetched) == store_rows
    if store_rows:  # candidates only, never the whole matrix
        assert max(fetched) < count // 2


def test_left_out_rows_that_could_win_are_rescored(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one candidate per slot, the int8 order alone would miss rows: the error bound
    must send them to exact rescoring."""
    monkeypatch.setattr(vectors, "_RESCORE", 1)
    rng = np.random.default_rng(7)
    dim, count = 32, 4000
    base = _unit(rng.standard_normal(dim))
    matrix = _unit(base + 0.02 * rng.standard_normal((count, dim)))  # all nearly equal
    ids = np.arange(1, count + 1, dtype=np.int64)
    index = ExactVectorIndex(dim)
    index.append(ids, matrix, ["s"] * count, [0] * count, [True] * count)
    everyone = np.ones(count, dtype=bool)
    zeros = np.zeros(count, dtype=np.int64)
    for _ in range(10):
        query = _unit(base + 0.05 * rng.standard_normal(dim))
        expected = _reference(matrix, ids, np.full(count, "s"), zeros, everyone, query, "s", 0, 20)
        assert index.search(query, "s", 0, 20) == expected


def test_empty_unknown_and_edge_cases() -> None:
    index = ExactVectorIndex(4)
    query = np.array([1, 0, 0, 0], dtype=np.float32)
    assert index.search(query, "s", None, 5) == []
    index.append(
        np.array([1, 2, 3]),
        np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=np.float32),  # a zero row
        ["s", "s", "s"],
        [5, None, 7],
        [True, True, False],
    )
    assert index.search(query, "other", None, 5) == []
    assert index.search(query, "s", None, 0) == []
    assert index.search(query, "s", None, 5) == [1, 2]  # 3 is archived; 2 is undated
    assert index.search(query, "s", 6, 5) == [1]
    assert index.search(query, "s", 4, 5) == []
    assert index.eligible(np.array([1, 2, 3, 9]), "s", 6).tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="ids must increase"):
        index.append(np.array([2]), np.ones((1, 4), np.float32), ["s"], [1], [True])
