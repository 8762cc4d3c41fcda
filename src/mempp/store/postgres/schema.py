"""The PostgreSQL engine's database: driver import, URL handling, the connection pool and
the per-scope write lock, ``gather``, and the versioned schema (DDL and triggers as
``MIGRATIONS``, applied under an advisory lock on open).

Every concern of the engine (records, legs, change log, graph) is a mixin over
``_PostgresBase``, which owns the pool and the state they share.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from mempp.errors import StoreError, StoreUnavailable
from mempp.store.base import UNDATED_DEDUPE_KEY as UNDATED_KEY
from mempp.store.migrations import Migration, newest, pending
from mempp.store.postgres.analysis_schema import ANALYSIS_MIGRATION
from mempp.store.postgres.bm25 import ScopeReplica
from mempp.store.postgres.connect import (
    CONNECT_TIMEOUT_S,
    POOL_MAX_SIZE,
    POOL_MIN_SIZE,
    PROBE_CONNECT_TIMEOUT_S,
    _first_line,
    _import_driver,
    mask_url,
    pool_wait_from_env,
    prepare_threshold_from_env,
)
from mempp.store.postgres.outage import RETRY_AFTER_S, Outage
from mempp.store.postgres.reembed_schema import REEMBED_MIGRATION
from mempp.store.postgres.replicas import ScopeCache, ScopeTags, ScopeVectors
from mempp.store.postgres.standby import Standbys, read_pool, read_urls_from_env, reading_from

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

T = TypeVar("T")

# While one search's legs run (``gather``): each scope's erasure count, read once for them all.
_SEARCH_ERASURES: contextvars.ContextVar[tuple[threading.Lock, dict[str, int]] | None] = (
    contextvars.ContextVar("mempp_search_erasures", default=None)
)

# Advisory-lock key space: (class, key) pairs of int4. The class spells "memp" so other
# applications sharing the database are unlikely to collide with it.
_LOCK_CLASS_SCHEMA = 0x6D656D70
_LOCK_CLASS_WRITE = 0x6D656D71

# Rows held by the BM25 replicas of one store, all scopes together: about 0.7 GB for rows of
# some 40 distinct words (16 bytes per word of a row, 16 per row).
BM25_MAX_ROWS = 1_000_000
# pgvector's HNSW index handles at most 2000 dimensions of ``vector``; wider encoders are
# searched by exact scan only.
HNSW_MAX_DIM = 2000

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
    Migration(
        4,
        "metadata and sources: what a source says beyond the fields; re-imports find a source",
        (
            "ALTER TABLE records ADD COLUMN metadata JSONB",
            # Hash, not btree: a source may be longer than a btree entry can hold.
            "CREATE INDEX records_source ON records USING hash (source)",
            "DROP TRIGGER records_content_frozen ON records",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_FROZEN_COLUMNS}, thread,
                metadata ON records FOR EACH ROW EXECUTE FUNCTION mempp_refuse_content_change()""",
        ),
    ),
    Migration(
        5,
        "api keys: the server's keys, one scope and role each, the secret only as a hash",
        (
            # Times as ISO 8601 text, as SQLite keeps them: a key reads the same on both.
            """CREATE TABLE api_keys (
                key_id TEXT PRIMARY KEY,
                scope TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
                label TEXT,
                secret_hash BYTEA NOT NULL,
                created_at TEXT NOT NULL,
                revoked_at TEXT)""",
            "CREATE INDEX api_keys_scope ON api_keys (scope)",
            # Keys are revoked, never removed: the list says who could do what, and when.
            """CREATE FUNCTION mempp_keep_keys() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'mempp: API keys are revoked, never deleted; % is refused',
                    TG_OP USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE TRIGGER api_keys_no_delete BEFORE DELETE ON api_keys
                FOR EACH ROW EXECUTE FUNCTION mempp_keep_keys()""",
            """CREATE TRIGGER api_keys_no_truncate BEFORE TRUNCATE ON api_keys
                FOR EACH STATEMENT EXECUTE FUNCTION mempp_keep_keys()""",
        ),
    ),
    Migration(
        6,
        "dedupe by author, text and event date; erasure: redactions and their guarded triggers",
        (
            "DROP INDEX records_dedupe",
            f"""CREATE UNIQUE INDEX records_dedupe ON records
                (scope, coalesce(author, ''), text_hash, coalesce(event_key, {UNDATED_KEY}))
                WHERE state = 'active'""",
            # A tombstone's when, why and by whom. ``pending`` is true only inside the
            # redaction's own transaction: the triggers below let content change while it is.
            """CREATE TABLE redactions (
                scope TEXT NOT NULL,
                record_id BIGINT NOT NULL,
                run_id BIGINT NOT NULL,
                redacted_at TIMESTAMPTZ NOT NULL,
                reason TEXT NOT NULL,
                actor TEXT,
                pending BOOLEAN NOT NULL DEFAULT true,
                PRIMARY KEY (scope, record_id),
                FOREIGN KEY (scope, record_id) REFERENCES records (scope, id),
                FOREIGN KEY (scope, run_id) REFERENCES consolidation_runs (scope, id))""",
            """CREATE FUNCTION mempp_redaction_pending(row_scope TEXT, row_id BIGINT)
                RETURNS boolean LANGUAGE sql STABLE AS $$
                SELECT EXISTS (SELECT 1 FROM redactions
                               WHERE scope = row_scope AND record_id = row_id AND pending)
            $$""",
            """CREATE FUNCTION mempp_guard_content() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NOT mempp_redaction_pending(OLD.scope, OLD.id) THEN
                    RAISE EXCEPTION
                        'mempp: a record''s content never changes; only its state may'
                        USING ERRCODE = 'integrity_constraint_violation';
                END IF;
                IF NEW.id = OLD.id AND NEW.scope = OLD.scope AND NEW.text = ''
                   AND NEW.text_hash = '\\x'::bytea AND NEW.author IS NULL
                   AND NEW.event_date IS NOT DISTINCT FROM OLD.event_date
                   AND NEW.event_key IS NOT DISTINCT FROM OLD.event_key
                   AND NEW.tags = '{}' AND NEW.source IS NULL AND NEW.thread IS NULL
                   AND NEW.metadata IS NULL
                   AND NEW.ingested_at = OLD.ingested_at
                   AND NEW.ingested_key = OLD.ingested_key
                   AND vector_norm(NEW.embedding) = 0 THEN
                    RETURN NEW;
                END IF;
                RAISE EXCEPTION 'mempp: a redaction erases content; it writes nothing else'
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            "DROP TRIGGER records_content_frozen ON records",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_FROZEN_COLUMNS}, thread,
                metadata ON records FOR EACH ROW EXECUTE FUNCTION mempp_guard_content()""",
            """CREATE FUNCTION mempp_guard_tag_removal() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF mempp_redaction_pending(OLD.scope, OLD.record_id) THEN
                    RETURN OLD;
                END IF;
                RAISE EXCEPTION 'mempp: records are append-only; % is refused', TG_OP
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            "DROP TRIGGER record_tags_no_delete ON record_tags",
            """CREATE TRIGGER record_tags_no_delete BEFORE DELETE ON record_tags
                FOR EACH ROW EXECUTE FUNCTION mempp_guard_tag_removal()""",
            """CREATE FUNCTION mempp_guard_redactions() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'UPDATE' AND OLD.pending AND NOT NEW.pending
                   AND (NEW.scope, NEW.record_id, NEW.run_id, NEW.redacted_at, NEW.reason)
                       = (OLD.scope, OLD.record_id, OLD.run_id, OLD.redacted_at, OLD.reason)
                   AND NEW.actor IS NOT DISTINCT FROM OLD.actor THEN
                    RETURN NEW;
                END IF;
                RAISE EXCEPTION 'mempp: the redaction log is append-only'
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE TRIGGER redactions_frozen BEFORE UPDATE OR DELETE ON redactions
                FOR EACH ROW EXECUTE FUNCTION mempp_guard_redactions()""",
            """CREATE TRIGGER redactions_no_truncate BEFORE TRUNCATE ON redactions
                FOR EACH STATEMENT EXECUTE FUNCTION mempp_refuse_removal()""",
        ),
    ),
    Migration(
        7,
        "tag postings by record: the tag replica's catch-up and erasure find a row's labels",
        # The primary key leads with the label, so reading the labels of the rows after an
        # id (or of erased rows) walked every posting of the scope.
        ("CREATE INDEX record_tags_by_record ON record_tags (scope, record_id)",),
    ),
    Migration(
        8,
        "an author's active rows by id, with their dates: author filters read the index only",
        # An author filter keeps a scope's ids that the vector replica then ranks among. On
        # the expression records_dedupe indexes, PostgreSQL reads every row from the heap
        # (it cannot answer an expression index from the index alone): 1.0 s for an author
        # of 170k rows among 1M, against 50 ms by this one (docs/scaling.md).
        (
            """CREATE INDEX records_author_active ON records (scope, author, id)
                INCLUDE (event_key, ingested_key) WHERE state = 'active'""",
        ),
    ),
    REEMBED_MIGRATION,
    ANALYSIS_MIGRATION,
)


class _PostgresBase:
    """A pool of connections to one database, and the state every mixin shares."""

    # gather() runs its calls at once, the first on the caller's thread (run_legs puts the
    # question's encoding there).
    gathers_at_once = True

    def _write_contexts(self, conn: Any, ids: Sequence[int], encode: Any) -> None:
        """Inside a records write's transaction, after its rows: the context index's part
        (``mempp.store.postgres.context`` overrides this; nothing without that index)."""

    def __init__(self, url: str) -> None:
        psycopg, psycopg_pool, pgvector_psycopg = _import_driver()
        prepare_threshold = prepare_threshold_from_env()  # a bad value fails before connecting
        pool_wait_from_env()  # likewise
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

        def new_pool(url: str = url) -> psycopg_pool.ConnectionPool[Any]:
            pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                url,
                kwargs=kwargs,
                min_size=POOL_MIN_SIZE,
                max_size=POOL_MAX_SIZE,
                configure=configure,
                name="mempp",
                open=False,
                timeout=pool_wait_from_env(),  # how long a call waits for a connection
            )
            try:
                pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            except psycopg_pool.PoolTimeout:
                pool.close()
                raise StoreError(f"cannot connect to {mask_url(url)}: timed out") from None
            return pool

        def reopen() -> None:
            old, self._pool = self._pool, new_pool()
            # Connections still lent out close as they come back.
            threading.Thread(target=old.close, kwargs={"timeout": 1.0}, daemon=True).start()

        def probe() -> None:
            probe_kwargs = {**kwargs, "connect_timeout": PROBE_CONNECT_TIMEOUT_S}
            psycopg.connect(url, **probe_kwargs).close()

        self._pool: psycopg_pool.ConnectionPool[Any] = new_pool()
        self._outage = Outage(self.location, probe, reopen, lambda: self._pool.check())
        self._standbys = self._open_standbys(new_pool)
        # Once bound, the encoder of a database never changes: cache it, saving a round
        # trip per search (Memory checks the encoder before every query).
        self._bound: tuple[str, int] | None = None
        # Threads for gather(), started on first use. At most half the pool's connections go
        # to calls run on them, so callers always find connections of their own.
        self._readers: ThreadPoolExecutor | None = None
        self._readers_lock = threading.Lock()
        self._closed = False
        self._spare_connections = threading.BoundedSemaphore(POOL_MAX_SIZE // 2)
        # BM25 replicas, one per scope searched with lexical_rank="bm25", tag and vector
        # replicas, one per scope searched with that leg, and the lexemes of query terms (all
        # built on first use). Past bm25_max_rows (tags_max_rows, vectors_max_rows) rows in
        # all, the least recently searched scopes' replicas are dropped (rebuilt if searched
        # again).
        self.bm25_max_rows = BM25_MAX_ROWS
        self._replicas = ScopeCache(ScopeReplica)
        self._tag_replicas = ScopeCache(ScopeTags)
        self._vector_replicas = ScopeCache(ScopeVectors)

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

    def _open_standbys(self, new_pool: Callable[[str], Any]) -> Standbys:
        """The hot standbys ``MEMPP_PG_READ_URLS`` names, each checked to be a replica of
        this cluster (mempp.store.postgres.standby)."""
        pools: list[tuple[str, Any]] = []
        urls = read_urls_from_env()
        if urls:
            with self._pool.connection() as conn:
                row = conn.execute(
                    "SELECT system_identifier, current_database() FROM pg_control_system()"
                ).fetchone()
                primary = (int(row[0]), str(row[1]))
            try:
                for read_url in urls:
                    pool = new_pool(read_url)
                    pools.append((mask_url(read_url), pool))
                    with pool.connection() as conn:
                        Standbys.check(conn, mask_url(read_url), primary)
            except BaseException:
                for _, pool in pools:
                    pool.close()
                self._pool.close()
                raise
        return Standbys(pools, self._primary_position, self._psycopg)

    def _primary_position(self) -> str:
        with self._pool.connection() as conn:
            return str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Run the reads inside on a standby that has replayed the primary's current
        position, if one has within a few milliseconds; else on the primary."""
        if not self._standbys or read_pool() is not None:
            yield
            return
        self._outage.refuse_if_down()
        try:
            pool = self._standbys.choose()
        except self._psycopg.Error as exc:  # the primary's position could not be read
            self._unavailable(f"no database connection ({_first_line(exc)})")
        with reading_from(pool):
            yield

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection holding one transaction: committed on success, else rolled back.

        Driver and pool failures become ``StoreError`` (lost server, pool exhausted, ...);
        errors mempp raises on purpose pass through.
        """
        psycopg = self._psycopg
        if self._closed:
            raise StoreError(f"{self.location} is closed")
        standby = read_pool()
        if standby is None:
            self._outage.refuse_if_down()
        broken = False
        try:
            with (standby or self._pool).connection() as conn:
                try:
                    yield conn
                except psycopg.OperationalError:
                    broken = conn.broken
                    raise
        except self._pool_errors as exc:
            if standby is not None:  # chosen a moment ago: it went away under this read
                raise StoreUnavailable(f"a standby of {self.location}: {exc}") from None
            self._unavailable(f"no database connection ({exc})")
        except psycopg.Error as exc:
            if broken and standby is None:
                self._unavailable(f"the connection broke ({_first_line(exc)})")
            raise StoreError(f"{self.location}: {_first_line(exc)}") from None

    def _unavailable(self, what: str) -> NoReturn:
        """A call found no working connection: StoreUnavailable when the database is down
        (calls then fail at once until it is back), StoreError when only that connection
        was at fault."""
        if self._outage.connection_failed():
            raise StoreUnavailable(f"{self.location}: {what}", retry_after=RETRY_AFTER_S) from None
        raise StoreError(f"{self.location}: {what}") from None

    def _erasures(self, scope: str) -> int:
        """How many of the scope's rows were ever erased (by any node): a replica read at
        another count is stale. Inside ``gather`` (one search's legs) it is read once for
        all the legs of the scope, not once per leg."""
        shared = _SEARCH_ERASURES.get()
        if shared is None:
            return self._read_erasures(scope)
        lock, counts = shared
        with lock:  # the first leg reads it; the others, beside it, wait for its answer
            if scope not in counts:
                counts[scope] = self._read_erasures(scope)
            return counts[scope]

    def _read_erasures(self, scope: str) -> int:
        """The erasure count: one probe of the redactions' primary key."""
        with self._connection() as conn:
            return int(
                conn.execute(
                    "SELECT count(*) FROM redactions WHERE scope = %s", (scope,)
                ).fetchone()[0]
            )

    def reachable(self) -> bool:
        """Does the database answer now? (A one-row query, waiting at most a second.)"""
        if self._closed or self._outage.down:
            return False
        try:
            with self._pool.connection(timeout=1.0) as conn:
                conn.execute("SELECT 1")
        except Exception:  # no connection, a broken one, a closed pool: not reachable now
            return False
        return True

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
                for step in migration.steps(conn):
                    try:
                        if callable(step):
                            step()
                        else:
                            conn.execute(step)
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

    def pool_stats(self) -> dict[str, int]:
        """The connection pool's use now: its size, the connections idle in it, and the
        requests waiting for one (for the server's metrics)."""
        stats = self._pool.get_stats()
        return {
            "open": int(stats.get("pool_size", 0)),
            "idle": int(stats.get("pool_available", 0)),
            "waiting": int(stats.get("requests_waiting", 0)),
            "max": POOL_MAX_SIZE,
        }

    def close(self) -> None:
        self._outage.close()
        self._standbys.close()
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
        token = _SEARCH_ERASURES.set((threading.Lock(), {}))
        try:
            return self._gathered(calls)
        finally:
            _SEARCH_ERASURES.reset(token)

    def _gathered(self, calls: Sequence[Callable[[], T]]) -> list[T]:
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
                # In the caller's context: a read's standby goes with its legs.
                elsewhere[index] = readers.submit(
                    contextvars.copy_context().run, self._on_spare_connection, call
                )
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
