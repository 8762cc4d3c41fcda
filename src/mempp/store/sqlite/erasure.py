"""The SQLite engine's erasure (``Memory.redact``): the one sanctioned change of content.

The triggers of migration 4 let a record's content change, and its tag rows go, only while a
``redactions`` row for it is pending, and only to the erased values; this module writes that
row, erases, and settles it, in one transaction. ``secure_delete`` (set on every connection)
zeroes what the erasure frees; the full-text index is then merged and the WAL truncated, so no
copy of the text stays in the file, its ``-wal`` or its ``-shm``.
"""

from __future__ import annotations

import json
import sqlite3

from mempp.errors import InvalidInput, RecordNotFound, StoreError
from mempp.store.base import StateChange
from mempp.store.sqlite import context_file
from mempp.store.sqlite.changelog import _ChangeLogMixin
from mempp.store.sqlite.indexes import enabled_indexes
from mempp.store.sqlite.schema import _now

ERASED_TEXT = ""
ERASED_HASH = b""


class _ErasureMixin(_ChangeLogMixin):
    """Redaction: erase content, keep a tombstone, log it."""

    def redact(
        self, scope: str, record_id: int, *, reason: str, actor: str | None
    ) -> tuple[int, list[int]]:
        try:
            with self._write() as conn:
                erased = self._erasable(conn, scope, record_id)
                at = _now()
                settings = {"operation": "redact", "reason": reason, "actor": actor}
                cursor = conn.execute(
                    """INSERT INTO consolidation_runs
                           (scope, kind, dry_run, started_at, finished_at, settings, counts)
                       VALUES (?, 'consolidate', 0, ?, ?, ?, ?)""",
                    (
                        scope,
                        at,
                        at,
                        json.dumps(settings, sort_keys=True),
                        json.dumps({"redacted": len(erased)}),
                    ),
                )
                run_id = cursor.lastrowid
                assert run_id is not None
                states = conn.execute(
                    """SELECT id, state, superseded_by, text FROM records
                       WHERE id IN (SELECT value FROM json_each(?)) AND +scope = ?""",
                    (json.dumps(erased), scope),
                ).fetchall()
                changes = [
                    StateChange(row, state, superseded, "archived", superseded)
                    for row, state, superseded, _ in states
                ]
                self._log_changes(conn, run_id, 0, "redact", changes, None)
                conn.executemany(
                    """INSERT INTO redactions (record_id, scope, run_id, redacted_at, reason,
                           actor) VALUES (?, ?, ?, ?, ?, ?)""",
                    [(row, scope, run_id, at, reason, actor) for row in erased],
                )
                optional = enabled_indexes(conn)
                for row, _, _, text in states:
                    # External-content FTS5: the old text names the terms to take out. The
                    # row then goes back in with the tombstone's empty text, so the index
                    # still has one entry per record and FTS5's integrity check (verify)
                    # finds it matching the records table.
                    conn.execute(
                        """INSERT INTO records_fts (records_fts, rowid, text)
                           VALUES ('delete', ?, ?)""",
                        (row, text),
                    )
                    conn.execute(
                        "INSERT INTO records_fts (rowid, text) VALUES (?, ?)", (row, ERASED_TEXT)
                    )
                    # Each enabled optional index likewise (mempp.store.sqlite.indexes).
                    for index in optional.values():
                        index.erase(conn, row, text, ERASED_TEXT)
                ids = json.dumps(erased)
                conn.execute(
                    "DELETE FROM record_tags WHERE record_id IN (SELECT value FROM json_each(?))",
                    (ids,),
                )
                conn.execute(
                    "DELETE FROM graph_triples WHERE record_id IN (SELECT value FROM json_each(?))",
                    (ids,),
                )
                # A re-encoding under way staged a vector of the text: it goes too.
                conn.execute(
                    """DELETE FROM reembed_vectors
                       WHERE record_id IN (SELECT value FROM json_each(?))""",
                    (ids,),
                )
                conn.execute(
                    """UPDATE records SET text = ?, text_hash = ?, author = NULL, tags = '[]',
                           source = NULL, thread = NULL, metadata = NULL, state = 'archived',
                           embedding = zeroblob(length(embedding))
                       WHERE id IN (SELECT value FROM json_each(?)) AND +scope = ?""",
                    (ERASED_TEXT, ERASED_HASH, ids, scope),
                )
                conn.execute(
                    """UPDATE redactions SET pending = 0
                       WHERE record_id IN (SELECT value FROM json_each(?))""",
                    (ids,),
                )
                # The 'delete' command leaves the old terms in older segments until they
                # merge: merge them all now.
                conn.execute("INSERT INTO records_fts (records_fts) VALUES ('optimize')")
                for index in optional.values():
                    index.after_erasure(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"could not redact record {record_id}: {exc}") from None
        with self._lock:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            # After the commit as well as in it: a context copy another process saved from a
            # snapshot before the erasure, after the erasure's transaction removed it, goes
            # too (context_file's note), whatever the context index's switch says now.
            try:
                context_file.discard_stale(self._conn)
                left = None
            except OSError as exc:
                left = (
                    f"{context_file.path_of(self._conn)}: may hold contexts of the erased text "
                    f"and could not be removed ({exc.strerror}); delete it by hand"
                )
        try:
            self._erase_vectors(erased)
        except StoreError as exc:
            left = str(exc) if left is None else f"{exc}; {left}"
        self._forget_bm25()
        if left is not None:
            raise StoreError(left)
        return run_id, erased

    @staticmethod
    def _erasable(conn: sqlite3.Connection, scope: str, record_id: int) -> list[int]:
        """The row and every merged row made from it (and from those), none yet redacted."""
        row = conn.execute(
            """SELECT r.id, x.record_id FROM records r
               LEFT JOIN redactions x ON x.record_id = r.id
               WHERE r.id = ? AND r.scope = ?""",
            (record_id, scope),
        ).fetchone()
        if row is None:
            raise RecordNotFound(f"no record {record_id} in scope {scope!r}")
        if row[1] is not None:
            raise InvalidInput(f"record {record_id} is already redacted")
        found = [record_id]
        frontier = [record_id]
        while frontier:
            merged = conn.execute(
                """SELECT DISTINCT c.merged_id FROM consolidation_changes c
                   JOIN consolidation_runs r ON r.id = c.run_id AND r.scope = ?
                   WHERE c.record_id IN (SELECT value FROM json_each(?))
                     AND c.merged_id IS NOT NULL
                     AND c.merged_id NOT IN (SELECT record_id FROM redactions)""",
                (scope, json.dumps(frontier)),
            ).fetchall()
            frontier = [m for (m,) in merged if m not in found]
            found += frontier
        return found
