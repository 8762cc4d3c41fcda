"""The PostgreSQL engine's context index (opt-in), as SQLite keeps it
(``mempp.store.sqlite.context``; the rule in ``mempp.store.context``): a table of float32
context vectors that exists only while the optional index ``context`` is enabled
(``mempp.store.indexes``; its statements and check below, registered in
``mempp.store.postgres.indexes``; an erasure calls ``drop_contexts_of``), the same thread
walk for a record's predecessors, and the context leg over an in-RAM int8 copy of every
scope's contexts (``mempp.index.vectors.ExactVectorIndex``, rescored from the table), of
which PostgreSQL keeps the active rows that meet the search's filters, as for the vector leg.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from mempp.errors import StoreError
from mempp.filters import NO_FILTERS, Filters
from mempp.index.vectors import UNDATED, ExactVectorIndex
from mempp.store import context as common
from mempp.store.context import (
    CONTEXT_WINDOW,
    DEFAULT_DEPTH,
    FIRST_EXTRA,
    ContextRule,
    ContextSource,
    Encode,
    SumSource,
    context_check,
    pick_members,
    window_picks,
)
from mempp.store.filter_sql import filter_condition
from mempp.store.indexes import meta_key
from mempp.store.postgres.records import _as_float32
from mempp.store.postgres.replica_reads import _ReplicasMixin
from mempp.store.verify import Check

CREATE = (
    """CREATE TABLE record_context (
        record_id bigint PRIMARY KEY,
        members bigint[] NOT NULL,
        embedding bytea NOT NULL)""",
    f"""INSERT INTO mempp_meta (key, value)
        VALUES ('context_depth', '{DEFAULT_DEPTH}'), ('context_rule', '{ContextRule().to_meta()}')
        ON CONFLICT (key) DO NOTHING""",
)
DROP = (
    "DROP TABLE record_context",
    """DELETE FROM mempp_meta
       WHERE key IN ('context_depth', 'context_rule', 'context_encoder', 'context_epoch')""",
)
_EPOCH = "context_epoch"


def _has_table(conn: Any) -> bool:
    return conn.execute("SELECT to_regclass('record_context') IS NOT NULL").fetchone()[0]


def _bump(conn: Any) -> None:
    conn.execute(
        """INSERT INTO mempp_meta (key, value) VALUES (%s, '1')
           ON CONFLICT (key) DO UPDATE SET value = (mempp_meta.value::bigint + 1)::text""",
        (_EPOCH,),
    )


def _meta(conn: Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM mempp_meta WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def drop_contexts_of(conn: Any, scope: str, erased: Sequence[int]) -> list[int]:
    """Inside an erasure, before the rows leave their threads: delete the contexts of the
    erased rows and of every row whose context read one of them; returns the latter (for
    ``remake_contexts`` once the erased rows are gone)."""
    if not erased or not _has_table(conn):
        return []
    # The lock write_rows takes, taken before this DELETE's weaker one: two erasures in
    # different scopes (which the scope lock does not order) would otherwise each hold the
    # weaker lock while waiting for the other's to take the stronger one, a deadlock.
    conn.execute("LOCK TABLE record_context IN EXCLUSIVE MODE")
    deleted = conn.execute(
        """DELETE FROM record_context WHERE record_id = ANY(%(ids)s::bigint[])
              OR record_id IN (
                  SELECT c.record_id FROM records e
                  JOIN records r ON r.scope = e.scope AND r.thread = e.thread AND r.id > e.id
                  JOIN record_context c ON c.record_id = r.id
                  WHERE e.scope = %(scope)s AND e.id = ANY(%(ids)s::bigint[])
                    AND e.thread IS NOT NULL AND e.id = ANY(c.members))
           RETURNING record_id""",
        {"ids": [int(i) for i in erased], "scope": scope},
    ).fetchall()
    _bump(conn)
    gone = {int(i) for i in erased}
    return sorted(row[0] for row in deleted if row[0] not in gone)


def remake_contexts(conn: Any, ids: Sequence[int]) -> None:
    """Inside an erasure, once its rows have left their threads: the contexts it deleted
    made again under the sum rule (the text rule needs the encoder: ``Memory.redact``
    encodes them after it)."""
    write_with_records(conn, ids, None)


def check(conn: Any) -> Check:
    """Every unerased record has a context of the store's encoder."""
    missing = conn.execute(
        """SELECT count(*) FROM records r
           WHERE NOT EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = r.id)
             AND NOT EXISTS (SELECT 1 FROM record_context c WHERE c.record_id = r.id)"""
    ).fetchone()[0]
    encoder = _meta(conn, "context_encoder")
    bound = [_meta(conn, "encoder"), int(_meta(conn, "dim") or 0)]
    stored = conn.execute("SELECT count(*) FROM record_context").fetchone()[0]
    return context_check(stored, missing, None if encoder is None else json.loads(encoder), bound)


