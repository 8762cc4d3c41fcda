"""Where a first-asked search's time goes at scale: each stage's start and end stamped
against the search's start (``mempp.search.stages.observing``), the thread it ran on, the
search's wall and process CPU time, for variants of the question encoder taking turns
search by search in one process on one store (the scale bench's cached store and questions).

    PYTHONPATH=src python benchmarks/bench_search_stamps.py \
        --path /tmp/scale-onnx/scale-100000-s1.db --queries 100 --variants two one

``two``: the default encoder (MiniLM on ONNX Runtime, two intra-op threads a run);
``one``: the same with one intra-op thread. Every search encodes its question (no held
vectors), under no as-of bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_scale import Corpus


def _encoder(variant: str) -> Any:
    from mempp.encoders import minilm_onnx

    if variant == "two":
        return minilm_onnx.OnnxMiniLMEmbedder()
    if variant == "one":
        original = minilm_onnx.run_threads
        minilm_onnx.run_threads = lambda: 1  # type: ignore[assignment]
        try:
            return minilm_onnx.OnnxMiniLMEmbedder()
        finally:
            minilm_onnx.run_threads = original  # type: ignore[assignment]
    raise SystemExit(f"--variants: no variant {variant!r} (two, one)")


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):6.2f} / {p95:6.2f}"


def merged(files: list[Path]) -> None:
    """Wall and CPU quantiles of the searches of several runs (bursts taking turns)."""
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    for file in files:
        run = json.loads(file.read_text())
        for variant, values in run["walls"].items():
            walls.setdefault(variant, []).extend(values)
            cpus.setdefault(variant, []).extend(run["cpus"][variant])
    for variant, values in walls.items():
        print(
            f"{variant}: {len(values)} searches, wall p50 / p95 {_quantiles(values)} ms, "
            f"process CPU {_quantiles(cpus[variant])} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", nargs="+", default=["two", "one"])
    parser.add_argument("--json", type=Path, help="also write the raw stamps here")
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="print the searches of these --json files together"
    )
    args = parser.parse_args()
    if args.merge:
        merged(args.merge)
        return

    if args.path is None:
        parser.error("--path is required (unless --merge)")
    import mempp
    from mempp import Memory
    from mempp.search import stages

    print(f"mempp from {Path(mempp.__file__).parent}; load average {os.getloadavg()}")
    memories: dict[str, Any] = {}
    for variant in args.variants:
        embedder = _encoder(variant)
        location = args.path if not memories else next(iter(memories.values())).store
        memories[variant] = Memory(location, embedder=embedder, recent_questions=0)
    first = next(iter(memories.values()))
    first.warm()
    questions = Corpus(args.seed).questions(args.queries + 5)
    for memory in memories.values():  # the first searches of each (lazy set-ups) untimed
        for question in questions[-5:]:
            memory.search(question + " warm-up")
    walls: dict[str, list[float]] = {v: [] for v in memories}
    cpus: dict[str, list[float]] = {v: [] for v in memories}
    stamps: dict[str, dict[str, list[tuple[float, float]]]] = {v: {} for v in memories}
    threads: dict[str, dict[str, set[str]]] = {v: {} for v in memories}
    order = list(memories)
    for number, question in enumerate(questions[: args.queries]):
        for variant in order if number % 2 == 0 else order[::-1]:
            seen: list[tuple[str, int, int, str]] = []

            def observe(name: str, start: int, end: int, attributes: Any) -> None:
                seen.append((name, start, end, threading.current_thread().name))  # noqa: B023

            cpu = time.process_time()
            begun = time.time_ns()
            with stages.observing(observe):
                memories[variant].search(question)
            ended = time.time_ns()
            cpus[variant].append((time.process_time() - cpu) * 1e3)
            walls[variant].append((ended - begun) / 1e6)
            for name, start, end, thread in seen:
                stamps[variant].setdefault(name, []).append(
                    ((start - begun) / 1e6, (end - begun) / 1e6)
                )
                threads[variant].setdefault(name, set()).add(thread)
    print(f"load average at the end {os.getloadavg()}")
    for variant in memories:
        print(
            f"\n{variant}: search wall p50 / p95 {_quantiles(walls[variant])} ms, "
            f"process CPU {_quantiles(cpus[variant])} ms"
        )
        print(f"  {'stage':<14} {'start p50':>9} {'end p50':>8} {'took p50 / p95':>16}  thread")
        for name, spans in sorted(
            stamps[variant].items(), key=lambda kv: statistics.median(s for s, _ in kv[1])
        ):
            starts = [s for s, _ in spans]
            ends = [e for _, e in spans]
            took = [e - s for s, e in spans]
            print(
                f"  {name:<14} {statistics.median(starts):9.2f} {statistics.median(ends):8.2f} "
                f"{_quantiles(took):>16}  {','.join(sorted(threads[variant][name]))}"
                f"{'' if len(spans) == len(walls[variant]) else f'  ({len(spans)} searches)'}"
            )
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "cpus": cpus, "stamps": stamps}))
    for memory in memories.values():
        memory.close()


if __name__ == "__main__":
    main()
