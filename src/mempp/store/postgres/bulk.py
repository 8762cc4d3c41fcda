"""The PostgreSQL engine's bulk loads: large write batches by ``COPY``, and the HNSW index
deferred to the end of a load (``bulk_load()``), rebuilt on open if a loader died.

Large batches. ``insert`` sends a batch of at least ``BULK_MIN_ROWS`` documents through
``insert_by_copy``: the batch is copied (binary ``COPY``) into a temporary table, the rows
that an active row of the scope already holds are found with one query against it, ids are
drawn for the rest in input order, and one ``INSERT ... SELECT`` writes the rows and their
tag labels. Within the batch, the first of equal (author, text, date) keys is kept, as the
row-by-row path keeps it (each of its statements sees the rows of the earlier ones). The
caller holds the scope's write lock, so the ids, the dedupe and the ``AddResult`` list are
those of the row-by-row path; all of it is one transaction.

Deferred index. Inside ``bulk_load()``, the HNSW index is dropped and every insert skips
its row-by-row maintenance; at the end it is built once over the whole table (with
``maintenance_work_mem`` sized to the graph, and pgvector's parallel build). Loaders
hold a shared session advisory lock for their whole load; whoever builds the index (the
last loader to finish, ``bind_encoder`` on a new store, or any process opening the store)
first takes it exclusively, so the index is never built under a running load. A loader
that dies releases its lock with its session; the next process that opens the store finds
the index missing and builds it. Meanwhile the vector leg stays exact (without the index,
its HNSW statement computes every distance).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.errors import StoreError
from mempp.index.analysis import terms_of
from mempp.records import AddResult, Document, text_hash
from mempp.store.base import UNDATED_DEDUPE_KEY as UNDATED
from mempp.store.base import dedupe_date
from mempp.store.postgres.connect import _first_line
from mempp.store.postgres.schema import HNSW_MAX_DIM, _PostgresBase

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

# Batches from this size go through COPY. Measured (``benchmarks/bench_engines.py
# --pg-ingest --pg-batches``, docs/scaling.md): without the HNSW index, COPY stores 1.3-2.3x
# the documents per second of the row-by-row statements from batches of 32; with the index
# kept up the two are equal (its insert dominates). Above the default batch (64), so
# ordinary writes keep the row-by-row path and create no temporary table per batch.
BULK_MIN_ROWS = 128
# maintenance_work_mem of the transaction that builds the HNSW index, MB: enough for the
# graph of the rows there are (about 2.6 kB a 384-d row, with slack; a build whose graph
# outgrows this memory goes on much more slowly, as pgvector's NOTICE says), at most this.
# A parallel build asks for all of it as shared memory: on a server with a small
# /dev/shm (Docker's default is 64 MB) set ``store.hnsw_build_memory_mb`` lower.
HNSW_BUILD_MEMORY_MAX_MB = 4096
HNSW_INDEX = "records_embedding_hnsw"
# Advisory-lock class of bulk loads (after the schema and write classes of schema.py).
_LOCK_CLASS_BULK = 0x6D656D72

_STAGING = (
    "CREATE TEMPORARY TABLE mempp_batch (ord int4, text text, text_hash bytea, "
    "author text, author_key text, event_date text, event_key int8, date_key int8, "
    "tags text[], source text, embedding vector, thread text, metadata text, labels text[], "
    "terms text) "
    "ON COMMIT DROP"
)
_STAGING_TYPES = (
    "int4", "text", "bytea", "text", "text", "text", "int8", "int8",
    "text[]", "text", "vector", "text", "text", "text[]", "text",
)  # fmt: skip

# Rows of the batch whose (author, text, date) an active row of the scope already holds.
_STORED_DUPLICATES = f"""
SELECT b.ord, d.id FROM mempp_batch b
CROSS JOIN LATERAL (
    SELECT min(id) AS id FROM records
    WHERE scope = %s AND state = 'active' AND coalesce(author, '') = b.author_key
      AND text_hash = b.text_hash AND coalesce(event_key, {UNDATED}) = b.date_key) d
