"""LangChain: ``MemppRetriever`` (a ``BaseRetriever``) and ``mempp_tools(memory)`` (remember,
search, evidence), over a ``Memory``, a ``Client`` or an ``AsyncClient``.

    from mempp.integrations.langchain import MemppRetriever, mempp_tools

    retriever = MemppRetriever(memory=memory, k=5, as_of="2024-03-31")
    docs = retriever.invoke("when do we ship?", k=3, author="Ana")
    tools = mempp_tools(memory)          # [remember, search_memory, get_evidence]

The retriever's ``k``, ``as_of``, ``known_at`` and filters (``since``, ``author``, ``tags``,
``tags_mode``, ``thread``, ``source``) are fields, and each may be given again as an
``invoke`` keyword for one call; any other keyword is an error naming it (it is never
ignored). Each ``Document`` is one record whole: ``id`` is the record id, and ``metadata``
holds ``record_id``, ``date`` (the event day), ``datetime``, ``author``, ``score``,
``rank``, ``tags``, ``thread``, ``source``, ``state`` and ``ingested_at``.

The tools answer the model in text and turn mempp's errors into the tool's answer (a
``ToolException`` with mempp's message, ``handle_tool_error=True``), so a bad date reaches
the model as ``as_of: not an ISO 8601 date...``, not as a crash of the agent.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    AsyncCallbackManagerForToolRun,
    CallbackManagerForRetrieverRun,
    CallbackManagerForToolRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mempp.errors import InvalidInput, MemppError
from mempp.integrations import backend
from mempp.records import Hit

DateLike = str | date | datetime | None
FILTERS = ("known_at", "since", "author", "tags", "tags_mode", "thread", "source")
SEARCH_KEYWORDS = ("k", "as_of", *FILTERS)
# What LangChain itself may leave among an invoke's keywords (it reads them, then passes on).
FRAMEWORK_KEYWORDS = ("verbose",)
MAX_TOOL_K = 100


def hit_document(hit: Hit) -> Document:
    """One hit as a LangChain ``Document``: the record's text whole, its facts in metadata."""
    record = hit.record
    return Document(
        id=str(record.id),
        page_content=record.text,
        metadata={
            "record_id": record.id,
            "date": record.day,
            "datetime": record.date,
            "author": record.author,
            "score": hit.score,
            "rank": hit.rank,
            "tags": list(record.tags),
            "thread": record.thread,
            "source": record.source,
            "state": record.state,
            "ingested_at": record.ingested_at,
        },
    )


class MemppRetriever(BaseRetriever):
    """Records for a query, by mempp's fused search, best first, as ``Document``s."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any = Field(description="A mempp Memory, Client or AsyncClient.")
    k: int = Field(4, ge=1, description="How many records to return.")
    as_of: DateLike = Field(None, description="Only records dated up to this moment.")
    known_at: DateLike = Field(None, description="Only records the memory held by then.")
    since: DateLike = Field(None, description="Only records dated from this moment on.")
    author: str | None = None
    tags: list[str] | None = None
    tags_mode: Literal["any", "all"] = "any"
    thread: str | None = None
    source: str | None = Field(None, description="A prefix of the records' source.")

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return backend.check(value)

    def _search_args(self, given: dict[str, Any]) -> dict[str, Any]:
        args = {name: getattr(self, name) for name in SEARCH_KEYWORDS}
        for name, value in given.items():
            if name in FRAMEWORK_KEYWORDS:
                continue
            if name not in SEARCH_KEYWORDS:
                raise InvalidInput(
                    "is not a search keyword of mempp (it takes "
                    + ", ".join(SEARCH_KEYWORDS)
                    + ")",
                    field=name,
                )
            args[name] = value
        return args

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        hits = backend.call(self.memory, "search", query, **self._search_args(kwargs))
        return [hit_document(hit) for hit in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        hits = await backend.acall(self.memory, "search", query, **self._search_args(kwargs))
        return [hit_document(hit) for hit in hits]


# -- tools ----------------------------------------------------------------------------------
AS_OF_HELP = (
    "Only records dated up to this day (YYYY-MM-DD). Pass it when the question is about a "
    "past moment, so later revisions are left out; omit it for the present."
)


class _Filters(BaseModel):
    as_of: str | None = Field(None, description=AS_OF_HELP)
    known_at: str | None = Field(
        None, description="Only records the memory had received by this date (YYYY-MM-DD)."
    )
    since: str | None = Field(None, description="Only records dated on or after this date.")
    author: str | None = Field(None, description="Only records by this author, exactly.")
    tags: list[str] | None = Field(None, description="Only records with these tags.")
    tags_mode: Literal["any", "all"] = Field("any", description="One of the tags, or all.")
    thread: str | None = Field(None, description="Only records of this thread, exactly.")
    source: str | None = Field(None, description="Only records whose source starts so.")


class RememberInput(BaseModel):
    text: str = Field(min_length=1, description="The document text, as written.")
    author: str | None = Field(None, description="Who wrote or said it.")
    date: str | None = Field(None, description="When it was written or happened (YYYY-MM-DD).")
    tags: list[str] | None = Field(None, description="Labels (project, topic).")
    thread: str | None = Field(None, description="Conversation, thread or ticket.")
    source: str | None = Field(None, description="Where it came from (URL, path).")


class SearchInput(_Filters):
    query: str = Field(min_length=1, description="The question or keywords.")
    k: int = Field(10, ge=1, le=MAX_TOOL_K, description="How many records.")


class EvidenceInput(_Filters):
    query: str = Field(min_length=1, description="The question.")
    k: int = Field(20, ge=1, le=MAX_TOOL_K, description="Most records shown.")
    budget: int = Field(8000, ge=1, description="Most characters of evidence.")


class _MemppTool(BaseTool):
    """A tool over one memory; mempp's errors become the tool's answer to the model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any
    handle_tool_error: bool = True

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return backend.check(value)


