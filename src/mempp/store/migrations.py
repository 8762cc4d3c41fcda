"""Versioned schema migrations, one mechanism for every engine.

Each engine lists its migrations as ``(version, name, statements)``; a migration that must
compute in Python what SQL cannot (PostgreSQL's re-analysis of every text, schema 10) adds a
``backfill`` run on the migration's connection after ``statements`` and before ``after``, in
the same transaction. ``pending`` tells which
ones a database still lacks; the engine applies each in its own transaction and records it in
``mempp_migrations``, so opening an old file upgrades it exactly once, even with several
processes racing (the engine re-checks inside its write lock).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    backfill: Callable[[Any], None] | None = None
    after: tuple[str, ...] = ()

    def steps(self, conn: Any) -> list[str | Callable[[], None]]:
        """The statements, then the backfill (bound to ``conn``), then the ``after`` ones."""
        backfill = self.backfill
        middle: list[str | Callable[[], None]] = (
            [] if backfill is None else [lambda: backfill(conn)]
        )
        return [*self.statements, *middle, *self.after]


def pending(migrations: Sequence[Migration], applied: Collection[int]) -> list[Migration]:
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise ValueError("migration versions must be unique and increasing")
    return [m for m in migrations if m.version not in applied]


def newest(migrations: Sequence[Migration]) -> int:
    return migrations[-1].version if migrations else 0
