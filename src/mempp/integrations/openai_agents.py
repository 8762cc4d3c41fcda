"""OpenAI Agents SDK: ``mempp_function_tools(memory)``, the tools remember, search_memory and
get_evidence as ``FunctionTool``s, over a ``Memory``, a ``Client`` or an ``AsyncClient``.

    from agents import Agent
    from mempp.integrations.openai_agents import mempp_function_tools

    agent = Agent(name="assistant", tools=mempp_function_tools(memory))

The SDK's default answer to a failing tool is "An error occurred while running the tool...",
which tells the model nothing it can correct. These tools set the failure function so that
the model reads mempp's own message instead (``as_of: not a valid date: '2024-02-30'...``,
``no record 99 in scope 'default'``) and can call again with a corrected argument. An error
that is not mempp's (a bug) keeps the SDK's generic answer and is logged by it.

The tools are coroutines: an ``AsyncClient`` is awaited, and a ``Memory`` or ``Client`` runs
in a worker thread, so the agent's event loop never blocks on the memory.
"""

from __future__ import annotations

from typing import Any, Literal

from agents import FunctionTool, RunContextWrapper, function_tool

from mempp.errors import MemppError
from mempp.integrations import backend
from mempp.records import Hit

GENERIC = "An error occurred while running the tool; the error was not the memory's own."


def failure_message(_: RunContextWrapper[Any], error: Exception) -> str:
    """What the model reads when a tool fails: mempp's message, or a generic line for a bug
    (whose details stay in the log, not in the prompt)."""
    return str(error) if isinstance(error, MemppError) else GENERIC


def mempp_function_tools(memory: Any) -> list[FunctionTool]:
    """remember, search_memory and get_evidence over ``memory``."""
    memory = backend.check(memory)

    async def remember(
        text: str,
        author: str | None = None,
        date: str | None = None,
        tags: list[str] | None = None,
        thread: str | None = None,
        source: str | None = None,
    ) -> str:
        """Store one document in the organization's memory, whole, with its date and author.
        Nothing stored is ever edited: to record a change, remember the new version with its
        own date.

        Args:
            text: The document text, as written.
            author: Who wrote or said it.
            date: When it was written or happened, ISO 8601 (YYYY-MM-DD).
            tags: Labels (project, topic).
            thread: Conversation, thread or ticket.
            source: Where it came from (URL, path).
        """
        added = await backend.acall(
            memory,
            "add",
            text,
            author=author,
            date=date,
            tags=tags or (),
            thread=thread,
            source=source,
        )
        if added.id is not None:
            return f"stored as record {added.id}"
        if added.skipped == "duplicate":
            return f"not stored: it repeats record {added.duplicate_of}"
        return "not stored: the text is empty"

    async def search_memory(
        query: str,
        as_of: str | None = None,
        k: int = 10,
        known_at: str | None = None,
        since: str | None = None,
        author: str | None = None,
        tags: list[str] | None = None,
        tags_mode: Literal["any", "all"] = "any",
        thread: str | None = None,
        source: str | None = None,
    ) -> str:
        """Search the organization's memory: the best-matching records, best first, each with
        its record id, date, author and full text. Pass as_of when the question is about a
        past moment, so later revisions are left out. When records disagree, the most
        recently dated one is in force. Cite the records you use as 'record N'.

        Args:
            query: The question or keywords.
            as_of: Only records dated up to this day (YYYY-MM-DD).
            k: How many records.
            known_at: Only records the memory had received by this day.
            since: Only records dated on or after this day.
            author: Only records by this author, exactly.
            tags: Only records with these tags.
            tags_mode: 'any' of the tags, or 'all' of them.
            thread: Only records of this thread, exactly.
            source: Only records whose source starts with this.
        """
        filters = {"known_at": known_at, "since": since, "author": author, "tags": tags}
        filters.update(tags_mode=tags_mode, thread=thread, source=source)
        hits = await backend.acall(memory, "search", query, as_of=as_of, k=k, **filters)
        return _listed(hits)

    async def get_evidence(
        query: str,
        as_of: str | None = None,
        budget: int = 8000,
        k: int = 20,
        known_at: str | None = None,
        author: str | None = None,
        thread: str | None = None,
    ) -> str:
        """The evidence block for a question: the best-matching records, each under a header
        '[i] date | author | record N', within a character budget. Answer from the block
        only and cite the records you use as 'record N'.

        Args:
            query: The question.
            as_of: Only records dated up to this day (YYYY-MM-DD).
            budget: Most characters of evidence.
            k: Most records shown.
            known_at: Only records the memory had received by this day.
            author: Only records by this author, exactly.
            thread: Only records of this thread, exactly.
        """
        block = await backend.acall(
            memory,
            "evidence",
            query,
            as_of=as_of,
            budget=budget,
            k=k,
            known_at=known_at,
            author=author,
            thread=thread,
        )
        return str(block.text) or "(no matching records)"

    return [
        function_tool(tool, failure_error_function=failure_message, strict_mode=False)
        for tool in (remember, search_memory, get_evidence)
    ]


def _listed(hits: list[Hit]) -> str:
    if not hits:
        return "(no matching records)"
    lines = []
    for hit in hits:
        record = hit.record
        head = f"record {record.id} | {record.day or 'undated'} | {record.author or 'unknown'}"
        lines.append(f"{head}\n{record.text}")
    return "\n\n".join(lines)
