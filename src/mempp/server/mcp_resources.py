"""Records as MCP resources: the template ``mempp://record/{id}``, read in the caller's scope.

A host that holds a record id (search_memory, get_evidence and memory_history name one as
"record N") opens the record as a resource. The text is the record as the evidence block
shows it: the header ``[1] date | author | thread T | record N``, ended by the corrections
it carries (``superseded by record M (DATE)``, ``archived (DATE)``; a state the header has
no word for, such as a redaction's tombstone, as ``| redacted``), then the body with its
header-like lines escaped, so a record read this way cannot forge a header either.

``resources/list`` lists nothing, on purpose: a memory holds up to millions of records, and
a page of them chosen by id or date would be a guess at what the host wants, where
search_memory answers the question it has. ``resources/templates/list`` names the template.

Each read acts for the principal the tools act for (the request's key or OAuth token over
HTTP, the process's scope over stdio): a record of another scope is not found, the same
answer as an id that was never stored, so a read cannot tell whether another scope has it.
An id that is not a whole number in range is not found either.

"Not found" is the protocol's resource-not-found error, whose code depends on the revision
(SEP-2164): ``-32602`` from 2026-07-28 on, ``-32002`` before, as those revisions' spec
names it. The SDK answers ``-32602`` at every revision, so :class:`NotFoundByRevision`
rewrites it for the older ones, for a mempp record and an unknown URI alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mempp.errors import MemppError, RecordNotFound
from mempp.records import Hit
from mempp.search.corrections import with_corrections
from mempp.search.evidence import escape_body, header
from mempp.server.problems import Problem, problem_from_error
from mempp.server.schemas import MAX_ID
from mempp.server.state import Principal, ServerState, check_role

RECORD_TEMPLATE = "mempp://record/{id}"
RESOURCE_NOT_FOUND_BEFORE_2026 = -32002  # the code of 2024-11-05 to 2025-11-25


def register_records(
    server: MCPServer,
    state: ServerState,
    principal: Callable[[Context], Principal],
    request_id: Callable[[Context], str | None],
) -> None:
    """Add the record template to ``server``; ``principal(ctx)`` says whose scope is read."""

    @server.resource(
        RECORD_TEMPLATE,
        name="record",
        title="A record of the memory",
        description="One record, whole, by its id (as cited: 'record N'): the evidence "
        "header with its date, author, thread and corrections, then its text.",
        mime_type="text/plain",
    )
    def record(ctx: Context, id: str) -> str:
        number = _record_number(id)
        if number is None:
            raise ResourceNotFoundError(f"no record {id!r}: a record id is a whole number")
        try:
            who = principal(ctx)
            check_role(who, "read")
        except (ToolError, Problem) as exc:
            raise ResourceError(getattr(exc, "detail", None) or str(exc)) from None
        memory = state.memory(who.scope)
        try:
            found = memory.get(number)
            hit = with_corrections(memory.store, who.scope, [Hit(found, 1, 0.0)], None, None)[0]
        except RecordNotFound as exc:
            raise ResourceNotFoundError(str(exc)) from None
        except MemppError as exc:
            raise ResourceError(problem_from_error(exc, request_id(ctx)).detail) from None
        return render(hit)


def render(hit: Hit) -> str:
    """The record as one entry of an evidence block, with its state when the header has no
    word for it."""
    head = header(hit, 1)
    state = hit.record.state
    if state == "redacted" or (state == "archived" and hit.archived_on is None):
        head += f" | {state}"
    return head + "\n" + escape_body(hit.record.text)[0]


def _record_number(text: str) -> int | None:
    """The id a URI names, or None: digits only, no sign or leading zero (one URI a
    record), from 1 to the API's largest id."""
    if not (text.isascii() and text.isdigit()) or text.startswith("0"):
        return None
    number = int(text)
    return number if number <= MAX_ID else None


class NotFoundByRevision:
    """Context-tier middleware: a ``resources/read`` answered "not found" (``-32602`` with
    the URI in its data, as the SDK raises it) gets ``-32002`` at the revisions before
    2026-07-28, whose spec names that code."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await call_next(ctx)
        except MCPError as exc:
            if (
                ctx.method == "resources/read"
                and exc.code == INVALID_PARAMS
                and isinstance(exc.data, dict)
                and "uri" in exc.data
                and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
            ):
                raise MCPError(RESOURCE_NOT_FOUND_BEFORE_2026, exc.message, exc.data) from None
            raise
