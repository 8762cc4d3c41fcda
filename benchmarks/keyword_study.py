"""Why a question's evidence window changes when the keyword leg is added: for each question
whose window recall differs between two settings (default: ``default`` and
``default-keyword``), the question, its keyword terms with their in-scope row counts, each
gold item's rank and whether it starts inside the window under both settings, and the items
that entered and left the window with their rank in each leg and their rendered length.

It reads the bench's own cached store (``mempp bench`` builds it; the keyword index is
enabled on it, so pass a cache of your own) and the bench's own retrieval and window code, so
its figures are the bench's.

    MEMPP_DATASETS=/work/shared/datasets python benchmarks/keyword_study.py orgmembench \
        --half dev --cache /tmp/my-bench-cache
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mempp.bench import cache, halves, runner
from mempp.bench.datasets import default_data_root
from mempp.bench.metrics import window_recall
from mempp.bench.retrieve import MemppRetriever, clean_question
from mempp.bench.systems import preset_with
from mempp.dates import parse_as_of
from mempp.encoders import embedder_named
from mempp.search.keyword import MAX_TERM_ROWS, keyword_terms
from mempp.store import open_store


def _ranks(legs: Any) -> dict[str, dict[int, int]]:
    return {leg: {row: i + 1 for i, row in enumerate(ids)} for leg, ids in legs.as_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("benchmark", choices=("orgmembench", "locomo"))
    parser.add_argument("--half", choices=("dev", "test"), required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--base", default="default")
    parser.add_argument("--other", default="default-keyword")
    parser.add_argument("--window", type=int, default=runner.DEFAULT_WINDOW)
    parser.add_argument("--encoder", default=None)
    args = parser.parse_args()
    bench = halves.restrict(runner.load_benchmark(args.benchmark, default_data_root()), args.half)
    embedder = embedder_named(args.encoder)
    ingested = cache.ingest(bench, embedder, args.cache, progress=False)
    store = open_store(ingested.path)
    store.enable_index("keyword")
    retriever = MemppRetriever(store, ingested.record_items)
    items = ingested.record_items
    settings = {name: preset_with(name) for name in (args.base, args.other)}
    changed = lost = gained = 0
    for question in bench.questions:
        as_of = parse_as_of(question.as_of)
        vector = embedder.embed([clean_question(question.text)])[0]
        seen: dict[str, Any] = {}
        for name, chosen in settings.items():
            legs = retriever.legs(question.scope, question.text, vector, as_of, chosen)
            hits = retriever.hits(question.scope, legs, as_of, chosen, chosen.k)
            result = retriever.retrieved(hits, "headers", None, clean_question(question.text))
            inside = window_recall(result.window, question.gold, args.window, result.parts)
            window = {
                item: entry
                for entry in result.window
                if entry.offset < args.window
                for item in entry.items
            }
            seen[name] = (hits, _ranks(legs), window, inside[0] if inside else None)
        (base_hits, _, base_window, base_recall) = seen[args.base]
        (other_hits, other_ranks, other_window, other_recall) = seen[args.other]
        if base_recall == other_recall:
            continue
        changed += 1
        lost += other_recall < base_recall
        gained += other_recall > base_recall
        shift = f"{base_recall:.2f} -> {other_recall:.2f}"
        print(f"\n### {question.id} ({question.category}) window {shift}")
        print(f"question: {question.text}")
        terms = keyword_terms(question.text)
        counts = {
            term: len(store.keyword(question.scope, [term], as_of, MAX_TERM_ROWS + 1))
            for term in terms
        }
        print("terms (in-scope rows; > 1000 counts for nothing):", counts)
        position = {
            name: {(items.get(h.id) or ("?",))[0]: i + 1 for i, h in enumerate(seen[name][0])}
            for name in settings
        }
        for gold in sorted(question.gold):
            print(
                f"  gold {gold}: rank {position[args.base].get(gold, '-')} -> "
                f"{position[args.other].get(gold, '-')}; in window "
                f"{gold in base_window} -> {gold in other_window}"
            )
        ids = {(items.get(h.id) or ("?",))[0]: h.id for h in [*base_hits, *other_hits]}
        for label, entered in (
            ("entered", [i for i in other_window if i not in base_window]),
            ("left", [i for i in base_window if i not in other_window]),
        ):
            for item in entered:
                row = ids.get(item)
                legs = {leg: ranks.get(row) for leg, ranks in other_ranks.items() if row in ranks}
                entry = (other_window if label == "entered" else base_window)[item]
                print(
                    f"  {label}: {item} (gold: {item in question.gold}) rank "
                    f"{position[args.base].get(item, '-')} -> {position[args.other].get(item, '-')}"
                    f", legs {legs}, {entry.length} chars"
                )
    print(f"\n{changed} questions changed: {gained} gained, {lost} lost")
    store.close()


if __name__ == "__main__":
    main()