class RememberTool(_MemppTool):
    name: str = "remember"
    description: str = (
        "Store one document in the organization's memory, whole, with its date and author. "
        "Returns the new record id, or why it was skipped. Nothing stored is ever edited: to "
        "record a change, remember the new version with its own date."
    )
    args_schema: type[BaseModel] = RememberInput

    def _run(
        self,
        text: str,
        author: str | None = None,
        date: str | None = None,
        tags: list[str] | None = None,
        thread: str | None = None,
        source: str | None = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> str:
        args = {"author": author, "date": date, "tags": tags or (), "thread": thread}
        return _added(_tool_call(self.memory, "add", text, source=source, **args))

    async def _arun(
        self,
        text: str,
        author: str | None = None,
        date: str | None = None,
        tags: list[str] | None = None,
        thread: str | None = None,
        source: str | None = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> str:
        args = {"author": author, "date": date, "tags": tags or (), "thread": thread}
        return _added(await _atool_call(self.memory, "add", text, source=source, **args))


class SearchTool(_MemppTool):
    name: str = "search_memory"
    description: str = (
        "Search the organization's memory. Returns the best-matching records, best first, "
        "each with its record id, date, author and full text. Pass as_of (YYYY-MM-DD) for a "
        "question about a past moment. When records disagree, the most recently dated one is "
        "in force. Cite the records you use as 'record N'."
    )
    args_schema: type[BaseModel] = SearchInput

    def _run(
        self, query: str, run_manager: CallbackManagerForToolRun | None = None, **kwargs: Any
    ) -> str:
        return _listed(_tool_call(self.memory, "search", query, **kwargs))

    async def _arun(
        self, query: str, run_manager: AsyncCallbackManagerForToolRun | None = None, **kwargs: Any
    ) -> str:
        return _listed(await _atool_call(self.memory, "search", query, **kwargs))


class EvidenceTool(_MemppTool):
    name: str = "get_evidence"
    description: str = (
        "The evidence block for a question: the best-matching records, each under a header "
        "'[i] date | author | record N', within a character budget, ready to answer from. "
        "Pass as_of (YYYY-MM-DD) for a past moment. Answer from the block only and cite the "
        "records you use as 'record N'."
    )
    args_schema: type[BaseModel] = EvidenceInput

    def _run(
        self, query: str, run_manager: CallbackManagerForToolRun | None = None, **kwargs: Any
    ) -> str:
        block = _tool_call(self.memory, "evidence", query, **kwargs)
        return block.text or "(no matching records)"

    async def _arun(
        self, query: str, run_manager: AsyncCallbackManagerForToolRun | None = None, **kwargs: Any
    ) -> str:
        block = await _atool_call(self.memory, "evidence", query, **kwargs)
        return block.text or "(no matching records)"


def mempp_tools(memory: Any) -> list[BaseTool]:
    """The three tools over ``memory``: ``remember``, ``search_memory``, ``get_evidence``."""
    return [RememberTool(memory=memory), SearchTool(memory=memory), EvidenceTool(memory=memory)]


def _tool_call(memory: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        return backend.call(memory, name, *args, **kwargs)
    except MemppError as exc:
        raise ToolException(str(exc)) from exc


async def _atool_call(memory: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        return await backend.acall(memory, name, *args, **kwargs)
    except MemppError as exc:
        raise ToolException(str(exc)) from exc


def _added(result: Any) -> str:
    if result.id is not None:
        return f"stored as record {result.id}"
    if result.skipped == "duplicate":
        return "not stored: the same text by the same author on the same date is already stored"
    return "not stored: the text is empty"


def _listed(hits: list[Hit]) -> str:
    if not hits:
        return "(no matching records)"
    lines = []
    for hit in hits:
        record = hit.record
        head = f"record {record.id} | {record.day or 'undated'} | {record.author or 'unknown'}"
        lines.append(f"{head}\n{record.text}")
    return "\n\n".join(lines)
