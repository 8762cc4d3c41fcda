"""What each request leaves behind for the operator: a request id, a log line, metrics and
a trace, from one ASGI middleware around the whole app (every door: ``/v1``, ``/mcp``, the
web pages).

The request id is the client's ``X-Request-Id`` when it is a short token (letters, digits,
``-``, ``_``, ``.``; at most 64), else a new one; it is sent back in the response's
``X-Request-Id`` and carried by every log record written while the request runs
(``mempp.server.logs``). The stages the read and write paths report (``mempp.search.stages``)
go to the latency histograms (``mempp.server.metrics``) and become trace spans
(``mempp.server.tracing``). Routes are labelled by their template (``/v1/records/{record_id}``),
never by the raw path, so the metrics' label sets stay bounded; nothing records a body, a
query's text or a key.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

from mempp.search.stages import observing
from mempp.server.logs import request_id_var
from mempp.server.metrics import Metrics
from mempp.server.tracing import Tracing

log = logging.getLogger("mempp.server.requests")

_GIVEN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
Scope = dict[str, Any]


class Observability:
    """ASGI middleware: request id, request log line, metrics and spans for each request."""

    def __init__(self, app: Any, *, metrics: Metrics, tracing: Tracing | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500  # what a request that fails before answering counts as
        method = scope.get("method", "GET")

        async def send_with_id(message: Mapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        started = time.perf_counter()
        token = request_id_var.set(request_id)
        tracing = self.tracing
        span_scope = (
            tracing.request(method, scope.get("path", ""), scope.get("scheme", "http"))
            if tracing is not None
            else nullcontext(None)
        )
        try:
            with span_scope as span:

                def observe(
                    name: str, start_ns: int, end_ns: int, attributes: Mapping[str, int]
                ) -> None:
                    self.metrics.observe_stage(name, (end_ns - start_ns) / 1e9, attributes)
                    if tracing is not None and span is not None:
                        tracing.stage(span, name, start_ns, end_ns, attributes)

                try:
                    with observing(observe):
                        await self.app(scope, receive, send_with_id)
                finally:
                    route = route_of(scope)
                    seconds = time.perf_counter() - started
                    self.metrics.observe_request(method, route, status, seconds)
                    if span is not None:
                        span.finish(route, status)
                    log.info(
                        "%s %s %d %.1f ms",
                        method,
                        route,
                        status,
                        seconds * 1000,
                        extra={
                            "http_method": method,
                            "http_route": route,
                            "status": status,
                            "duration_ms": round(seconds * 1000, 3),
                        },
                    )
        finally:
            request_id_var.reset(token)


def route_of(scope: Scope) -> str:
    """The route template that served ``scope``; ``/mcp`` for MCP; ``other`` otherwise (an
    unknown path, a static file), so label values stay few."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if isinstance(template, str):
        return template
    path = str(scope.get("path", ""))
    if path == "/mcp" or path.startswith("/mcp/"):
        return "/mcp"
    return "other"


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = value.decode("latin-1")
            if _GIVEN_ID.fullmatch(given):
                return given
            break
    return uuid.uuid4().hex
