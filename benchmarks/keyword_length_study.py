"""The structure behind the keyword leg's ranking on a benchmark half: the records' lengths
(in the full-text tokens both engines count), how many of a question's words the matched
records hold against their length, and where the gold records land in the leg's list under
a few ranking rules: the leg's coordination rule and ones that weigh it by the record's
length.

It reads the bench's cached store (pass a copy: nothing is written), the prefix match's
terms and matches (``kw_match="prefix"``, one word at a time through the store), and each
matched record's token count (``mempp.index.analysis``, FTS5's tokenizer). Run it on the
development halves only.

    MEMPP_DATASETS=/work/shared/datasets python benchmarks/keyword_length_study.py \
        orgmembench --half dev --cache CACHE
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mempp.bench import cache, halves, runner
from mempp.bench.datasets import default_data_root
from mempp.dates import parse_as_of
from mempp.encoders import embedder_named
from mempp.index.analysis import analyze
from mempp.search.keyword import MAX_TERM_ROWS, prefix_terms
from mempp.store import open_store

Rule = Callable[[int, float, int, float], float]


def _quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    q = np.quantile(values, [0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
    return " / ".join(f"{v:.0f}" for v in q)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("benchmark", choices=("orgmembench", "locomo"))
    parser.add_argument("--half", choices=("dev",), default="dev")
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--encoder", default=None)
    parser.add_argument("--limit", type=int, default=50, help="the leg's list length")
    args = parser.parse_args()
    bench = halves.restrict(runner.load_benchmark(args.benchmark, default_data_root()), args.half)
    embedder = embedder_named(args.encoder)
    ingested = cache.ingest(bench, embedder, args.cache, progress=False)
    store = open_store(ingested.path)
    items = ingested.record_items
    scopes = sorted({q.scope for q in bench.questions})
    lengths: dict[int, int] = {}
    in_scope: dict[str, set[int]] = {}
    for scope in scopes:
        found = store.get(scope, list(items))
        in_scope[scope] = set(found)
        for row, record in found.items():
            lengths[row] = len(analyze([record.text])[0])

    def length(row: int) -> int:
        return lengths[row]

    # Every record of the half's scopes, for the length distribution.
    all_lengths = list(lengths.values())
    mean_length = float(np.mean(all_lengths))
    print(f"records: {len(all_lengths)}, tokens p10/25/50/75/90/99: {_quantiles(all_lengths)}")

    rules: dict[str, Rule] = {
        # (held, weight sum, length, mean length) -> score; ties to the newer id.
        "coord": lambda h, s, n, m: h * 1e6 + s,
        "coord/log(len)": lambda h, s, n, m: h / math.log(2 + n) * 1e6 + s,
        "bm25-coord (b=.75)": lambda h, s, n, m: h / (h + 1.2 * (0.25 + 0.75 * n / m)) * 1e6 + s,
        "coord/sqrt(len)": lambda h, s, n, m: h / math.sqrt(n) * 1e6 + s,
    }
    gold_ranks: dict[str, list[int | None]] = {name: [] for name in rules}
    top_lengths: dict[str, list[int]] = {name: [] for name in rules}
    held_gold: Counter[tuple[int, int]] = Counter()
    held_all: Counter[tuple[int, int]] = Counter()
    matched_lengths: list[int] = []
    gold_lengths: list[int] = []
    with_gold = 0
    chance_held: list[tuple[float, int]] = []
    gold_held: list[tuple[float, int]] = []
    for question in bench.questions:
        as_of = parse_as_of(question.as_of)
        words = prefix_terms(question.text)
        matches = {
            w: store.keyword_prefix(question.scope, [w], as_of, MAX_TERM_ROWS + 1) for w in words
        }
        counted = {w: set(ids) for w, ids in matches.items() if 0 < len(ids) <= MAX_TERM_ROWS}
        if not counted:
            continue
        rows = set().union(*counted.values())
        total = len(rows)
        held = dict.fromkeys(rows, 0)
        score = dict.fromkeys(rows, 0.0)
        for ids in counted.values():
            weight = math.log1p(total / len(ids))
            for row in ids:
                held[row] += 1
                score[row] += weight
        gold = {row for row in rows if set(items.get(row, ())) & set(question.gold)}
        with_gold += bool(gold)
        scope_rows = [r for r in lengths if r in in_scope[question.scope]]
        for row in scope_rows:
            fraction = held.get(row, 0) / len(words)
            (gold_held if row in gold else chance_held).append((fraction, length(row)))
        for row in rows:
            held_all[(len(counted), held[row])] += 1
            matched_lengths.append(length(row))
            if row in gold:
                held_gold[(len(counted), held[row])] += 1
                gold_lengths.append(length(row))
        for name, rule in rules.items():
            ranked = sorted(
                rows,
                key=lambda r, rule=rule: (-rule(held[r], score[r], length(r), mean_length), -r),
            )[: args.limit]
            best = min((i + 1 for i, r in enumerate(ranked) if r in gold), default=None)
            gold_ranks[name].append(best)
            top_lengths[name] += [length(r) for r in ranked[:10]]
    print(f"questions: {len(bench.questions)}, with a gold record matched: {with_gold}")
    print("tokens up to: share of records / mean share of a question's terms held by chance")
    print("  (non-gold records of the question's scope) / by gold records")
    edges = [16, 32, 64, 128, 256, 512, 1024, 1 << 30]
    for low, high in zip([0, *edges], edges, strict=False):
        share = sum(1 for n in all_lengths if low < n <= high) / len(all_lengths)
        chance = [f for (f, n) in chance_held if low < n <= high]
        golds = [f for (f, n) in gold_held if low < n <= high]
        mean_c = f"{np.mean(chance):.3f}" if chance else "-"
        mean_g = f"{np.mean(golds):.3f}" if golds else "-"
        print(f"  ({low}, {high}]: {share:.3f} / {mean_c} / {mean_g} ({len(golds)} gold)")
    print(f"matched records' tokens p10/25/50/75/90/99: {_quantiles(matched_lengths)}")
    print(f"gold matched records' tokens p10/25/50/75/90/99: {_quantiles(gold_lengths)}")
    print("terms n, held k: matched records (gold among them)")
    for key in sorted(held_all):
        print(f"  n={key[0]} k={key[1]}: {held_all[key]} ({held_gold.get(key, 0)})")
    print(f"rule: questions with a gold record in the leg's top 1 / 5 / 10 / {args.limit}")
    for name, ranks in gold_ranks.items():
        at = [sum(1 for r in ranks if r is not None and r <= k) for k in (1, 5, 10, args.limit)]
        print(
            f"  {name}: "
            + " / ".join(str(a) for a in at)
            + "; the top 10's tokens p25/50/75 "
            + " / ".join(f"{v:.0f}" for v in np.quantile(top_lengths[name], [0.25, 0.5, 0.75]))
        )
    store.close()


if __name__ == "__main__":
    main()
