"""Errors as RFC 9457 problem documents (``application/problem+json``), never a traceback.

The classes are the CLI's exit codes: bad input is 400 (a body that is not JSON) or 422 (a
value the API cannot accept), a missing record 404, a store or model that cannot serve 503;
and 409 when a correction finds a row changed since it was read.
Every document has ``type``, ``title``, ``status`` and ``detail``; ``field`` names the
offending input (``records.3.date``, ``k``) when there is one, and ``errors`` lists every
one of them when validation found several.

What a tenant reads never holds the server's file paths, SQL or a driver's or model's error
text: a store, model or other operational failure is told as what failed and the request id
(the guard's ``X-Request-Id``), and the server log keeps the whole message under that id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mempp.errors import InvalidInput, MemppError, RecordNotFound, StoreError, StoreUnavailable

log = logging.getLogger("mempp.server")
REQUEST_ID_KEY = "mempp.request_id"  # where the guard leaves a request's id in its scope

PROBLEM_JSON = "application/problem+json"

# Statuses the API documents for every route (besides the route's own success status).
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class Problem(Exception):
    """An error the API answers with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        field: str | None = None,
        errors: Sequence[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.errors = list(errors) if errors else None
        self.headers = dict(headers) if headers else None


def problem_body(
    status: int,
    detail: str,
    *,
    field: str | None = None,
    errors: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if field is not None:
        body["field"] = field
    if errors:
        body["errors"] = list(errors)
    return body


def problem_response(problem: Problem) -> JSONResponse:
    return JSONResponse(
        problem_body(problem.status, problem.detail, field=problem.field, errors=problem.errors),
        status_code=problem.status,
        media_type=PROBLEM_JSON,
        headers=problem.headers,
    )


def problem_from_error(exc: MemppError, request_id: str | None = None) -> Problem:
    """The problem a library error becomes (the CLI's exit-code classes). An operational
    failure's own text goes to the log under ``request_id``, not to the client."""
    from mempp.llm import LLMError
    from mempp.store.base import StateConflict

    field = getattr(exc, "field", None)  # named by the validation boundary where it can
    if isinstance(exc, RecordNotFound):
        return Problem(404, str(exc))
    if isinstance(exc, InvalidInput):
        return Problem(422, str(exc), field=field if isinstance(field, str) else None)
    if isinstance(exc, LLMError):  # the server has a model configured: it failed upstream
        return Problem(502, hidden("the language model failed", exc, request_id))
    if isinstance(exc, StateConflict):  # a row changed meanwhile: retry after reading
        return Problem(409, str(exc))
    if isinstance(exc, StoreUnavailable):  # the database is away: a retry is worth it soon
        return Problem(503, str(exc), headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, StoreError):
        return Problem(503, hidden("the store could not serve this request", exc, request_id))
    # Any other deliberate error: operational, like exit 1.
    return Problem(503, hidden("the server could not serve this request", exc, request_id))


def hidden(what: str, exc: BaseException, request_id: str | None) -> str:
    """``what`` failed, for the client; the log gets ``exc`` whole, under the request id."""
    log.error("request %s: %s: %s", request_id or "-", what, exc)
    where = f"request {request_id}; " if request_id else ""
    return f"{what} ({where}the server log has the details)"


def field_name(location: Sequence[str | int]) -> str:
    """``("body", "records", 3, "date")`` -> ``records.3.date``; the request part is dropped."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(str(p) for p in parts) or "body"


def validation_problem(errors: Sequence[Mapping[str, Any]]) -> Problem:
    """A FastAPI/pydantic validation failure as one problem naming each field."""
    listed: list[dict[str, Any]] = []
    for error in errors:
        kind = str(error.get("type", ""))
        if kind == "json_invalid":
            where = error.get("ctx", {}).get("error", "")
            detail = f"the body is not valid JSON ({where})" if where else "the body is not JSON"
            return Problem(400, detail, field="body")
        message = str(error.get("msg", "invalid value"))
        if message.startswith("Value error, "):  # our own validators' messages, as written
            message = message.removeprefix("Value error, ")
        listed.append({"field": field_name(error.get("loc", ())), "message": message})
    if not listed:
        return Problem(422, "the request is not valid")
    first = listed[0]
    more = f" (and {len(listed) - 1} more)" if len(listed) > 1 else ""
    return Problem(
        422, f"{first['field']}: {first['message']}{more}", field=first["field"], errors=listed
    )


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem document."""

    async def on_problem(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(validation_problem(exc.errors()))

    async def on_mempp(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MemppError)
        return problem_response(problem_from_error(exc, request_id_of(request.scope)))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers) if exc.headers else None
        return problem_response(Problem(exc.status_code, str(exc.detail), headers=headers))

    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        # The traceback goes to the server's log, never to the client.
        rid = request_id_of(request.scope)
        log.error(
            "request %s: unhandled error on %s %s",
            rid or "-",
            request.method,
            request.url.path,
            exc_info=exc,
        )
        where = f"request {rid}; " if rid else ""
        return problem_response(
            Problem(500, f"internal error ({where}the server log has the details)")
        )

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(MemppError, on_mempp)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)


def request_id_of(scope: Mapping[str, Any]) -> str | None:
    """The id the guard (or a request log around it) gave this request; None outside both."""
    found = scope.get(REQUEST_ID_KEY) or (scope.get("state") or {}).get("request_id")
    return found if isinstance(found, str) else None


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these error statuses."""
    return {
        status: {
            "description": TITLES.get(status, "Error"),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
