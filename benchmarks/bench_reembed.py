"""What ``Memory.reembed`` costs apart from the encoder: a store of ``--rows`` rows, bulk
loaded with a stand-in 384-d encoder, re-encoded to a 768-d one that costs next to nothing
(vectors derived from a hash of the text), with the switch timed apart, and the first search
after it (which loads the new vectors). Either engine (``--db`` a file or a postgresql://
URL of an empty database)::

    python benchmarks/bench_reembed.py --rows 20000 --db /tmp/reembed.db
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Sequence

import numpy as np

from mempp import Memory


class HashEncoder:
    """Unit vectors seeded by a hash of each text: deterministic, and nearly free."""

    def __init__(self, name: str, dim: int) -> None:
        self._name, self._dim = name, dim

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            row = np.random.default_rng(seed).standard_normal(self._dim)
            out[i] = row / np.linalg.norm(row)
        return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--db", required=True, help="a new SQLite file or an empty database")
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args(argv)
    memory = Memory(args.db, embedder=HashEncoder("hash-384", 384))
    with memory.bulk_load():
        for start in range(0, args.rows, 2000):
            stop = min(start + 2000, args.rows)
            memory.add_many(
                [
                    {"text": f"row {i} about the quarterly budget and launch"}
                    for i in range(start, stop)
                ]
            )
    memory.search("budget")  # the old vectors loaded, as in a serving process
    store = memory.store
    switch_s: list[float] = []
    original = store.reembed_switch  # type: ignore[attr-defined]

    def timed_switch() -> bool:
        start = time.perf_counter()
        done = original()
        switch_s.append(time.perf_counter() - start)
        return done

    store.reembed_switch = timed_switch  # type: ignore[attr-defined]
    wall, cpu = time.perf_counter(), time.process_time()
    report = memory.reembed(HashEncoder("hash-768", 768), batch=args.batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    start = time.perf_counter()
    memory.search("budget")
    first = time.perf_counter() - start
    ok = all(check.ok for check in memory.verify())
    print(
        f"{report.total} rows re-encoded 384 -> 768-d: {wall:.1f} s wall ({cpu:.1f} s CPU), "
        f"switch {sum(switch_s):.2f} s; first search after it {first:.2f} s; verify ok: {ok}"
    )
    memory.close()


if __name__ == "__main__":
    main()
