"""An erasure made through one SQLite store object, seen by another on the same file (as a
second process sees it): the other object's in-RAM copies (the vector index's int8 codes,
the BM25 replica) lose the erased rows at its next search, nothing it saves beside the file
afterwards holds them, and a copy it saves from a snapshot read before the erasure never
stays on disk after it (``mempp.store.sqlite.stale_copy``). Each ordering is forced by a hook;
then random steps of two objects (adds, erasures, restarts; both search after each step) check
the same after every step. PostgreSQL's replicas, per process, are checked once."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempp import Memory
from mempp.index import array_file
from mempp.index.bm25 import Bm25Index
from mempp.index.tags import TagPostings
from mempp.index.vectors import ExactVectorIndex
from mempp.settings import preset
from mempp.store.sqlite import replicas, schema, stale_copy, vector_file
from mempp.store.sqlite.replicas import _fingerprint
from mempp.store.sqlite.schema import BM25_FILE_SUFFIX, TAGS_FILE_SUFFIX

from conftest import KeywordEmbedder, examples
from engines import pg_server, pg_url  # noqa: F401 - fixtures

KEYWORDS = ["alpha", "beta", "gamma", "secret"]
EMBEDDER = KeywordEmbedder(KEYWORDS)
SECRET_AXIS = KEYWORDS.index("secret")
DEFAULT = preset("default")


def _fill(db: str, count: int, start: int = 0) -> list[int]:
    with Memory(db, embedder=EMBEDDER) as memory:
        rows = memory.add_many(
            [
                {"text": f"{KEYWORDS[i % 3]} note {i}", "date": "2023-01-02", "tags": ["t"]}
                for i in range(start, start + count)
            ]
        )
    return [r.id for r in rows if r.id is not None]


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A file whose every copy is saved beside it, holding one secret row among others."""
    monkeypatch.setattr(replicas._ReplicasMixin, "vector_file_min_rows", 1)
    monkeypatch.setattr(replicas._ReplicasMixin, "tags_file_min_rows", 1)
    monkeypatch.setattr(schema, "BM25_RAM_MIN_ROWS", 1)
    db = str(tmp_path / "erase.db")
    with Memory(db, embedder=EMBEDDER) as memory:
        (secret,) = memory.add_many(
            [{"text": "alpha secret plan", "date": "2023-01-01", "tags": ["secret-tag"]}]
        )
    _fill(db, 40)
    assert secret.id is not None
    return db, secret.id


def _codes_of(index: ExactVectorIndex | dict[str, np.ndarray], record: int) -> np.ndarray:
    """The int8 codes held for ``record`` (by an index, or in a saved file's arrays)."""
    arrays = index.export() if isinstance(index, ExactVectorIndex) else index
    arrival = int(np.flatnonzero(arrays["ids"] == record)[0])
    scan = int(np.flatnonzero(arrays["order"][: len(arrays["ids"])] == arrival)[0])
    return np.asarray(arrays["codes"][scan])


def _saved_codes(db: str, record: int) -> np.ndarray:
    _, arrays = array_file.read(db + vector_file.VECTOR_FILE_SUFFIX)
    return _codes_of(arrays, record)


def _index(memory: Memory) -> ExactVectorIndex:
    index = memory.store._vector_index()  # type: ignore[attr-defined]
    assert index is not None
    return index


def test_the_other_objects_index_loses_the_erased_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, secret = _store(tmp_path, monkeypatch)
    with Memory(db, embedder=EMBEDDER) as other, Memory(db, embedder=EMBEDDER) as eraser:
        assert secret in other.legs("secret", as_of=None, settings=DEFAULT).vec
        assert _codes_of(_index(other), secret)[SECRET_AXIS] != 0
        eraser.redact(secret, reason="test")
        assert secret not in other.legs("secret", as_of=None, settings=DEFAULT).vec
        assert not _codes_of(_index(other), secret).any()


def test_what_the_other_object_saves_after_the_erasure_holds_no_erased_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, secret = _store(tmp_path, monkeypatch)
    with Memory(db, embedder=EMBEDDER) as other:
        other.search("alpha")  # loads the index (and saves it: one row is enough here)
        assert _saved_codes(db, secret)[SECRET_AXIS] != 0
        with Memory(db, embedder=EMBEDDER) as eraser:
            eraser.redact(secret, reason="test")
        assert not Path(db + vector_file.VECTOR_FILE_SUFFIX).exists()  # the eraser held none
        _fill(db, 40, start=40)  # enough new rows that the other object saves again
        other.search("alpha")
        assert Path(db + vector_file.VECTOR_FILE_SUFFIX).exists()
        assert not _saved_codes(db, secret).any()
    with Memory(db, embedder=EMBEDDER) as fresh:  # the saved file loads, and is right
        assert not _codes_of(_index(fresh), secret).any()
        assert secret not in fresh.legs("secret", as_of=None, settings=DEFAULT).vec


