"""The embedded engine: one SQLite file holding records, full text (FTS5), tags and vectors.

* Append-only is enforced by the database itself: triggers refuse ``DELETE`` of a record and
  any ``UPDATE`` of its content; only ``state`` and ``superseded_by`` may change.
* Full text: an FTS5 index over the record text (Porter stemming, Unicode folding), ranked by
  BM25. Terms are always passed as quoted literals, so user text is never FTS syntax.
* Vectors are stored as float32 blobs and searched exactly in RAM (``ExactVectorIndex``),
  loaded on first search and kept current by reading only rows added since.
* WAL journal, one ``BEGIN IMMEDIATE`` transaction per write batch, a busy timeout: several
  processes may read and write the same file at once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from mempp.bm25 import Bm25Index
from mempp.dates import now_key
from mempp.errors import EncoderMismatch, InvalidInput, StoreError
from mempp.query import LexicalQuery, storable_query
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
from mempp.vectors import ExactVectorIndex

T = TypeVar("T")

BUSY_TIMEOUT_S = 60.0
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
# Below this many records FTS5 ranks an OR query in a few ms; above it, the exact in-RAM
# replica of its bm25() (mempp.bm25) is built in the background and used once ready.
BM25_RAM_MIN_ROWS = 20_000

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
)

_RECORD_COLUMNS = (
    "id, text, author, event_date, tags, source, scope, ingested_at, state, superseded_by, thread"
)


def thread_key(alias: str) -> str:
    """A row's place in its thread (the records_thread index expression)."""
    return f"coalesce({alias}.event_key, {alias}.ingested_key)"


def _first_per_key(items: Sequence[str], keys: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    seen: set[tuple[str, ...]] = set()
    kept = []
    for item, key in zip(items, keys, strict=True):
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return tuple(kept)


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
    )


_RUN_COLUMNS = (
    "id, scope, kind, dry_run, started_at, finished_at, settings, counts, undoes, undone_by"
)
_TRIPLE_COLUMNS = (
    "t.id, t.subject, t.relation, t.object, t.subject_key, t.object_key, t.record_id, r.event_date"
)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _row_to_run(row: sqlite3.Row | tuple) -> RunInfo:
    return RunInfo(
        id=row[0],
        scope=row[1],
        kind=row[2],
        dry_run=bool(row[3]),
        started_at=row[4],
        finished_at=row[5],
        settings=json.loads(row[6] or "{}"),
        counts=json.loads(row[7]) if row[7] else None,
        undoes=row[8],
        undone_by=row[9],
    )


def fts_match_expression(query: LexicalQuery) -> str | None:
    """Quote every term of a ``storable_query`` as an FTS5 string literal and join them with
    AND / OR. A quoted two-word phrase is an FTS5 phrase: its words must stand side by side."""
    terms = list(query.terms)
    if query.mode == "disjunctive":
        terms += query.phrases
    if not terms:
        return None
    joiner = " AND " if query.mode == "conjunctive" else " OR "
    return joiner.join(_quoted(term) for term in terms)


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


class _ClosedConnection:
    """Stands in for the connection of a closed store: any use says so, as a StoreError."""

    def __init__(self, location: str) -> None:
        self._location = location

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # keep Python's own protocol probes (copy, pickle) working
            raise AttributeError(name)
        raise StoreError(f"{self._location} is closed")


