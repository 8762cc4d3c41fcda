"""The PostgreSQL engine's optional indexes (``mempp.store.indexes``): each one's statements,
and ``enable_index`` / ``disable_index`` / ``indexes``.

An index is enabled in one transaction under the schema lock (the migrations' lock, so two
processes enabling at once take turns): its extension and index are created over every
stored row and its name goes into ``mempp_meta``. PostgreSQL then maintains it on every
write, from any process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mempp.errors import StoreError
from mempp.store.indexes import Progress, known, meta_key, names_from_meta
from mempp.store.postgres import context, keyword_schema
from mempp.store.postgres.connect import _first_line
from mempp.store.postgres.schema import _LOCK_CLASS_SCHEMA, _PostgresBase
from mempp.store.verify import Check


@dataclass(frozen=True, slots=True)
class PostgresIndex:
    """How one optional index is built and checked on this engine."""

    create: tuple[str, ...]
    drop: tuple[str, ...]
    check: Callable[[Any], Check]
    extension: str | None = None  # an extension ``create`` needs, for the error message


POSTGRES_INDEXES: dict[str, PostgresIndex] = {
    "keyword": PostgresIndex(
        keyword_schema.CREATE,
        keyword_schema.DROP,
        keyword_schema.check,
        keyword_schema.EXTENSION,
    ),
    "context": PostgresIndex(context.CREATE, context.DROP, context.check),
}


def enabled_indexes(conn: Any) -> dict[str, PostgresIndex]:
    """The enabled indexes as this transaction sees them."""
    keys = [row[0] for row in conn.execute("SELECT key FROM mempp_meta WHERE key LIKE 'index:%'")]
    return {name: POSTGRES_INDEXES[name] for name in names_from_meta(keys)}


class _IndexesMixin(_PostgresBase):
    def indexes(self) -> tuple[str, ...]:
        with self._connection() as conn:
            return tuple(enabled_indexes(conn))

    def enable_index(self, name: str, *, progress: Progress | None = None) -> bool:
        known(name)
        index = POSTGRES_INDEXES[name]
        errors = self._psycopg.errors
        with self._connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
            if name in enabled_indexes(conn):
                return False
            total = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            if progress is not None:
                progress(0, total)
            for statement in index.create:
                try:
                    conn.execute(statement)
                except (errors.FeatureNotSupported, errors.UndefinedFile) as exc:
                    raise StoreError(
                        f"{self.location}: the {index.extension} extension is not installed "
                        f"on this server ({_first_line(exc)})"
                    ) from None
                except errors.InsufficientPrivilege as exc:
                    raise StoreError(
                        f"{self.location}: not allowed to build the {name} index "
                        f"({_first_line(exc)}); ask an administrator to run CREATE EXTENSION "
                        f"{index.extension}, or connect as the database owner"
                    ) from None
            conn.execute(
                "INSERT INTO mempp_meta (key, value) VALUES (%s, %s)",
                (meta_key(name), datetime.now(UTC).isoformat()),
            )
            if progress is not None:  # inside: a callback that raises undoes the build
                progress(total, total)
        return True

    def disable_index(self, name: str) -> bool:
        known(name)
        with self._connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
            if name not in enabled_indexes(conn):
                return False
            for statement in POSTGRES_INDEXES[name].drop:
                conn.execute(statement)
            conn.execute("DELETE FROM mempp_meta WHERE key = %s", (meta_key(name),))
        return True

    def _index_checks(self, conn: Any) -> list[Check]:
        """``verify``'s check of each enabled index (none when none is enabled)."""
        return [index.check(conn) for index in enabled_indexes(conn).values()]
