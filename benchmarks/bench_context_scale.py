"""The context leg at scale (issue 37): a SQLite store of ``--size`` synthetic threaded records
(threads of ``--thread`` rows, dated in thread order, random unit vectors under MiniLM's name
and width, texts of words drawn from a fixed vocabulary), its context index enabled and
filled by the same stand-in encoder, then ``Memory.search`` p50 / p95 over ``--queries``
questions of three vocabulary words, with and without the context leg (from the index, and
scored at query time, ``ctx_source="query"``; alone and beside the prefix keyword leg).

Only the store's own cost is measured: the stand-in encoder takes no time, so the question's
encoding (15-20 ms with MiniLM) and the contexts' encoding are left out.

    nice python benchmarks/bench_context_scale.py --size 100000 --queries 200

Then the first context search of a new process, with the leg's int8 copy mapped from the
file SQLite saved beside the database and with it built from the table again. With
``--postgres`` the store is a PostgreSQL database instead (started by ``pgserver``, the
``test`` extra, in a temporary folder), which keeps no copy between processes: the first
context search of a new store object reads every context from the table (wall and this
process's CPU time, then a warm search for comparison).

    nice python benchmarks/bench_context_scale.py --size 100000 --queries 200 --postgres
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mempp import Memory, preset
from mempp.records import Document

VOCABULARY = [f"w{i}" for i in range(5000)]


class StandIn:
    """Random unit vectors named like all-MiniLM-L6-v2, seeded by the text."""

    name = "all-MiniLM-L6-v2/256"
    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            rng = np.random.default_rng(abs(hash(text)) % (1 << 32))
            row = rng.standard_normal(self.dim).astype(np.float32)
            rows[i] = row / np.linalg.norm(row)
        return rows


def _corpus(size: int, thread: int, rng: np.random.Generator) -> list[Document]:
    docs = []
    for i in range(size):
        words = rng.choice(VOCABULARY, size=int(rng.integers(8, 30)))
        day = 1 + (i % thread) // 24
        docs.append(
            Document.create(
                " ".join(words),
                date=f"2024-{1 + (i // thread) % 12:02d}-{min(day, 28):02d}T{i % 24:02d}:00:00",
                thread=f"t{i // thread}",
            )
        )
    return docs


def _latencies(memory: Memory, questions: Sequence[str], settings: object) -> list[float]:
    times = []
    for question in questions:
        started = time.perf_counter()
        memory.search(question, settings=settings)  # type: ignore[arg-type]
        times.append(1000 * (time.perf_counter() - started))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--thread", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--postgres", action="store_true", help="a PostgreSQL store (pgserver)")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as folder:
        path: Path | str = Path(folder) / "scale.db"
        if args.postgres:
            path = _postgres_url(Path(folder) / "pg")
        with Memory(path, embedder=StandIn()) as memory:  # type: ignore[arg-type]
            started = time.perf_counter()
            memory.add_many(_corpus(args.size, args.thread, rng), batch_size=2000)
            written = time.perf_counter() - started
            started = time.perf_counter()
            memory.enable_context()
            filled = time.perf_counter() - started
            print(
                f"{args.size} records in threads of {args.thread}: written in {written:.0f} s, "
                f"contexts read and stored in {filled:.0f} s ({filled / args.size * 1e3:.2f} ms "
                "a record, encoding aside)"
            )
            questions = [" ".join(rng.choice(VOCABULARY, size=3)) for _ in range(args.queries)]
            plain = preset("default")
            context = plain.with_(w_ctx=0.5, ctx_credit="members")
            pair = preset("default-keyword-context").with_(kw_match="prefix")
            systems = {
                "default": plain,
                "default + ctx 0.5 members": context,
                "default + ctx 0.5 members, query time": context.with_(ctx_source="query"),
                "default-keyword-context, prefix": pair,
                "default-keyword-context, prefix, query time": pair.with_(ctx_source="query"),
            }
            for settings in systems.values():  # warm each: the first search loads the copies
                memory.search(questions[0], settings=settings)
            # Question by question, every system in turn: the machine's load falls on each alike.
            times: dict[str, list[float]] = {name: [] for name in systems}
            for question in questions:
                for name, settings in systems.items():
                    times[name] += _latencies(memory, [question], settings)
            for name, taken in times.items():
                p95 = statistics.quantiles(taken, n=20)[-1]
                print(f"{name}: p50 {statistics.median(taken):.1f} ms, p95 {p95:.1f} ms")
        if args.postgres:
            _first_postgres_search(str(path), questions, plain, context)
            return
        # A new process's first context search: the leg's int8 copy mapped from the file
        # saved beside the database, then (the file removed) built from the table again.
        saved = Path(f"{path}-context.arrays")
        for label in ("mapped from the file", "built from the table"):
            if label.startswith("built"):
                saved.unlink(missing_ok=True)
            elif not saved.exists():
                print("no context file was saved (below context_file_min_rows)")
                continue
            with Memory(path, embedder=StandIn()) as again:  # type: ignore[arg-type]
                again.search(questions[0], settings=plain)  # the vector leg's copies first
                started = time.perf_counter()
                again.search(questions[1], settings=context)
                first = (time.perf_counter() - started) * 1e3
            print(f"first context search of a new process, copy {label}: {first:.0f} ms")


def _postgres_url(data_dir: Path) -> str:
    """An empty database ``bench`` of a PostgreSQL started in ``data_dir`` (removed at exit)."""
    import pgserver
    import psycopg

    server = pgserver.get_server(str(data_dir), cleanup_mode="delete")
    uri = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    return uri.replace("/postgres?", "/bench?") if "?" in uri else uri.rsplit("/", 1)[0] + "/bench"


def _first_postgres_search(
    url: str, questions: Sequence[str], plain: object, context: object
) -> None:
    """A new store object's first context search (every context read from the table), three
    times, each after a plain search loaded the other legs' copies; then a warm one."""
    for attempt in range(3):
        with Memory(url, embedder=StandIn()) as again:  # type: ignore[arg-type]
            again.search(questions[0], settings=plain)  # type: ignore[arg-type]
            wall, cpu = time.perf_counter(), time.process_time()
            again.search(questions[1], settings=context)  # type: ignore[arg-type]
            first = (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3
            wall, cpu = time.perf_counter(), time.process_time()
            again.search(questions[2], settings=context)  # type: ignore[arg-type]
            warm = (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3
        print(
            f"PostgreSQL, new store object {attempt + 1}: first context search "
            f"{first[0]:.0f} ms ({first[1]:.0f} ms CPU here), the next {warm[0]:.0f} ms "
            f"({warm[1]:.0f} ms CPU)"
        )


if __name__ == "__main__":
    main()
