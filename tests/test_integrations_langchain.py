"""The LangChain adapter: langchain-tests' own suites, unmodified, over a ``Memory`` and over a
``Client`` on a real uvicorn; then what the suites do not check (as_of and the filters
passed through, metadata, refusals, errors reaching the model, the async client)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")

from langchain_core.messages import ToolCall
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    ToolsIntegrationTests,
)
from langchain_tests.unit_tests import ToolsUnitTests

from mempp import AsyncClient, Client, Memory
from mempp.errors import InvalidInput
from mempp.integrations.langchain import (
    EvidenceTool,
    MemppRetriever,
    RememberTool,
    SearchTool,
    mempp_tools,
)
from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]
DOCS = [
    {"text": "The launch plan: ship on Friday.", "author": "Ana", "date": "2024-03-01"},
    {"text": "The launch moves to Monday.", "author": "Bo", "date": "2024-04-02"},
    {"text": "Launch plan review with the alpha team.", "author": "Ana", "date": "2024-04-10"},
    {"text": "The budget plan for the launch.", "author": "Cy", "date": "2024-05-01"},
    {"text": "Beta users asked about the launch.", "author": "Bo", "date": "2024-05-20"},
]


def open_memory(kind: str, path: Path) -> Iterator[Any]:
    """A seeded memory of ``kind``: ``memory`` in process, or ``client`` over uvicorn."""
    if kind == "memory":
        with Memory(path, embedder=KeywordEmbedder(KEYWORDS)) as memory:
            memory.add_many(DOCS)
            yield memory
        return
    state = ServerState(str(path), embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url, Client(url, timeout=60) as client:
        client.add_many(DOCS)
        yield client


class Seeded:
    """Each test gets ``self.memory``, seeded, of both kinds in turn."""

    memory: Any

    @pytest.fixture(autouse=True, params=["memory", "client"])
    def _seeded(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
        for memory in open_memory(request.param, tmp_path / "m.db"):
            self.memory = memory
            yield


class TestRetrieverStandard(Seeded, RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[MemppRetriever]:
        return MemppRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self.memory}

    @property
    def retriever_query_example(self) -> str:
        return "launch plan"


class _Tool(Seeded):
    tool_class: type
    example: dict[str, Any]

    @property
    def tool_constructor(self) -> type:
        return self.tool_class

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"memory": self.memory}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return self.example


REMEMBER = {"text": "The launch is confirmed.", "author": "Ana", "date": "2024-06-01"}
SEARCH = {"query": "launch plan", "as_of": "2024-04-30", "k": 3}
EVIDENCE = {"query": "when is the launch?", "budget": 2000}


class TestRememberUnit(_Tool, ToolsUnitTests):
    tool_class, example = RememberTool, REMEMBER


class TestRememberIntegration(_Tool, ToolsIntegrationTests):
    tool_class, example = RememberTool, REMEMBER


class TestSearchUnit(_Tool, ToolsUnitTests):
    tool_class, example = SearchTool, SEARCH


class TestSearchIntegration(_Tool, ToolsIntegrationTests):
    tool_class, example = SearchTool, SEARCH


class TestEvidenceUnit(_Tool, ToolsUnitTests):
    tool_class, example = EvidenceTool, EVIDENCE


class TestEvidenceIntegration(_Tool, ToolsIntegrationTests):
    tool_class, example = EvidenceTool, EVIDENCE


# -- beyond the standard suites --------------------------------------------------------------
@pytest.fixture(params=["memory", "client"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from open_memory(request.param, tmp_path / "m.db")


def test_documents_carry_the_record(memory: Any) -> None:
    docs = MemppRetriever(memory=memory, k=2, as_of="2024-03-31").invoke("launch plan")
    assert [d.page_content for d in docs] == ["The launch plan: ship on Friday."]
    meta = docs[0].metadata
    assert docs[0].id == "1"
    assert (meta["record_id"], meta["date"], meta["author"], meta["rank"]) == (
        1,
        "2024-03-01",
        "Ana",
        1,
    )
    assert meta["score"] > 0 and meta["state"] == "active"


def test_fields_and_invoke_keywords_reach_the_search(memory: Any) -> None:
    retriever = MemppRetriever(memory=memory, k=5, author="Bo")
    assert {d.metadata["author"] for d in retriever.invoke("launch")} == {"Bo"}
    one = retriever.invoke("launch", k=1, as_of="2024-04-30")
    assert [d.metadata["record_id"] for d in one] == [2]
    assert [d.metadata["author"] for d in retriever.invoke("launch", author="Cy")] == ["Cy"]
    held = retriever.invoke("launch", known_at="2000-01-01")
    assert held == []  # nothing was ingested by then: the filter was applied, not dropped
    with pytest.raises(InvalidInput) as unknown:
        retriever.invoke("launch", namespace="x")
    assert unknown.value.field == "namespace"
    with pytest.raises(InvalidInput) as bad:
        retriever.invoke("launch", as_of="last spring")
    assert str(bad.value).startswith("as_of:")


def test_a_mempp_error_reaches_the_model_as_the_tool_answer(memory: Any) -> None:
    search = next(t for t in mempp_tools(memory) if t.name == "search_memory")
    call = ToolCall(
        name=search.name, args={"query": "launch", "as_of": "2024-02-30"}, id="1", type="tool_call"
    )
    message = search.invoke(call)
    assert message.status == "error"
    assert message.content.startswith("as_of: ")
    remember = next(t for t in mempp_tools(memory) if t.name == "remember")
    assert remember.invoke(REMEMBER) == "stored as record 6"
    assert remember.invoke(REMEMBER).startswith("not stored: the same text")
    listed = search.invoke({"query": "launch plan", "as_of": "2024-03-31"})
    assert listed == "record 1 | 2024-03-01 | Ana\nThe launch plan: ship on Friday."


def test_the_async_client_serves_ainvoke(tmp_path: Path) -> None:
    state = ServerState(str(tmp_path / "m.db"), embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url:

        async def run() -> None:
            async with AsyncClient(url) as client:
                await client.add_many(DOCS)
                retriever = MemppRetriever(memory=client, k=2)
                docs = await retriever.ainvoke("launch plan", as_of="2024-03-31")
                assert [d.metadata["record_id"] for d in docs] == [1]
                with pytest.raises(InvalidInput, match="async methods only"):
                    retriever.invoke("launch")
                tool = SearchTool(memory=client)
                assert (await tool.ainvoke({"query": "budget"})).startswith("record 4")

        asyncio.run(run())


def test_memory_must_be_a_mempp_memory() -> None:
    with pytest.raises(ValueError, match="must be a mempp Memory, Client or AsyncClient"):
        MemppRetriever(memory="org.db")
