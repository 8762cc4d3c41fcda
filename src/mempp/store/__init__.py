"""Storage engines behind one ``Store`` protocol, chosen by URL: a file path is SQLite."""

from __future__ import annotations

import os

from mempp.store.base import Store

__all__ = ["Store", "open_store"]


def open_store(location: str | os.PathLike[str]) -> Store:
    """Open (creating if needed) the store at ``location``.

    ``postgresql://...`` / ``postgres://...`` select the PostgreSQL engine; anything else is
    the path of a SQLite file (``sqlite:///path`` is accepted too).
    """
    text = os.fspath(location)
    if text.startswith(("postgresql://", "postgres://")):
        from mempp.store.postgres import PostgresStore

        return PostgresStore(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :]
    from mempp.store.sqlite import SQLiteStore

    return SQLiteStore(text)
