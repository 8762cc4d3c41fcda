"""The keyword leg at scale (embedded engine): what the trigram index costs on write, and
the leg's own latency and a whole search's with and without it.

Builds (once, cached in ``--cache``) the synthetic store of ``benchmarks/bench_scale.py``
(same corpus, same stand-in document vectors; the trigram index is filled on insert like
every store of this checkout), then in this process:

* ingest: store time per document of ``--probe`` new documents on a copy, with the trigram
  index (as shipped) and without it (its trigger dropped on a second copy);
* p50 / p95 / p99 (ms) of the keyword leg alone (``store.keyword``) over the corpus's
  questions, without and with an as-of bound at ~50% of the records;
* p50 / p95 / p99 of ``Memory.search`` under the ``default`` preset and under it with
  ``w_kw=0.5``, questions encoded by all-MiniLM-L6-v2 (each question's vector computed once,
  before timing, so both see the same legs);
* the on-disk size of the trigram index and resident memory after the searches.

    nice -n 10 python benchmarks/bench_keyword_scale.py --sizes 100000 --queries 200
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale


def ingest_ms_per_doc(path: Path, seed: int, count: int, batch: int, *, trigram: bool) -> float:
    from mempp import Memory
    from mempp.encoders.minilm import MiniLMEmbedder

    copy = path.with_name(f"{path.stem}-kwprobe.db")
    shutil.copyfile(path, copy)
    try:
        if not trigram:
            with sqlite3.connect(copy) as conn:
                conn.execute("DROP TRIGGER records_kw_insert")
        encoder = bench_scale.StandInEncoder(MiniLMEmbedder().name)
        seconds = 0.0
        with Memory(copy, embedder=encoder) as memory:
            for docs, vectors in bench_scale.Corpus(seed).documents(count, first=10**9):
                encoder.pending = {str(d["text"]): v for d, v in zip(docs, vectors, strict=True)}
                begun = time.perf_counter()
                memory.add_many(docs, batch_size=batch)
                seconds += time.perf_counter() - begun
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return 1000 * seconds / count


def measure(path: Path, seed: int, queries: int) -> dict[str, object]:
    from mempp import Memory, preset
    from mempp.encoders.minilm import MiniLMEmbedder
    from mempp.search.keyword import keyword_terms

    questions = bench_scale.Corpus(seed).questions(queries)
    half = bench_scale.bounds(path)["50%"]
    out: dict[str, object] = {}
    with sqlite3.connect(path) as conn:
        pages = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'records_kw%'"
        ).fetchone()[0]
    out["trigram index MB"] = (pages or 0) / 2**20
    real = MiniLMEmbedder()
    vectors = {q: v for q, v in zip(questions, real.embed(questions), strict=True)}
    with Memory(path, embedder=real, recent_questions=2 * queries) as memory:
        memory.warm()
        store = memory.store
        for label, as_of in (("keyword leg", None), ("keyword leg, as-of 50%", half)):
            samples = []
            for question in questions:
                terms = keyword_terms(question)
                begun = time.perf_counter()
                store.keyword(memory.scope, terms, as_of, 100)
                samples.append(time.perf_counter() - begun)
            out[label] = bench_scale.quantiles(samples)
        for label, settings in (
            ("search, default", preset("default")),
            ("search, default + w_kw=0.5", preset("default").with_(w_kw=0.5)),
        ):
            for question in questions:  # the question cache holds each vector: no encoding
                memory._questions.put(real.name, question, vectors[question])
            samples = []
            for question in questions:
                begun = time.perf_counter()
                memory.search(question, settings=settings)
                samples.append(time.perf_counter() - begun)
            out[label] = bench_scale.quantiles(samples)
    out["rss GiB (now, peak)"] = bench_scale.rss_gib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--probe", type=int, default=2000, help="documents of the ingest probe")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mempp-keyword-scale"))
    args = parser.parse_args()
    for size in args.sizes:
        built = bench_scale.build(args.cache, size, args.seed, args.batch)
        path = bench_scale.store_path(args.cache, size, args.seed)
        print(f"## {size:,} records (built: {built})")
        for trigram in (True, False):
            ms = ingest_ms_per_doc(path, args.seed, args.probe, args.batch, trigram=trigram)
            label = "with" if trigram else "without"
            print(f"ingest, store only, {label} the trigram index: {ms:.3f} ms/doc")
        for label, value in measure(path, args.seed, args.queries).items():
            if isinstance(value, list):
                print(f"{label}: p50 {value[0]:.1f} / p95 {value[1]:.1f} / p99 {value[2]:.1f} ms")
            else:
                print(f"{label}: {value}")


if __name__ == "__main__":
    main()
