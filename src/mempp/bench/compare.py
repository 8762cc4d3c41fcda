"""Two runs of one benchmark side by side: per metric and category, with paired intervals.

A run's report compares its systems with each other over one store; comparing two *runs*
(two encoders, each with its own store, or one system before and after a settings change)
needs the questions paired across the two ``results.json`` files. ``compare`` pairs a
system's rows by question id, keeps only questions both runs scored, and gives each metric's
mean in both runs and the mean difference with a paired bootstrap interval (the same
resampled question sets for both, ``mempp.bench.aggregate.paired_delta``), overall and per
category. ``python -m mempp.bench.compare BASE.json OTHER.json`` prints it as Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mempp.bench.aggregate import DEFAULT_RESAMPLES, DEFAULT_SEED, paired_delta, summarize
from mempp.errors import InvalidInput

DEFAULT_METRICS = ("window", "recall@10", "recall@50")


def load(path: Path) -> dict[str, Any]:
    """A run's ``results.json`` (or the folder holding it)."""
    target = path / "results.json" if path.is_dir() else path
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except OSError as error:
        raise InvalidInput(f"{target}: cannot read ({error.strerror or error})") from None
    except ValueError as error:
        raise InvalidInput(f"{target}: not JSON ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise InvalidInput(f"{target}: not a mempp bench results.json (no 'questions' list)")
    return data


def _rows(results: Mapping[str, Any], system: str, label: str) -> dict[str, Mapping[str, Any]]:
    rows = {row["question"]: row for row in results["questions"] if row["system"] == system}
    if not rows:
        names = sorted({row["system"] for row in results["questions"]})
        raise InvalidInput(f"{label}: no rows of system {system!r} (it has: {', '.join(names)})")
    return rows


def compare(
    base: Mapping[str, Any],
    other: Mapping[str, Any],
    *,
    system: str = "mempp-default",
    other_system: str | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """``{"questions", "unpaired", "overall", "by_category"}``; each metric entry holds
    ``base``, ``other`` (summaries) and ``delta`` (other - base, paired)."""
    if base["benchmark"]["name"] != other["benchmark"]["name"]:
        raise InvalidInput(
            f"runs of different benchmarks: {base['benchmark']['name']} and "
            f"{other['benchmark']['name']}"
        )
    first = _rows(base, system, "base")
    second = _rows(other, other_system or system, "other")
    shared = [question for question in first if question in second]
    if not shared:
        raise InvalidInput("the two runs share no question (another half or --limit?)")
    unpaired = len(set(first) ^ set(second))

    def entry(questions: list[str], metric: str) -> dict[str, Any]:
        a = [first[q].get(metric) for q in questions]
        b = [second[q].get(metric) for q in questions]
        return {
            "base": summarize(a, resamples=resamples, seed=seed),
            "other": summarize(b, resamples=resamples, seed=seed),
            "delta": paired_delta(b, a, resamples=resamples, seed=seed),
        }

    categories = list(base.get("categories") or {})
    by_category: dict[str, Any] = {}
    for category in categories:
        members = [q for q in shared if first[q]["category"] == category]
        if members:
            by_category[category] = {
                "n": len(members),
                **{metric: entry(members, metric) for metric in metrics},
            }
    return {
        "questions": len(shared),
        "unpaired": unpaired,
        "overall": {metric: entry(shared, metric) for metric in metrics},
        "by_category": by_category,
    }


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _delta(summary: Mapping[str, Any]) -> str:
    if summary["mean"] is None:
        return "–"
    return f"{100 * summary['mean']:+.1f} [{100 * summary['lo']:+.1f}, {100 * summary['hi']:+.1f}]"


def markdown(
    comparison: Mapping[str, Any], metrics: Sequence[str], base_label: str, other_label: str
) -> str:
    """One table: a row per metric overall, then per category and metric."""
    lines = [
        f"{comparison['questions']} paired questions"
        + (
            f" ({comparison['unpaired']} in one run only, left out)"
            if comparison["unpaired"]
            else ""
        )
        + f"; {other_label} − {base_label}, 95% paired bootstrap interval",
        "",
        f"| scope | n | metric | {base_label} | {other_label} | difference |",
        "|---|---|---|---|---|---|",
    ]
    groups = [("overall", comparison["questions"], comparison["overall"])]
    groups += [(c, v["n"], v) for c, v in comparison["by_category"].items()]
    for scope, n, values in groups:
        for metric in metrics:
            cell = values[metric]
            lines.append(
                f"| {scope} | {n} | {metric} | {_pct(cell['base']['mean'])} | "
                f"{_pct(cell['other']['mean'])} | {_delta(cell['delta'])} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mempp.bench.compare",
        description="Compare one system across two bench runs (e.g. two encoders), paired by "
        "question: means and the paired bootstrap interval of the difference, per category.",
    )
    parser.add_argument("base", type=Path, help="results.json of the reference run (or its folder)")
    parser.add_argument("other", type=Path, help="results.json of the run compared with it")
    parser.add_argument("--system", default="mempp-default", help="default: mempp-default")
    parser.add_argument("--other-system", default=None, help="default: the same as --system")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS))
    parser.add_argument("--labels", nargs=2, default=["base", "other"], metavar=("BASE", "OTHER"))
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    try:
        comparison = compare(
            load(args.base),
            load(args.other),
            system=args.system,
            other_system=args.other_system,
            metrics=args.metrics,
            resamples=args.resamples,
            seed=args.seed,
        )
    except InvalidInput as error:
        print(f"mempp bench compare: {error}", file=sys.stderr)
        return 2
    print(markdown(comparison, args.metrics, *args.labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