def _before_next(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, run: Callable[[], Any]
) -> None:
    """Run ``run`` once, just before the next call of ``owner.<name>``."""
    real = getattr(owner, name)
    armed = [True]

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            armed[0] = False
            run()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)


def _copy_on_disk_current(
    db: str, suffix: str, fingerprint: Callable[[sqlite3.Connection, int], Any], key: str
) -> bool | None:
    """None when no copy is beside ``db``, else whether its header describes the database
    now (as ``stale_copy`` judges it)."""
    path = Path(db + suffix)
    if not path.exists():
        return None
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return stale_copy._judged(path, stale_copy.label_matches(conn, fingerprint, key=key))
    finally:
        conn.close()


def test_a_vector_copy_saved_from_before_an_erasure_does_not_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, secret = _store(tmp_path, monkeypatch)
    with Memory(db, embedder=EMBEDDER) as saver, Memory(db, embedder=EMBEDDER) as eraser:
        # The saver has read its rows (before the erasure); the erasure commits and removes
        # the file; then the saver's file, with the secret row's codes, is put in place.
        _before_next(
            monkeypatch, replicas, "save_vector_index", lambda: eraser.redact(secret, reason="t")
        )
        saver.search("alpha")
        current = _copy_on_disk_current(
            db, vector_file.VECTOR_FILE_SUFFIX, vector_file.fingerprint, "fingerprint"
        )
        assert current is None  # the saver's own check removed it
        assert not list(tmp_path.glob("*.discard"))
        assert secret not in saver.legs("secret", as_of=None, settings=DEFAULT).vec
        assert not _codes_of(_index(saver), secret).any()


@pytest.mark.parametrize(
    ("kind", "suffix", "fingerprint"),
    [
        (Bm25Index, BM25_FILE_SUFFIX, _fingerprint),
        (TagPostings, TAGS_FILE_SUFFIX, vector_file.fingerprint),
    ],
    ids=["bm25", "tags"],
)
def test_a_replica_saved_from_before_an_erasure_does_not_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type, suffix: str, fingerprint: Any
) -> None:
    db, secret = _store(tmp_path, monkeypatch)
    with Memory(db, embedder=EMBEDDER) as saver, Memory(db, embedder=EMBEDDER) as eraser:
        eraser.store._conn.execute("PRAGMA busy_timeout = 50")  # type: ignore[attr-defined]
        _before_next(monkeypatch, kind, "save", lambda: eraser.redact(secret, reason="t"))
        saver.warm()  # reads the replica in a thread, saves it after the erasure's removal
        assert _copy_on_disk_current(db, suffix, fingerprint, "label") is not False
        assert not list(tmp_path.glob("*.discard"))


def test_the_other_objects_bm25_replica_is_read_again_after_an_erasure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, secret = _store(tmp_path, monkeypatch)
    with Memory(db, embedder=EMBEDDER) as other, Memory(db, embedder=EMBEDDER) as eraser:
        other.warm()
        bm25 = other.store._bm25  # type: ignore[attr-defined]
        assert bm25 is not None and secret in bm25.postings("secret")[0]
        eraser.redact(secret, reason="test")
        other.warm()  # the next search drops it; warm reads it again
        bm25 = other.store._bm25  # type: ignore[attr-defined]
        assert bm25 is not None and secret not in bm25.postings("secret")[0]
        assert secret not in other.legs("secret", as_of=None, settings=DEFAULT).lex


