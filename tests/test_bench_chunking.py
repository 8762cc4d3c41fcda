"""RAG-N chunking: fixed token counts, no text lost, and which items each chunk carries."""

from __future__ import annotations

import numpy as np
import pytest

from mempp.bench.chunking import chunk_history, parts_per_item, whitespace_spans
from mempp.bench.metrics import recall_at, window_recall
from mempp.bench.retrieve import RagIndex

ENTRIES = [
    ("a", "one two three"),  # tokens 0-2
    ("b", "four five"),  # tokens 3-4
    ("c", "six seven eight nine"),  # tokens 5-8
]


def test_chunks_hold_n_tokens_and_cover_the_history() -> None:
    chunks = chunk_history(ENTRIES, 4, whitespace_spans)
    assert [c.text for c in chunks] == [
        "one two three\n\nfour",
        "five\n\nsix seven eight",
        "nine",
    ]
    assert [len(whitespace_spans(c.text)) for c in chunks] == [4, 4, 1]
    history = "\n\n".join(text for _, text in ENTRIES)
    assert [c.start for c in chunks] == [0, history.index("five"), history.index("nine")]
    rebuilt = "".join(
        history[c.start : (chunks[i + 1].start if i + 1 < len(chunks) else len(history))]
        for i, c in enumerate(chunks)
    )
    assert rebuilt == history


def test_a_chunk_carries_every_item_it_overlaps() -> None:
    chunks = chunk_history(ENTRIES, 4, whitespace_spans)
    assert [set(c.items) for c in chunks] == [{"a", "b"}, {"b", "c"}, {"c"}]
    # Offsets: where each item's text begins inside the chunk (0 if it began earlier).
    assert chunks[0].items == {"a": 0, "b": len("one two three\n\n")}
    assert chunks[1].items == {"b": 0, "c": len("five\n\n")}
    assert parts_per_item(chunks) == {"a": 1, "b": 2, "c": 2}


def test_chunk_size_larger_than_history_and_empty_entries() -> None:
    chunks = chunk_history([("a", "x y"), ("e", ""), ("b", "z")], 100, whitespace_spans)
    assert len(chunks) == 1
    assert chunks[0].items == {"a": 0, "b": len("x y\n\n\n\n")}
    assert chunk_history([], 10, whitespace_spans) == []
    with pytest.raises(ValueError):
        chunk_history(ENTRIES, 0, whitespace_spans)


def test_rag_index_ranks_chunks_and_credits_overlapped_gold() -> None:
    chunks = {"s": chunk_history(ENTRIES, 4, whitespace_spans)}
    vectors = {"s": np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)}
    keys = {("s", "a"): 10, ("s", "b"): 20, ("s", "c"): 30}
    index = RagIndex(chunks, vectors, keys)
    result = index.retrieve("s", np.array([0.0, 1.0], dtype=np.float32), None, 10)
    assert result.ranked == [frozenset({"b", "c"}), frozenset({"c"}), frozenset({"a", "b"})]
    assert recall_at(result.ranked, ["b"], 1) == 1.0
    assert result.evidence.startswith("1. five\n\nsix")
    # Item c is split over chunks 2 and 3: only fully inside when both are in the window.
    assert window_recall(result.window, ["c"], 10_000, result.parts) == (1.0, 1.0)
    assert window_recall(result.window, ["c"], 25, result.parts) == (1.0, 0.0)
    # As of 20, only the first chunk (items dated 10 and 20) is in scope.
    scoped = index.retrieve("s", np.array([0.0, 1.0], dtype=np.float32), 20, 10)
    assert scoped.ranked == [frozenset({"a", "b"})]
