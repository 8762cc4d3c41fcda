"""Versioned schema migrations, one mechanism for every engine.

Each engine lists its migrations as ``(version, name, statements)``. ``pending`` tells which
ones a database still lacks; the engine applies each in its own transaction and records it in
``mempp_migrations``, so opening an old file upgrades it exactly once, even with several
processes racing (the engine re-checks inside its write lock).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def pending(migrations: Sequence[Migration], applied: Collection[int]) -> list[Migration]:
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise ValueError("migration versions must be unique and increasing")
    return [m for m in migrations if m.version not in applied]


def newest(migrations: Sequence[Migration]) -> int:
    return migrations[-1].version if migrations else 0
