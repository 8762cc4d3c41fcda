"""The tag leg's in-RAM postings (mempp.tag_index): the same ranking as the SQL it replaces.

The pure ranking is checked against a brute-force count on random lists (hypothesis); the
store's in-RAM path against its own SQL on a real SQLite file with ties, several labels,
filters, as-of bounds, archived rows, rows added after the postings were read (per-search
tail, then a fresh read in a thread) and an erasure."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempp import Memory
from mempp.filters import NO_FILTERS, Filters
from mempp.store.sqlite import SQLiteStore
from mempp.store.sqlite import replicas as sqlite_replicas
from mempp.tag_index import TagPostings, rank_tagged

from conftest import KeywordEmbedder


def brute_force(lists: list[list[int]], eligible: set[int], limit: int) -> list[int]:
    counts: dict[int, int] = {}
    for held in lists:
        for row in held:
            counts[row] = counts.get(row, 0) + 1
    ranked = sorted((row for row in counts if row in eligible), key=lambda r: (-counts[r], -r))
    return ranked[:limit]


@settings(max_examples=300, deadline=None)
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


def assert_same_as_sql(store: SQLiteStore, rng: random.Random, rounds: int = 60) -> None:
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
    from mempp.vectors import ExactVectorIndex

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
