"""``mempp import SOURCE PATH...`` and ``mempp ingest PATH...``: read with an importer, store
in batches, show progress, print what was added, skipped (by reason) and failed.

``add_parser(commands)`` registers both on the ``mempp`` sub-commands; ``run(args, open_memory,
location)`` executes one, returning the exit code: 0 done, 2 bad input (a path that is not
an export: nothing stored), 3 done but some items failed (each printed as
``file:item: reason``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from mempp.errors import InvalidInput
from mempp.importers.base import DEFAULT_BATCH, ImportReport, Item, ItemError, Notice, Skipped

if TYPE_CHECKING:
    from mempp.memory import Memory

EXIT_OK, EXIT_PARTIAL = 0, 3
# Documents per transaction of ``--bulk``: large enough for the COPY write path.
BULK_BATCH = 2000


def add_parser(commands: Any) -> None:
    """Register ``ingest``, ``import`` and ``watch`` on an argparse subparsers object."""
    ingest = commands.add_parser(
        "ingest", help="store documents from JSONL files, Markdown/text files and folders"
    )
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    _common(ingest)
    imports = commands.add_parser(
        "import",
        help="store an organization's record from where it lives: a Slack export, mailboxes",
        description="Import documents with an importer: slack (a workspace export, .zip or "
        "folder), mail (.mbox, .eml, Maildir, or a folder of them), folder (what ingest "
        "reads), github / gitlab (saved API responses), jira (XML or CSV export), confluence "
        "(HTML export), notion (Markdown & CSV or HTML export), discord, teams, trello, "
        "transcript, keep (see docs/importers.md), or one an installed package registers "
        "(entry-point group mempp.importers).",
    )
    imports.add_argument(
        "source", metavar="SOURCE", help="an importer's name (mempp's, or installed)"
    )
    imports.add_argument("paths", nargs="+", metavar="PATH")
    imports.add_argument(
        "--date",
        metavar="YYYY-MM-DD",
        default=None,
        help="the day of a source whose items carry only times (a meeting transcript); "
        "passed to the importer as its date option",
    )
    imports.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the importer, as a keyword argument (repeatable): "
        "--option author='Ana López' names a Keep Takeout's owner",
    )
    _common(imports)
    from mempp.importers.watch import add_parser as add_watch_parser

    add_watch_parser(commands)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"documents per transaction ({DEFAULT_BATCH}; {BULK_BATCH} with --bulk)",
    )
    parser.add_argument(
        "--bulk",
        action="store_true",
        help="a large load: on PostgreSQL, build the vector index once at the end",
    )
    parser.add_argument("--dry-run", action="store_true", help="read and report, write nothing")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")


def run(
    args: argparse.Namespace,
    open_memory: Callable[[argparse.Namespace], Memory],
    location: str,
) -> int:
    from tqdm import tqdm

    from mempp.importers import get
    from mempp.importers.base import read_paths, source_rule, store_items

    batch_size = args.batch_size
    if batch_size is None:
        batch_size = BULK_BATCH if args.bulk else DEFAULT_BATCH
    if batch_size < 1:
        raise InvalidInput("--batch-size must be >= 1")
    options = _options(getattr(args, "option", []))
    if getattr(args, "date", None) is not None:
        options["date"] = args.date
    importer = get("folder" if args.command == "ingest" else args.source, **options)
    missing = [path for path in args.paths if not os.path.lexists(path)]
    if missing and len(missing) == len(args.paths):
        # Nothing to read at all: a mistyped path is bad input, and no store is created for it
        # (a missing path among others is reported with the failed items, as it always was).
        raise InvalidInput(f"{missing[0]}: no such file or folder")
    items = read_paths(importer, args.paths)  # a path that is no export fails here, storeless
    memory = None
    if not args.dry_run or _exists(location):  # a dry run creates no store
        memory = open_memory(args)
    label = "ingest" if args.command == "ingest" else f"import {importer.name}"
    with tqdm(desc=label, unit="item", file=sys.stderr, disable=None) as bar:

        def tell(item: Item) -> None:
            line = _line(item)
            if line is not None:
                tqdm.write(line, file=sys.stderr)

        bulk = memory.bulk_load() if args.bulk and memory is not None else nullcontext()
        try:
            with bulk:
                report = store_items(
                    memory,
                    items,
                    source=importer.name,
                    by_source=source_rule(importer),
                    dry_run=args.dry_run,
                    batch_size=batch_size,
                    on_item=tell,
                    progress=bar.update,
                )
        finally:
            if memory is not None:
                memory.close()
    _print(report, args.json)
    return EXIT_PARTIAL if report.failures else EXIT_OK


def _options(pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` pairs as keyword options (values are strings; the importer checks them)."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise InvalidInput(f"--option must be KEY=VALUE with KEY a name, got {pair!r}")
        options[key.strip()] = value
    return options


def _exists(location: str) -> bool:
    if location.startswith(("postgresql://", "postgres://")):
        return True
    path = location.removeprefix("sqlite:///")
    return path == ":memory:" or os.path.exists(path)


def _line(item: Item) -> str | None:
    if isinstance(item, ItemError):
        return f"{item.location}: {item.reason}"
    if isinstance(item, Notice):
        return f"{item.location}: warning: {item.message}"
    if isinstance(item, Skipped) and item.detail is not None:
        return f"{item.location}: skipped: {item.detail}"
    return None


def _print(report: ImportReport, as_json: bool) -> None:
    if as_json:
        json.dump(report.to_dict(), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(report.summary())
