"""The float32 vectors beside the database, as ``<file>-vectors.f32``: what the vector leg's
exact rescoring reads (a few hundred rows a search) by position instead of through SQLite.

Record ``i``'s vector is row ``i - 1`` of the file, raw little-endian float32 with no header:
ids are never reused and a record's vector never changes, except by an erasure, which zeroes
its rows here too. A row is written whenever the store reads that vector from SQLite (loading
the vector index, or rescoring a row the file does not have yet), and a row read back is used
only if it quantizes to the very codes the index holds for it (``ExactVectorIndex``'s
``quick_rows``): a row past the end, never written, damaged or of another database is read
from SQLite instead, and written again. So the file is a cache, never the record: deleting it
costs speed only. Measured at 1M rows: 700 rows in 1.5 ms here against 8.1 ms through SQLite.

Reads are ``pread`` calls, not a memory map: the pages stay in the OS cache without counting
in the process's resident memory.

Erasure. Rows are written under a shared ``flock`` on the file, held from the SQLite read to
the write; an erasure, after its commit, zeroes its rows under the exclusive lock. A write
that read a row before the erasure committed therefore lands before the zeroing, never after.
Opening the file zeroes every erased row again, in case an erasure's process stopped between
its commit and its zeroing. Where ``flock`` or ``pread`` is missing (not POSIX), there is no
file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mempp.private import open_or_create

try:
    import fcntl
except ImportError:  # not POSIX: no file, every row comes from SQLite
    fcntl = None  # type: ignore[assignment]

EXACT_FILE_SUFFIX = "-vectors.f32"


class ExactFile:
    """An open ``<file>-vectors.f32`` of ``dim``-float rows. Thread-safe."""

    def __init__(self, fd: int, dim: int) -> None:
        self._fd = fd
        self._row = dim * 4
        self.dim = dim
        # flock belongs to the open file, not the thread: one writer of this process at a time
        # keeps one thread's unlock from dropping another's lock. Reentrant: a writer whose
        # write fails closes the file inside ``writing``.
        self._writing = threading.RLock()

    @classmethod
    def open(cls, path: Path, dim: int, erased: Sequence[int]) -> ExactFile | None:
        """The file at ``path`` (created if missing) with the ``erased`` records' rows zeroed;
        None where the file cannot be opened for writing or the platform lacks ``flock``."""
        if fcntl is None or not hasattr(os, "pread"):
            return None
        try:
            fd = open_or_create(path)  # a new one only its owner reads (mempp.private)
        except OSError:
            return None
        file = cls(fd, dim)
        try:
            file.zero(erased)
        except OSError:
            file.close()
            return None
        return file

    def read(self, ids: np.ndarray) -> np.ndarray:
        """Rows of records ``ids``, in that order; zeros where the file has none (or once it
        is closed: the caller checks every row anyway)."""
        out = np.zeros((len(ids), self.dim), dtype="<f4")
        view = memoryview(out.reshape(-1).view(np.uint8))
        fd, row = self._fd, self._row
        try:
            for i, record in enumerate(ids.tolist()):
                data = os.pread(fd, row, (record - 1) * row)
                view[i * row : i * row + len(data)] = data
        except OSError:
            pass
        return out

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold while reading rows from SQLite and writing them here (see the module's
        erasure note)."""
        with self._writing:
            if self._fd < 0:
                yield
                return
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                yield
            finally:
                if self._fd >= 0:  # closing the file dropped the lock
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Write the rows of records ``ids`` (inside ``writing``); a run of consecutive ids
        is one call. ``OSError`` if the file refuses."""
        if len(ids) == 0 or self._fd < 0:
            return
        data = np.ascontiguousarray(rows, dtype="<f4").reshape(len(ids), self.dim)
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        for start, stop in zip([0, *breaks.tolist()], [*breaks.tolist(), len(ids)], strict=True):
            os.pwrite(self._fd, data[start:stop].tobytes(), (int(ids[start]) - 1) * self._row)

    def zero(self, ids: Sequence[int]) -> None:
        """Zero the rows of records ``ids`` that the file holds, under the exclusive lock.
        ``OSError`` if the file refuses."""
        if not ids:
            return
        with self._writing:
            if self._fd < 0:
                raise OSError(f"{self} is closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                size = os.fstat(self._fd).st_size
                blank = bytes(self._row)
                for record in ids:
                    offset = (int(record) - 1) * self._row
                    if offset < size:
                        os.pwrite(self._fd, blank[: size - offset], offset)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        # Under the write lock, and the number forgotten first: once closed, the number may
        # name another open file, which a late write must never reach.
        with self._writing:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                os.close(fd)