def rule_of(conn: Any) -> ContextRule | None:
    """The context rule as this transaction sees it (None while the index is off)."""
    rows = dict(
        conn.execute(
            """SELECT key, value FROM mempp_meta
               WHERE key IN (%s, 'context_depth', 'context_rule')""",
            (meta_key("context"),),
        ).fetchall()
    )
    if meta_key("context") not in rows:
        return None
    return ContextRule.from_meta(rows.get("context_depth"), rows.get("context_rule"))


def sources(conn: Any, ids: Collection[int], rule: ContextRule) -> list[ContextSource]:
    """The sources of the contexts of ``ids`` by the rule (``mempp.store.context``), as this
    transaction sees the rows (inside a write, its own batch's rows included)."""
    found = []
    records = conn.execute(
        """SELECT id, scope, thread, event_key, ingested_key, text FROM records r
           WHERE id = ANY(%s::bigint[])
             AND NOT EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = r.id)
           ORDER BY id""",
        (sorted({int(i) for i in ids}),),
    ).fetchall()
    for row_id, scope, thread, event_key, ingested_key, text in records:
        window = []
        if thread is not None:
            window = conn.execute(
                """SELECT id, event_key, ingested_key FROM records
                   WHERE scope = %(scope)s AND thread = %(thread)s
                     AND coalesce(event_key, ingested_key) <= %(place)s
                   ORDER BY coalesce(event_key, ingested_key) DESC, id DESC
                   LIMIT %(window)s""",
                {
                    "scope": scope,
                    "thread": thread,
                    "place": ingested_key if event_key is None else event_key,
                    "window": CONTEXT_WINDOW,
                },
            ).fetchall()
        picked = pick_members((row_id, event_key, ingested_key), window, rule.depth)
        texts = dict(
            conn.execute(
                "SELECT id, text FROM records WHERE id = ANY(%s::bigint[])", (picked,)
            ).fetchall()
        )
        vectors = None
        if picked and rule.kind == "sum":
            # Binary results: pgvector's binary loader copies the floats.
            with conn.cursor(binary=True) as cursor:
                stored = dict(
                    cursor.execute(
                        "SELECT id, embedding FROM records WHERE id = ANY(%s::bigint[])",
                        ([*picked, row_id],),
                    ).fetchall()
                )
            vectors = np.stack([_as_float32(stored[m]) for m in [*picked, row_id]])
        found.append(
            ContextSource(row_id, tuple(picked), tuple(texts[m] for m in picked), text, vectors)
        )
    return found


