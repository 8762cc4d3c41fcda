"""The SQLite engine's optional indexes (``mempp.store.indexes``): each one's statements and
steps, and ``enable_index`` / ``disable_index`` / ``indexes``.

An index is enabled in one ``BEGIN IMMEDIATE`` transaction (writers in every process wait
for it): its tables and triggers are created, every stored row is indexed, and its name goes
into ``mempp_meta``. The triggers keep it on every later insert whichever process writes; an
erasure (``mempp.store.sqlite.erasure``) calls each enabled index's ``erase`` in its own
transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from mempp.store.indexes import Progress, known, meta_key, names_from_meta
from mempp.store.sqlite import context, keyword_schema
from mempp.store.sqlite.schema import _SQLiteBase
from mempp.store.verify import Check


@dataclass(frozen=True, slots=True)
class SQLiteIndex:
    """How one optional index is built, kept and checked on this engine."""

    create: tuple[str, ...]
    fill: Callable[[sqlite3.Connection, Progress | None], None]
    drop: tuple[str, ...]
    check: Callable[[sqlite3.Connection], Check]
    # (conn, row, old text, tombstone text) for each erased row, then once after them all.
    erase: Callable[[sqlite3.Connection, int, str, str], None]
    after_erasure: Callable[[sqlite3.Connection], None]
    # After the drop, inside its transaction: files of the index beside the database.
    dropped: Callable[[sqlite3.Connection], None] = lambda conn: None


SQLITE_INDEXES: dict[str, SQLiteIndex] = {
    "keyword": SQLiteIndex(
        keyword_schema.CREATE,
        keyword_schema.fill,
        keyword_schema.DROP,
        keyword_schema.check,
        keyword_schema.erase,
        keyword_schema.after_erasure,
    ),
    "context": SQLiteIndex(
        context.CREATE,
        context.fill,
        context.DROP,
        context.check,
        context.erase,
        context.after_erasure,
        context.dropped,
    ),
}


def enabled_indexes(conn: sqlite3.Connection) -> dict[str, SQLiteIndex]:
    """The enabled indexes as this transaction sees them."""
    keys = [row[0] for row in conn.execute("SELECT key FROM mempp_meta WHERE key LIKE 'index:%'")]
    return {name: SQLITE_INDEXES[name] for name in names_from_meta(keys)}


class _IndexesMixin(_SQLiteBase):
    def indexes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(enabled_indexes(self._conn))

    def enable_index(self, name: str, *, progress: Progress | None = None) -> bool:
        known(name)
        index = SQLITE_INDEXES[name]
        with self._write() as conn:
            if name in enabled_indexes(conn):
                return False
            for statement in index.create:
                conn.execute(statement)
            index.fill(conn, progress)
            conn.execute(
                "INSERT INTO mempp_meta (key, value) VALUES (?, ?)",
                (meta_key(name), datetime.now(UTC).isoformat()),
            )
        return True

    def disable_index(self, name: str) -> bool:
        known(name)
        with self._write() as conn:
            if name not in enabled_indexes(conn):
                return False
            for statement in SQLITE_INDEXES[name].drop:
                conn.execute(statement)
            SQLITE_INDEXES[name].dropped(conn)
            conn.execute("DELETE FROM mempp_meta WHERE key = ?", (meta_key(name),))
        return True

    def _index_checks(self, conn: sqlite3.Connection) -> list[Check]:
        """``verify``'s check of each enabled index (none when none is enabled)."""
        return [index.check(conn) for index in enabled_indexes(conn).values()]
