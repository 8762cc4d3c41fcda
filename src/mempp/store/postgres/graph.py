"""The PostgreSQL engine's entity graph (Mem^g++): triples keyed to their source rows, and
which rows were already extracted."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

from mempp.errors import InvalidInput
from mempp.store.base import Triple, TripleHit
from mempp.store.postgres.schema import _PostgresBase

_TRIPLE_COLUMNS = (
    "t.id, t.subject, t.relation, t.object, t.subject_key, t.object_key, t.record_id, r.event_date"
)


def _no_nul(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL (SQLite stores it). A model-written triple with one
    would otherwise fail its row's extraction; a NUL carries no meaning in a triple."""
    return None if text is None else text.replace("\x00", "")


class _GraphMixin(_PostgresBase):
    """Triples of the entity graph and which rows were extracted."""

    # -- entity graph (mempp.llm.graph) ------------------------------------------------------
    def pending_extraction(self, scope: str, ids: Collection[int] | None) -> list[int]:
        narrow = "" if ids is None else " AND r.id = ANY(%(ids)s::bigint[])"
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT r.id FROM records r
                    WHERE r.scope = %(scope)s AND r.state = 'active'{narrow}
                      AND NOT EXISTS (
                          SELECT 1 FROM graph_extractions g
                          WHERE g.scope = r.scope AND g.record_id = r.id)
                    ORDER BY r.id""",
                {"scope": scope, "ids": [int(i) for i in ids or ()]},
            ).fetchall()
        return [row[0] for row in rows]

    def add_triples(
        self, scope: str, record_id: int, triples: Sequence[Triple], model: str | None
    ) -> bool:
        with self._connection() as conn:
            # Marking first, ON CONFLICT DO NOTHING: of two extractors racing on one row,
            # the second waits for the first to commit and then stores nothing.
            marked = conn.execute(
                """INSERT INTO graph_extractions (scope, record_id, extracted_at, model, triples)
                   SELECT scope, id, %s, %s, %s FROM records WHERE scope = %s AND id = %s
                   ON CONFLICT (scope, record_id) DO NOTHING
                   RETURNING record_id""",
                (datetime.now(UTC), _no_nul(model), len(triples), scope, record_id),
            ).fetchone()
            if marked is None:
                done = conn.execute(
                    "SELECT 1 FROM graph_extractions WHERE scope = %s AND record_id = %s",
                    (scope, record_id),
                ).fetchone()
                if done is not None:
                    return False
                raise InvalidInput(f"no record {record_id} in scope {scope!r}")
            if triples:
                with conn.cursor() as cursor:
                    cursor.executemany(
                        """INSERT INTO graph_triples (scope, record_id, subject, relation,
                               object, subject_key, object_key)
                           VALUES (%s, %s, %s, %s, %s, %s, %s)""",
                        [
                            (
                                scope,
                                record_id,
                                _no_nul(t.subject),
                                _no_nul(t.relation),
                                _no_nul(t.object),
                                _no_nul(t.subject_key),
                                _no_nul(t.object_key),
                            )
                            for t in triples
                        ],
                    )
            return True

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
        date_condition = " AND r.event_key <= %(as_of)s" if dated and as_of is not None else ""
        recency = "coalesce(r.event_key, r.ingested_key)" if dated else "r.id"
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS},
                        (t.subject_key = ANY(%(keys)s::text[]))::int
                        + (t.object_key = ANY(%(keys)s::text[])
                           AND t.object_key <> t.subject_key)::int AS touched
                    FROM graph_triples t JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %(scope)s AND r.state = 'active'{date_condition}
                      AND (t.subject_key = ANY(%(keys)s::text[])
                           OR t.object_key = ANY(%(keys)s::text[]))
                    ORDER BY touched DESC, {recency} DESC, t.id DESC LIMIT %(limit)s""",
                {
                    "keys": sorted({_no_nul(key) for key in keys}),
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                },
            ).fetchall()
        return [TripleHit(*row) for row in rows]

    def triples_of(self, scope: str, record_ids: Collection[int]) -> list[TripleHit]:
        with self._connection() as conn:
            rows = conn.execute(
                f"""SELECT {_TRIPLE_COLUMNS}, 0
                    FROM graph_triples t JOIN records r ON r.scope = t.scope AND r.id = t.record_id
                    WHERE t.scope = %s AND t.record_id = ANY(%s::bigint[])
                    ORDER BY t.id""",
                (scope, [int(i) for i in record_ids]),
            ).fetchall()
        return [TripleHit(*row) for row in rows]
