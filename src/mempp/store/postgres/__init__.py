"""The server engine: PostgreSQL with pgvector, for many processes and machines at once.

Same contract as the SQLite engine (``mempp.store.base.Store``), enforced by the database:

* Append-only: triggers refuse ``DELETE`` and ``TRUNCATE`` of ``records`` (and of its tag
  index) and any ``UPDATE`` that names a content column; only ``state`` and ``superseded_by``
  may change. Like SQLite's ``UPDATE OF`` triggers they fire when a content column is *named*
  in the ``SET`` list, even if the value would stay the same.
* Full text: every row's ``terms``, FTS5's tokens of its text by the analysis both engines
  share (``mempp.index.analysis``, schema 10), and a stored ``tsvector`` generated from them
  (no PostgreSQL parser or dictionary; at most 1 MB of it) with a GIN index.
  ``lexical_rank="bm25"`` (the default preset) ranks by BM25 from a per-scope in-RAM replica
  of the terms' postings (``mempp.store.postgres.bm25``), as SQLite does, with the same
  scores; ``"cover_density"`` ranks by ``ts_rank_cd`` as in the paper's own code, over a
  ``tsquery`` built from the analysed query terms (each quoted as a lexeme, a term of several
  tokens a ``<->`` phrase, joined with ``&`` or ``|``), so user text is never parsed as
  tsquery syntax.
* A search's legs run at once, each on a pooled connection (``gather``).
* Vectors: an untyped ``vector`` column, because the dimension is known only when the first
  encoder is bound. ``bind_encoder`` then adds (once, under the schema lock) a CHECK
  ``vector_dims(embedding) = dim``, so the database refuses a vector of another size, and an
  HNSW cosine index on the expression ``embedding::vector(dim)`` (pgvector's documented
  pattern for untyped columns). Typing the column itself later is impossible without
  dropping the append-only trigger that names it (PostgreSQL refuses ``ALTER COLUMN TYPE``
  on a column used in a trigger definition), and would rewrite the table. The vector leg is
  exact: it ranks from a per-scope int8 replica in RAM, rescored with the float32 rows
  (``nearest``); a search whose filters keep at most ``exact_scan_max_rows`` rows scans them
  in SQL. With ``vector_replica`` off it walks the HNSW index past that many eligible rows,
  with pgvector's iterative scan in ``strict_order`` and the scope (tenant, active,
  ``event_key <= as_of``) as the filter of that scan, so every ``limit`` slot still goes to
  an eligible row.
* Dedupe: a partial UNIQUE index on ``(scope, coalesce(author, ''), text_hash)`` over active
  rows is the guarantee; a per-scope transaction advisory lock serialises writers of one
  scope (as SQLite's ``BEGIN IMMEDIATE`` does), which keeps ids in commit order per scope,
  avoids deadlocks between batches that overlap in different orders, and lets the insert
  skip duplicates with ``NOT EXISTS`` instead of burning sequence values on conflicts.
* Schema: versioned ``Migration`` objects, applied under ``pg_advisory_xact_lock`` so several
  processes opening a fresh database at once create it exactly once.
* The LLM layers (``ConsolidationStore``, ``GraphStore``; migration 2) behave as in SQLite.
  Every statement that moves a row's state (``set_state``, each consolidation group, an undo)
  takes the same per-scope write lock as ``insert``, so they are serialised with each other
  and with merged-row inserts as SQLite's single writer serialises them. Compare-and-set is
  ``UPDATE ... WHERE state = old AND superseded_by IS NOT DISTINCT FROM old`` under READ
  COMMITTED: a concurrent change makes the re-checked row miss the WHERE clause, which is
  reported as a ``StateConflict``, never applied over. The audit tables refuse ``UPDATE``,
  ``DELETE`` and ``TRUNCATE`` (runs: only ``finished_at``, ``counts`` and ``undone_by`` may
  change), and every foreign key carries the scope.

``psycopg`` (3), ``psycopg_pool`` and ``pgvector`` are imported lazily, so ``mempp`` imports
without the ``postgres`` extra and says how to install it when a URL asks for this engine.

The engine is a package by concern: ``schema`` (pool, migrations), ``records`` (writes and
plain reads), ``legs`` (retrieval), ``tags`` (the tag leg), ``nearest`` (the vector leg),
``bm25`` and ``replicas`` (the in-RAM BM25, tag and vector replicas), ``replica_reads``
(reading rows for them), ``changelog`` (consolidation runs and undo), ``erasure``
(redaction), ``reembed`` and ``reembed_schema`` (re-encoding with another encoder),
``timeline`` (history and changes), ``graph`` (triples), ``bulk`` (COPY batches, the HNSW
index deferred by ``bulk_load``), ``verify`` (integrity) and ``keys`` (the server's API
keys), combined here as ``PostgresStore``.
"""

