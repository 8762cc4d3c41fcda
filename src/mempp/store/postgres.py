"""The server engine: PostgreSQL with pgvector, for many processes and machines at once.

Same contract as the SQLite engine (``mempp.store.base.Store``), enforced by the database:

* Append-only: triggers refuse ``DELETE`` and ``TRUNCATE`` of ``records`` (and of its tag
  index) and any ``UPDATE`` that names a content column; only ``state`` and ``superseded_by``
  may change. Like SQLite's ``UPDATE OF`` triggers they fire when a content column is *named*
  in the ``SET`` list, even if the value would stay the same.
* Full text: a stored generated ``tsvector`` (``to_tsvector('english', text)``; for the rare
  document past tsvector's 1 MB limit, of its longest prefix that fits) with a GIN index,
  ranked by ``ts_rank_cd`` (cover density, as in the paper's own code). Each term becomes
  ``plainto_tsquery('english', term)`` bound as a parameter and the pieces are joined with
  ``&&`` (conjunctive) or ``||`` (disjunctive) in SQL built from the *number* of terms only,
  so user text is never parsed as tsquery syntax.
* Vectors: an untyped ``vector`` column, because the dimension is known only when the first
  encoder is bound. ``bind_encoder`` then adds (once, under the schema lock) a CHECK
  ``vector_dims(embedding) = dim``, so the database refuses a vector of another size, and an
  HNSW cosine index on the expression ``embedding::vector(dim)`` (pgvector's documented
  pattern for untyped columns). Typing the column itself later is impossible without
  dropping the append-only trigger that names it (PostgreSQL refuses ``ALTER COLUMN TYPE``
  on a column used in a trigger definition), and would rewrite the table. The vector leg
  scans exactly when at most ``exact_scan_max_rows`` rows are eligible (cheap, and exact by
  construction) and otherwise walks the HNSW index with pgvector's iterative scan in
  ``strict_order``, the scope (tenant, active, ``event_key <= as_of``) applied as the filter
  of that scan, so every ``limit`` slot still goes to an eligible row.
* Dedupe: a partial UNIQUE index on ``(scope, coalesce(author, ''), text_hash)`` over active
  rows is the guarantee; a per-scope transaction advisory lock serialises writers of one
  scope (as SQLite's ``BEGIN IMMEDIATE`` does), which keeps ids in commit order per scope,
  avoids deadlocks between batches that overlap in different orders, and lets the insert
  skip duplicates with ``NOT EXISTS`` instead of burning sequence values on conflicts.
* Schema: versioned ``Migration`` objects, applied under ``pg_advisory_xact_lock`` so several
  processes opening a fresh database at once create it exactly once.

``psycopg`` (3), ``psycopg_pool`` and ``pgvector`` are imported lazily, so ``mempp`` imports
without the ``postgres`` extra and says how to install it when a URL asks for this engine.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.dates import now_key
from mempp.errors import EncoderMismatch, StoreError
from mempp.query import LexicalQuery
from mempp.records import AddResult, Document, Record, State
from mempp.store.migrations import Migration, newest, pending
from mempp.store.sqlite import text_hash

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

INSTALL_HINT = "pip install 'mempp[postgres]'"

# Advisory-lock key space: (class, key) pairs of int4. The class spells "memp" so other
# applications sharing the database are unlikely to collide with it.
_LOCK_CLASS_SCHEMA = 0x6D656D70
_LOCK_CLASS_WRITE = 0x6D656D71

POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8
CONNECT_TIMEOUT_S = 10
# pgvector's HNSW index handles at most 2000 dimensions of ``vector``; wider encoders are
# searched by exact scan only.
HNSW_MAX_DIM = 2000
# hnsw.ef_search accepts 1..1000.
EF_SEARCH_CEILING = 1000

_FROZEN_COLUMNS = (
    "id, scope, text, text_hash, author, event_date, event_key, tags, source, "
    "ingested_at, ingested_key, embedding"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "records, full text, tags, append-only triggers",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            # A tsvector holds at most 1 MB; to_tsvector raises past that (a document of
            # ~100k distinct words). Rather than refuse the document and its whole batch,
            # index the longest prefix that fits (halving); the text itself stays whole.
            # IMMUTABLE as to_tsvector(regconfig, text) is, so it can feed a generated column.
            """CREATE FUNCTION mempp_tsvector(body text) RETURNS tsvector
                LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
            DECLARE
                keep integer := length(body);
            BEGIN
                LOOP
                    BEGIN
                        RETURN to_tsvector('english', left(body, keep));
                    EXCEPTION WHEN program_limit_exceeded THEN
                        keep := keep / 2;
                    END;
                END LOOP;
            END $$""",
            """CREATE TABLE mempp_meta (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL)""",
            # The primary key leads with scope (and every other index and foreign key carries
            # it) so the table can be distributed by scope (Citus) without schema changes.
            """CREATE TABLE records (
                id BIGINT GENERATED ALWAYS AS IDENTITY,
                scope TEXT NOT NULL,
                text TEXT NOT NULL,
                text_hash BYTEA NOT NULL,
                author TEXT,
                event_date TEXT,
                event_key BIGINT,
                tags TEXT[] NOT NULL DEFAULT '{}',
                source TEXT,
                ingested_at TIMESTAMPTZ NOT NULL,
                ingested_key BIGINT NOT NULL,
                state TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
                superseded_by BIGINT,
                embedding vector NOT NULL,
                tsv tsvector GENERATED ALWAYS AS (mempp_tsvector(text)) STORED,
                PRIMARY KEY (scope, id),
                FOREIGN KEY (scope, superseded_by) REFERENCES records (scope, id))""",
            # A typical row (text, tsvector, a 1.5 kB vector at 384-d) is past the default
            # 2 kB TOAST threshold, and every value moved out of line costs a TOAST lookup
            # per row scored: the vector for an exact scan (2x slower at 100k rows, measured),
            # the tsvector for ts_rank_cd (~1.5x). Keep rows up to a page whole; for larger
            # rows (big documents) keep the vector (MAIN) and move text and tsvector out.
            "ALTER TABLE records SET (toast_tuple_target = 8160)",
            "ALTER TABLE records ALTER COLUMN embedding SET STORAGE MAIN",
            "CREATE INDEX records_scope_state_date ON records (scope, state, event_key)",
            """CREATE UNIQUE INDEX records_dedupe
                ON records (scope, coalesce(author, ''), text_hash) WHERE state = 'active'""",
            "CREATE INDEX records_tsv ON records USING gin (tsv)",
            """CREATE TABLE record_tags (
                scope TEXT NOT NULL,
                label TEXT NOT NULL,
                record_id BIGINT NOT NULL,
                PRIMARY KEY (scope, label, record_id),
                FOREIGN KEY (scope, record_id) REFERENCES records (scope, id))""",
            """CREATE FUNCTION mempp_refuse_removal() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'mempp: records are append-only; % is refused', TG_OP
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE FUNCTION mempp_refuse_content_change() RETURNS trigger
                LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'mempp: a record''s content never changes; only its state may'
                    USING ERRCODE = 'integrity_constraint_violation';
            END $$""",
            """CREATE TRIGGER records_no_delete BEFORE DELETE ON records
                FOR EACH ROW EXECUTE FUNCTION mempp_refuse_removal()""",
            """CREATE TRIGGER records_no_truncate BEFORE TRUNCATE ON records
                FOR EACH STATEMENT EXECUTE FUNCTION mempp_refuse_removal()""",
            f"""CREATE TRIGGER records_content_frozen BEFORE UPDATE OF {_FROZEN_COLUMNS}
                ON records FOR EACH ROW EXECUTE FUNCTION mempp_refuse_content_change()""",
            """CREATE TRIGGER record_tags_no_delete BEFORE DELETE ON record_tags
                FOR EACH ROW EXECUTE FUNCTION mempp_refuse_removal()""",
            """CREATE TRIGGER record_tags_no_truncate BEFORE TRUNCATE ON record_tags
                FOR EACH STATEMENT EXECUTE FUNCTION mempp_refuse_removal()""",
            """CREATE TRIGGER record_tags_frozen BEFORE UPDATE ON record_tags
                FOR EACH ROW EXECUTE FUNCTION mempp_refuse_content_change()""",
        ),
    ),
)

_RECORD_COLUMNS = (
    "id, text, author, event_date, tags, source, scope, ingested_at, state, superseded_by"
)

# One statement per document, pipelined by ``executemany``: the row and its tag labels go in
# together, and ``NOT EXISTS`` sees rows inserted by earlier statements of the same batch.
# ``ON CONFLICT`` only matters for writers that bypass the scope lock (other tools).
_INSERT = """
WITH new AS (
    INSERT INTO records (scope, text, text_hash, author, event_date, event_key, tags, source,
                         ingested_at, ingested_key, embedding)
    SELECT %(scope)s, %(text)s, %(hash)s, %(author)s, %(event_date)s, %(event_key)s,
           %(tags)s::text[], %(source)s, %(ingested_at)s, %(ingested_key)s, %(embedding)s
    WHERE NOT EXISTS (
        SELECT 1 FROM records
        WHERE scope = %(scope)s AND coalesce(author, '') = %(author_key)s
          AND text_hash = %(hash)s AND state = 'active')
    ON CONFLICT (scope, (coalesce(author, '')), text_hash) WHERE state = 'active' DO NOTHING
    RETURNING id
), labels AS (
    INSERT INTO record_tags (scope, label, record_id)
    SELECT %(scope)s, label, new.id FROM new, unnest(%(labels)s::text[]) AS label
)
SELECT id FROM new
"""


def _import_driver() -> tuple[Any, Any, Any]:
    """psycopg, psycopg_pool and pgvector's psycopg adapter, or a StoreError saying how."""
    try:
        import pgvector.psycopg
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            f"the PostgreSQL engine needs psycopg 3, psycopg-pool and pgvector "
            f"(missing: {exc.name}); install them with: {INSTALL_HINT}"
        ) from None
    return psycopg, psycopg_pool, pgvector.psycopg


