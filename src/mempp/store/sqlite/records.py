"""The SQLite engine's records: encoder binding, the write path (insert, dedupe, state
changes) and plain reads (get, count, pages, scopes)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import numpy as np

from mempp.dates import now_key
from mempp.encoders import mismatch
from mempp.errors import EncoderMismatch, StoreError
from mempp.records import AddResult, Document, Record, State, text_hash
from mempp.store.base import STATE_COUNT_KEYS, UNDATED_DEDUPE_KEY, dedupe_date
from mempp.store.context import Encode
from mempp.store.sqlite.schema import _SQLiteBase, describe_failure

# A redacted row reports the state "redacted" (it is stored archived, with its tombstone in
# ``redactions``). Every query naming these columns reads ``FROM records`` unaliased.
_RECORD_COLUMNS = (
    "id, text, author, event_date, tags, source, scope, ingested_at, "
    "CASE WHEN EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = records.id) "
    "THEN 'redacted' ELSE state END, superseded_by, thread, metadata"
)


def _row_to_record(row: sqlite3.Row | tuple) -> Record:
    return Record(
        id=row[0],
        text=row[1],
        author=row[2],
        date=row[3],
        tags=tuple(json.loads(row[4])),
        source=row[5],
        scope=row[6],
        ingested_at=row[7],
        state=row[8],
        superseded_by=row[9],
        thread=row[10],
        metadata=None if row[11] is None else json.loads(row[11]),
    )


class _RecordsMixin(_SQLiteBase):
    """Encoder identity, the write path and plain reads."""

    # -- encoder identity -------------------------------------------------------------
    def encoder(self) -> tuple[str, int] | None:
        with self._lock:
            rows = dict(
                self._conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
        if "encoder" not in rows:
            return None
        return rows["encoder"], int(rows["dim"])

    def bind_encoder(self, name: str, dim: int) -> None:
        with self._write() as conn:
            found = dict(
                conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
            if "encoder" not in found:
                conn.executemany(
                    "INSERT INTO mempp_meta (key, value) VALUES (?, ?)",
                    [("encoder", name), ("dim", str(dim))],
                )
                return
        if (found["encoder"], int(found["dim"])) != (name, dim):
            raise mismatch(self.location, (found["encoder"], int(found["dim"])), name, dim)

    # -- write path -------------------------------------------------------------------
    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[int | None]:
        with self._lock:
            return [self._duplicate_of(self._conn, scope, doc) for doc in docs]

    @staticmethod
    def _duplicate_of(conn: sqlite3.Connection, scope: str, doc: Document) -> int | None:
        """The id of the active row ``doc`` repeats (the oldest), or None."""
        row = conn.execute(
            f"""SELECT min(id) FROM records INDEXED BY records_dedupe
               WHERE scope = ? AND coalesce(author, '') = ? AND text_hash = ?
                 AND coalesce(event_key, {UNDATED_DEDUPE_KEY}) = ? AND state = 'active'""",
            (scope, doc.author or "", text_hash(doc.text), dedupe_date(doc)),
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def stored_sources(self, scope: str, sources: Collection[str]) -> set[str]:
        if not sources:
            return set()
        with self._lock:
            rows = self._conn.execute(
                """SELECT DISTINCT source FROM records INDEXED BY records_source
                   WHERE scope = ? AND source IN (SELECT value FROM json_each(?))""",
                (scope, json.dumps(sorted(set(sources)), ensure_ascii=False)),
            ).fetchall()
        return {row[0] for row in rows}

    def insert(
        self,
        scope: str,
        docs: Sequence[Document],
        vectors: np.ndarray,
        *,
        encode_context: Encode | None = None,
    ) -> list[AddResult]:
        if len(docs) != len(vectors):
            raise ValueError("one vector per document is required")
        results: list[AddResult] = []
        ingested_at = datetime.now(UTC).isoformat()
        ingested_key = now_key()
        try:
            with self._write() as conn:
                self._check_width(conn, vectors)
                for doc, vector in zip(docs, vectors, strict=True):
                    repeated = self._duplicate_of(conn, scope, doc)
                    if repeated is not None:
                        results.append(AddResult(None, "duplicate", repeated))
                        continue
                    row_id = self._insert_row(
                        conn, scope, doc, vector, doc.tag_labels(), ingested_at, ingested_key
                    )
                    results.append(AddResult(row_id))
                written = [r.id for r in results if r.id is not None]
                self._write_contexts(conn, written, encode_context)
        except sqlite3.DatabaseError as exc:
            reason = describe_failure(self.location, exc)
            raise StoreError(f"could not store the batch in {self.location}: {reason}") from None
        return results

    def _check_width(self, conn: sqlite3.Connection, vectors: np.ndarray) -> None:
        """Inside the write: the bound width, read again (a re-encoding may have switched the
        store since the writer checked its encoder)."""
        row = conn.execute("SELECT value FROM mempp_meta WHERE key = 'dim'").fetchone()
        width = np.asarray(vectors).shape[-1] if len(vectors) else None
        if row is not None and width is not None and width != int(row[0]):
            raise EncoderMismatch(
                f"{self.location} now holds {row[0]}-d vectors (re-encoded since this writer "
                f"checked its encoder); this batch has {width}-d ones: reopen the store with "
                "the encoder `mempp info` names"
            )

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        # Nothing to defer: the vector leg's scan copy and the BM25 replica catch up from
        # the rows themselves, and FTS5 is maintained per row either way.
        yield

    @staticmethod
    def _insert_row(
        conn: sqlite3.Connection,
        scope: str,
        doc: Document,
        vector: np.ndarray,
        labels: Collection[str],
        ingested_at: str,
        ingested_key: int,
    ) -> int:
        """Write one record and its tag-index labels (the caller holds the transaction)."""
        cursor = conn.execute(
            """INSERT INTO records (scope, text, text_hash, author, event_date,
                   event_key, tags, source, ingested_at, ingested_key, embedding, thread,
                   metadata)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                scope,
                doc.text,
                text_hash(doc.text),
                doc.author,
                doc.date.text if doc.date else None,
                doc.date.key if doc.date else None,
                json.dumps(list(doc.tags), ensure_ascii=False),
                doc.source,
                ingested_at,
                ingested_key,
                np.asarray(vector, dtype="<f4").tobytes(),
                doc.thread,
                doc.metadata,
            ),
        )
        row_id = cursor.lastrowid
        assert row_id is not None
        conn.executemany(
            "INSERT INTO record_tags (label, record_id) VALUES (?, ?)",
            [(label, row_id) for label in sorted(labels)],
        )
        return row_id

    def set_state(
        self, scope: str, ids: Collection[int], state: State, superseded_by: int | None
    ) -> None:
        with self._write() as conn:
            conn.executemany(
                "UPDATE records SET state = ?, superseded_by = ? WHERE id = ? AND scope = ?",
                [(state, superseded_by, row_id, scope) for row_id in ids],
            )

    # -- reads ------------------------------------------------------------------------
    def get(self, scope: str, ids: Collection[int]) -> dict[int, Record]:
        if not ids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_RECORD_COLUMNS} FROM records
                    WHERE id IN (SELECT value FROM json_each(?)) AND +scope = ?""",
                (json.dumps([int(i) for i in ids]), scope),
            ).fetchall()
        return {row[0]: _row_to_record(row) for row in rows}

    def count(self, scope: str, *, active_only: bool = True) -> int:
        condition = " AND state = 'active'" if active_only else ""
        with self._lock:
            return self._conn.execute(
                f"SELECT count(*) FROM records WHERE scope = ?{condition}", (scope,)
            ).fetchone()[0]

    def state_counts(self, scope: str) -> dict[str, int]:
        with self._lock:
            row = self._conn.execute(
                """SELECT coalesce(sum(x.record_id IS NULL AND r.state = 'active'), 0),
                          coalesce(sum(x.record_id IS NULL AND r.state = 'archived'), 0),
                          count(x.record_id),
                          coalesce(sum(x.record_id IS NULL AND r.superseded_by IS NOT NULL), 0)
                   FROM records r LEFT JOIN redactions x ON x.record_id = r.id
                   WHERE r.scope = ?""",
                (scope,),
            ).fetchone()
        return dict(zip(STATE_COUNT_KEYS, (int(n) for n in row), strict=True))

    def records_after(
        self, scope: str, after: int, limit: int, *, active_only: bool = False
    ) -> list[Record]:
        condition = " AND state = 'active'" if active_only else ""
        with self._lock:
            rows = self._conn.execute(
                # "+scope": walk the primary key from ``after`` and stop at ``limit`` rows,
                # instead of sorting the whole scope for every page.
                f"""SELECT {_RECORD_COLUMNS} FROM records
                    WHERE +scope = ? AND id > ?{condition} ORDER BY id LIMIT ?""",
                (scope, int(after), int(limit)),
            ).fetchall()
        return [_row_to_record(row) for row in rows]

    def scopes(self) -> list[str]:
        with self._lock:
            return [
                r[0]
                for r in self._conn.execute("SELECT DISTINCT scope FROM records ORDER BY scope")
            ]
