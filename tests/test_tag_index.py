"""The tag leg's in-RAM postings (mempp.index.tags): the same ranking as the SQL it replaces.

The pure ranking is checked against a brute-force count on random lists (hypothesis); each
engine's in-RAM path against the SQL ranking, with ties, several labels, filters, as-of
bounds, archived rows, rows added after the postings were read and an erasure: on a real
SQLite file (per-search tail, then a fresh read in a thread) and on a real PostgreSQL (the
scope's tag replica: tail, merges, rows and erasures from another store, eviction)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempp import Memory
from mempp.filters import NO_FILTERS, Filters
from mempp.index.tags import TagPostings, rank_tagged
from mempp.store.postgres import PostgresStore
from mempp.store.postgres import replicas as pg_replicas
from mempp.store.sqlite import SQLiteStore
from mempp.store.sqlite import replicas as sqlite_replicas

import engines
from conftest import KeywordEmbedder, examples

pg_server = engines.pg_server
pg_url = engines.pg_url


def brute_force(lists: list[list[int]], eligible: set[int], limit: int) -> list[int]:
    counts: dict[int, int] = {}
    for held in lists:
        for row in held:
            counts[row] = counts.get(row, 0) + 1
    ranked = sorted((row for row in counts if row in eligible), key=lambda r: (-counts[r], -r))
    return ranked[:limit]


# A pure function (no store, so one engine is all there is to run it on).
@settings(max_examples=examples(300))
@given(
    lists=st.lists(st.sets(st.integers(1, 400), max_size=300), max_size=5),
    eligible=st.sets(st.integers(1, 400)),
    limit=st.integers(0, 60),
)
def test_rank_equals_brute_force(lists: list[set[int]], eligible: set[int], limit: int) -> None:
    arrays = [np.array(sorted(held), dtype=np.int64) for held in lists]

    def mask(ids: np.ndarray) -> np.ndarray:
        return np.array([int(i) in eligible for i in ids], dtype=bool)

    got = rank_tagged(arrays, mask, limit)
    assert got == brute_force([sorted(h) for h in lists], eligible, limit)


def test_frequent_label_is_walked_from_the_newest_only() -> None:
    held = np.arange(1, 200_001, dtype=np.int64)
    seen: list[int] = []

    def everything(ids: np.ndarray) -> np.ndarray:
        seen.append(len(ids))
        return np.ones(len(ids), dtype=bool)

    assert rank_tagged([held], everything, 50) == list(range(200_000, 199_950, -1))
    assert sum(seen) <= 256  # one first window, not 200k lookups
    # one row in ten eligible: windows grow until 50 are found
    seen.clear()
    sparse = rank_tagged([held], lambda ids: ids % 10 == 0, 50)
    assert sparse == list(range(200_000, 199_500, -10))
    assert sum(seen) < 2_000


def test_postings_from_groups_sorts_and_looks_up() -> None:
    postings = TagPostings.from_groups([("ana", "3,1,2"), ("ops", "5")], max_id=5)
    assert postings.postings("ana").tolist() == [1, 2, 3]
    assert postings.postings("ops").tolist() == [5]
    assert postings.postings("nobody").tolist() == []
    assert len(postings) == 4
    assert postings.search(["ops", "ana", "ana"], lambda ids: ids > 0, 10) == [5, 3, 2, 1]
    tail = {"ops": np.array([7], dtype=np.int64)}
    assert postings.search(["ops"], lambda ids: ids > 0, 10, tail) == [7, 5]
    with pytest.raises(ValueError, match="offset"):
        TagPostings(["a"], np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), 0)
    grown = postings.extended({"ops": np.array([7, 9]), "new": np.array([8])}, max_id=9)
    assert grown.max_id == 9 and len(grown) == 7 and postings.max_id == 5  # a new object
    held = [grown.postings(label).tolist() for label in ("ana", "ops", "new")]
    assert held == [[1, 2, 3], [5, 7, 9], [8]]


# -- the store: in-RAM postings against the SQL ------------------------------------------
AUTHORS = ["Ana", "Bob", "Cy", "Dee", "Eve"]
TAGS = ["ops", "finance", "ana", "launch", "bob"]  # "ana"/"bob" also name authors: counts 2


def fill(memory: Memory, rng: random.Random, count: int, scope_every: int = 7) -> None:
    docs = []
    for number in range(count):
        # skewed like the benchmark's Zipf authors: the first writes most rows
        author = AUTHORS[min(int(rng.expovariate(1.2)), 4)]
        docs.append(
            {
                "text": f"row {number} {rng.random()}",
                "author": None if rng.random() < 0.1 else author,
                "tags": rng.sample(TAGS, rng.randint(0, 2)),
                "date": None
                if rng.random() < 0.05
                else f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "thread": rng.choice(["t1", "t2", None]),
            }
        )
    memory.add_many(docs)


def random_filters(rng: random.Random) -> Filters:
    choice = rng.randint(0, 5)
    if choice == 0:
        return Filters.create(author=rng.choice(AUTHORS))
    if choice == 1:
        return Filters.create(tags=rng.sample(TAGS, 2), tags_mode=rng.choice(["any", "all"]))
    if choice == 2:
        return Filters.create(since=f"2024-{rng.randint(1, 12):02d}-01")
    if choice == 3:
        return Filters.create(thread="t1")
    return NO_FILTERS


def assert_same_as_sql(
    store: SQLiteStore | PostgresStore, rng: random.Random, rounds: int = 60
) -> None:
    """The store's tag leg against its ranking in SQL (PostgreSQL's: the former leg)."""
    for _ in range(rounds):
        labels = rng.sample([a.lower() for a in AUTHORS] + TAGS + ["nothing"], rng.randint(1, 4))
        as_of = rng.choice([None, None, *(store_key(f"2024-{m:02d}-15") for m in (1, 6, 11))])
        limit = rng.choice([1, 3, 10, 50, 1000])
        filters = random_filters(rng)
        for scope in ("default", "other"):
            want = store._tagged_sql(scope, labels, as_of, limit, filters)
            assert store.tagged(scope, labels, as_of, limit, filters=filters) == want


def store_key(day: str) -> int:
    from mempp.dates import parse_as_of

    key = parse_as_of(day)
    assert key is not None
    return key


@pytest.fixture
def rng() -> random.Random:
    return random.Random(16)


def test_store_in_ram_equals_sql(
    tmp_path: Path, rng: random.Random, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_replicas, "_TAGS_TAIL_ROWS", 100)  # a short tail suffices here
    path = tmp_path / "tags.db"
    embedder = KeywordEmbedder()
    with (
        Memory(path, embedder=embedder) as memory,
        Memory(memory.store, scope="other", embedder=embedder) as other,
    ):
        fill(memory, rng, 600)
        fill(other, rng, 80)
        store = memory.store
        assert isinstance(store, SQLiteStore)
        # archive some rows: states change after the postings are read
        store.tagged("default", ["ana"], None, 5)
        assert store._tags is not None
        archived = rng.sample(range(1, 600), 120)
        store.set_state("default", archived, "archived", None)
        assert_same_as_sql(store, rng)
        store.set_state("default", archived[:30], "active", None)  # and back
        assert_same_as_sql(store, rng, rounds=20)
        # rows added since: served from the per-search tail
        fill(memory, rng, 40)
        postings = store._tags
        assert_same_as_sql(store, rng)
        assert store._tags is postings and postings.max_id < 720
        # many rows added since: read afresh in a thread, the tail serving meanwhile
        fill(memory, rng, 300)
        assert_same_as_sql(store, rng, rounds=20)
        assert store._tags is not postings or store._tags_thread is not None
        if (reading := store._tags_thread) is not None:
            reading.join()
        assert_same_as_sql(store, rng, rounds=20)
        assert store._tags is not None and store._tags.max_id == 1020


def test_store_reads_postings_in_a_thread_on_a_large_store(
    tmp_path: Path, rng: random.Random, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_replicas, "_TAGS_SYNC_ROWS", 0)  # every store counts as large
    path = tmp_path / "tags.db"
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 300)
        store = memory.store
        assert isinstance(store, SQLiteStore)
        first = store.tagged("default", ["ana", "ops"], None, 20)  # SQL while reading
        assert first == store._tagged_sql("default", ["ana", "ops"], None, 20, NO_FILTERS)
        memory.warm()  # waits for the read
        assert store._tags is not None and store._tags_thread is None
        assert_same_as_sql(store, rng, rounds=30)


def test_erasure_drops_the_postings(tmp_path: Path, rng: random.Random) -> None:
    path = tmp_path / "tags.db"
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 200)
        store = memory.store
        assert isinstance(store, SQLiteStore)
        before = store.tagged("default", ["ana"], None, 1000)
        held = store._tags
        assert held is not None
        gone = before[0]
        memory.redact(gone, reason="test")
        after = store.tagged("default", ["ana"], None, 1000)
        assert gone not in after and after == before[1:]
        assert store._tags is not held  # read again without the erased labels
        assert gone not in store._tags.postings("ana").tolist()
        assert_same_as_sql(store, rng, rounds=20)


def test_erasure_in_another_process_is_noticed(tmp_path: Path, rng: random.Random) -> None:
    path = tmp_path / "tags.db"
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 100)
        before = memory.store.tagged("default", ["ana"], None, 1000)
        with Memory(path, embedder=KeywordEmbedder()) as writer:  # another connection
            writer.redact(before[0], reason="test")
        assert memory.store.tagged("default", ["ana"], None, 1000) == before[1:]


# -- the vector index's eligibility for every id at once (used by the lexical leg) ---------
@pytest.mark.parametrize("gaps", [False, True])
def test_eligible_by_id_equals_eligible(gaps: bool) -> None:
    from mempp.index.vectors import ExactVectorIndex

    generator = np.random.default_rng(16)
    index = ExactVectorIndex(4)
    count = 3000
    ids = np.arange(5, 5 + count, dtype=np.int64)
    if gaps:
        ids = np.sort(generator.choice(10 * count, count, replace=False)) + 1
    vectors = generator.standard_normal((count, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    keys = [None if k < 50 else int(k) for k in generator.integers(0, 1000, count)]
    scopes = generator.choice(["default", "other"], count).tolist()
    index.append(ids, vectors, scopes, keys, (generator.random(count) < 0.8).tolist())
    probe = np.concatenate([ids, np.arange(0, ids[-1] + 10, dtype=np.int64)])
    allowed = np.sort(generator.choice(ids, count // 3, replace=False))
    for scope in ("default", "other", "nobody"):
        for as_of in (None, 300, 900):
            for kept in (None, allowed):
                dense = index.eligible_by_id(scope, as_of, kept)
                inside = probe < len(dense)
                got = np.zeros(len(probe), dtype=bool)
                got[inside] = dense[probe[inside]]
                assert (got == index.eligible(probe, scope, as_of, kept)).all()
                wide = sqlite_replicas._eligible(index, probe, scope, as_of, kept)
                assert (wide == got).all()


# -- PostgreSQL: the scope's tag replica against the SQL it replaced -------------------------
def test_postgres_replica_equals_sql(
    pg_url: str, rng: random.Random, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_replicas, "_MIN_TAIL", 50)  # merges happen at this size too
    embedder = KeywordEmbedder()
    with (
        Memory(pg_url, embedder=embedder) as memory,
        Memory(pg_url, scope="other", embedder=embedder) as other,
    ):
        fill(memory, rng, 400)
        fill(other, rng, 60)
        store = memory.store
        assert isinstance(store, PostgresStore)
        assert_same_as_sql(store, rng)
        replica = store._tag_replicas.get("default")
        assert replica is not None and len(replica) == 400
        assert replica._held.tail == {}  # merged: more than _MIN_TAIL postings
        # states change after the replica read the rows; PostgreSQL keeps the active ones
        archived = rng.sample(range(1, 400), 150)
        store.set_state("default", archived, "archived", None)
        assert_same_as_sql(store, rng)
        store.set_state("default", archived[:40], "active", None)
        # rows added since: caught up into the tail, then merged once it outgrows _MIN_TAIL
        fill(memory, rng, 5)
        assert_same_as_sql(store, rng, rounds=10)
        assert replica._held.tail and len(replica) == 405
        fill(memory, rng, 200)
        assert_same_as_sql(store, rng, rounds=20)
        assert len(replica) == 605 and replica._held.postings.max_id == 665


def test_postgres_replica_catches_up_on_rows_another_store_wrote(
    pg_url: str, rng: random.Random
) -> None:
    embedder = KeywordEmbedder()
    with Memory(pg_url, embedder=embedder) as memory:
        fill(memory, rng, 100)
        before = memory.store.tagged("default", ["ana"], None, 1000)
        with Memory(pg_url, embedder=embedder) as writer:  # another pool, as another process
            writer.add("newest", author="Ana")
            newest = writer.search("newest", k=1)[0].record.id
            writer.redact(before[0], reason="test")
        after = memory.store.tagged("default", ["ana"], None, 1000)
        assert after == [newest, *before[1:]]


def test_postgres_erasure_drops_the_replica(pg_url: str, rng: random.Random) -> None:
    with Memory(pg_url, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 100)
        store = memory.store
        assert isinstance(store, PostgresStore)
        before = store.tagged("default", ["ana"], None, 1000)
        held = store._tag_replicas.get("default")
        memory.redact(before[0], reason="test")
        assert store._tag_replicas.get("default") is None  # its labels are gone from RAM
        assert store.tagged("default", ["ana"], None, 1000) == before[1:]
        assert store._tag_replicas.get("default") is not held
        assert_same_as_sql(store, rng, rounds=10)


def test_postgres_tag_replicas_of_least_recently_searched_scopes_are_dropped(
    pg_url: str,
) -> None:
    embedder = KeywordEmbedder()
    for scope in ("a", "b", "c"):
        with Memory(pg_url, scope=scope, embedder=embedder) as writer:
            writer.add_many([{"text": f"row {i}", "author": "Ana"} for i in range(3)])
    with Memory(pg_url, embedder=embedder) as memory:
        store = memory.store
        assert isinstance(store, PostgresStore)
        store.tags_max_rows = 5
        expected = {scope: store.tagged(scope, ["ana"], None, 10) for scope in ("a", "b", "c")}
        assert all(len(found) == 3 for found in expected.values())
        assert list(store._tag_replicas) == ["c"]
        assert store.tagged("a", ["ana"], None, 10) == expected["a"]  # read again, same
        assert list(store._tag_replicas) == ["a"]


def test_scope_cache_keeps_an_empty_replica() -> None:
    from mempp.store.postgres.replicas import ScopeCache, ScopeTags

    cache = ScopeCache(ScopeTags)
    first = cache.use("a")
    assert len(first) == 0 and cache.use("a") is first  # one replica while it is read
    second = cache.use("b")
    assert list(cache) == ["a", "b"]
    cache.evict("b", max_rows=0)  # empty replicas hold no rows: nothing is over the budget
    assert list(cache) == ["a", "b"] and cache.get("b") is second
    cache.drop("a")
    assert list(cache) == ["b"] and cache.get("a") is None
