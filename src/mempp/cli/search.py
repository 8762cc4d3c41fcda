"""``mempp search``, ``evidence`` and ``ask``: ranked hits, the evidence block and an LLM's
answer for a query, one to one with ``Memory.search``, ``Memory.evidence`` and
``mempp.llm.answer.ask`` (the filters are ``mempp.cli.time``'s)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mempp.cli.output import EXIT_OK, empty_scope_hint, print_json
from mempp.cli.time import add_filter_arguments
from mempp.errors import InvalidInput
from mempp.search.evidence import Evidence
from mempp.search.packing import PackingOptions

# The evidence block's size unless --budget says otherwise: ask's answer window, so that one
# huge document cannot make the block as large as itself.
EVIDENCE_BUDGET = 40_000


def add_parser(commands: Any) -> None:
    for name, text in (("search", "ranked hits"), ("evidence", "the evidence block")):
        sub = commands.add_parser(name, help=f"print {text} for a query")
        sub.add_argument("query")
        sub.add_argument("--as-of", help="only documents dated up to this ISO 8601 date")
        sub.add_argument("-k", type=int, default=None, help="rows to return (default 50)")
        sub.add_argument("--preset", default=None, help="settings preset (default: default)")
        sub.add_argument("--json", action="store_true")
        add_filter_arguments(sub)
        if name == "evidence":
            sub.add_argument(
                "--budget",
                type=int,
                default=EVIDENCE_BUDGET,
                help=f"max characters (default {EVIDENCE_BUDGET}, what ask shows the model)",
            )
            sub.add_argument("--style", choices=("headers", "paper"), default="headers")
            sub.add_argument(
                "--pack",
                action="store_true",
                help="show long records below the best-ranked as query-focused excerpts",
            )
            defaults = PackingOptions()
            for option, what in (
                ("threshold", "records up to this many characters stay whole"),
                ("cap", "characters of a long record shown"),
                ("passage", "longest passage, in characters"),
                ("whole-first", "best-ranked hits always shown whole"),
            ):
                field = option.replace("-", "_")
                sub.add_argument(
                    f"--pack-{option}",
                    type=int,
                    default=None,
                    dest=f"pack_{field}",
                    help=f"with --pack: {what} (default {getattr(defaults, field)})",
                )

    ask = commands.add_parser("ask", help="answer a question from memory with an LLM")
    ask.add_argument("question")
    ask.add_argument("--as-of", help="answer as of this ISO 8601 date")
    ask.add_argument("-k", type=int, default=50, help="rows of evidence to retrieve (default 50)")
    ask.add_argument(
        "--budget",
        type=int,
        default=EVIDENCE_BUDGET,
        help=f"max characters of evidence (default {EVIDENCE_BUDGET})",
    )
    ask.add_argument(
        "--llm-base-url",
        default=None,
        help="OpenAI-compatible API root, e.g. http://localhost:11434/v1 "
        "(default: $MEMPP_LLM_BASE_URL)",
    )
    ask.add_argument("--model", default=None, help="model name (default: $MEMPP_LLM_MODEL)")
    ask.add_argument(
        "--pack", action="store_true", help="long records below the best-ranked as excerpts"
    )
    ask.add_argument("--json", action="store_true", help="print {answer, citations, evidence}")
    add_filter_arguments(ask)


def packing_from(args: argparse.Namespace) -> PackingOptions | None:
    """The validated ``--pack`` options of ``evidence`` (before the store is opened)."""
    fields = ("threshold", "cap", "passage", "whole_first")
    given = {
        f: getattr(args, f"pack_{f}") for f in fields if getattr(args, f"pack_{f}") is not None
    }
    if given and not args.pack:
        raise InvalidInput("--pack-* options need --pack")
    return PackingOptions(**given) if args.pack else None


def search(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    hits = memory.search(
        args.query, as_of=args.as_of, k=args.k, settings=args.preset, filters=args.filters
    )
    if args.json:
        print_json([hit.to_dict() for hit in hits])
        return EXIT_OK
    for hit in hits:
        record = hit.record
        legs = ",".join(hit.legs) or "-"
        flag = " reserved" if hit.reserved else ""
        head = f"{hit.rank:>3}. #{record.id}  {record.day or 'undated'}  {record.author or '-'}"
        print(f"{head}  score={hit.score:.5f} legs={legs}{flag}")
        print("     " + _snippet(record.text))
    if not hits:
        print("no matching records" + empty_scope_hint(memory), file=sys.stderr)
    return EXIT_OK


def evidence(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    block: Evidence = memory.evidence(
        args.query,
        as_of=args.as_of,
        k=args.k,
        budget=args.budget,
        style=args.style,
        settings=args.preset,
        packing=args.packing,
        filters=args.filters,
    )
    if args.json:
        print_json(block.to_dict())
    else:
        print(block.text)
    return EXIT_OK


def ask(memory, args: argparse.Namespace, llm) -> int:  # type: ignore[no-untyped-def]
    from mempp.llm.answer import ask as answer_question

    answer = answer_question(
        memory,
        args.question,
        as_of=args.as_of,
        k=args.k,
        llm=llm,
        budget=args.budget,
        packing=PackingOptions() if args.pack else None,
        filters=args.filters,
    )
    if args.json:
        print_json(answer.to_dict())
        return EXIT_OK
    print(answer.answer)
    if answer.citations:
        cited = []
        for record_id in answer.citations:
            record = memory.get(record_id)
            who = f", {record.author}" if record.author else ""
            cited.append(f"#{record_id} ({record.day or 'undated'}{who})")
        print("\ncited: " + "; ".join(cited))
    return EXIT_OK


def _snippet(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."
