"""The PostgreSQL engine's side of ``mempp dump`` / ``mempp restore`` (``SnapshotStore``):
every row as plain values, read in one REPEATABLE READ transaction through server-side
cursors (a page at a time, while writers go on), and the bulk write of a snapshot into an
empty database, id for id, in one transaction.

Ids are the snapshot's own (``OVERRIDING SYSTEM VALUE``); the identity sequences are moved
past them at the end, so the next row written gets the id the source store would have given.
The foreign keys are not deferrable: a row's ``superseded_by`` and a run's ``undone_by``,
which may name a row further on, are set once every row of their table is in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np

from mempp.errors import EncoderMismatch, InvalidInput
from mempp.index.analysis import terms_of
from mempp.records import text_hash
from mempp.store.base import SNAPSHOT_FIELDS
from mempp.store.postgres.bulk import HNSW_INDEX, hnsw_index_sql, hnsw_state
from mempp.store.postgres.records import _as_float32, _RecordsMixin

PAGE = 1000

_SELECTS = {
    "record": """SELECT r.id, r.scope, r.text, r.author, r.event_date, r.event_key, r.tags,
                        r.source, r.ingested_at, r.ingested_key, r.state, r.superseded_by,
                        r.thread, r.metadata,
                        ARRAY(SELECT t.label FROM record_tags t
                              WHERE t.scope = r.scope AND t.record_id = r.id ORDER BY t.label),
                        EXISTS (SELECT 1 FROM redactions x
                                WHERE x.scope = r.scope AND x.record_id = r.id),
                        {vector}
                 FROM records r WHERE {scoped} ORDER BY r.id""",
    "run": """SELECT id, scope, kind, dry_run, started_at, finished_at, settings, counts,
                     undoes, undone_by
              FROM consolidation_runs r WHERE {scoped} ORDER BY id""",
    "group": """SELECT scope, run_id, group_no, label, members, detail
                FROM consolidation_groups r WHERE {scoped} ORDER BY run_id, group_no""",
    "change": """SELECT id, scope, run_id, group_no, label, record_id, old_state,
                        old_superseded_by, new_state, new_superseded_by, merged_id
                 FROM consolidation_changes r WHERE {scoped} ORDER BY id""",
    "redaction": """SELECT scope, record_id, run_id, redacted_at, reason, actor
                    FROM redactions r WHERE {scoped} ORDER BY record_id""",
    "triple": """SELECT id, scope, record_id, subject, relation, object, subject_key,
                        object_key
                 FROM graph_triples r WHERE {scoped} ORDER BY id""",
    "extraction": """SELECT scope, record_id, extracted_at, model, triples
                     FROM graph_extractions r WHERE {scoped} ORDER BY record_id""",
    "key": """SELECT key_id, scope, role, label, created_at, revoked_at, secret_hash
              FROM api_keys r WHERE {scoped} ORDER BY key_id""",
}
_TIMES = ("started_at", "finished_at", "redacted_at", "extracted_at")
# Tables whose ids come from an identity sequence, moved past the restored ids at the end.
_IDENTITIES = ("records", "consolidation_runs", "consolidation_changes", "graph_triples")


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "id": row[0],
        "scope": row[1],
        "text": row[2],
        "author": row[3],
        "event_date": row[4],
        "event_key": row[5],
        "tags": list(row[6]),
        "source": row[7],
        "ingested_at": _iso(row[8]),
        "ingested_key": row[9],
        "state": row[10],
        "superseded_by": row[11],
        "thread": row[12],
        "metadata": row[13],
        "labels": list(row[14]),
        "redacted": bool(row[15]),
        "vector": None if row[16] is None else _as_float32(row[16]),
    }


def _plain(kind: str, row: tuple[Any, ...]) -> dict[str, Any]:
    fields = dict(zip(SNAPSHOT_FIELDS[kind], row, strict=True))
    for name in _TIMES:
        if name in fields:
            fields[name] = _iso(fields[name])
    if kind == "group":
        fields["members"] = [int(m) for m in fields["members"]]
    elif kind == "key":
        fields["secret_hash"] = bytes(fields["secret_hash"])
    return fields


class _Batches:
    """Statements of a restore, sent ``BATCH`` rows at a time by ``executemany`` (pipelined:
    one round trip per batch instead of one per row). Statements run in the order their SQL
    first appeared, so a record's row precedes its tag rows, and each kind the kinds it names."""

    BATCH = 500

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._pending: dict[str, list[tuple[Any, ...]]] = {}
        self._rows = 0

    def execute(self, sql: str, params: tuple[Any, ...]) -> None:
        self._pending.setdefault(sql, []).append(params)
        self._rows += 1
        if self._rows >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        with self._conn.cursor() as cursor:
            for sql, params in self._pending.items():
                cursor.executemany(sql, params)
        self._pending.clear()
        self._rows = 0


