"""``mempp graph extract|facts`` over a real SQLite file and the scripted local model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mempp import Memory
from mempp.cli.main import main

import fake_openai
from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI

server = fake_openai.server


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "g.db")
    with Memory(path, embedder=KeywordEmbedder(["helix"])) as memory:
        memory.add("Ana leads the Helix project.", author="Ben", date="2024-01-01")
        memory.add("Helix launches in May.", author="Ana", date="2024-03-01")
        memory.add("Ana moved to the Vega team.", author="Ana", date="2024-06-01")
    return path


def llm_flags(server: FakeOpenAI) -> list[str]:
    return ["--llm-base-url", server.base_url, "--model", "graph-model"]


def test_extract_reports_failures_leaves_them_pending_and_facts_lists_triples(
    db: str, server: FakeOpenAI, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("MEMPP_LLM_DEADLINE", "5")
    server.reply_json({"triples": [{"subject": "Ana", "relation": "leads", "object": "Helix"}]})
    server.reply_json({"triples": [{"subject": "...", "relation": "...", "object": "..."}]})
    code = main(["--db", db, "graph", "extract", "--limit", "2", *llm_flags(server)])
    out, err = capsys.readouterr()
    assert code == 3
    assert out.strip() == (
        "extracted 1 of 2 pending rows (1 triples), 1 failed (left pending, tried again next time)"
    )
    assert "record 2: LLMReplyError" in err and "placeholder" in err

    server.reply_json(
        {"triples": [{"subject": "Helix", "relation": "launches in", "object": "May"}]}
    )
    server.reply_json(
        {"triples": [{"subject": "Ana", "relation": "moved to", "object": "Vega team"}]}
    )
    code = main(["--db", db, "graph", "extract", "--json", *llm_flags(server)])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["pending"] == 2 and report["extracted"] == 2  # row 2 retried

    server.reply_json({"entities": ["Ana"]})
    code = main(
        ["--db", db, "graph", "facts", "Who is Ana?", "--as-of", "2024-04-01", *llm_flags(server)]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.strip() == "- Ana | leads | Helix (2024-01-01, record 1)"  # row 3 is later

    server.reply_json({"entities": ["Ana"]})
    main(["--db", db, "graph", "facts", "Who is Ana?", "--json", *llm_flags(server)])
    facts = json.loads(capsys.readouterr().out)
    assert [f["record_id"] for f in facts] == [3, 1]  # the latest source row first


def test_graph_commands_fail_cleanly(
    db: str, tmp_path: Path, server: FakeOpenAI, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.delenv("MEMPP_LLM_BASE_URL", raising=False)
    assert main(["--db", db, "graph", "extract", "--model", "m"]) == 1
    assert "MEMPP_LLM_BASE_URL" in capsys.readouterr().err
    assert main(["--db", db, "graph", "facts", "q", "--limit", "0", *llm_flags(server)]) == 2
    assert main(["--db", db, "graph", "facts", "q", "--as-of", "soon", *llm_flags(server)]) == 2
    missing = str(tmp_path / "none.db")
    assert main(["--db", missing, "graph", "extract", *llm_flags(server)]) == 1
    assert "no database" in capsys.readouterr().err
    assert server.requests == []