from __future__ import annotations

from mempp.store.postgres.bulk import BULK_MIN_ROWS, HNSW_BUILD_MEMORY_MAX_MB, _BulkMixin
from mempp.store.postgres.connect import (
    CONNECT_TIMEOUT_S,
    DEFAULT_PREPARE_THRESHOLD,
    ENV_PREPARE_THRESHOLD,
    INSTALL_HINT,
    POOL_MAX_SIZE,
    POOL_MIN_SIZE,
    mask_url,
    prepare_threshold_from_env,
)
from mempp.store.postgres.context import _ContextMixin
from mempp.store.postgres.erasure import _ErasureMixin
from mempp.store.postgres.graph import _GraphMixin
from mempp.store.postgres.indexes import _IndexesMixin
from mempp.store.postgres.keys import _KeysMixin
from mempp.store.postgres.keyword import _KeywordMixin
from mempp.store.postgres.legs import _LegsMixin
from mempp.store.postgres.nearest import EF_SEARCH_CEILING, VECTORS_MAX_ROWS
from mempp.store.postgres.reembed import _ReembedMixin
from mempp.store.postgres.schema import BM25_MAX_ROWS, HNSW_MAX_DIM, MIGRATIONS
from mempp.store.postgres.snapshot import _SnapshotMixin
from mempp.store.postgres.timeline import _TimelineMixin
from mempp.store.postgres.verify import _VerifyMixin

__all__ = [
    "BM25_MAX_ROWS",
    "BULK_MIN_ROWS",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_PREPARE_THRESHOLD",
    "EF_SEARCH_CEILING",
    "ENV_PREPARE_THRESHOLD",
    "HNSW_BUILD_MEMORY_MAX_MB",
    "HNSW_MAX_DIM",
    "INSTALL_HINT",
    "MIGRATIONS",
    "POOL_MAX_SIZE",
    "POOL_MIN_SIZE",
    "VECTORS_MAX_ROWS",
    "PostgresStore",
    "mask_url",
    "prepare_threshold_from_env",
]


class PostgresStore(
    _LegsMixin,
    _KeywordMixin,
    _ContextMixin,
    _SnapshotMixin,
    _ReembedMixin,
    _ErasureMixin,
    _TimelineMixin,
    _GraphMixin,
    _VerifyMixin,
    _IndexesMixin,
    _KeysMixin,
    _BulkMixin,
):
    """A store in a PostgreSQL database with the pgvector extension.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/db?...``). The schema is
    created on first open. Tuning knobs are instance attributes so tests and benchmarks can
    move them: ``vector_replica`` (the vector leg from the in-RAM replica; off, by HNSW),
    ``exact_scan_max_rows`` (rows a search's filters keep up to which the vector leg scans
    them in SQL), ``hnsw_ef_search`` (the HNSW candidate list; raised to ``limit`` + a tie
    margin when a query asks for more), ``hnsw_build_memory_mb`` (``maintenance_work_mem``
    of an HNSW build; None sizes it from the row count), ``bm25_max_rows``,
    ``tags_max_rows`` and ``vectors_max_rows`` (rows the in-RAM replicas hold, all scopes
    together), ``vectors_float32_rows`` (a scope of up to that many rows holds its float32
    vectors too).
    """
