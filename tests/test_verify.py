"""``mempp verify``: a sound store passes every check; what an owner or another program can
still do to the file (remove a row from the full-text index, drop a trigger, rewrite a
vector) is found."""

from __future__ import annotations

import json
import sqlite3

import pytest

from mempp import Memory
from mempp.cli.main import main

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures


def failing(memory: Memory) -> set[str]:
    return {check.name for check in memory.verify() if not check.ok}


@pytest.fixture
def memory(engine_location: str):  # noqa: F811
    with Memory(engine_location, embedder=KeywordEmbedder(["alpha"])) as memory:
        memory.add_many([f"alpha note {i}" for i in range(5)], batch_size=2)
        yield memory


def test_a_sound_store_passes(memory, capsys) -> None:
    checks = memory.verify()
    assert [c.ok for c in checks] == [True] * len(checks) and len(checks) >= 3
    location = str(memory.store.location)
    assert main(["--db", location, "verify", "--json"]) == 0
    assert all(check["ok"] for check in json.loads(capsys.readouterr().out))


def test_a_dropped_trigger_is_found(memory, engine_location, capsys) -> None:  # noqa: F811
    if "://" in engine_location:
        import psycopg

        with psycopg.connect(engine_location, autocommit=True) as conn:
            conn.execute("DROP TRIGGER records_no_delete ON records")
    else:
        with sqlite3.connect(engine_location) as conn:
            conn.execute("DROP TRIGGER records_no_delete")
        conn.close()
    assert failing(memory) == {"append-only triggers"}
    assert main(["--db", str(memory.store.location), "verify"]) == 1
    assert "FAIL  append-only triggers: missing: records_no_delete" in capsys.readouterr().out


def test_sqlite_fts_delete_and_a_rewritten_vector_are_found(memory, engine_location) -> None:  # noqa: F811
    if "://" in engine_location:
        pytest.skip("SQLite's FTS5 'delete' command and blob vectors")
    conn = sqlite3.connect(engine_location, isolation_level=None)
    # The FTS5 'delete' command cannot be refused (SQLite has no triggers on virtual tables):
    # the row stays in records but drops out of full-text search. verify finds it.
    conn.execute(
        "INSERT INTO records_fts (records_fts, rowid, text) VALUES ('delete', 1, 'alpha note 0')"
    )
    assert failing(memory) == {"full-text index"}
    conn.execute("INSERT INTO records_fts (records_fts) VALUES ('rebuild')")  # the repair
    assert failing(memory) == set()
    conn.execute("DROP TRIGGER records_content_frozen")  # what only the file's owner can do
    conn.execute("DROP TRIGGER records_vector_frozen")  # the vector's own guard (migration 9)
    conn.execute("UPDATE records SET embedding = x'00' WHERE id = 2")
    conn.close()
    assert failing(memory) == {"vectors", "append-only triggers"}
