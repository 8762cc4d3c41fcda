"""How much another tenant's documents move a scope's lexical ranking on SQLite.

FTS5's ``bm25()`` takes its collection statistics (document count, mean length, each term's
document frequency) over the whole table, every scope of the file; so a file of several
scopes ranks through the BM25 replica under the scope's own statistics instead
(``mempp.store.sqlite.tenants``), as PostgreSQL's per-scope replica does. This builds tenant
A alone, then the same A beside a tenant B of ``--other`` documents whose words overlap A's
queries, and compares A's results query by query: the lexical leg's top 10 and the fused
search's top 10 (the same lists now; ``docs/architecture.md`` has the figures of before).

    python benchmarks/bench_tenant_bm25.py --docs 1000 --other 10000 --queries 100
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import KeywordEmbedder

from mempp import Memory, Settings  # isort: skip
from mempp.search.query import lexical_query  # isort: skip


def corpus(rng: random.Random, vocabulary: list[str], n: int, skew: float) -> list[str]:
    weights = [1 / (rank + 1) ** skew for rank in range(len(vocabulary))]
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 80))) for _ in range(n)]


def top(memory: Memory, queries: list[str], settings: Settings) -> tuple[list, list]:
    lexical, fused = [], []
    for question in queries:
        query = lexical_query(question, settings)
        lexical.append(memory.store.lexical(memory.scope, query, None, 10))
        fused.append([hit.id for hit in memory.search(question, k=10, settings=settings)])
    return lexical, fused


def compare(alone: list[list[int]], shared: list[list[int]]) -> dict[str, float]:
    overlap = [len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(alone, shared, strict=True)]
    same_order = sum(a == b for a, b in zip(alone, shared, strict=True)) / len(alone)
    same_first = sum(a[:1] == b[:1] for a, b in zip(alone, shared, strict=True)) / len(alone)
    return {
        "top10_overlap": statistics.mean(overlap),
        "same_top10_order": same_order,
        "same_first": same_first,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000, help="tenant A's documents")
    parser.add_argument("--other", type=int, default=10000, help="tenant B's documents")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    vocabulary = [f"w{i}" for i in range(3000)]
    docs_a = corpus(rng, vocabulary, args.docs, skew=1.0)
    # B favours other words (the vocabulary reversed), so the rarities it adds differ from A's.
    docs_b = corpus(rng, vocabulary[::-1], args.other, skew=1.0)
    queries = [" ".join(rng.sample(doc.split(), 3)) for doc in rng.sample(docs_a, args.queries)]
    settings = Settings()
    embedder = KeywordEmbedder(vocabulary[:20])
    with tempfile.TemporaryDirectory() as tmp:
        alone_path, shared_path = Path(tmp) / "alone.db", Path(tmp) / "shared.db"
        with Memory(alone_path, scope="a", embedder=embedder) as alone:
            alone.add_many(docs_a, batch_size=500)
            lexical_alone, fused_alone = top(alone, queries, settings)
        with Memory(shared_path, scope="b", embedder=embedder) as other:
            other.add_many(docs_b, batch_size=500)
        with Memory(shared_path, scope="a", embedder=embedder) as shared:
            shared.add_many(docs_a, batch_size=500)
            lexical_shared, fused_shared = top(shared, queries, settings)
    # Ids differ between the two files (B was written first): map by text position.
    offset = args.other
    lexical_shared = [[i - offset for i in ids] for ids in lexical_shared]
    fused_shared = [[i - offset for i in ids] for ids in fused_shared]
    print(f"tenant A {args.docs} docs, tenant B {args.other} docs, {args.queries} queries")
    for leg, alone_ids, shared_ids in (
        ("lexical leg", lexical_alone, lexical_shared),
        ("fused search", fused_alone, fused_shared),
    ):
        figures = compare(alone_ids, shared_ids)
        print(
            f"{leg:13} top-10 overlap {figures['top10_overlap']:.3f}, "
            f"same top-10 order {figures['same_top10_order']:.2f}, "
            f"same first hit {figures['same_first']:.2f}"
        )


if __name__ == "__main__":
    main()
