"""First-asked search latency of two or more checkouts, taking turns process by process.

Not a test: run it, read the figures. The scale bench's ``--compare-src`` measures one
checkout after the other, minutes apart, so on a shared machine a drift in its speed reads
as a difference between them. Here each round runs every checkout once, in a fresh process
on the same cached store (``bench_scale.py --build-only`` makes it), ``--queries`` questions
a process, each asked for the first time there; the figures are per round and per checkout,
so a drift shows as rounds that differ, not as checkouts that do.

    PYTHONPATH=src python benchmarks/bench_checkouts_interleaved.py \\
        --store /work/scale-cache/scale-100000-s1.db --srcs /work/old/src src --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_CHILD = """
import json, sys, time
sys.path.insert(0, {benchmarks!r})
from bench_scale import Corpus
from mempp import Memory
memory = Memory({store!r})
memory.warm()
memory.search("a question to start the threads")
times = []
for question in Corpus({seed}).questions({queries}):
    started = time.perf_counter()
    memory.search(question)
    times.append((time.perf_counter() - started) * 1000)
memory.close()
print(json.dumps(times))
"""


def _p50_p95(times: list[float]) -> str:
    ordered = sorted(times)
    return f"{statistics.median(ordered):.1f} / {ordered[int(0.95 * (len(ordered) - 1))]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a cached scale-bench store")
    parser.add_argument("--srcs", type=Path, nargs="+", required=True, help="src/ folders")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=120)
    args = parser.parse_args()
    if not args.store.exists():
        parser.error(f"--store: {args.store} does not exist (bench_scale.py --build-only)")
    for src in args.srcs:
        if not (src / "mempp").is_dir():
            parser.error(f"--srcs: {src} holds no mempp package")
    benchmarks = str(Path(__file__).resolve().parent)
    every: dict[Path, list[float]] = {src: [] for src in args.srcs}
    for round_number in range(args.rounds):
        load = os.getloadavg()[0]
        figures = []
        for src in args.srcs:
            code = _CHILD.format(
                benchmarks=benchmarks,
                store=str(args.store),
                seed=100 + round_number,  # other questions each round, the same per checkout
                queries=args.queries,
            )
            env = {**os.environ, "PYTHONPATH": str(src.resolve())}
            started = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
            times = json.loads(out.stdout.strip().splitlines()[-1])
            every[src] += times
            figures.append(f"{src}: {_p50_p95(times)} ({time.perf_counter() - started:.0f} s)")
        print(f"round {round_number + 1} (load {load:.1f}), p50 / p95 ms: " + "; ".join(figures))
    print("all rounds: " + "; ".join(f"{src}: {_p50_p95(t)}" for src, t in every.items()))


if __name__ == "__main__":
    main()
