"""Ingest throughput with and without the context index (issue 37): the first ``--items``
LoCoMo turns (chat: short, threaded) and OrgMemBench documents (long, threaded by channel or
ticket) written into a fresh SQLite store by ``Memory.add_many``, once without the optional
index ``context`` and once with it enabled beforehand under each ``--rules`` rule
(``text:DEPTH:CHARS`` or ``sum:DEPTH:DECAY``, as ``benchmarks/context_rules.py``; ``none``:
without it again), the same encoder every time.

    python benchmarks/bench_context_ingest.py --data /work/shared/datasets --items 600 \
        --rules text:2:400 text:2:150 sum:2:0.5

Prints records per second of each run and the ratio to the run without; the machine's load
is printed too, since on a shared machine it moves every figure.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from mempp import Memory
from mempp.bench import locomo, orgmembench
from mempp.encoders import default_embedder
from mempp.records import Document
from mempp.store.context import ContextRule


def _documents(benchmark: str, root: Path, items: int) -> list[Document]:
    loaded = (locomo if benchmark == "locomo" else orgmembench).load(root)
    return [
        Document.create(i.text, author=i.author, date=i.date, source=i.id, thread=i.thread)
        for i in loaded.items[:items]
    ]


def _rule(spec: str) -> ContextRule | None:
    if spec == "none":  # without the index again: the machine's drift shows
        return None
    kind, depth, value = spec.split(":")
    if kind == "text":
        return ContextRule("text", int(depth), chars=int(value))
    return ContextRule("sum", int(depth), decay=float(value))


def _rate(docs: list[Document], rule: ContextRule | None, folder: Path, embedder: object) -> float:
    path = folder / f"{'plain' if rule is None else rule.kind}-{time.monotonic_ns()}.db"
    with Memory(path, embedder=embedder) as memory:  # type: ignore[arg-type]
        if rule is not None:
            memory.enable_context(rule=rule)
        started = time.perf_counter()
        memory.add_many(docs, batch_size=64)
        return len(docs) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("MEMPP_DATASETS", ".")))
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--rules", nargs="+", default=["text:2:400"], metavar="RULE")
    parser.add_argument("--benchmarks", nargs="+", default=["locomo", "orgmembench"])
    args = parser.parse_args()
    embedder = default_embedder()
    embedder.embed(["warm up"])
    with tempfile.TemporaryDirectory() as folder:
        for benchmark in args.benchmarks:
            docs = _documents(benchmark, args.data, args.items)
            plain = _rate(docs, None, Path(folder), embedder)
            print(
                f"{benchmark}: {len(docs)} records, {plain:.1f} records/s without the context "
                f"index; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            for spec in args.rules:
                rule = _rule(spec)
                ctx = _rate(docs, rule, Path(folder), embedder)
                shown = "without the index" if rule is None else rule.describe()
                print(
                    f"{benchmark}: {spec} ({shown}): {ctx:.1f} records/s "
                    f"({ctx / plain:.2f}x); load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
