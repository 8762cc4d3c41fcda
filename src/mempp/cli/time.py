"""The command line of time and truth: the search filters (``--known-at``, ``--since``,
``--author``, ``--tag``, ``--all-tags``, ``--thread``, ``--source``) and the commands
``history``, ``changes``, ``supersede``, ``archive``, ``redact``, ``undo`` and ``runs``, one
to one with ``Memory.history``, ``changes``, ``supersede``, ``archive``, ``redact``, ``undo``
and the store's change log.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from mempp.filters import Filters

if TYPE_CHECKING:
    from mempp.memory import Memory
    from mempp.timeline import Correction

COMMANDS = ("history", "changes", "supersede", "archive", "redact", "undo", "runs")


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The filters of search, evidence and ask."""
    group = parser.add_argument_group("filters (applied before ranking, like --as-of)")
    group.add_argument(
        "--known-at", help="only what the memory held then: rows ingested up to this date"
    )
    group.add_argument("--since", help="only rows dated on or after this ISO 8601 date")
    group.add_argument("--author", help="only rows by this author (exactly as stored)")
    group.add_argument(
        "--tag",
        action="append",
        dest="filter_tags",
        metavar="TAG",
        help="only rows carrying this tag (repeat for several: any of them)",
    )
    group.add_argument(
        "--all-tags", action="store_true", help="with several --tag: rows carrying all of them"
    )
    group.add_argument(
        "--thread", dest="filter_thread", metavar="THREAD", help="only rows of this thread"
    )
    group.add_argument(
        "--source",
        dest="filter_source",
        metavar="PREFIX",
        help="only rows whose source starts with this",
    )


def filters_from(args: argparse.Namespace) -> Filters:
    """Validated filters of a parsed command line (before the store is opened)."""
    return Filters.create(
        known_at=args.known_at,
        since=args.since,
        author=args.author,
        tags=args.filter_tags,
        tags_mode="all" if args.all_tags else "any",
        thread=args.filter_thread,
        source=args.filter_source,
    )


def add_parser(commands: Any) -> None:
    history = commands.add_parser(
        "history", help="the records about one subject, oldest first, with what superseded them"
    )
    history.add_argument("query", nargs="?", help="find the subject by this query")
    history.add_argument("--id", type=int, dest="record_id", help="or start from this record")
    history.add_argument("--as-of", help="only records dated up to this ISO 8601 date")
    history.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    history.add_argument("--json", action="store_true")

    changes = commands.add_parser(
        "changes", help="what entered, was superseded, archived or redacted between two dates"
    )
    changes.add_argument("since", help="first event date of the window (ISO 8601)")
    changes.add_argument("until", help="last event date of the window (ISO 8601)")
    changes.add_argument("--query", help="rank the entered records by this query")
    changes.add_argument("--known-since", help="only records ingested from this date")
    changes.add_argument("--known-until", help="only records ingested up to this date")
    changes.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    changes.add_argument("--json", action="store_true")

    supersede = commands.add_parser(
        "supersede", help="record that one record supersedes another (logged, undoable)"
    )
    supersede.add_argument("old", type=int, help="id of the superseded record")
    supersede.add_argument("--by", type=int, required=True, help="id of the newer record")
    _attribution(supersede)

    archive = commands.add_parser(
        "archive", help="take a record out of every search (logged, undoable)"
    )
    archive.add_argument("id", type=int)
    _attribution(archive)

    redact = commands.add_parser(
        "redact",
        help="erase a record's content for good, leaving a tombstone (logged, not undoable)",
    )
    redact.add_argument("id", type=int)
    _attribution(redact)

    undo = commands.add_parser(
        "undo",
        help="restore every state a run changed: a supersede, an archive or a consolidate run "
        "(`mempp runs` lists them; an erasure cannot be undone)",
    )
    undo.add_argument("run", type=int, metavar="RUN", help="the run's id")
    undo.add_argument("--json", action="store_true")

    runs = commands.add_parser(
        "runs", help="the change log: every run (supersede, archive, redact, consolidate, undo)"
    )
    runs.add_argument("--json", action="store_true")