class _SnapshotMixin(_RecordsMixin):
    """Every row out (``snapshot``), every row in (``restore``)."""

    def is_empty(self) -> bool:
        with self._connection() as conn:
            return not conn.execute(
                """SELECT EXISTS (SELECT 1 FROM records) OR EXISTS (SELECT 1 FROM
                   consolidation_runs) OR EXISTS (SELECT 1 FROM api_keys)"""
            ).fetchone()[0]

    @contextmanager
    def snapshot(
        self, scopes: Collection[str] | None, *, vectors: bool
    ) -> Iterator[Iterator[tuple[str, dict[str, Any]]]]:
        with self._connection() as conn:
            # One transaction, one snapshot: every kind is read as the store was at its start.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield self._rows(conn, scopes, vectors)

    @staticmethod
    def _rows(
        conn: Any, scopes: Collection[str] | None, vectors: bool
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        if scopes is None:
            scoped, args = "true", ()
        else:
            scoped, args = "r.scope = ANY(%s::text[])", (sorted(scopes),)
        for kind, select in _SELECTS.items():
            sql = select.format(scoped=scoped, vector="r.embedding" if vectors else "NULL")
            with conn.cursor(name=f"mempp_dump_{kind}") as cursor:
                cursor.itersize = PAGE
                cursor.execute(sql, args)
                for row in cursor:
                    yield kind, (_record(row) if kind == "record" else _plain(kind, row))

    def restore(
        self, encoder: tuple[str, int] | None, rows: Iterable[tuple[str, dict[str, Any]]]
    ) -> dict[str, int]:
        written = {kind: 0 for kind in _SELECTS}
        links: list[tuple[str, int, int]] = []  # (scope, record, its successor)
        undone: list[tuple[str, int, int]] = []  # (scope, run, the run that undid it)
        scopes: set[str] = set()
        with self._connection() as conn:
            # No other writer between the emptiness check and the commit.
            conn.execute(
                "LOCK TABLE records, consolidation_runs, api_keys IN SHARE ROW EXCLUSIVE MODE"
            )
            if not conn.execute(
                """SELECT NOT (EXISTS (SELECT 1 FROM records) OR EXISTS (SELECT 1 FROM
                   consolidation_runs) OR EXISTS (SELECT 1 FROM api_keys))"""
            ).fetchone()[0]:
                raise InvalidInput(
                    f"{self.location} is not empty: a snapshot restores only into an empty "
                    "store (its ids would collide)"
                )
            if encoder is not None:
                found = self._bind_in(conn, *encoder)
                if found is not None and (found["encoder"], int(found["dim"])) != encoder:
                    raise EncoderMismatch(
                        f"{self.location} is bound to encoder {found['encoder']} "
                        f"({found['dim']}-d); the snapshot holds vectors of {encoder[0]} "
                        f"({encoder[1]}-d)"
                    )
            # The HNSW index is built once over the restored rows, not row by row.
            rebuild = encoder is not None and hnsw_state(conn) is not None
            if rebuild:
                conn.execute(
                    self._psycopg.sql.SQL("DROP INDEX {}").format(
                        self._psycopg.sql.Identifier(HNSW_INDEX)
                    )
                )
            batches = _Batches(conn)
            for kind, fields in rows:
                scopes.add(fields["scope"])
                if kind == "record" and fields["superseded_by"] is not None:
                    links.append((fields["scope"], fields["id"], fields["superseded_by"]))
                if kind == "run" and fields["undone_by"] is not None:
                    undone.append((fields["scope"], fields["id"], fields["undone_by"]))
                self._restore_row(batches, kind, fields)
                written[kind] += 1
            batches.flush()
            conn.cursor().executemany(
                "UPDATE records SET superseded_by = %s WHERE scope = %s AND id = %s",
                [(successor, scope, row) for scope, row, successor in links],
            )
            conn.cursor().executemany(
                "UPDATE consolidation_runs SET undone_by = %s WHERE scope = %s AND id = %s",
                [(by, scope, run) for scope, run, by in undone],
            )
            if rebuild:
                assert encoder is not None
                conn.execute(hnsw_index_sql(encoder[1]))
            for table in _IDENTITIES:
                conn.execute(
                    f"""SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id))
                        FROM {table}"""
                )
        self._bound = None
        for scope in scopes:  # replicas built before the restore know none of its rows
            self._replicas.drop(scope)
            self._tag_replicas.drop(scope)
            self._vector_replicas.drop(scope)
        return written

    def _restore_row(self, out: _Batches, kind: str, f: dict[str, Any]) -> None:
        from psycopg.types.json import Jsonb as jsonb

        if kind == "record":
            out.execute(
                """INSERT INTO records (id, scope, text, text_hash, author, event_date,
                       event_key, tags, source, ingested_at, ingested_key, state, embedding,
                       thread, metadata, terms)
                   OVERRIDING SYSTEM VALUE
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s::text[], %s, %s::timestamptz, %s, %s,
                           %s, %s, %s, %s)""",
                (
                    f["id"],
                    f["scope"],
                    f["text"],
                    b"" if f["redacted"] else text_hash(f["text"]),
                    f["author"],
                    f["event_date"],
                    f["event_key"],
                    list(f["tags"]),
                    f["source"],
                    f["ingested_at"],
                    f["ingested_key"],
                    f["state"],
                    np.asarray(f["vector"], dtype=np.float32),
                    f["thread"],
                    None if f["metadata"] is None else jsonb(f["metadata"]),
                    # Analysed here, as every write path does: a snapshot carries no terms.
                    terms_of([f["text"]])[0],
                ),
            )
            if f["labels"]:
                out.execute(
                    """INSERT INTO record_tags (scope, label, record_id)
                       SELECT %s, label, %s FROM unnest(%s::text[]) AS label""",
                    (f["scope"], f["id"], list(f["labels"])),
                )
        elif kind == "run":
            out.execute(
                """INSERT INTO consolidation_runs (id, scope, kind, dry_run, started_at,
                       finished_at, settings, counts, undoes)
                   OVERRIDING SYSTEM VALUE
                   VALUES (%s, %s, %s, %s, %s::timestamptz, %s::timestamptz, %s, %s, %s)""",
                (
                    f["id"],
                    f["scope"],
                    f["kind"],
                    bool(f["dry_run"]),
                    f["started_at"],
                    f["finished_at"],
                    jsonb(f["settings"]),
                    None if f["counts"] is None else jsonb(f["counts"]),
                    f["undoes"],
                ),
            )
        elif kind == "group":
            out.execute(
                """INSERT INTO consolidation_groups (scope, run_id, group_no, label, members,
                       detail) VALUES (%s, %s, %s, %s, %s::bigint[], %s)""",
                (f["scope"], f["run_id"], f["group"], f["label"], list(f["members"]), f["detail"]),
            )
        elif kind == "change":
            out.execute(
                """INSERT INTO consolidation_changes (id, scope, run_id, group_no, label,
                       record_id, old_state, old_superseded_by, new_state, new_superseded_by,
                       merged_id)
                   OVERRIDING SYSTEM VALUE
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["change"]),
            )
        elif kind == "redaction":
            out.execute(
                """INSERT INTO redactions (scope, record_id, run_id, redacted_at, reason, actor,
                       pending) VALUES (%s, %s, %s, %s::timestamptz, %s, %s, false)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["redaction"]),
            )
        elif kind == "triple":
            out.execute(
                """INSERT INTO graph_triples (id, scope, record_id, subject, relation, object,
                       subject_key, object_key)
                   OVERRIDING SYSTEM VALUE VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["triple"]),
            )
        elif kind == "extraction":
            out.execute(
                """INSERT INTO graph_extractions (scope, record_id, extracted_at, model,
                       triples) VALUES (%s, %s, %s::timestamptz, %s, %s)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["extraction"]),
            )
        elif kind == "key":
            out.execute(
                """INSERT INTO api_keys (key_id, scope, role, label, created_at, revoked_at,
                       secret_hash) VALUES (%s, %s, %s, %s, %s, %s, %s)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["key"]),
            )
        else:
            raise InvalidInput(f"unknown snapshot row kind {kind!r}")
