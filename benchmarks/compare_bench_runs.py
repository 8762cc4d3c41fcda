"""Paired difference between two ``mempp bench`` runs of the same benchmark (say two encoders).

Reads each run's ``results.json`` and prints, per system both ran, each metric's mean in either
run and the mean per-question difference (second minus first) with its paired bootstrap
interval, in points. Used for the int8 encoder's recall cost (``docs/benchmarks.md``)::

    MEMPP_ENCODER=minilm python -m mempp.bench orgmembench --out runs/fp32 ...
    MEMPP_ENCODER=minilm-int8 python -m mempp.bench orgmembench --out runs/int8 ...
    python benchmarks/compare_bench_runs.py runs/fp32/results.json runs/int8/results.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mempp.bench.aggregate import paired_delta

_METRICS = ("window", "recall@1", "recall@5", "recall@10", "recall@20", "recall@50", "mrr")


def _rows(path: Path) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    run = json.loads(path.read_text(encoding="utf-8"))
    rows = {(row["system"], row["question"]): row for row in run["questions"]}
    return run, rows


def _points(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="results.json of the reference run")
    parser.add_argument("second", type=Path, help="results.json of the compared run")
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args(argv)

    first, rows_a = _rows(args.first)
    second, rows_b = _rows(args.second)
    name, other = first["benchmark"]["name"], second["benchmark"]["name"]
    if name != other:
        parser.error(f"different benchmarks: {name} and {other}")
    print(
        f"{name}: {first['run']['encoder']['name']} -> "
        f"{second['run']['encoder']['name']} (second minus first, points, paired bootstrap 95%)"
    )
    systems = [s["name"] for s in first["systems"] if any(s["name"] == k for k, _ in rows_b)]
    print("| system | metric | first | second | difference [95% interval] | questions |")
    print("|---|---|---|---|---|---|")
    for system in systems:
        questions = sorted(q for s, q in rows_a if s == system and (s, q) in rows_b)
        for metric in _METRICS:
            a = [rows_a[system, q].get(metric) for q in questions]
            b = [rows_b[system, q].get(metric) for q in questions]
            delta = paired_delta(b, a, resamples=args.resamples)
            if delta["mean"] is None:
                continue
            mean_a = [x for x in a if x is not None]
            mean_b = [x for x in b if x is not None]
            print(
                f"| {system} | {metric} | {_points(sum(mean_a) / len(mean_a))} | "
                f"{_points(sum(mean_b) / len(mean_b))} | {100 * delta['mean']:+.1f} "
                f"[{100 * (delta['lo'] or 0):+.1f}, {100 * (delta['hi'] or 0):+.1f}] | "
                f"{delta['n']} |"
            )


if __name__ == "__main__":
    main()
