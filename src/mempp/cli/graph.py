"""``mempp graph extract|facts``: the entity graph (:mod:`mempp.llm.graph`) from the command line.

``extract`` runs one LLM call per active row not yet extracted (``--limit`` caps them), with a
progress bar and a one-line summary; rows whose call failed stay pending and are named on
stderr. ``facts`` asks the model which entities a question names and prints the triples one
hop away, dated and as-of scoped like the rows (``--undated`` for the paper's behaviour).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mempp.errors import InvalidInput

if TYPE_CHECKING:
    from mempp.llm import LLMClient
    from mempp.memory import Memory

EXIT_OK, EXIT_PARTIAL = 0, 3


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``graph`` on an ``argparse`` subparsers object and return its parser."""
    parser = commands.add_parser(
        "graph", help="the entity graph: extract triples with an LLM, list a question's facts"
    )
    actions = parser.add_subparsers(dest="graph_command", required=True, metavar="ACTION")
    extract = actions.add_parser(
        "extract", help="extract (subject, relation, object) triples from rows not yet done"
    )
    extract.add_argument(
        "--limit", type=int, default=None, metavar="N", help="process at most N pending rows"
    )
    extract.add_argument(
        "--workers", type=int, default=1, help="LLM calls in flight at once (default 1)"
    )
    facts = actions.add_parser("facts", help="the triples one hop from a question's entities")
    facts.add_argument("query")
    facts.add_argument("--as-of", default=None, help="leave out rows dated after this date")
    facts.add_argument(
        "--limit", type=int, default=5, metavar="N", help="facts to show (default 5)"
    )
    facts.add_argument(
        "--undated",
        action="store_true",
        help="the paper's behaviour: no dates, no as-of filter",
    )
    for action in (extract, facts):
        action.add_argument(
            "--llm-base-url",
            default=None,
            help="OpenAI-compatible API root (default: $MEMPP_LLM_BASE_URL)",
        )
        action.add_argument("--model", default=None, help="model name (default: $MEMPP_LLM_MODEL)")
        action.add_argument("--json", action="store_true", help="print JSON")
    return parser


def run(args: argparse.Namespace, open_memory: Callable[[argparse.Namespace], Memory]) -> int:
    """Run ``mempp graph ...``; ``open_memory`` is the CLI's store opener."""
    from mempp.llm import LLMClient

    floor = 1 if args.graph_command == "facts" else 0
    if args.limit is not None and args.limit < floor:
        raise InvalidInput(f"--limit must be >= {floor}")
    if args.graph_command == "extract" and args.workers < 1:
        raise InvalidInput("--workers must be >= 1")
    if args.graph_command == "facts" and args.as_of is not None:
        from mempp.dates import parse_as_of

        parse_as_of(args.as_of)
    # Built before the store is opened, so a missing endpoint fails fast and cleanly.
    llm = LLMClient.from_env(base_url=args.llm_base_url, model=args.model)
    with llm, open_memory(args) as memory:
        if args.graph_command == "extract":
            return _extract(memory, llm, args)
        return _facts(memory, llm, args)


def _extract(memory: Memory, llm: LLMClient, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mempp.llm.graph import extract
    from mempp.store.base import GraphStore, supports

    store = memory.store
    supports(store, GraphStore, "the entity graph")
    pending = len(store.pending_extraction(memory.scope, None))
    total = pending if args.limit is None else min(pending, args.limit)
    with tqdm(total=total, desc="graph extract", unit="row", file=sys.stderr, disable=None) as bar:

        def progress(record_id: int, failure: str | None) -> None:
            if failure is not None:
                tqdm.write(f"record {record_id}: {failure}", file=sys.stderr)
            bar.update(1)

        report = extract(memory, llm, limit=args.limit, max_workers=args.workers, progress=progress)
    if args.json:
        _print_json(report.to_dict())
    else:
        print(report.summary())
    return EXIT_PARTIAL if report.failures else EXIT_OK


def _facts(memory: Memory, llm: LLMClient, args: argparse.Namespace) -> int:
    from mempp.llm.graph import related_facts

    facts = related_facts(
        memory,
        args.query,
        llm=llm,
        as_of=args.as_of,
        dated=not args.undated,
        limit=args.limit,
    )
    if args.json:
        _print_json([fact.to_dict() for fact in facts])
        return EXIT_OK
    if not facts:
        print("no facts found", file=sys.stderr)
    for fact in facts:
        print(fact.render())
    return EXIT_OK


def _print_json(value: object) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
