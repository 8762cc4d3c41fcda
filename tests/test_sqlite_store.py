"""The embedded engine itself: append-only triggers, big documents, files and processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mempp import EncoderMismatch, Memory, Settings, StoreError
from mempp.store.sqlite import MIGRATIONS

from conftest import KeywordEmbedder

LEX_ONLY = Settings(w_vec=0, w_tag=0, reserve=0)


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_database_refuses_delete_and_content_updates(keyword_memory, db_path) -> None:
    rid = keyword_memory.add("alpha original", author="Ana", tags=["t"]).id
    conn = _raw(db_path)
    for statement in (
        "DELETE FROM records",
        f"DELETE FROM records WHERE id = {rid}",
        f"UPDATE records SET text = 'rewritten' WHERE id = {rid}",
        f"UPDATE records SET author = 'Eve' WHERE id = {rid}",
        f"UPDATE records SET event_key = 0 WHERE id = {rid}",
        f"UPDATE records SET embedding = x'00' WHERE id = {rid}",
        f"UPDATE records SET scope = 'other' WHERE id = {rid}",
        "DELETE FROM record_tags",
        "UPDATE record_tags SET label = 'x'",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="mempp"):
            conn.execute(statement)
    conn.execute(f"UPDATE records SET state = 'archived' WHERE id = {rid}")
    conn.execute(f"UPDATE records SET state = 'active', superseded_by = NULL WHERE id = {rid}")
    conn.close()
    record = keyword_memory.get(rid)
    assert record.text == "alpha original" and record.author == "Ana"


def test_two_megabyte_document_is_stored_whole_and_found_by_its_last_word(db_path) -> None:
    body = ("lorem ipsum dolor sit amet " * 80_000)[: 2 * 1024 * 1024]
    text = body + " xylophonist"
    with Memory(db_path, embedder=KeywordEmbedder(["lorem"])) as memory:
        rid = memory.add(text).id
        memory.add("a short unrelated note")
        assert memory.get(rid).text == text
        assert [h.id for h in memory.search("xylophonist", settings=LEX_ONLY)] == [rid]


def test_state_change_by_another_connection_is_seen(keyword_memory, db_path) -> None:
    rid = keyword_memory.add("alpha plan").id
    assert [h.id for h in keyword_memory.search("alpha")] == [rid]  # index now in RAM
    conn = _raw(db_path)
    conn.execute(f"UPDATE records SET state = 'archived' WHERE id = {rid}")
    conn.close()
    assert keyword_memory.search("alpha") == []


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from conftest import KeywordEmbedder
    from mempp import Memory
    with Memory({db!r}, embedder=KeywordEmbedder(["alpha", "beta"])) as memory:
        for i in range({count}):
            memory.add(f"{{sys.argv[1]}} alpha note {{i}}", date="2024-01-01")
    """
)


def _writer(db_path: Path, label: str, count: int) -> subprocess.Popen:
    code = SCRIPT.format(tests=str(Path(__file__).parent), db=str(db_path), count=count)
    return subprocess.Popen([sys.executable, "-c", code, label])


def test_rows_written_by_other_processes_are_searchable(db_path) -> None:
    memory = Memory(db_path, embedder=KeywordEmbedder(["alpha", "beta"]))
    memory.add("local alpha")
    assert len(memory.search("alpha")) == 1
    assert _writer(db_path, "remote", 5).wait() == 0
    assert len(memory.search("alpha")) == 6  # RAM index caught up
    memory.close()
    with Memory(db_path, embedder=KeywordEmbedder(["alpha", "beta"])) as reopened:
        assert len(reopened) == 6


def test_concurrent_writer_processes_lose_nothing(db_path) -> None:
    with Memory(db_path, embedder=KeywordEmbedder(["alpha", "beta"])):
        pass  # create the schema first, as a deployment would
    procs = [_writer(db_path, f"w{n}", 40) for n in range(4)]
    procs += [_writer(db_path, "w0", 40)]  # a second writer of the same texts: all duplicates
    assert [p.wait() for p in procs] == [0] * 5
    conn = _raw(db_path)
    total, distinct = conn.execute("SELECT count(*), count(DISTINCT text) FROM records").fetchone()
    conn.close()
    assert total == distinct == 160


def test_encoder_mismatch_is_refused(db_path) -> None:
    with Memory(db_path, embedder=KeywordEmbedder(["alpha"])) as memory:
        memory.add("alpha")
    with Memory(db_path, embedder=KeywordEmbedder(["beta", "gamma"])) as other:
        with pytest.raises(EncoderMismatch):
            other.add("beta")
        with pytest.raises(EncoderMismatch):
            other.search("beta")
        assert len(other) == 1


def test_not_a_database_and_missing_folder(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        Memory(junk)
    with pytest.raises(StoreError, match="does not exist"):
        Memory(tmp_path / "nope" / "x.db")
    with pytest.raises(StoreError, match="folder"):
        Memory(tmp_path)


def test_newer_schema_is_refused(db_path) -> None:
    Memory(db_path, embedder=KeywordEmbedder([])).close()
    conn = _raw(db_path)
    conn.execute("INSERT INTO mempp_migrations VALUES (999, 'future', 'now')")
    conn.close()
    with pytest.raises(StoreError, match="newer mempp"):
        Memory(db_path)


def test_migrations_are_recorded_once(db_path) -> None:
    for _ in range(3):
        Memory(db_path, embedder=KeywordEmbedder([])).close()
    conn = _raw(db_path)
    assert conn.execute("SELECT version FROM mempp_migrations").fetchall() == [
        (m.version,) for m in MIGRATIONS
    ]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
