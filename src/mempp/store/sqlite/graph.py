"""The SQLite engine's entity graph (Mem^g++): triples keyed to their source rows, and
which rows were already extracted."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence

from mempp.errors import InvalidInput, StoreError
from mempp.store.base import Triple, TripleHit
from mempp.store.sqlite.schema import _now, _SQLiteBase

_TRIPLE_COLUMNS = (
    "t.id, t.subject, t.relation, t.object, t.subject_key, t.object_key, t.record_id, r.event_date"
)


class _GraphMixin(_SQLiteBase):
    """Triples of the entity graph and which rows were extracted."""

    # -- entity graph (mempp.llm.graph) ------------------------------------------------------
    def pending_extraction(self, scope: str, ids: Collection[int] | None) -> list[int]:
        narrow = "" if ids is None else " AND r.id IN (SELECT value FROM json_each(:ids))"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT r.id FROM records r
                    WHERE r.scope = :scope AND r.state = 'active'{narrow}
                      AND NOT EXISTS (SELECT 1 FROM graph_extractions g WHERE g.record_id = r.id)
                    ORDER BY r.id""",
                {"scope": scope, "ids": json.dumps([int(i) for i in ids or ()])},
            ).fetchall()
        return [row[0] for row in rows]

    def add_triples(
        self, scope: str, record_id: int, triples: Sequence[Triple], model: str | None
    ) -> bool:
        try:
            with self._write() as conn:
                done = conn.execute(
                    "SELECT 1 FROM graph_extractions WHERE record_id = ?", (record_id,)
                ).fetchone()
                if done is not None:
                    return False
                known = conn.execute(
                    "SELECT 1 FROM records WHERE id = ? AND scope = ?", (record_id, scope)
                ).fetchone()
                if known is None:
                    raise InvalidInput(f"no record {record_id} in scope {scope!r}")
                conn.executemany(
                    """INSERT INTO graph_triples (scope, record_id, subject, relation, object,
                           subject_key, object_key) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    [
                        (
                            scope,
                            record_id,
                            t.subject,
                            t.relation,
                            t.object,
                            t.subject_key,
                            t.object_key,
                        )
                        for t in triples
                    ],
                )
                conn.execute(
                    """INSERT INTO graph_extractions (record_id, scope, extracted_at, model,
                           triples) VALUES (?, ?, ?, ?, ?)""",
                    (record_id, scope, _now(), model, len(triples)),
                )
                return True
        except sqlite3.Error as exc:
            raise StoreError(f"could not store triples of record {record_id}: {exc}") from None

    def search_triples(
        self,
        scope: str,
        keys: Collection[str],
        as_of: int | None,
        *,
        dated: bool,
        limit: int,
    ) -> list[TripleHit]:
        if not keys or limit < 1:
            return []
        date_condition = " AND r.event_key <= :as_of" if dated and as_of is not None else ""
        recency = "coalesce(r.event_key, r.ingested_key)" if dated else "r.id"
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS},
                        (t.subject_key IN (SELECT value FROM json_each(:keys)))
                        + (t.object_key IN (SELECT value FROM json_each(:keys))
                           AND t.object_key != t.subject_key) AS touched
                    FROM graph_triples t JOIN records r ON r.id = t.record_id
                    WHERE t.scope = :scope AND r.state = 'active'{date_condition}
                      AND (t.subject_key IN (SELECT value FROM json_each(:keys))
                           OR t.object_key IN (SELECT value FROM json_each(:keys)))
                    ORDER BY touched DESC, {recency} DESC, t.id DESC LIMIT :limit""",
                {"keys": json.dumps(sorted(keys)), "scope": scope, "as_of": as_of, "limit": limit},
            ).fetchall()
        return [TripleHit(*row) for row in rows]

    def triples_of(self, scope: str, record_ids: Collection[int]) -> list[TripleHit]:
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS}, 0
                    FROM graph_triples t JOIN records r ON r.id = t.record_id
                    WHERE t.scope = ? AND t.record_id IN (SELECT value FROM json_each(?))
                    ORDER BY t.id""",
                (scope, json.dumps([int(i) for i in record_ids])),
            ).fetchall()
        return [TripleHit(*row) for row in rows]
