"""Re-encoding a SQLite store (``ReembedStore``): new vectors staged in ``reembed_vectors``,
swapped into ``records.embedding`` by one transaction.

The target encoder is kept in ``mempp_meta`` (``reembed_encoder``, ``reembed_dim``) from the
first batch on, so a run killed at any point resumes with the rows that have no staged vector
yet. Until the switch, nothing of the records changes and every search, in this process or
another, reads the old vectors. The switch (one ``BEGIN IMMEDIATE``, so writers wait for it)
stages zeros for erased rows, marks itself in ``mempp_meta`` for the trigger that guards the
vector column (``records_vector_frozen``, migration 9), copies each staged vector into its row,
binds the new encoder and empties the staging. After its commit the in-RAM vector index and
the files beside the database (``-vectors.arrays``, ``-vectors.f32``) describe the old vectors:
this process drops them now, other processes when they next see the bound encoder change
(``_ReplicasMixin._vector_index``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mempp.errors import InvalidInput
from mempp.store.base import ReembedStatus
from mempp.store.sqlite.exact_file import EXACT_FILE_SUFFIX
from mempp.store.sqlite.replicas import _ReplicasMixin

_TARGET_KEYS = ("reembed_encoder", "reembed_dim")
_NOT_ERASED = "NOT EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = r.id)"


class _ReembedMixin(_ReplicasMixin):
    def reembed_status(self) -> ReembedStatus | None:
        with self._lock:
            self._conn.execute("BEGIN")  # target and counts from one snapshot
            try:
                return self._status()
            finally:
                self._conn.execute("COMMIT")

    def _target(self) -> tuple[str, int] | None:
        """The run's target encoder (caller holds the lock)."""
        meta = dict(
            self._conn.execute(
                "SELECT key, value FROM mempp_meta WHERE key IN (?, ?)", _TARGET_KEYS
            ).fetchall()
        )
        if "reembed_encoder" not in meta:
            return None
        return meta["reembed_encoder"], int(meta["reembed_dim"])

    def _status(self) -> ReembedStatus | None:
        """Caller holds the lock, inside a transaction. Counts every row: not per batch."""
        target = self._target()
        if target is None:
            return None
        staged, total = self._conn.execute(
            f"""SELECT (SELECT count(*) FROM reembed_vectors v JOIN records r ON r.id = v.record_id
                        WHERE {_NOT_ERASED}),
                       (SELECT count(*) FROM records r WHERE {_NOT_ERASED})"""
        ).fetchone()
        return ReembedStatus(target[0], target[1], staged, total)

    def reembed_begin(self, name: str, dim: int, *, restart: bool = False) -> ReembedStatus:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise InvalidInput(f"an encoder dimension must be a positive integer, got {dim!r}")
        with self._write() as conn:
            bound = self.encoder()
            if bound is None:
                raise InvalidInput(
                    f"{self.location} holds no vectors yet: nothing to re-encode "
                    "(the first add binds the encoder it uses)"
                )
            current = self._status()
            if current is not None and (current.encoder, current.dim) != (name, dim):
                if not restart:
                    raise InvalidInput(
                        f"{self.location}: a re-encoding to {current.encoder} "
                        f"({current.dim}-d) is under way ({current.staged} of {current.total} "
                        "rows); resume it with that encoder, or pass --restart to drop it"
                    )
                self._drop_staging(conn)
                current = None
            if bound == (name, dim):
                if current is not None:
                    self._drop_staging(conn)
                raise InvalidInput(f"{self.location} is already encoded by {name} ({dim}-d)")
            if current is None:
                conn.executemany(
                    "INSERT INTO mempp_meta (key, value) VALUES (?, ?)",
                    [("reembed_encoder", name), ("reembed_dim", str(dim))],
                )
            status = self._status()
        assert status is not None
        return status

    @staticmethod
    def _drop_staging(conn) -> None:  # type: ignore[no-untyped-def]
        conn.execute("DELETE FROM reembed_vectors")
        conn.execute("DELETE FROM mempp_meta WHERE key IN (?, ?)", _TARGET_KEYS)

    def reembed_pending(self, after: int, limit: int) -> list[tuple[int, str]]:
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT r.id, r.text FROM records r
                    WHERE r.id > ? AND {_NOT_ERASED}
                      AND NOT EXISTS (SELECT 1 FROM reembed_vectors v WHERE v.record_id = r.id)
                    ORDER BY r.id LIMIT ?""",
                (after, limit),
            ).fetchall()
        return [(int(i), t) for i, t in rows]

    def reembed_stage(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        if len(ids) != len(vectors):
            raise ValueError("one vector per id is required")
        with self._write() as conn:
            target = self._target()
            if target is None:
                raise InvalidInput(f"{self.location}: no re-encoding is under way")
            matrix = np.ascontiguousarray(vectors, dtype="<f4")
            if len(ids) and (matrix.ndim != 2 or matrix.shape[1] != target[1]):
                raise InvalidInput(
                    f"{self.location}: the re-encoding to {target[0]} stages "
                    f"{target[1]}-d vectors, not {matrix.shape[-1]}-d"
                )
            # An erasure since the read took the row's text away: its vector is not kept.
            conn.executemany(
                f"""INSERT INTO reembed_vectors (record_id, embedding)
                    SELECT r.id, ? FROM records r WHERE r.id = ? AND {_NOT_ERASED}
                    ON CONFLICT (record_id) DO UPDATE SET embedding = excluded.embedding""",
                [(row.tobytes(), int(i)) for i, row in zip(ids, matrix, strict=True)],
            )

    def reembed_switch(self) -> bool:
        with self._write() as conn:
            status = self._status()
            if status is None:
                raise InvalidInput(f"{self.location}: no re-encoding is under way")
            if status.pending:
                return False
            conn.execute(
                """INSERT INTO reembed_vectors (record_id, embedding)
                   SELECT record_id, zeroblob(?) FROM redactions WHERE true
                   ON CONFLICT (record_id) DO UPDATE SET embedding = excluded.embedding""",
                (status.dim * 4,),
            )
            conn.execute("INSERT INTO mempp_meta (key, value) VALUES ('reembed_switching', '1')")
            conn.execute(
                """UPDATE records SET embedding =
                       (SELECT v.embedding FROM reembed_vectors v WHERE v.record_id = records.id)"""
            )
            conn.execute("DELETE FROM mempp_meta WHERE key = 'reembed_switching'")
            conn.executemany(
                "UPDATE mempp_meta SET value = ? WHERE key = ?",
                [(status.encoder, "encoder"), (str(status.dim), "dim")],
            )
            self._drop_staging(conn)
        self._forget_vectors()
        return True

    def reembed_abandon(self) -> bool:
        with self._write() as conn:
            if self._target() is None:
                return False
            self._drop_staging(conn)
        return True

    def _forget_vectors(self) -> None:
        """Drop the in-RAM index and the files beside the database that hold the old vectors
        (the next search loads the new ones; a file that cannot be removed is ignored, being
        of another encoder or failing the exact rows' check)."""
        with self._lock:
            self._reset_vector_index()
            if self.location == ":memory:":
                return
            for path in (self._vector_file(), Path(self.location + EXACT_FILE_SUFFIX)):
                if path is not None:
                    with contextlib.suppress(OSError):
                        path.unlink(missing_ok=True)
