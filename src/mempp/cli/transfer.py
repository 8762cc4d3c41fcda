"""``mempp dump``, ``mempp restore`` and ``mempp backup``: a store's whole record out and back.

``dump`` writes the lossless snapshot of mempp.transfer.dump (every scope, or ``--scope``'s);
``restore`` checks a snapshot whole and writes it into an empty store of either engine, id
for id (SQLite -> PostgreSQL is how a store moves to a server; PostgreSQL -> SQLite takes a
copy offline); ``backup`` copies a live SQLite file by SQLite's online backup API.
``export`` (the human-readable JSON Lines) is another command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput

COMMANDS = ("dump", "restore", "backup")


def add_parser(commands: Any) -> None:
    dump = commands.add_parser(
        "dump",
        help="write a lossless snapshot (ids, states, links, change log, tombstones, keys' "
        "hashes, vectors) that `mempp restore` reads back into any engine",
    )
    dump.add_argument("--out", help="file to write (default: standard output)")
    dump.add_argument(
        "--no-vectors",
        action="store_true",
        help="leave the vectors out (smaller; a restore encodes the texts again)",
    )
    dump.add_argument("--json", action="store_true", help="print the report as JSON")
    restore = commands.add_parser(
        "restore", help="write a snapshot of `mempp dump` into an empty store, id for id"
    )
    restore.add_argument("snapshot", help="the file `mempp dump --out` wrote")
    restore.add_argument("--json", action="store_true", help="print the report as JSON")
    backup = commands.add_parser(
        "backup", help="copy a live SQLite store to a new file (SQLite's online backup API)"
    )
    backup.add_argument("out", help="the new file")


def run(args: argparse.Namespace, open_memory: Callable[..., Any], location: str) -> int:
    if args.command == "restore":
        return _restore(args, open_memory, location)
    if args.command == "dump" and args.out is not None:
        _writable(args.out)
    with open_memory(args) as memory:
        if args.command == "dump":
            scopes = None if args.scope is None else [args.scope]
            target = sys.stdout if args.out is None else args.out
            report = memory.dump(target, scopes=scopes, vectors=not args.no_vectors)
            _report(report, args.json, sys.stderr if args.out is None else sys.stdout)
            return 0
        return _backup(memory, args)


def _restore(args: argparse.Namespace, open_memory: Callable[..., Any], location: str) -> int:
    from mempp.transfer.restore import check

    if not os.path.isfile(args.snapshot):
        raise InvalidInput(f"no snapshot at {args.snapshot}")
    check(args.snapshot)  # a bad snapshot is refused before a store is opened or created
    is_url = location.startswith(("postgresql://", "postgres://"))
    created = not is_url and location != ":memory:" and not os.path.exists(location)
    try:
        with open_memory(args) as memory:
            report = memory.restore(args.snapshot)
    except BaseException:
        if created:  # the file this command made for the restore goes with it
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.remove(location + suffix)
        raise
    _report(report, args.json, sys.stdout)
    return 0


def _backup(memory: Any, args: argparse.Namespace) -> int:
    store = memory.store
    if not hasattr(store, "backup"):
        raise InvalidInput(
            f"`mempp backup` copies a SQLite file; for {store.location} use pg_dump (the "
            "database) or `mempp dump` (a snapshot any engine restores)"
        )
    copied = store.backup(args.out)
    print(f"backed up {copied} records to {args.out}")
    return 0


def _writable(path: str) -> None:
    folder = Path(path).expanduser().resolve().parent
    if not folder.is_dir():
        raise InvalidInput(f"cannot write {path}: folder {folder} does not exist")
    if Path(path).is_dir():
        raise InvalidInput(f"cannot write {path}: it is a folder")


def _report(report: Any, as_json: bool, stream: Any) -> None:
    if as_json:
        json.dump(report.to_dict(), stream)
        stream.write("\n")
    else:
        print(report.summary(), file=stream)
