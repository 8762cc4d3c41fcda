"""The SQLite engine's context index (opt-in): the table of context vectors, the thread walk
that finds a record's predecessors (``mempp.store.context`` states the rule), and the context
leg over an in-RAM int8 copy (``mempp.index.vectors.ExactVectorIndex``, rescored from the
table's float32 rows), saved beside the file once large (``mempp.store.sqlite.context_file``)
so a new process maps it instead of building it again.

It is the optional index ``context`` (``mempp.store.indexes``; its statements and hooks
below, registered in ``mempp.store.sqlite.indexes``): the table ``record_context`` exists
only while it is enabled (``mempp_meta`` holds its depth and encoder), so nobody who leaves
it off pays for it. Its rows need the encoder, so the store does not write them itself:
``mempp.context`` encodes them after the records they describe (on write, on enabling, after
an erasure). An erasure deletes every context that read the erased text (``erase``, inside
the erasure's transaction, before the row leaves its thread).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Collection, Sequence

import numpy as np

from mempp.errors import StoreError
from mempp.filters import NO_FILTERS, Filters
from mempp.index.vectors import ExactVectorIndex
from mempp.store import context as common
from mempp.store.context import (
    CONTEXT_WINDOW,
    DEFAULT_DEPTH,
    FIRST_EXTRA,
    ContextRule,
    ContextSource,
    Encode,
    SumSource,
    context_check,
    pick_members,
    window_picks,
)
from mempp.store.filter_sql import filter_condition
from mempp.store.indexes import Progress, meta_key
from mempp.store.sqlite import context_file
from mempp.store.sqlite.legs import thread_key
from mempp.store.sqlite.schema import _SQLiteBase
from mempp.store.sqlite.vector_file import VECTOR_FILE_MIN_ROWS
from mempp.store.verify import Check

CREATE = (
    """CREATE TABLE record_context (
        record_id INTEGER PRIMARY KEY REFERENCES records(id),
        members TEXT NOT NULL,
        embedding BLOB NOT NULL)""",
    f"""INSERT OR IGNORE INTO mempp_meta (key, value) VALUES
        ('context_depth', '{DEFAULT_DEPTH}'), ('context_rule', '{ContextRule().to_meta()}')""",
)
DROP = (
    "DROP TABLE record_context",
    """DELETE FROM mempp_meta
       WHERE key IN ('context_depth', 'context_rule', 'context_encoder', 'context_epoch')""",
)
# Bumped whenever a context row goes or an older one is written: the in-RAM copy reloads.
_EPOCH = "context_epoch"
# The rows whose contexts an erasure deleted, to be made again at its end (this connection's).
_REDO = "temp.mempp_context_redo"
_LOAD_CHUNK = 20_000


def _has_table(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'record_context'"
    ).fetchone()
    return row is not None


def _bump(conn: sqlite3.Connection) -> None:
    conn.execute(
        """INSERT INTO mempp_meta (key, value) VALUES (?, '1')
           ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1""",
        (_EPOCH,),
    )


def fill(conn: sqlite3.Connection, progress: Progress | None) -> None:
    """Nothing inside the enabling transaction: the contexts need the encoder, which the
    store does not hold (``mempp.context.fill`` encodes them once it is enabled)."""


def erase(conn: sqlite3.Connection, row: int, old_text: str, new_text: str) -> None:
    """Inside an erasure, before the row leaves its thread: delete its context and that of
    every row whose context read it (a walk of its thread after it, by the thread index)."""
    rows = conn.execute(
        """SELECT c.record_id FROM records e
           JOIN records r ON r.scope = e.scope AND r.thread = e.thread AND r.id > e.id
           JOIN record_context c ON c.record_id = r.id
           WHERE e.id = :row AND e.thread IS NOT NULL
             AND EXISTS (SELECT 1 FROM json_each(c.members) m WHERE m.value = e.id)
           UNION SELECT :row""",
        {"row": row},
    ).fetchall()
    conn.execute(
        "DELETE FROM record_context WHERE record_id IN (SELECT value FROM json_each(?))",
        (json.dumps([r[0] for r in rows]),),
    )
    # Made again once every erased row has left its thread (after_erasure).
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_REDO} (id INTEGER PRIMARY KEY)")
    conn.executemany(f"INSERT OR IGNORE INTO {_REDO} (id) VALUES (?)", rows)


def after_erasure(conn: sqlite3.Connection) -> None:
    """Once the erased rows have left their threads: the contexts that read them are made
    again in the erasure's transaction under the sum rule (the text rule needs the encoder:
    ``Memory.redact`` encodes them after it), then the copies in RAM and beside the file go."""
    redo = [row[0] for row in conn.execute(f"SELECT id FROM {_REDO} ORDER BY id")]
    conn.execute(f"DELETE FROM {_REDO}")
    write_with_records(conn, redo, None)
    _bump(conn)  # the in-RAM copies, in every process, load again
    context_file.remove(conn)  # it holds copies of contexts that read the erased text


def dropped(conn: sqlite3.Connection) -> None:
    """After the index is dropped: its saved copy goes too."""
    context_file.remove(conn)


def check(conn: sqlite3.Connection) -> Check:
    """Every unerased record has a context of the store's encoder."""
    missing = conn.execute(
        """SELECT count(*) FROM records r
           WHERE r.id NOT IN (SELECT record_id FROM redactions)
             AND NOT EXISTS (SELECT 1 FROM record_context c WHERE c.record_id = r.id)"""
    ).fetchone()[0]
    encoder = conn.execute("SELECT value FROM mempp_meta WHERE key = 'context_encoder'").fetchone()
    bound = conn.execute(
        """SELECT (SELECT value FROM mempp_meta WHERE key = 'encoder'),
                  (SELECT value FROM mempp_meta WHERE key = 'dim')"""
    ).fetchone()
    stored = conn.execute("SELECT count(*) FROM record_context").fetchone()[0]
    written_by = None if encoder is None else json.loads(encoder[0])
    return context_check(stored, missing, written_by, [bound[0], int(bound[1])])


