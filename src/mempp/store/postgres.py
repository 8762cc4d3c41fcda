"""The server engine: PostgreSQL with pgvector, for many processes and machines at once.

Same contract as the SQLite engine (``mempp.store.base.Store``), enforced by the database:

* Append-only: triggers refuse ``DELETE`` and ``TRUNCATE`` of ``records`` (and of its tag
  index) and any ``UPDATE`` that names a content column; only ``state`` and ``superseded_by``
  may change. Like SQLite's ``UPDATE OF`` triggers they fire when a content column is *named*
  in the ``SET`` list, even if the value would stay the same.
* Full text: a stored generated ``tsvector`` (``to_tsvector('english', text)``; for the rare
  document past tsvector's 1 MB limit, of its longest prefix that fits) with a GIN index.
  ``lexical_rank="bm25"`` (the default preset) ranks by BM25 from a per-scope in-RAM replica
  of those postings (``mempp.store.pg_bm25``), as SQLite does; ``"cover_density"`` ranks by
  ``ts_rank_cd`` as in the paper's own code: each term becomes
  ``plainto_tsquery('english', term)`` bound as a parameter and the pieces are joined with
  ``&&`` (conjunctive) or ``||`` (disjunctive) in SQL built from the *number* of terms only,
  so user text is never parsed as tsquery syntax.
* A search's legs run at once, each on a pooled connection (``gather``).
* Vectors: an untyped ``vector`` column, because the dimension is known only when the first
  encoder is bound. ``bind_encoder`` then adds (once, under the schema lock) a CHECK
  ``vector_dims(embedding) = dim``, so the database refuses a vector of another size, and an
  HNSW cosine index on the expression ``embedding::vector(dim)`` (pgvector's documented
  pattern for untyped columns). Typing the column itself later is impossible without
  dropping the append-only trigger that names it (PostgreSQL refuses ``ALTER COLUMN TYPE``
  on a column used in a trigger definition), and would rewrite the table. The vector leg
  scans exactly when at most ``exact_scan_max_rows`` rows are eligible (cheap, and exact by
  construction) and otherwise walks the HNSW index with pgvector's iterative scan in
  ``strict_order``, the scope (tenant, active, ``event_key <= as_of``) applied as the filter
  of that scan, so every ``limit`` slot still goes to an eligible row.
* Dedupe: a partial UNIQUE index on ``(scope, coalesce(author, ''), text_hash)`` over active
  rows is the guarantee; a per-scope transaction advisory lock serialises writers of one
  scope (as SQLite's ``BEGIN IMMEDIATE`` does), which keeps ids in commit order per scope,
  avoids deadlocks between batches that overlap in different orders, and lets the insert
  skip duplicates with ``NOT EXISTS`` instead of burning sequence values on conflicts.
* Schema: versioned ``Migration`` objects, applied under ``pg_advisory_xact_lock`` so several
  processes opening a fresh database at once create it exactly once.
* The LLM layers (``ConsolidationStore``, ``GraphStore``; migration 2) behave as in SQLite.
  Every statement that moves a row's state (``set_state``, each consolidation group, an undo)
  takes the same per-scope write lock as ``insert``, so they are serialised with each other
  and with merged-row inserts as SQLite's single writer serialises them. Compare-and-set is
  ``UPDATE ... WHERE state = old AND superseded_by IS NOT DISTINCT FROM old`` under READ
  COMMITTED: a concurrent change makes the re-checked row miss the WHERE clause, which is
  reported as a ``StateConflict``, never applied over. The audit tables refuse ``UPDATE``,
  ``DELETE`` and ``TRUNCATE`` (runs: only ``finished_at``, ``counts`` and ``undone_by`` may
  change), and every foreign key carries the scope.

``psycopg`` (3), ``psycopg_pool`` and ``pgvector`` are imported lazily, so ``mempp`` imports
without the ``postgres`` extra and says how to install it when a URL asks for this engine.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mempp.dates import now_key
from mempp.errors import EncoderMismatch, InvalidInput, StoreError
from mempp.query import UNSTORABLE, LexicalQuery, storable_query
from mempp.records import AddResult, Document, Record, State, text_hash
from mempp.store.base import (
    ChangeRecord,
    GroupOutcome,
    GroupRecord,
    MergedRow,
    RunInfo,
    StateChange,
    StateConflict,
    Triple,
    TripleHit,
    check_undoable,
    followers_in_order,
    inverse_change,
    undo_counts,
)
from mempp.store.migrations import Migration, newest, pending
from mempp.store.pg_bm25 import UNDATED, ScopeReplica

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

T = TypeVar("T")

INSTALL_HINT = "pip install 'mempp[postgres]'"

# Advisory-lock key space: (class, key) pairs of int4. The class spells "memp" so other
# applications sharing the database are unlikely to collide with it.
_LOCK_CLASS_SCHEMA = 0x6D656D70
_LOCK_CLASS_WRITE = 0x6D656D71

POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8
CONNECT_TIMEOUT_S = 10
# psycopg prepares a statement server-side after it ran this many times on a connection
# (its default). Behind PgBouncer in transaction mode (before 1.21, or without
# max_prepared_statements) prepared statements break: set MEMPP_PG_PREPARE_THRESHOLD=off.
ENV_PREPARE_THRESHOLD = "MEMPP_PG_PREPARE_THRESHOLD"
DEFAULT_PREPARE_THRESHOLD = 5
# Rows held by the BM25 replicas of one store, all scopes together: about 0.7 GB for rows of
# some 40 distinct words (16 bytes per word of a row, 16 per row).
BM25_MAX_ROWS = 1_000_000
# pgvector's HNSW index handles at most 2000 dimensions of ``vector``; wider encoders are
# searched by exact scan only.
HNSW_MAX_DIM = 2000
# hnsw.ef_search accepts 1..1000.
EF_SEARCH_CEILING = 1000

_FROZEN_COLUMNS = (
    "id, scope, text, text_hash, author, event_date, event_key, tags, source, "
    "ingested_at, ingested_key, embedding"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "records, full text, tags, append-only triggers",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            # A tsvector holds at most 1 MB; to_tsvector raises past that (a document of
            # ~100k distinct words). Rather than refuse the document and its whole batch,
            # index the longest prefix that fits (halving); the text itself stays whole.
            # IMMUTABLE as to_tsvector(regconfig, text) is, so it can feed a generated column.
            """CREATE FUNCTION mempp_tsvector(body text) RETURNS tsvector
                LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
            DECLARE
                keep integer := length(body);
            BEGIN
                LOOP
                    BEGIN
                        RETURN to_tsvector('english', left(body, keep));
                    EXCEPTION WHEN program_limit_exceeded THEN
                        keep := keep / 2;
                    END;
                END LOOP;
            END $$""",
            """CREATE TABLE mempp_meta (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL)""",
            # The primary key leads with scope (and every other index and foreign key carries
            # it) so the table can be distributed by scope (Citus) without schema changes.
            """CREATE TABLE records (
                id BIGINT GENERATED ALWAYS AS IDENTITY,
                scope TEXT NOT NULL,
                text TEXT NOT NULL,
                text_hash BYTEA NOT NULL,
                author TEXT,
                event_date TEXT,
                event_key BIGINT,
                tags TEXT[] NOT NULL DEFAULT '{}',
                source TEXT,
                ingested_at TIMESTAMPTZ NOT NULL,
                ingested_key BIGINT NOT NULL,
                state TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
                superseded_by BIGINT,
                embedding vector NOT NULL,
                tsv tsvector GENERATED ALWAYS AS (mempp_tsvector(text)) STORED,
                PRIMARY KEY (scope, id),
                FOREIGN KEY (scope, superseded_by) REFERENCES records (scope, id))""",
            # A typical row (text, tsvector, a 1.5 kB vector at 384-d) is past the default
            # 2 kB TOAST threshold, and every value moved out of line costs a TOAST lookup
            # per row scored: the vector for an exact scan (2x slower at 100k rows, measured),
            # the tsvector for ts_rank_cd (~1.5x). Keep rows up to a page whole; for larger
            # rows (big documents) keep the vector (MAIN) and move text and tsvector out.
            "ALTER TABLE records SET (toast_tuple_target = 8160)",
            "ALTER TABLE records ALTER COLUMN embedding SET STORAGE MAIN",
            "CREATE INDEX records_scope_state_date ON records (scope, state, event_key)",
            """CREATE UNIQUE INDEX records_dedupe
                ON records (scope, coalesce(author, ''), text_hash) WHERE state = 'active'""",
            "CREATE INDEX records_tsv ON records USING gin (tsv)",
            """CREATE TABLE record_tags (
                scope TEXT NOT NULL,
                label TEXT NOT NULL,
                record_id BIGINT NOT NULL,
                PRIMARY KEY (scope, label, record_id),
                FOREIGN KEY (scope, record_id) REFERENCES records (scope, id))""",
            """CREATE FUNCTION mempp_refuse_removal() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'mempp: records are append-only; % is refused', TG_OP
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE FUNCTION mempp_refuse_content_change() RETURNS trigger
                LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'mempp: a record''s content never changes; only its state may'
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE TRIGGER records_no_delete BEFORE DELETE ON records
                FOR EACH ROW EXECUTE FUNCTION mempp_refuse_removal()""",
            """CREATE TRIGGER records_no_truncate BEFORE TRUNCATE ON records
                FOR EACH STATEMENT EXECUTE FUNCTION mempp_refuse_removal()""",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_FROZEN_COLUMNS}
                ON records FOR EACH ROW EXECUTE FUNCTION mempp_refuse_content_change()""",
            """CREATE TRIGGER record_tags_no_delete BEFORE DELETE ON record_tags
                FOR EACH ROW EXECUTE FUNCTION mempp_refuse_removal()""",
            """CREATE TRIGGER record_tags_no_truncate BEFORE TRUNCATE ON record_tags
                FOR EACH STATEMENT EXECUTE FUNCTION mempp_refuse_removal()""",
            """CREATE TRIGGER record_tags_frozen BEFORE UPDATE ON record_tags
                FOR EACH ROW EXECUTE FUNCTION mempp_refuse_content_change()""",
        ),
    ),
    Migration(
        2,
        "consolidation audit trail, entity graph",
        (
            # One row per consolidation run or undo. Like records, every table below leads
            # its primary key with scope and references other tables by (scope, id), so a
            # log row can never point into another tenant and the tables can be distributed
            # by scope. records already has PRIMARY KEY (scope, id) to reference.
            """CREATE TABLE consolidation_runs (
                id BIGINT GENERATED ALWAYS AS IDENTITY,
                scope TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('consolidate', 'undo')),
                dry_run BOOLEAN NOT NULL DEFAULT false,
                started_at TIMESTAMPTZ NOT NULL,
                finished_at TIMESTAMPTZ,
                settings JSONB NOT NULL DEFAULT '{}',
                counts JSONB,
                undoes BIGINT,
                undone_by BIGINT,
                PRIMARY KEY (scope, id),
                FOREIGN KEY (scope, undoes) REFERENCES consolidation_runs (scope, id),
                FOREIGN KEY (scope, undone_by) REFERENCES consolidation_runs (scope, id))""",
            # Every group a run looked at, with its label, even when nothing changed.
            """CREATE TABLE consolidation_groups (
                scope TEXT NOT NULL,
                run_id BIGINT NOT NULL,
                group_no INTEGER NOT NULL,
                label TEXT NOT NULL,
                members BIGINT[] NOT NULL,
                detail TEXT,
                PRIMARY KEY (scope, run_id, group_no),
                FOREIGN KEY (scope, run_id) REFERENCES consolidation_runs (scope, id))""",
            # Every state change; old_state NULL means the row was created by the change.
            # group_no has no foreign key: an undo's changes name the undone run's groups.
            """CREATE TABLE consolidation_changes (
                id BIGINT GENERATED ALWAYS AS IDENTITY,
                scope TEXT NOT NULL,
                run_id BIGINT NOT NULL,
                group_no INTEGER,
                label TEXT NOT NULL,
                record_id BIGINT NOT NULL,
                old_state TEXT CHECK (old_state IN ('active', 'archived')),
                old_superseded_by BIGINT,
                new_state TEXT NOT NULL CHECK (new_state IN ('active', 'archived')),
                new_superseded_by BIGINT,
                merged_id BIGINT,
                PRIMARY KEY (scope, id),
                FOREIGN KEY (scope, run_id) REFERENCES consolidation_runs (scope, id),
                FOREIGN KEY (scope, record_id) REFERENCES records (scope, id),
                FOREIGN KEY (scope, old_superseded_by) REFERENCES records (scope, id),
                FOREIGN KEY (scope, new_superseded_by) REFERENCES records (scope, id),
                FOREIGN KEY (scope, merged_id) REFERENCES records (scope, id))""",
            "CREATE INDEX consolidation_changes_run ON consolidation_changes (scope, run_id, id)",
            # The audit trail is append-only like the records it describes.
            """CREATE FUNCTION mempp_refuse_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'mempp: the consolidation log is append-only; % is refused',
                    TG_OP USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE TRIGGER consolidation_changes_frozen BEFORE UPDATE OR DELETE
                ON consolidation_changes FOR EACH ROW EXECUTE FUNCTION mempp_refuse_log_change()""",
            """CREATE TRIGGER consolidation_changes_no_truncate BEFORE TRUNCATE
                ON consolidation_changes FOR EACH STATEMENT
                EXECUTE FUNCTION mempp_refuse_log_change()""",
            """CREATE TRIGGER consolidation_groups_frozen BEFORE UPDATE OR DELETE
                ON consolidation_groups FOR EACH ROW EXECUTE FUNCTION mempp_refuse_log_change()""",
            """CREATE TRIGGER consolidation_groups_no_truncate BEFORE TRUNCATE
                ON consolidation_groups FOR EACH STATEMENT
                EXECUTE FUNCTION mempp_refuse_log_change()""",
            """CREATE TRIGGER consolidation_runs_no_delete BEFORE DELETE
                ON consolidation_runs FOR EACH ROW EXECUTE FUNCTION mempp_refuse_log_change()""",
            """CREATE TRIGGER consolidation_runs_no_truncate BEFORE TRUNCATE
                ON consolidation_runs FOR EACH STATEMENT
                EXECUTE FUNCTION mempp_refuse_log_change()""",
            # A run is finished (finished_at, counts) and maybe undone (undone_by) later;
            # what it was (scope, kind, dry run, start, settings, what it undoes) never
            # changes, and it is undone at most once.
            """CREATE TRIGGER consolidation_runs_frozen BEFORE UPDATE OF
                id, scope, kind, dry_run, started_at, settings, undoes
                ON consolidation_runs FOR EACH ROW EXECUTE FUNCTION mempp_refuse_log_change()""",
            """CREATE TRIGGER consolidation_runs_undone_once BEFORE UPDATE OF undone_by
                ON consolidation_runs FOR EACH ROW
                WHEN (OLD.undone_by IS NOT NULL
                      AND NEW.undone_by IS DISTINCT FROM OLD.undone_by)
                EXECUTE FUNCTION mempp_refuse_log_change()""",
            # Mem^g++: triples keyed to their source row; keys are normalised entity names.
            """CREATE TABLE graph_triples (
                id BIGINT GENERATED ALWAYS AS IDENTITY,
                scope TEXT NOT NULL,
                record_id BIGINT NOT NULL,
                subject TEXT NOT NULL,
                relation TEXT NOT NULL,
                object TEXT NOT NULL,
                subject_key TEXT NOT NULL,
                object_key TEXT NOT NULL,
                PRIMARY KEY (scope, id),
                FOREIGN KEY (scope, record_id) REFERENCES records (scope, id))""",
            "CREATE INDEX graph_triples_subject ON graph_triples (scope, subject_key)",
            "CREATE INDEX graph_triples_object ON graph_triples (scope, object_key)",
            "CREATE INDEX graph_triples_record ON graph_triples (scope, record_id)",
            # A row is marked once extracted, even with no triples, so it is not asked again.
            # The primary key makes marking exactly-once under concurrent extractors.
            """CREATE TABLE graph_extractions (
                scope TEXT NOT NULL,
                record_id BIGINT NOT NULL,
                extracted_at TIMESTAMPTZ NOT NULL,
                model TEXT,
                triples INTEGER NOT NULL,
                PRIMARY KEY (scope, record_id),
                FOREIGN KEY (scope, record_id) REFERENCES records (scope, id))""",
        ),
    ),
    Migration(
        3,
        "threads: a record's conversation or thread, for read-time context",
        (
            "ALTER TABLE records ADD COLUMN thread TEXT",
            # Thread order is event time, undated rows at their ingest time, then ingest order.
            """CREATE INDEX records_thread ON records
                (scope, thread, (coalesce(event_key, ingested_key)), id)
                WHERE thread IS NOT NULL""",
            "DROP TRIGGER records_content_frozen ON records",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_FROZEN_COLUMNS}, thread
                ON records FOR EACH ROW EXECUTE FUNCTION mempp_refuse_content_change()""",
        ),
    ),
)

_RECORD_COLUMNS = (
    "id, text, author, event_date, tags, source, scope, ingested_at, state, superseded_by, thread"
)

# One statement per document, pipelined by ``executemany``: the row and its tag labels go in
# together, and ``NOT EXISTS`` sees rows inserted by earlier statements of the same batch.
# ``ON CONFLICT`` only matters for writers that bypass the scope lock (other tools).
_INSERT = """
WITH new AS (
    INSERT INTO records (scope, text, text_hash, author, event_date, event_key, tags, source,
                         ingested_at, ingested_key, embedding, thread)
    SELECT %(scope)s, %(text)s, %(hash)s, %(author)s, %(event_date)s, %(event_key)s,
           %(tags)s::text[], %(source)s, %(ingested_at)s, %(ingested_key)s, %(embedding)s,
           %(thread)s
    WHERE NOT EXISTS (
        SELECT 1 FROM records
        WHERE scope = %(scope)s AND coalesce(author, '') = %(author_key)s
          AND text_hash = %(hash)s AND state = 'active')
    ON CONFLICT (scope, (coalesce(author, '')), text_hash) WHERE state = 'active' DO NOTHING
    RETURNING id
), labels AS (
    INSERT INTO record_tags (scope, label, record_id)
    SELECT %(scope)s, label, new.id FROM new, unnest(%(labels)s::text[]) AS label
)
SELECT id FROM new
"""

_RUN_COLUMNS = (
    "id, scope, kind, dry_run, started_at, finished_at, settings, counts, undoes, undone_by"
)
_CHANGE_COLUMNS = (
    "run_id, group_no, label, record_id, old_state, old_superseded_by, new_state, "
    "new_superseded_by, merged_id"
)
_TRIPLE_COLUMNS = (
    "t.id, t.subject, t.relation, t.object, t.subject_key, t.object_key, t.record_id, r.event_date"
)

# Compare-and-set of one row's state, one statement per change (pipelined by
# ``executemany``), so changes apply in order exactly as SQLite's loop applies them. Under
# READ COMMITTED a row another transaction changed meanwhile is re-read before the WHERE is
# re-checked, so a stale expectation updates nothing instead of overwriting.
_COMPARE_AND_SET = """
UPDATE records SET state = %(new_state)s, superseded_by = %(new_by)s
WHERE scope = %(scope)s AND id = %(id)s
  AND state = %(old_state)s AND superseded_by IS NOT DISTINCT FROM %(old_by)s
RETURNING id
"""

_LOG_CHANGE = """
INSERT INTO consolidation_changes (scope, run_id, group_no, label, record_id, old_state,
    old_superseded_by, new_state, new_superseded_by, merged_id)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def _import_driver() -> tuple[Any, Any, Any]:
    """psycopg, psycopg_pool and pgvector's psycopg adapter, or a StoreError saying how."""
    try:
        import pgvector.psycopg
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            f"the PostgreSQL engine needs psycopg 3, psycopg-pool and pgvector "
            f"(missing: {exc.name}); install them with: {INSTALL_HINT}"
        ) from None
    return psycopg, psycopg_pool, pgvector.psycopg


