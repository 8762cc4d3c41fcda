"""How far the context leg at query time (``ctx_source="query"``) is from the context index's
(issue 37, session 16): both legs on the same store and questions, their lists compared.

The query-time leg scores the sum rule's contexts exactly but only of the vector leg's C
candidates and their thread followers, so a row the index ranks can be missing from it; this
counts how often, on a bench store whose context index holds the sum rule (a copy the bench
built with ``mempp:default-keyword-context``; the store is only read):

    python benchmarks/context_query_agreement.py --store /work/ctxq-cache/locomo-*/store.db \
        --data /work/shared/datasets --half dev

Per question: whether the two lists are equal (whole, first 10, first 50), and the share
of the index leg's first 10 rows, and of its whole list, that the query-time list holds
(the same settings otherwise: the ``default-keyword-context`` preset, members credited).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from mempp import Memory, preset
from mempp.bench.halves import restrict
from mempp.bench.runner import load_benchmark
from mempp.encoders import default_embedder
from mempp.store.context import ContextStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--half", choices=("dev", "test"), default="dev")
    args = parser.parse_args()
    benchmark = restrict(load_benchmark("locomo", args.data), args.half)
    stored = preset("default-keyword-context")
    query = stored.with_(ctx_source="query")
    embedder = default_embedder()
    equal, same10, same50, top10, top_c, sizes = 0, 0, 0, [], [], []
    with Memory(args.store, embedder=embedder) as memory:
        store = memory.store
        rule = store.context_rule() if isinstance(store, ContextStore) else None
        if rule is None or rule.kind != "sum":
            raise SystemExit(f"{args.store}: no context index of the sum rule ({rule})")
        for question in benchmark.questions:
            scoped = Memory(store, scope=question.scope, embedder=embedder)
            index = scoped.legs(question.text, as_of=None, settings=stored).ctx
            found = scoped.legs(question.text, as_of=None, settings=query).ctx
            equal += index == found
            same10 += index[:10] == found[:10]
            same50 += index[:50] == found[:50]
            held = set(found)
            if index:
                top10.append(sum(r in held for r in index[:10]) / len(index[:10]))
                top_c.append(sum(r in held for r in index) / len(index))
            sizes.append((len(index), len(found)))
    n = len(benchmark.questions)
    print(f"{n} questions ({args.half} half), rule {rule.describe()}, C = {stored.candidates}")
    print(f"lists equal: {equal} ({100 * equal / n:.1f}%)")
    print(f"first 10 equal, in order: {same10} ({100 * same10 / n:.1f}%)")
    print(f"first 50 equal, in order: {same50} ({100 * same50 / n:.1f}%)")
    print(f"index leg's first 10 also in the query-time list: {100 * statistics.mean(top10):.1f}%")
    print(f"index leg's whole list also in the query-time one: {100 * statistics.mean(top_c):.1f}%")
    print(
        "mean list length, index / query time: "
        f"{statistics.mean(s[0] for s in sizes):.1f} / {statistics.mean(s[1] for s in sizes):.1f}"
    )


if __name__ == "__main__":
    main()
