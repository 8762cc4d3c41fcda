"""Per-category tables of a ``mempp bench`` run: each system's mean of a metric and its
difference to a reference system, with paired bootstrap 95% intervals (the bench's own
``mempp.bench.aggregate.paired_delta``, same resamples and seed), from the run's
``results.json``.

The bench's report gives paired differences overall for the window and recall@10 only; the
settings of a new leg are judged per category and at recall@50 too.

    python benchmarks/paired_table.py bench-out/locomo/results.json \
        --reference mempp-default --metrics recall@10 recall@50
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mempp.bench.aggregate import paired_delta, summarize


def _fmt(summary: Mapping[str, Any], *, signed: bool = False) -> str:
    if summary.get("mean") is None:
        return "-"
    sign = "+" if signed else ""
    return (
        f"{summary['mean'] * 100:{sign}.1f} "
        f"[{summary['lo'] * 100:{sign}.1f}, {summary['hi'] * 100:{sign}.1f}]"
    )


def tables(results: Mapping[str, Any], reference: str, metrics: Sequence[str]) -> str:
    rows = results["questions"]
    systems = list(dict.fromkeys(row["system"] for row in rows))
    if reference not in systems:
        raise SystemExit(f"reference system {reference!r} not in the run ({', '.join(systems)})")
    # Every system's rows come in the run's question order: the n-th rows are one question.
    by_system = {name: dict(enumerate(r for r in rows if r["system"] == name)) for name in systems}
    order = list(by_system[reference])
    categories = ["all", *results["categories"]]
    out = []
    for metric in metrics:
        out += [f"#### {metric} (paired difference to {reference}, 95% bootstrap)", ""]
        header = ["category", "n", reference] + [
            f"Δ {name}" for name in systems if name != reference
        ]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for category in categories:
            keys = [
                k
                for k in order
                if category == "all" or by_system[reference][k]["category"] == category
            ]
            ref = [by_system[reference][k].get(metric) for k in keys]
            cells = [category, str(len(keys)), _fmt(summarize(ref))]
            for name in systems:
                if name == reference:
                    continue
                mine = [by_system[name].get(k, {}).get(metric) for k in keys]
                cells.append(_fmt(paired_delta(mine, ref), signed=True))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "results",
        type=Path,
        nargs="+",
        help="results.json of one run; more runs of the same questions add their systems "
        "(but the reference) as <system>@<the run's folder name>",
    )
    parser.add_argument("--reference", default="mempp-default")
    parser.add_argument("--metrics", nargs="+", default=["recall@10", "recall@50"])
    args = parser.parse_args()
    first, *more = args.results
    results = json.loads(first.read_text(encoding="utf-8"))
    asked = [row["question"] for row in results["questions"] if row["system"] == args.reference]
    for path in more:
        other = json.loads(path.read_text(encoding="utf-8"))
        rows = other["questions"]
        if [r["question"] for r in rows if r["system"] == args.reference] != asked:
            raise SystemExit(f"{path}: not the same questions as {first}")
        label = path.resolve().parent.name
        results["questions"] += [
            {**row, "system": f"{row['system']}@{label}"}
            for row in rows
            if row["system"] != args.reference
        ]
    print(tables(results, args.reference, args.metrics))


if __name__ == "__main__":
    main()
