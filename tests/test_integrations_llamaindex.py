"""The LlamaIndex adapter over a ``Memory`` and a ``Client`` on a real uvicorn: the retriever's
nodes, as_of and filters passed through, the memory block storing and recalling messages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from mempp import AsyncClient, Client, Memory
from mempp.errors import InvalidInput
from mempp.integrations.llamaindex import MemppMemoryBlock, MemppRetriever
from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]
DOCS = [
    {"text": "The launch plan: ship on Friday.", "author": "Ana", "date": "2024-03-01"},
    {"text": "The launch moves to Monday.", "author": "Bo", "date": "2024-04-02"},
    {"text": "The budget is approved.", "author": "Ana", "date": "2024-05-10"},
]


@pytest.fixture(params=["memory", "client"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    path = tmp_path / "m.db"
    if request.param == "memory":
        with Memory(path, embedder=KeywordEmbedder(KEYWORDS)) as memory:
            memory.add_many(DOCS)
            yield memory
        return
    state = ServerState(str(path), embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url, Client(url, timeout=60) as client:
        client.add_many(DOCS)
        yield client


def test_retriever_nodes_carry_the_record(memory: Any) -> None:
    nodes = MemppRetriever(memory=memory, k=5, as_of="2024-03-31").retrieve("launch plan")
    assert [n.node.node_id for n in nodes] == ["1"]
    assert nodes[0].node.get_content() == "The launch plan: ship on Friday."
    assert nodes[0].node.metadata["date"] == "2024-03-01"
    assert nodes[0].node.metadata["author"] == "Ana"
    assert nodes[0].score is not None and nodes[0].score > 0
    by_bo = MemppRetriever(memory=memory, author="Bo").retrieve("launch")
    assert [n.node.metadata["record_id"] for n in by_bo] == [2]
    held = MemppRetriever(memory=memory, known_at="2000-01-01").retrieve("launch")
    assert held == []
    assert len(MemppRetriever(memory=memory, k=1).retrieve("launch plan budget")) == 1
    with pytest.raises(InvalidInput) as bad:
        MemppRetriever(memory=memory, as_of="soon").retrieve("launch")
    assert str(bad.value).startswith("as_of:")
    nodes = asyncio.run(MemppRetriever(memory=memory, k=2).aretrieve("budget"))
    assert nodes[0].node.metadata["record_id"] == 3


def test_memory_block_stores_and_recalls(memory: Any) -> None:
    block = MemppMemoryBlock(memory=memory, thread="chat-1", budget=2000)
    said = [
        ChatMessage(role=MessageRole.USER, content="Our alpha launch is on Tuesday."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Noted: alpha on Tuesday."),
        ChatMessage(role=MessageRole.USER, content="   "),
    ]
    asyncio.run(block.aput(said))
    stored = [r for r in memory.records() if r.thread == "chat-1"]
    assert [(r.author, r.text) for r in stored] == [
        ("user", "Our alpha launch is on Tuesday."),
        ("assistant", "Noted: alpha on Tuesday."),
    ]
    asked = [ChatMessage(role=MessageRole.USER, content="When is the alpha launch?")]
    text = asyncio.run(block.aget(asked))
    assert "Our alpha launch is on Tuesday." in text
    assert "| user | thread chat-1 | record 4" in text
    assert asyncio.run(block.aget([])) == ""
    with pytest.raises(InvalidInput) as unknown:
        asyncio.run(block.aget(asked, namespace="x"))
    assert unknown.value.field == "namespace"
    past = MemppMemoryBlock(memory=memory, as_of="2024-03-31")
    assert "record 1" in asyncio.run(past.aget(asked)) and "Tuesday" not in asyncio.run(
        past.aget(asked)
    )
    with pytest.raises(InvalidInput, match="cannot store"):
        asyncio.run(past.aput(said))


def test_async_client(tmp_path: Path) -> None:
    state = ServerState(str(tmp_path / "m.db"), embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url:

        async def run() -> None:
            async with AsyncClient(url) as client:
                await client.add_many(DOCS)
                nodes = await MemppRetriever(memory=client, k=1).aretrieve("budget")
                assert nodes[0].node.metadata["record_id"] == 3
                block = MemppMemoryBlock(memory=client)
                await block.aput([ChatMessage(role=MessageRole.USER, content="gamma plan")])
                text = await block.aget([ChatMessage(role=MessageRole.USER, content="gamma")])
                assert "gamma plan" in text

        asyncio.run(run())