def rule_of(conn: sqlite3.Connection) -> ContextRule | None:
    """The context rule as this connection sees it (None while the index is off)."""
    rows = dict(
        conn.execute(
            """SELECT key, value FROM mempp_meta
               WHERE key IN (?, 'context_depth', 'context_rule')""",
            (meta_key("context"),),
        ).fetchall()
    )
    if meta_key("context") not in rows:
        return None
    return ContextRule.from_meta(rows.get("context_depth"), rows.get("context_rule"))


def sources(
    conn: sqlite3.Connection, ids: Collection[int], rule: ContextRule
) -> list[ContextSource]:
    """The sources of the contexts of ``ids`` by the rule (``mempp.store.context``), as this
    connection sees the rows (inside a write, its own batch's rows included)."""
    found = []
    records = conn.execute(
        """SELECT id, scope, thread, event_key, ingested_key, text FROM records
           WHERE id IN (SELECT value FROM json_each(?))
             AND id NOT IN (SELECT record_id FROM redactions) ORDER BY id""",
        (json.dumps(sorted({int(i) for i in ids})),),
    ).fetchall()
    for row_id, scope, thread, event_key, ingested_key, text in records:
        window = []
        if thread is not None:
            # One walk of records_thread back from the row's place: at most CONTEXT_WINDOW
            # entries, however long the thread.
            window = conn.execute(
                """SELECT id, event_key, ingested_key
                   FROM records INDEXED BY records_thread
                   WHERE scope = :scope AND thread = :thread
                     AND coalesce(event_key, ingested_key) <= :place
                   ORDER BY coalesce(event_key, ingested_key) DESC, id DESC
                   LIMIT :window""",
                {
                    "scope": scope,
                    "thread": thread,
                    "place": ingested_key if event_key is None else event_key,
                    "window": CONTEXT_WINDOW,
                },
            ).fetchall()
        picked = pick_members((row_id, event_key, ingested_key), window, rule.depth)
        read = {
            row[0]: row[1:]
            for row in conn.execute(
                f"""SELECT id, text{", embedding" if rule.kind == "sum" else ""} FROM records
                    WHERE id IN (SELECT value FROM json_each(?))""",
                (json.dumps([*picked, row_id] if picked and rule.kind == "sum" else picked),),
            ).fetchall()
        }
        vectors = None
        if picked and rule.kind == "sum":
            blobs = b"".join(read[m][1] for m in [*picked, row_id])
            vectors = np.frombuffer(blobs, dtype="<f4").reshape(len(picked) + 1, -1)
        found.append(
            ContextSource(row_id, tuple(picked), tuple(read[m][0] for m in picked), text, vectors)
        )
    return found


