"""``mempp add``: store one document, one to one with ``Memory.add`` (the text from the
command line or from stdin)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mempp import validate
from mempp.cli.output import EXIT_OK, print_json
from mempp.records import Document


def add_parser(commands: Any) -> None:
    add = commands.add_parser("add", help="store one document")
    add.add_argument("text", help="the document text, or - to read it from stdin")
    add.add_argument("--author")
    add.add_argument("--date", help="event date, ISO 8601 (YYYY-MM-DD or datetime)")
    add.add_argument("--tag", action="append", default=[], dest="tags", help="repeatable")
    add.add_argument("--source", help="where the document came from (URI, path)")
    add.add_argument(
        "--thread", help="conversation, channel thread, e-mail thread or ticket it belongs to"
    )
    add.add_argument("--json", action="store_true", help="print a JSON object")


def document_from(args: argparse.Namespace) -> Document:
    """The validated document of a parsed command line (before the store is opened)."""
    return Document.create(
        _read_stdin() if args.text == "-" else args.text,
        author=args.author,
        date=args.date,
        tags=args.tags,
        source=args.source,
        thread=args.thread,
    )


def _read_stdin() -> str:
    """Standard input as UTF-8 text, read as bytes so that bad bytes are an input error."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # replaced by a text stream (tests, embedding programs)
        return sys.stdin.read()
    return validate.decode_utf8(buffer.read(), "stdin")


def run(memory, args: argparse.Namespace, document) -> int:  # type: ignore[no-untyped-def]
    [result] = memory.add_many([document])
    if args.json:
        print_json(
            {"id": result.id, "skipped": result.skipped, "duplicate_of": result.duplicate_of}
        )
    elif result.added:
        print(result.id)
    elif result.duplicate_of is not None:
        print(f"skipped ({result.skipped} of record {result.duplicate_of})", file=sys.stderr)
    else:
        print(f"skipped ({result.skipped})", file=sys.stderr)
    return EXIT_OK
