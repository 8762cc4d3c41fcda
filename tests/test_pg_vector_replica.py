"""PostgreSQL's vector leg from the scope's in-RAM replica (``store/postgres/nearest.py``):
the same ranking as the exact scan in SQL, kept up with rows written elsewhere, dropped on
erasure, bounded in rows. Real PostgreSQL with pgvector."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

import mempp.store.postgres.replica_reads as replica_reads
from mempp import StoreError
from mempp.dates import parse_as_of
from mempp.filters import NO_FILTERS, Filters
from mempp.records import Document
from mempp.store.filter_sql import filter_condition
from mempp.store.postgres import PostgresStore
from mempp.store.postgres.replicas import ScopeVectors

import engines

pg_server = engines.pg_server
pg_url = engines.pg_url

DIM = 48
SCOPE = "t"


def _vectors(count: int, seed: int) -> np.ndarray:
    """Random rows of norms from 0.1 to 10: cosine, not the dot product, must rank them."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((count, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows * rng.uniform(0.1, 10, (count, 1)).astype(np.float32)


def _docs(count: int, seed: int) -> list[Document]:
    rng = np.random.default_rng(seed)
    start = dt.date(2024, 1, 1)
    return [
        Document.create(
            f"row {seed} {i}",
            author="dee" if i % 40 == 0 else ("ana", "ben", "cy")[i % 3],
            date=None
            if rng.random() < 0.1
            else (start + dt.timedelta(days=int(rng.integers(0, 366)))).isoformat(),
        )
        for i in range(count)
    ]


def _open(url: str) -> PostgresStore:
    store = PostgresStore(url)
    store.bind_encoder("replica-test", DIM)
    return store


def _in_sql(
    store: PostgresStore, query: np.ndarray, as_of: int | None, limit: int, filters: Filters
) -> list[int]:
    """The reference: the exact scan in SQL (pgvector's cosine distance, ties to newer)."""
    saved = store.vector_replica, store.exact_scan_max_rows
    store.vector_replica, store.exact_scan_max_rows = False, 10**12
    try:
        return store.nearest(SCOPE, query, as_of, limit, filters=filters)
    finally:
        store.vector_replica, store.exact_scan_max_rows = saved


# Rows up to which the replica holds float32 vectors too: none (every candidate's row is
# read from PostgreSQL), fewer than the scope has (the copy is dropped as the scope outgrows
# it), more.
FLOAT32_ROWS = [0, 700, 10**6]


@pytest.mark.parametrize("float32_rows", FLOAT32_ROWS)
def test_replica_ranks_as_the_exact_scan_in_sql(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, float32_rows: int
) -> None:
    # Blocks of 128 rows: a catch-up of many blocks and a short last one.
    monkeypatch.setattr(replica_reads, "_VECTOR_BLOCK", 128)
    count = 2000
    vectors = _vectors(count, 1)
    vectors[1500:1510] = vectors[100]  # equal rows: ties go to the newer one
    store = _open(pg_url)
    store.vectors_float32_rows = float32_rows
    read = []
    unit_rows = store._unit_rows
    monkeypatch.setattr(
        store, "_unit_rows", lambda s, ids: read.append(len(ids)) or unit_rows(s, ids)
    )
    try:
        ids = [r.id for r in store.insert(SCOPE, _docs(count, 1), vectors)]
        store.insert("other", _docs(50, 2), _vectors(50, 2))  # another tenant's rows
        store.set_state(SCOPE, ids[::9], "archived", None)
        # Filters keeping a third of the rows and a fortieth, both past the threshold of an
        # exact SQL scan: the replica's best rows are asked again for more until enough
        # pass, or, past a few rounds, ranked among the ids the filters keep.
        store.exact_scan_max_rows = 20
        among: list[bool] = []  # per filtered search: ranked among the ids read?
        ranked = ScopeVectors.ranked

        def spied(self, query, as_of, limit, allowed=None):  # type: ignore[no-untyped-def]
            among[-1] |= allowed is not None
            return ranked(self, query, as_of, limit, allowed)

        monkeypatch.setattr(ScopeVectors, "ranked", spied)
        rng = np.random.default_rng(3)
        queries = [vectors[100] * 3, *_vectors(30, 4)]
        # The last four months (a third of the dated rows), an author of a third of the rows
        # and one of a fortieth: an author's ids are read first, from an index alone.
        recent = Filters.create(since="2024-09-01")
        third, fortieth = Filters.create(author="ben"), Filters.create(author="dee")
        for trial, query in enumerate(queries):
            filters = (recent, third, fortieth, NO_FILTERS)[trial % 4]
            dated = trial % 8 < 4 and filters in (third, NO_FILTERS)
            as_of = parse_as_of(f"2024-{1 + trial % 12:02d}-15") if dated else None
            limit = int(rng.choice([1, 10, 50, 200]))
            expected = _in_sql(store, query, as_of, limit, filters)
            assert expected
            among.append(False)
            found = store.nearest(SCOPE, query, as_of, limit, filters=filters)
            assert found == expected, (trial, as_of, limit, filters)
        assert False in among[0::4] and True in among[0::4]  # both ways were taken
        assert all(among[1::4]) and all(among[2::4])  # an author's ids first
        held = store._vector_replicas.get(SCOPE)
        assert held is not None and len(held) == count  # every row, whatever its state
        assert store.nearest(SCOPE, queries[0], 0, 10) == []  # nothing dated that early
        # Rows are read back from PostgreSQL only where the replica holds no float32 copy,
        # and a copy the scope outgrew is not kept.
        assert (sum(read) > 0) == (float32_rows < count)
        assert (len(held._filled[0]) == count) == (float32_rows >= count)
        assert len(held._filled[0]) in (0, count)
    finally:
        store.close()


