"""The PostgreSQL engine's records: encoder binding (with the vector CHECK and HNSW index),
the write path (insert, dedupe, state changes) and plain reads (get, count, pages,
scopes)."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from mempp.dates import now_key
from mempp.encoders import mismatch
from mempp.errors import StoreError
from mempp.index.analysis import terms_of
from mempp.records import AddResult, Document, Record, State, text_hash
from mempp.store.base import STATE_COUNT_KEYS, dedupe_date
from mempp.store.base import UNDATED_DEDUPE_KEY as UNDATED
from mempp.store.context import Encode
from mempp.store.postgres.bulk import (
    BULK_MIN_ROWS,
    duplicate_ids,
    hnsw_index_sql,
    insert_by_copy,
    no_load_running,
)
from mempp.store.postgres.connect import _first_line
from mempp.store.postgres.replicas import ScopeCache, ScopeVectors
from mempp.store.postgres.schema import _LOCK_CLASS_SCHEMA, HNSW_MAX_DIM, _PostgresBase

# A redacted row reports the state "redacted" (it is stored archived, with its tombstone in
# ``redactions``). Every query naming these columns reads ``FROM records`` unaliased.
_RECORD_COLUMNS = (
    "id, text, author, event_date, tags, source, scope, ingested_at, "
    "CASE WHEN EXISTS (SELECT 1 FROM redactions x WHERE x.scope = records.scope "
    "AND x.record_id = records.id) THEN 'redacted' ELSE state END, superseded_by, thread, metadata"
)


def _as_float32(value: Any) -> np.ndarray:
    """A loaded ``vector`` as float32: pgvector's loader gives a ``Vector`` (0.3+) or a numpy
    array (older releases), depending on the installed pgvector-python."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


# One statement per document, pipelined by ``executemany``: the row and its tag labels go in
# together, and ``NOT EXISTS`` sees rows inserted by earlier statements of the same batch.
# ``ON CONFLICT`` only matters for writers that bypass the scope lock (other tools).
_INSERT = f"""
WITH new AS (
    INSERT INTO records (scope, text, text_hash, author, event_date, event_key, tags, source,
                         ingested_at, ingested_key, embedding, thread, metadata, terms)
    SELECT %(scope)s, %(text)s, %(hash)s, %(author)s, %(event_date)s, %(event_key)s,
           %(tags)s::text[], %(source)s, %(ingested_at)s, %(ingested_key)s, %(embedding)s,
           %(thread)s, %(metadata)s::jsonb, %(terms)s
    WHERE NOT EXISTS (
        SELECT 1 FROM records
        WHERE scope = %(scope)s AND coalesce(author, '') = %(author_key)s
          AND text_hash = %(hash)s AND coalesce(event_key, {UNDATED}) = %(date_key)s
          AND state = 'active')
    ON CONFLICT (scope, (coalesce(author, '')), text_hash, (coalesce(event_key, {UNDATED})))
        WHERE state = 'active' DO NOTHING
    RETURNING id
), labels AS (
    INSERT INTO record_tags (scope, label, record_id)
    SELECT %(scope)s, label, new.id FROM new, unnest(%(labels)s::text[]) AS label
)
SELECT id FROM new
"""


def _row_params(
    scope: str,
    doc: Document,
    vector: np.ndarray,
    labels: Collection[str],
    ingested_at: datetime,
    ingested_key: int,
    terms: str,
) -> dict[str, Any]:
    """Parameters of ``_INSERT`` for one document (``terms``: its text's, from
    ``mempp.index.analysis.terms_of``): the one insert path for every row."""
    return {
        "scope": scope,
        "text": doc.text,
        "hash": text_hash(doc.text),
        "author": doc.author,
        "author_key": doc.author or "",
        "date_key": dedupe_date(doc),
        "event_date": doc.date.text if doc.date else None,
        "event_key": doc.date.key if doc.date else None,
        "tags": list(doc.tags),
        "source": doc.source,
        "ingested_at": ingested_at,
        "ingested_key": ingested_key,
        "embedding": np.asarray(vector, dtype=np.float32),
        "thread": doc.thread,
        "metadata": doc.metadata,
        "labels": sorted(labels),
        "terms": terms,
    }


