"""Snapshot benchmark: ``Memory.dump`` and ``Memory.restore`` of a store of N records, and
``mempp backup`` of the SQLite file.

Not a test: run on demand. Builds a SQLite store of N synthetic records (384-d random unit
vectors, so no model is needed; one in 200 superseded, one in 1000 archived), then times a dump
with vectors, a restore into a new SQLite file, and with ``--pg URL`` (an empty database) a
restore into PostgreSQL; prints rows/s, the snapshot's size and whether verify passes.

    python benchmarks/bench_dump.py --records 20000
    python benchmarks/bench_dump.py --records 20000 --pg postgresql://localhost/empty
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mempp import Memory

DIM = 384
WORDS = "plan launch budget price team office hiring april friday review".split()


class RandomEmbedder:
    """Unit vectors seeded by the text: stable, and no model to load."""

    name = "bench-random"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            rng = np.random.default_rng(abs(hash(text)) % (1 << 32))
            vector = rng.standard_normal(DIM).astype(np.float32)
            out[row] = vector / np.linalg.norm(vector)
        return out


def build(path: str, records: int) -> None:
    rng = np.random.default_rng(7)
    with Memory(path, embedder=RandomEmbedder()) as memory:
        docs = [
            {
                "text": " ".join(rng.choice(WORDS, size=int(rng.integers(20, 80)))) + f" #{i}",
                "author": f"author{i % 50}",
                "date": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
                "tags": [f"t{i % 7}"],
            }
            for i in range(records)
        ]
        memory.add_many(docs, batch_size=2000)
        for i in range(2, records, 200):
            memory.supersede(i - 1, by=i, reason="bench")
        for i in range(5, records, 1000):
            memory.archive(i, reason="bench")


def timed(label: str, rows: int, call) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    call()
    took = time.perf_counter() - start
    print(f"{label:<28} {took:7.2f} s  {rows / took:9.0f} records/s")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--pg", default=None, help="URL of an EMPTY PostgreSQL database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        source, snapshot = os.path.join(folder, "source.db"), Path(folder) / "s.dump"
        build(source, args.records)
        with Memory(source, embedder=RandomEmbedder()) as memory:
            timed("dump (with vectors)", args.records, lambda: memory.dump(snapshot))
            print(f"{'snapshot size':<28} {snapshot.stat().st_size / 1e6:7.1f} MB")
            copy = os.path.join(folder, "backup.db")
            timed("backup (SQLite API)", args.records, lambda: memory.store.backup(copy))  # type: ignore[attr-defined]
        targets = [os.path.join(folder, "restored.db")] + ([args.pg] if args.pg else [])
        for target in targets:
            with Memory(target, embedder=RandomEmbedder()) as restored:
                engine = "PostgreSQL" if "://" in target else "SQLite"
                timed(f"restore into {engine}", args.records, lambda: restored.restore(snapshot))
                ok = all(check.ok for check in restored.verify())
                print(f"{'verify after restore':<28} {'ok' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
