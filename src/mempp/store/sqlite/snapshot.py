"""The SQLite engine's side of ``mempp dump`` / ``mempp restore`` (``SnapshotStore``): every
row as plain values, read from one consistent view, and the bulk write of a snapshot into an
empty file, id for id, in one transaction.

A dump reads through a connection of its own, opened read-only, inside one read transaction:
WAL mode gives it the file as it was when the transaction began while the store's own
connection (a server's writes) goes on.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from mempp.errors import InvalidInput, StoreError
from mempp.records import text_hash
from mempp.store.base import SNAPSHOT_FIELDS
from mempp.store.sqlite.erasure import ERASED_HASH
from mempp.store.sqlite.records import _RecordsMixin
from mempp.store.sqlite.schema import BUSY_TIMEOUT_S, describe_failure

PAGE = 1000

_SELECTS = {
    "record": """SELECT r.id, r.scope, r.text, r.author, r.event_date, r.event_key, r.tags,
                        r.source, r.ingested_at, r.ingested_key, r.state, r.superseded_by,
                        r.thread, r.metadata, NULL,
                        EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = r.id),
                        {vector}
                 FROM records r WHERE {scoped} ORDER BY r.id""",
    "run": """SELECT id, scope, kind, dry_run, started_at, finished_at, settings, counts,
                     undoes, undone_by
              FROM consolidation_runs r WHERE {scoped} ORDER BY id""",
    "group": """SELECT r.scope, g.run_id, g.group_no, g.label, g.members, g.detail
                FROM consolidation_groups g JOIN consolidation_runs r ON r.id = g.run_id
                WHERE {scoped} ORDER BY g.run_id, g.group_no""",
    "change": """SELECT c.id, r.scope, c.run_id, c.group_no, c.label, c.record_id, c.old_state,
                        c.old_superseded_by, c.new_state, c.new_superseded_by, c.merged_id
                 FROM consolidation_changes c JOIN consolidation_runs r ON r.id = c.run_id
                 WHERE {scoped} ORDER BY c.id""",
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


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "id": row[0],
        "scope": row[1],
        "text": row[2],
        "author": row[3],
        "event_date": row[4],
        "event_key": row[5],
        "tags": json.loads(row[6]),
        "source": row[7],
        "ingested_at": row[8],
        "ingested_key": row[9],
        "state": row[10],
        "superseded_by": row[11],
        "thread": row[12],
        "metadata": None if row[13] is None else json.loads(row[13]),
        "labels": [],  # filled from _LabelCursor
        "redacted": bool(row[15]),
        "vector": None if row[16] is None else np.frombuffer(row[16], dtype="<f4").copy(),
    }


def _plain(kind: str, row: tuple[Any, ...]) -> dict[str, Any]:
    fields = dict(zip(SNAPSHOT_FIELDS[kind], row, strict=True))
    if kind == "run":
        fields["dry_run"] = bool(fields["dry_run"])
        fields["settings"] = json.loads(fields["settings"] or "{}")
        fields["counts"] = json.loads(fields["counts"]) if fields["counts"] else None
    elif kind == "group":
        fields["members"] = json.loads(fields["members"])
    elif kind == "key":
        fields["secret_hash"] = bytes(fields["secret_hash"])
    return fields


class _LabelCursor:
    """The tag-index labels of each record, read in one pass ordered by record id alongside
    the records' own pass (record_tags is keyed by label first: a lookup per record would
    scan it whole each time)."""

    def __init__(self, conn: sqlite3.Connection, scoped: str, args: tuple[Any, ...]) -> None:
        self._rows = conn.execute(
            f"""SELECT t.record_id, t.label FROM record_tags t JOIN records r ON r.id = t.record_id
                WHERE {scoped} ORDER BY t.record_id, t.label""",
            args,
        )
        self._next = self._rows.fetchone()

    def of(self, record_id: int) -> list[str]:
        found = []
        while self._next is not None and self._next[0] <= record_id:
            if self._next[0] == record_id:
                found.append(self._next[1])
            self._next = self._rows.fetchone()
        return found


class _SnapshotMixin(_RecordsMixin):
    """Every row out (``snapshot``), every row in (``restore``)."""

    def is_empty(self) -> bool:
        with self._lock:
            return not self._conn.execute(
                """SELECT EXISTS (SELECT 1 FROM records) OR EXISTS (SELECT 1 FROM
                   consolidation_runs) OR EXISTS (SELECT 1 FROM api_keys)"""
            ).fetchone()[0]

    @contextmanager
    def snapshot(
        self, scopes: Collection[str] | None, *, vectors: bool
    ) -> Iterator[Iterator[tuple[str, dict[str, Any]]]]:
        if self.location == ":memory:":  # no second connection can see it: read under the lock
            with self._lock:
                self._conn.execute("BEGIN")
                try:
                    yield self._rows(self._conn, scopes, vectors)
                finally:
                    self._conn.execute("COMMIT")
            return
        uri = Path(self.location).expanduser().resolve().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.DatabaseError as exc:
            reason = describe_failure(self.location, exc)
            raise StoreError(f"cannot read {self.location}: {reason}") from None
        try:
            # One read transaction: the first SELECT fixes the snapshot every kind is read
            # from, so a row written meanwhile is in all of its tables or in none.
            conn.execute("BEGIN")
            yield self._rows(conn, scopes, vectors)
        finally:
            conn.close()

    @staticmethod
    def _rows(
        conn: sqlite3.Connection, scopes: Collection[str] | None, vectors: bool
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        if scopes is None:
            scoped, args = "1", ()
        else:
            scoped = "r.scope IN (SELECT value FROM json_each(?))"
            args = (json.dumps(sorted(scopes), ensure_ascii=False),)
        for kind, select in _SELECTS.items():
            sql = select.format(scoped=scoped, vector="r.embedding" if vectors else "NULL")
            cursor = conn.execute(sql, args)
            labels = _LabelCursor(conn, scoped, args) if kind == "record" else None
            while page := cursor.fetchmany(PAGE):
                for row in page:
                    if labels is None:
                        yield kind, _plain(kind, row)
                    else:
                        yield kind, {**_record(row), "labels": labels.of(row[0])}

    def restore(
        self, encoder: tuple[str, int] | None, rows: Iterable[tuple[str, dict[str, Any]]]
    ) -> dict[str, int]:
        written = {kind: 0 for kind in _SELECTS}
        try:
            with self._write() as conn:
                if not self.is_empty():
                    raise InvalidInput(
                        f"{self.location} is not empty: a snapshot restores only into an empty "
                        "store (its ids would collide)"
                    )
                # superseded_by and undone_by may name a row further on.
                conn.execute("PRAGMA defer_foreign_keys = ON")
                if encoder is not None:
                    self._restore_encoder(conn, encoder)
                for kind, fields in rows:
                    self._restore_row(conn, kind, fields)
                    written[kind] += 1
        except sqlite3.Error as exc:
            raise StoreError(
                f"could not restore into {self.location}: {describe_failure(self.location, exc)}"
            ) from None
        self._forget_bm25()
        return written

    @staticmethod
    def _restore_encoder(conn: sqlite3.Connection, encoder: tuple[str, int]) -> None:
        found = dict(
            conn.execute(
                "SELECT key, value FROM mempp_meta WHERE key IN ('encoder', 'dim')"
            ).fetchall()
        )
        if not found:
            conn.executemany(
                "INSERT INTO mempp_meta (key, value) VALUES (?, ?)",
                [("encoder", encoder[0]), ("dim", str(encoder[1]))],
            )
        elif (found.get("encoder"), int(found.get("dim", -1))) != encoder:
            raise InvalidInput(
                f"the store is bound to encoder {found.get('encoder')} ({found.get('dim')}-d); "
                f"the snapshot holds vectors of {encoder[0]} ({encoder[1]}-d)"
            )

    @staticmethod
    def _restore_row(conn: sqlite3.Connection, kind: str, f: dict[str, Any]) -> None:
        if kind == "record":
            conn.execute(
                """INSERT INTO records (id, scope, text, text_hash, author, event_date,
                       event_key, tags, source, ingested_at, ingested_key, state, superseded_by,
                       embedding, thread, metadata)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    f["id"],
                    f["scope"],
                    f["text"],
                    ERASED_HASH if f["redacted"] else text_hash(f["text"]),
                    f["author"],
                    f["event_date"],
                    f["event_key"],
                    json.dumps(list(f["tags"]), ensure_ascii=False),
                    f["source"],
                    f["ingested_at"],
                    f["ingested_key"],
                    f["state"],
                    f["superseded_by"],
                    np.asarray(f["vector"], dtype="<f4").tobytes(),
                    f["thread"],
                    None
                    if f["metadata"] is None
                    else json.dumps(f["metadata"], ensure_ascii=False, sort_keys=True),
                ),
            )
            conn.executemany(
                "INSERT INTO record_tags (label, record_id) VALUES (?, ?)",
                [(label, f["id"]) for label in f["labels"]],
            )
        elif kind == "run":
            conn.execute(
                """INSERT INTO consolidation_runs (id, scope, kind, dry_run, started_at,
                       finished_at, settings, counts, undoes, undone_by)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    f["id"],
                    f["scope"],
                    f["kind"],
                    int(f["dry_run"]),
                    f["started_at"],
                    f["finished_at"],
                    json.dumps(f["settings"], sort_keys=True),
                    None if f["counts"] is None else json.dumps(f["counts"], sort_keys=True),
                    f["undoes"],
                    f["undone_by"],
                ),
            )
        elif kind == "group":
            conn.execute(
                """INSERT INTO consolidation_groups (run_id, group_no, label, members, detail)
                   VALUES (?, ?, ?, ?, ?)""",
                (f["run_id"], f["group"], f["label"], json.dumps(f["members"]), f["detail"]),
            )
        elif kind == "change":
            conn.execute(
                """INSERT INTO consolidation_changes (id, run_id, group_no, label, record_id,
                       old_state, old_superseded_by, new_state, new_superseded_by, merged_id)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    f["id"],
                    f["run_id"],
                    f["group"],
                    f["label"],
                    f["record_id"],
                    f["old_state"],
                    f["old_superseded_by"],
                    f["new_state"],
                    f["new_superseded_by"],
                    f["merged_id"],
                ),
            )
        elif kind == "redaction":
            conn.execute(
                """INSERT INTO redactions (record_id, scope, run_id, redacted_at, reason, actor,
                       pending) VALUES (?, ?, ?, ?, ?, ?, 0)""",
                (
                    f["record_id"],
                    f["scope"],
                    f["run_id"],
                    f["redacted_at"],
                    f["reason"],
                    f["actor"],
                ),
            )
        elif kind == "triple":
            conn.execute(
                """INSERT INTO graph_triples (id, scope, record_id, subject, relation, object,
                       subject_key, object_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["triple"]),
            )
        elif kind == "extraction":
            conn.execute(
                """INSERT INTO graph_extractions (scope, record_id, extracted_at, model, triples)
                   VALUES (?, ?, ?, ?, ?)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["extraction"]),
            )
        elif kind == "key":
            conn.execute(
                """INSERT INTO api_keys (key_id, scope, role, label, created_at, revoked_at,
                       secret_hash) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                tuple(f[name] for name in SNAPSHOT_FIELDS["key"]),
            )
        else:
            raise InvalidInput(f"unknown snapshot row kind {kind!r}")


class _BackupMixin(_SnapshotMixin):
    """``mempp backup``: a consistent copy of the live file by SQLite's online backup API."""

    def backup(self, target: str) -> int:
        """Copy the database to ``target`` (a new file) as it is at one moment, while other
        connections and processes (``mempp serve``) go on writing; returns the records
        copied. Written aside and renamed when complete; refuses an existing ``target``."""
        destination = Path(target).expanduser()
        if destination.exists():
            raise InvalidInput(f"{target} exists; a backup is written to a new file")
        if not destination.resolve().parent.is_dir():
            raise InvalidInput(f"cannot write {target}: its folder does not exist")
        if self.location == ":memory:":
            raise InvalidInput("an in-memory store has no file to back up")
        partial = destination.with_name(destination.name + ".partial")
        source = sqlite3.connect(self.location, timeout=BUSY_TIMEOUT_S)
        try:
            copy = sqlite3.connect(partial)
            try:
                # pages=-1: every page in one step, under one read transaction of the
                # source, so the copy is the file at one moment (a writer in WAL mode is not
                # blocked meanwhile).
                source.backup(copy, pages=-1)
                copied = copy.execute("SELECT count(*) FROM records").fetchone()[0]
                copy.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                copy.close()
            partial.replace(destination)
        except BaseException:
            for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
                leftover.unlink(missing_ok=True)
            raise
        finally:
            source.close()
        return int(copied)