WHERE d.id IS NOT NULL
"""

# ``ON CONFLICT`` only matters for writers that bypass the scope lock, as in records.py.
_INSERT_FROM_BATCH = f"""
WITH assigned AS (
    SELECT a.ord, a.id FROM unnest(%(ords)s::int4[], %(ids)s::int8[]) AS a(ord, id)
), new AS (
    INSERT INTO records (id, scope, text, text_hash, author, event_date, event_key, tags,
                         source, ingested_at, ingested_key, embedding, thread, metadata,
                         terms)
    OVERRIDING SYSTEM VALUE
    SELECT assigned.id, %(scope)s, b.text, b.text_hash, b.author, b.event_date, b.event_key,
           b.tags, b.source, %(ingested_at)s, %(ingested_key)s, b.embedding, b.thread,
           b.metadata::jsonb, b.terms
    FROM mempp_batch b JOIN assigned USING (ord)
    ON CONFLICT (scope, (coalesce(author, '')), text_hash, (coalesce(event_key, {UNDATED})))
        WHERE state = 'active' DO NOTHING
    RETURNING id
), labels AS (
    INSERT INTO record_tags (scope, label, record_id)
    SELECT %(scope)s, label, new.id
    FROM new JOIN assigned USING (id) JOIN mempp_batch b USING (ord), unnest(b.labels) AS label
)
SELECT id FROM new
"""


def duplicate_ids(
    conn: psycopg.Connection[Any], scope: str, docs: Sequence[Document]
) -> list[int | None]:
    """For each document, the id of the oldest active row of the scope it repeats (same
    author, text and event date), else None: one probe of the dedupe index per document."""
    keys = [(doc.author or "", text_hash(doc.text), dedupe_date(doc)) for doc in docs]
    found = {
        (row[0], bytes(row[1]), row[2]): row[3]
        for row in conn.execute(
            f"""SELECT k.author_key, k.hash, k.date_key,
                       (SELECT min(id) FROM records
                        WHERE scope = %s AND state = 'active'
                          AND coalesce(author, '') = k.author_key AND text_hash = k.hash
                          AND coalesce(event_key, {UNDATED}) = k.date_key)
                FROM unnest(%s::text[], %s::bytea[], %s::bigint[])
                    AS k(author_key, hash, date_key)""",
            (scope, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        )
    }
    return [found.get(key) for key in keys]


def insert_by_copy(
    conn: psycopg.Connection[Any],
    scope: str,
    docs: Sequence[Document],
    vectors: np.ndarray,
    ingested_at: datetime,
    ingested_key: int,
) -> list[AddResult]:
    """Store a batch as ``insert`` does, through COPY (the caller holds the scope lock and
    the transaction)."""
    results: list[AddResult | None] = [None] * len(docs)
    first: dict[tuple[str, bytes, int], int] = {}
    copies: dict[int, int] = {}  # a later copy within the batch -> the first one's ord
    rows = []
    kept: list[int] = []
    for ord_, (doc, vector) in enumerate(zip(docs, vectors, strict=True)):
        digest = text_hash(doc.text)
        key = (doc.author or "", digest, dedupe_date(doc))
        if key in first:
            copies[ord_] = first[key]  # the first one is the row
            continue
        first[key] = ord_
        rows.append(
            (
                ord_, doc.text, digest, doc.author, key[0],
                doc.date.text if doc.date else None, doc.date.key if doc.date else None,
                key[2], list(doc.tags), doc.source, np.asarray(vector, dtype=np.float32),
                doc.thread, doc.metadata, sorted(doc.tag_labels()),
            )
        )  # fmt: skip
        kept.append(ord_)
    terms = terms_of([docs[ord_].text for ord_ in kept])
    rows = [(*row, row_terms) for row, row_terms in zip(rows, terms, strict=True)]
    conn.execute(_STAGING)
    with conn.cursor() as cursor:
        with cursor.copy("COPY mempp_batch FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(list(_STAGING_TYPES))
            for row in rows:
                copy.write_row(row)
        cursor.execute("ANALYZE mempp_batch")  # a plan for the size the batch has
        stored = {row[0]: row[1] for row in cursor.execute(_STORED_DUPLICATES, (scope,))}
        fresh = [row[0] for row in rows if row[0] not in stored]
        # Ids in input order, as the row-by-row path draws them; none for a skipped row.
        drawn = cursor.execute(
            "SELECT nextval(pg_get_serial_sequence('records', 'id')) FROM generate_series(1, %s)",
            (len(fresh),),
        ).fetchall()
        ids = sorted(row[0] for row in drawn)
        inserted = (
            {
                row[0]
                for row in cursor.execute(
                    _INSERT_FROM_BATCH,
                    {
                        "ords": fresh,
                        "ids": ids,
                        "scope": scope,
                        "ingested_at": ingested_at,
                        "ingested_key": ingested_key,
                    },
                )
            }
            if fresh
            else set()
        )
    for ord_, repeated in stored.items():
        results[ord_] = AddResult(None, "duplicate", repeated)
    for ord_, row_id in zip(fresh, ids, strict=True):
        if row_id in inserted:
            results[ord_] = AddResult(row_id)
    lost = [ord_ for ord_ in fresh if results[ord_] is None]
    if lost:  # lost a race with a writer that bypassed the scope lock: name what it wrote
        repeated_ids = duplicate_ids(conn, scope, [docs[ord_] for ord_ in lost])
        for ord_, repeated in zip(lost, repeated_ids, strict=True):
            results[ord_] = AddResult(None, "duplicate", repeated)
    for ord_, original in copies.items():
        kept = results[original]
        assert kept is not None
        results[ord_] = AddResult(None, "duplicate", kept.id or kept.duplicate_of)
    return [result for result in results if result is not None]


def build_memory_mb(rows: int, dim: int) -> int:
    """maintenance_work_mem for building the HNSW index over ``rows`` ``dim``-d vectors."""
    graph = rows * (4 * dim + 600) * 1.25 / 2**20  # vector, neighbour lists, slack
    return int(min(HNSW_BUILD_MEMORY_MAX_MB, max(64, graph)))


def hnsw_index_sql(dim: int) -> Any:
    """``CREATE INDEX IF NOT EXISTS`` of the HNSW index for ``dim``-d vectors."""
    from psycopg import sql

    return sql.SQL(
        "CREATE INDEX IF NOT EXISTS {} ON records "
        "USING hnsw ((embedding::vector({})) vector_cosine_ops)"
    ).format(sql.Identifier(HNSW_INDEX), sql.Literal(dim))


def no_load_running(conn: psycopg.Connection[Any]) -> bool:
    """Take the bulk-load lock exclusively until the transaction ends, if no loader holds
    it: building the HNSW index then defers to no one."""
    query = "SELECT pg_try_advisory_xact_lock(%s, 0)"
    return bool(conn.execute(query, (_LOCK_CLASS_BULK,)).fetchone()[0])


def hnsw_state(conn: psycopg.Connection[Any]) -> bool | None:
    """None without the HNSW index, else whether it is valid (a failed concurrent build
    leaves an invalid one)."""
    row = conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (HNSW_INDEX,)
    ).fetchone()
    return None if row is None else bool(row[0])


class _BulkMixin(_PostgresBase):
    """``bulk_load()`` and the HNSW index's repair on open."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.hnsw_build_memory_mb: int | None = None  # None: sized from the row count
        self._conninfo = url
        self._bulk_depth = 0
        try:
            self._ensure_hnsw()
        except StoreError as exc:
            # A role that may not create indexes still reads and writes; it only searches
            # by exact scan until an owner opens the store.
            log.warning(
                "%s: the HNSW index is missing and could not be built: %s", self.location, exc
            )

    def _hnsw_dim(self) -> int | None:
        """The dimension an HNSW index is built for; None before an encoder is bound or
        past pgvector's limit."""
        with self._connection() as conn:
            row = conn.execute("SELECT value FROM mempp_meta WHERE key = 'dim'").fetchone()
        if row is None or int(row[0]) > HNSW_MAX_DIM:
            return None
        return int(row[0])

    def _ensure_hnsw(self) -> None:
        """Build the HNSW index if it is missing and no bulk load is running."""
        dim = self._hnsw_dim()
        if dim is None:
            return
        sql = self._psycopg.sql
        with self._connection() as conn:
            if hnsw_state(conn) or not no_load_running(conn):
                return
            if hnsw_state(conn) is False:  # an invalid leftover of an interrupted build
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(HNSW_INDEX)))
            memory = self.hnsw_build_memory_mb
            if memory is None:
                rows = conn.execute("SELECT count(*) FROM records").fetchone()[0]
                memory = build_memory_mb(rows, dim)
            conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, true)", (f"{int(memory)}MB",)
            )
            conn.execute(hnsw_index_sql(dim))

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """Load many rows without the HNSW index's row-by-row upkeep: the index is dropped
        now and built once when the last concurrent load ends (or, if this process dies,
        by the next one that opens the store). Re-entrant; searches stay exact meanwhile."""
        if self._bulk_depth:
            self._bulk_depth += 1
            try:
                yield
            finally:
                self._bulk_depth -= 1
            return
        psycopg = self._psycopg
        sql = psycopg.sql
        session = None
        try:
            # A session of its own: its shared lock lasts as long as the load, and ends
            # with the process if it dies.
            session = psycopg.connect(self._conninfo, **self._connect_kwargs(self._conninfo))
            session.autocommit = True
            session.execute("SELECT pg_advisory_lock_shared(%s, 0)", (_LOCK_CLASS_BULK,))
            session.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(HNSW_INDEX)))
        except psycopg.Error as exc:
            if session is not None:
                session.close()
            raise StoreError(
                f"{self.location}: cannot start a bulk load ({_first_line(exc)})"
            ) from None
        self._bulk_depth = 1
        try:
            yield
        except Exception:
            self._end_load(session)
            raise
        except BaseException:  # interrupted: the next process to open the store builds it
            self._end_load(session, build=False)
            raise
        self._end_load(session)

    def _end_load(self, session: psycopg.Connection[Any], *, build: bool = True) -> None:
        self._bulk_depth = 0
        try:
            if build:
                self._analyze(session)
            session.execute("SELECT pg_advisory_unlock_shared(%s, 0)", (_LOCK_CLASS_BULK,))
        finally:
            session.close()
        if build:
            self._ensure_hnsw()

    def _analyze(self, session: psycopg.Connection[Any]) -> None:
        """Planner statistics for what was loaded. Until autovacuum gets to a freshly loaded
        table its plans are for an empty one: at 100k rows the first ten searches after a
        load took 3.6-5.9 s each, with this 0.1-0.3 s (ANALYZE took 1.4 s)."""
        try:
            session.execute("ANALYZE records, record_tags")
        except self._psycopg.Error as exc:  # e.g. not the tables' owner: autovacuum will do it
            log.warning("%s: ANALYZE after the bulk load failed: %s", self.location, exc)
