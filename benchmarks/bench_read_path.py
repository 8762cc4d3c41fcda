"""Read-path choices measured side by side in one process, taking turns question by question.

* SQLite: where the vector leg's float32 rows for rescoring come from: the file beside the
  database (``<file>-vectors.f32``, the default) or SQLite.
* PostgreSQL (``--pg-choice``): the vector leg from the scope's in-RAM replica (the default)
  or by pgvector's HNSW walk it replaced; two-word phrases from the BM25 replica's positions
  (the default) or by ``phraseto_tsquery`` in SQL; the tag leg from its replica (the
  default) or by the SQL join it replaced.
* When the question is encoded: on a thread of its own beside the legs that need no vector
  (the default), or before the legs.

On SQLite it runs on a copy of a ``bench_scale.py`` store (opening a store runs migrations, so
point it at a copy, not at the cache); with ``--postgres N`` it bulk-loads N documents of the
same corpus into a PostgreSQL started by ``pgserver`` (the ``test`` extra), in ``--pg-dir``
if given, where a later run finds them loaded (a million take about 45 minutes). Every
combination answers the same question before the next question starts, in alternating
order and after one untimed search of it, so the machine's drift and the caches fall on all
alike.

    python benchmarks/bench_read_path.py --store COPY.db --queries 60
    python benchmarks/bench_read_path.py --postgres 100000 --queries 60 --pg-dir /tmp/pg100k

``--recall Q`` adds, on PostgreSQL, the vector leg's recall against an exact scan in SQL,
from the replica and by the HNSW walk; ``--filtered Q`` the vector leg alone under filters
(authors of three frequencies, a ``since`` bound), by the replica and by HNSW taking turns,
the replica's lists compared with the exact scan's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

import mempp.search.retrieval as retrieval
from bench_scale import FIRST_DAY, SPAN_DAYS, Corpus, StandInEncoder, bounds, rss_gib
from mempp import Memory
from mempp.dates import key_to_datetime
from mempp.encoders import embedder_named
from mempp.filters import NO_FILTERS, Filters

_BESIDE = retrieval._vector_call


def _before(query_vector, *, beside_other_legs):  # type: ignore[no-untyped-def]
    return _BESIDE(query_vector, beside_other_legs=False)


def sql_tag_leg(store: Any) -> Callable[..., list[int]]:
    """``store.tagged`` as it ran before PostgreSQL held tag replicas."""

    def tagged(
        scope: str, labels: Any, as_of: int | None, limit: int, *, filters: Filters = NO_FILTERS
    ) -> list[int]:
        return store._tagged_sql(scope, labels, as_of, limit, filters)

    return tagged


def vector_recall(memory: Memory, questions: list[str]) -> list[str]:
    """PostgreSQL's vector leg from its replica and by HNSW (past ``exact_scan_max_rows``
    eligible rows) against the exact scan in SQL: recall@50 and @C, the mean over the
    questions, and how many lists came out identical."""
    store, scope, limit = memory.store, memory.scope, memory.settings.candidates
    found: dict[str, list[list[int]]] = {"replica": [], "HNSW": [], "exact": []}
    settings = {
        "replica": (True, store.exact_scan_max_rows),
        "HNSW": (False, store.exact_scan_max_rows),
        "exact": (False, 1 << 62),  # every row: the exact scan
    }
    saved = store.vector_replica, store.exact_scan_max_rows
    try:
        for question in questions:
            vector = memory.embedder.embed([question])[0]
            for leg, (replica, cap) in settings.items():
                store.vector_replica, store.exact_scan_max_rows = replica, cap
                found[leg].append(store.nearest(scope, vector, None, limit))
    finally:
        store.vector_replica, store.exact_scan_max_rows = saved
    lines = []
    for leg in ("replica", "HNSW"):
        pairs = list(zip(found[leg], found["exact"], strict=True))
        at_50 = [len(set(f[:50]) & set(e[:50])) / max(1, len(e[:50])) for f, e in pairs]
        at_limit = [len(set(f) & set(e)) / max(1, len(e)) for f, e in pairs]
        same = sum(f == e for f, e in pairs)
        lines.append(
            f"  vector leg by {leg} against the exact scan, {len(questions)} questions: "
            f"recall@50 {np.mean(at_50):.3f} (lowest {min(at_50):.2f}), "
            f"recall@{limit} {np.mean(at_limit):.3f}, identical lists {same}"
        )
    return lines


def filtered_vector_leg(memory: Memory, corpus: Corpus, questions: list[str]) -> list[str]:
    """PostgreSQL's vector leg alone under filters, p50 / p95 ms by the replica and by HNSW
    (the first five questions untimed), and how many of the replica's lists equal the exact
    scan's."""
    store, scope, limit = memory.store, memory.scope, memory.settings.candidates
    since = (FIRST_DAY + timedelta(days=SPAN_DAYS - 365)).isoformat()  # the last year
    cases = {
        "most frequent author": Filters.create(author=corpus.authors[0]),
        "tenth author": Filters.create(author=corpus.authors[9]),
        "sixtieth author": Filters.create(author=corpus.authors[59]),
        f"since {since}": Filters.create(since=since),
    }
    vectors = [memory.embedder.embed([q])[0] for q in questions]
    lines = []
    saved = store.vector_replica, store.exact_scan_max_rows
    try:
        for name, filters in cases.items():
            times: dict[str, list[float]] = {"replica": [], "HNSW": []}
            same = 0
            for turn, vector in enumerate(vectors):
                found = {}
                for leg in ("replica", "HNSW") if turn % 2 else ("HNSW", "replica"):
                    store.vector_replica = leg == "replica"
                    started = time.perf_counter()
                    found[leg] = store.nearest(scope, vector, None, limit, filters=filters)
                    if turn >= 5:
                        times[leg].append(1000 * (time.perf_counter() - started))
                store.vector_replica, store.exact_scan_max_rows = False, 1 << 62
                exact = store.nearest(scope, vector, None, limit, filters=filters)
                same += found["replica"] == exact
                store.vector_replica, store.exact_scan_max_rows = saved
            cells = "   ".join(
                f"{leg} " + "{:.1f} / {:.1f}".format(*np.percentile(t, [50, 95]))
                for leg, t in times.items()
            )
            lines.append(f"  {name:28s} {cells}   replica = exact {same}/{len(vectors)}")
    finally:
        store.vector_replica, store.exact_scan_max_rows = saved
    return lines


