"""The keyword leg at scale (embedded engine): what its optional index costs to build and on
write, the leg's own latency, and a whole search's with and without it.

On a working copy of the synthetic store of ``benchmarks/bench_scale.py`` (``--store`` names
one already built, e.g. ``/tmp/scale-onnx/scale-100000-s1.db``; else it is built once in
``--cache``), deleted afterwards unless ``--keep``, in this order:

* ingest: store time per document of ``--probe`` new documents without the keyword index
  (as every store ships);
* ``Memory.enable_index("keyword")``: its build time over the stored rows and the on-disk
  size of what it adds (the trigram table and the narrow rows index);
* ingest again, ``--probe`` more documents, now with the index kept on every write;
* p50 / p95 / p99 (ms) of the keyword leg alone (``store.keyword``) over the corpus's
  questions, without and with an as-of bound at ~50% of the records;
* the same for the prefix match (``kw_match="prefix"``, ``store.keyword_prefix``), which
  reads the lexical full-text index every store has;
* the prefix match with the length bound of the ``chat`` preset (``kw_max_tokens=128``,
  each counted row's token count read from FTS5's docsize table);
* p50 / p95 / p99 of ``Memory.search`` under the ``default`` preset and under it with
  ``w_kw=0.5`` (and with ``w_kw=0.5, kw_match="prefix"``), under ``chat`` and under ``chat``
  without its length bound, questions encoded by
  all-MiniLM-L6-v2 (each question's vector computed once, before timing, so all see the same
  legs), and resident memory after them.

    nice -n 5 python benchmarks/bench_keyword_scale.py --store /tmp/scale-onnx/scale-100000-s1.db

``--prefix-only`` measures the prefix match alone: no trigram index is built (at 1M that
build takes minutes), so only what needs none is timed.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale


def ingest_ms_per_doc(path: Path, seed: int, count: int, batch: int, first: int) -> float:
    """Store time per document of ``count`` new documents (stand-in vectors: no encoder)."""
    from mempp import Memory

    encoder = bench_scale.StandInEncoder("minilm")
    seconds = 0.0
    with Memory(path, embedder=encoder) as memory:
        for docs, vectors in bench_scale.Corpus(seed).documents(count, first=first):
            encoder.pending = {str(d["text"]): v for d, v in zip(docs, vectors, strict=True)}
            begun = time.perf_counter()
            memory.add_many(docs, batch_size=batch)
            seconds += time.perf_counter() - begun
    return 1000 * seconds / count


def enable(path: Path) -> dict[str, object]:
    from mempp import Memory

    with Memory(path, embedder=bench_scale.StandInEncoder("minilm")) as memory:
        begun = time.perf_counter()
        memory.enable_index("keyword")
        seconds = time.perf_counter() - begun
    with sqlite3.connect(path) as conn:
        pages = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'records_kw%'"
        ).fetchone()[0]
    return {"enable_index('keyword') s": round(seconds, 1), "index MB": round(pages / 2**20)}


def measure(path: Path, seed: int, queries: int, *, trigram: bool) -> dict[str, object]:
    from mempp import Memory, preset
    from mempp.search.keyword import keyword_terms, prefix_terms

    questions = bench_scale.Corpus(seed).questions(queries)
    half = bench_scale.bounds(path)["50%"]
    out: dict[str, object] = {}
    real = bench_scale.real_encoder("minilm")
    vectors = dict(zip(questions, real.embed(questions), strict=True))  # type: ignore[attr-defined]
    with Memory(path, embedder=real, recent_questions=2 * queries) as memory:  # type: ignore[arg-type]
        memory.warm()
        store = memory.store
        # The length bound (kw_max_tokens, the chat preset's 128) reads each counted row's
        # token count from FTS5's docsize table.
        bounded = functools.partial(store.keyword_prefix, max_tokens=128)
        legs = [
            ("keyword leg, prefix", None, prefix_terms, store.keyword_prefix),
            ("keyword leg, prefix, as-of 50%", half, prefix_terms, store.keyword_prefix),
            ("keyword leg, prefix, kw_max_tokens=128", None, prefix_terms, bounded),
            ("keyword leg, prefix, kw_max_tokens=128, as-of 50%", half, prefix_terms, bounded),
        ]
        searches = [
            ("search, default", preset("default")),
            (
                "search, default + w_kw=0.5, kw_match=prefix",
                preset("default").with_(w_kw=0.5, kw_match="prefix"),
            ),
            ("search, chat (kw_max_tokens=128)", preset("chat")),
            ("search, chat + kw_max_tokens=0", preset("chat").with_(kw_max_tokens=0)),
        ]
        if trigram:
            legs[:0] = [
                ("keyword leg", None, keyword_terms, store.keyword),
                ("keyword leg, as-of 50%", half, keyword_terms, store.keyword),
            ]
            searches.insert(1, ("search, default + w_kw=0.5", preset("default").with_(w_kw=0.5)))
        for label, as_of, terms_of, leg in legs:
            samples = []
            for question in questions:
                terms = terms_of(question)
                begun = time.perf_counter()
                leg(memory.scope, terms, as_of, 100)
                samples.append(time.perf_counter() - begun)
            out[label] = bench_scale.quantiles(samples)
        for label, settings in searches:
            for question in questions:  # the question cache holds each vector: no encoding
                memory._questions.put(real.name, question, vectors[question])  # type: ignore[attr-defined]
            samples = []
            for question in questions:
                begun = time.perf_counter()
                memory.search(question, settings=settings)
                samples.append(time.perf_counter() - begun)
            out[label] = bench_scale.quantiles(samples)
    out["rss GiB (now, peak)"] = bench_scale.rss_gib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", type=Path, help="a bench_scale store to measure a copy of")
    parser.add_argument("--size", type=int, default=100_000, help="without --store: build this")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--probe", type=int, default=2000, help="documents of each ingest probe")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mempp-keyword-scale"))
    parser.add_argument("--keep", action="store_true", help="keep the working copy")
    parser.add_argument(
        "--prefix-only", action="store_true", help="build no trigram index: the prefix match only"
    )
    args = parser.parse_args()
    source = args.store
    if source is None:
        bench_scale.build(args.cache, args.size, args.seed, args.batch, "minilm")
        source = bench_scale.store_path(args.cache, args.size, args.seed)
    args.cache.mkdir(parents=True, exist_ok=True)
    path = args.cache / f"{source.stem}-keyword.db"
    shutil.copyfile(source, path)
    print(f"## {source} (working copy {path})", flush=True)
    try:
        ms = ingest_ms_per_doc(path, args.seed, args.probe, args.batch, 10**9)
        print(f"ingest, store only, without the keyword index: {ms:.3f} ms/doc", flush=True)
        if not args.prefix_only:
            for label, value in enable(path).items():
                print(f"{label}: {value}", flush=True)
            ms = ingest_ms_per_doc(path, args.seed, args.probe, args.batch, 2 * 10**9)
            print(f"ingest, store only, with the keyword index: {ms:.3f} ms/doc", flush=True)
        trigram = not args.prefix_only
        for label, value in measure(path, args.seed, args.queries, trigram=trigram).items():
            if isinstance(value, list):
                print(f"{label}: p50 {value[0]:.1f} / p95 {value[1]:.1f} / p99 {value[2]:.1f} ms")
            else:
                print(f"{label}: {value}")
    finally:
        if not args.keep:  # the file, its WAL and the replicas warm() saved beside it
            for leftover in path.parent.glob(f"{path.name}*"):
                leftover.unlink()


if __name__ == "__main__":
    main()
