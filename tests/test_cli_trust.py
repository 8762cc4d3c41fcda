"""The rough edges of issue 30 on the command line: ``mempp undo RUN`` and ``mempp runs`` at
the top level with labels that say what happened, the evidence budget by default, a missing
ingest path, ``get`` of ids some of which exist, the empty-scope hint, a tombstone that says
when and why, the cycle error, ``info`` by state."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mempp import Memory
from mempp.cli.main import EVIDENCE_BUDGET, main

from conftest import KeywordEmbedder

WORDS = ["team", "plan", "cost", "price", "launch"]


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    cli = sys.modules["mempp.cli.main"]  # (mempp.cli.main also names the function)
    monkeypatch.setattr(cli, "embedder_named", lambda _name: KeywordEmbedder(WORDS))
    location = str(tmp_path / "m.db")
    with Memory(location, embedder=KeywordEmbedder(WORDS)) as memory:
        memory.add("The Team plan costs $10.", author="Priya", date="2024-01-15")
        memory.add("Launch on Friday.", author="Marco", date="2024-02-02")
        memory.add("The Team plan now costs $12.", author="Priya", date="2024-03-08")
        memory.add("A secret price list.", author="Sam", date="2024-04-01")
    return location


def cli(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", db, "--encoder", "keywords", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_undo_and_runs_at_the_top_level(db: str, capsys) -> None:
    assert cli(capsys, db, "supersede", "1", "--by", "3", "--reason", "newer")[0] == 0
    assert cli(capsys, db, "archive", "2", "--reason", "stale", "--actor", "ops")[0] == 0
    assert cli(capsys, db, "redact", "4", "--reason", "erasure request")[0] == 0
    code, out, _ = cli(capsys, db, "undo", "2")
    assert code == 0 and out.startswith("undid run 2 (logged as run 4)")
    code, out, _ = cli(capsys, db, "runs")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert "supersede #1 by #3" in lines[0] and lines[0].endswith(": newer")
    assert "archive #2 (ops): stale [undone by run 4]" in lines[1]
    assert "redact #4" in lines[2] and "undo of run 2" in lines[3]
    code, out, _ = cli(capsys, db, "runs", "--json")
    assert [r["operation"] for r in json.loads(out)] == [
        "supersede",
        "archive",
        "redact",
        "undo",
    ]
    code, _, err = cli(capsys, db, "undo", "3")
    assert code == 2 and err == "mempp: error: run 3 erased records; an erasure cannot be undone\n"
    code, _, err = cli(capsys, db, "undo", "2")
    assert code == 2 and "already undone by run 4" in err


def test_the_web_change_log_names_the_operation(db: str) -> None:
    from mempp.store.base import RunInfo

    with Memory(db, embedder=KeywordEmbedder(WORDS)) as memory:
        memory.supersede(1, by=3, reason="newer")
        [run] = memory.store.runs(memory.scope)  # type: ignore[attr-defined]
    assert isinstance(run, RunInfo) and run.operation == "supersede" and run.kind == "consolidate"
    template = Path(__file__).resolve().parents[1] / "src/mempp/server/web/templates/record.html"
    assert "{{ e.run.operation }} #{{ e.run.id }}" in template.read_text()


def test_evidence_has_a_budget_by_default(db: str, capsys) -> None:
    with Memory(db, embedder=KeywordEmbedder(WORDS)) as memory:
        memory.add("team plan " * 30_000, date="2024-05-05")  # 300,000 characters
    code, out, _ = cli(capsys, db, "evidence", "team plan", "--json")
    block = json.loads(out)
    assert code == 0 and len(block["text"]) <= EVIDENCE_BUDGET == 40_000
    assert any(row["truncated"] for row in block["rows"])


def test_ingest_of_a_missing_path_is_bad_input_and_creates_no_store(tmp_path: Path, capsys) -> None:
    fresh = tmp_path / "fresh.db"
    assert main(["--db", str(fresh), "ingest", str(tmp_path / "nosuch.md")]) == 2
    assert capsys.readouterr().err.endswith("nosuch.md: no such file or folder\n")
    assert not fresh.exists()


def test_get_prints_what_exists_and_names_what_does_not(db: str, capsys) -> None:
    code, out, err = cli(capsys, db, "get", "3", "99", "98")
    assert code == 1 and out.startswith("record 3 | 2024-03-08 | Priya | active")
    assert err == "mempp: error: no record 99, 98 in scope 'default'\n"


def test_a_redacted_record_says_when_and_why(db: str, capsys) -> None:
    cli(capsys, db, "redact", "4", "--reason", "erasure request", "--actor", "dpo")
    code, out, _ = cli(capsys, db, "get", "4")
    head, details, _, text = out.splitlines()[:4]
    assert code == 0 and head == "record 4 | 2024-04-01 | - | redacted"
    assert "| redacted 20" in details and details.endswith("by dpo: erasure request")
    assert text == "(erased; only this tombstone is kept)"


def test_an_empty_scope_is_named(db: str, capsys) -> None:
    code, _, err = cli(capsys, db, "--scope", "nosuch", "search", "team plan")
    assert code == 0
    assert err == ("no matching records (scope 'nosuch' holds no records; scopes here: default)\n")
    code, _, err = cli(capsys, db, "search", "team", "--as-of", "1990-01-01")  # records: no hint
    assert err == "no matching records\n"
    code, _, err = cli(capsys, db, "--scope", "nosuch", "get", "1")
    assert code == 1 and "holds no records" in err


def test_the_cycle_error_says_which_links_hold(db: str, capsys) -> None:
    cli(capsys, db, "supersede", "1", "--by", "2", "--reason", "x")
    cli(capsys, db, "supersede", "2", "--by", "3", "--reason", "x")
    code, _, err = cli(capsys, db, "supersede", "3", "--by", "1", "--reason", "x")
    assert code == 2
    assert err == (
        "mempp: error: record 3 cannot be superseded by 1: that would make a cycle "
        "(already superseded: 1 by 2, 2 by 3)\n"
    )


def test_info_shows_each_state(db: str, capsys) -> None:
    cli(capsys, db, "supersede", "1", "--by", "3", "--reason", "x")
    cli(capsys, db, "archive", "2", "--reason", "x")
    cli(capsys, db, "redact", "4", "--reason", "x")
    code, out, _ = cli(capsys, db, "info")
    assert code == 0 and "records   4 (2 active, 1 archived, 1 redacted; 1 superseded)" in out
    code, out, _ = cli(capsys, db, "info", "--json")
    facts = json.loads(out)
    states = (facts["active"], facts["archived"], facts["redacted"], facts["superseded"])
    assert states == (2, 1, 1, 1)  # a superseded row stays active (the paper's rule)
