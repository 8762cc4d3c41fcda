"""``mempp get``, ``info`` and ``export``: what the store holds, read out (records whole by
id, the counts and encoder, every record as JSON Lines), one to one with ``Memory.store.get``,
the store's counts and ``Memory.records``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from mempp import validate
from mempp.cli.output import (
    EXIT_ERROR,
    EXIT_OK,
    INFO_SCOPES_SHOWN,
    empty_scope_hint,
    fail,
    print_json,
)
from mempp.errors import InvalidInput
from mempp.records import Record
from mempp.store.base import ReembedStore

COMMANDS = ("get", "info", "export")


def add_parser(commands: Any) -> None:
    get = commands.add_parser("get", help="print stored records whole, by id (any state)")
    get.add_argument("ids", nargs="+", type=_record_id, metavar="ID")
    get.add_argument("--json", action="store_true", help="print a JSON list")

    info = commands.add_parser("info", help="what the store holds: records, encoder, schema")
    info.add_argument("--json", action="store_true", help="print a JSON object")

    export = commands.add_parser(
        "export", help="write every record as JSON Lines (which `mempp ingest` reads back)"
    )
    export.add_argument("--out", help="file to write (default: standard output)")
    export.add_argument("--active-only", action="store_true", help="leave archived records out")


def check_out(args: argparse.Namespace) -> None:
    """Refuse an ``export --out`` that cannot be written (before the store is opened)."""
    if args.out is not None:
        folder = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(folder):
            raise InvalidInput(f"cannot write {args.out}: folder {folder} does not exist")
        if os.path.isdir(args.out):
            raise InvalidInput(f"cannot write {args.out}: it is a folder")


def run(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    if args.command == "get":
        return _get(memory, args)
    if args.command == "info":
        return _info(memory, args)
    return _export(memory, args)


def _record_id(value: str) -> int:
    try:
        record_id = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"record ids are integers, got {validate.shown(value)}"
        ) from None
    if record_id < 1:
        raise argparse.ArgumentTypeError(f"record ids start at 1, got {record_id}")
    return record_id


def _get(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    # What exists is printed, what does not is named (and the exit code says some were not).
    wanted = list(dict.fromkeys(args.ids))
    found = memory.store.get(memory.scope, wanted)
    records = [found[record_id] for record_id in wanted if record_id in found]
    missing = [record_id for record_id in wanted if record_id not in found]
    erasures = _erasures(memory, [r.id for r in records if r.state == "redacted"])
    if args.json:
        print_json([record.to_dict() for record in records])
    else:
        for number, record in enumerate(records):
            if number:
                print()
            _print_record(record, erasures.get(record.id))
    if missing:
        names = ", ".join(str(i) for i in missing)
        fail(f"no record {names} in scope {memory.scope!r}" + empty_scope_hint(memory))
        return EXIT_ERROR
    return EXIT_OK


def _erasures(memory, ids: list[int]) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """``id -> "redacted AT by WHO: REASON"`` of each tombstone among ``ids``."""
    if not ids:
        return {}
    from mempp.timeline import corrections

    found: dict[int, str] = {}
    for fix in corrections(memory):
        if fix.operation != "redact":
            continue
        who = f" by {fix.actor}" if fix.actor else ""
        for row in fix.record_ids:
            if row in ids:
                found[row] = f"redacted {fix.at}{who}: {fix.reason}"
    return found


def _print_record(record: Record, erased: str | None = None) -> None:
    """Two header lines (what the evidence header says, then the rest), a blank line, the
    text as stored (for a tombstone: when, by whom and why it was erased)."""
    head = [f"record {record.id}", record.day or "undated", record.author or "-"]
    if record.thread:
        head.append(f"thread {record.thread}")
    head.append(record.state)
    if record.superseded_by is not None:
        head.append(f"superseded by {record.superseded_by}")
    details = [f"ingested {record.ingested_at}"]
    if record.date and record.date != record.day:
        details.insert(0, f"dated {record.date}")
    if record.tags:
        details.append("tags " + ", ".join(record.tags))
    if record.source:
        details.append(f"source {record.source}")
    if record.metadata:
        details.append("metadata " + json.dumps(record.metadata, ensure_ascii=False))
    if erased is not None:
        details.append(erased)
    print(" | ".join(head))
    print(" | ".join(details))
    print()
    print(record.text if record.state != "redacted" else "(erased; only this tombstone is kept)")


def _info(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    store = memory.store
    _warn_if_readable(store.location)
    states = store.state_counts(memory.scope)  # one statement: the parts add up
    records = states["active"] + states["archived"] + states["redacted"]
    encoder = store.encoder()
    scopes = store.scopes()
    running = store.reembed_status() if isinstance(store, ReembedStore) else None
    if args.json:
        print_json(
            {
                "location": store.location,
                "scope": memory.scope,
                "records": records,
                **states,
                "encoder": None if encoder is None else {"name": encoder[0], "dim": encoder[1]},
                "schema": store.schema_version(),
                "scopes": scopes,
                "reembed": None
                if running is None
                else {
                    "encoder": running.encoder,
                    "dim": running.dim,
                    "staged": running.staged,
                    "total": running.total,
                },
            }
        )
        return EXIT_OK
    print(f"store     {store.location}")
    print(f"scope     {memory.scope}")
    # Tombstones and superseded rows are named when there are some (--json has every count).
    parts = [
        f"{states[state]} {state}"
        for state in ("active", "archived", "redacted")
        if state != "redacted" or states[state]
    ]
    linked = f"; {states['superseded']} superseded" if states["superseded"] else ""
    print(f"records   {records} ({', '.join(parts)}{linked})")
    print("encoder   " + ("none yet" if encoder is None else f"{encoder[0]} ({encoder[1]}-d)"))
    if running is not None:
        print(
            f"reembed   to {running.encoder} ({running.dim}-d) under way: {running.staged} of "
            f"{running.total} rows; `mempp reembed` resumes it"
        )
    print(f"schema    {store.schema_version()}")
    shown = ", ".join(scopes[:INFO_SCOPES_SHOWN]) + (
        ", ..." if len(scopes) > INFO_SCOPES_SHOWN else ""
    )
    print(f"scopes    {len(scopes)}" + (f": {shown}" if scopes else ""))
    return EXIT_OK


def _warn_if_readable(location: str) -> None:
    """A warning on stderr when a SQLite store (or its WAL) is readable by others."""
    from mempp.private import readable_by_others

    if location.startswith(("postgresql://", "postgres://")) or location == ":memory:":
        return
    for path in (location, location + "-wal"):
        mode = readable_by_others(path)
        if mode is not None:
            print(
                f"mempp: warning: {path} is readable by other users (mode {mode:04o}); "
                f"it holds the store's records: chmod 600 {path}",
                file=sys.stderr,
            )


def _export(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    from mempp.transfer.export import write_jsonl

    records = memory.records(active_only=args.active_only)
    if args.out is None:
        written = write_jsonl(records, sys.stdout)
    else:
        # Written aside and renamed when complete: an interrupted export leaves no file that
        # looks whole.
        partial = f"{args.out}.partial"
        try:
            with open(partial, "w", encoding="utf-8") as handle:
                written = write_jsonl(records, handle)
            os.replace(partial, args.out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise
    print(f"exported {written} records", file=sys.stderr)
    return EXIT_OK
