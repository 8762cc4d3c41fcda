"""The keyword leg under other term and ranking rules, scored by the project's bench: each
rule replaces, in this process only, the leg's term choice (``keyword_terms``) and its
ranking (``rank_matches``) on both engines' modules, then ``mempp.bench`` runs the named
systems into ``<out>/<rule>/results.json`` (compare them with ``benchmarks/paired_table.py``).

The rules (all global: nothing depends on the benchmark or the question):

* ``idf`` the leg as shipped before session 16: the first 8 terms, rows by summed
  ``log(1 + n / df)``;
* ``coord`` (the leg's rule since session 16): rows by the number of distinct terms they
  hold first, summed weight second;
* ``df1`` terms held by one row only are dropped, then as ``idf``;
* ``coord-df1`` both: terms of one row dropped, then as ``coord``;
* ``all-coord`` every term (up to 32), ranked as ``coord``;
* ``bm25`` weight ``log((n - df + 0.5) / (df + 0.5))`` floored at a small epsilon;
* ``rare8`` every term (up to 32), the 8 held by the fewest rows kept, ranked as ``idf``.

The prefix match (``kw_match="prefix"``) is a setting of its own: name it as a system,
``--systems mempp-default "mempp:default-keyword+kw_match=prefix"``.

    MEMPP_DATASETS=/work/shared/datasets python benchmarks/keyword_rules.py orgmembench \
        --half dev --cache /tmp/my-cache --out /tmp/rules --rules idf coord
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import mempp.search.keyword as kw
import mempp.search.retrieval as retrieval
import mempp.store.postgres.keyword as pg_kw
import mempp.store.sqlite.keyword as sqlite_kw
from mempp.bench.cli import main as bench_main

_SHIPPED_TERMS = kw.keyword_terms
_SHIPPED_RANK = kw.rank_matches


def _counted(matches: Mapping[str, Sequence[int]]) -> dict[str, set[int]]:
    return {t: set(ids) for t, ids in matches.items() if 0 < len(ids) <= kw.MAX_TERM_ROWS}


def _ranked(
    counted: dict[str, set[int]],
    limit: int,
    weight: Callable[[int, int], float],
    *,
    coordination: bool,
) -> list[int]:
    if not counted or limit <= 0:
        return []
    rows = set().union(*counted.values())
    n = len(rows)
    scores = dict.fromkeys(rows, 0.0)
    held = dict.fromkeys(rows, 0)
    for term in sorted(counted):
        w = weight(n, len(counted[term]))
        for row in counted[term]:
            scores[row] += w
            held[row] += 1
    if coordination:
        return sorted(rows, key=lambda r: (-held[r], -scores[r], -r))[:limit]
    return sorted(rows, key=lambda r: (-scores[r], -r))[:limit]


def _log_idf(n: int, df: int) -> float:
    return math.log1p(n / df)


def _bm25_idf(n: int, df: int) -> float:
    return max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)


def _all_terms(question: str) -> tuple[str, ...]:
    saved = kw.MAX_TERMS
    kw.MAX_TERMS = 32
    try:
        return _SHIPPED_TERMS(question)
    finally:
        kw.MAX_TERMS = saved


def _rare8(counted: dict[str, set[int]]) -> dict[str, set[int]]:
    kept = sorted(counted, key=lambda t: (len(counted[t]), t))[: kw.MAX_TERMS]
    return {t: counted[t] for t in kept}


RULES: dict[str, tuple[Callable[[str], tuple[str, ...]], Callable[..., list[int]]]] = {
    "idf": (
        _SHIPPED_TERMS,
        lambda m, limit: _ranked(_counted(m), limit, _log_idf, coordination=False),
    ),
    # The leg's own rule since session 16.
    "coord": (_SHIPPED_TERMS, _SHIPPED_RANK),
    "df1": (
        _SHIPPED_TERMS,
        lambda m, limit: _ranked(
            {t: ids for t, ids in _counted(m).items() if len(ids) > 1},
            limit,
            _log_idf,
            coordination=False,
        ),
    ),
    "coord-df1": (
        _SHIPPED_TERMS,
        lambda m, limit: _ranked(
            {t: ids for t, ids in _counted(m).items() if len(ids) > 1},
            limit,
            _log_idf,
            coordination=True,
        ),
    ),
    "all-coord": (
        _all_terms,
        lambda m, limit: _ranked(_counted(m), limit, _log_idf, coordination=True),
    ),
    "bm25": (
        _SHIPPED_TERMS,
        lambda m, limit: _ranked(_counted(m), limit, _bm25_idf, coordination=False),
    ),
    "rare8": (
        _all_terms,
        lambda m, limit: _ranked(_rare8(_counted(m)), limit, _log_idf, coordination=False),
    ),
}


def use(rule: str) -> None:
    """Install ``rule`` in this process (the retrieval path and both engines' legs)."""
    terms, rank = RULES[rule]
    retrieval.keyword_terms = terms  # type: ignore[assignment]
    sqlite_kw.rank_matches = rank  # type: ignore[assignment]
    pg_kw.rank_matches = rank  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("benchmark", choices=("orgmembench", "locomo"))
    parser.add_argument("--half", choices=("dev",), required=True)  # test halves: the lead's
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rules", nargs="+", choices=sorted(RULES), default=sorted(RULES))
    parser.add_argument("--systems", nargs="+", default=["mempp-default", "mempp:default-keyword"])
    args = parser.parse_args()
    for rule in args.rules:
        use(rule)
        bench_main(
            [
                args.benchmark,
                "--half",
                args.half,
                "--systems",
                *args.systems,
                "--sweep",
                "0",
                "--no-plots",
                "--quiet",
                "--cache",
                str(args.cache),
                "--out",
                str(args.out / rule),
            ]
        )


if __name__ == "__main__":
    main()
