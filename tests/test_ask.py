"""``ask`` and the free-text answerer, over a real memory and a real local HTTP model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from mempp import Memory, PackingOptions, Settings
from mempp.llm import LLMClient, LLMReplyError
from mempp.llm.answer import (
    CONTEXT_CHARS,
    EMPTY_CONTEXT,
    NOT_IN_MEMORY,
    Answer,
    answer_from_context,
    ask,
)

import fake_openai
from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI

# The shared fixture (pytest finds fixtures among module attributes).
server = fake_openai.server


@pytest.fixture
def llm(server: FakeOpenAI) -> Iterator[LLMClient]:
    with LLMClient(base_url=server.base_url, model="answer-model", sleep=lambda s: None) as client:
        yield client


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    embedder = KeywordEmbedder(["launch", "budget", "friday", "april"])
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        yield mem


@pytest.fixture
def launch_ids(memory: Memory) -> list[int]:
    rows = [
        ("The launch is planned for Friday 1 March.", "Ana", "2024-01-10"),
        ("Update: the launch moves to Monday 15 April.", "Ben", "2024-02-20"),
        ("The marketing budget for the launch is 40k.", "Cleo", "2024-01-15"),
    ]
    ids = []
    for text, author, day in rows:
        result = memory.add(text, author=author, date=day)
        assert result.id is not None
        ids.append(result.id)
    return ids


def test_ask_answers_from_evidence_and_keeps_only_shown_citations(memory, launch_ids, server, llm):
    first, second, _ = launch_ids
    server.reply_json(
        {
            "answer": "Monday 15 April (moved from Friday 1 March).",
            "citations": [second, 9999, f"record {first}", second, "p. 3"],
        }
    )
    answer = ask(memory, "When is the launch?", llm=llm)
    assert isinstance(answer, Answer)
    assert answer.answer == "Monday 15 April (moved from Friday 1 March)."
    assert answer.citations == [second, first]
    assert answer.dropped_citations == [9999, "p. 3"]
    assert set(answer.evidence) == set(launch_ids)
    assert set(answer.citations) <= set(answer.evidence)
    assert answer.to_dict() == {
        "answer": answer.answer,
        "citations": [second, first],
        "evidence": answer.evidence,
        "citations_from_text": False,
    }

    [request] = server.requests
    body = request.body
    assert body["model"] == "answer-model"
    assert body["temperature"] == 0
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["answer", "citations"]
    system, user = request.messages
    assert system["role"] == "system" and '"citations"' in system["content"]
    # the evidence block is shown with dates, authors and record ids
    assert f"2024-02-20 | Ben | record {second}" in user["content"]
    assert "the launch moves to Monday 15 April" in user["content"]
    assert user["content"].rstrip().endswith("Question: When is the launch?")
    assert "in force now" in user["content"]


def test_ask_as_of_limits_evidence_and_says_so(memory, launch_ids, server, llm):
    first, second, third = launch_ids
    server.reply_json({"answer": "Friday 1 March.", "citations": [first]})
    answer = ask(memory, "When is the launch?", as_of="2024-01-31", llm=llm)
    assert answer.citations == [first]
    assert second not in answer.evidence and set(answer.evidence) == {first, third}
    assert answer.as_of == "2024-01-31"
    user = server.requests[0].messages[1]["content"]
    assert "as of 2024-01-31" in user
    assert "Monday 15 April" not in user


def test_ask_tells_the_model_the_as_of_read_from_the_question(memory, launch_ids, server, llm):
    first, _second, third = launch_ids
    server.reply_json({"answer": "Friday 1 March.", "citations": [first]})
    reading = Settings(as_of_in_question=True)
    answer = ask(memory, "When was the launch as of January 2024?", llm=llm, settings=reading)
    assert set(answer.evidence) == {first, third}
    assert answer.as_of == "2024-01-31"  # a month names its last day
    assert "as of 2024-01-31" in server.requests[0].messages[1]["content"]
    assert memory.effective_as_of("launch as of January 2024", settings=reading) == date(
        2024, 1, 31
    )
    assert memory.effective_as_of("launch as of January 2024") is None  # off by default
    assert memory.effective_as_of("x as of 2024-01-02", as_of="2024-05-01") == "2024-05-01"


def test_ask_with_empty_memory_makes_no_call(memory, server, llm):
    answer = ask(memory, "When is the launch?", llm=llm)
    assert answer == Answer(NOT_IN_MEMORY, [], [])
    assert server.requests == []


def test_ask_with_nothing_in_scope_needs_no_llm_config(memory, launch_ids, monkeypatch):
    for name in ("MEMPP_LLM_BASE_URL", "MEMPP_LLM_MODEL", "MEMPP_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    answer = ask(memory, "When is the launch?", as_of="2023-01-01")
    assert answer.answer == NOT_IN_MEMORY and answer.evidence == []


def test_ask_uses_env_config_when_no_client_is_given(memory, launch_ids, server, monkeypatch):
    monkeypatch.setenv("MEMPP_LLM_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMPP_LLM_MODEL", "env-model")
    monkeypatch.setenv("MEMPP_LLM_API_KEY", "sk-env")
    server.reply_json({"answer": "April.", "citations": []})
    assert ask(memory, "When is the launch?").answer == "April."
    assert server.requests[0].body["model"] == "env-model"
    assert server.requests[0].headers["authorization"] == "Bearer sk-env"


def test_ask_budget_and_k_limit_the_evidence(memory, launch_ids, server, llm):
    server.reply_json({"answer": "x", "citations": launch_ids})
    answer = ask(memory, "When is the launch?", k=1, llm=llm)
    assert len(answer.evidence) == 1
    assert answer.citations == answer.evidence  # the other two were not shown
    assert len(answer.dropped_citations) == 2
    server.reply_json({"answer": "x", "citations": []})
    ask(memory, "When is the launch?", budget=120, llm=llm)
    assert len(server.requests[1].messages[1]["content"]) < 120 + 400


def test_ask_retries_a_malformed_reply_once(memory, launch_ids, server, llm):
    server.reply("The launch is in April.").reply_json({"answer": "April.", "citations": []})
    assert ask(memory, "When is the launch?", llm=llm).answer == "April."
    assert len(server.requests) == 2
    server.reply('{"answer": ""}').reply('{"answer": "April", "citations": [1,')
    with pytest.raises(LLMReplyError):
        ask(memory, "When is the launch?", llm=llm)


def test_answer_from_context_cuts_the_context(server, llm):
    marker = "TAIL-MARKER"
    context = "  " + "x" * (CONTEXT_CHARS + 100) + marker
    server.reply("  The answer is 42.  ")
    assert answer_from_context("What is it?", context, llm) == "The answer is 42."
    [request] = server.requests
    [message] = request.messages  # one user message, no system prompt
    assert message["role"] == "user"
    assert "x" * CONTEXT_CHARS in message["content"]
    assert "x" * (CONTEXT_CHARS + 1) not in message["content"]
    assert marker not in message["content"]
    assert "What is it?" in message["content"]


def test_answer_from_context_placeholder_and_reasoning(server, llm):
    server.reply("<think>hmm</think>\nThe records do not say.")
    assert answer_from_context("Who?", "   \n", llm) == "The records do not say."
    assert EMPTY_CONTEXT in server.requests[0].messages[0]["content"]


def test_ask_with_packing_shows_long_records_as_excerpts(memory, launch_ids, server, llm):
    filler = " ".join(f"Minutes item {i}: nothing to report." for i in range(60))
    long_id = memory.add(filler + " The launch date is final. " + filler, date="2024-03-01").id
    server.reply_json({"answer": "x", "citations": [long_id]})
    packing = PackingOptions(threshold=400, cap=200, passage=100, whole_first=0)
    answer = ask(memory, "When is the launch?", llm=llm, packing=packing)
    prompt = server.requests[0].messages[1]["content"]
    assert f"full text: record {long_id}" in prompt and "The launch date is final." in prompt
    assert len(prompt) < len(filler)  # the long record was not shown whole
    assert answer.citations == [long_id]  # an excerpted record is still citable


def test_an_answer_without_a_citation_list_is_kept_with_citations_from_its_text(
    memory, launch_ids, server, llm
):
    first, second = launch_ids[0], launch_ids[1]
    server.reply_json(
        {"answer": f"Monday 15 April, per [record {second}] (was record {first}; see record 9999)."}
    )
    answer = ask(memory, "When is the launch?", llm=llm)
    assert len(server.requests) == 1  # no corrective retry for a missing list
    assert answer.citations_from_text is True
    assert answer.citations == [second, first] and answer.dropped_citations == [9999]
    assert answer.to_dict()["citations_from_text"] is True


def test_a_placeholder_answer_is_never_accepted(memory, launch_ids, server, llm):
    server.reply_json({"answer": "<your answer>", "citations": []})
    server.reply_json({"answer": "a string holding your answer", "citations": []})
    with pytest.raises(LLMReplyError, match=r"placeholder|repeats"):
        ask(memory, "When is the launch?", llm=llm)