def sum_sources(conn: sqlite3.Connection, ids: Collection[int], depth: int) -> dict[int, SumSource]:
    """The sum rule's sources of ``ids`` (``ContextStore.sum_sources``): one statement walks
    the first ``depth + FIRST_EXTRA`` rows of each record's thread from its own entry back (the
    records_thread index, as ``sources`` walks it, and counts the rows at its place stored
    after it: ``window_picks``), a record whose predecessors may lie further back is read by
    ``sources``, then one read of the vectors."""
    rows = conn.execute(
        f"""SELECT c.id, c.event_key, c.ingested_key,
                   (SELECT count(*) FROM (
                       SELECT 1 FROM records a INDEXED BY records_thread
                       WHERE a.scope = c.scope AND a.thread = c.thread
                         AND {thread_key("a")} = {thread_key("c")} AND a.id > c.id
                       LIMIT :window)),
                   w.id, w.event_key, w.ingested_key
            FROM records c JOIN records w ON w.id IN (
                SELECT m.id FROM records m INDEXED BY records_thread
                WHERE m.scope = c.scope AND m.thread = c.thread
                  AND {thread_key("m")} <= {thread_key("c")}
                  AND ({thread_key("m")} < {thread_key("c")} OR m.id <= c.id)
                ORDER BY {thread_key("m")} DESC, m.id DESC
                LIMIT :first)
            WHERE c.id IN (SELECT value FROM json_each(:ids)) AND c.thread IS NOT NULL
              AND c.id NOT IN (SELECT record_id FROM redactions)""",
        {
            "ids": json.dumps(sorted({int(i) for i in ids})),
            "first": depth + FIRST_EXTRA,
            "window": CONTEXT_WINDOW,
        },
    ).fetchall()
    picked, whole = window_picks(rows, depth, depth + FIRST_EXTRA)
    for source in sources(conn, whole, ContextRule("sum", depth)) if whole else []:
        if source.members:
            picked[source.record_id] = list(source.members)
    wanted = {m for members in picked.values() for m in members} | set(picked)
    stored = dict(
        conn.execute(
            "SELECT id, embedding FROM records WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(wanted)),),
        ).fetchall()
    )
    found = {}
    for row, members in picked.items():
        blob = b"".join(stored[m] for m in [*members, row])
        found[row] = (
            tuple(members),
            np.frombuffer(blob, dtype="<f4").reshape(len(members) + 1, -1),
        )
    return found


