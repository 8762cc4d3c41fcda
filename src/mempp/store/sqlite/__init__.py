"""The embedded engine: one SQLite file holding records, full text (FTS5), tags and vectors.

* Append-only is enforced by the database itself: triggers refuse ``DELETE`` of a record and
  any ``UPDATE`` of its content; only ``state`` and ``superseded_by`` may change.
* Full text: an FTS5 index over the record text (Porter stemming, Unicode folding), ranked by
  BM25. Terms are always passed as quoted literals, so user text is never FTS syntax.
* Vectors are stored as float32 blobs and searched exactly in RAM (``ExactVectorIndex``),
  loaded on first search and kept current by reading only rows added since.
* WAL journal, one ``BEGIN IMMEDIATE`` transaction per write batch, a busy timeout: several
  processes may read and write the same file at once.

The engine is a package by concern: ``schema`` (connection, migrations), ``records``
(writes and plain reads), ``legs`` (retrieval), ``changelog`` (consolidation runs and
undo), ``erasure`` (redaction), ``reembed`` (re-encoding with another encoder),
``timeline`` (history and changes), ``graph`` (triples), ``verify`` (integrity),
``keyword`` (the substring leg), ``indexes`` (optional indexes, such as the keyword leg's)
and ``keys`` (the server's API keys), combined here as ``SQLiteStore``.
"""

from __future__ import annotations

import functools
import inspect
import sqlite3
from collections.abc import Callable
from typing import Any

from mempp.errors import StoreError
from mempp.store.sqlite.context import _ContextMixin
from mempp.store.sqlite.erasure import _ErasureMixin
from mempp.store.sqlite.graph import _GraphMixin
from mempp.store.sqlite.indexes import _IndexesMixin
from mempp.store.sqlite.keys import _KeysMixin
from mempp.store.sqlite.keyword import _KeywordMixin
from mempp.store.sqlite.legs import _LegsMixin, fts_match_expression, thread_key
from mempp.store.sqlite.reembed import _ReembedMixin
from mempp.store.sqlite.schema import (
    BM25_RAM_MIN_ROWS,
    BUSY_TIMEOUT_S,
    FTS_TOKENIZE,
    MIGRATIONS,
    describe_failure,
)
from mempp.store.sqlite.snapshot import _BackupMixin
from mempp.store.sqlite.timeline import _TimelineMixin
from mempp.store.sqlite.verify import _VerifyMixin

__all__ = [
    "BM25_RAM_MIN_ROWS",
    "BUSY_TIMEOUT_S",
    "FTS_TOKENIZE",
    "MIGRATIONS",
    "SQLiteStore",
    "fts_match_expression",
    "thread_key",
]


def _operational_errors(cls: type) -> type:
    """Every public method raises ``StoreError`` where SQLite raises: a page damaged after the
    file was opened, a disk that is full or gone, a file made read-only meanwhile. The methods
    handle the errors they expect themselves; this is the boundary for the rest."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def translated(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except sqlite3.DatabaseError as exc:
                raise StoreError(
                    f"{self.location}: {describe_failure(self.location, exc)}"
                ) from None

        return translated

    for name in dir(cls):
        attribute = inspect.getattr_static(cls, name)
        if not name.startswith("_") and inspect.isfunction(attribute):
            setattr(cls, name, wrap(attribute))
    return cls


@_operational_errors
class SQLiteStore(
    _LegsMixin,
    _KeywordMixin,
    _ContextMixin,
    _ReembedMixin,
    _ErasureMixin,
    _TimelineMixin,
    _GraphMixin,
    _VerifyMixin,
    _IndexesMixin,
    _KeysMixin,
    _BackupMixin,
):
    """The default engine: a single local file, no server."""
