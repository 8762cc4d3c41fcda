"""Two read-path choices measured side by side in one process, taking turns question by question.

* Where the vector leg's float32 rows for rescoring come from: the file beside the database
  (``<file>-vectors.f32``, the default) or SQLite (SQLite engine only).
* When the question is encoded: on a thread of its own beside the legs that need no vector
  (the default), or before the legs.

On SQLite it runs on a copy of a ``bench_scale.py`` store (opening a store runs migrations, so
point it at a copy, not at the cache); with ``--postgres N`` it bulk-loads N documents of the
same corpus into a PostgreSQL started by ``pgserver`` (the ``test`` extra) and compares the
encoding only. Every combination answers the same question before the next question starts,
in alternating order, so the machine's drift falls on all alike.

    python benchmarks/bench_read_path.py --store COPY.db --queries 60
    python benchmarks/bench_read_path.py --postgres 100000 --queries 60
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import mempp.retrieval as retrieval
from bench_scale import Corpus, StandInEncoder, bounds
from mempp import Memory
from mempp.dates import key_to_datetime
from mempp.encoders import embedder_named

_BESIDE = retrieval._vector_call


def _before(query_vector, *, beside_other_legs):  # type: ignore[no-untyped-def]
    return _BESIDE(query_vector, beside_other_legs=False)


def postgres_url(size: int, corpus: Corpus) -> str:
    import pgserver
    import psycopg

    from mempp.encoders.minilm import MiniLMEmbedder

    uri = pgserver.get_server(tempfile.mkdtemp(), cleanup_mode="delete").get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    url = uri.replace("/postgres?", "/bench?") if "?" in uri else uri.rsplit("/", 1)[0] + "/bench"
    encoder = StandInEncoder(MiniLMEmbedder().name)
    started = time.perf_counter()
    with Memory(url, embedder=encoder) as memory, memory.bulk_load():
        for docs, vectors in corpus.documents(size):
            encoder.pending = {str(d["text"]): v for d, v in zip(docs, vectors, strict=True)}
            memory.add_many(docs, batch_size=2000)
    print(f"loaded {size:,} documents in {time.perf_counter() - started:.0f} s", flush=True)
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", type=Path, help="a copy of a bench_scale.py SQLite store")
    where.add_argument("--postgres", type=int, metavar="N", help="bulk-load N documents")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--encoder", default="minilm", help="minilm, minilm-onnx, ...")
    args = parser.parse_args()

    corpus = Corpus(args.seed)
    questions = corpus.questions(args.queries + 10)
    if args.store is not None:
        location = str(args.store)
        keys = bounds(args.store)
        cases = {k: None if v is None else key_to_datetime(v) for k, v in keys.items()}
    else:
        location = postgres_url(args.postgres, corpus)
        cases = {"none": None}
    with Memory(location, embedder=embedder_named(args.encoder)) as memory:
        memory.warm()
        for question in questions[:10]:
            memory.search(question)
        index = getattr(memory.store, "_index", None)
        quick = None if index is None else index._quick_rows
        rows = ["file", "sqlite"] if quick is not None else ["-"]
        combos = [(r, e) for r in rows for e in ("beside", "before")]
        times: dict[tuple[tuple[str, str], str], list[float]] = {}
        for turn, question in enumerate(questions[10:]):
            for case, as_of in cases.items():
                for combo in combos if turn % 2 == 0 else combos[::-1]:
                    if quick is not None:
                        index._quick_rows = quick if combo[0] == "file" else None
                    retrieval._vector_call = _BESIDE if combo[1] == "beside" else _before
                    started = time.perf_counter()
                    memory.search(question, as_of=as_of)
                    elapsed = 1000 * (time.perf_counter() - started)
                    times.setdefault((combo, case), []).append(elapsed)
        retrieval._vector_call = _BESIDE
    print(f"{location}: Memory.search p50 / p95 ms, {args.queries} questions, {args.encoder}")
    for case in cases:
        cells = [
            f"rows {r}, encoded {e}: "
            + "{:.1f} / {:.1f}".format(*np.percentile(times[((r, e), case)], [50, 95]))
            for r, e in combos
        ]
        print(f"  as-of {case:5s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
