"""``mempp consolidate``: relate near-duplicate rows with an LLM (supersede, merge; logged
and undoable), one to one with ``mempp.llm.consolidate.consolidate`` and ``undo``."""

from __future__ import annotations

import argparse
from typing import Any

from mempp.cli.output import EXIT_OK, print_json
from mempp.errors import InvalidInput


def add_parser(commands: Any) -> None:
    consolidate = commands.add_parser(
        "consolidate",
        help="relate near-duplicate rows with an LLM: supersede, merge (logged, undoable)",
    )
    consolidate.add_argument(
        "--threshold",
        type=float,
        default=0.85,
        help="cosine to a group's first row for joining it (default 0.85)",
    )
    consolidate.add_argument(
        "--dry-run",
        action="store_true",
        help="make the labelling calls and log them, but change no row",
    )
    consolidate.add_argument(
        "--undo",
        type=int,
        default=None,
        metavar="RUN",
        help="restore every state run RUN changed, no LLM call (the same as `mempp undo RUN`)",
    )
    consolidate.add_argument(
        "--llm-base-url",
        default=None,
        help="OpenAI-compatible API root (default: $MEMPP_LLM_BASE_URL)",
    )
    consolidate.add_argument("--model", default=None, help="model name (default: $MEMPP_LLM_MODEL)")
    consolidate.add_argument("--json", action="store_true", help="print the run report as JSON")


def check(args: argparse.Namespace) -> None:
    """Refuse contradictory options (before the store is opened or a model is asked)."""
    if args.undo is not None and args.dry_run:
        raise InvalidInput("--undo and --dry-run cannot be combined")
    if not 0.0 < args.threshold <= 1.0:
        raise InvalidInput("--threshold is a cosine in (0, 1]")


def run(memory, args: argparse.Namespace, llm) -> int:  # type: ignore[no-untyped-def]
    from mempp.llm.consolidate import consolidate, undo

    if args.undo is not None:
        result = undo(memory, args.undo)
    else:
        with llm:
            result = consolidate(memory, llm, threshold=args.threshold, dry_run=args.dry_run)
    if args.json:
        print_json(result.to_dict())
    else:
        print(result.summary())
    return EXIT_OK
