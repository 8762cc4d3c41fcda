"""The SQLite context copy (``<db>-context.arrays``) against an erasure in another store
object on the same file (issue 37, session 17): a copy saved from a snapshot taken before
the erasure never stays on disk after it, a copy a load refuses is removed, and removing a
stale copy never removes a valid one saved at the same time."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mempp import Memory
from mempp.settings import preset
from mempp.store.context import ContextRule
from mempp.store.sqlite import context_file, stale_copy

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

KEYWORDS = ["alpha", "beta", "gamma", "delta", "secret"]
THREAD = [
    ("alpha secret", "2023-01-01"),
    ("beta", "2023-01-02"),
    ("gamma", "2023-01-03"),
    ("delta", "2023-01-04"),
]


def _ctx(memory: Memory) -> list[int]:
    settings = preset("default").with_(w_ctx=0.5, ctx_credit="members")
    return memory.legs("gamma", as_of=None, settings=settings).ctx


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[int]]:
    monkeypatch.setattr("mempp.store.sqlite.context._ContextMixin.context_file_min_rows", 1)
    db = str(tmp_path / "race.db")
    with Memory(db, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        memory.enable_context(rule=ContextRule("sum", 2, decay=0.5))
        rows = memory.add_many([{"text": t, "date": d, "thread": "t"} for t, d in THREAD])
    return db, [r.id for r in rows if r.id is not None]


def _copy_is_current(db: str) -> bool | None:
    """None when no copy is on disk, else whether it is the database's current one."""
    path = Path(db + context_file.CONTEXT_FILE_SUFFIX)
    if not path.exists():
        return None
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return stale_copy._judged(path, context_file._current(conn))
    finally:
        conn.close()


def _hook(monkeypatch: pytest.MonkeyPatch, name: str, before: bool, run: Callable[[], Any]) -> None:
    """Run ``run`` once, before or after the next call of ``context_file.<name>``."""
    real = getattr(context_file, name)
    armed = [True]

    def hooked(*args: Any) -> Any:
        if armed[0] and before:
            armed[0] = False
            run()
        result = real(*args)
        if armed[0]:
            armed[0] = False
            run()
        return result

    monkeypatch.setattr(context_file, name, hooked)


def test_a_copy_saved_from_before_an_erasure_goes_once_it_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ids = _store(tmp_path, monkeypatch)
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(db, embedder=embedder) as saver, Memory(db, embedder=embedder) as eraser:
        # The saver has read its rows (a snapshot before the erasure); the erasure commits,
        # its own removals find no file; then the saver's file is renamed into place. (The
        # erasure's WAL checkpoint would wait for the saver's snapshot: it gives up at once.)
        eraser.store._conn.execute("PRAGMA busy_timeout = 50")  # type: ignore[attr-defined]
        _hook(monkeypatch, "save", True, lambda: eraser.redact(ids[0], reason="test"))
        assert _ctx(saver)
        assert _copy_is_current(db) is None  # the saver's check after its save removed it
        assert not list(tmp_path.glob("*.discard"))
        _ctx(eraser)
        assert _copy_is_current(db) is True  # saved again, of the contexts after the erasure


def test_a_copy_saved_inside_the_erasures_transaction_goes_after_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ids = _store(tmp_path, monkeypatch)
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(db, embedder=embedder) as saver, Memory(db, embedder=embedder) as eraser:
        seen: list[bool | None] = []

        def save_meanwhile() -> None:
            # The erasure has removed the file in its transaction, not yet committed: the
            # saver loads, saves, and its own check still finds the copy current.
            _ctx(saver)
            seen.append(_copy_is_current(db))

        _hook(monkeypatch, "remove", False, save_meanwhile)
        eraser.redact(ids[0], reason="test")
        assert seen == [True]
        assert _copy_is_current(db) is None  # the erasure's check after its commit took it


def test_a_refused_stale_copy_is_removed_and_saved_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db, ids = _store(tmp_path, monkeypatch)
    path = Path(db + context_file.CONTEXT_FILE_SUFFIX)
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(db, embedder=embedder) as memory:
        _ctx(memory)
    old = path.read_bytes()  # the copy before the erasure, as a stopped process leaves it
    with Memory(db, embedder=embedder) as memory:
        memory.redact(ids[0], reason="test")
    path.write_bytes(old)
    monkeypatch.setattr("mempp.store.sqlite.context._ContextMixin.context_file_min_rows", 10**6)
    with Memory(db, embedder=embedder) as memory, caplog.at_level("WARNING", "mempp.store"):
        _ctx(memory)  # refused (stale), and too small to be saved again
        assert "stale" in caplog.text
        assert not path.exists()


def test_removing_a_stale_copy_keeps_a_valid_one_saved_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ids = _store(tmp_path, monkeypatch)
    path = Path(db + context_file.CONTEXT_FILE_SUFFIX)
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(db, embedder=embedder) as memory:
        _ctx(memory)
    stale = path.read_bytes()
    with Memory(db, embedder=embedder) as memory:
        memory.redact(ids[3], reason="test")
        _ctx(memory)
    valid = path.read_bytes()
    assert _copy_is_current(db) is True
    path.write_bytes(stale)
    real_rename = stale_copy.os.rename

    def rename(source: Any, target: Any) -> None:
        # Another process saves a valid copy between the first look and the rename.
        partial = path.with_name("other.partial")
        partial.write_bytes(valid)
        stale_copy.os.replace(partial, path)
        real_rename(source, target)

    monkeypatch.setattr(stale_copy.os, "rename", rename)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        assert context_file.discard_stale(conn) is False
    finally:
        conn.close()
    assert path.read_bytes() == valid
    assert not list(tmp_path.glob("*.discard"))


def test_warm_loads_the_context_copy(engine_location: str) -> None:  # noqa: F811
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(rule=ContextRule("sum", 2, decay=0.5))
        memory.add_many([{"text": t, "date": d, "thread": "t"} for t, d in THREAD])
    with Memory(engine_location, embedder=embedder) as memory:
        assert memory.store._ctx_index is None  # type: ignore[attr-defined]
        memory.warm()
        assert memory.store._ctx_index is not None  # type: ignore[attr-defined]
        assert _ctx(memory)