@pytest.mark.parametrize("float32_rows", [0, 10**6])
def test_replica_catches_up_with_rows_written_and_erased_elsewhere(
    pg_url: str, float32_rows: int
) -> None:
    reader, writer = _open(pg_url), _open(pg_url)
    reader.vectors_float32_rows = float32_rows
    try:
        reader.insert(SCOPE, _docs(300, 1), _vectors(300, 1))
        query = _vectors(1, 9)[0]
        before = reader.nearest(SCOPE, query, None, 5)
        # Rows pointing the query's way, written through another pool: they come first.
        close = [r.id for r in writer.insert(SCOPE, _docs(3, 7), np.tile(query, (3, 1)))]
        assert reader.nearest(SCOPE, query, None, 5) == [*close[::-1], *before[:2]]
        writer.redact(SCOPE, close[0], reason="test", actor=None)
        # The reader still holds the erased row's vector, but PostgreSQL no longer holds
        # the row as active: it never comes back.
        assert reader.nearest(SCOPE, query, None, 5) == [close[2], close[1], *before[:3]]
        assert reader.nearest(SCOPE, query, None, 5) == _in_sql(reader, query, None, 5, NO_FILTERS)
        # Erasing through this store drops its replica, read again from PostgreSQL.
        reader.redact(SCOPE, close[1], reason="test", actor=None)
        assert reader._vector_replicas.get(SCOPE) is None
        assert reader.nearest(SCOPE, query, None, 5) == [close[2], *before[:4]]
    finally:
        reader.close()
        writer.close()


def test_vector_replicas_are_bounded_in_rows(pg_url: str) -> None:
    store = _open(pg_url)
    try:
        for scope in ("a", "b", "c"):
            store.insert(scope, _docs(40, 1), _vectors(40, 1))
        store.vectors_max_rows = 50
        query = _vectors(1, 2)[0]
        expected = {scope: store.nearest(scope, query, None, 10) for scope in ("a", "b", "c")}
        assert all(len(found) == 10 for found in expected.values())
        assert list(store._vector_replicas) == ["c"]  # least recently searched dropped
        assert store.nearest("a", query, None, 10) == expected["a"]
        assert list(store._vector_replicas) == ["a"]
        store.warm("b")  # warm() builds the scope's vector replica
        assert list(store._vector_replicas) == ["b"]
    finally:
        store.close()


def test_vector_rows_of_another_size_are_a_store_error(pg_url: str) -> None:
    store = _open(pg_url)
    try:
        store.insert(SCOPE, _docs(20, 1), _vectors(20, 1))
        blocks = list(store._vector_rows_after(SCOPE, 0, DIM))
        assert sum(len(ids) for ids, _, _ in blocks) == 20
        # 274-d rows would take up the bytes of these 20 in 4: caught by their lengths.
        for wrong in (DIM - 1, DIM + 1, 2 * DIM, 274):  # never read as floats of that size
            with pytest.raises(StoreError, match="another size"):
                list(store._vector_rows_after(SCOPE, 0, wrong))
    finally:
        store.close()


@pytest.mark.parametrize(
    "filters",
    [Filters(author="ana"), Filters(author="ana", known_at=2**62), Filters(author="ana", since=0)],
)
def test_the_ids_an_author_filter_keeps_are_read_from_an_index_alone(
    pg_url: str,
    filters: Filters,
) -> None:
    """Read row by row from the heap, the ids of an author of 170k rows among 1M took 1.0 s;
    by an index only scan 50 ms (docs/scaling.md)."""
    store = _open(pg_url)
    try:
        docs = _docs(300, 1)
        ids = [r.id for r in store.insert(SCOPE, docs, _vectors(300, 1))]
        where, params = filter_condition(filters, "records", "postgres")
        condition = " AND event_key <= %(as_of)s" + where
        with store._connection() as conn:
            # Nothing but an index only scan allowed: the plan shows whether one can serve.
            for kind in ("seqscan", "bitmapscan", "indexscan"):
                conn.execute(f"SET LOCAL enable_{kind} = off")
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    "EXPLAIN " + PostgresStore.kept_ids_sql(condition),
                    {"scope": SCOPE, "as_of": 2**62, **params},
                )
            )
            kept = conn.execute(
                PostgresStore.kept_ids_sql(condition), {"scope": SCOPE, "as_of": 2**62, **params}
            ).fetchone()[0]
    finally:
        store.close()
    assert "Index Only Scan using records_author_active" in plan, plan
    dated_ana = [i for i, d in enumerate(docs) if d.author == "ana" and d.date is not None]
    assert [int(i) for i in kept.split()] == [ids[i] for i in dated_ana]
