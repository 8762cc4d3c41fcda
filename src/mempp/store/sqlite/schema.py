"""The SQLite engine's file: connection, pragmas, the write transaction, and the versioned
schema (DDL and triggers as ``MIGRATIONS``, applied on open).

Every concern of the engine (records, legs, change log, graph) is a mixin over
``_SQLiteBase``, which owns the one connection and the lock that guards it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from mempp.errors import StoreError
from mempp.filters import Filters
from mempp.index.analysis import FTS_TOKENIZE
from mempp.index.bm25 import Bm25Index
from mempp.index.tags import TagPostings
from mempp.index.vectors import ExactVectorIndex
from mempp.private import create_file
from mempp.store.base import UNDATED_DEDUPE_KEY as UNDATED_KEY
from mempp.store.migrations import Migration, newest, pending
from mempp.store.sqlite.exact_file import ExactFile

T = TypeVar("T")

BUSY_TIMEOUT_S = 60.0
# Below this many records FTS5 ranks an OR query in a few ms; above it, the exact in-RAM
# replica of its bm25() (mempp.index.bm25) is built in the background and used once ready.
BM25_RAM_MIN_ROWS = 20_000
# The BM25 replica is saved beside the database as <file>-bm25.arrays (mempp.store.sqlite.replicas);
# mempp before the array file saved it as <file>-bm25.npz, read once and replaced.
BM25_FILE_SUFFIX = "-bm25.arrays"
BM25_LEGACY_SUFFIX = "-bm25.npz"
# The tag leg's postings, saved beside the database (mempp.store.sqlite.replicas).
TAGS_FILE_SUFFIX = "-tags.arrays"

# The columns of a record's content (what the triggers freeze), and "a redaction of row
# {row} is under way in this transaction" (the one path that may change them).
_CONTENT_COLUMNS = (
    "id, scope, text, text_hash, author, event_date, event_key, tags, source, ingested_at, "
    "ingested_key, embedding, thread, metadata"
)
# Since migration 9 the vector has a trigger of its own (records_vector_frozen).
_CONTENT_NO_VECTOR = _CONTENT_COLUMNS.replace("embedding, ", "")
_PENDING = "EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = {row} AND x.pending = 1)"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "records, full text, tags, append-only triggers",
        (
            """CREATE TABLE IF NOT EXISTS mempp_meta (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL)""",
            """CREATE TABLE records (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                scope TEXT NOT NULL,
                text TEXT NOT NULL,
                text_hash BLOB NOT NULL,
                author TEXT,
                event_date TEXT,
                event_key INTEGER,
                tags TEXT NOT NULL DEFAULT '[]',
                source TEXT,
                ingested_at TEXT NOT NULL,
                ingested_key INTEGER NOT NULL,
                state TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
                superseded_by INTEGER REFERENCES records(id),
                embedding BLOB NOT NULL)""",
            "CREATE INDEX records_scope_state_date ON records (scope, state, event_key)",
            """CREATE INDEX records_dedupe
                ON records (scope, coalesce(author, ''), text_hash) WHERE state = 'active'""",
            """CREATE TABLE record_tags (
                label TEXT NOT NULL,
                record_id INTEGER NOT NULL REFERENCES records(id),
                PRIMARY KEY (label, record_id)) WITHOUT ROWID""",
            f"""CREATE VIRTUAL TABLE records_fts USING fts5(
                text, content='records', content_rowid='id', tokenize='{FTS_TOKENIZE}')""",
            """CREATE TRIGGER records_fts_insert AFTER INSERT ON records BEGIN
                INSERT INTO records_fts (rowid, text) VALUES (new.id, new.text);
            END""",
            """CREATE TRIGGER records_no_delete BEFORE DELETE ON records BEGIN
                SELECT RAISE(ABORT, 'mempp: records are append-only; DELETE is refused');
            END""",
            """CREATE TRIGGER records_content_frozen BEFORE UPDATE OF
                id, scope, text, text_hash, author, event_date, event_key, tags, source,
                ingested_at, ingested_key, embedding ON records BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s content never changes; only its state may');
            END""",
            """CREATE TRIGGER record_tags_no_delete BEFORE DELETE ON record_tags BEGIN
                SELECT RAISE(ABORT, 'mempp: records are append-only; DELETE is refused');
            END""",
            """CREATE TRIGGER record_tags_frozen BEFORE UPDATE ON record_tags BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s content never changes; only its state may');
            END""",
            # Readers in other processes notice state changes through this counter.
            "INSERT OR IGNORE INTO mempp_meta (key, value) VALUES ('state_epoch', '0')",
            """CREATE TRIGGER records_state_epoch AFTER UPDATE OF state ON records BEGIN
                UPDATE mempp_meta SET value = CAST(value AS INTEGER) + 1
                WHERE key = 'state_epoch';
            END""",
        ),
    ),
    Migration(
        2,
        "consolidation audit trail, entity graph",
        (
            # One row per consolidation run or undo; settings and counts are JSON objects.
            """CREATE TABLE consolidation_runs (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                scope TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('consolidate', 'undo')),
                dry_run INTEGER NOT NULL DEFAULT 0,
                started_at TEXT NOT NULL,
                finished_at TEXT,
                settings TEXT NOT NULL DEFAULT '{}',
                counts TEXT,
                undoes INTEGER REFERENCES consolidation_runs(id),
                undone_by INTEGER REFERENCES consolidation_runs(id))""",
            "CREATE INDEX consolidation_runs_scope ON consolidation_runs (scope, id)",
            # Every group a run looked at, with its label, even when nothing changed.
            """CREATE TABLE consolidation_groups (
                run_id INTEGER NOT NULL REFERENCES consolidation_runs(id),
                group_no INTEGER NOT NULL,
                label TEXT NOT NULL,
                members TEXT NOT NULL,
                detail TEXT,
                PRIMARY KEY (run_id, group_no))""",
            # Every state change; old_state NULL means the row was created by the change.
            """CREATE TABLE consolidation_changes (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                run_id INTEGER NOT NULL REFERENCES consolidation_runs(id),
                group_no INTEGER,
                label TEXT NOT NULL,
                record_id INTEGER NOT NULL REFERENCES records(id),
                old_state TEXT CHECK (old_state IN ('active', 'archived')),
                old_superseded_by INTEGER,
                new_state TEXT NOT NULL CHECK (new_state IN ('active', 'archived')),
                new_superseded_by INTEGER,
                merged_id INTEGER REFERENCES records(id))""",
            "CREATE INDEX consolidation_changes_run ON consolidation_changes (run_id, id)",
            # The audit trail is append-only like the records it describes.
            """CREATE TRIGGER consolidation_changes_frozen BEFORE UPDATE ON consolidation_changes
            BEGIN
                SELECT RAISE(ABORT, 'mempp: the consolidation log is append-only');
            END""",
            """CREATE TRIGGER consolidation_changes_no_delete BEFORE DELETE
                ON consolidation_changes BEGIN
                SELECT RAISE(ABORT, 'mempp: the consolidation log is append-only');
            END""",
            """CREATE TRIGGER consolidation_groups_frozen BEFORE UPDATE ON consolidation_groups
            BEGIN
                SELECT RAISE(ABORT, 'mempp: the consolidation log is append-only');
            END""",
            """CREATE TRIGGER consolidation_groups_no_delete BEFORE DELETE
                ON consolidation_groups BEGIN
                SELECT RAISE(ABORT, 'mempp: the consolidation log is append-only');
            END""",
            """CREATE TRIGGER consolidation_runs_no_delete BEFORE DELETE
                ON consolidation_runs BEGIN
                SELECT RAISE(ABORT, 'mempp: the consolidation log is append-only');
            END""",
            # Mem^g++: triples keyed to their source row; keys are normalised entity names.
            """CREATE TABLE graph_triples (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                scope TEXT NOT NULL,
                record_id INTEGER NOT NULL REFERENCES records(id),
                subject TEXT NOT NULL,
                relation TEXT NOT NULL,
                object TEXT NOT NULL,
                subject_key TEXT NOT NULL,
                object_key TEXT NOT NULL)""",
            "CREATE INDEX graph_triples_subject ON graph_triples (scope, subject_key)",
            "CREATE INDEX graph_triples_object ON graph_triples (scope, object_key)",
            "CREATE INDEX graph_triples_record ON graph_triples (record_id)",
            # A row is marked once extracted, even with no triples, so it is not asked again.
            """CREATE TABLE graph_extractions (
                record_id INTEGER PRIMARY KEY REFERENCES records(id),
                scope TEXT NOT NULL,
                extracted_at TEXT NOT NULL,
                model TEXT,
                triples INTEGER NOT NULL)""",
        ),
    ),
    Migration(
        3,
        "threads: a record's conversation or thread, for read-time context",
        (
            "ALTER TABLE records ADD COLUMN thread TEXT",
            # Thread order is event time, undated rows at their ingest time, then ingest order.
            """CREATE INDEX records_thread ON records
                (scope, thread, coalesce(event_key, ingested_key), id) WHERE thread IS NOT NULL""",
            "DROP TRIGGER records_content_frozen",
            """CREATE TRIGGER records_content_frozen BEFORE UPDATE OF
                id, scope, text, text_hash, author, event_date, event_key, tags, source,
                ingested_at, ingested_key, embedding, thread ON records BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s content never changes; only its state may');
            END""",
        ),
    ),
    Migration(
        4,
        "metadata and sources: what a source says beyond the fields; re-imports find a source",
        (
            "ALTER TABLE records ADD COLUMN metadata TEXT",
            "CREATE INDEX records_source ON records (scope, source) WHERE source IS NOT NULL",
            "DROP TRIGGER records_content_frozen",
            """CREATE TRIGGER records_content_frozen BEFORE UPDATE OF
                id, scope, text, text_hash, author, event_date, event_key, tags, source,
                ingested_at, ingested_key, embedding, thread, metadata ON records BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s content never changes; only its state may');
            END""",
        ),
    ),
    Migration(
        5,
        "refuse REPLACE: conflict resolution deletes rows without firing DELETE triggers",
        tuple(
            f"""CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table}
                WHEN EXISTS (SELECT 1 FROM {table} WHERE {match}) BEGIN
                SELECT RAISE(ABORT, 'mempp: {what} is append-only; REPLACE is refused');
            END"""
            for table, match, what in (
                ("records", "id = NEW.id", "the record"),
                ("record_tags", "label = NEW.label AND record_id = NEW.record_id", "the record"),
                ("consolidation_runs", "id = NEW.id", "the consolidation log"),
                (
                    "consolidation_groups",
                    "run_id = NEW.run_id AND group_no = NEW.group_no",
                    "the consolidation log",
                ),
                ("consolidation_changes", "id = NEW.id", "the consolidation log"),
            )
        ),
    ),
    Migration(
        6,
        "api keys: the server's keys, one scope and role each, the secret only as a hash",
        (
            """CREATE TABLE api_keys (
                key_id TEXT PRIMARY KEY,
                scope TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
                label TEXT,
                secret_hash BLOB NOT NULL,
                created_at TEXT NOT NULL,
                revoked_at TEXT)""",
            "CREATE INDEX api_keys_scope ON api_keys (scope)",
            # Keys are revoked, never removed: the list says who could do what, and when.
            """CREATE TRIGGER api_keys_kept BEFORE DELETE ON api_keys BEGIN
                SELECT RAISE(ABORT, 'mempp: API keys are revoked, never deleted');
            END""",
            # As for the records (migration 5): REPLACE would delete a key without the trigger.
            """CREATE TRIGGER api_keys_no_replace BEFORE INSERT ON api_keys
                WHEN EXISTS (SELECT 1 FROM api_keys WHERE key_id = NEW.key_id) BEGIN
                SELECT RAISE(ABORT, 'mempp: API keys are never deleted; REPLACE is refused');
            END""",
        ),
    ),
    Migration(
        7,
        "dedupe by author, text and event date; erasure: redactions and their guarded triggers",
        (
            "DROP INDEX records_dedupe",
            f"""CREATE INDEX records_dedupe ON records
                (scope, coalesce(author, ''), text_hash, coalesce(event_key, {UNDATED_KEY}))
                WHERE state = 'active'""",
            # A tombstone's when, why and by whom. ``pending`` is 1 only inside the redaction's
            # own transaction: the triggers below let content change while it is.
            """CREATE TABLE redactions (
                record_id INTEGER PRIMARY KEY REFERENCES records(id),
                scope TEXT NOT NULL,
                run_id INTEGER NOT NULL REFERENCES consolidation_runs(id),
                redacted_at TEXT NOT NULL,
                reason TEXT NOT NULL,
                actor TEXT,
                pending INTEGER NOT NULL DEFAULT 1 CHECK (pending IN (0, 1)))""",
            """CREATE TRIGGER redactions_no_delete BEFORE DELETE ON redactions BEGIN
                SELECT RAISE(ABORT, 'mempp: the redaction log is append-only');
            END""",
            """CREATE TRIGGER redactions_frozen BEFORE UPDATE OF
                record_id, scope, run_id, redacted_at, reason, actor ON redactions BEGIN
                SELECT RAISE(ABORT, 'mempp: the redaction log is append-only');
            END""",
            """CREATE TRIGGER redactions_settle_once BEFORE UPDATE OF pending ON redactions
                WHEN NOT (old.pending = 1 AND new.pending = 0) BEGIN
                SELECT RAISE(ABORT, 'mempp: the redaction log is append-only');
            END""",
            "DROP TRIGGER records_content_frozen",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_CONTENT_COLUMNS}
                ON records WHEN NOT {_PENDING.format(row="old.id")} BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s content never changes; only its state may');
            END""",
            f"""CREATE TRIGGER records_erased_only BEFORE UPDATE OF {_CONTENT_COLUMNS}
                ON records WHEN {_PENDING.format(row="old.id")} AND NOT (
                    new.id = old.id AND new.scope = old.scope AND new.text = ''
                    AND new.text_hash = X'' AND new.author IS NULL
                    AND new.event_date IS old.event_date AND new.event_key IS old.event_key
                    AND new.tags = '[]' AND new.source IS NULL AND new.thread IS NULL
                    AND new.metadata IS NULL
                    AND new.ingested_at = old.ingested_at
                    AND new.ingested_key = old.ingested_key
                    AND new.embedding = zeroblob(length(old.embedding))) BEGIN
                SELECT RAISE(ABORT, 'mempp: a redaction erases content; it writes nothing else');
            END""",
            "DROP TRIGGER record_tags_no_delete",
            f"""CREATE TRIGGER record_tags_no_delete BEFORE DELETE ON record_tags
                WHEN NOT {_PENDING.format(row="old.record_id")} BEGIN
                SELECT RAISE(ABORT, 'mempp: records are append-only; DELETE is refused');
            END""",
            # As in migration 5: REPLACE would delete a tombstone without the DELETE trigger.
            """CREATE TRIGGER redactions_no_replace BEFORE INSERT ON redactions
                WHEN EXISTS (SELECT 1 FROM redactions WHERE record_id = NEW.record_id) BEGIN
                SELECT RAISE(ABORT, 'mempp: the redaction log is append-only; REPLACE is refused');
            END""",
        ),
    ),
    Migration(
        8,
        "the known_at filter answered from an index (ingest time) rather than every row",
        (
            # Partial like records_dedupe, so that the planner prefers an index on an equality
            # (author, thread) to this one's range when both filters are set.
            "CREATE INDEX records_ingested ON records (scope, ingested_key) WHERE state = 'active'",
        ),
    ),
    Migration(
        9,
        "reembed: new vectors staged beside the records, swapped in by one transaction",
        (
            # One new vector per record while a re-encoding is under way (its target encoder
            # is in mempp_meta as reembed_encoder / reembed_dim); emptied by the switch.
            """CREATE TABLE reembed_vectors (
                record_id INTEGER PRIMARY KEY REFERENCES records(id),
                embedding BLOB NOT NULL)""",
            # The vector leaves the content trigger for one of its own: it may change to the
            # vector staged for the row, while the switch's transaction marks itself in
            # mempp_meta (reembed_switching), and to zeros by an erasure. Nothing else.
            "DROP TRIGGER records_content_frozen",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_CONTENT_NO_VECTOR}
                ON records WHEN NOT {_PENDING.format(row="old.id")} BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s content never changes; only its state may');
            END""",
            f"""CREATE TRIGGER records_vector_frozen BEFORE UPDATE OF embedding ON records
                WHEN NOT {_PENDING.format(row="old.id")} AND NOT (
                    EXISTS (SELECT 1 FROM mempp_meta WHERE key = 'reembed_switching')
                    AND new.embedding IS (SELECT v.embedding FROM reembed_vectors v
                                          WHERE v.record_id = old.id)) BEGIN
                SELECT RAISE(ABORT,
                    'mempp: a record''s vector changes only by mempp reembed or an erasure');
            END""",
        ),
    ),
    Migration(
        10,
        "a redacted row keeps an empty full-text entry, so verify finds the index whole",
        # Redactions before this took the row out of the index altogether, which FTS5's
        # integrity check reads as a removed row: put their empty entries back.
        (
            """INSERT INTO records_fts (rowid, text)
                SELECT record_id, '' FROM redactions
                WHERE record_id NOT IN (SELECT id FROM records_fts_docsize)""",
        ),
    ),
)


def describe_failure(location: str, exc: sqlite3.DatabaseError) -> str:
    """Why SQLite refused the file, in one line that blames the right thing: the folder, the
    file's mode, its content."""
    path = Path(location).expanduser()
    folder = path.resolve().parent
    reason = str(exc)
    if "readonly" in reason or "unable to open" in reason:
        if not os.access(folder, os.W_OK):
            return (
                f"folder {folder} is not writable (SQLite keeps {path.name}-wal and "
                f"{path.name}-shm beside the file)"
            )
        if path.exists() and not os.access(path, os.W_OK):
            return "the file is read-only"
    if "not a database" in reason:
        return f"it is not a SQLite database ({reason})"
    if "malformed" in reason:
        return f"the file is damaged ({reason}); `mempp verify` checks it"
    return reason


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _ClosedConnection:
    """Stands in for the connection of a closed store: any use says so, as a StoreError."""

    def __init__(self, location: str) -> None:
        self._location = location

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # keep Python's own protocol probes (copy, pickle) working
            raise AttributeError(name)
        raise StoreError(f"{self._location} is closed")


class _SQLiteBase:
    """One connection to the file behind one lock; the state every mixin shares."""

    gathers_at_once = False  # gather() runs its calls in turn (see run_legs)

    def _write_contexts(self, conn: sqlite3.Connection, ids: Sequence[int], encode: Any) -> None:
        """Inside a records write's transaction, after its rows: the context index's part
        (``mempp.store.sqlite.context`` overrides this; nothing without that index)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.location = os.fspath(path)
        if self.location != ":memory:":
            parent = Path(self.location).expanduser().resolve().parent
            if not parent.is_dir():
                raise StoreError(f"cannot create {self.location}: folder {parent} does not exist")
            if Path(self.location).is_dir():
                raise StoreError(f"{self.location} is a folder, not a database file")
            # Made here, 0600, so that SQLite's WAL and shared-memory files, which copy the
            # database's mode, are private too; an existing file keeps its mode.
            with contextlib.suppress(OSError):  # a read-only folder: sqlite3 says why below
                create_file(Path(self.location).expanduser())
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                self.location,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            self._refuse_foreign()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            # Freed space is zeroed, so an erased record's text is not left in free pages.
            self._conn.execute("PRAGMA secure_delete=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"cannot open {self.location}: {describe_failure(self.location, exc)}"
            ) from None
        self._index: ExactVectorIndex | None = None
        self._exact_file: ExactFile | None = None  # the float32 rows beside the file
        self.bm25_min_rows = BM25_RAM_MIN_ROWS
        self._bm25: Bm25Index | None = None
        self._bm25_built: Bm25Index | None = None
        self._bm25_thread: threading.Thread | None = None
        self._tags: TagPostings | None = None  # the tag leg's in-RAM postings
        self._tags_built: TagPostings | None = None
        self._tags_thread: threading.Thread | None = None
        # (scope, filters) -> (vector index, its version, ids): see _LegsMixin._filtered_ids.
        self._filtered: dict[
            tuple[str, Filters], tuple[weakref.ref[ExactVectorIndex], int, np.ndarray]
        ] = {}
        self._token_cache: dict[str, tuple[str, ...]] = {}
        self._among_kept = {}  # scope -> its BM25 statistics (mempp.store.sqlite.tenants)
        self._seen_data_version = -1
        self._seen_state_epoch = ""
        self._dirty = True

    # -- plumbing ---------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._dirty = True

    def _refuse_foreign(self) -> None:
        """Refuse, before anything is written, a database that holds tables and is not
        mempp's: turning another program's file into a store (WAL mode, new tables) would
        change data that is not ours."""
        names = [
            row[0]
            for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        if names and "mempp_migrations" not in names:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            self._conn.close()
            raise StoreError(
                f"{self.location} is not a mempp database (it holds tables {shown}); "
                "mempp leaves it unchanged"
            )

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                """CREATE TABLE IF NOT EXISTS mempp_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"""
            )
            applied = {row[0] for row in conn.execute("SELECT version FROM mempp_migrations")}
            if applied and max(applied) > newest(MIGRATIONS):
                raise StoreError(
                    f"{self.location} was written by a newer mempp (schema {max(applied)}); "
                    "upgrade mempp to open it"
                )
            for migration in pending(MIGRATIONS, applied):
                for step in migration.steps(conn):
                    if callable(step):
                        step()
                    else:
                        conn.execute(step)
                conn.execute(
                    "INSERT INTO mempp_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, datetime.now(UTC).isoformat()),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _forget_bm25(self) -> None:
        """Drop the BM25 replica, in RAM and beside the file, after an erasure (it holds the
        erased terms and FTS5's old counts), and the tag postings' file (the erased rows'
        labels); the next large search builds them afresh. A build or read under way is
        waited for first, so it cannot save the old postings again. (The tag postings in RAM
        are dropped by the next search, which sees the erasure.)"""
        for building in (self._bm25_thread, self._tags_thread):
            if building is not None:
                building.join()
        with self._lock:
            self._bm25 = self._bm25_built = None
            self._bm25_thread = None
        for suffix in (BM25_FILE_SUFFIX, BM25_LEGACY_SUFFIX, TAGS_FILE_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.location}{suffix}").unlink()

    def close(self) -> None:
        with self._lock:
            if not isinstance(self._conn, _ClosedConnection):
                self._conn.close()
                self._conn = _ClosedConnection(self.location)  # type: ignore[assignment]
            self._index = self._bm25 = self._bm25_built = None  # their RAM goes now
            self._tags = self._tags_built = None
            self._filtered.clear()
            if self._exact_file is not None:
                self._exact_file.close()
                self._exact_file = None

    def gather(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        # One connection behind one lock: threads would only queue for it.
        return [call() for call in calls]

    def reading(self) -> AbstractContextManager[None]:
        return nullcontext()  # one file: every read sees every committed write

    def reachable(self) -> bool:
        # A file on this machine: it answers while it is open.
        return not isinstance(self._conn, _ClosedConnection)

    def schema_version(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT max(version) FROM mempp_migrations").fetchone()[0]
