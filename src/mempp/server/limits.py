"""Request size limits, applied before a body is read into memory.

A declared ``Content-Length`` over the limit is refused at once; a body sent without one (or
longer than declared) is counted as it arrives and cut off at the limit. Either way the
client gets a 413 problem. A JSON request is validated whole before anything is written, so
nothing of it is stored. ``/v1/ingest`` has a limit of its own: a JSON Lines upload is read
and stored a batch at a time, so an upload cut off at the limit keeps the batches before the
cut (send ``Content-Length`` to be refused before anything is read). ``/mcp`` bodies are
counted by the MCP SDK itself, with the same limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempp.server.problems import Problem, problem_response

UPLOAD_PATHS = ("/v1/ingest", "/upload")  # /upload: the web page's files
UPLOAD_PREFIXES = ("/v1/import/",)  # an export sent whole to its importer
SDK_COUNTED = "/mcp"


class BodyTooLarge(Problem):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds {limit} bytes", field="body")


class BodyLimit:
    """ASGI middleware refusing request bodies over ``max_body`` (``max_upload`` for uploads)."""

    def __init__(self, app: ASGIApp, *, max_body: int, max_upload: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_upload = max_upload

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        upload = path in UPLOAD_PATHS or path.startswith(UPLOAD_PREFIXES)
        limit = self.max_upload if upload else self.max_body
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and not declared.isdigit():
            bad = Problem(400, "Content-Length is not a number", field="Content-Length")
            await problem_response(bad)(scope, receive, send)
            return
        if declared is not None and int(declared) > limit:
            await problem_response(BodyTooLarge(limit))(scope, receive, send)
            return
        if scope["path"].startswith(SDK_COUNTED):
            await self.app(scope, receive, send)
            return
        received = 0
        refused = False

        async def counted() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Answer 413 now, and let the app see a client that went away: what it
                    # then tries to send is dropped.
                    refused = True
                    await problem_response(BodyTooLarge(limit))(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counted, guarded)