def prepare_threshold_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """``MEMPP_PG_PREPARE_THRESHOLD``: a count (0 prepares at once), or ``off`` for never
    (PgBouncer in transaction mode); unset means psycopg's default of 5."""
    raw = (os.environ if env is None else env).get(ENV_PREPARE_THRESHOLD, "").strip().lower()
    if not raw:
        return DEFAULT_PREPARE_THRESHOLD
    if raw in ("off", "none", "never"):
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidInput(f"{ENV_PREPARE_THRESHOLD} must be a count >= 0 or 'off', got {raw!r}")
    return value


def mask_url(url: str) -> str:
    """The URL with any password (in the authority or the query string) replaced by ***."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "postgresql://(unparsable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and password:
            netloc = f"{user}:***@{hostinfo}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(key == "password" for key, _ in pairs):
            query = urllib.parse.urlencode(
                [(k, "***" if k == "password" else v) for k, v in pairs], safe="/*"
            )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _iso(moment: datetime | None) -> str | None:
    """A timestamptz as the UTC ISO text the SQLite engine stores."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _row_to_run(row: Sequence[Any]) -> RunInfo:
    started = _iso(row[4])
    assert started is not None  # NOT NULL column
    return RunInfo(
        id=row[0],
        scope=row[1],
        kind=row[2],
        dry_run=row[3],
        started_at=started,
        finished_at=_iso(row[5]),
        settings=row[6] or {},
        counts=row[7],
        undoes=row[8],
        undone_by=row[9],
    )


