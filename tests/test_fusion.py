"""The ranking math as pure functions: weighted RRF, thread context and the recency reserve."""

from __future__ import annotations

import pytest

from mempp.search.fusion import Fused, add_date_leg, add_thread_context, rrf
from mempp.search.reserve import recency, select_with_reserve
from mempp.settings import PRESETS, Settings, preset


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
    return lambda row: recency(mapping[row], 0, undated_last=False)


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
        fused, k=2, reserve=1, recency_key=lambda row: (1, 7), unmatched_fill=lambda exclude, n: []
    )
    assert [f.id for f in chosen.reserved] == [4]


def test_reserve_falls_back_to_unmatched_rows() -> None:
    fused = [Fused(1, 0.5), Fused(2, 0.4), Fused(3, 0.3)]
    calls: list[tuple[set[int], int]] = []

    def fill(exclude: set[int], n: int) -> list[int]:
        calls.append((exclude, n))
        return [99, 98, 97][:n]

    chosen = select_with_reserve(
        fused, k=5, reserve=3, recency_key=lambda row: (1, row), unmatched_fill=fill
    )
    assert [f.id for f in chosen.fused] == [1, 2]
    assert [f.id for f in chosen.reserved] == [3, 99, 98]
    assert calls == [({1, 2, 3}, 2)]
    assert chosen.reserved[1].score == 0.0


def test_reserve_zero_and_k_smaller_than_reserve() -> None:
    fused = [Fused(i, 1.0 / i) for i in range(1, 6)]

    def no_keys(row: int) -> tuple[int, int]:
        raise AssertionError("no recency key is needed without recency slots")

    none = select_with_reserve(fused, 3, 0, recency_key=no_keys, unmatched_fill=lambda e, n: [])
    assert [f.id for f in none.fused] == [1, 2, 3] and none.reserved == []
    tiny = select_with_reserve(
        fused, 2, 3, recency_key=lambda r: (1, r), unmatched_fill=lambda e, n: []
    )
    assert tiny.fused == [] and [f.id for f in tiny.reserved] == [5, 4]


def test_thread_context_lends_decaying_shares_of_fused_scores() -> None:
    fused = [Fused(1, 0.8, {"lex": 1}), Fused(2, 0.4, {"vec": 1}), Fused(3, 0.1, {"lex": 2})]
    # 1 -> 2 -> 4 is one thread; 3 -> 5 another; 6 is in no fused row's thread window
    followers = {1: [2, 4], 2: [4], 3: [5]}
    out = add_thread_context(fused, followers, weight=0.5)
    scores = {f.id: f.score for f in out}
    assert scores == pytest.approx({1: 0.8, 2: 0.8, 4: 0.2 + 0.2, 3: 0.1, 5: 0.05})
    # only fused scores are lent: 2's received 0.4 is not passed on to 4
    assert [f.id for f in out] == [2, 1, 4, 3, 5]  # 2 ties 1 and is newer
    by_id = {f.id: f for f in out}
    assert by_id[2].leg_ranks == {"vec": 1, "thread": 1}
    assert by_id[4].leg_ranks == {"thread": 1}  # 0.2 from row 1 (position 1) ties row 2's
    assert by_id[5].leg_ranks == {"thread": 3}
    assert by_id[1].leg_ranks == {"lex": 1}


def test_thread_context_off_or_without_threads_changes_nothing() -> None:
    fused = [Fused(1, 0.8, {"lex": 1}), Fused(2, 0.4, {"vec": 1})]
    assert add_thread_context(fused, {1: [2]}, weight=0.0) == fused
    assert add_thread_context(fused, {}, weight=0.5) == fused
    assert add_thread_context([], {}, weight=0.5) == []


def test_date_leg_ranks_dated_rows_by_fused_order_then_newest() -> None:
    fused = [Fused(1, 0.5, {"lex": 1}), Fused(2, 0.3, {"lex": 2}), Fused(3, 0.2, {"vec": 1})]
    # rows 2 and 3 are dated in the named span; 7 and 9 too, but no leg found them
    out = add_date_leg(fused, [9, 3, 7, 2], weight=1.0, gamma=5.0, limit=3)
    scores = {f.id: f.score for f in out}
    assert scores == pytest.approx({1: 0.5, 2: 0.3 + 1 / 5, 3: 0.2 + 1 / 6, 9: 1 / 7})
    assert 7 not in scores  # beyond the limit of 3 dated rows
    assert [f.id for f in out] == [2, 1, 3, 9]
    by_id = {f.id: f for f in out}
    assert by_id[2].leg_ranks == {"lex": 2, "date": 1}
    assert by_id[9].leg_ranks == {"date": 3}
    assert add_date_leg(fused, [], 1.0, 5.0, 10) == fused
    assert add_date_leg(fused, [2], 0.0, 5.0, 10) == fused


def test_undated_rows_come_last_in_the_reserve_only_when_asked() -> None:
    fused = [Fused(i, 1.0 / i) for i in range(1, 6)]
    # rows 4 and 5 are undated and were ingested long after every event date
    events = {1: 10, 2: 20, 3: 30, 4: None, 5: None}

    def pick(undated_last: bool) -> list[int]:
        chosen = select_with_reserve(
            fused,
            k=3,
            reserve=2,
            recency_key=lambda row: recency(events[row], 1000 + row, undated_last=undated_last),
            unmatched_fill=lambda e, n: [],
        )
        return [f.id for f in chosen.reserved]

    assert pick(undated_last=False) == [5, 4]
    assert pick(undated_last=True) == [3, 2]


@pytest.mark.parametrize(
    ("k", "slots"), [(1, 0), (3, 0), (10, 0), (16, 0), (17, 1), (20, 1), (34, 2), (50, 3), (100, 6)]
)
def test_scaled_reserve_is_proportional_to_k(k: int, slots: int) -> None:
    assert preset("default").reserve_slots(k) == slots


@pytest.mark.parametrize("name", [name for name in PRESETS if name.startswith("paper")])
def test_paper_presets_keep_the_papers_reserve(name: str) -> None:
    settings = preset(name)
    assert [settings.reserve_slots(k) for k in (1, 2, 3, 5, 50, 100)] == [1, 2, 3, 3, 3, 3]
    assert not settings.undated_last


def test_scaled_reserve_follows_the_settings_own_k() -> None:
    settings = Settings(k=10, reserve=2, reserve_rule="scaled")
    assert [settings.reserve_slots(k) for k in (4, 5, 10, 20)] == [0, 1, 2, 4]
    assert settings.undated_last
