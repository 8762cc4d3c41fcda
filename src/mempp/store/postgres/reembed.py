"""Re-encoding a PostgreSQL store (``ReembedStore``): new vectors staged in
``reembed_vectors``, swapped into ``records.embedding`` by one transaction.

As in SQLite (``mempp.store.sqlite.reembed``): the target encoder sits in ``mempp_meta`` from
the first batch on, each batch is one transaction, and a run killed at any point resumes
with the rows that have no staged vector. The switch locks ``records`` (ACCESS EXCLUSIVE:
writers and readers wait for it, and see the old vectors or all the new ones), stages zeros
for erased rows, drops the HNSW index and the width CHECK (the column is an untyped
``vector``, so a 384 -> 768 switch needs no change of type), copies each staged vector into its
row through the content guard (migration 9 lets a vector become its staged one while the
transaction sets ``mempp.reembed_switching``), adds the CHECK for the new width and binds the
new encoder. The HNSW index is built again after the commit (``_ensure_hnsw``, as after a bulk
load); searches are exact until then. Other processes notice the new encoder within
``ENCODER_RECHECK_S`` (``_RecordsMixin.encoder``) and drop their vector replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from mempp.errors import InvalidInput, StoreError
from mempp.store.base import ReembedStatus
from mempp.store.postgres.bulk import HNSW_INDEX, _BulkMixin
from mempp.store.postgres.records import _RecordsMixin
from mempp.store.postgres.schema import _LOCK_CLASS_SCHEMA

log = logging.getLogger(__name__)

_TARGET_KEYS = ["reembed_encoder", "reembed_dim"]
_NOT_ERASED = (
    "NOT EXISTS (SELECT 1 FROM redactions x WHERE x.scope = r.scope AND x.record_id = r.id)"
)
_REEMBED_LOCK = 1  # beside the schema lock's key 0, in its class


class _ReembedMixin(_RecordsMixin, _BulkMixin):
    def reembed_status(self) -> ReembedStatus | None:
        with self._connection() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot
            return self._reembed_status(conn)

    @staticmethod
    def _reembed_target(conn: Any) -> tuple[str, int] | None:
        meta = dict(
            conn.execute(
                "SELECT key, value FROM mempp_meta WHERE key = ANY(%s)", (_TARGET_KEYS,)
            ).fetchall()
        )
        if "reembed_encoder" not in meta:
            return None
        return meta["reembed_encoder"], int(meta["reembed_dim"])

    @classmethod
    def _reembed_status(cls, conn: Any) -> ReembedStatus | None:
        """The target and its counts (every row is counted: not per batch)."""
        target = cls._reembed_target(conn)
        if target is None:
            return None
        staged, total = conn.execute(
            f"""SELECT (SELECT count(*) FROM reembed_vectors v JOIN records r ON r.id = v.record_id
                        WHERE {_NOT_ERASED}),
                       (SELECT count(*) FROM records r WHERE {_NOT_ERASED})"""
        ).fetchone()
        return ReembedStatus(target[0], target[1], staged, total)

    @staticmethod
    def _drop_staging(conn: Any) -> None:
        conn.execute("TRUNCATE reembed_vectors")
        conn.execute("DELETE FROM mempp_meta WHERE key = ANY(%s)", (_TARGET_KEYS,))

    def reembed_begin(self, name: str, dim: int, *, restart: bool = False) -> ReembedStatus:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise InvalidInput(f"an encoder dimension must be a positive integer, got {dim!r}")
        with self._connection() as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS_SCHEMA, _REEMBED_LOCK)
            )
            bound = conn.execute(
                """SELECT (SELECT value FROM mempp_meta WHERE key = 'encoder'),
                          (SELECT value FROM mempp_meta WHERE key = 'dim')"""
            ).fetchone()
            if bound[0] is None:
                raise InvalidInput(
                    f"{self.location} holds no vectors yet: nothing to re-encode "
                    "(the first add binds the encoder it uses)"
                )
            current = self._reembed_status(conn)
            if current is not None and (current.encoder, current.dim) != (name, dim):
                if not restart:
                    raise InvalidInput(
                        f"{self.location}: a re-encoding to {current.encoder} "
                        f"({current.dim}-d) is under way ({current.staged} of {current.total} "
                        "rows); resume it with that encoder, or pass --restart to drop it"
                    )
                self._drop_staging(conn)
                current = None
            if (bound[0], int(bound[1])) == (name, dim):
                if current is not None:
                    self._drop_staging(conn)
                # Committed: a finished target's leftovers are dropped even though we refuse.
                message = f"{self.location} is already encoded by {name} ({dim}-d)"
            else:
                message = ""
                if current is None:
                    conn.execute(
                        """INSERT INTO mempp_meta (key, value)
                           VALUES ('reembed_encoder', %s), ('reembed_dim', %s)""",
                        (name, str(dim)),
                    )
                status = self._reembed_status(conn)
        if message:
            raise InvalidInput(message)
        assert status is not None
        return status

    def reembed_pending(self, after: int, limit: int) -> list[tuple[int, str]]:
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id, r.text FROM records r
                    WHERE r.id > %s AND {_NOT_ERASED}
                      AND NOT EXISTS (SELECT 1 FROM reembed_vectors v WHERE v.record_id = r.id)
                    ORDER BY r.id LIMIT %s""",
                (after, limit),
            ).fetchall()
        return [(int(i), t) for i, t in rows]

    def reembed_stage(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        if len(ids) != len(vectors):
            raise ValueError("one vector per id is required")
        with self._connection() as conn:
            # Shared with other stagers, exclusive against begin / switch / abandon.
            conn.execute(
                "SELECT pg_advisory_xact_lock_shared(%s, %s)", (_LOCK_CLASS_SCHEMA, _REEMBED_LOCK)
            )
            target = self._reembed_target(conn)
            if target is None:
                raise InvalidInput(f"{self.location}: no re-encoding is under way")
            matrix = np.ascontiguousarray(vectors, dtype=np.float32)
            if len(ids) and (matrix.ndim != 2 or matrix.shape[1] != target[1]):
                raise InvalidInput(
                    f"{self.location}: the re-encoding to {target[0]} stages "
                    f"{target[1]}-d vectors, not {matrix.shape[-1]}-d"
                )
            with conn.cursor() as cursor:
                cursor.executemany(
                    f"""INSERT INTO reembed_vectors (record_id, embedding)
                        SELECT r.id, %s FROM records r WHERE r.id = %s AND {_NOT_ERASED}
                        ON CONFLICT (record_id) DO UPDATE SET embedding = excluded.embedding""",
                    [(row, int(i)) for i, row in zip(ids, matrix, strict=True)],
                )

    def reembed_switch(self) -> bool:
        sql = self._psycopg.sql
        with self._connection() as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS_SCHEMA, _REEMBED_LOCK)
            )
            conn.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
            status = self._reembed_status(conn)
            if status is None:
                raise InvalidInput(f"{self.location}: no re-encoding is under way")
            if status.pending:
                return False
            conn.execute(
                """INSERT INTO reembed_vectors (record_id, embedding)
                   SELECT record_id, array_fill(0, ARRAY[%s])::vector FROM redactions
                   ON CONFLICT (record_id) DO UPDATE SET embedding = excluded.embedding""",
                (status.dim,),
            )
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(HNSW_INDEX)))
            conn.execute("ALTER TABLE records DROP CONSTRAINT IF EXISTS records_embedding_dim")
            conn.execute("SELECT set_config('mempp.reembed_switching', 'on', true)")
            conn.execute(
                """UPDATE records r SET embedding = v.embedding
                   FROM reembed_vectors v WHERE v.record_id = r.id"""
            )
            conn.execute("SELECT set_config('mempp.reembed_switching', 'off', true)")
            conn.execute(
                sql.SQL(
                    "ALTER TABLE records ADD CONSTRAINT records_embedding_dim "
                    "CHECK (vector_dims(embedding) = {})"
                ).format(sql.Literal(status.dim))
            )
            conn.execute(
                """UPDATE mempp_meta SET value = CASE key WHEN 'encoder' THEN %s ELSE %s END
                   WHERE key IN ('encoder', 'dim')""",
                (status.encoder, str(status.dim)),
            )
            self._drop_staging(conn)
        self._encoder_changed()
        try:
            self._ensure_hnsw()
        except StoreError as exc:  # searched by exact scan until an owner opens the store
            log.warning("%s: the HNSW index could not be rebuilt: %s", self.location, exc)
        return True

    def reembed_abandon(self) -> bool:
        with self._connection() as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS_SCHEMA, _REEMBED_LOCK)
            )
            if self._reembed_target(conn) is None:
                return False
            self._drop_staging(conn)
        return True
