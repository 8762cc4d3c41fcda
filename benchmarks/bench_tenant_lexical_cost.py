"""What ranking each tenant under its own BM25 statistics costs a SQLite file of two tenants.

Two ways were weighed (issue 30, a store of several scopes):

* **replica** (what mempp does): the in-RAM BM25 replica (``mempp.index.bm25``) under the
  scope's statistics. Measured: the first lexical search of a process that finds no saved
  replica (it reads FTS5's postings on the searching connection below ``bm25_min_rows``, or
  in its thread above, waited for, and saves them beside the file), the first search of the
  next process (which loads them), the searches after, and the replica's arrays.
* **sql**: FTS5's candidates, with the scope's statistics computed in SQL per search. Timed
  here is only a lower bound of it: FTS5's own ranked query (as mempp ran it before) plus one
  count per query word of the scope's rows holding it (the document frequencies). The rest it
  would need (the scope's row count and token total, and each candidate's length and term
  frequencies, which FTS5 keeps in its shadow tables only) is not counted.

    python benchmarks/bench_tenant_lexical_cost.py --sizes 1000 10000 100000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import KeywordEmbedder

from mempp import Memory, Settings  # isort: skip
from mempp.search.query import lexical_query, storable_query  # isort: skip
from mempp.store.sqlite.legs import fts_match_expression  # isort: skip


def corpus(rng: random.Random, vocabulary: list[str], n: int) -> list[str]:
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 80))) for _ in range(n)]


def build(path: Path, size: int, rng: random.Random, embedder: KeywordEmbedder) -> list[str]:
    vocabulary = [f"w{i}" for i in range(5000)]
    docs = {name: corpus(rng, vocabulary, size // 2) for name in ("a", "b")}
    with Memory(path, scope="b", embedder=embedder) as other:
        other.add_many(docs["b"], batch_size=2000)
    with Memory(path, scope="a", embedder=embedder) as memory:
        memory.add_many(docs["a"], batch_size=2000)
    return [" ".join(rng.sample(doc.split(), 3)) for doc in rng.sample(docs["a"], 50)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def measure(path: Path, questions: list[str], embedder: KeywordEmbedder) -> dict[str, str]:
    settings = Settings()
    queries = [storable_query(lexical_query(q, settings)) for q in questions]
    queries = [q for q in queries if fts_match_expression(q) is not None]
    with Memory(path, scope="a", embedder=embedder) as memory:
        store = memory.store
        store._vector_index()  # type: ignore[attr-defined]  # vectors loaded: time BM25 alone
        clock = time.perf_counter()
        store.lexical("a", queries[0], None, 50)
        first = time.perf_counter() - clock
        times = []
        for query in queries[1:]:
            clock = time.perf_counter()
            store.lexical("a", query, None, 50)
            times.append(time.perf_counter() - clock)
        replica = store._bm25  # type: ignore[attr-defined]
        held = 0 if replica is None else replica.nbytes
        conn = store._conn  # type: ignore[attr-defined]
        fts_times, sql_times = [], []
        for query in queries[1:]:
            expression = fts_match_expression(query)
            clock = time.perf_counter()
            conn.execute(
                """SELECT r.id FROM records_fts JOIN records r ON r.id = records_fts.rowid
                   WHERE records_fts MATCH ? AND r.scope = 'a' AND r.state = 'active'
                   ORDER BY bm25(records_fts), r.id DESC LIMIT 50""",
                (expression,),
            ).fetchall()
            fts_times.append(time.perf_counter() - clock)
            for term in query.terms:
                conn.execute(
                    """SELECT count(*) FROM records WHERE scope = 'a' AND id IN
                       (SELECT rowid FROM records_fts WHERE records_fts MATCH ?)""",
                    ('"' + term.replace('"', '""') + '"',),
                ).fetchone()
            sql_times.append(time.perf_counter() - clock)
    with Memory(path, scope="a", embedder=embedder) as memory:  # a later process
        memory.store._vector_index()  # type: ignore[attr-defined]
        clock = time.perf_counter()
        memory.store.lexical("a", queries[0], None, 50)
        loaded = time.perf_counter() - clock
    return {
        "FTS5 bm25() p50 ms (whole-table statistics, before)": ms(statistics.median(fts_times)),
        "replica first search ms (built)": ms(first),
        "first search ms (saved replica loaded)": ms(loaded),
        "replica search p50 ms": ms(statistics.median(times)),
        "replica MB": f"{held / 1e6:.2f}",
        "sql lower bound p50 ms": ms(statistics.median(sql_times)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    embedder = KeywordEmbedder([f"w{i}" for i in range(16)])
    header = False
    for size in args.sizes:
        rng = random.Random(args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tenants.db"
            questions = build(path, size, rng, embedder)
            figures = measure(path, questions, embedder)
        if not header:
            print("| rows (two tenants) | " + " | ".join(figures) + " |")
            print("|---" * (len(figures) + 1) + "|")
            header = True
        print(f"| {size:,} | " + " | ".join(figures.values()) + " |")


if __name__ == "__main__":
    main()
