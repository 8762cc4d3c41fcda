"""Ingest throughput with and without the context index (issue 37): the first ``--items``
LoCoMo turns (chat: short, threaded) and OrgMemBench documents (long, threaded by channel or
ticket) written into a fresh SQLite store by ``Memory.add_many``, once with the optional
index ``context`` enabled beforehand and once without, the same encoder both times.

    python benchmarks/bench_context_ingest.py --data /work/shared/datasets --items 600

Prints records per second of each run and the ratio; the machine's load is printed too,
since on a shared machine it moves every figure.
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


def _documents(benchmark: str, root: Path, items: int) -> list[Document]:
    loaded = (locomo if benchmark == "locomo" else orgmembench).load(root)
    return [
        Document.create(i.text, author=i.author, date=i.date, source=i.id, thread=i.thread)
        for i in loaded.items[:items]
    ]


def _rate(docs: list[Document], context: bool, folder: Path, embedder: object) -> float:
    path = folder / f"{'ctx' if context else 'plain'}-{time.monotonic_ns()}.db"
    with Memory(path, embedder=embedder) as memory:  # type: ignore[arg-type]
        if context:
            memory.enable_context()
        started = time.perf_counter()
        memory.add_many(docs, batch_size=64)
        return len(docs) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("MEMPP_DATASETS", ".")))
    parser.add_argument("--items", type=int, default=600)
    args = parser.parse_args()
    embedder = default_embedder()
    embedder.embed(["warm up"])
    with tempfile.TemporaryDirectory() as folder:
        for benchmark in ("locomo", "orgmembench"):
            docs = _documents(benchmark, args.data, args.items)
            plain = _rate(docs, False, Path(folder), embedder)
            ctx = _rate(docs, True, Path(folder), embedder)
            print(
                f"{benchmark}: {len(docs)} records, {plain:.1f} records/s without the context "
                f"index, {ctx:.1f} with it ({ctx / plain:.2f}x); load {os.getloadavg()[0]:.1f}"
            )


if __name__ == "__main__":
    main()
