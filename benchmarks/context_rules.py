"""The context rules side by side (issue 37, session 16): a copy of a bench cache's store per
rule, its context index built by that rule (``mempp.store.context.ContextRule``), the time
the build took, then the bench's command for each copy.

    python benchmarks/context_rules.py --base /work/bench-cache --root /work/s16-ctx-cache \
        text:2:400 text:2:150 sum:1:1 sum:2:1 sum:2:0.5

Each RULE is ``text:DEPTH:CHARS`` or ``sum:DEPTH:DECAY``. A copy already built is reused
(its meta names its rule); the base is only read. Then, for each copy:

    python -m mempp.bench locomo --half dev --cache ROOT/NAME --out OUT/NAME --systems \
        mempp-default mempp:default+w_ctx=0.5+ctx_credit=members mempp:default-keyword-context

and ``benchmarks/paired_table.py OUT/NAME/results.json --reference mempp-default``.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from mempp import context as contexts
from mempp.encoders import default_embedder
from mempp.store import open_store
from mempp.store.context import ContextRule, ContextStore


def parse_rule(spec: str) -> ContextRule:
    kind, depth, value = spec.split(":")
    if kind == "text":
        return ContextRule("text", int(depth), chars=int(value))
    return ContextRule("sum", int(depth), decay=float(value))


def name_of(spec: str) -> str:
    return spec.replace(":", "-")


def copy_cache(base: Path, target: Path, benchmark: str) -> Path:
    """``target`` holding a copy of ``base``'s folders of ``benchmark`` (store, questions)."""
    target.mkdir(parents=True, exist_ok=True)
    for folder in sorted(p for p in base.glob(f"{benchmark}-*") if p.is_dir()):
        out = target / folder.name
        if out.exists():
            continue
        partial = target / f"{folder.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(folder, partial)
        partial.rename(out)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rules", nargs="+", metavar="RULE")
    parser.add_argument("--base", type=Path, required=True, help="a bench cache (read only)")
    parser.add_argument("--root", type=Path, required=True, help="where the copies go")
    parser.add_argument("--benchmark", default="locomo")
    args = parser.parse_args()
    embedder = default_embedder()
    for spec in args.rules:
        rule = parse_rule(spec)
        target = copy_cache(args.base, args.root / name_of(spec), args.benchmark)
        for folder in sorted(target.glob(f"{args.benchmark}-*")):
            store = open_store(folder / "store.db")
            try:
                assert isinstance(store, ContextStore)
                started = time.perf_counter()
                made = contexts.enable(store, embedder, rule=rule)
                seconds = time.perf_counter() - started
                stored, records = store.context_count()
                print(
                    f"{spec}: {folder}: {made} contexts made in {seconds:.1f} s "
                    f"({stored} of {records} records; {rule.describe()})",
                    flush=True,
                )
            finally:
                store.close()


if __name__ == "__main__":
    main()
