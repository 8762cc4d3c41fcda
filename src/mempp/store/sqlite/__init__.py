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
undo), ``erasure`` (redaction), ``timeline`` (history and changes) and ``graph``
(triples), combined here as ``SQLiteStore``.
"""

from __future__ import annotations

from mempp.store.sqlite.erasure import _ErasureMixin
from mempp.store.sqlite.graph import _GraphMixin
from mempp.store.sqlite.legs import _LegsMixin, fts_match_expression, thread_key
from mempp.store.sqlite.schema import BM25_RAM_MIN_ROWS, BUSY_TIMEOUT_S, FTS_TOKENIZE, MIGRATIONS
from mempp.store.sqlite.timeline import _TimelineMixin

__all__ = [
    "BM25_RAM_MIN_ROWS",
    "BUSY_TIMEOUT_S",
    "FTS_TOKENIZE",
    "MIGRATIONS",
    "SQLiteStore",
    "fts_match_expression",
    "thread_key",
]


class SQLiteStore(_LegsMixin, _ErasureMixin, _TimelineMixin, _GraphMixin):
    """The default engine: a single local file, no server."""
