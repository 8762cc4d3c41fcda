"""``mempp watch DIR``: keeps a folder in the memory. New files are added, a changed file adds
a new version (the old records are kept), a deleted file deletes nothing; it prints what it
did, one line a file, and stops cleanly on SIGTERM or Ctrl-C (the file in hand is finished:
each file's records are written in one transaction).

It polls (``--interval`` seconds): no dependency, and it works on network shares where
change notification does not. Its state is the store itself, so it survives restarts with
nothing beside the store to lose or corrupt:

- a document (PDF, Office, ...) version's source is ``PATH#sha256=...`` (see
  :mod:`mempp.importers.documents.read`): on a file it has not seen in this run, the watch
  hashes the file and asks the store (``stored_sources``, an index lookup on both engines)
  whether that version is there before it parses anything;
- a text or JSON Lines file is read again and its documents go through the write path's
  exact-repeat rule (same author, date and text: nothing added), so only new or changed
  text is stored.

Within a run, a file whose size and modification time are unchanged is not opened again; a
file modified in the last second is left for the next scan (it may be half-written).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mempp.errors import InvalidInput
from mempp.importers.base import Item, ItemError, Notice, Skipped, source_rule, store_items
from mempp.importers.documents.read import SUFFIXES as DOCUMENT_SUFFIXES
from mempp.importers.documents.read import file_digest, version_source
from mempp.importers.files import JSONL_SUFFIXES, TEXT_SUFFIXES, shown_path
from mempp.importers.folder import MAIL_FILE

if TYPE_CHECKING:
    from mempp.importers.base import Importer
    from mempp.memory import Memory

WATCHED = TEXT_SUFFIXES + JSONL_SUFFIXES + DOCUMENT_SUFFIXES + (MAIL_FILE,)
SETTLE = 1.0  # seconds a file must be left alone before it is read


def add_parser(commands: Any) -> None:
    watch = commands.add_parser(
        "watch",
        help="keep a folder in the memory: add new files and new versions of changed ones",
        description="Poll FOLDER and store what `mempp ingest` would: new files, and a new "
        "version of each changed file (the old records are kept; deleting a file deletes "
        "nothing). Stops on SIGTERM or Ctrl-C.",
    )
    watch.add_argument("folder", metavar="FOLDER")
    watch.add_argument(
        "--interval", type=float, default=5.0, help="seconds between scans (default 5)"
    )
    watch.add_argument("--once", action="store_true", help="scan once, then exit")


def run(args: argparse.Namespace, open_memory: Callable[[argparse.Namespace], Memory]) -> int:
    from mempp.importers import get

    root = Path(args.folder)
    if not root.is_dir():
        raise InvalidInput(f"{args.folder}: not a folder")
    if not args.interval > 0:
        raise InvalidInput("--interval must be a number of seconds above 0")
    stop = threading.Event()

    def halt(signum: int, frame: object) -> None:
        stop.set()

    # Installed first: a SIGTERM while the store opens stops the watch before its first scan.
    previous = {sig: signal.signal(sig, halt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        memory = open_memory(args)
    except BaseException:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise
    watcher = Watcher(memory, root, get("folder"), _say)
    try:
        _say(f"watching {shown_path(root)} every {args.interval:g} s (SIGTERM or Ctrl-C stops)")
        while not stop.is_set():
            watcher.scan(stop)
            if args.once:
                break
            stop.wait(args.interval)
    finally:
        memory.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _say(
        f"stopped: {watcher.added} added from {watcher.files_added} files, "
        f"{watcher.failed} failed, over {watcher.scans} scans"
    )
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


class Watcher:
    """One folder's scans into one memory; ``say`` prints a line."""

    def __init__(
        self, memory: Memory, root: Path, importer: Importer, say: Callable[[str], None]
    ) -> None:
        self.memory, self.root, self.importer, self.say = memory, root, importer, say
        self.known: dict[Path, tuple[int, int]] = {}  # file -> (size, mtime_ns) when read
        self.added = self.files_added = self.failed = self.scans = 0

    def scan(self, stop: threading.Event | None = None) -> None:
        self.scans += 1
        present: set[Path] = set()
        unchanged = 0
        for file in self._files():
            if stop is not None and stop.is_set():
                return  # the files not reached are read on the next run
            present.add(file)
            try:
                info = file.stat()
            except OSError:
                continue  # gone between the listing and now
            mark = (info.st_size, info.st_mtime_ns)
            if self.known.get(file) == mark:
                continue
            if time.time() - info.st_mtime < SETTLE:
                continue  # perhaps still being written: the next scan reads it
            changed = file in self.known
            if (not changed and self._stored_version(file)) or not self._read(file, changed):
                unchanged += 1
            self.known[file] = mark
        for gone in sorted(set(self.known) - present):
            del self.known[gone]
            self.say(f"deleted: {shown_path(gone)} (its records are kept)")
        if self.scans == 1 and unchanged:
            self.say(f"{unchanged} file{'s' if unchanged != 1 else ''} already in the memory")

    def _files(self) -> Iterator[Path]:
        for current, folders, files in os.walk(self.root):
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            for name in sorted(files):
                if not name.startswith(".") and Path(name).suffix.lower() in WATCHED:
                    yield Path(current) / name

    def _stored_version(self, file: Path) -> bool:
        """Is this document file's current version in the store (asked without parsing)?"""
        if file.suffix.lower() not in DOCUMENT_SUFFIXES:
            return False
        try:
            source = version_source(shown_path(file), file_digest(file))
        except OSError:
            return False
        return bool(self.memory.store.stored_sources(self.memory.scope, [source]))

    def _read(self, file: Path, changed: bool) -> bool:
        """Store what ``file`` holds that the memory lacks, and say so; ``False`` for a file
        first seen in this run that brought nothing new (it was stored before a restart)."""
        lines: list[str] = []

        def tell(item: Item) -> None:
            if isinstance(item, ItemError):
                lines.append(f"  {item.location}: {item.reason}")
            elif isinstance(item, Notice):
                lines.append(f"  {item.location}: warning: {item.message}")
            elif isinstance(item, Skipped) and item.detail is not None:
                lines.append(f"  {item.location}: skipped: {item.detail}")

        try:
            report = store_items(
                self.memory,
                self.importer.read(file),
                source=self.importer.name,
                by_source=source_rule(self.importer),
                on_item=tell,
            )
        except InvalidInput as exc:
            self.failed += 1
            self.say(f"failed: {shown_path(file)}: {exc}")
            return True
        if not (changed or report.added or report.failed or lines):
            return False
        self.added += report.added
        self.failed += report.failed
        verb = "changed" if changed else "new"
        if report.added:
            self.files_added += 1
            what = "a new version" if changed else "added"
            count = f"{report.added} record" + ("s" if report.added != 1 else "")
            self.say(f"{verb}: {shown_path(file)}: {what}, {count}")
        elif report.failed:
            self.say(f"{verb}: {shown_path(file)}: failed")
        elif report.skipped:
            reasons = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items()))
            self.say(f"{verb}: {shown_path(file)}: nothing new ({reasons})")
        for line in lines:
            self.say(line)
        sys.stdout.flush()
        return True