def _row_to_change(row: Sequence[Any]) -> ChangeRecord:
    return ChangeRecord(
        row[0], row[1], row[2], StateChange(row[3], row[4], row[5], row[6], row[7]), row[8]
    )


def _as_float32(value: Any) -> np.ndarray:
    """A loaded ``vector`` as float32: pgvector's loader gives a ``Vector`` (0.3+) or a numpy
    array (older releases), depending on the installed pgvector-python."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


def _row_params(
    scope: str,
    doc: Document,
    vector: np.ndarray,
    labels: Collection[str],
    ingested_at: datetime,
    ingested_key: int,
) -> dict[str, Any]:
    """Parameters of ``_INSERT`` for one document: the one insert path for every row."""
    return {
        "scope": scope,
        "text": doc.text,
        "hash": text_hash(doc.text),
        "author": doc.author,
        "author_key": doc.author or "",
        "event_date": doc.date.text if doc.date else None,
        "event_key": doc.date.key if doc.date else None,
        "tags": list(doc.tags),
        "source": doc.source,
        "ingested_at": ingested_at,
        "ingested_key": ingested_key,
        "embedding": np.asarray(vector, dtype=np.float32),
        "thread": doc.thread,
        "labels": sorted(labels),
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
    )


class PostgresStore:
    """A store in a PostgreSQL database with the pgvector extension.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/db?...``). The schema is
    created on first open. Tuning knobs are instance attributes so tests and benchmarks can
    move them: ``exact_scan_max_rows`` (eligible rows up to which the vector leg scans
    exactly) and ``hnsw_ef_search`` (the HNSW candidate list; raised to ``limit`` + a tie
    margin when a query asks for more).
    """

    exact_scan_max_rows: int = 10_000
    hnsw_ef_search: int = 100
    # Extra HNSW candidates fetched past ``limit`` so equal distances at the cut are ordered
    # by id like every other ranking.
    tie_margin: int = 16

    def __init__(self, url: str) -> None:
        psycopg, psycopg_pool, pgvector_psycopg = _import_driver()
        prepare_threshold = prepare_threshold_from_env()  # a bad value fails before connecting
        self._psycopg = psycopg
        self._pool_errors = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
        self.location = mask_url(url)
        kwargs = self._connect_kwargs(url)
        try:
            with psycopg.connect(url, **kwargs) as conn:
                self._migrate(conn)
                vector_info = psycopg.types.TypeInfo.fetch(conn, "vector")
        except psycopg.Error as exc:
            raise StoreError(f"cannot open {self.location}: {_first_line(exc)}") from None
        if vector_info is None:  # pragma: no cover - migration 1 creates it
            raise StoreError(f"{self.location}: the pgvector type 'vector' is missing")

        # pgvector-python exports register_vector(), which queries the type on every new
        # connection; register_vector_info() takes the type fetched above instead.
        register_info = getattr(pgvector_psycopg, "register_vector_info", None)
        if register_info is None:
            from pgvector.psycopg.vector import register_vector_info as register_info

        def configure(conn: psycopg.Connection[Any]) -> None:
            # The type oid is known; registering from it needs no query per connection.
            register_info(conn, vector_info)
            conn.prepare_threshold = prepare_threshold

        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            url,
            kwargs=kwargs,
            min_size=POOL_MIN_SIZE,
            max_size=POOL_MAX_SIZE,
            configure=configure,
            name="mempp",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg_pool.PoolTimeout:
            self._pool.close()
            raise StoreError(f"cannot connect to {self.location}: timed out") from None
        # Once bound, the encoder of a database never changes: cache it, saving a round
        # trip per search (Memory checks the encoder before every query).
        self._bound: tuple[str, int] | None = None
        # Threads for gather(), started on first use. At most half the pool's connections go
        # to calls run on them, so callers always find connections of their own.
        self._readers: ThreadPoolExecutor | None = None
        self._readers_lock = threading.Lock()
        self._closed = False
        self._spare_connections = threading.BoundedSemaphore(POOL_MAX_SIZE // 2)
        # BM25 replicas, one per scope searched with lexical_rank="bm25", and the lexemes of
        # query terms (both built on first use). Past bm25_max_rows rows in all, the least
        # recently searched scopes' replicas are dropped (rebuilt if searched again).
        self.bm25_max_rows = BM25_MAX_ROWS
        self._replicas: dict[str, ScopeReplica] = {}
        self._replicas_lock = threading.Lock()
        self._lexeme_cache: dict[str, tuple[str, ...]] = {}

    # -- plumbing ---------------------------------------------------------------------
    def _connect_kwargs(self, url: str) -> dict[str, Any]:
        """Defaults for what the URL leaves unsaid; a malformed URL is a StoreError."""
        psycopg = self._psycopg
        try:
            params = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"not a valid PostgreSQL URL: {self.location} ({exc})") from None
        kwargs: dict[str, Any] = {"autocommit": False}
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in params:
            kwargs["application_name"] = "mempp"
        return kwargs

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection holding one transaction: committed on success, else rolled back.

        Driver and pool failures become ``StoreError`` (lost server, pool exhausted, ...);
        errors mempp raises on purpose pass through.
        """
        psycopg = self._psycopg
        if self._closed:
            raise StoreError(f"{self.location} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except self._pool_errors as exc:
            raise StoreError(f"{self.location}: no database connection ({exc})") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {_first_line(exc)}") from None

    @staticmethod
    def _lock_scope(conn: psycopg.Connection[Any], scope: str) -> None:
        """Take the scope's write lock until the transaction ends (every writer of a scope
        takes it first, as SQLite writers take ``BEGIN IMMEDIATE``)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS_WRITE, scope))

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        psycopg = self._psycopg
        with conn.transaction():
            # Everything below, including CREATE ... IF NOT EXISTS (which races on the
            # catalog's unique indexes), runs with the schema lock held.
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
            conn.execute(
                """CREATE TABLE IF NOT EXISTS mempp_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL)"""
            )
            applied = {row[0] for row in conn.execute("SELECT version FROM mempp_migrations")}
            if applied and max(applied) > newest(MIGRATIONS):
                raise StoreError(
                    f"{self.location} was written by a newer mempp (schema {max(applied)}); "
                    "upgrade mempp to open it"
                )
            for migration in pending(MIGRATIONS, applied):
                for statement in migration.statements:
                    try:
                        conn.execute(statement)
                    except (
                        psycopg.errors.FeatureNotSupported,
                        psycopg.errors.UndefinedFile,
                    ) as exc:
                        raise StoreError(
                            f"{self.location}: the pgvector extension is not installed on "
                            f"this server ({_first_line(exc)})"
                        ) from None
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise StoreError(
                            f"{self.location}: not allowed to set up the mempp schema "
                            f"({_first_line(exc)}); ask an administrator to run "
                            "CREATE EXTENSION vector, or connect as the database owner"
                        ) from None
                conn.execute(
                    "INSERT INTO mempp_migrations (version, name, applied_at) "
                    "VALUES (%s, %s, now())",
                    (migration.version, migration.name),
                )

    def close(self) -> None:
        with self._readers_lock:
            self._closed = True
            readers, self._readers = self._readers, None
        if readers is not None:
            readers.shutdown(wait=True)
        self._pool.close()

    def gather(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        # Each call holds its own pooled connection, so the server works on the legs of one
        # search at once (on as many cores as it has) instead of one after another. When
        # other searches hold the spare connections, the rest run in turn in this thread:
        # under load, parallel legs would only queue for connections.
        if len(calls) < 2:
            return [call() for call in calls]
        with self._readers_lock:
            if self._closed:
                raise StoreError(f"{self.location} is closed")
            if self._readers is None:
                self._readers = ThreadPoolExecutor(POOL_MAX_SIZE, thread_name_prefix="mempp-pg")
            readers = self._readers
        elsewhere: dict[int, Future[T]] = {}
        for index, call in enumerate(calls[1:], start=1):
            if not self._spare_connections.acquire(blocking=False):
                break
            try:
                elsewhere[index] = readers.submit(self._on_spare_connection, call)
            except RuntimeError:  # closed meanwhile: this call runs here (and fails there)
                self._spare_connections.release()
                break
        results: list[T | None] = [None] * len(calls)
        try:
            for index, call in enumerate(calls):
                if index not in elsewhere:
                    results[index] = call()
        finally:
            wait(elsewhere.values())  # never leave a call running behind the caller's back
        for index, future in elsewhere.items():
            results[index] = future.result()
        return results  # type: ignore[return-value]

    def warm(self, scope: str) -> None:
        # Vectors stay in the server; the BM25 replica of the scope is built here.
        self._caught_up(scope)

    def _on_spare_connection(self, call: Callable[[], T]) -> T:
        try:
            return call()
        finally:
            self._spare_connections.release()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    def schema_version(self) -> int:
        with self._connection() as conn:
            return conn.execute("SELECT max(version) FROM mempp_migrations").fetchone()[0]

    # -- encoder identity -------------------------------------------------------------
    def encoder(self) -> tuple[str, int] | None:
        if self._bound is not None:
            return self._bound
        with self._connection() as conn:
            rows = dict(
                conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
        if "encoder" not in rows:
            return None
        self._bound = (rows["encoder"], int(rows["dim"]))
        return self._bound

    def bind_encoder(self, name: str, dim: int) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise StoreError(f"an encoder dimension must be a positive integer, got {dim!r}")
        sql = self._psycopg.sql
        with self._connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
            found = dict(
                conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
            if "encoder" not in found:
                # First encoder: from now on the database itself refuses a vector of another
                # size, and the ANN index can be built (it needs a fixed dimension).
                conn.execute(
                    sql.SQL(
                        "ALTER TABLE records ADD CONSTRAINT records_embedding_dim "
                        "CHECK (vector_dims(embedding) = {})"
                    ).format(sql.Literal(dim))
                )
                if dim <= HNSW_MAX_DIM:
                    conn.execute(
                        sql.SQL(
                            "CREATE INDEX records_embedding_hnsw ON records "
                            "USING hnsw ((embedding::vector({})) vector_cosine_ops)"
                        ).format(sql.Literal(dim))
                    )
                conn.execute(
                    "INSERT INTO mempp_meta (key, value) VALUES ('encoder', %s), ('dim', %s)",
                    (name, str(dim)),
                )
                return
        if (found["encoder"], int(found["dim"])) != (name, dim):
            raise EncoderMismatch(
                f"{self.location} holds vectors of encoder {found['encoder']} "
                f"({found['dim']}-d); this Memory uses {name} ({dim}-d)"
            )

    def _bound_dim(self) -> int | None:
        bound = self.encoder()
        return None if bound is None else bound[1]

    # -- write path -------------------------------------------------------------------
    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[bool]:
        if not docs:
            return []
        keys = [(doc.author or "", text_hash(doc.text)) for doc in docs]
        with self._connection() as conn:
            # One probe of the dedupe index per (author, hash) pair.
            found = {
                (row[0], bytes(row[1]))
                for row in conn.execute(
                    """SELECT k.author_key, k.hash
                       FROM unnest(%s::text[], %s::bytea[]) AS k(author_key, hash)
                       WHERE EXISTS (
                           SELECT 1 FROM records
                           WHERE scope = %s AND state = 'active'
                             AND coalesce(author, '') = k.author_key AND text_hash = k.hash)""",
                    ([k[0] for k in keys], [k[1] for k in keys], scope),
                )
            }
        return [key in found for key in keys]

    def insert(self, scope: str, docs: Sequence[Document], vectors: np.ndarray) -> list[AddResult]:
        if len(docs) != len(vectors):
            raise ValueError("one vector per document is required")
        if not docs:
            return []
        ingested_at = datetime.now(UTC)
        ingested_key = now_key()
        params = [
            _row_params(scope, doc, vector, doc.tag_labels(), ingested_at, ingested_key)
            for doc, vector in zip(docs, vectors, strict=True)
        ]
        results: list[AddResult] = []
        with self._connection() as conn:
            self._lock_scope(conn, scope)
            with conn.cursor() as cursor:
                cursor.executemany(_INSERT, params, returning=True)
                while True:
                    row = cursor.fetchone()
                    results.append(AddResult(row[0]) if row else AddResult(None, "duplicate"))
                    if not cursor.nextset():
                        break
        return results

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

    def lexical(self, scope: str, query: LexicalQuery, as_of: int | None, limit: int) -> list[int]:
        query = storable_query(query)
        terms = list(query.terms)
        phrases = list(query.phrases) if query.mode == "disjunctive" else []
        if not terms or limit <= 0:
            return []
        if query.ranking == "bm25":
            return self._lexical_bm25(scope, query, terms, phrases, as_of, limit)
        # ``query.unique_stems`` needs nothing here: ts_rank_cd already counts a lexeme the
        # query repeats once (tested in the conformance suite).
        sql = self._psycopg.sql
        joiner = sql.SQL(" && " if query.mode == "conjunctive" else " || ")
        # The SQL text depends only on the counts; every term is a bound parameter.
        tsquery = joiner.join(
            [
                *(
                    sql.SQL("plainto_tsquery('english', {})").format(sql.Placeholder())
                    for _ in terms
                ),
                *(
                    sql.SQL("phraseto_tsquery('english', {})").format(sql.Placeholder())
                    for _ in phrases
                ),
            ]
        )
        date_condition = sql.SQL(" AND r.event_key <= %s" if as_of is not None else "")
        statement = sql.SQL(
            """SELECT r.id FROM records r, (SELECT {tsquery} AS q) query
               WHERE r.tsv @@ query.q AND r.scope = %s AND r.state = 'active'{date}
               ORDER BY ts_rank_cd(r.tsv, query.q) DESC, r.id DESC LIMIT %s"""
        ).format(tsquery=tsquery, date=date_condition)
        params: list[Any] = [*terms, *phrases, scope]
        if as_of is not None:
            params.append(as_of)
        params.append(limit)
        with self._connection() as conn:
            return [row[0] for row in conn.execute(statement, params)]

    def _lexical_bm25(
        self,
        scope: str,
        query: LexicalQuery,
        terms: list[str],
        phrases: list[str],
        as_of: int | None,
        limit: int,
    ) -> list[int]:
        """BM25 over the scope's in-RAM replica (``mempp.store.pg_bm25``); PostgreSQL then
        keeps the active rows, asked again for more in the rare case too few are."""
        words = self._lexemes([*terms, *(word for phrase in phrases for word in phrase.split())])
        lexemes = [lexeme for term in terms for lexeme in words[term]]
        if query.unique_stems:
            lexemes = list(dict.fromkeys(lexemes))
        if not lexemes:
            return []
        conjunctive = query.mode == "conjunctive"
        pairs: dict[tuple[str, str] | str, tuple[str, str, str]] = {}
        for phrase in phrases:
            pair = phrase.split()
            if len(pair) != 2:
                continue
            first, second = (words[word] for word in pair)
            if len(first) == 1 and len(second) == 1:  # a stop word has no lexeme
                key = (first[0], second[0]) if query.unique_stems else phrase
                pairs.setdefault(key, (phrase, first[0], second[0]))
        replica, newest = self._caught_up(scope)
        phrase_rows = self._phrase_rows(scope, list(pairs.values()), newest)
        want = limit
        while True:
            ranked = replica.ranked(lexemes, conjunctive, as_of, want, phrase_rows)
            active = self._active_among(scope, ranked)
            kept = [int(i) for i in ranked if int(i) in active]
            if len(kept) >= limit or len(ranked) < want:
                return kept[:limit]
            want *= 4

    def _caught_up(self, scope: str) -> tuple[ScopeReplica, int]:
        """The scope's replica holding every committed row, and the newest id it holds."""
        replica = self._replica(scope)
        with replica.lock:  # one catch-up at a time; ranking may run beside another one
            replica.catch_up(lambda after: self._rows_after(scope, after))
            newest = replica.newest
        self._evict_replicas(keep=scope)
        return replica, newest

    def _replica(self, scope: str) -> ScopeReplica:
        with self._replicas_lock:
            replica = self._replicas.pop(scope, None) or ScopeReplica()
            self._replicas[scope] = replica  # the most recently used last
            return replica

    def _evict_replicas(self, keep: str) -> None:
        """Drop the least recently searched scopes' replicas while all of them together hold
        more than ``bm25_max_rows`` rows (the one of ``keep`` stays, whatever its size)."""
        with self._replicas_lock:
            held = sum(len(replica.ids) for replica in self._replicas.values())
            for scope in list(self._replicas):
                if held <= self.bm25_max_rows:
                    break
                if scope != keep:
                    held -= len(self._replicas.pop(scope).ids)

    def _lexemes(self, words: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """PostgreSQL's lexemes of each query word (none for a stop word), cached; the words
        not yet cached cost one round trip together."""
        cache = self._lexeme_cache
        # Read the cache once: another thread may clear it at any moment.
        found = {word: cache.get(word) for word in dict.fromkeys(words)}
        missing = [word for word, lexemes in found.items() if lexemes is None]
        if missing:
            with self._connection() as conn:
                rows = conn.execute(
                    """SELECT w, tsvector_to_array(to_tsvector('english', w))
                       FROM unnest(%s::text[]) AS w""",
                    (missing,),
                ).fetchall()
            fetched = {word: tuple(lexemes) for word, lexemes in rows}
            if len(cache) > 50_000:  # bounded; a dict clear is atomic
                cache.clear()
            cache.update(fetched)
            found.update(fetched)
        return {word: found.get(word) or () for word in words}

    def _rows_after(
        self, scope: str, after: int
    ) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """Ids, event keys and postings of the scope's rows with ids above ``after``, read
        in one snapshot."""
        with self._connection() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rows = conn.execute(
                """SELECT id, coalesce(event_key, %s) FROM records
                   WHERE scope = %s AND id > %s ORDER BY id""",
                (int(UNDATED), scope, after),
            ).fetchall()
            if not rows:
                return np.empty(0, np.int64), np.empty(0, np.int64), {}
            grouped = conn.execute(
                """SELECT u.lexeme, array_agg(r.id ORDER BY r.id),
                          array_agg(coalesce(cardinality(u.positions), 1) ORDER BY r.id)
                   FROM records r, unnest(r.tsv) u
                   WHERE r.scope = %s AND r.id > %s
                   GROUP BY u.lexeme""",
                (scope, after),
            ).fetchall()
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        keys = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        postings = {
            lexeme: (np.asarray(row_ids, dtype=np.int64), np.asarray(tf, dtype=np.float64))
            for lexeme, row_ids, tf in grouped
        }
        return ids, keys, postings

    def _phrase_rows(
        self, scope: str, phrases: list[tuple[str, str, str]], newest: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per (phrase, first lexeme, second lexeme): the ids of the scope's rows up to
        ``newest`` where the two words stand side by side, and how often they do."""
        if not phrases:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT p.n, r.id,
                          (SELECT u.positions FROM unnest(r.tsv) u WHERE u.lexeme = p.a),
                          (SELECT u.positions FROM unnest(r.tsv) u WHERE u.lexeme = p.b)
                   FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY
                        AS p(phrase, a, b, n)
                   JOIN LATERAL (
                       SELECT id, tsv FROM records
                       WHERE scope = %s AND id <= %s
                         AND tsv @@ phraseto_tsquery('english', p.phrase)) r ON true""",
                (
                    [phrase for phrase, _, _ in phrases],
                    [a for _, a, _ in phrases],
                    [b for _, _, b in phrases],
                    scope,
                    newest,
                ),
            ).fetchall()
        found: list[tuple[list[int], list[float]]] = [([], []) for _ in phrases]
        for n, record_id, first, second in rows:
            follows = {p - 1 for p in second or ()}
            # PostgreSQL keeps at most 255 positions a lexeme; it matched, so at least once.
            occurrences = max(1, sum(1 for p in first or () if p in follows))
            found[n - 1][0].append(record_id)
            found[n - 1][1].append(float(occurrences))
        return [
            (np.asarray(ids, dtype=np.int64), np.asarray(tf, dtype=np.float64))
            for ids, tf in found
            if ids
        ]

    def _active_among(self, scope: str, ids: np.ndarray) -> set[int]:
        if len(ids) == 0:
            return set()
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT id FROM records
                   WHERE scope = %s AND id = ANY(%s) AND state = 'active'""",
                (scope, ids.tolist()),
            ).fetchall()
        return {row[0] for row in rows}

    def tagged(self, scope: str, labels: Sequence[str], as_of: int | None, limit: int) -> list[int]:
        if not labels or limit <= 0:
            return []
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM record_tags t
                    JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %(scope)s AND t.label = ANY(%(labels)s::text[])
                      AND r.state = 'active'{date_condition}
                    GROUP BY r.id ORDER BY count(*) DESC, r.id DESC LIMIT %(limit)s""",
                {
                    "scope": scope,
                    "labels": [UNSTORABLE.sub("", label) for label in labels],
                    "as_of": as_of,
                    "limit": limit,
                },
            ).fetchall()
        return [row[0] for row in rows]

    def nearest(self, scope: str, vector: np.ndarray, as_of: int | None, limit: int) -> list[int]:
        if limit <= 0:
            return []
        dim = self._bound_dim()
        if dim is None:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != dim:
            raise EncoderMismatch(
                f"{self.location} holds {dim}-d vectors; the query vector has {query.shape[0]}"
            )
        # The HNSW path orders by the index's own expression (the cast), so the planner can
        # walk the index; the exact path orders by the bare column, which no index matches,
        # so it always computes every eligible distance (in parallel workers when the
        # planner wants). Both give the same numbers. ``dim`` is an int from mempp_meta.
        distance = f"embedding::vector({int(dim)}) <=> %(q)s"
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        params = {"scope": scope, "as_of": as_of, "q": query, "limit": limit}
        with self._connection() as conn:
            # Counting stops at the threshold, so this costs at most that many index entries.
            eligible = conn.execute(
                f"""SELECT count(*) FROM (
                        SELECT 1 FROM records
                        WHERE scope = %(scope)s AND state = 'active'{date_condition}
                        LIMIT %(cap)s) eligible""",
                {**params, "cap": self.exact_scan_max_rows + 1},
            ).fetchone()[0]
            if eligible == 0:
                return []
            if eligible > self.exact_scan_max_rows and dim <= HNSW_MAX_DIM:
                found = self._nearest_hnsw(conn, distance, date_condition, params)
                # The iterative scan gives up after hnsw.max_scan_tuples; when it comes back
                # short, an exact scan keeps the promise that all slots go to eligible rows.
                if len(found) >= limit:
                    return found
            return self._nearest_exact(conn, date_condition, params)

    @staticmethod
    def exact_sql(date_condition: str) -> str:
        """The exact strategy's statement (public so tests can EXPLAIN it)."""
        return f"""SELECT id FROM records
                   WHERE scope = %(scope)s AND state = 'active'{date_condition}
                   ORDER BY embedding <=> %(q)s, id DESC LIMIT %(limit)s"""

    @staticmethod
    def hnsw_sql(distance: str, date_condition: str) -> str:
        """The HNSW strategy's statement (public so tests can EXPLAIN it)."""
        # The inner ORDER BY is the index's own expression, so it becomes an HNSW index scan
        # with the scope as its filter; the outer sort only orders equal distances by id.
        return f"""SELECT id FROM (
                       SELECT id, {distance} AS distance FROM records
                       WHERE scope = %(scope)s AND state = 'active'{date_condition}
                       ORDER BY {distance} LIMIT %(fetch)s) candidates
                   ORDER BY distance, id DESC LIMIT %(limit)s"""

    def _nearest_exact(
        self, conn: psycopg.Connection[Any], date_condition: str, params: dict[str, Any]
    ) -> list[int]:
        rows = conn.execute(self.exact_sql(date_condition), params)
        return [row[0] for row in rows]

    def _nearest_hnsw(
        self,
        conn: psycopg.Connection[Any],
        distance: str,
        date_condition: str,
        params: dict[str, Any],
    ) -> list[int]:
        fetch = params["limit"] + self.tie_margin
        ef_search = min(EF_SEARCH_CEILING, max(self.hnsw_ef_search, fetch))
        # strict_order: results stay in exact distance order while the scan keeps going
        # past filtered-out rows, so the WHERE clause acts before the LIMIT.
        conn.execute(
            """SELECT set_config('hnsw.iterative_scan', 'strict_order', true),
                      set_config('hnsw.ef_search', %s, true)""",
            (str(ef_search),),
        )
        rows = conn.execute(self.hnsw_sql(distance, date_condition), {**params, "fetch": fetch})
        return [row[0] for row in rows]

    def dated_within(
        self,
        scope: str,
        spans: Sequence[tuple[int, int]],
        as_of: int | None,
        limit: int,
        among: Collection[int] | None = None,
    ) -> list[int]:
        if not spans or limit <= 0 or (among is not None and not among):
            return []
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        among_condition = "" if among is None else " AND id = ANY(%(ids)s::bigint[])"
        found: set[int] = set()
        with self._connection() as conn:
            for start, end in spans:  # one index range per span
                rows = conn.execute(
                    f"""SELECT id FROM records
                        WHERE scope = %(scope)s AND state = 'active'
                          AND event_key >= %(start)s AND event_key < %(end)s{date_condition}
                          {among_condition}
                        ORDER BY id DESC LIMIT %(limit)s""",
                    {
                        "scope": scope,
                        "start": start,
                        "end": end,
                        "as_of": as_of,
                        "ids": None if among is None else [int(i) for i in among],
                        "limit": limit,
                    },
                ).fetchall()
                found.update(row[0] for row in rows)
        return sorted(found, reverse=True)[:limit]

    def thread_followers(
        self, scope: str, ids: Collection[int], as_of: int | None, depth: int
    ) -> dict[int, list[int]]:
        if not ids or depth < 1:
            return {}
        # Every row within an as-of bound has its thread key within it too (undated rows fail
        # the bound anyway), so the bound also ends the index walk.
        date_condition = (
            " AND n.event_key <= %(as_of)s AND coalesce(n.event_key, n.ingested_key) <= %(as_of)s"
            if as_of is not None
            else ""
        )
        with self._connection() as conn:
            rows = conn.execute(
                # One short index walk on records_thread per row that has a thread, from the
                # row's own place, stopping after ``depth`` eligible rows.
                f"""SELECT c.id, f.id, f.key FROM records c CROSS JOIN LATERAL (
                        SELECT n.id, coalesce(n.event_key, n.ingested_key) AS key
                        FROM records n
                        WHERE n.scope = c.scope AND n.thread = c.thread
                          AND n.state = 'active'{date_condition}
                          AND (coalesce(n.event_key, n.ingested_key), n.id)
                              > (coalesce(c.event_key, c.ingested_key), c.id)
                        ORDER BY coalesce(n.event_key, n.ingested_key), n.id
                        LIMIT %(depth)s) f
                    WHERE c.scope = %(scope)s AND c.id = ANY(%(ids)s::bigint[])
                      AND c.thread IS NOT NULL""",
                {"scope": scope, "ids": [int(i) for i in ids], "as_of": as_of, "depth": depth},
            ).fetchall()
        return followers_in_order(rows)

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, int]:
        if not ids:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT id, coalesce(event_key, ingested_key) FROM records
                   WHERE scope = %s AND id = ANY(%s::bigint[])""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return dict(rows)

    def latest_unmatched(
        self, scope: str, exclude: Collection[int], as_of: int | None, limit: int
    ) -> list[int]:
        if limit <= 0:
            return []
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT id FROM records
                    WHERE scope = %(scope)s AND state = 'active'{date_condition}
                      AND NOT (id = ANY(%(exclude)s::bigint[]))
                    ORDER BY id DESC LIMIT %(limit)s""",
                {
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                    "exclude": [int(i) for i in exclude],
                },
            ).fetchall()
        return [row[0] for row in rows]

    # -- consolidation (mempp.consolidate) ---------------------------------------------
    def current_vectors(self, scope: str) -> tuple[np.ndarray, np.ndarray]:
        dim = self._bound_dim() or 0
        # Binary results: pgvector's binary loader copies the floats, where the text format
        # would parse a decimal string per component (a run reads every current vector).
        with self._connection() as conn, conn.cursor(binary=True) as cursor:
            rows = cursor.execute(
                """SELECT id, embedding FROM records
                   WHERE scope = %s AND state = 'active' AND superseded_by IS NULL
                   ORDER BY id""",
                (scope,),
            ).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if not rows:
            return ids, np.empty((0, dim), dtype=np.float32)
        return ids, np.stack([_as_float32(r[1]) for r in rows])

    def begin_run(
        self, scope: str, *, kind: str, dry_run: bool, settings: Mapping[str, Any]
    ) -> int:
        if kind not in ("consolidate", "undo"):
            raise InvalidInput(f"unknown run kind {kind!r}")
        with self._connection() as conn:
            return conn.execute(
                """INSERT INTO consolidation_runs (scope, kind, dry_run, started_at, settings)
                   VALUES (%s, %s, %s, %s, %s::jsonb) RETURNING id""",
                (scope, kind, bool(dry_run), datetime.now(UTC), _json(settings)),
            ).fetchone()[0]

    def record_group(self, scope: str, run_id: int, outcome: GroupOutcome) -> int | None:
        if any(change.old_state is None for change in outcome.changes):
            raise ValueError("a group's changes name existing rows; merged rows are implicit")
        with self._connection() as conn:
            # Held until commit: the merged row's insert is ordered with every other insert
            # of the scope, and no other mempp writer moves these rows in between.
            self._lock_scope(conn, scope)
            self._run_row(conn, scope, run_id)
            self._compare_and_set(conn, scope, outcome.changes)
            merged_id = None
            if outcome.merged is not None:
                merged_id = self._insert_merged(conn, scope, outcome.merged)
            conn.execute(
                """INSERT INTO consolidation_groups (scope, run_id, group_no, label, members,
                       detail) VALUES (%s, %s, %s, %s, %s::bigint[], %s)""",
                (
                    scope,
                    run_id,
                    outcome.group,
                    outcome.label,
                    [int(m) for m in outcome.members],
                    outcome.detail,
                ),
            )
            changes = list(outcome.changes)
            if merged_id is not None:
                changes.append(StateChange(merged_id, None, None, "active", None))
            self._log_changes(
                conn,
                scope,
                run_id,
                [(outcome.group, outcome.label, change, merged_id) for change in changes],
            )
            return merged_id

    def _run_row(
        self, conn: psycopg.Connection[Any], scope: str, run_id: int, *, lock: bool = False
    ) -> RunInfo:
        lock_clause = " FOR UPDATE" if lock else ""
        row = conn.execute(
            f"""SELECT {_RUN_COLUMNS} FROM consolidation_runs
                WHERE scope = %s AND id = %s{lock_clause}""",
            (scope, run_id),
        ).fetchone()
        if row is None:
            raise InvalidInput(f"no consolidation run {run_id} in scope {scope!r}")
        return _row_to_run(row)

    def _compare_and_set(
        self, conn: psycopg.Connection[Any], scope: str, changes: Sequence[StateChange]
    ) -> None:
        """Apply each change only where the row still has its expected state (the caller
        holds the transaction); raise ``StateConflict`` naming the rows that did not."""
        if not changes:
            return
        params = [
            {
                "scope": scope,
                "id": change.record_id,
                "old_state": change.old_state,
                "old_by": change.old_superseded_by,
                "new_state": change.new_state,
                "new_by": change.new_superseded_by,
            }
            for change in changes
        ]
        stale = []
        try:
            with conn.cursor() as cursor:
                cursor.executemany(_COMPARE_AND_SET, params, returning=True)
                for change in changes:
                    if cursor.fetchone() is None:
                        stale.append(change.record_id)
                    cursor.nextset()
        except self._psycopg.errors.UniqueViolation:
            # Making a row active while an active row of the same author holds its text:
            # the dedupe index refuses, as it does for set_state.
            raise StoreError(
                f"{self.location}: cannot make a row active while an active row of the same "
                "scope and author has the same text; nothing was changed"
            ) from None
        if stale:
            raise StateConflict(f"records {stale} changed since they were read", stale)

    def _insert_merged(self, conn: psycopg.Connection[Any], scope: str, merged: MergedRow) -> int:
        params = _row_params(
            scope, merged.document, merged.vector, merged.labels, datetime.now(UTC), now_key()
        )
        # The insert's own NOT EXISTS runs after the originals were archived in this
        # transaction, so only *other* active rows count as duplicates (as in SQLite).
        row = conn.execute(_INSERT, params).fetchone()
        if row is None:
            raise StateConflict("the merged text repeats an active row of the same author")
        return int(row[0])

    @staticmethod
    def _log_changes(
        conn: psycopg.Connection[Any],
        scope: str,
        run_id: int,
        entries: Sequence[tuple[int | None, str, StateChange, int | None]],
    ) -> None:
        """Log ``(group, label, change, merged_id)`` entries of a run, in order."""
        if not entries:
            return
        with conn.cursor() as cursor:
            cursor.executemany(
                _LOG_CHANGE,
                [
                    (
                        scope,
                        run_id,
                        group,
                        label,
                        c.record_id,
                        c.old_state,
                        c.old_superseded_by,
                        c.new_state,
                        c.new_superseded_by,
                        merged_id,
                    )
                    for group, label, c, merged_id in entries
                ],
            )

    def finish_run(self, scope: str, run_id: int, counts: Mapping[str, Any]) -> None:
        with self._connection() as conn:
            conn.execute(
                """UPDATE consolidation_runs SET finished_at = %s, counts = %s::jsonb
                   WHERE scope = %s AND id = %s""",
                (datetime.now(UTC), _json(counts), scope, run_id),
            )

    def runs(self, scope: str) -> list[RunInfo]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM consolidation_runs WHERE scope = %s ORDER BY id",
                (scope,),
            ).fetchall()
        return [_row_to_run(row) for row in rows]

    def run_groups(self, scope: str, run_id: int) -> list[GroupRecord]:
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT run_id, group_no, label, members, detail FROM consolidation_groups
                   WHERE scope = %s AND run_id = %s ORDER BY group_no""",
                (scope, run_id),
            ).fetchall()
        return [GroupRecord(r[0], r[1], r[2], tuple(r[3]), r[4]) for r in rows]

    def run_changes(self, scope: str, run_id: int) -> list[ChangeRecord]:
        with self._connection() as conn:
            return self._changes(conn, scope, run_id)

    @staticmethod
    def _changes(conn: psycopg.Connection[Any], scope: str, run_id: int) -> list[ChangeRecord]:
        rows = conn.execute(
            f"""SELECT {_CHANGE_COLUMNS} FROM consolidation_changes
                WHERE scope = %s AND run_id = %s ORDER BY id""",
            (scope, run_id),
        ).fetchall()
        return [_row_to_change(row) for row in rows]

    def undo_run(self, scope: str, run_id: int) -> tuple[int, list[ChangeRecord]]:
        with self._connection() as conn:
            self._lock_scope(conn, scope)
            # FOR UPDATE as well as the scope lock: a writer that does not take mempp's lock
            # (another tool) still cannot undo the same run concurrently; the loser re-reads
            # the row, sees undone_by and is refused.
            run = self._run_row(conn, scope, run_id, lock=True)
            check_undoable(run)
            changes = self._changes(conn, scope, run_id)
            inverse = [inverse_change(record.change) for record in changes]
            self._refuse_duplicate_restores(conn, scope, run_id, inverse)
            # Rows leaving 'active' first: a merged row may repeat an original's text and
            # author, and the dedupe index must never see both active, even mid-statement.
            # A run names each row once, so the order changes nothing else.
            ordered = sorted(inverse, key=lambda change: change.new_state != "archived")
            try:
                self._compare_and_set(conn, scope, ordered)
            except StateConflict as exc:
                stale = [c.record_id for c in inverse if c.record_id in set(exc.ids)]
                raise StateConflict(
                    f"cannot undo run {run_id}: records {stale} were changed again after it "
                    "(undo the later runs first, newest first); nothing was changed",
                    stale,
                ) from None
            now = datetime.now(UTC)
            undo_id = conn.execute(
                """INSERT INTO consolidation_runs
                       (scope, kind, dry_run, started_at, finished_at, settings, counts, undoes)
                   VALUES (%s, 'undo', false, %s, %s, '{}', %s::jsonb, %s) RETURNING id""",
                (scope, now, now, _json(undo_counts(changes)), run_id),
            ).fetchone()[0]
            self._log_changes(
                conn,
                scope,
                undo_id,
                [
                    (record.group, "undo", change, record.merged_id)
                    for record, change in zip(changes, inverse, strict=True)
                ],
            )
            conn.execute(
                "UPDATE consolidation_runs SET undone_by = %s WHERE scope = %s AND id = %s",
                (undo_id, scope, run_id),
            )
            return undo_id, self._changes(conn, scope, undo_id)

    def _refuse_duplicate_restores(
        self,
        conn: psycopg.Connection[Any],
        scope: str,
        run_id: int,
        inverse: Sequence[StateChange],
    ) -> None:
        """Refuse, naming them, to re-activate rows whose text an active row of the same author
        holds now (added after the run archived them): the dedupe index forbids two."""
        restoring = [c.record_id for c in inverse if c.new_state == "active"]
        if not restoring:
            return
        leaving = [c.record_id for c in inverse if c.new_state == "archived"]
        rows = conn.execute(
            """SELECT r.id FROM records r
               WHERE r.scope = %(scope)s AND r.id = ANY(%(restoring)s::bigint[])
                 AND r.state = 'archived'
                 AND EXISTS (
                     SELECT 1 FROM records o
                     WHERE o.scope = r.scope AND o.state = 'active'
                       AND coalesce(o.author, '') = coalesce(r.author, '')
                       AND o.text_hash = r.text_hash AND o.id <> r.id
                       AND NOT (o.id = ANY(%(leaving)s::bigint[])))
               ORDER BY r.id""",
            {"scope": scope, "restoring": restoring, "leaving": leaving},
        ).fetchall()
        if rows:
            ids = [row[0] for row in rows]
            raise StateConflict(
                f"cannot undo run {run_id}: records {ids} would be active beside a row of the "
                "same author and text added after the run (archive that row first); "
                "nothing was changed",
                ids,
            )

    # -- entity graph (mempp.graph) ------------------------------------------------------
    def pending_extraction(self, scope: str, ids: Collection[int] | None) -> list[int]:
        narrow = "" if ids is None else " AND r.id = ANY(%(ids)s::bigint[])"
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM records r
                    WHERE r.scope = %(scope)s AND r.state = 'active'{narrow}
                      AND NOT EXISTS (
                          SELECT 1 FROM graph_extractions g
                          WHERE g.scope = r.scope AND g.record_id = r.id)
                    ORDER BY r.id""",
                {"scope": scope, "ids": [int(i) for i in ids or ()]},
            ).fetchall()
        return [row[0] for row in rows]

    def add_triples(
        self, scope: str, record_id: int, triples: Sequence[Triple], model: str | None
    ) -> bool:
        with self._connection() as conn:
            # Marking first, ON CONFLICT DO NOTHING: of two extractors racing on one row,
            # the second waits for the first to commit and then stores nothing.
            marked = conn.execute(
                """INSERT INTO graph_extractions (scope, record_id, extracted_at, model, triples)
                   SELECT scope, id, %s, %s, %s FROM records WHERE scope = %s AND id = %s
                   ON CONFLICT (scope, record_id) DO NOTHING
                   RETURNING record_id""",
                (datetime.now(UTC), _no_nul(model), len(triples), scope, record_id),
            ).fetchone()
            if marked is None:
                done = conn.execute(
                    "SELECT 1 FROM graph_extractions WHERE scope = %s AND record_id = %s",
                    (scope, record_id),
                ).fetchone()
                if done is not None:
                    return False
                raise InvalidInput(f"no record {record_id} in scope {scope!r}")
            if triples:
                with conn.cursor() as cursor:
                    cursor.executemany(
                        """INSERT INTO graph_triples (scope, record_id, subject, relation,
                               object, subject_key, object_key)
                           VALUES (%s, %s, %s, %s, %s, %s, %s)""",
                        [
                            (
                                scope,
                                record_id,
                                _no_nul(t.subject),
                                _no_nul(t.relation),
                                _no_nul(t.object),
                                _no_nul(t.subject_key),
                                _no_nul(t.object_key),
                            )
                            for t in triples
                        ],
                    )
            return True

    def search_triples(
        self,
        scope: str,
        keys: Collection[str],
        as_of: int | None,
        *,
        dated: bool,
        limit: int,
    ) -> list[TripleHit]:
        if not keys or limit < 1:
            return []
        date_condition = " AND r.event_key <= %(as_of)s" if dated and as_of is not None else ""
        recency = "coalesce(r.event_key, r.ingested_key)" if dated else "r.id"
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS},
                        (t.subject_key = ANY(%(keys)s::text[]))::int
                        + (t.object_key = ANY(%(keys)s::text[])
                           AND t.object_key <> t.subject_key)::int AS touched
                    FROM graph_triples t JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %(scope)s AND r.state = 'active'{date_condition}
                      AND (t.subject_key = ANY(%(keys)s::text[])
                           OR t.object_key = ANY(%(keys)s::text[]))
                    ORDER BY touched DESC, {recency} DESC, t.id DESC LIMIT %(limit)s""",
                {
                    "keys": sorted({_no_nul(key) for key in keys}),
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                },
            ).fetchall()
        return [TripleHit(*row) for row in rows]

    def triples_of(self, scope: str, record_ids: Collection[int]) -> list[TripleHit]:
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS}, 0
                    FROM graph_triples t JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %s AND t.record_id = ANY(%s::bigint[])
                    ORDER BY t.id""",
                (scope, [int(i) for i in record_ids]),
            ).fetchall()
        return [TripleHit(*row) for row in rows]


def _json(value: Mapping[str, Any]) -> str:
    """A settings or counts object as JSON text, written as the SQLite engine writes it."""
    return json.dumps(dict(value), sort_keys=True)


def _no_nul(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL (SQLite stores it). A model-written triple with one
    would otherwise fail its row's extraction; a NUL carries no meaning in a triple."""
    return None if text is None else text.replace("\x00", "")
