"""Reading rows for the in-RAM replicas, and keeping the active rows of what they rank
(``mempp.store.postgres.replicas``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.errors import StoreError
from mempp.filters import Filters
from mempp.index.vectors import UNDATED
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres.records import _RecordsMixin
from mempp.store.postgres.replicas import rows_by_id

# Rows per block read for a vector replica (about 12 MB at 384-d).
_VECTOR_BLOCK = 8192
# Binary COPY's header: signature, flags, then the length of an extension area.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_COPY_HEADER = len(_COPY_SIGNATURE) + 8
_COPY_TRAILER = b"\xff\xff"


def _copy_row_type(dim: int) -> np.dtype:
    """One row of ``COPY (SELECT id, key, embedding) TO STDOUT (FORMAT binary)``, all three
    NOT NULL: a field count, then each field's length and bytes, big-endian (pgvector's
    binary form is its dimension, a reserved int16 and the floats)."""
    return np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("key_len", ">i4"),
            ("key", ">i8"),
            ("vector_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("vector", ">f4", (dim,)),
        ]
    )


def _unit(rows: np.ndarray) -> np.ndarray:
    """The rows scaled to unit length in place (a zero row stays zero)."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    rows /= np.where(norms > 0, norms, 1)[:, None]
    return rows


if TYPE_CHECKING:
    import psycopg


class _ReplicasMixin(_RecordsMixin):
    """Reading rows for a replica, and keeping the active rows of what it ranks."""

    @staticmethod
    def _ids_and_keys_after(
        conn: psycopg.Connection[Any], scope: str, after: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids (ascending) and event keys of the scope's rows with ids above ``after``."""
        rows = conn.execute(
            """SELECT id, coalesce(event_key, %s) FROM records
               WHERE scope = %s AND id > %s ORDER BY id""",
            (int(UNDATED), scope, after),
        ).fetchall()
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        keys = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        return ids, keys

    def _kept_in_order(
        self, scope: str, ranked: Callable[[int], np.ndarray], limit: int, filters: Filters
    ) -> list[int]:
        """The first ``limit`` active rows meeting ``filters`` of a replica's ranking
        (``ranked(n)``: its best ``n`` ids of any state), asked again for four times more in
        the rare case too few of them are."""
        return self._kept_within(scope, ranked, limit, filters, None) or []

    def _kept_within(
        self,
        scope: str,
        ranked: Callable[[int], np.ndarray],
        limit: int,
        filters: Filters,
        most: int | None,
    ) -> list[int] | None:
        """``_kept_in_order``, or None once it would ask for more than ``most`` rows. With
        ``most``, each round asks for twice the rows the share kept so far says are enough
        (at least twice as many as before), so a narrow filter gives up after one round."""
        want = limit
        while True:
            found = ranked(want)
            active = self._active_among(scope, found, filters)
            kept = [int(i) for i in found if int(i) in active]
            if len(kept) >= limit or len(found) < want:
                return kept[:limit]
            if most is None:
                want *= 4
                continue
            want = max(2 * want, 2 * limit * len(found) // max(1, len(kept)))
            if want > most:
                return None

    def _active_among(self, scope: str, ids: np.ndarray, filters: Filters) -> set[int]:
        """The rows of ``ids`` that are active and meet the filters."""
        if len(ids) == 0:
            return set()
        where, params = filter_condition(filters, "r", "postgres")
        # A join, so each id is one primary-key probe: as ``r.id = ANY(...)`` beside an
        # author filter the planner walked the author's rows and tested each against the
        # whole list (1,176 ids among 17k rows at 100k: 130-260 ms, against 39).
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM unnest(%(ids)s::bigint[]) AS k(id)
                    JOIN records r ON r.scope = %(scope)s AND r.id = k.id
                    WHERE r.state = 'active'{where}""",
                {"scope": scope, "ids": ids.tolist(), **params},
            ).fetchall()
        return {row[0] for row in rows}

    def _vector_rows_after(
        self, scope: str, after: int, dim: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Blocks of the ids (ascending), event keys and unit float32 vectors of the scope's
        rows with ids above ``after``."""
        return self._copied_vectors(
            f"""SELECT id, coalesce(event_key, {int(UNDATED)}), embedding
                FROM records WHERE scope = %s AND id > %s ORDER BY id""",
            (scope, after),
            dim,
        )

    def _unit_rows(self, scope: str, ids: np.ndarray) -> np.ndarray:
        """The scope's vectors of ``ids`` at unit length, in that order (zeros for an id the
        scope lacks): the exact rows a vector replica rescores its candidates with."""
        dim = self._bound_dim() or 0
        blocks = list(
            self._copied_vectors(
                "SELECT id, 0::bigint, embedding FROM records WHERE scope = %s AND id = ANY(%s)",
                (scope, ids.tolist()),
                dim,
            )
        )
        if not blocks:
            return np.zeros((len(ids), dim), dtype=np.float32)
        found, _, rows = (np.concatenate(parts) for parts in zip(*blocks, strict=True))
        order = np.argsort(found)
        return rows_by_id(found[order], rows[order], ids)

    def _copied_vectors(
        self, select: str, params: tuple[Any, ...], dim: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Blocks of ``select``'s rows (an id, a key, a vector, none NULL) as arrays, the
        vectors at unit length: one binary ``COPY`` (a million rows in about 12 s, and 200
        rows in half the time of a cursor's fetch, whose loading goes row by row), parsed by
        numpy a block at a time, so no more than a block is held twice."""
        row_type = _copy_row_type(dim)
        block_bytes = _VECTOR_BLOCK * row_type.itemsize
        buffer = bytearray()
        header = True
        with (
            self._connection() as conn,
            conn.cursor() as cursor,
            cursor.copy(f"COPY ({select}) TO STDOUT (FORMAT binary)", params) as copy,
        ):
            for data in copy:
                buffer += data
                if header and len(buffer) >= _COPY_HEADER:
                    if not buffer.startswith(_COPY_SIGNATURE):
                        raise StoreError(f"{self.location}: COPY sent no binary header")
                    extension = int.from_bytes(buffer[_COPY_HEADER - 4 : _COPY_HEADER])
                    del buffer[: _COPY_HEADER + extension]
                    header = False
                if not header and len(buffer) >= block_bytes:
                    yield self._copy_block(buffer[:block_bytes], row_type, dim)
                    del buffer[:block_bytes]
        if header or buffer[-2:] != _COPY_TRAILER:
            raise StoreError(f"{self.location}: COPY of the vectors ended early")
        del buffer[-2:]
        if buffer:
            yield self._copy_block(buffer, row_type, dim)

    def _copy_block(
        self, data: bytearray, row_type: np.dtype, dim: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if len(data) % row_type.itemsize:
            raise StoreError(f"{self.location}: a vector of another size than {dim}")
        rows = np.frombuffer(data, dtype=row_type)
        # Each length is fixed, so a row of another shape (a vector of another dimension)
        # shifts every field after it: checked, never read as floats.
        shaped = (
            (rows["fields"] == 3)
            & (rows["id_len"] == 8)
            & (rows["key_len"] == 8)
            & (rows["vector_len"] == 4 + 4 * dim)
            & (rows["dim"] == dim)
        )
        if not shaped.all():
            raise StoreError(f"{self.location}: a vector of another size than {dim}")
        vectors = _unit(rows["vector"].astype(np.float32))
        return rows["id"].astype(np.int64), rows["key"].astype(np.int64), vectors
