"""The vector index's scan copy saved beside the database, as ``<file>-vectors.arrays``.

Loading a million float32 blobs through SQLite and quantising them takes tens of seconds;
reading back the quantised copy takes well under one. The file (``mempp.index.array_file``: a JSON
header, raw arrays, a CRC-32 each) holds what ``ExactVectorIndex.export`` gives: ids, scope
codes, event keys and states in id order, int8 codes, scales and the date order in scan
order, and in its header the scope names, the encoder (name, dimension), the state epoch
the states were read at, and a fingerprint of the rows it covers.

The fingerprint (newest id, that row's text hash, the number of redactions, the number of
rows up to that id) ties the file to this database: ids are never reused in a file and rows
are never deleted, so a file whose fingerprint matches describes every row up to its newest
id, except for states, which the store re-reads (the archived ids only) when
``mempp_meta.state_epoch`` moved since. Rows added since are read from SQLite (the catch-up);
once they outnumber an eighth of the file's rows, the store saves the file again.

The file is mapped, not read (``array_file.read(..., mapped=True)``): loading it costs one pass
over its bytes (their checksums), the scan's pages are the OS cache's, shared by every process
that maps the file, and the rows the catch-up appends go into zero rows saved after each array
(an eighth of the rows and 8,192 more, as ``STALE_SHARE``), copied on write, so appending
copies nothing until the file is due again. The header also keeps the index's bound on row
norms, so a load makes no pass over the codes to find it.

A missing file means the store reads SQLite. One of another encoder or width, truncated,
damaged or stale is refused with one logged line naming it and why (``mempp.store``, a
warning), then ignored: the store reads SQLite, as without a file, and saves a new one once
it holds ``vector_file_min_rows`` rows; a folder that refuses the file only
means the next process reads SQLite too. An erasure rewrites the file from the index
(the erased rows' codes zeroed), or removes it: it holds a quantised copy of every vector.
A process that saves the file checks it once it is in place (``discard_stale``), so a copy
saved from a snapshot read before another process's erasure never stays on disk after it
(``mempp.store.sqlite.stale_copy``).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from mempp.index import array_file
from mempp.index.vectors import ExactRows, ExactVectorIndex
from mempp.store.sqlite import stale_copy

VECTOR_FILE_SUFFIX = "-vectors.arrays"
# Below this many rows SQLite loads the vectors in well under a second: no file is saved.
VECTOR_FILE_MIN_ROWS = 20_000
# The file is saved again once the rows read from SQLite since outnumber this share of it.
STALE_SHARE = 8

_KIND = "mempp vector index"
_VERSION = 1

log = logging.getLogger("mempp.store")


def fingerprint(conn: sqlite3.Connection, max_id: int) -> str | None:
    """What a file covering rows up to ``max_id`` must say it covers (None: no such row).
    Call inside the transaction that read the rows."""
    row = conn.execute(
        """SELECT hex(text_hash), (SELECT count(*) FROM redactions),
                  (SELECT count(*) FROM records WHERE +id <= :max)
           FROM records WHERE id = :max""",
        {"max": max_id},
    ).fetchone()
    # +id: counted on the smallest index, not by walking the table's pages.
    return None if row is None else f"{max_id}:{row[0]}:{row[1]}:{row[2]}"


def load(
    conn: sqlite3.Connection,
    path: Path,
    encoder: tuple[str, int],
    exact_rows: ExactRows,
    quick_rows: ExactRows | None = None,
) -> tuple[ExactVectorIndex, str] | None:
    """The index saved at ``path`` and the state epoch of its states, if the file is this
    database's and this encoder's; None otherwise (read SQLite instead). ``exact_rows`` and
    ``quick_rows``: as for ``ExactVectorIndex``."""
    try:
        meta, arrays = array_file.read(path, mapped=True)
        if (meta.get("kind"), meta.get("version")) != (_KIND, _VERSION):
            return _refused(f"{path}: not a vector index file of this mempp")
        rows = int(meta["rows"])
        max_id = int(meta["max_id"])
        stored = (str(meta["encoder"]), int(meta["dim"]))
        if stored != encoder:
            return _refused(
                f"{path}: holds vectors of encoder {stored[0]} ({stored[1]}-d), the store's "
                f"are {encoder[0]} ({encoder[1]}-d)"
            )
        scopes = [str(s) for s in meta["scopes"]]
        epoch = str(meta["state_epoch"])
        max_norm = meta.get("max_norm")
        index = ExactVectorIndex.restore(
            encoder[1],
            arrays,
            rows,
            scopes,
            exact_rows,
            quick_rows,
            max_norm=None if max_norm is None else float(max_norm),
        )
    except (ValueError, KeyError, TypeError) as error:  # damaged, truncated, another layout
        message = str(error)
        return _refused(message if message.startswith(str(path)) else f"{path}: {message}")
    if index.max_id != max_id or fingerprint(conn, max_id) != meta["fingerprint"]:
        return _refused(f"{path}: saved for other rows than the database holds (stale)")
    return index, epoch


def _refused(reason: str) -> None:
    log.warning("%s; reading the vectors from the database and saving the file again", reason)
    return None


def save(
    path: Path, index: ExactVectorIndex, encoder: tuple[str, int], label: str, epoch: str
) -> None:
    """Write ``index`` to ``path``; ``label`` is ``fingerprint`` of its newest id and
    ``epoch`` the state epoch its states were read at, both from one snapshot.
    ``OSError`` if the folder refuses the file."""
    arrays = index.export()
    meta = {
        "kind": _KIND,
        "version": _VERSION,
        "encoder": encoder[0],
        "dim": encoder[1],
        "rows": len(arrays["ids"]),
        "max_id": int(arrays["ids"][-1]) if len(arrays["ids"]) else 0,
        "scopes": index.scopes,
        "state_epoch": epoch,
        "fingerprint": label,
        "max_norm": index.max_norm,
    }
    array_file.write(path, meta, arrays, pad_rows=_spare(len(arrays["ids"])))


def discard_stale(conn: sqlite3.Connection, path: Path) -> bool:
    """Remove the file at ``path`` unless it covers the database's rows now (read in
    statements of their own: call outside a transaction); whether one was removed.
    ``OSError`` if the folder refuses the removal."""
    current = stale_copy.label_matches(conn, fingerprint, key="fingerprint", kind=(_KIND, _VERSION))
    return stale_copy.discard_unless(path, current)


def _spare(rows: int) -> int:
    """Room for the catch-up to append without copying every array: an eighth more rows
    (the share past which the file is saved again)."""
    return rows // STALE_SHARE + 8192