def _attribution(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", required=True, help="why (kept in the change log)")
    parser.add_argument("--actor", default=None, help="who asks (default: $USER)")
    parser.add_argument("--json", action="store_true")


def run(memory: Memory, args: argparse.Namespace) -> int:
    command = args.command
    if command == "history":
        entries = memory.history(
            args.query, record_id=args.record_id, as_of=args.as_of, limit=args.limit
        )
        if args.json:
            _print_json([entry.to_dict() for entry in entries])
        for entry in entries if not args.json else ():
            record = entry.record
            later = f" -> superseded by #{record.superseded_by}" if record.superseded_by else ""
            print(
                f"{record.day or 'undated':<10}  #{record.id}  {record.author or '-'}  "
                f"[{record.state}] ({', '.join(entry.reasons)}){later}"
            )
            print("     " + _snippet(record.text or "(erased)"))
        if not entries:
            print("no matching records", file=sys.stderr)
        return 0
    if command == "changes":
        found = memory.changes(
            args.since,
            args.until,
            query=args.query,
            known_since=args.known_since,
            known_until=args.known_until,
            limit=args.limit,
        )
        if args.json:
            _print_json(found.to_dict())
            return 0
        print(f"{found.since} .. {found.until}")
        for title, records in (("entered", found.entered), ("superseded", found.superseded)):
            print(f"{title}: {len(records)}")
            for record in records:
                print(f"  {record.day or 'undated':<10}  #{record.id}  {_snippet(record.text)}")
        for title, fixes in (("archived", found.archived), ("redacted", found.redacted)):
            print(f"{title}: {len(fixes)}")
            for fix in fixes:
                print(f"  {_describe(fix)}")
        return 0
    if command == "undo":
        report = memory.undo(args.run)
        if args.json:
            _print_json(report.to_dict())
        else:
            print(report.summary())
        return 0
    if command == "runs":
        return _runs(memory, args.json)
    actor = args.actor or _default_actor()
    if command == "supersede":
        correction = memory.supersede(args.old, by=args.by, reason=args.reason, actor=actor)
    elif command == "archive":
        correction = memory.archive(args.id, reason=args.reason, actor=actor)
    else:
        correction = memory.redact(args.id, reason=args.reason, actor=actor)
    if args.json:
        _print_json(correction.to_dict())
    else:
        print(_describe(correction))
    return 0


def _runs(memory: Memory, as_json: bool) -> int:
    from mempp.store.base import ConsolidationStore, supports

    store = memory.store
    supports(store, ConsolidationStore, "the change log")
    assert isinstance(store, ConsolidationStore)
    runs = store.runs(memory.scope)
    if as_json:
        _print_json([run.to_dict() for run in runs])
        return 0
    for run in runs:
        settings = run.settings
        what = run.operation + (" (dry run)" if run.dry_run else "")
        if run.undoes is not None:
            what += f" of run {run.undoes}"
        rows = [c.change.record_id for c in store.run_changes(memory.scope, run.id)]
        shown = ", ".join(f"#{row}" for row in rows[:8]) + (", ..." if len(rows) > 8 else "")
        by = f" by #{settings['by']}" if settings.get("by") is not None else ""
        who = f" ({settings['actor']})" if settings.get("actor") else ""
        why = f": {settings['reason']}" if settings.get("reason") else ""
        undone = f" [undone by run {run.undone_by}]" if run.undone_by is not None else ""
        print(f"run {run.id}  {run.started_at[:19]}  {what} {shown or '-'}{by}{who}{why}{undone}")
    if not runs:
        print(f"no runs in scope {memory.scope!r}", file=sys.stderr)
    return 0


def _describe(correction: Correction) -> str:
    rows = ", ".join(f"#{row}" for row in correction.record_ids)
    by = f" by #{correction.by}" if correction.by is not None else ""
    who = correction.actor or "unknown"
    return (
        f"run {correction.run_id}: {correction.operation} {rows}{by} "
        f"({who}, {correction.at}): {correction.reason}"
    )


def _default_actor() -> str | None:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name on this system: the correction stays unattributed
        return None


def _snippet(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _print_json(value: object) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