def sum_sources(conn: Any, ids: Collection[int], depth: int) -> dict[int, SumSource]:
    """The sum rule's sources of ``ids`` (``ContextStore.sum_sources``), as SQLite reads them:
    the first ``depth + FIRST_EXTRA`` rows of each record's thread walk in one statement, a record
    whose predecessors lie further back read by ``sources``, then one read of the vectors."""
    rows = conn.execute(
        """SELECT c.id, c.event_key, c.ingested_key,
                  (SELECT count(*) FROM (
                      SELECT 1 FROM records a
                      WHERE a.scope = c.scope AND a.thread = c.thread
                        AND coalesce(a.event_key, a.ingested_key)
                            = coalesce(c.event_key, c.ingested_key)
                        AND a.id > c.id
                      LIMIT %(window)s) later),
                  w.id, w.event_key, w.ingested_key
           FROM records c CROSS JOIN LATERAL (
               SELECT m.id, m.event_key, m.ingested_key FROM records m
               WHERE m.scope = c.scope AND m.thread = c.thread
                 AND coalesce(m.event_key, m.ingested_key)
                     <= coalesce(c.event_key, c.ingested_key)
                 AND (coalesce(m.event_key, m.ingested_key)
                      < coalesce(c.event_key, c.ingested_key) OR m.id <= c.id)
               ORDER BY coalesce(m.event_key, m.ingested_key) DESC, m.id DESC
               LIMIT %(first)s) w
           WHERE c.id = ANY(%(ids)s::bigint[]) AND c.thread IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = c.id)""",
        {
            "ids": sorted({int(i) for i in ids}),
            "first": depth + FIRST_EXTRA,
            "window": CONTEXT_WINDOW,
        },
    ).fetchall()
    picked, whole = window_picks(rows, depth, depth + FIRST_EXTRA)
    for source in sources(conn, whole, ContextRule("sum", depth)) if whole else []:
        if source.members:
            picked[source.record_id] = list(source.members)
    wanted = sorted({m for members in picked.values() for m in members} | set(picked))
    with conn.cursor(binary=True) as cursor:  # pgvector's binary loader copies the floats
        stored = dict(
            cursor.execute(
                "SELECT id, embedding FROM records WHERE id = ANY(%s::bigint[])", (wanted,)
            ).fetchall()
        )
    return {
        row: (tuple(members), np.stack([_as_float32(stored[m]) for m in [*members, row]]))
        for row, members in picked.items()
    }


