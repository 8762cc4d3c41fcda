"""The validation boundary, case by case: each kind of hostile input the fuzzing found, as a
named regression test (the generated ones are in tests/test_hostile.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mempp import InvalidInput, Memory
from mempp.validate import (
    MAX_LABEL_BYTES,
    MAX_PAGE,
    MAX_QUERY_CHARS,
    MAX_QUERY_WORDS,
    MAX_SCOPE_BYTES,
)

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures


def mempp(*argv: str | bytes, stdin: bytes = b"", cwd: Path) -> subprocess.CompletedProcess:
    """The real command in a child process, with argv bytes passed as they are. The test
    encoder keeps it fast (MEMPP_ENCODER is not needed: reads and rejected input never
    encode)."""
    return subprocess.run(
        [sys.executable, "-m", "mempp.cli", *argv],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": ""},
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    err = result.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mempp: error: "), err
    return lines[0]


@pytest.fixture
def memory(engine_location: str):  # noqa: F811
    with Memory(engine_location, embedder=KeywordEmbedder(["launch"])) as memory:
        memory.add("launch on Friday", author="Ana", date="2024-03-01")
        yield memory


# -- the API ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"text": "x", "tags": True}, "items[1].tags"),
        ({"text": "x", "tags": 5}, "items[1].tags"),
        ({"text": "x", "tags": 1.5}, "items[1].tags"),
        ({"text": "x", "tags": ["a", ["nested"]]}, "items[1].tags[1]"),
        ({"text": "x", "tags": [None]}, "items[1].tags[0]"),
        ({"text": "x", "author": 10**5000}, "items[1].author"),
        ({"text": "x", "date": 20240101}, "items[1].date"),
        ({"text": None}, "items[1].text"),
        ({"author": "Ana"}, "items[1].text"),
        ({"text": "x", "thread": "t" * (MAX_LABEL_BYTES + 1)}, "items[1].thread"),
        ({"text": "x", "tags": ["é" * (MAX_LABEL_BYTES // 2 + 1)]}, "items[1].tags[0]"),
    ],
)
def test_add_many_names_the_item_and_field_and_stores_nothing(memory, item, field) -> None:
    with pytest.raises(InvalidInput) as caught:
        memory.add_many([{"text": "fine"}, item])
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert len(memory) == 1


def test_longest_labels_are_stored_by_both_engines(memory) -> None:
    """At the limits (4-byte characters, the bytes that count), both engines accept the
    document: PostgreSQL's btree indexes of author, thread and tags stay under their row
    limit, SQLite's store the same."""
    wide = "😀" * (MAX_LABEL_BYTES // 4)
    scope = "s" * MAX_SCOPE_BYTES
    with Memory(memory.store.location, scope=scope, embedder=memory.embedder) as other:
        # "İ" is 2 bytes and lower-cases to 3 (the tag index keeps labels lower-cased).
        grows = "İ" * (MAX_LABEL_BYTES // 2)
        rid = other.add("x", author=grows, thread=wide, tags=[wide, grows]).id
        assert other.get(rid).author == grows
        assert other.search(wide[:10])  # the tag and author legs take it as a query too


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda m: m.search("x " * (MAX_QUERY_CHARS // 2 + 1)), "query"),
        (lambda m: m.search(" ".join(f"w{i}" for i in range(MAX_QUERY_WORDS + 1))), "query"),
        (lambda m: m.search("launch", k=2**63), "k"),
        (lambda m: m.search("launch", k=True), "k"),
        (lambda m: m.search("launch", as_of="2024-02-30"), "as_of"),
        (lambda m: m.search("launch", settings="nope"), "settings"),
        (lambda m: m.search(b"launch"), "query"),
        (lambda m: m.evidence("launch", budget=0), "budget"),
        (lambda m: m.evidence("launch", style=["headers"]), "style"),
        (lambda m: list(m.records(page=2**63)), "page"),
        (lambda m: list(m.records(page=MAX_PAGE + 1)), "page"),
        (lambda m: m.get(2**64), "id"),
        (lambda m: m.get("1"), "id"),
        (lambda m: m.add_many("not a list"), "documents"),
        (lambda m: m.add_many(5), "documents"),
        (lambda m: m.add_many([], batch_size=0), "batch_size"),
    ],
)
def test_read_arguments_out_of_range(memory, call, field) -> None:
    with pytest.raises(InvalidInput) as caught:
        call(memory)
    assert caught.value.field == field, str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("scope", ["a\ud800b", "", "  ", "\x00", "s" * (MAX_SCOPE_BYTES + 1), 5])
def test_bad_scopes_are_refused_before_the_store_is_opened(tmp_path, scope) -> None:
    db = tmp_path / "never.db"
    with pytest.raises(InvalidInput, match=r"^scope: "):
        Memory(db, scope=scope)
    assert not db.exists()


def test_two_megabyte_document_and_query(memory) -> None:
    big = " ".join(f"word{i}" for i in range(250_000))[: 2 * 1024 * 1024]
    assert memory.add(big).added
    with pytest.raises(InvalidInput, match=f"limit is {MAX_QUERY_CHARS}"):
        memory.search(big)
    assert memory.search("word12345 word777")[0].record.text == big


# -- the command line, in a real process ------------------------------------------------


def test_non_utf8_stdin_is_one_line_exit_2(tmp_path) -> None:
    result = mempp("--db", "m.db", "add", "-", stdin=b"caf\xe9 \xff\xfe", cwd=tmp_path)
    assert result.returncode == 2
    assert "stdin: is not UTF-8 text (byte 3" in one_error_line(result)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["add", b"caf\xe9"],  # text
        ["add", "x", "--author", b"\xff"],
        ["add", "x", "--tag", b"a\xc3"],
        ["--scope", b"\xed\xa0\x80", "add", "x"],  # an encoded lone surrogate
    ],
)
def test_non_utf8_argv_is_one_line_exit_2(tmp_path, argv) -> None:
    result = mempp("--db", "m.db", *argv, cwd=tmp_path)
    assert result.returncode == 2
    assert "lone surrogate" in one_error_line(result)
    assert not (tmp_path / "m.db").exists()


