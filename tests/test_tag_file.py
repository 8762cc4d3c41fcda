"""The tag postings saved beside a SQLite store (``<db>-tags.arrays``, ``TagPostings.save`` /
``load``): mapped back with the same postings and rankings, and a damaged, truncated, stale or
another database's file refused with one warning naming it and read again from SQL; an
erasure removes the file. (PostgreSQL keeps its tag replicas in RAM only: no file there.)"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest

from mempp import Memory
from mempp.filters import NO_FILTERS
from mempp.index.tags import TagPostings
from mempp.store.sqlite import SQLiteStore
from mempp.store.sqlite import replicas as sqlite_replicas
from mempp.store.sqlite.schema import TAGS_FILE_SUFFIX
from test_tag_index import TAGS, assert_same_as_sql, fill

from conftest import KeywordEmbedder


def _random_postings(rng: np.random.Generator) -> TagPostings:
    lists = {
        f"label-{n}-é": np.unique(rng.integers(1, 5000, int(rng.integers(0, 400))))
        for n in range(30)
    }
    return TagPostings.from_lists(lists, 5000)


def test_saved_postings_map_back_with_the_same_lists_and_rankings(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    held = _random_postings(rng)
    held.label = "12:ABCD:0:12"
    path = tmp_path / "x-tags.arrays"
    held.save(path)
    loaded = TagPostings.load(path)
    assert (loaded.label, loaded.max_id, len(loaded)) == (held.label, 5000, len(held))
    assert not loaded._ids.flags.owndata  # a view of the map, not a copy
    allowed = set(rng.integers(1, 5000, 3000).tolist())

    def eligible(ids: np.ndarray) -> np.ndarray:
        return np.fromiter((int(i) in allowed for i in ids), dtype=bool, count=len(ids))

    for label in [f"label-{n}-é" for n in range(30)] + ["absent"]:
        assert loaded.postings(label).tolist() == held.postings(label).tolist()
    tail = {"label-3-é": np.array([5001, 5007]), "new": np.array([5002])}
    for _ in range(40):
        asked = [f"label-{int(n)}-é" for n in rng.integers(0, 32, int(rng.integers(1, 4)))]
        limit = int(rng.choice([1, 10, 100, 5000]))
        assert loaded.search(asked, eligible, limit) == held.search(asked, eligible, limit)
        assert loaded.search([*asked, "new"], eligible, limit, tail) == held.search(
            [*asked, "new"], eligible, limit, tail
        )
    extended = loaded.extended(tail, 5007)  # appending copies out of the map
    assert extended.postings("label-3-é").tolist()[-2:] == [5001, 5007]
    assert TagPostings.load(path).postings("new").tolist() == []


def test_damaged_truncated_or_inconsistent_files_are_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    from mempp.index import array_file

    path = tmp_path / "x-tags.arrays"
    _random_postings(np.random.default_rng(4)).save(path)
    whole = path.read_bytes()
    flipped = bytearray(whole)
    flipped[len(whole) - 3] ^= 0x10
    for content in (whole[:-5], bytes(flipped), b"junk"):
        path.write_bytes(content)
        with pytest.raises(ValueError, match=str(path)):
            TagPostings.load(path)
    meta = {"kind": "mempp tag postings", "version": 1, "max_id": 10, "label": ""}
    ids = np.array([3, 5, 11])  # above max_id
    arrays = {
        "labels": np.frombuffer(b"ab", dtype=np.uint8),
        "label_offsets": np.array([0, 1, 2]),
        "offsets": np.array([0, 2, 3]),
        "ids": ids,
    }
    array_file.write(path, meta, arrays)
    with pytest.raises(ValueError, match=r"x-tags\.arrays: not a tag postings file \(its arr"):
        TagPostings.load(path)
    array_file.write(path, {**meta, "kind": "mempp bm25 replica"}, arrays)
    with pytest.raises(ValueError, match=r"not a tag postings file \(another kind"):
        TagPostings.load(path)


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every store counts as large (postings read in a thread, saved beside the file); the
    reads from SQL are counted."""
    monkeypatch.setattr(sqlite_replicas, "_TAGS_SYNC_ROWS", 0)
    monkeypatch.setattr(sqlite_replicas._ReplicasMixin, "tags_file_min_rows", 0)
    reads: list[int] = []
    real = sqlite_replicas._tag_postings_from_sql

    def counted(conn):  # type: ignore[no-untyped-def]
        reads.append(1)
        return real(conn)

    monkeypatch.setattr(sqlite_replicas, "_tag_postings_from_sql", counted)
    return reads


