"""Side by side in one process, query by query: the tag leg in RAM vs in SQL, and the lexical
leg with its eligibility checked per candidate vs against a mask of every id.

Not a test: run it on a store bench_scale.py built (pass a copy: it may save files beside
it), read the figures. Each query runs both ways back to back, so the ratios hold on a busy
machine; the results are checked to be identical.

    nice -n 10 python benchmarks/bench_legs_ab.py /path/to/scale-1000000-s1.db --queries 60
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_scale import Corpus, bounds, quantiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from mempp import Memory
    from mempp.filters import NO_FILTERS
    from mempp.search.query import lexical_query, tag_labels
    from mempp.store.sqlite import legs

    questions = Corpus(args.seed).questions(args.queries)
    with Memory(args.path) as memory:
        begun = time.perf_counter()
        memory.warm()
        print(f"warm() {time.perf_counter() - begun:.1f} s")
        store, scope, settings = memory.store, memory.scope, memory.settings
        limit = settings.candidates
        dense_share = legs._DENSE_ELIGIBLE_SHARE
        for label, bound in bounds(args.path).items():
            samples: dict[str, list[float]] = {}
            for question in questions:
                labels = tag_labels(question, settings)
                terms = lexical_query(question, settings)
                runs = {
                    "tag, SQL": lambda b=bound, t=labels: store._tagged_sql(
                        scope, t, b, limit, NO_FILTERS
                    ),
                    "tag, in RAM": lambda b=bound, t=labels: store.tagged(scope, t, b, limit),
                    "lexical, per-candidate lookup": lambda b=bound, q=terms: store.lexical(
                        scope, q, b, limit
                    ),
                    "lexical, mask when many": lambda b=bound, q=terms: store.lexical(
                        scope, q, b, limit
                    ),
                }
                found = {}
                for name, run in runs.items():
                    # share 0: every candidate looked up (the way before the mask)
                    legs._DENSE_ELIGIBLE_SHARE = 0 if "lookup" in name else dense_share
                    begun = time.perf_counter()
                    found[name] = run()
                    samples.setdefault(name, []).append(time.perf_counter() - begun)
                legs._DENSE_ELIGIBLE_SHARE = dense_share
                assert found["tag, SQL"] == found["tag, in RAM"], question
                assert found["lexical, per-candidate lookup"] == found["lexical, mask when many"]
            cells = "  ".join(
                "{}: {:.1f}/{:.1f}/{:.1f}".format(name, *quantiles(values))
                for name, values in samples.items()
            )
            print(f"as-of {label:5} p50/p95/p99 ms  {cells}")


if __name__ == "__main__":
    main()
