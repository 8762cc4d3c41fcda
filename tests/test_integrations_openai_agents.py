"""The OpenAI Agents SDK tools: an agent run against the project's scripted OpenAI-protocol
server (tests/fake_openai.py), over a ``Memory`` and a ``Client`` on a real uvicorn. The
model's requests show what the tools answered: mempp's own message for a bad argument (the
failure function), the records for a good one."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from mempp import Client, Memory
from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, ScriptedReply
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "openai_agents_run.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("openai_agents_run", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool_call(number: int, name: str, arguments: dict[str, Any]) -> ScriptedReply:
    call = {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return ScriptedReply(body=body)


def tool_answers(request_body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request_body["messages"] if m["role"] == "tool"]


@pytest.fixture(params=["memory", "client"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    path = tmp_path / "m.db"
    if request.param == "memory":
        with Memory(path, embedder=KeywordEmbedder(KEYWORDS)) as memory:
            yield memory
        return
    state = ServerState(str(path), embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url, Client(url, timeout=60) as client:
        yield client


def test_an_agent_answers_from_memory_and_reads_mempps_errors(memory: Any) -> None:
    memory.add("The launch plan: ship on Friday.", author="Ana", date="2024-03-01")
    memory.add("The launch moves to Monday.", author="Bo", date="2024-04-02")
    example = load_example()
    with FakeOpenAI() as fake:
        fake.push(tool_call(1, "search_memory", {"query": "launch", "as_of": "2024-02-30"}))
        fake.push(tool_call(2, "search_memory", {"query": "launch", "as_of": "2024-03-31"}))
        fake.push(tool_call(3, "remember", {"text": "Ana confirmed Friday.", "author": "Ana"}))
        fake.reply("We ship on Friday (record 1).")
        answer = example.ask(
            memory, "When did we plan to ship, as of March?", base_url=fake.base_url, model="m"
        )
        bodies = [r.body for r in fake.requests]
    assert answer == "We ship on Friday (record 1)."
    assert len(bodies) == 4
    first = tool_answers(bodies[1])
    assert first == ["as_of: not a valid date: '2024-02-30' (expected YYYY-MM-DD)"]
    second = tool_answers(bodies[2])[-1]
    assert second == "record 1 | 2024-03-01 | Ana\nThe launch plan: ship on Friday."
    assert tool_answers(bodies[3])[-1] == "stored as record 3"
    tools = {t["function"]["name"] for t in bodies[0]["tools"]}
    assert tools == {"remember", "search_memory", "get_evidence"}
    assert memory.get(3).text == "Ana confirmed Friday."


def test_an_empty_query_reaches_the_model_as_mempps_message(memory: Any) -> None:
    example = load_example()
    with FakeOpenAI() as fake:
        fake.push(tool_call(1, "get_evidence", {"query": "", "budget": 100}))
        fake.reply("Nothing found.")
        assert example.ask(memory, "?", base_url=fake.base_url, model="m") == "Nothing found."
        answered = tool_answers(fake.requests[1].body)
    assert answered[0].startswith("query: ")