def _row_to_record(row: Sequence[Any]) -> Record:
    ingested: datetime = row[7]
    return Record(
        id=row[0],
        text=row[1],
        author=row[2],
        date=row[3],
        tags=tuple(row[4]),
        source=row[5],
        scope=row[6],
        ingested_at=ingested.astimezone(UTC).isoformat(),
        state=row[8],
        superseded_by=row[9],
        thread=row[10],
        metadata=row[11],  # jsonb arrives as a dict
    )


# A bound encoder changes only by a re-encoding (mempp reembed): this process re-reads it at
# most this often, so another process's switch reaches its searches within that time, at one
# round trip a second rather than one per search.
ENCODER_RECHECK_S = 1.0


class _RecordsMixin(_PostgresBase):
    """Encoder identity, the write path and plain reads."""

    _bound_at = 0.0

    # -- encoder identity -------------------------------------------------------------
    def encoder(self) -> tuple[str, int] | None:
        now = time.monotonic()
        if self._bound is not None and now - self._bound_at < ENCODER_RECHECK_S:
            return self._bound
        with self._connection() as conn:
            rows = dict(
                conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
        if "encoder" not in rows:
            return None
        found = (rows["encoder"], int(rows["dim"]))
        if self._bound is not None and found != self._bound:
            self._encoder_changed()  # re-encoded by another process (mempp reembed)
        self._bound, self._bound_at = found, now
        return found

    def _encoder_changed(self) -> None:
        """The store was re-encoded: forget the bound encoder and the vector replicas, which
        hold the old vectors."""
        self._bound = None
        self._vector_replicas = ScopeCache(ScopeVectors)

    def bind_encoder(self, name: str, dim: int) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise StoreError(f"an encoder dimension must be a positive integer, got {dim!r}")
        with self._connection() as conn:
            found = self._bind_in(conn, name, dim)
        if found is not None and (found["encoder"], int(found["dim"])) != (name, dim):
            raise mismatch(self.location, (found["encoder"], int(found["dim"])), name, dim)

    def _bind_in(self, conn: Any, name: str, dim: int) -> dict[str, str] | None:
        """Bind the encoder inside the caller's transaction; the binding found instead when
        the store already has one (the caller compares it)."""
        sql = self._psycopg.sql
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
        found = dict(
            conn.execute(
                "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
            ).fetchall()
        )
        if "encoder" in found:
            return found
        # First encoder: from now on the database itself refuses a vector of another size,
        # and the ANN index can be built (it needs a fixed dimension).
        conn.execute(
            sql.SQL(
                "ALTER TABLE records ADD CONSTRAINT records_embedding_dim "
                "CHECK (vector_dims(embedding) = {})"
            ).format(sql.Literal(dim))
        )
        # Not under a bulk load: its end builds the index once over all its rows.
        if dim <= HNSW_MAX_DIM and no_load_running(conn):
            conn.execute(hnsw_index_sql(dim))
        conn.execute(
            "INSERT INTO mempp_meta (key, value) VALUES ('encoder', %s), ('dim', %s)",
            (name, str(dim)),
        )
        return None

    def _bound_dim(self) -> int | None:
        bound = self.encoder()
        return None if bound is None else bound[1]

    # -- write path -------------------------------------------------------------------
    def stored_sources(self, scope: str, sources: Collection[str]) -> set[str]:
        if not sources:
            return set()
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT source FROM records WHERE source = ANY(%s) AND scope = %s",
                (sorted(set(sources)), scope),
            ).fetchall()
        return {row[0] for row in rows}

    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[int | None]:
        if not docs:
            return []
        with self._connection() as conn:
            return duplicate_ids(conn, scope, docs)

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
        if not docs:
            return []
        ingested_at = datetime.now(UTC)
        ingested_key = now_key()
        if len(docs) >= BULK_MIN_ROWS:  # same outcome, one COPY (mempp.store.postgres.bulk)
            with self._connection() as conn:
                self._lock_scope(conn, scope)
                copied = insert_by_copy(conn, scope, docs, vectors, ingested_at, ingested_key)
                written = [r.id for r in copied if r.id is not None]
                self._write_contexts(conn, written, encode_context)
                return copied
        params = [
            _row_params(scope, doc, vector, doc.tag_labels(), ingested_at, ingested_key, terms)
            for doc, vector, terms in zip(
                docs, vectors, terms_of([doc.text for doc in docs]), strict=True
            )
        ]
        stored: list[int | None] = []
        with self._connection() as conn:
            self._lock_scope(conn, scope)
            with conn.cursor() as cursor:
                cursor.executemany(_INSERT, params, returning=True)
                while True:
                    row = cursor.fetchone()
                    stored.append(row[0] if row else None)
                    if not cursor.nextset():
                        break
            skipped = [i for i, row_id in enumerate(stored) if row_id is None]
            # In the same transaction, so a repeat of a row this batch wrote finds that row.
            repeated = duplicate_ids(conn, scope, [docs[i] for i in skipped]) if skipped else []
            self._write_contexts(conn, [i for i in stored if i is not None], encode_context)
        lookup = dict(zip(skipped, repeated, strict=True))
        return [
            AddResult(row_id) if row_id is not None else AddResult(None, "duplicate", lookup[i])
            for i, row_id in enumerate(stored)
        ]

    def set_state(
        self, scope: str, ids: Collection[int], state: State, superseded_by: int | None
    ) -> None:
        if not ids:
            return
        psycopg = self._psycopg
        try:
            with self._pool.connection() as conn:
                # The scope lock serialises this with consolidation steps and undos, which
                # also lock it first: no deadlock between them, whatever order ids come in.
                self._lock_scope(conn, scope)
                conn.execute(
                    """UPDATE records SET state = %s, superseded_by = %s
                       WHERE scope = %s AND id = ANY(%s::bigint[])""",
                    (state, superseded_by, scope, [int(i) for i in ids]),
                )
        except psycopg.errors.UniqueViolation:
            # Only reachable by re-activating an archived row whose text an active row of
            # the same author already holds: that would make a duplicate.
            raise StoreError(
                f"{self.location}: cannot make a row active while an active row of the same "
                "scope and author has the same text"
            ) from None
        except psycopg.errors.ForeignKeyViolation:
            raise StoreError(
                f"{self.location}: superseded_by={superseded_by} is not a record of scope {scope!r}"
            ) from None
        except psycopg.errors.CheckViolation:
            raise StoreError(f"{self.location}: invalid state {state!r}") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {_first_line(exc)}") from None
        except self._pool_errors as exc:
            raise StoreError(f"{self.location}: no database connection ({exc})") from None

    # -- reads ------------------------------------------------------------------------
    def get(self, scope: str, ids: Collection[int]) -> dict[int, Record]:
        if not ids:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_RECORD_COLUMNS} FROM records
                    WHERE scope = %s AND id = ANY(%s::bigint[])""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return {row[0]: _row_to_record(row) for row in rows}

    def count(self, scope: str, *, active_only: bool = True) -> int:
        condition = " AND state = 'active'" if active_only else ""
        with self._connection() as conn:
            return conn.execute(
                f"SELECT count(*) FROM records WHERE scope = %s{condition}", (scope,)
            ).fetchone()[0]

    def state_counts(self, scope: str) -> dict[str, int]:
        with self._connection() as conn:
            row = conn.execute(
                """SELECT count(*) FILTER (WHERE x.record_id IS NULL AND r.state = 'active'),
                          count(*) FILTER (WHERE x.record_id IS NULL AND r.state = 'archived'),
                          count(x.record_id),
                          count(*) FILTER (WHERE x.record_id IS NULL
                                           AND r.superseded_by IS NOT NULL)
                   FROM records r LEFT JOIN redactions x
                     ON x.scope = r.scope AND x.record_id = r.id
                   WHERE r.scope = %s""",
                (scope,),
            ).fetchone()
        return dict(zip(STATE_COUNT_KEYS, (int(n) for n in row), strict=True))

    def records_after(
        self, scope: str, after: int, limit: int, *, active_only: bool = False
    ) -> list[Record]:
        condition = " AND state = 'active'" if active_only else ""
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_RECORD_COLUMNS} FROM records
                    WHERE scope = %s AND id > %s{condition} ORDER BY id LIMIT %s""",
                (scope, int(after), int(limit)),
            ).fetchall()
        return [_row_to_record(row) for row in rows]

    def scopes(self) -> list[str]:
        with self._connection() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT scope FROM records ORDER BY scope")]