def _warm_store(path: Path) -> tuple[Memory, SQLiteStore]:
    memory = Memory(path, embedder=KeywordEmbedder())
    memory.warm()
    store = memory.store
    assert isinstance(store, SQLiteStore) and store._tags_thread is None
    store.tagged("default", ["ops"], None, 5)  # adopts what the thread read
    assert store._tags is not None
    return memory, store


def test_store_saves_the_postings_and_the_next_process_maps_them(
    tmp_path: Path, large: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(21)
    path = tmp_path / "tags.db"
    saved = Path(f"{path}{TAGS_FILE_SUFFIX}")
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 400)
    assert not saved.exists()
    memory, store = _warm_store(path)
    with memory:
        assert large == [1] and saved.exists()
        expected = {
            tuple(labels): store._tagged_sql("default", labels, None, 50, NO_FILTERS)
            for labels in (["ops"], ["ana", "finance"], TAGS)
        }
    with caplog.at_level(logging.WARNING, logger="mempp.store"):
        memory, store = _warm_store(path)
        with memory:
            assert large == [1]  # mapped from the file, not read from SQL
            assert not store._tags._ids.flags.owndata
            for labels, want in expected.items():
                assert store.tagged("default", list(labels), None, 50) == want
            assert_same_as_sql(store, rng, rounds=30)
            fill(memory, rng, 30)  # served with the per-search tail on top of the map
            assert_same_as_sql(store, rng, rounds=30)
    assert not caplog.records


@pytest.mark.parametrize("damage", ["truncated", "flipped", "junk"])
def test_a_damaged_file_is_refused_in_one_warning_and_read_again(
    tmp_path: Path, large: list[int], caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    rng = random.Random(22)
    path = tmp_path / "tags.db"
    saved = Path(f"{path}{TAGS_FILE_SUFFIX}")
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 300)
    _warm_store(path)[0].close()
    whole = saved.read_bytes()
    if damage == "truncated":
        saved.write_bytes(whole[: len(whole) // 2])
    elif damage == "flipped":
        flipped = bytearray(whole)
        flipped[-9] ^= 0x04
        saved.write_bytes(bytes(flipped))
    else:
        saved.write_bytes(b"not an array file")
    reads = len(large)
    with caplog.at_level(logging.WARNING, logger="mempp.store"):
        memory, store = _warm_store(path)
        with memory:
            assert len(large) == reads + 1  # read again from SQL
            assert_same_as_sql(store, rng, rounds=30)
    (record,) = caplog.records
    message = record.getMessage()
    assert str(saved) in message and "building the tag postings again" in message
    assert "\n" not in message
    assert saved.read_bytes() == whole  # saved again, as it was


def test_another_database_at_the_path_or_a_stale_file_is_not_used(
    tmp_path: Path,
    large: list[int],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(23)
    path = tmp_path / "tags.db"
    saved = Path(f"{path}{TAGS_FILE_SUFFIX}")
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 300)
    _warm_store(path)[0].close()
    kept = saved.read_bytes()
    for end in ("", "-wal", "-shm"):
        Path(f"{path}{end}").unlink(missing_ok=True)
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 300)  # same ids, other rows
    saved.write_bytes(kept)
    reads = len(large)
    with caplog.at_level(logging.WARNING, logger="mempp.store"):
        memory, store = _warm_store(path)
        with memory:
            assert len(large) == reads + 1
            assert_same_as_sql(store, rng, rounds=20)
    assert any("saved for other rows" in r.getMessage() for r in caplog.records)
    # Far behind the database (more rows added than an eighth of it): read afresh, no warning.
    monkeypatch.setattr(sqlite_replicas, "_TAGS_TAIL_ROWS", 10)
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 200)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mempp.store"):
        memory, store = _warm_store(path)
        with memory:
            assert len(large) == reads + 2 and store._tags.max_id == 500
    assert not caplog.records
    assert TagPostings.load(saved).max_id == 500


def test_an_erasure_removes_the_file_and_the_next_one_lacks_the_erased_labels(
    tmp_path: Path, large: list[int]
) -> None:
    rng = random.Random(24)
    path = tmp_path / "tags.db"
    saved = Path(f"{path}{TAGS_FILE_SUFFIX}")
    with Memory(path, embedder=KeywordEmbedder()) as memory:
        fill(memory, rng, 200)
        secret = memory.add("the secret plan", tags=["zq-secret-label"]).id
    memory, store = _warm_store(path)
    with memory:
        assert b"zq-secret-label" in saved.read_bytes()
        memory.redact(secret, reason="erasure")
        assert not saved.exists()
        assert store.tagged("default", ["zq-secret-label"], None, 5) == []
        store.warm("default")
        assert_same_as_sql(store, rng, rounds=20)
    _warm_store(path)[0].close()
    assert saved.exists() and b"zq-secret-label" not in saved.read_bytes()