def write_rows(
    conn: sqlite3.Connection,
    encoder: tuple[str, int],
    sources: Sequence[ContextSource],
    vectors: np.ndarray,
) -> None:
    """Inside a write transaction: store the contexts of ``sources`` (a row erased since its
    source was read stays out: the erasure's walk ran before this row existed)."""
    vectors = np.asarray(vectors, dtype="<f4").reshape(len(sources), encoder[1])
    bound = conn.execute("SELECT value FROM mempp_meta WHERE key = 'context_encoder'").fetchone()
    named = json.dumps([encoder[0], encoder[1]])
    if bound is not None and bound[0] != named:
        conn.execute("DELETE FROM record_context")  # another encoder's contexts
    conn.execute(
        "INSERT OR REPLACE INTO mempp_meta (key, value) VALUES ('context_encoder', ?)", (named,)
    )
    newest = conn.execute("SELECT max(record_id) FROM record_context").fetchone()[0]
    read = [s.record_id for s in sources] + [m for s in sources for m in s.members]
    erased = {
        row[0]
        for row in conn.execute(
            """SELECT record_id FROM redactions
               WHERE record_id IN (SELECT value FROM json_each(?))""",
            (json.dumps(read),),
        )
    }
    rows = [
        (s.record_id, json.dumps(list(s.members)), vector.tobytes() if s.members else b"")
        for s, vector in zip(sources, vectors, strict=True)
        if s.record_id not in erased and not erased.intersection(s.members)
    ]
    conn.executemany(
        """INSERT OR REPLACE INTO record_context (record_id, members, embedding)
           VALUES (?, ?, ?)""",
        rows,
    )
    if (bound is not None and bound[0] != named) or (
        newest is not None and rows and min(r[0] for r in rows) <= newest
    ):
        _bump(conn)


def write_with_records(conn: sqlite3.Connection, ids: Sequence[int], encode: Encode | None) -> None:
    """Inside the transaction that wrote the records ``ids``: their contexts (the engines'
    common rule, ``mempp.store.context.write_with_records``)."""
    common.write_with_records(
        conn,
        ids,
        encode,
        rule_of=rule_of,
        has_table=_has_table,
        sources=sources,
        write_rows=write_rows,
    )