def mask_url(url: str) -> str:
    """The URL with any password (in the authority or the query string) replaced by ***."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "postgresql://(unparsable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and password:
            netloc = f"{user}:***@{hostinfo}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(key == "password" for key, _ in pairs):
            query = urllib.parse.urlencode(
                [(k, "***" if k == "password" else v) for k, v in pairs], safe="/*"
            )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _row_to_record(row: Sequence[Any]) -> Record:
    ingested: datetime = row[7]
    return Record(
        id=row[0],
        text=row[1],
        author=row[2],
        date=row[3],
        tags=tuple(row[4]),
        source=row[5],
        scope=row[6],
        ingested_at=ingested.astimezone(UTC).isoformat(),
        state=row[8],
        superseded_by=row[9],
    )


class PostgresStore:
    """A store in a PostgreSQL database with the pgvector extension.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/db?...``). The schema is
    created on first open. Tuning knobs are instance attributes so tests and benchmarks can
    move them: ``exact_scan_max_rows`` (eligible rows up to which the vector leg scans
    exactly) and ``hnsw_ef_search`` (the HNSW candidate list; raised to ``limit`` + a tie
    margin when a query asks for more).
    """

    exact_scan_max_rows: int = 10_000
    hnsw_ef_search: int = 100
    # Extra HNSW candidates fetched past ``limit`` so equal distances at the cut are ordered
    # by id like every other ranking.
    tie_margin: int = 16

    def __init__(self, url: str) -> None:
        psycopg, psycopg_pool, pgvector_psycopg = _import_driver()
        self._psycopg = psycopg
        self._pool_errors = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
        self.location = mask_url(url)
        kwargs = self._connect_kwargs(url)
        try:
            with psycopg.connect(url, **kwargs) as conn:
                self._migrate(conn)
                vector_info = psycopg.types.TypeInfo.fetch(conn, "vector")
        except psycopg.Error as exc:
            raise StoreError(f"cannot open {self.location}: {_first_line(exc)}") from None
        if vector_info is None:  # pragma: no cover - migration 1 creates it
            raise StoreError(f"{self.location}: the pgvector type 'vector' is missing")

        # pgvector-python exports register_vector(), which queries the type on every new
        # connection; register_vector_info() takes the type fetched above instead.
        register_info = getattr(pgvector_psycopg, "register_vector_info", None)
        if register_info is None:
            from pgvector.psycopg.vector import register_vector_info as register_info

        def configure(conn: psycopg.Connection[Any]) -> None:
            # The type oid is known; registering from it needs no query per connection.
            register_info(conn, vector_info)

        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            url,
            kwargs=kwargs,
            min_size=POOL_MIN_SIZE,
            max_size=POOL_MAX_SIZE,
            configure=configure,
            name="mempp",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg_pool.PoolTimeout:
            self._pool.close()
            raise StoreError(f"cannot connect to {self.location}: timed out") from None
        # Once bound, the encoder of a database never changes: cache it, saving a round
        # trip per search (Memory checks the encoder before every query).
        self._bound: tuple[str, int] | None = None

    # -- plumbing ---------------------------------------------------------------------
    def _connect_kwargs(self, url: str) -> dict[str, Any]:
        """Defaults for what the URL leaves unsaid; a malformed URL is a StoreError."""
        psycopg = self._psycopg
        try:
            params = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"not a valid PostgreSQL URL: {self.location} ({exc})") from None
        kwargs: dict[str, Any] = {"autocommit": False}
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in params:
            kwargs["application_name"] = "mempp"
        return kwargs

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection holding one transaction: committed on success, else rolled back.

        Driver and pool failures become ``StoreError`` (lost server, pool exhausted, ...);
        errors mempp raises on purpose pass through.
        """
        psycopg = self._psycopg
        try:
            with self._pool.connection() as conn:
                yield conn
        except self._pool_errors as exc:
            raise StoreError(f"{self.location}: no database connection ({exc})") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {_first_line(exc)}") from None

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        psycopg = self._psycopg
        with conn.transaction():
            # Everything below, including CREATE ... IF NOT EXISTS (which races on the
            # catalog's unique indexes), runs with the schema lock held.
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
            conn.execute(
                """CREATE TABLE IF NOT EXISTS mempp_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL)"""
            )
            applied = {row[0] for row in conn.execute("SELECT version FROM mempp_migrations")}
            if applied and max(applied) > newest(MIGRATIONS):
                raise StoreError(
                    f"{self.location} was written by a newer mempp (schema {max(applied)}); "
                    "upgrade mempp to open it"
                )
            for migration in pending(MIGRATIONS, applied):
                for statement in migration.statements:
                    try:
                        conn.execute(statement)
                    except (
                        psycopg.errors.FeatureNotSupported,
                        psycopg.errors.UndefinedFile,
                    ) as exc:
                        raise StoreError(
                            f"{self.location}: the pgvector extension is not installed on "
                            f"this server ({_first_line(exc)})"
                        ) from None
                    except psycopg.errors.InsufficientPrivilege as exc:
                        raise StoreError(
                            f"{self.location}: not allowed to set up the mempp schema "
                            f"({_first_line(exc)}); ask an administrator to run "
                            "CREATE EXTENSION vector, or connect as the database owner"
                        ) from None
                conn.execute(
                    "INSERT INTO mempp_migrations (version, name, applied_at) "
                    "VALUES (%s, %s, now())",
                    (migration.version, migration.name),
                )

    def close(self) -> None:
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    def schema_version(self) -> int:
        with self._connection() as conn:
            return conn.execute("SELECT max(version) FROM mempp_migrations").fetchone()[0]

    # -- encoder identity -------------------------------------------------------------
    def encoder(self) -> tuple[str, int] | None:
        if self._bound is not None:
            return self._bound
        with self._connection() as conn:
            rows = dict(
                conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
        if "encoder" not in rows:
            return None
        self._bound = (rows["encoder"], int(rows["dim"]))
        return self._bound

    def bind_encoder(self, name: str, dim: int) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise StoreError(f"an encoder dimension must be a positive integer, got {dim!r}")
        sql = self._psycopg.sql
        with self._connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS_SCHEMA,))
            found = dict(
                conn.execute(
                    "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
                ).fetchall()
            )
            if "encoder" not in found:
                # First encoder: from now on the database itself refuses a vector of another
                # size, and the ANN index can be built (it needs a fixed dimension).
                conn.execute(
                    sql.SQL(
                        "ALTER TABLE records ADD CONSTRAINT records_embedding_dim "
                        "CHECK (vector_dims(embedding) = {})"
                    ).format(sql.Literal(dim))
                )
                if dim <= HNSW_MAX_DIM:
                    conn.execute(
                        sql.SQL(
                            "CREATE INDEX records_embedding_hnsw ON records "
                            "USING hnsw ((embedding::vector({})) vector_cosine_ops)"
                        ).format(sql.Literal(dim))
                    )
                conn.execute(
                    "INSERT INTO mempp_meta (key, value) VALUES ('encoder', %s), ('dim', %s)",
                    (name, str(dim)),
                )
                return
        if (found["encoder"], int(found["dim"])) != (name, dim):
            raise EncoderMismatch(
                f"{self.location} holds vectors of encoder {found['encoder']} "
                f"({found['dim']}-d); this Memory uses {name} ({dim}-d)"
            )

    def _bound_dim(self) -> int | None:
        bound = self.encoder()
        return None if bound is None else bound[1]

    # -- write path -------------------------------------------------------------------
    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[bool]:
        if not docs:
            return []
        keys = [(doc.author or "", text_hash(doc.text)) for doc in docs]
        with self._connection() as conn:
            # One probe of the dedupe index per (author, hash) pair.
            found = {
                (row[0], bytes(row[1]))
                for row in conn.execute(
                    """SELECT k.author_key, k.hash
                       FROM unnest(%s::text[], %s::bytea[]) AS k(author_key, hash)
                       WHERE EXISTS (
                           SELECT 1 FROM records
                           WHERE scope = %s AND state = 'active'
                             AND coalesce(author, '') = k.author_key AND text_hash = k.hash)""",
                    ([k[0] for k in keys], [k[1] for k in keys], scope),
                )
            }
        return [key in found for key in keys]

    def insert(self, scope: str, docs: Sequence[Document], vectors: np.ndarray) -> list[AddResult]:
        if len(docs) != len(vectors):
            raise ValueError("one vector per document is required")
        if not docs:
            return []
        ingested_at = datetime.now(UTC)
        ingested_key = now_key()
        params = [
            {
                "scope": scope,
                "text": doc.text,
                "hash": text_hash(doc.text),
                "author": doc.author,
                "author_key": doc.author or "",
                "event_date": doc.date.text if doc.date else None,
                "event_key": doc.date.key if doc.date else None,
                "tags": list(doc.tags),
                "source": doc.source,
                "ingested_at": ingested_at,
                "ingested_key": ingested_key,
                "embedding": np.asarray(vector, dtype=np.float32),
                "labels": sorted(doc.tag_labels()),
            }
            for doc, vector in zip(docs, vectors, strict=True)
        ]
        results: list[AddResult] = []
        with self._connection() as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS_WRITE, scope)
            )
            with conn.cursor() as cursor:
                cursor.executemany(_INSERT, params, returning=True)
                while True:
                    row = cursor.fetchone()
                    results.append(AddResult(row[0]) if row else AddResult(None, "duplicate"))
                    if not cursor.nextset():
                        break
        return results

    def set_state(
        self, scope: str, ids: Collection[int], state: State, superseded_by: int | None
    ) -> None:
        if not ids:
            return
        psycopg = self._psycopg
        try:
            with self._pool.connection() as conn:
                conn.execute(
                    """UPDATE records SET state = %s, superseded_by = %s
                       WHERE scope = %s AND id = ANY(%s::bigint[])""",
                    (state, superseded_by, scope, [int(i) for i in ids]),
                )
        except psycopg.errors.UniqueViolation:
            # Only reachable by re-activating an archived row whose text an active row of
            # the same author already holds: that would make a duplicate.
            raise StoreError(
                f"{self.location}: cannot make a row active while an active row of the same "
                "scope and author has the same text"
            ) from None
        except psycopg.errors.ForeignKeyViolation:
            raise StoreError(
                f"{self.location}: superseded_by={superseded_by} is not a record of scope {scope!r}"
            ) from None
        except psycopg.errors.CheckViolation:
            raise StoreError(f"{self.location}: invalid state {state!r}") from None
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: {_first_line(exc)}") from None
        except self._pool_errors as exc:
            raise StoreError(f"{self.location}: no database connection ({exc})") from None

    # -- reads ------------------------------------------------------------------------
    def get(self, scope: str, ids: Collection[int]) -> dict[int, Record]:
        if not ids:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_RECORD_COLUMNS} FROM records
                    WHERE scope = %s AND id = ANY(%s::bigint[])""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return {row[0]: _row_to_record(row) for row in rows}

    def count(self, scope: str, *, active_only: bool = True) -> int:
        condition = " AND state = 'active'" if active_only else ""
        with self._connection() as conn:
            return conn.execute(
                f"SELECT count(*) FROM records WHERE scope = %s{condition}", (scope,)
            ).fetchone()[0]

    def scopes(self) -> list[str]:
        with self._connection() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT scope FROM records")]

    def lexical(self, scope: str, query: LexicalQuery, as_of: int | None, limit: int) -> list[int]:
        terms = [term.replace("\x00", "") for term in query.terms]
        terms = [term for term in terms if term.strip()]
        if not terms or limit <= 0:
            return []
        sql = self._psycopg.sql
        joiner = sql.SQL(" && " if query.mode == "conjunctive" else " || ")
        # The SQL text depends only on len(terms); every term is a bound parameter.
        tsquery = joiner.join(
            sql.SQL("plainto_tsquery('english', {})").format(sql.Placeholder()) for _ in terms
        )
        date_condition = sql.SQL(" AND r.event_key <= %s" if as_of is not None else "")
        statement = sql.SQL(
            """SELECT r.id FROM records r, (SELECT {tsquery} AS q) query
               WHERE r.tsv @@ query.q AND r.scope = %s AND r.state = 'active'{date}
               ORDER BY ts_rank_cd(r.tsv, query.q) DESC, r.id DESC LIMIT %s"""
        ).format(tsquery=tsquery, date=date_condition)
        params: list[Any] = [*terms, scope]
        if as_of is not None:
            params.append(as_of)
        params.append(limit)
        with self._connection() as conn:
            return [row[0] for row in conn.execute(statement, params)]

    def tagged(self, scope: str, labels: Sequence[str], as_of: int | None, limit: int) -> list[int]:
        if not labels or limit <= 0:
            return []
        date_condition = " AND r.event_key <= %(as_of)s" if as_of is not None else ""
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM record_tags t
                    JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %(scope)s AND t.label = ANY(%(labels)s::text[])
                      AND r.state = 'active'{date_condition}
                    GROUP BY r.id ORDER BY count(*) DESC, r.id DESC LIMIT %(limit)s""",
                {
                    "scope": scope,
                    "labels": [label.replace("\x00", "") for label in labels],
                    "as_of": as_of,
                    "limit": limit,
                },
            ).fetchall()
        return [row[0] for row in rows]

    def nearest(self, scope: str, vector: np.ndarray, as_of: int | None, limit: int) -> list[int]:
        if limit <= 0:
            return []
        dim = self._bound_dim()
        if dim is None:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != dim:
            raise EncoderMismatch(
                f"{self.location} holds {dim}-d vectors; the query vector has {query.shape[0]}"
            )
        # The HNSW path orders by the index's own expression (the cast), so the planner can
        # walk the index; the exact path orders by the bare column, which no index matches,
        # so it always computes every eligible distance (in parallel workers when the
        # planner wants). Both give the same numbers. ``dim`` is an int from mempp_meta.
        distance = f"embedding::vector({int(dim)}) <=> %(q)s"
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        params = {"scope": scope, "as_of": as_of, "q": query, "limit": limit}
        with self._connection() as conn:
            # Counting stops at the threshold, so this costs at most that many index entries.
            eligible = conn.execute(
                f"""SELECT count(*) FROM (
                        SELECT 1 FROM records
                        WHERE scope = %(scope)s AND state = 'active'{date_condition}
                        LIMIT %(cap)s) eligible""",
                {**params, "cap": self.exact_scan_max_rows + 1},
            ).fetchone()[0]
            if eligible == 0:
                return []
            if eligible > self.exact_scan_max_rows and dim <= HNSW_MAX_DIM:
                found = self._nearest_hnsw(conn, distance, date_condition, params)
                # The iterative scan gives up after hnsw.max_scan_tuples; when it comes back
                # short, an exact scan keeps the promise that all slots go to eligible rows.
                if len(found) >= limit:
                    return found
            return self._nearest_exact(conn, date_condition, params)

    @staticmethod
    def exact_sql(date_condition: str) -> str:
        """The exact strategy's statement (public so tests can EXPLAIN it)."""
        return f"""SELECT id FROM records
                   WHERE scope = %(scope)s AND state = 'active'{date_condition}
                   ORDER BY embedding <=> %(q)s, id DESC LIMIT %(limit)s"""

    @staticmethod
    def hnsw_sql(distance: str, date_condition: str) -> str:
        """The HNSW strategy's statement (public so tests can EXPLAIN it)."""
        # The inner ORDER BY is the index's own expression, so it becomes an HNSW index scan
        # with the scope as its filter; the outer sort only orders equal distances by id.
        return f"""SELECT id FROM (
                       SELECT id, {distance} AS distance FROM records
                       WHERE scope = %(scope)s AND state = 'active'{date_condition}
                       ORDER BY {distance} LIMIT %(fetch)s) candidates
                   ORDER BY distance, id DESC LIMIT %(limit)s"""

    def _nearest_exact(
        self, conn: psycopg.Connection[Any], date_condition: str, params: dict[str, Any]
    ) -> list[int]:
        rows = conn.execute(self.exact_sql(date_condition), params)
        return [row[0] for row in rows]

    def _nearest_hnsw(
        self,
        conn: psycopg.Connection[Any],
        distance: str,
        date_condition: str,
        params: dict[str, Any],
    ) -> list[int]:
        fetch = params["limit"] + self.tie_margin
        ef_search = min(EF_SEARCH_CEILING, max(self.hnsw_ef_search, fetch))
        # strict_order: results stay in exact distance order while the scan keeps going
        # past filtered-out rows, so the WHERE clause acts before the LIMIT.
        conn.execute(
            """SELECT set_config('hnsw.iterative_scan', 'strict_order', true),
                      set_config('hnsw.ef_search', %s, true)""",
            (str(ef_search),),
        )
        rows = conn.execute(self.hnsw_sql(distance, date_condition), {**params, "fetch": fetch})
        return [row[0] for row in rows]

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, int]:
        if not ids:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                """SELECT id, coalesce(event_key, ingested_key) FROM records
                   WHERE scope = %s AND id = ANY(%s::bigint[])""",
                (scope, [int(i) for i in ids]),
            ).fetchall()
        return dict(rows)

    def latest_unmatched(
        self, scope: str, exclude: Collection[int], as_of: int | None, limit: int
    ) -> list[int]:
        if limit <= 0:
            return []
        date_condition = " AND event_key <= %(as_of)s" if as_of is not None else ""
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT id FROM records
                    WHERE scope = %(scope)s AND state = 'active'{date_condition}
                      AND NOT (id = ANY(%(exclude)s::bigint[]))
                    ORDER BY id DESC LIMIT %(limit)s""",
                {
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                    "exclude": [int(i) for i in exclude],
                },
            ).fetchall()
        return [row[0] for row in rows]
