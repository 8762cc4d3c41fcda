"""Retrieval metrics, window recall and bootstrap aggregation against hand-computed values."""

from __future__ import annotations

import math

import pytest

from mempp.bench.aggregate import aggregate, bootstrap_ci, paired_delta, summarize
from mempp.bench.metrics import (
    WindowEntry,
    first_rank,
    ndcg_at,
    recall_at,
    reciprocal_rank,
    text_visible,
    window_recall,
)

RANKED = [{"x"}, {"a"}, {"y"}, {"b"}, {"z"}]
GOLD = ["a", "b", "c"]


def test_recall_at_k_is_the_share_of_gold_items() -> None:
    assert recall_at(RANKED, GOLD, 1) == 0.0
    assert recall_at(RANKED, GOLD, 2) == pytest.approx(1 / 3)
    assert recall_at(RANKED, GOLD, 4) == pytest.approx(2 / 3)
    assert recall_at(RANKED, GOLD, 50) == pytest.approx(2 / 3)
    assert recall_at(RANKED, [], 5) is None  # no gold: not scored
    # An entry carrying several items (a chunk) credits each of them.
    assert recall_at([{"a", "b"}, {"c"}], GOLD, 1) == pytest.approx(2 / 3)
    # Repeated gold ids count once.
    assert recall_at([{"a"}], ["a", "a"], 1) == 1.0


def test_reciprocal_rank() -> None:
    assert first_rank(RANKED, GOLD) == 2
    assert reciprocal_rank(RANKED, GOLD) == 0.5
    assert reciprocal_rank(RANKED, ["q"]) == 0.0
    assert reciprocal_rank(RANKED, []) is None