class _ContextMixin(_SQLiteBase):
    """The context index: its switch, its rows, its leg."""

    _ctx_index: ExactVectorIndex | None = None
    _ctx_seen: tuple[str, str] = ("", "")  # (context epoch, state epoch) the copy holds
    # The copy is saved beside the file (context_file) from this many rows on; rows held
    # when it was last saved (or loaded).
    context_file_min_rows = VECTOR_FILE_MIN_ROWS
    _ctx_saved = 0

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM mempp_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _write_contexts(
        self, conn: sqlite3.Connection, ids: Sequence[int], encode: Encode | None
    ) -> None:
        write_with_records(conn, ids, encode)

    def context_depth(self) -> int | None:
        rule = self.context_rule()
        return None if rule is None else rule.depth

    def context_rule(self) -> ContextRule | None:
        with self._lock:
            return rule_of(self._conn)

    def context_encoder(self) -> tuple[str, int] | None:
        with self._lock:
            value = self._meta("context_encoder")
        if value is None:
            return None
        name, dim = json.loads(value)
        return str(name), int(dim)

    def set_context_rule(self, rule: ContextRule) -> None:
        with self._write() as conn:
            before = conn.execute(
                """SELECT (SELECT value FROM mempp_meta WHERE key = 'context_depth'),
                          (SELECT value FROM mempp_meta WHERE key = 'context_rule')"""
            ).fetchone()
            if ContextRule.from_meta(*before) != rule and _has_table(conn):
                conn.execute("DELETE FROM record_context")  # to be made again
                _bump(conn)
                context_file.remove(conn)
            conn.executemany(
                "INSERT OR REPLACE INTO mempp_meta (key, value) VALUES (?, ?)",
                [("context_depth", str(rule.depth)), ("context_rule", rule.to_meta())],
            )
        self._ctx_index = None

    def context_pending(self, after: int, limit: int) -> list[int]:
        with self._lock:
            if not _has_table(self._conn):
                return []
            rows = self._conn.execute(
                """SELECT r.id FROM records r
                   WHERE r.id > ? AND r.id NOT IN (SELECT record_id FROM redactions)
                     AND NOT EXISTS (SELECT 1 FROM record_context c WHERE c.record_id = r.id)
                   ORDER BY r.id LIMIT ?""",
                (after, limit),
            ).fetchall()
        return [row[0] for row in rows]

    def context_sources(self, ids: Collection[int]) -> list[ContextSource]:
        with self._lock:
            rule = rule_of(self._conn)
            if rule is None or not ids:
                return []
            return sources(self._conn, ids, rule)

    def sum_sources(self, ids: Collection[int], depth: int) -> dict[int, SumSource]:
        if not ids:
            return {}
        with self._lock:
            self._conn.execute("BEGIN")  # one snapshot for every row's walk
            try:
                return sum_sources(self._conn, ids, depth)
            finally:
                self._conn.execute("COMMIT")

    def store_contexts(
        self, encoder: tuple[str, int], sources: Sequence[ContextSource], vectors: np.ndarray
    ) -> None:
        if not sources:
            return
        try:
            with self._write() as conn:
                if not _has_table(conn):
                    raise StoreError(f"{self.location}: the context index is off")
                write_rows(conn, encoder, sources, vectors)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"could not store contexts in {self.location}: {exc}") from None

    def context_members(self, ids: Collection[int]) -> dict[int, tuple[int, ...]]:
        if not ids:
            return {}
        with self._lock:
            if not _has_table(self._conn):
                return {}
            rows = self._conn.execute(
                """SELECT record_id, members FROM record_context
                   WHERE record_id IN (SELECT value FROM json_each(?))""",
                (json.dumps([int(i) for i in ids]),),
            ).fetchall()
        return {row: tuple(json.loads(members)) for row, members in rows}

    def context_count(self) -> tuple[int, int]:
        with self._lock:
            records = self._conn.execute(
                """SELECT count(*) FROM records
                   WHERE id NOT IN (SELECT record_id FROM redactions)"""
            ).fetchone()[0]
            if not _has_table(self._conn):
                return 0, records
            stored = self._conn.execute("SELECT count(*) FROM record_context").fetchone()[0]
        return stored, records

    def contextual(
        self,
        scope: str,
        vector: np.ndarray,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        index = self._context_index()
        if index is None or limit <= 0:
            return []
        allowed = None
        if not filters.is_empty:
            main = self._vector_index()  # type: ignore[attr-defined]
            if main is None:
                return []
            with self._lock:
                allowed = self._filtered_ids(scope, filters, main)  # type: ignore[attr-defined]
        return index.search(np.asarray(vector, dtype=np.float32), scope, as_of, limit, allowed)

    def _context_rows(self, ids: np.ndarray) -> np.ndarray:
        """The float32 context vectors of ``ids``, in that order (the index's exact rows)."""
        with self._lock:
            found = dict(
                self._conn.execute(
                    """SELECT record_id, embedding FROM record_context
                       WHERE record_id IN (SELECT value FROM json_each(?))""",
                    (json.dumps(ids.tolist()),),
                ).fetchall()
            )
        assert self._ctx_index is not None
        dim = self._ctx_index.dim
        zero = bytes(4 * dim)  # a row deleted or erased (an empty blob) since: it scores nothing
        rows = (found.get(i) for i in ids.tolist())
        blob = b"".join(row if row is not None and len(row) == len(zero) else zero for row in rows)
        return np.frombuffer(blob, dtype="<f4").reshape(len(ids), dim)

    def _context_index(self) -> ExactVectorIndex | None:
        """The in-RAM copy, caught up with the table (None while the index is off or holds
        another encoder's contexts than the store's)."""
        with self._lock:
            conn = self._conn
            encoder = self._meta("context_encoder")
            stored = self._meta("encoder"), self._meta("dim")
            if encoder is None or not _has_table(conn):
                self._ctx_index = None
                return None
            name, dim = json.loads(encoder)
            if (name, str(dim)) != stored:
                return None  # re-encoded since: the leg waits for the contexts' rebuild
            judge = False  # whether the file beside the database is judged after the commit
            conn.execute("BEGIN")
            try:
                seen = (self._meta(_EPOCH) or "0", self._meta("state_epoch") or "0")
                index = self._ctx_index
                if index is None or index.dim != int(dim) or seen[0] != self._ctx_seen[0]:
                    index, judge = self._open_context_index(conn, int(dim), seen[0])
                cursor = conn.execute(
                    """SELECT c.record_id, r.scope, r.event_key, r.state = 'active', c.embedding
                       FROM record_context c JOIN records r ON r.id = c.record_id
                       WHERE c.record_id > ? AND length(c.embedding) > 0
                       ORDER BY c.record_id""",
                    (index.max_id,),
                )
                while rows := cursor.fetchmany(_LOAD_CHUNK):
                    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                    vectors = np.frombuffer(b"".join(r[4] for r in rows), dtype="<f4")
                    index.append(
                        ids,
                        vectors.reshape(len(rows), index.dim),
                        (r[1] for r in rows),
                        (r[2] for r in rows),
                        (bool(r[3]) for r in rows),
                    )
                if seen[1] != self._ctx_seen[1] and self._ctx_seen != ("", ""):
                    archived = conn.execute(
                        """SELECT c.record_id FROM record_context c
                           JOIN records r ON r.id = c.record_id WHERE r.state != 'active'"""
                    ).fetchall()
                    index.set_archived(np.fromiter((r[0] for r in archived), dtype=np.int64))
                path = context_file.path_of(conn)
                if path is not None and context_file.due(
                    len(index), self._ctx_saved, self.context_file_min_rows
                ):
                    # In the transaction that read the rows: the label is theirs.
                    label = context_file.fingerprint(conn, index.max_id)
                    context_file.save(path, index, label, seen[1])
                    self._ctx_saved = len(index)
                    judge = True
            finally:
                conn.execute("COMMIT")
            self._ctx_seen = seen
            if judge:
                # A refused copy goes; a copy just saved from this snapshot goes if an erasure
                # committed since (context_file's note: the race with an erasure).
                with contextlib.suppress(OSError):
                    context_file.discard_stale(conn)
            return index

    def _open_context_index(
        self, conn: sqlite3.Connection, dim: int, epoch: str
    ) -> tuple[ExactVectorIndex, bool]:
        """The copy saved beside the file if it is this database's current one (its states
        as of the state epoch it was saved at, which the caller compares), else an empty one
        (caller holds the lock, inside a read transaction); and whether a file was there and
        refused (to be removed once the transaction ends)."""
        path = context_file.path_of(conn)
        loaded = None if path is None else context_file.load(conn, path, dim, self._context_rows)
        refused = loaded is None and path is not None and path.exists()
        if loaded is None:
            index = ExactVectorIndex(dim, exact_rows=self._context_rows)
            self._ctx_saved = 0
            self._ctx_seen = ("", "")  # read whole from the table: its states are current
        else:
            index, saved_states = loaded
            self._ctx_saved = len(index)
            self._ctx_seen = (epoch, saved_states)
        self._ctx_index = index
        return index, refused

    def context_eligible(
        self, scope: str, ids: Collection[int], as_of: int | None, filters: Filters = NO_FILTERS
    ) -> set[int]:
        """The rows of ``ids`` in the search's scope (active, ``as_of``, filters): the
        predecessors a context hit may credit."""
        if not ids:
            return set()
        where, params = filter_condition(filters, "r", "sqlite")
        date = "" if as_of is None else " AND r.event_key <= :as_of"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT r.id FROM records r
                    WHERE r.id IN (SELECT value FROM json_each(:ids)) AND +r.scope = :scope
                      AND r.state = 'active'{date}{where}""",
                {
                    "ids": json.dumps([int(i) for i in ids]),
                    "scope": scope,
                    "as_of": as_of,
                    **params,
                },
            ).fetchall()
        return {row[0] for row in rows}