def test_postgres_other_nodes_replicas_lose_the_erased_row(pg_url: str) -> None:  # noqa: F811
    """PostgreSQL keeps its replicas per scope and per process, each tied to the scope's
    erasure count: another node's erasure makes the next search read them afresh."""
    with Memory(pg_url, embedder=EMBEDDER) as other, Memory(pg_url, embedder=EMBEDDER) as eraser:
        (secret,) = other.add_many([{"text": "alpha secret plan", "date": "2023-01-01"}])
        other.add_many([f"{KEYWORDS[i % 3]} note {i}" for i in range(40)])
        assert secret.id in other.legs("secret", as_of=None, settings=DEFAULT).vec
        vectors = other.store._vector_replicas.get(other.scope)  # type: ignore[attr-defined]
        assert _codes_of(vectors._index, secret.id)[SECRET_AXIS] != 0
        eraser.redact(secret.id, reason="test")
        legs = other.legs("secret", as_of=None, settings=DEFAULT)
        assert secret.id not in legs.vec and secret.id not in legs.lex
        vectors = other.store._vector_replicas.get(other.scope)  # type: ignore[attr-defined]
        assert vectors is not None and not _codes_of(vectors._index, secret.id).any()


# One step of two store objects ("a", "b") sharing one file: add rows, erase a row, or close
# and open again (a process that restarts). After every step both search and are checked.
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from("ab"), st.integers(1, 30)),
        st.tuples(st.just("redact"), st.sampled_from("ab"), st.integers(0, 10**6)),
        st.tuples(st.just("reopen"), st.sampled_from("ab"), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


def _settle(memories: dict[str, Memory]) -> None:
    """Wait for the replicas' threads, so what is on disk is what they saved."""
    for memory in memories.values():
        store = memory.store
        for thread in (store._bm25_thread, store._tags_thread):  # type: ignore[attr-defined]
            if thread is not None:
                thread.join()


def _searches_hold_no_erased_row(memories: dict[str, Memory], erased: set[int]) -> None:
    """Each object searches (then again, adopting what its threads read meanwhile); its
    vector index holds no erased row's codes, its BM25 replica none of their terms."""
    for memory in memories.values():
        memory.search("alpha secret")
    _settle(memories)
    for name, memory in memories.items():
        memory.search("alpha secret")
        index = memory.store._index  # type: ignore[attr-defined]
        if index is not None:
            for record in erased:
                if record <= index.max_id:
                    assert not _codes_of(index, record).any(), (name, record)
        bm25 = memory.store._bm25  # type: ignore[attr-defined]
        if bm25 is not None:
            assert not set(bm25.postings("secret")[0].tolist()) & erased, name


def _saved_copies_are_current(db: str, erased: set[int]) -> None:
    """Every copy on disk describes the database now, and none holds an erased row's codes."""
    for suffix, fingerprint, key in (
        (vector_file.VECTOR_FILE_SUFFIX, vector_file.fingerprint, "fingerprint"),
        (BM25_FILE_SUFFIX, _fingerprint, "label"),
        (TAGS_FILE_SUFFIX, vector_file.fingerprint, "label"),
    ):
        assert _copy_on_disk_current(db, suffix, fingerprint, key) is not False, suffix
    path = Path(db + vector_file.VECTOR_FILE_SUFFIX)
    if path.exists():
        _, arrays = array_file.read(path)
        for record in erased & set(arrays["ids"].tolist()):
            assert not _codes_of(arrays, record).any(), record


@settings(max_examples=examples(25, share=0.2))
@given(_STEPS)
def test_random_steps_of_two_objects_never_keep_an_erased_row(steps: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(replicas._ReplicasMixin, "vector_file_min_rows", 1)
        patch.setattr(replicas._ReplicasMixin, "tags_file_min_rows", 1)
        patch.setattr(schema, "BM25_RAM_MIN_ROWS", 1)
        db = str(Path(folder) / "steps.db")
        memories = {name: Memory(db, embedder=EMBEDDER) for name in "ab"}
        rows: list[int] = []
        erased: set[int] = set()
        try:
            for kind, name, number in steps:
                memory = memories[name]
                if kind == "add":
                    added = memory.add_many(
                        [
                            {"text": f"{KEYWORDS[i % 4]} step {len(rows) + i}", "tags": ["t"]}
                            for i in range(number)
                        ]
                    )
                    rows += [r.id for r in added if r.id is not None]
                elif kind == "redact" and len(erased) < len(rows):
                    left = [r for r in rows if r not in erased]
                    record = left[number % len(left)]
                    memory.redact(record, reason="step")
                    erased.add(record)
                elif kind == "reopen":
                    memory.close()
                    memories[name] = Memory(db, embedder=EMBEDDER)
                _searches_hold_no_erased_row(memories, erased)
                _saved_copies_are_current(db, erased)
        finally:
            for memory in memories.values():
                memory.close()
