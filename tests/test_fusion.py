"""The ranking math as pure functions: weighted RRF and the recency reserve."""

from __future__ import annotations

import pytest

from mempp.fusion import Fused, rrf, select_with_reserve


def test_rrf_arithmetic_ranks_from_zero() -> None:
    fused = rrf({"lex": [10, 20], "vec": [20, 30]}, {"lex": 1.0, "vec": 4.0}, gamma=60)
    scores = {f.id: f.score for f in fused}
    assert scores[10] == pytest.approx(1 / 60)
    assert scores[20] == pytest.approx(1 / 61 + 4 / 60)
    assert scores[30] == pytest.approx(4 / 61)
    assert [f.id for f in fused] == [20, 30, 10]
    assert fused[0].leg_ranks == {"lex": 2, "vec": 1}


def test_rrf_ties_go_to_newer_ingest() -> None:
    fused = rrf({"lex": [5], "vec": [9]}, {"lex": 1.0, "vec": 1.0}, gamma=60)
    assert [f.id for f in fused] == [9, 5]
    assert fused[0].score == fused[1].score


def test_rrf_zero_weight_leg_is_switched_off() -> None:
    fused = rrf({"lex": [1, 2], "tag": [3]}, {"lex": 1.0, "tag": 0.0}, gamma=60)
    assert [f.id for f in fused] == [1, 2]
    assert all("tag" not in f.leg_ranks for f in fused)


def test_rrf_repeated_row_in_one_leg_counts_once() -> None:
    fused = rrf({"lex": [7, 7, 8]}, {"lex": 2.0}, gamma=60)
    assert [(f.id, f.leg_ranks) for f in fused] == [(7, {"lex": 1}), (8, {"lex": 3})]
    assert fused[0].score == pytest.approx(2 / 60)


def _keys(mapping: dict[int, int]):
    return lambda row: mapping[row]


def test_reserve_takes_latest_dated_of_the_rest() -> None:
    fused = [Fused(i, 1.0 / (i + 1)) for i in range(1, 9)]  # ids 1..8, in this order
    dates = {1: 5, 2: 1, 3: 2, 4: 80, 5: 10, 6: 70, 7: 90, 8: 3}
    chosen = select_with_reserve(
        fused, k=5, reserve=3, recency_key=_keys(dates), unmatched_fill=lambda exclude, n: []
    )
    assert [f.id for f in chosen.fused] == [1, 2]
    assert [f.id for f in chosen.reserved] == [7, 4, 6]


def test_reserve_dates_tie_to_newer_ingest() -> None:
    fused = [Fused(i, 1.0) for i in (1, 2, 3, 4)]
    chosen = select_with_reserve(
        fused, k=2, reserve=1, recency_key=lambda row: 7, unmatched_fill=lambda exclude, n: []
    )
    assert [f.id for f in chosen.reserved] == [4]


def test_reserve_falls_back_to_unmatched_rows() -> None:
    fused = [Fused(1, 0.5), Fused(2, 0.4), Fused(3, 0.3)]
    calls: list[tuple[set[int], int]] = []

    def fill(exclude: set[int], n: int) -> list[int]:
        calls.append((exclude, n))
        return [99, 98, 97][:n]

    chosen = select_with_reserve(
        fused, k=5, reserve=3, recency_key=lambda row: row, unmatched_fill=fill
    )
    assert [f.id for f in chosen.fused] == [1, 2]
    assert [f.id for f in chosen.reserved] == [3, 99, 98]
    assert calls == [({1, 2, 3}, 2)]
    assert chosen.reserved[1].score == 0.0


def test_reserve_zero_and_k_smaller_than_reserve() -> None:
    fused = [Fused(i, 1.0 / i) for i in range(1, 6)]

    def no_keys(row: int) -> int:
        raise AssertionError("no recency key is needed without recency slots")

    none = select_with_reserve(fused, 3, 0, recency_key=no_keys, unmatched_fill=lambda e, n: [])
    assert [f.id for f in none.fused] == [1, 2, 3] and none.reserved == []
    tiny = select_with_reserve(fused, 2, 3, recency_key=lambda r: r, unmatched_fill=lambda e, n: [])
    assert tiny.fused == [] and [f.id for f in tiny.reserved] == [5, 4]