class SQLiteStore:
    """The default engine: a single local file, no server."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.location = os.fspath(path)
        if self.location != ":memory:":
            parent = Path(self.location).expanduser().resolve().parent
            if not parent.is_dir():
                raise StoreError(f"cannot create {self.location}: folder {parent} does not exist")
            if Path(self.location).is_dir():
                raise StoreError(f"{self.location} is a folder, not a database file")
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                self.location,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {self.location} as a mempp database: {exc}") from None
        self._index: ExactVectorIndex | None = None
        self.bm25_min_rows = BM25_RAM_MIN_ROWS
        self._bm25: Bm25Index | None = None
        self._bm25_built: Bm25Index | None = None
        self._bm25_thread: threading.Thread | None = None
        self._token_cache: dict[str, tuple[str, ...]] = {}
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
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO mempp_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, datetime.now(UTC).isoformat()),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if not isinstance(self._conn, _ClosedConnection):
                self._conn.close()
                self._conn = _ClosedConnection(self.location)  # type: ignore[assignment]
            self._index = self._bm25 = self._bm25_built = None  # their RAM goes now

    def gather(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        # One connection behind one lock: threads would only queue for it.
        return [call() for call in calls]

    def warm(self, scope: str) -> None:
        # The vectors and the bm25 replica cover every scope of the file at once.
        with self._lock:
            self._vector_index()
            self._bm25_ready()  # on a large store, starts the replica's build
            building = self._bm25_thread
        if building is not None:
            building.join()  # outside the lock: searches go on (through FTS5) meanwhile
            with self._lock:
                self._bm25_ready()

    def schema_version(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT max(version) FROM mempp_migrations").fetchone()[0]

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
            raise EncoderMismatch(
                f"{self.location} holds vectors of encoder {found['encoder']} "
                f"({found['dim']}-d); this Memory uses {name} ({dim}-d)"
            )

    # -- write path -------------------------------------------------------------------
    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[bool]:
        with self._lock:
            return [self._is_duplicate(self._conn, scope, doc) for doc in docs]

    @staticmethod
    def _is_duplicate(conn: sqlite3.Connection, scope: str, doc: Document) -> bool:
        row = conn.execute(
            """SELECT 1 FROM records INDEXED BY records_dedupe
               WHERE scope = ? AND coalesce(author, '') = ? AND text_hash = ?
                 AND state = 'active' LIMIT 1""",
            (scope, doc.author or "", text_hash(doc.text)),
        ).fetchone()
        return row is not None

    def insert(self, scope: str, docs: Sequence[Document], vectors: np.ndarray) -> list[AddResult]:
        if len(docs) != len(vectors):
            raise ValueError("one vector per document is required")
        results: list[AddResult] = []
        ingested_at = datetime.now(UTC).isoformat()
        ingested_key = now_key()
        try:
            with self._write() as conn:
                for doc, vector in zip(docs, vectors, strict=True):
                    if self._is_duplicate(conn, scope, doc):
                        results.append(AddResult(None, "duplicate"))
                        continue
                    row_id = self._insert_row(
                        conn, scope, doc, vector, doc.tag_labels(), ingested_at, ingested_key
                    )
                    results.append(AddResult(row_id))
        except sqlite3.Error as exc:
            raise StoreError(f"could not store the batch in {self.location}: {exc}") from None
        return results

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
                   event_key, tags, source, ingested_at, ingested_key, embedding, thread)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
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

    def lexical(self, scope: str, query: LexicalQuery, as_of: int | None, limit: int) -> list[int]:
        query = storable_query(query)
        if query.unique_stems:
            query = self._one_term_per_stem(query)
        expression = fts_match_expression(query)
        if expression is None:
            return []
        fast = self._lexical_in_ram(scope, query, as_of, limit)
        if fast is not None:
            return fast
        date_condition = "" if as_of is None else " AND r.event_key <= :as_of"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT r.id FROM records_fts JOIN records r ON r.id = records_fts.rowid
                    WHERE records_fts MATCH :match AND r.scope = :scope
                      AND r.state = 'active'{date_condition}
                    ORDER BY bm25(records_fts), r.id DESC LIMIT :limit""",
                {"match": expression, "scope": scope, "as_of": as_of, "limit": limit},
            ).fetchall()
        return [row[0] for row in rows]

    def _one_term_per_stem(self, query: LexicalQuery) -> LexicalQuery:
        """Keep the first term (and phrase) of each distinct FTS5 token sequence."""
        with self._lock:
            term_tokens = self._term_tokens(list(query.terms))
            phrase_tokens = self._term_tokens(list(query.phrases))
        return replace(
            query,
            terms=_first_per_key(query.terms, term_tokens),
            phrases=_first_per_key(query.phrases, phrase_tokens),
        )

    def _lexical_in_ram(
        self, scope: str, query: LexicalQuery, as_of: int | None, limit: int
    ) -> list[int] | None:
        """The same ranking from the in-RAM bm25 replica, or None where it cannot serve.

        BM25 is a sum over the query's phrases, so phrase scores (from FTS5, which knows
        word positions) are added to the replica's single-term scores exactly."""
        conjunctive = query.mode == "conjunctive"
        with self._lock:
            bm25 = self._bm25_ready()
            if bm25 is None:
                return None
            tokens = self._fts_tokens(query.terms)
            if tokens is None:  # a term FTS5 reads as a multi-token phrase: leave it to FTS5
                return None
            index = self._index
            assert index is not None
            extra = None
            if query.phrases and not conjunctive:
                rows = self._conn.execute(
                    "SELECT rowid, -bm25(records_fts) FROM records_fts WHERE records_fts MATCH ?",
                    (" OR ".join(_quoted(p) for p in query.phrases),),
                ).fetchall()
                extra = (
                    np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                    np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows)),
                )
        return bm25.search(
            tokens,
            conjunctive=conjunctive,
            eligible=lambda ids: index.eligible(ids, scope, as_of),
            limit=limit,
            extra=extra,
        )

    def tagged(self, scope: str, labels: Sequence[str], as_of: int | None, limit: int) -> list[int]:
        if not labels:
            return []
        date_condition = "" if as_of is None else " AND r.event_key <= :as_of"
        with self._lock:
            rows = self._conn.execute(
                # CROSS JOIN fixes the join order (labels first): without planner statistics
                # SQLite would otherwise visit every row of the scope.
                f"""SELECT r.id FROM record_tags t CROSS JOIN records r ON r.id = t.record_id
                    WHERE t.label IN (SELECT value FROM json_each(:labels))
                      AND r.scope = :scope AND r.state = 'active'{date_condition}
                    GROUP BY r.id ORDER BY count(*) DESC, r.id DESC LIMIT :limit""",
                {
                    "labels": json.dumps(list(labels)),
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                },
            ).fetchall()
        return [row[0] for row in rows]

    def nearest(self, scope: str, vector: np.ndarray, as_of: int | None, limit: int) -> list[int]:
        index = self._vector_index()
        if index is None:
            return []
        return index.search(vector, scope, as_of, limit)

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
        date_condition = "" if as_of is None else " AND event_key <= :as_of"
        among_condition = "" if among is None else " AND id IN (SELECT value FROM json_each(:ids))"
        found: set[int] = set()
        with self._lock:
            for start, end in spans:  # one index range per span
                rows = self._conn.execute(
                    f"""SELECT id FROM records
                        WHERE scope = :scope AND state = 'active'
                          AND event_key >= :start AND event_key < :end{date_condition}
                          {among_condition}
                        ORDER BY id DESC LIMIT :limit""",
                    {
                        "scope": scope,
                        "start": start,
                        "end": end,
                        "as_of": as_of,
                        "ids": None if among is None else json.dumps([int(i) for i in among]),
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
            "" if as_of is None else f" AND m.event_key <= :as_of AND {thread_key('m')} <= :as_of"
        )
        with self._lock:
            rows = self._conn.execute(
                # One short walk on the records_thread index per row that has a thread: it
                # starts at the row's own place (the >= term is the seek) and stops after
                # ``depth`` eligible rows. INDEXED BY: with an as-of bound the planner would
                # otherwise scan the scope's rows by date.
                f"""SELECT c.id, n.id, {thread_key("n")} FROM records c JOIN records n
                    ON n.id IN (
                        SELECT m.id FROM records m INDEXED BY records_thread
                        WHERE m.scope = c.scope AND m.thread = c.thread
                          AND m.state = 'active'{date_condition}
                          AND {thread_key("m")} >= {thread_key("c")}
                          AND ({thread_key("m")} > {thread_key("c")} OR m.id > c.id)
                        ORDER BY {thread_key("m")}, m.id
                        LIMIT :depth)
                    WHERE c.id IN (SELECT value FROM json_each(:ids)) AND +c.scope = :scope
                      AND c.thread IS NOT NULL""",
                {
                    "ids": json.dumps([int(i) for i in ids]),
                    "scope": scope,
                    "as_of": as_of,
                    "depth": depth,
                },
            ).fetchall()
        return followers_in_order(rows)

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, int]:
        if not ids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                """SELECT id, coalesce(event_key, ingested_key) FROM records
                   WHERE id IN (SELECT value FROM json_each(?)) AND +scope = ?""",
                (json.dumps([int(i) for i in ids]), scope),
            ).fetchall()
        return dict(rows)

    def latest_unmatched(
        self, scope: str, exclude: Collection[int], as_of: int | None, limit: int
    ) -> list[int]:
        date_condition = "" if as_of is None else " AND +event_key <= :as_of"
        with self._lock:
            rows = self._conn.execute(
                # The unary + keeps SQLite walking ids newest-first (stopping at the limit)
                # instead of sorting every in-scope row.
                f"""SELECT id FROM records
                    WHERE +scope = :scope AND +state = 'active'{date_condition}
                      AND id NOT IN (SELECT value FROM json_each(:exclude))
                    ORDER BY id DESC LIMIT :limit""",
                {
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                    "exclude": json.dumps([int(i) for i in exclude]),
                },
            ).fetchall()
        return [row[0] for row in rows]

    # -- consolidation (mempp.consolidate) ---------------------------------------------
    def current_vectors(self, scope: str) -> tuple[np.ndarray, np.ndarray]:
        encoder = self.encoder()
        dim = encoder[1] if encoder else 0
        with self._lock:
            rows = self._conn.execute(
                """SELECT id, embedding FROM records
                   WHERE scope = ? AND state = 'active' AND superseded_by IS NULL
                   ORDER BY id""",
                (scope,),
            ).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if not rows:
            return ids, np.empty((0, dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4")
        return ids, matrix.reshape(len(rows), -1).astype(np.float32)

    def begin_run(
        self, scope: str, *, kind: str, dry_run: bool, settings: Mapping[str, Any]
    ) -> int:
        if kind not in ("consolidate", "undo"):
            raise InvalidInput(f"unknown run kind {kind!r}")
        with self._write() as conn:
            cursor = conn.execute(
                """INSERT INTO consolidation_runs (scope, kind, dry_run, started_at, settings)
                   VALUES (?, ?, ?, ?, ?)""",
                (scope, kind, int(dry_run), _now(), json.dumps(dict(settings), sort_keys=True)),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def record_group(self, scope: str, run_id: int, outcome: GroupOutcome) -> int | None:
        if any(change.old_state is None for change in outcome.changes):
            raise ValueError("a group's changes name existing rows; merged rows are implicit")
        try:
            with self._write() as conn:
                self._run_row(conn, scope, run_id)
                self._compare_and_set(conn, scope, outcome.changes)
                merged_id = None
                if outcome.merged is not None:
                    merged_id = self._insert_merged(conn, scope, outcome.merged)
                conn.execute(
                    """INSERT INTO consolidation_groups (run_id, group_no, label, members, detail)
                       VALUES (?, ?, ?, ?, ?)""",
                    (
                        run_id,
                        outcome.group,
                        outcome.label,
                        json.dumps(list(outcome.members)),
                        outcome.detail,
                    ),
                )
                changes = list(outcome.changes)
                if merged_id is not None:
                    changes.append(StateChange(merged_id, None, None, "active", None))
                self._log_changes(conn, run_id, outcome.group, outcome.label, changes, merged_id)
                return merged_id
        except sqlite3.Error as exc:
            raise StoreError(f"could not record a consolidation step: {exc}") from None

    def _run_row(self, conn: sqlite3.Connection, scope: str, run_id: int) -> RunInfo:
        row = conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM consolidation_runs WHERE id = ? AND scope = ?",
            (run_id, scope),
        ).fetchone()
        if row is None:
            raise InvalidInput(f"no consolidation run {run_id} in scope {scope!r}")
        return _row_to_run(row)

    @staticmethod
    def _compare_and_set(
        conn: sqlite3.Connection, scope: str, changes: Sequence[StateChange]
    ) -> None:
        """Apply each change only where the row still has its expected state."""
        stale = []
        for change in changes:
            cursor = conn.execute(
                """UPDATE records SET state = ?, superseded_by = ?
                   WHERE id = ? AND scope = ? AND state = ? AND superseded_by IS ?""",
                (
                    change.new_state,
                    change.new_superseded_by,
                    change.record_id,
                    scope,
                    change.old_state,
                    change.old_superseded_by,
                ),
            )
            if cursor.rowcount != 1:
                stale.append(change.record_id)
        if stale:
            raise StateConflict(f"records {stale} changed since they were read", stale)

    def _insert_merged(self, conn: sqlite3.Connection, scope: str, merged: MergedRow) -> int:
        # Checked after the originals are archived, so only *other* active rows count.
        if self._is_duplicate(conn, scope, merged.document):
            raise StateConflict("the merged text repeats an active row of the same author")
        return self._insert_row(
            conn,
            scope,
            merged.document,
            merged.vector,
            merged.labels,
            datetime.now(UTC).isoformat(),
            now_key(),
        )

    @staticmethod
    def _log_changes(
        conn: sqlite3.Connection,
        run_id: int,
        group: int | None,
        label: str,
        changes: Sequence[StateChange],
        merged_id: int | None,
    ) -> None:
        conn.executemany(
            """INSERT INTO consolidation_changes (run_id, group_no, label, record_id, old_state,
                   old_superseded_by, new_state, new_superseded_by, merged_id)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                (
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
                for c in changes
            ],
        )

    def finish_run(self, scope: str, run_id: int, counts: Mapping[str, Any]) -> None:
        with self._write() as conn:
            conn.execute(
                """UPDATE consolidation_runs SET finished_at = ?, counts = ?
                   WHERE id = ? AND scope = ?""",
                (_now(), json.dumps(dict(counts), sort_keys=True), run_id, scope),
            )

    def runs(self, scope: str) -> list[RunInfo]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM consolidation_runs WHERE scope = ? ORDER BY id",
                (scope,),
            ).fetchall()
        return [_row_to_run(row) for row in rows]

    def run_groups(self, scope: str, run_id: int) -> list[GroupRecord]:
        with self._lock:
            rows = self._conn.execute(
                """SELECT g.run_id, g.group_no, g.label, g.members, g.detail
                   FROM consolidation_groups g JOIN consolidation_runs r ON r.id = g.run_id
                   WHERE g.run_id = ? AND r.scope = ? ORDER BY g.group_no""",
                (run_id, scope),
            ).fetchall()
        return [GroupRecord(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4]) for r in rows]

    def run_changes(self, scope: str, run_id: int) -> list[ChangeRecord]:
        with self._lock:
            return self._changes(self._conn, scope, run_id)

    @staticmethod
    def _changes(conn: sqlite3.Connection, scope: str, run_id: int) -> list[ChangeRecord]:
        rows = conn.execute(
            """SELECT c.run_id, c.group_no, c.label, c.record_id, c.old_state,
                      c.old_superseded_by, c.new_state, c.new_superseded_by, c.merged_id
               FROM consolidation_changes c JOIN consolidation_runs r ON r.id = c.run_id
               WHERE c.run_id = ? AND r.scope = ? ORDER BY c.id""",
            (run_id, scope),
        ).fetchall()
        return [
            ChangeRecord(r[0], r[1], r[2], StateChange(r[3], r[4], r[5], r[6], r[7]), r[8])
            for r in rows
        ]

    def undo_run(self, scope: str, run_id: int) -> tuple[int, list[ChangeRecord]]:
        try:
            with self._write() as conn:
                run = self._run_row(conn, scope, run_id)
                check_undoable(run)
                changes = self._changes(conn, scope, run_id)
                inverse = [inverse_change(record.change) for record in changes]
                self._compare_and_set_for_undo(conn, scope, run_id, inverse)
                cursor = conn.execute(
                    """INSERT INTO consolidation_runs
                           (scope, kind, dry_run, started_at, finished_at, settings, counts, undoes)
                       VALUES (?, 'undo', 0, ?, ?, '{}', ?, ?)""",
                    (scope, _now(), _now(), json.dumps(undo_counts(changes)), run_id),
                )
                undo_id = cursor.lastrowid
                assert undo_id is not None
                for record, change in zip(changes, inverse, strict=True):
                    self._log_changes(
                        conn, undo_id, record.group, "undo", [change], record.merged_id
                    )
                conn.execute(
                    "UPDATE consolidation_runs SET undone_by = ? WHERE id = ?", (undo_id, run_id)
                )
                return undo_id, self._changes(conn, scope, undo_id)
        except sqlite3.Error as exc:
            raise StoreError(f"could not undo run {run_id}: {exc}") from None

    def _compare_and_set_for_undo(
        self, conn: sqlite3.Connection, scope: str, run_id: int, inverse: Sequence[StateChange]
    ) -> None:
        try:
            self._compare_and_set(conn, scope, inverse)
        except StateConflict as exc:
            raise StateConflict(
                f"cannot undo run {run_id}: records {exc.ids} were changed again after it "
                "(undo the later runs first, newest first); nothing was changed",
                exc.ids,
            ) from None

    # -- entity graph (mempp.graph) ------------------------------------------------------
    def pending_extraction(self, scope: str, ids: Collection[int] | None) -> list[int]:
        narrow = "" if ids is None else " AND r.id IN (SELECT value FROM json_each(:ids))"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT r.id FROM records r
                    WHERE r.scope = :scope AND r.state = 'active'{narrow}
                      AND NOT EXISTS (SELECT 1 FROM graph_extractions g WHERE g.record_id = r.id)
                    ORDER BY r.id""",
                {"scope": scope, "ids": json.dumps([int(i) for i in ids or ()])},
            ).fetchall()
        return [row[0] for row in rows]

    def add_triples(
        self, scope: str, record_id: int, triples: Sequence[Triple], model: str | None
    ) -> bool:
        try:
            with self._write() as conn:
                done = conn.execute(
                    "SELECT 1 FROM graph_extractions WHERE record_id = ?", (record_id,)
                ).fetchone()
                if done is not None:
                    return False
                known = conn.execute(
                    "SELECT 1 FROM records WHERE id = ? AND scope = ?", (record_id, scope)
                ).fetchone()
                if known is None:
                    raise InvalidInput(f"no record {record_id} in scope {scope!r}")
                conn.executemany(
                    """INSERT INTO graph_triples (scope, record_id, subject, relation, object,
                           subject_key, object_key) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    [
                        (
                            scope,
                            record_id,
                            t.subject,
                            t.relation,
                            t.object,
                            t.subject_key,
                            t.object_key,
                        )
                        for t in triples
                    ],
                )
                conn.execute(
                    """INSERT INTO graph_extractions (record_id, scope, extracted_at, model,
                           triples) VALUES (?, ?, ?, ?, ?)""",
                    (record_id, scope, _now(), model, len(triples)),
                )
                return True
        except sqlite3.Error as exc:
            raise StoreError(f"could not store triples of record {record_id}: {exc}") from None

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
        date_condition = " AND r.event_key <= :as_of" if dated and as_of is not None else ""
        recency = "coalesce(r.event_key, r.ingested_key)" if dated else "r.id"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS},
                        (t.subject_key IN (SELECT value FROM json_each(:keys)))
                        + (t.object_key IN (SELECT value FROM json_each(:keys))
                           AND t.object_key != t.subject_key) AS touched
                    FROM graph_triples t JOIN records r ON r.id = t.record_id
                    WHERE t.scope = :scope AND r.state = 'active'{date_condition}
                      AND (t.subject_key IN (SELECT value FROM json_each(:keys))
                           OR t.object_key IN (SELECT value FROM json_each(:keys)))
                    ORDER BY touched DESC, {recency} DESC, t.id DESC LIMIT :limit""",
                {"keys": json.dumps(sorted(keys)), "scope": scope, "as_of": as_of, "limit": limit},
            ).fetchall()
        return [TripleHit(*row) for row in rows]

    def triples_of(self, scope: str, record_ids: Collection[int]) -> list[TripleHit]:
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS}, 0
                    FROM graph_triples t JOIN records r ON r.id = t.record_id
                    WHERE t.scope = ? AND t.record_id IN (SELECT value FROM json_each(?))
                    ORDER BY t.id""",
                (scope, json.dumps([int(i) for i in record_ids])),
            ).fetchall()
        return [TripleHit(*row) for row in rows]

    # -- the in-RAM bm25 replica -------------------------------------------------------
    def _bm25_ready(self) -> Bm25Index | None:
        """The caught-up bm25 replica; starts building it once the store is large enough."""
        if self.location == ":memory:":
            return None
        index = self._vector_index()
        if index is None:
            return None
        if self._bm25 is None and self._bm25_built is not None:
            self._bm25, self._bm25_built = self._bm25_built, None
        if self._bm25 is None:
            if self._bm25_thread is None and len(index) >= self.bm25_min_rows:
                self._bm25_thread = threading.Thread(
                    target=self._build_bm25, name="mempp-bm25", daemon=True
                )
                self._bm25_thread.start()
            return None
        if self._bm25.max_id < index.max_id:
            self._bm25_catch_up(self._bm25)
        return self._bm25

    def _build_bm25(self) -> None:
        """Read FTS5's postings once, on a connection of its own (runs in a thread)."""
        try:
            # Read-only: if the store is closed and its file moved meanwhile, this must not
            # create an empty database in its place.
            conn = sqlite3.connect(
                f"file:{urllib.parse.quote(self.location)}?mode=ro",
                uri=True,
                timeout=BUSY_TIMEOUT_S,
            )
            try:
                conn.execute(
                    "CREATE VIRTUAL TABLE temp.mempp_postings "
                    "USING fts5vocab(main, records_fts, instance)"
                )
                conn.execute("BEGIN")  # one snapshot for postings and row counts
                max_id, rows = conn.execute(
                    "SELECT coalesce(max(id), 0), count(*) FROM records"
                ).fetchone()
                grouped = conn.execute(
                    "SELECT term, group_concat(doc) FROM temp.mempp_postings GROUP BY term"
                ).fetchall()
                conn.execute("COMMIT")
            finally:
                conn.close()
            bm25 = Bm25Index()
            bm25.add_postings(_postings_from_groups(grouped), rows, max_id)
        except sqlite3.Error:
            return  # stay on FTS5, which is always correct
        with self._lock:
            if not isinstance(self._conn, _ClosedConnection):  # else nobody would free it
                self._bm25_built = bm25

    def _bm25_catch_up(self, bm25: Bm25Index) -> None:
        """Tokenise rows added since the replica was built, with FTS5's own tokenizer."""
        rows = self._conn.execute(
            "SELECT id, text FROM records WHERE id > ? ORDER BY id", (bm25.max_id,)
        ).fetchall()
        if not rows:
            return
        self._ensure_tokenizer()
        self._conn.executemany("INSERT INTO temp.mempp_tok (rowid, text) VALUES (?, ?)", rows)
        grouped = self._conn.execute(
            "SELECT term, group_concat(doc) FROM temp.mempp_tok_postings GROUP BY term"
        ).fetchall()
        self._conn.execute("INSERT INTO temp.mempp_tok (mempp_tok) VALUES ('delete-all')")
        bm25.add_postings(_postings_from_groups(grouped), len(rows), rows[-1][0])

    def _ensure_tokenizer(self) -> None:
        self._conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mempp_tok USING fts5("
            f"text, content='', tokenize='{FTS_TOKENIZE}')"
        )
        self._conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mempp_tok_postings "
            "USING fts5vocab(temp, mempp_tok, instance)"
        )

    def _fts_tokens(self, terms: Sequence[str]) -> tuple[str, ...] | None:
        """FTS5's token for each query term, or None if some term is not exactly one token."""
        tokens = self._term_tokens(terms)
        if any(len(t) != 1 for t in tokens):
            return None
        return tuple(t[0] for t in tokens)

    def _term_tokens(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        """The FTS5 tokens of each term, through FTS5's own tokenizer (cached)."""
        if len(self._token_cache) > 50_000:  # bounded; cleared before use, never during
            self._token_cache.clear()
        missing = [t for t in dict.fromkeys(terms) if t not in self._token_cache]
        if missing:
            self._ensure_tokenizer()
            self._conn.executemany(
                "INSERT INTO temp.mempp_tok (rowid, text) VALUES (?, ?)",
                list(enumerate(missing, start=1)),
            )
            found: dict[int, list[str]] = {}
            for term, doc in self._conn.execute(
                "SELECT term, doc FROM temp.mempp_tok_postings ORDER BY doc, offset"
            ):
                found.setdefault(doc, []).append(term)
            self._conn.execute("INSERT INTO temp.mempp_tok (mempp_tok) VALUES ('delete-all')")
            for number, term in enumerate(missing, start=1):
                self._token_cache[term] = tuple(found.get(number, ()))
        return [self._token_cache[t] for t in terms]

    # -- the in-RAM vector index --------------------------------------------------------
    def _vector_index(self) -> ExactVectorIndex | None:
        """Bring the RAM index up to date with the file (cheap when nothing changed)."""
        with self._lock:
            data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if (
                self._index is not None
                and not self._dirty
                and data_version == self._seen_data_version
            ):
                return self._index
            encoder = self.encoder()
            if encoder is None:
                return None
            if self._index is None:
                self._index = ExactVectorIndex(encoder[1])
            index = self._index
            self._conn.execute("BEGIN")  # one consistent snapshot for rows and epoch
            try:
                epoch = self._conn.execute(
                    "SELECT value FROM mempp_meta WHERE key = 'state_epoch'"
                ).fetchone()[0]
                rows = self._conn.execute(
                    """SELECT id, scope, event_key, state = 'active', embedding FROM records
                       WHERE id > ? ORDER BY id""",
                    (index.max_id,),
                ).fetchall()
                states = None
                if epoch != self._seen_state_epoch and len(index):
                    states = self._conn.execute(
                        "SELECT id, state = 'active' FROM records WHERE id <= ?", (index.max_id,)
                    ).fetchall()
            finally:
                self._conn.execute("COMMIT")
            if rows:
                vectors = np.frombuffer(b"".join(r[4] for r in rows), dtype="<f4")
                index.append(
                    np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                    vectors.reshape(len(rows), index.dim),
                    (r[1] for r in rows),
                    (r[2] for r in rows),
                    (bool(r[3]) for r in rows),
                )
            if states is not None:
                index.set_active((row_id, bool(active)) for row_id, active in states)
            self._seen_state_epoch = epoch
            self._seen_data_version = data_version
            self._dirty = False
            return index


def _postings_from_groups(
    grouped: list[tuple[str, str]],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``(term, "id,id,id...")`` rows, one id per token occurrence, into ids and frequencies."""
    postings = {}
    for term, joined in grouped:
        occurrences = np.array(joined.split(","), dtype=np.int64)
        ids, counts = np.unique(occurrences, return_counts=True)
        postings[term] = (ids, counts.astype(np.float64))
    return postings
