"""What a source says beyond the six fields (record metadata) and re-import by source, on both
engines: stored, frozen, exported and read back; an edit between two exports adds nothing."""

from __future__ import annotations

import json
import sqlite3

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.importers import get, run_import
from mempp.transfer.export import record_line
from test_import_mail import CHAIN, build_mbox
from test_import_slack import GENERAL_0312, build_export

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location


def test_metadata_is_exported(tmp_path) -> None:
    meta = {"user": "U1", "nested": {"n": 1}}
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        record = memory.get(memory.add("With metadata", metadata=meta).id)
    assert record_line(record)["metadata"] == meta and record.to_dict()["metadata"] == meta


@pytest.mark.parametrize(
    "bad, message",
    [
        ([1, 2], "metadata: must be a mapping, got list"),
        ({1: "x"}, "metadata: keys must be strings, got 1"),
        ({"x": float("nan")}, "metadata.x: must be a finite number"),
        ({"x": b"raw"}, "metadata.x: must be JSON, got bytes"),
        ({"x": "\x00"}, "metadata.x: contains a NUL character"),
        ({"x": "a" * 70_000}, "metadata: is longer than 65536 bytes as JSON"),
    ],
)
def test_metadata_that_is_not_json_is_refused(bad, message) -> None:
    with pytest.raises(InvalidInput) as caught:
        Document.create("text", metadata=bad)
    assert str(caught.value) == message


def test_metadata_never_changes_on_sqlite(tmp_path) -> None:
    db = tmp_path / "m.db"
    with Memory(db, embedder=KeywordEmbedder()) as memory:
        memory.add("frozen", metadata={"a": 1})
    with sqlite3.connect(db) as conn, pytest.raises(sqlite3.DatabaseError, match="never changes"):
        conn.execute("UPDATE records SET metadata = '{}'")


def test_slack_and_mail_records_keep_their_ids_and_addresses(tmp_path, engine_location) -> None:
    export = build_export(tmp_path / "export")
    box = build_mbox(tmp_path / "team.mbox", CHAIN)
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        run_import(memory, get("slack"), export)
        run_import(memory, get("mail"), box)
        by_source = {r.source: r for r in memory.records()}
    assert by_source["slack://C1/1710235000.000400"].metadata == {
        "channel": "C1",
        "ts": "1710235000.000400",
        "user": "U3",
        "edited": "1710235100.000000",
    }
    assert by_source["slack://C1/1710237000.000600"].metadata["files"] == ["q2.pdf"]
    assert by_source["slack://C1/1710236000.000500"].metadata == {
        "channel": "C1",
        "ts": "1710236000.000500",
        "bot_id": "BX",
        "subtype": "bot_message",
    }
    assert by_source["mid:r1@acme.example"].metadata == {
        "from": "bo@acme.example",
        "to": ["team@acme.example"],
        "message_id": "r1@acme.example",
        "in_reply_to": "root@acme.example",
    }


def test_a_message_edited_between_two_exports_is_not_added_again(tmp_path, engine_location):
    first = build_export(tmp_path / "first")
    edited = [dict(m) for m in GENERAL_0312]
    edited[3] = {
        **edited[3],
        "text": "Final wording, edited again",
        "edited": {"user": "U3", "ts": "1710300000.000000"},
    }
    second = build_export(tmp_path / "second", {"general/2024-03-12.json": edited})
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        run_import(memory, get("slack"), first)
        again = run_import(memory, get("slack"), second)
        assert again.added == 0 and again.skipped["already imported"] == 9 and len(memory) == 9
        # A folder's sources are paths, whose files change: a new version is a new record.
        note = tmp_path / "notes" / "plan.md"
        note.parent.mkdir()
        note.write_text("Plan v1")
        run_import(memory, get("folder"), note.parent)
        note.write_text("Plan v2")
        assert run_import(memory, get("folder"), note.parent).added == 1


def test_unknown_keys_are_kept_as_metadata_and_read_back_from_an_export(tmp_path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text(
        "---\nauthor: Ana\npriority: high\nreviewers: [bo, cy]\nmetadata: {team: core}\n---\nBody\n"
    )
    (notes / "feed.jsonl").write_text(
        json.dumps({"text": "Line", "ticket": "T-7", "votes": 3})
        + "\n"
        + json.dumps({"text": "Bad", "metadata": [1]})
        + "\n"
    )
    db, copy = tmp_path / "m.db", tmp_path / "copy.db"
    with Memory(db, embedder=KeywordEmbedder()) as memory:
        report = run_import(memory, get("folder"), notes)
        records = {r.text: r for r in memory.records()}
        lines = [json.dumps(record_line(r)) for r in memory.records()]
    assert [f.reason for f in report.failures] == ["metadata: must be a mapping, got list"]
    assert records["Body"].metadata == {
        "priority": "high",
        "reviewers": ["bo", "cy"],
        "team": "core",
    }
    assert records["Line"].metadata == {"ticket": "T-7", "votes": 3}
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join(lines) + "\n")
    with Memory(copy, embedder=KeywordEmbedder()) as memory:
        run_import(memory, get("folder"), export)
        again = {r.text: r.metadata for r in memory.records()}
    # The store's own fields in an export line (id, scope, state...) do not become metadata.
    assert again == {text: r.metadata for text, r in records.items()}
