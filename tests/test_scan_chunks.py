"""The vector scan cut into chunks that the searching thread and the scan pool take in turn
(``mempp.index.vectors``): the same approximations, bit for bit, as one call over every row;
a search never waits for a pool thread that has not started; an error in any chunk reaches
the caller; and on both engines a search returns exactly what the unsplit scan returns."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from mempp import Memory
from mempp.dates import parse_as_of
from mempp.index import vectors
from mempp.index.vectors import ExactVectorIndex

from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def _index(count: int, dim: int = 32, seed: int = 3) -> tuple[ExactVectorIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = _unit(rng.standard_normal((count, dim)))
    index = ExactVectorIndex(dim)
    dates = (np.arange(count) * 7 % 500).tolist()
    index.append(np.arange(1, count + 1), rows, ["s"] * count, dates, [True] * count)
    return index, _unit(rng.standard_normal((30, dim)))


class _HeldPool:
    """A pool whose threads have not started yet: what it is handed runs only on release."""

    def __init__(self) -> None:
        self.held: list[tuple[Any, tuple[Any, ...]]] = []

    def submit(self, fn: Any, *args: Any) -> Future[None]:
        self.held.append((fn, args))
        return Future()

    def release(self) -> None:
        for fn, args in self.held:
            fn(*args)
        self.held.clear()


@pytest.mark.parametrize(("rows", "threads"), [(5000, 2), (5003, 3), (20_000, 4)])
def test_chunked_approximations_equal_one_call_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, rows: int, threads: int
) -> None:
    index, queries = _index(rows)
    scan = index._snapshot()
    monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 1000)
    monkeypatch.setattr(vectors, "_CHUNK_ROWS", 300)  # many chunks, of unequal lengths
    monkeypatch.setattr(vectors, "SCAN_THREADS", threads)
    for query in queries:
        codes = vectors._quantized(query)[0]
        whole = np.empty(rows, dtype=np.float32)
        vectors._score(scan.codes[:rows], codes, scan.scales[:rows], whole)
        for start, stop in ((0, rows), (17, rows - 5), (1000, 4000)):
            got = index._approximate(scan, codes, start, stop)
            assert got.tobytes() == whole[start:stop].tobytes()


def test_a_search_does_not_wait_for_a_pool_thread_that_has_not_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a busy machine a pool thread may start milliseconds late: the searching thread
    scores every chunk itself meanwhile. (Two fixed halves waited for it: this search would
    never end.)"""
    index, queries = _index(6000)
    expected = [index.search(q, "s", None, 10) for q in queries]
    expected_bound = [index.search(q, "s", 300, 10) for q in queries]
    pool = _HeldPool()
    monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 1000)
    monkeypatch.setattr(vectors, "_CHUNK_ROWS", 250)
    monkeypatch.setattr(vectors, "SCAN_THREADS", 2)
    monkeypatch.setattr(vectors, "_scan_pool", lambda: pool)
    got: list[list[int]] = []
    got_bound: list[list[int]] = []

    def run() -> None:
        for q in queries:
            got.append(index.search(q, "s", None, 10))
            got_bound.append(index.search(q, "s", 300, 10))

    searcher = threading.Thread(target=run, daemon=True)
    searcher.start()
    searcher.join(timeout=30)
    assert not searcher.is_alive(), "the search waited for a pool thread that never started"
    assert got == expected and got_bound == expected_bound
    assert pool.held  # the helpers were asked for, and find nothing left when they start
    pool.release()


def test_an_error_in_any_chunk_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    index, queries = _index(4000)
    monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 1000)
    monkeypatch.setattr(vectors, "_CHUNK_ROWS", 250)
    monkeypatch.setattr(vectors, "SCAN_THREADS", 2)
    score = vectors._score
    calls = 0

    def failing(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise MemoryError("chunk 5")
        score(*args)

    monkeypatch.setattr(vectors, "_score", failing)
    with pytest.raises(MemoryError, match="chunk 5"):
        index.search(queries[0], "s", None, 10)
    monkeypatch.setattr(vectors, "_score", score)
    assert index.search(queries[0], "s", None, 10)  # and the next search works


class _RandomEmbedder:
    """A unit vector per text drawn from a generator seeded by the text's checksum: every row
    a distinct direction, so the vector leg's order depends on every scanned score."""

    name, dim = "random-by-text/32", 32

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [
            np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim) for t in texts
        ]
        return _unit(np.array(rows).reshape(len(texts), self.dim))


def test_both_engines_return_what_the_unsplit_scan_returns(
    engine_location: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    words = ["alpha", "beta", "gamma", "delta", "plan", "note"]
    questions = ["alpha plan", "beta gamma", "delta", "note on alpha", "what about plan"]
    with Memory(engine_location, embedder=_RandomEmbedder()) as memory:
        memory.add_many(
            [
                {
                    "text": f"{words[i % 6]} {words[(i * 5) % 6]} item {i}",
                    "date": f"2024-0{1 + i % 9}-{1 + i % 28:02d}",
                }
                for i in range(400)
            ]
        )
    runs: dict[str, list[list[tuple[int, float]]]] = {}
    shared: list[int] = []
    wait = vectors._SharedScan.wait

    def counted_wait(self: vectors._SharedScan) -> None:
        shared.append(1)
        wait(self)

    monkeypatch.setattr(vectors._SharedScan, "wait", counted_wait)
    for label, threads in (("one part", 1), ("chunks", 3)):
        monkeypatch.setattr(vectors, "SCAN_THREADS", threads)
        monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 64)
        monkeypatch.setattr(vectors, "_CHUNK_ROWS", 20)
        with Memory(engine_location, embedder=_RandomEmbedder(), recent_questions=0) as memory:
            runs[label] = [
                [(h.id, h.score) for h in memory.search(q, k=20, as_of=as_of)]
                + [(row, 0.0) for row in memory.store.nearest(memory.scope, vector, bound, 50)]
                for q, vector in zip(questions, _RandomEmbedder().embed(questions), strict=True)
                for as_of, bound in ((None, None), ("2024-05-01", parse_as_of("2024-05-01")))
            ]
        if label == "one part":
            assert not shared
    assert shared  # the engine's vector leg scanned in chunks
    assert runs["chunks"] == runs["one part"]
    assert all(runs["one part"])