def test_bad_command_lines_are_one_line_exit_2(tmp_path) -> None:
    for argv in (
        ["search"],
        ["search", "x", "-k", "many"],
        ["frobnicate"],
        ["get", "1e9"],
        ["evidence", "--", "--as-of", "two\nlines"],  # argparse quotes what it cannot place
    ):
        result = mempp("--db", "m.db", *argv, cwd=tmp_path)
        assert result.returncode == 2, argv
        assert "--help" in one_error_line(result)


def test_ingest_reports_each_hostile_line_and_stores_the_rest(tmp_path) -> None:
    lines = [
        json.dumps({"text": "good one", "tags": "release notes"}),
        "[" * 100_000 + "]" * 100_000,
        '{"text": "x", "author": ' + "9" * 5000 + "}",
        json.dumps({"text": "x", "tags": True}),
        json.dumps({"text": "x", "author": "a" * (MAX_LABEL_BYTES + 1)}),
        json.dumps({"text": "x", "thread": 42, "author": 7}),
        json.dumps({"text": "x\ud800"}),
    ]
    (tmp_path / "in.jsonl").write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "bad.md").write_text("---\nauthor: [unclosed\ntags: {\n---\nbody\n")
    (tmp_path / "notes" / "deep.md").write_text("---\ntags: " + "[" * 5000 + "\n---\nbody\n")
    (tmp_path / "notes" / "ok.md").write_text("---\ntags: billing, ticket\n---\nbody\n")
    result = mempp("--db", "m.db", "ingest", "in.jsonl", "notes", "--json", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert b"Traceback" not in result.stderr
    summary = json.loads(result.stdout)
    reasons = {f["location"]: f["reason"] for f in summary["failures"]}
    assert set(reasons) == {
        "in.jsonl:2",
        "in.jsonl:3",
        "in.jsonl:4",
        "in.jsonl:5",
        "in.jsonl:7",
        "notes/bad.md:3",
        "notes/deep.md:1",
    }, reasons
    assert reasons["in.jsonl:2"] == "invalid JSON: nested too deeply"
    assert reasons["in.jsonl:4"].startswith("tags: must be a list of strings")
    assert reasons["in.jsonl:5"] == f"author: is longer than {MAX_LABEL_BYTES} bytes"
    assert all("\n" not in reason for reason in reasons.values())
    assert summary["added"] == 3
    with Memory(tmp_path / "m.db") as memory:
        tags = sorted(record.tags for record in memory.records())
        threads = {record.thread for record in memory.records()}
    assert tags == [(), ("billing, ticket",), ("release notes",)]  # a string is one tag
    assert "42" in threads