def test_ndcg_at_10_hand_computed() -> None:
    # Gold at ranks 2 and 4 of 3 gold items: DCG = 1/log2(3) + 1/log2(5);
    # ideal = 1/log2(2) + 1/log2(3) + 1/log2(4).
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(3) + 1 / 2
    assert ndcg_at(RANKED, GOLD, 10) == pytest.approx(dcg / ideal)
    assert ndcg_at([{"a"}, {"b"}, {"c"}], GOLD, 10) == pytest.approx(1.0)
    assert ndcg_at(RANKED, GOLD, 1) == 0.0
    # A chunk carrying every gold item at rank 1 is capped at 1.
    assert ndcg_at([{"a", "b", "c"}], GOLD, 10) == 1.0
    # A gold item seen again later gains nothing.
    assert ndcg_at([{"a"}, {"a"}], ["a", "b"], 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_window_recall_start_and_full() -> None:
    # Window of 100 characters: entry a is inside, b starts inside but runs past, c starts after.
    entries = [
        WindowEntry(0, 40, {"a": 0}),
        WindowEntry(42, 70, {"b": 0}),
        WindowEntry(114, 10, {"c": 0}),
    ]
    start, full = window_recall(entries, ["a", "b", "c", "d"], 100)
    assert start == pytest.approx(2 / 4)
    assert full == pytest.approx(1 / 4)
    # Starting exactly at the window's end is outside; ending exactly at it is inside.
    assert window_recall([WindowEntry(100, 5, {"a": 0})], ["a"], 100) == (0.0, 0.0)
    assert window_recall([WindowEntry(60, 40, {"a": 0})], ["a"], 100) == (1.0, 1.0)
    assert window_recall(entries, [], 100) is None


def test_window_recall_for_chunks_uses_item_offsets_and_parts() -> None:
    # A chunk at 50 whose second item starts 60 characters in: that item begins at 110.
    chunk = WindowEntry(50, 80, {"a": 3, "b": 60})
    start, _ = window_recall([chunk], ["a", "b"], 100)
    assert start == 0.5
    # Item s is split over two chunks: fully inside only when both fit in the window.
    first, second = WindowEntry(0, 30, {"s": 10}), WindowEntry(32, 30, {"s": 3})
    assert window_recall([first], ["s"], 100, {"s": 2}) == (1.0, 0.0)
    assert window_recall([first, second], ["s"], 100, {"s": 2}) == (1.0, 1.0)
    assert window_recall([first, second], ["s"], 50, {"s": 2}) == (1.0, 0.0)


def test_gold_text_visible_counts_characters_inside_the_window() -> None:
    # Headers of 10, 12 and 5 characters; record texts of 30, 58 and 5 characters.
    entries = [
        WindowEntry(0, 40, {"a": 0}, ((10, 0, 30),)),  # text 10..40: all 30 inside
        WindowEntry(42, 70, {"b": 0}, ((12, 0, 58),)),  # text 54..112: 46 of 58 inside
        WindowEntry(114, 10, {"c": 0}, ((5, 0, 5),)),  # starts after the window
    ]
    sizes = {"a": 30, "b": 58, "c": 5, "d": 7}  # d was not retrieved: 7 characters unseen
    assert text_visible(entries, ["a", "b", "c", "d"], 100, sizes) == pytest.approx(76 / 100)
    assert text_visible(entries, ["a"], 100, sizes) == 1.0
    assert text_visible(entries, ["b"], 60, sizes) == pytest.approx(6 / 58)
    assert text_visible(entries, ["b"], 54, sizes) == 0.0  # its text starts at the window's end
    assert text_visible(entries, [], 100, sizes) is None
    assert text_visible(entries, ["z"], 100, sizes) is None  # no characters to see at all


def test_gold_text_visible_for_excerpts_duplicates_and_chunks() -> None:
    # An excerpt of a 200-character record: record 0..50 at entry 10, record 120..150 at 70.
    excerpt = WindowEntry(0, 100, {"e": 0}, ((10, 0, 50), (70, 120, 30)))
    assert text_visible([excerpt], ["e"], 1000, {"e": 200}) == pytest.approx(80 / 200)
    assert text_visible([excerpt], ["e"], 90, {"e": 200}) == pytest.approx(70 / 200)
    # A record shown twice (overlapping parts) counts each of its characters once.
    twice = [
        WindowEntry(0, 60, {"f": 0}, ((0, 0, 50),)),
        WindowEntry(62, 60, {"f": 0}, ((0, 25, 50),)),
    ]
    assert text_visible(twice, ["f"], 1000, {"f": 100}) == pytest.approx(75 / 100)
    # Two items stored as one record (a skipped duplicate) each count the record's text.
    both = [WindowEntry(0, 30, {"g": 0, "h": 0}, ((5, 0, 20),))]
    assert text_visible(both, ["g", "h"], 15, {"g": 20, "h": 20}) == pytest.approx(20 / 40)
    # An entry that does not say which text it shows (a chunk) shows nothing measurable.
    assert text_visible([WindowEntry(0, 50, {"a": 0})], ["a"], 100, {"a": 30}) == 0.0


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    values = [0.0, 1.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75]
    first = bootstrap_ci(values, resamples=500, seed=7)
    assert first == bootstrap_ci(values, resamples=500, seed=7)
    assert first != bootstrap_ci(values, resamples=500, seed=8)
    low, high = first
    assert low <= sum(values) / len(values) <= high
    assert 0.0 <= low < high <= 1.0
    assert bootstrap_ci([], resamples=10) is None
    assert bootstrap_ci([0.4], resamples=10) == (0.4, 0.4)
    assert bootstrap_ci([1.0] * 5, resamples=100) == (1.0, 1.0)


def test_summarize_skips_missing_values() -> None:
    summary = summarize([1.0, None, 0.0], resamples=100)
    assert summary["mean"] == 0.5 and summary["n"] == 2
    assert summarize([None], resamples=10) == {"mean": None, "lo": None, "hi": None, "n": 0}


def test_paired_delta_uses_questions_scored_by_both() -> None:
    delta = paired_delta([1.0, 0.5, None, 1.0], [0.0, 0.5, 1.0, None], resamples=200)
    assert delta["n"] == 2 and delta["mean"] == 0.5
    same = paired_delta([0.3, 0.6], [0.3, 0.6], resamples=50)
    assert (same["mean"], same["lo"], same["hi"]) == (0.0, 0.0, 0.0)


def test_aggregate_is_question_weighted() -> None:
    rows = [
        {"category": "A", "recall@10": 1.0},
        {"category": "A", "recall@10": 1.0},
        {"category": "A", "recall@10": 1.0},
        {"category": "B", "recall@10": 0.0},
        {"category": "B", "recall@10": None},
    ]
    out = aggregate(rows, ["recall@10", "mrr"], ["A", "B"], resamples=100)
    assert out["overall"]["recall@10"]["mean"] == 0.75  # 3 of 4 scored questions, not (1+0)/2
    assert out["overall"]["recall@10"]["n"] == 4
    assert out["by_category"]["A"]["recall@10"]["mean"] == 1.0
    assert out["by_category"]["B"]["recall@10"]["n"] == 1
    assert "mrr" not in out["overall"]  # a metric no row has is left out
