"""LlamaIndex: ``MemppRetriever`` (a ``BaseRetriever``) and ``MemppMemoryBlock`` (a
``BaseMemoryBlock`` for ``llama_index.core.memory.Memory``), over a ``Memory``, a ``Client``
or an ``AsyncClient``.

    from mempp.integrations.llamaindex import MemppMemoryBlock, MemppRetriever

    nodes = MemppRetriever(memory=memory, k=5, as_of="2024-03-31").retrieve("when do we ship?")
    block = MemppMemoryBlock(memory=memory, thread="chat-42")

The retriever returns one ``NodeWithScore`` per record, whole: the node's id is the record
id, its text the record's, its metadata the record's date, author, tags, thread, source and
state, and its score mempp's fused score. ``k``, ``as_of``, ``known_at`` and the filters
(``since``, ``author``, ``tags``, ``tags_mode``, ``thread``, ``source``) are set when it is
made.

The memory block answers ``aget(messages)`` with mempp's evidence block for the latest user
message (dated, attributed rows naming their record ids, within ``budget`` characters), and
``aput(messages)`` stores each message whole as a record: its role (or its ``name``) as the
author, now as its date, the block's ``thread`` (or the message's ``session_id``) as its
thread. A keyword ``aget`` cannot honour is refused, not ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemoryBlock
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field, field_validator

from mempp.errors import InvalidInput
from mempp.integrations import backend
from mempp.records import Hit

DateLike = str | date | datetime | None
FILTERS = ("known_at", "since", "author", "tags", "tags_mode", "thread", "source")


def hit_node(hit: Hit) -> NodeWithScore:
    record = hit.record
    node = TextNode(
        id_=str(record.id),
        text=record.text,
        metadata={
            "record_id": record.id,
            "date": record.day,
            "author": record.author,
            "tags": list(record.tags),
            "thread": record.thread,
            "source": record.source,
            "state": record.state,
        },
    )
    return NodeWithScore(node=node, score=hit.score)


class MemppRetriever(BaseRetriever):
    """Records for a query by mempp's fused search, best first, as scored nodes."""

    def __init__(
        self,
        *,
        memory: Any,
        k: int = 10,
        as_of: DateLike = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: Literal["any", "all"] = "any",
        thread: str | None = None,
        source: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.memory = backend.check(memory)
        self.search_args: dict[str, Any] = {
            "k": k,
            "as_of": as_of,
            "known_at": known_at,
            "since": since,
            "author": author,
            "tags": None if tags is None else list(tags),
            "tags_mode": tags_mode,
            "thread": thread,
            "source": source,
        }

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = backend.call(self.memory, "search", query_bundle.query_str, **self.search_args)
        return [hit_node(hit) for hit in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        hits = await backend.acall(self.memory, "search", query, **self.search_args)
        return [hit_node(hit) for hit in hits]


class MemppMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory for a LlamaIndex agent, kept in mempp (see the module)."""

    name: str = "mempp"
    description: str | None = "Dated, attributed records from the organization's memory."
    memory: Any = Field(description="A mempp Memory, Client or AsyncClient.")
    k: int = Field(10, ge=1, description="Most records shown.")
    budget: int = Field(4000, ge=1, description="Most characters of evidence.")
    as_of: DateLike = None
    known_at: DateLike = None
    thread: str | None = Field(None, description="The thread the messages are stored under.")

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return backend.check(value)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        if block_kwargs:
            name = sorted(block_kwargs)[0]
            raise InvalidInput("is not a keyword the mempp memory block takes", field=name)
        query = _latest_question(messages or [])
        if query is None:
            return ""
        block = await backend.acall(
            self.memory,
            "evidence",
            query,
            k=self.k,
            budget=self.budget,
            as_of=self.as_of,
            known_at=self.known_at,
        )
        return str(block.text)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if self.as_of is not None or self.known_at is not None:
            raise InvalidInput(
                "a block reading the past (as_of/known_at) cannot store", field="as_of"
            )
        documents = []
        for message in messages:
            text = message.content or ""
            if not text.strip():
                continue
            extra = message.additional_kwargs
            documents.append(
                {
                    "text": text,
                    "author": extra.get("name") or str(message.role.value),
                    "date": datetime.now(UTC).isoformat(),
                    "thread": self.thread or extra.get("session_id"),
                    "tags": ["chat"],
                }
            )
        if documents:
            await backend.acall(self.memory, "add_many", documents)


def _latest_question(messages: list[ChatMessage]) -> str | None:
    """The last user message's text (else the last message's): what the evidence answers."""
    for message in reversed(messages):
        if message.role == MessageRole.USER and (message.content or "").strip():
            return message.content
    for message in reversed(messages):
        if (message.content or "").strip():
            return message.content
    return None
