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


# -- each tampering verify claims to find, and the lawful changes it must not cry wolf at ----
def _sqlite_behind_triggers(path: str, statements: list[str]) -> None:
    """Run ``statements`` with the content triggers dropped, then put them back as they were:
    what the file's owner can do, leaving the triggers check nothing to see."""
    conn = sqlite3.connect(path, isolation_level=None)
    names = (
        "records_content_frozen",
        "records_erased_only",
        "records_no_replace",
        "records_vector_frozen",
    )
    saved = [
        conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
        for name in names
    ]
    for name in names:
        conn.execute(f"DROP TRIGGER {name}")
    for statement in statements:
        conn.execute(statement)
    for sql in saved:
        conn.execute(sql)
    conn.close()


def _postgres_behind_triggers(url: str, statements: list[str]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE records DISABLE TRIGGER USER")
        for statement in statements:
            conn.execute(statement)
        conn.execute("ALTER TABLE records ENABLE TRIGGER USER")


def test_a_redacted_store_passes(memory, capsys) -> None:
    memory.redact(2, reason="erasure request")
    memory.supersede(1, by=3, reason="newer")
    memory.archive(4, reason="obsolete")
    assert failing(memory) == set()
    assert main(["--db", str(memory.store.location), "verify"]) == 0
    assert "ok    record texts: every one of 5 texts" in capsys.readouterr().out


def test_a_text_rewritten_with_the_triggers_off_is_found(memory, engine_location) -> None:  # noqa: F811
    if "://" in engine_location:
        # The hash tells, and the row's terms (schema 10) are no longer its text's.
        _postgres_behind_triggers(
            engine_location, ["UPDATE records SET text = 'alpha forged' WHERE id = 3"]
        )
        assert failing(memory) == {"record texts", "full-text index"}
        detail = next(c.detail for c in memory.verify() if c.name == "full-text index")
        assert "(ids 3)" in detail
    else:
        _sqlite_behind_triggers(
            engine_location, ["UPDATE records SET text = 'alpha forged' WHERE id = 3"]
        )
        assert failing(memory) == {"record texts", "full-text index"}
    detail = next(c.detail for c in memory.verify() if c.name == "record texts")
    assert "records 3)" in detail and "1 of 5" in detail


def test_a_text_rewritten_by_replace_into_is_found(memory, engine_location) -> None:  # noqa: F811
    if "://" in engine_location:
        pytest.skip("REPLACE INTO is SQLite's")
    columns = (
        "id, scope, text_hash, author, event_date, event_key, tags, source, ingested_at, "
        "ingested_key, state, superseded_by, embedding, thread, metadata"
    )
    _sqlite_behind_triggers(
        engine_location,
        [
            f"REPLACE INTO records (text, {columns}) "
            f"SELECT 'alpha replaced', {columns} FROM records WHERE id = 4"
        ],
    )
    assert failing(memory) == {"record texts", "full-text index"}


def test_terms_rewritten_with_the_triggers_off_are_found(memory, engine_location) -> None:  # noqa: F811
    if "://" not in engine_location:
        pytest.skip("records.terms is PostgreSQL's (SQLite's FTS5 is checked by its own command)")
    # Rows found by words they do not hold: the text and its hash are intact.
    _postgres_behind_triggers(
        engine_location, ["UPDATE records SET terms = terms || ' forged' WHERE id = 4"]
    )
    assert failing(memory) == {"full-text index"}
    detail = next(c.detail for c in memory.verify() if c.name == "full-text index")
    assert "1 rows' terms differ" in detail and "(ids 4)" in detail


def test_a_zeroed_vector_is_found(memory, engine_location) -> None:  # noqa: F811
    if "://" in engine_location:
        _postgres_behind_triggers(
            engine_location,
            [
                "UPDATE records SET embedding = "
                "array_fill(0, ARRAY[vector_dims(embedding)])::vector WHERE id = 5"
            ],
        )
    else:
        _sqlite_behind_triggers(
            engine_location,
            ["UPDATE records SET embedding = zeroblob(length(embedding)) WHERE id = 5"],
        )
    assert failing(memory) == {"vectors"}
    detail = next(c.detail for c in memory.verify() if c.name == "vectors")
    assert "records 5)" in detail and "zeroed" in detail


def test_a_tombstone_without_its_redaction_row_is_found(memory, engine_location) -> None:  # noqa: F811
    # Erased values on a row no redaction accounts for: the text's hash no longer matches.
    if "://" in engine_location:
        _postgres_behind_triggers(
            engine_location, ["UPDATE records SET text = '', text_hash = '\\x' WHERE id = 2"]
        )
        assert failing(memory) == {"record texts", "full-text index"}
    else:
        _sqlite_behind_triggers(
            engine_location, ["UPDATE records SET text = '', text_hash = x'' WHERE id = 2"]
        )
        assert "record texts" in failing(memory)


def test_a_store_redacted_before_the_fix_is_repaired_on_open(memory, engine_location) -> None:  # noqa: F811
    if "://" in engine_location:
        pytest.skip("the FTS5 entry of a tombstone is SQLite's")
    memory.redact(2, reason="erasure request")
    memory.close()
    conn = sqlite3.connect(engine_location, isolation_level=None)
    # What a redaction did before schema 10: the tombstone's entry taken out of the index.
    conn.execute("INSERT INTO records_fts (records_fts, rowid, text) VALUES ('delete', 2, '')")
    conn.execute("DELETE FROM mempp_migrations WHERE version = 10")
    conn.close()
    with Memory(engine_location, embedder=KeywordEmbedder(["alpha"])) as reopened:
        assert failing(reopened) == set()
