"""The context leg's int8 copy saved beside the database, as ``<file>-context.arrays``, so a
new process maps it instead of reading every context vector from SQLite and quantising it
again (the vector leg's ``vector_file`` does the same for the records' own vectors).

The file (``mempp.index.array_file``, mapped) holds what ``ExactVectorIndex.export`` gives,
and in its header the scope names, the contexts' encoder, the state epoch its states were
read at, and a fingerprint of the context rows it covers: the context epoch, the rule, the
newest record id and the number of rows with a vector up to it. Context rows are only ever
appended in id order except where the epoch moves (an erasure, a rule change, an older row
written again: ``mempp.store.sqlite.context``), so a file whose fingerprint matches holds
every context up to its newest id; rows added since are read from SQLite, and states that
moved are read again (the archived ids), as for the vector file.

A missing file means the store reads SQLite. A stale, damaged or foreign one is refused
with one logged line naming it and why, then removed (``discard_stale``) and saved again. An
erasure and disabling the index remove the file: it holds a quantised copy of contexts that
read the erased text.

Erasure against a save in another process: the erasure, once committed, and the saver, once
its file is in place, each call ``discard_stale``, so a copy saved from a snapshot before an
erasure never stays on disk after it, and a valid copy saved meanwhile is never removed
(``mempp.store.sqlite.stale_copy``).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path

from mempp.index import array_file
from mempp.index.vectors import ExactRows, ExactVectorIndex
from mempp.store.sqlite import stale_copy
from mempp.store.sqlite.vector_file import STALE_SHARE

CONTEXT_FILE_SUFFIX = "-context.arrays"


_KIND = "mempp context index"
_VERSION = 1

log = logging.getLogger("mempp.store")


def path_of(conn: sqlite3.Connection) -> Path | None:
    """The file beside this connection's database (None for one in memory)."""
    for _, name, location in conn.execute("PRAGMA database_list"):
        if name == "main":
            return Path(location + CONTEXT_FILE_SUFFIX) if location else None
    return None


def remove(conn: sqlite3.Connection) -> None:
    """Remove the file (an erasure, the index dropped): what it holds may read erased text."""
    path = path_of(conn)
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def discard_stale(conn: sqlite3.Connection, path: Path | None = None) -> bool:
    """Remove the file (at ``path``, else beside ``conn``'s database) unless it is the copy of
    the database's current contexts, read in a statement of its own (call outside a
    transaction; ``stale_copy``); whether one was removed. ``OSError`` if the folder refuses
    the removal."""
    path = path_of(conn) if path is None else path
    if path is None:
        return False
    return stale_copy.discard_unless(path, _current(conn))


def _current(conn: sqlite3.Connection) -> stale_copy.Current:
    """Whether a header says its file covers the database's current contexts."""
    return stale_copy.label_matches(conn, fingerprint, key="fingerprint", kind=(_KIND, _VERSION))


def fingerprint(conn: sqlite3.Connection, max_id: int) -> str:
    """What a file covering the contexts up to ``max_id`` must say it covers. Call inside
    the transaction that read the rows."""
    row = conn.execute(
        """SELECT (SELECT value FROM mempp_meta WHERE key = 'context_epoch'),
                  (SELECT value FROM mempp_meta WHERE key = 'context_depth'),
                  (SELECT value FROM mempp_meta WHERE key = 'context_rule'),
                  (SELECT value FROM mempp_meta WHERE key = 'context_encoder'),
                  (SELECT count(*) FROM record_context
                   WHERE record_id <= :max AND length(embedding) > 0)""",
        {"max": max_id},
    ).fetchone()
    return ":".join(str(value) for value in (*row, max_id))


def load(
    conn: sqlite3.Connection, path: Path, dim: int, exact_rows: ExactRows
) -> tuple[ExactVectorIndex, str] | None:
    """The copy saved at ``path`` and the state epoch of its states, if it is this
    database's current contexts' copy; None otherwise (read SQLite instead)."""
    if not path.exists():
        return None
    try:
        meta, arrays = array_file.read(path, mapped=True)
        if (meta.get("kind"), meta.get("version")) != (_KIND, _VERSION):
            return _refused(f"{path}: not a context index file of this mempp")
        if int(meta["dim"]) != dim:
            return _refused(f"{path}: holds {meta['dim']}-d contexts, the store's are {dim}-d")
        index = ExactVectorIndex.restore(
            dim,
            arrays,
            int(meta["rows"]),
            [str(s) for s in meta["scopes"]],
            exact_rows,
            max_norm=float(meta["max_norm"]),
        )
        max_id = int(meta["max_id"])
    except (ValueError, KeyError, TypeError) as error:  # damaged, truncated, another layout
        message = str(error)
        return _refused(message if message.startswith(str(path)) else f"{path}: {message}")
    if index.max_id != max_id or fingerprint(conn, max_id) != meta["fingerprint"]:
        return _refused(f"{path}: saved for other contexts than the database holds (stale)")
    return index, str(meta["state_epoch"])


def _refused(reason: str) -> None:
    log.warning("%s; removing it and reading the contexts from the database", reason)
    return None


def save(path: Path, index: ExactVectorIndex, label: str, epoch: str) -> None:
    """Write ``index`` to ``path`` (``label``: ``fingerprint`` of its newest id, ``epoch``:
    the state epoch its states were read at, both from one snapshot); a folder that refuses
    the file only costs the next process a load from SQLite."""
    arrays = index.export()
    meta = {
        "kind": _KIND,
        "version": _VERSION,
        "dim": index.dim,
        "rows": len(arrays["ids"]),
        "max_id": int(arrays["ids"][-1]) if len(arrays["ids"]) else 0,
        "scopes": index.scopes,
        "state_epoch": epoch,
        "fingerprint": label,
        "max_norm": index.max_norm,
    }
    with contextlib.suppress(OSError):
        array_file.write(path, meta, arrays, pad_rows=len(arrays["ids"]) // STALE_SHARE + 1024)


def due(rows: int, saved: int, min_rows: int) -> bool:
    """Whether to save a copy of ``rows`` rows, ``saved`` of them in the file: large
    enough, and never saved or an eighth larger."""
    return rows >= max(min_rows, 1) and (rows - saved) * STALE_SHARE > saved
