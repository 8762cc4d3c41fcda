"""Bm25Index's flat postings: the same scores and rankings however appends are merged."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mempp import bm25
from mempp.bm25 import Bm25Index


def _batches(rng: np.random.Generator, rows: int, terms: int, parts: int):
    """Random postings for rows 1..rows in ``parts`` appends, as FTS5 hands them over."""
    edges = np.linspace(0, rows, parts + 1).astype(int)
    for low, high in itertools.pairwise(edges):
        postings = {}
        for term in range(terms):
            chosen = np.flatnonzero(rng.random(high - low) < 1.5 / (term + 1) ** 0.8)
            if len(chosen):
                ids = (low + 1 + chosen).astype(np.int64)
                postings[f"t{term}"] = (ids, rng.integers(1, 300, len(ids)).astype(np.float64))
        yield postings, int(high - low), int(high)


def _reference(batches, query: list[str], conjunctive: bool, limit: int) -> list[int]:
    per_term: dict[str, dict[int, float]] = {}
    length: dict[int, float] = {}
    rows = 0
    for postings, new_rows, _ in batches:
        rows += new_rows
        for term, (ids, tf) in postings.items():
            for i, f in zip(ids.tolist(), tf.tolist(), strict=True):
                per_term.setdefault(term, {})[i] = f
                length[i] = length.get(i, 0.0) + f
    avgdl = sum(length.values()) / rows
    score: dict[int, float] = {}
    hits: dict[int, int] = {}
    for term in query:
        found = per_term.get(term, {})
        idf = math.log((rows - len(found) + 0.5) / (len(found) + 0.5))
        idf = 1e-6 if idf <= 0 else idf
        for i, f in found.items():
            part = idf * (f * 2.2) / (f + 1.2 * (0.25 + 0.75 * length[i] / avgdl))
            score[i] = score.get(i, 0.0) + part
            hits[i] = hits.get(i, 0) + 1
    need = len(query) if conjunctive else 1
    chosen = [i for i in score if hits[i] >= need and i % 3]  # eligibility: ids not % 3
    return sorted(chosen, key=lambda i: (-score[i], -i))[:limit]


@pytest.mark.parametrize("merge", ["never", "every append"])
def test_rankings_and_postings_match_a_plain_reference(
    monkeypatch: pytest.MonkeyPatch, merge: str
) -> None:
    if merge == "every append":
        monkeypatch.setattr(bm25, "_MIN_DELTA", 0)
        monkeypatch.setattr(bm25, "_DELTA_SHARE", 10**9)
    rng = np.random.default_rng(3)
    batches = list(_batches(rng, rows=3000, terms=60, parts=5))
    index = Bm25Index()
    for postings, new_rows, max_id in batches:
        index.add_postings(postings, new_rows, max_id)
    if merge == "every append":
        assert index._delta == {} and index._ids.dtype == np.int32
        assert index._tf.dtype == np.uint16  # frequencies up to 299
    for trial in range(40):
        query = [f"t{int(t)}" for t in rng.integers(0, 70, int(rng.integers(1, 5)))]
        conjunctive = trial % 4 == 0
        limit = (5, 50, 500)[trial % 3]
        got = index.search(query, conjunctive, lambda ids: ids % 3 != 0, limit)
        assert got == _reference(batches, query, conjunctive, limit), (trial, query)
    ids, tf = index.postings("t0")
    expected = np.concatenate([p["t0"][0] for p, _, _ in batches])
    assert ids.tolist() == expected.tolist() and tf.dtype == np.float64
    assert index.postings("absent")[0].size == 0
    lengths = np.zeros(3001)
    for postings, _, _ in batches:
        for ids, tf in postings.values():
            lengths[ids] += tf
    assert index.lengths(np.arange(1, 3001)).tolist() == lengths[1:].tolist()