def postgres_url(size: int, corpus: Corpus, data_dir: Path | None) -> str:
    import pgserver
    import psycopg

    from mempp.encoders.minilm import MiniLMEmbedder

    if data_dir is None:
        server = pgserver.get_server(tempfile.mkdtemp(), cleanup_mode="delete")
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(str(data_dir), cleanup_mode=None)
    uri = server.get_uri()
    url = uri.replace("/postgres?", "/bench?") if "?" in uri else uri.rsplit("/", 1)[0] + "/bench"
    with psycopg.connect(uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'bench'").fetchone():
            with Memory(url) as memory:
                if len(memory) != size:
                    sys.exit(f"{data_dir} holds {len(memory):,} documents, not {size:,}")
            return url
        conn.execute("CREATE DATABASE bench")
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
    parser.add_argument("--pg-dir", type=Path, help="PostgreSQL's data folder, kept")
    parser.add_argument(
        "--pg-choice",
        choices=["vectors", "phrases", "tags"],
        default="vectors",
        help="PostgreSQL: the leg whose replica is measured against the SQL it replaced",
    )
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--encoder", default="minilm", help="minilm, minilm-onnx, ...")
    parser.add_argument(
        "--recall",
        type=int,
        default=0,
        metavar="Q",
        help="PostgreSQL: the vector leg's "
        "recall against an exact scan, on Q questions (an exact scan of 1M rows takes seconds)",
    )
    parser.add_argument(
        "--filtered",
        type=int,
        default=0,
        metavar="Q",
        help="PostgreSQL: the vector leg under filters, on Q questions",
    )
    args = parser.parse_args()

    corpus = Corpus(args.seed)
    questions = corpus.questions(max(args.queries, args.recall, args.filtered) + 10)
    if args.store is not None:
        location = str(args.store)
        keys = bounds(args.store)
        cases = {k: None if v is None else key_to_datetime(v) for k, v in keys.items()}
    else:
        location = postgres_url(args.postgres, corpus, args.pg_dir)
        cases = {"none": None}
    # Every combination asks each question: none may find its vector held by another.
    with Memory(location, embedder=embedder_named(args.encoder), recent_questions=0) as memory:
        started = time.perf_counter()
        memory.warm()
        rss, peak = rss_gib()
        print(
            f"warm() {time.perf_counter() - started:.1f} s; RSS {rss:.2f} GiB (peak {peak:.2f})",
            flush=True,
        )
        for question in questions[:10]:
            memory.search(question)
        store = memory.store
        index = getattr(store, "_index", None)
        quick = None if index is None else index._quick_rows
        if args.store is not None:
            first, choices = "rows", ["file", "sqlite"] if quick is not None else ["-"]
        elif args.pg_choice == "tags":
            first, choices = "tags", ["replica", "sql"]
            replica_leg, sql_leg = store.tagged, sql_tag_leg(store)
        elif args.pg_choice == "phrases":
            first, choices = "phrases", ["replica", "sql"]
            replica_phrases = store._phrase_rows

            def sql_phrases(scope: str, replica: Any, phrases: Any) -> Any:
                return store._phrase_rows_sql(scope, phrases, replica.newest)

        else:
            first, choices = "vectors", ["replica", "hnsw"]
        combos = [(c, e) for c in choices for e in ("beside", "before")]
        times: dict[tuple[tuple[str, str], str], list[float]] = {}

        def choose(combo: tuple[str, str]) -> None:
            if quick is not None:
                index._quick_rows = quick if combo[0] == "file" else None
            if first == "tags":
                store.tagged = replica_leg if combo[0] == "replica" else sql_leg
            if first == "vectors":
                store.vector_replica = combo[0] == "replica"
            if first == "phrases":
                store._phrase_rows = replica_phrases if combo[0] == "replica" else sql_phrases
            retrieval._vector_call = _BESIDE if combo[1] == "beside" else _before

        for turn, question in enumerate(questions[10 : 10 + args.queries]):
            for case, as_of in cases.items():
                # Untimed first, once by each choice: no combination pays for bringing the
                # question's rows (or an HNSW walk's pages) into the caches; on PostgreSQL
                # the first search of new words costs most.
                for choice in choices:
                    choose((choice, "beside"))
                    memory.search(question, as_of=as_of)
                for combo in combos if turn % 2 == 0 else combos[::-1]:
                    choose(combo)
                    started = time.perf_counter()
                    memory.search(question, as_of=as_of)
                    elapsed = 1000 * (time.perf_counter() - started)
                    times.setdefault((combo, case), []).append(elapsed)
        retrieval._vector_call = _BESIDE
        if first == "tags":
            del store.tagged  # the class's own again
        if first == "vectors":
            store.vector_replica = True
        if first == "phrases":
            del store._phrase_rows
        recall = []
        if args.recall and args.postgres is not None:
            recall = vector_recall(memory, questions[10 : 10 + args.recall])
        if args.filtered and args.postgres is not None:
            recall.append("  the vector leg under filters, p50 / p95 ms:")
            recall += filtered_vector_leg(memory, corpus, questions[10 : 10 + args.filtered])
    print(f"{location}: Memory.search p50 / p95 ms, {args.queries} questions, {args.encoder}")
    for case in cases:
        cells = [
            f"{first} {c}, encoded {e}: "
            + "{:.1f} / {:.1f}".format(*np.percentile(times[((c, e), case)], [50, 95]))
            for c, e in combos
        ]
        print(f"  as-of {case:5s} " + "   ".join(cells))
    for line in recall:
        print(line)


if __name__ == "__main__":
    main()
