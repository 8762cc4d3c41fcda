"""Removing a copy saved beside the database once it no longer describes it, without ever
removing a valid copy another process saved at the same time.

Every in-RAM copy the SQLite engine saves beside its file (the vector index's scan copy,
the BM25 replica, the tag postings, the context index) is written from the snapshot its
process read. So a process can save, after an erasure in another process removed the file,
a copy that still holds what the erasure took away. Two checks close that: the erasure,
once committed, removes the file (or calls ``discard_unless``), and the saver, once its file
is in place, calls ``discard_unless``, which reads the database in statements of its own.
Whichever of the two runs later sees the other's work: the saver's check after the
erasure's commit finds the copy stale; otherwise its file was in place before the commit
and so before the erasure's removal.

``discard_unless`` first renames the file to a name of its own, judges what it renamed, and
links a copy it finds valid back (unless a newer one took its place meanwhile). A process
that stops between the rename and the removal leaves a ``.discard`` file, which the next
call sweeps once it is a minute old.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mempp.index import array_file

_DISCARD_SUFFIX = ".discard"
_SWEEP_AFTER = 60.0  # seconds; a live call needs milliseconds between rename and removal

# Whether a saved copy's header (``meta``) describes the database now.
Current = Callable[[dict[str, Any]], bool]


def discard_unless(path: Path, current: Current) -> bool:
    """Remove the file at ``path`` unless ``current`` finds its header describes the
    database now; whether one was removed. ``OSError`` if the folder refuses the removal."""
    _sweep(path)
    if not path.exists() or _judged(path, current):
        return False
    own = path.with_name(
        f"{path.name}.{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}{_DISCARD_SUFFIX}"
    )
    try:
        os.rename(path, own)  # what is judged below is what is removed
    except FileNotFoundError:
        return False
    try:
        if _judged(own, current):  # a valid copy saved since the first look: it goes back
            with contextlib.suppress(OSError):  # FileExistsError: a newer one is in place
                os.link(own, path)
            return False
        return True
    finally:
        own.unlink(missing_ok=True)


def label_matches(
    conn: sqlite3.Connection,
    fingerprint: Callable[[sqlite3.Connection, int], Any],
    *,
    key: str,
    kind: tuple[str, int] | None = None,
) -> Current:
    """A ``current`` for copies whose header says, under ``key``, what ``fingerprint`` of
    their newest id (``max_id``) gave when they were read, and (given ``kind``) whose
    ``kind`` and ``version`` are those. Call outside a transaction."""
    assert not conn.in_transaction, "the copy is judged against the state after the commit"

    def current(meta: dict[str, Any]) -> bool:
        if kind is not None and (meta.get("kind"), meta.get("version")) != kind:
            return False
        label = meta[key]
        return label is not None and fingerprint(conn, int(meta["max_id"])) == label

    return current


def _judged(path: Path, current: Current) -> bool:
    try:
        return current(array_file.read_meta(path))
    except (ValueError, KeyError, TypeError, sqlite3.Error):  # gone, damaged, another layout
        return False


def _sweep(path: Path) -> None:
    """Remove what a ``discard_unless`` stopped between its rename and its removal left."""
    now = time.time()
    for left in path.parent.glob(f"{path.name}.*{_DISCARD_SUFFIX}"):
        with contextlib.suppress(OSError):
            if now - left.stat().st_ctime > _SWEEP_AFTER:
                left.unlink()