def write_rows(
    conn: Any, encoder: tuple[str, int], sources: Sequence[ContextSource], vectors: np.ndarray
) -> None:
    """Inside a write transaction: store the contexts of ``sources`` (a row erased since its
    source was read stays out)."""
    vectors = np.asarray(vectors, dtype="<f4").reshape(len(sources), encoder[1])
    named = json.dumps([encoder[0], encoder[1]])
    conn.execute("LOCK TABLE record_context IN EXCLUSIVE MODE")
    bound = _meta(conn, "context_encoder")
    if bound is not None and bound != named:
        conn.execute("DELETE FROM record_context")
    conn.execute(
        """INSERT INTO mempp_meta (key, value) VALUES ('context_encoder', %s)
           ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
        (named,),
    )
    newest = conn.execute("SELECT max(record_id) FROM record_context").fetchone()[0]
    wanted = [s.record_id for s in sources] + [m for s in sources for m in s.members]
    erased = {
        row[0]
        for row in conn.execute(
            "SELECT record_id FROM redactions WHERE record_id = ANY(%s::bigint[])", (wanted,)
        )
    }
    rows = [
        (s.record_id, list(s.members), vector.tobytes() if s.members else b"")
        for s, vector in zip(sources, vectors, strict=True)
        if s.record_id not in erased and not erased.intersection(s.members)
    ]
    with conn.cursor() as cursor:
        cursor.executemany(
            """INSERT INTO record_context (record_id, members, embedding)
               VALUES (%s, %s, %s)
               ON CONFLICT (record_id) DO UPDATE
               SET members = excluded.members, embedding = excluded.embedding""",
            rows,
        )
    if (bound is not None and bound != named) or (
        newest is not None and rows and min(r[0] for r in rows) <= newest
    ):
        _bump(conn)


def write_with_records(conn: Any, ids: Sequence[int], encode: Encode | None) -> None:
    """Inside the transaction that wrote the records ``ids``: their contexts (the engines'
    common rule, ``mempp.store.context.write_with_records``)."""
    common.write_with_records(
        conn,
        ids,
        encode,
        rule_of=rule_of,
        has_table=_has_table,
        sources=sources,
        write_rows=write_rows,
    )


class _ContextMixin(_ReplicasMixin):
    """The context index: its switch, its rows, its leg."""

    _ctx_index: ExactVectorIndex | None = None
    _ctx_seen: str = ""
    _ctx_lock = threading.Lock()

    def _write_contexts(self, conn: Any, ids: Sequence[int], encode: Encode | None) -> None:
        write_with_records(conn, ids, encode)

    def context_depth(self) -> int | None:
        rule = self.context_rule()
        return None if rule is None else rule.depth

    def context_rule(self) -> ContextRule | None:
        with self._connection() as conn:
            return rule_of(conn)

    def context_encoder(self) -> tuple[str, int] | None:
        with self._connection() as conn:
            value = _meta(conn, "context_encoder")
        if value is None:
            return None
        name, dim = json.loads(value)
        return str(name), int(dim)

    def set_context_rule(self, rule: ContextRule) -> None:
        with self._connection() as conn:
            conn.execute("LOCK TABLE mempp_meta IN EXCLUSIVE MODE")
            before = ContextRule.from_meta(
                _meta(conn, "context_depth"), _meta(conn, "context_rule")
            )
            if before != rule and _has_table(conn):
                conn.execute("DELETE FROM record_context")  # to be made again
                _bump(conn)
            with conn.cursor() as cursor:
                cursor.executemany(
                    """INSERT INTO mempp_meta (key, value) VALUES (%s, %s)
                       ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
                    [("context_depth", str(rule.depth)), ("context_rule", rule.to_meta())],
                )
        self._ctx_index = None

    def context_pending(self, after: int, limit: int) -> list[int]:
        with self._connection() as conn:
            if not _has_table(conn):
                return []
            rows = conn.execute(
                """SELECT r.id FROM records r
                   WHERE r.id > %s
                     AND NOT EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = r.id)
                     AND NOT EXISTS (SELECT 1 FROM record_context c WHERE c.record_id = r.id)
                   ORDER BY r.id LIMIT %s""",
                (after, limit),
            ).fetchall()
        return [row[0] for row in rows]

    def context_sources(self, ids: Collection[int]) -> list[ContextSource]:
        with self._connection() as conn:
            rule = rule_of(conn)
            if rule is None or not ids:
                return []
            return sources(conn, ids, rule)

    def sum_sources(self, ids: Collection[int], depth: int) -> dict[int, SumSource]:
        if not ids:
            return {}
        with self._connection() as conn:
            return sum_sources(conn, ids, depth)

    def store_contexts(
        self, encoder: tuple[str, int], sources: Sequence[ContextSource], vectors: np.ndarray
    ) -> None:
        if not sources:
            return
        with self._connection() as conn:
            if not _has_table(conn):
                raise StoreError(f"{self.location}: the context index is off")
            write_rows(conn, encoder, sources, vectors)

    def context_members(self, ids: Collection[int]) -> dict[int, tuple[int, ...]]:
        if not ids:
            return {}
        with self._connection() as conn:
            if not _has_table(conn):
                return {}
            rows = conn.execute(
                """SELECT record_id, members FROM record_context
                   WHERE record_id = ANY(%s::bigint[])""",
                ([int(i) for i in ids],),
            ).fetchall()
        return {row: tuple(members) for row, members in rows}

    def context_count(self) -> tuple[int, int]:
        with self._connection() as conn:
            records = conn.execute(
                """SELECT count(*) FROM records r
                   WHERE NOT EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = r.id)"""
            ).fetchone()[0]
            if not _has_table(conn):
                return 0, records
            stored = conn.execute("SELECT count(*) FROM record_context").fetchone()[0]
        return stored, records

    def contextual(
        self,
        scope: str,
        vector: np.ndarray,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        index = self._context_index()
        if index is None or limit <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if filters.is_empty:
            return self._kept_in_order(
                scope,
                lambda n: np.asarray(index.search(query, scope, as_of, n), dtype=np.int64),
                limit,
                filters,
            )
        # Under filters, the ids they keep (as the vector leg reads them), ranked among.
        where, params = filter_condition(filters, "records", "postgres")
        date = (" AND event_key <= %(as_of)s" if as_of is not None else "") + where
        with self._connection() as conn:
            kept = conn.execute(
                f"""SELECT string_agg(id::text, ' ' ORDER BY id) FROM records
                    WHERE scope = %(scope)s AND state = 'active'{date}""",
                {"scope": scope, "as_of": as_of, **params},
            ).fetchone()[0]
        allowed = np.fromstring(kept, dtype=np.int64, sep=" ") if kept else np.empty(0, np.int64)
        return index.search(query, scope, as_of, limit, allowed)

    def _context_rows(self, ids: np.ndarray) -> np.ndarray:
        index = self._ctx_index
        assert index is not None
        with self._connection() as conn:
            found = dict(
                conn.execute(
                    """SELECT record_id, embedding FROM record_context
                       WHERE record_id = ANY(%s::bigint[])""",
                    (ids.tolist(),),
                ).fetchall()
            )
        zero = bytes(4 * index.dim)  # a row deleted since: it scores nothing
        blob = b"".join(bytes(found.get(i, zero)) for i in ids.tolist())
        return np.frombuffer(blob, dtype="<f4").reshape(len(ids), index.dim)

    def _context_index(self) -> ExactVectorIndex | None:
        """The in-RAM copy of every scope's contexts, caught up with the table (every row
        active to it: the leg keeps the active ones); None while the index is off or holds
        another encoder's contexts than the store's."""
        with self._ctx_lock, self._connection() as conn:
            encoder = _meta(conn, "context_encoder")
            if encoder is None or not _has_table(conn):
                self._ctx_index = None
                return None
            name, dim = json.loads(encoder)
            if (name, str(dim)) != (_meta(conn, "encoder"), _meta(conn, "dim")):
                return None  # re-encoded since: the leg waits for the contexts' rebuild
            seen = _meta(conn, _EPOCH) or "0"
            index = self._ctx_index
            if index is None or index.dim != int(dim) or seen != self._ctx_seen:
                index = ExactVectorIndex(int(dim), exact_rows=self._context_rows)
            rows = conn.execute(
                """SELECT c.record_id, r.scope, coalesce(r.event_key, %s), c.embedding
                   FROM record_context c JOIN records r ON r.id = c.record_id
                   WHERE c.record_id > %s AND length(c.embedding) > 0
                       ORDER BY c.record_id""",
                (int(UNDATED), index.max_id),
            ).fetchall()
            if rows:
                ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                vectors = np.frombuffer(b"".join(bytes(r[3]) for r in rows), dtype="<f4")
                index.append(
                    ids,
                    vectors.reshape(len(rows), index.dim),
                    (r[1] for r in rows),
                    (None if r[2] == UNDATED else r[2] for r in rows),
                    (True for _ in rows),
                )
            self._ctx_index, self._ctx_seen = index, seen
            return index

    def context_eligible(
        self, scope: str, ids: Collection[int], as_of: int | None, filters: Filters = NO_FILTERS
    ) -> set[int]:
        """The rows of ``ids`` in the search's scope (active, ``as_of``, filters): the
        predecessors a context hit may credit."""
        if not ids:
            return set()
        filters_as_of = "" if as_of is None else " AND r.event_key <= %(as_of)s"
        where, params = filter_condition(filters, "r", "postgres")
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM unnest(%(ids)s::bigint[]) AS k(id)
                    JOIN records r ON r.scope = %(scope)s AND r.id = k.id
                    WHERE r.state = 'active'{filters_as_of}{where}""",
                {"ids": [int(i) for i in ids], "scope": scope, "as_of": as_of, **params},
            ).fetchall()
        return {row[0] for row in rows}
