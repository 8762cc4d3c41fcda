"""The server's problem documents (RFC 9457) as the exceptions ``Memory`` raises.

| status | exception |
|---|---|
| 400, 413, 415, 422 | ``InvalidInput`` (``field`` in ``Memory``'s spelling) |
| 401 | ``Unauthorized`` |
| 403 | ``Forbidden`` |
| 404 | ``RecordNotFound`` |
| 409 | ``StateConflict``; ``IdempotencyConflict`` when the key was used for another request |
| 502 | ``LLMError`` (the server's language model failed) |
| 503 | ``StoreError`` (the store or the model cannot serve) |
| 500, other | ``ServerError`` |

A server that cannot be reached is ``ServerUnavailable``, a ``StoreError``: for a caller, a
memory it cannot reach is a store it cannot use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from mempp.errors import (
    Forbidden,
    InvalidInput,
    MemppError,
    RecordNotFound,
    StoreError,
    Unauthorized,
)
from mempp.store.base import StateConflict

PROBLEM_CHARS = 500  # of a body that is not a problem document (a proxy's error page)


class ServerUnavailable(StoreError):
    """The server could not be reached, or did not answer in time, after every retry."""


class ServerError(MemppError):
    """The server failed (500) or answered with a status the API does not use."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class IdempotencyConflict(MemppError):
    """An ``Idempotency-Key`` was sent again with another request (HTTP 409)."""


def error_from(
    response: httpx.Response, field_of: Callable[[str], str] | None = None
) -> MemppError:
    """The exception a non-2xx answer stands for."""
    status = response.status_code
    body = _problem(response)
    detail = str(body.get("detail") or _text(response) or response.reason_phrase or status)
    field = body.get("field") if isinstance(body.get("field"), str) else None
    if status in (400, 413, 415, 422):
        if field is None:
            return InvalidInput(detail)
        problem = detail.removeprefix(f"{field}: ")
        return InvalidInput(problem, field=field_of(field) if field_of else field)
    if status == 401:
        return Unauthorized(detail)
    if status == 403:
        return Forbidden(detail)
    if status == 404:
        return RecordNotFound(detail)
    if status == 409:
        if field == "Idempotency-Key":
            return IdempotencyConflict(detail)
        return StateConflict(detail)
    if status == 502:
        from mempp.llm import LLMError

        return LLMError(detail, status=status)
    if status == 503:
        return StoreError(detail)
    return ServerError(f"the server answered {status}: {detail}", status=status)


def _problem(response: httpx.Response) -> dict[str, Any]:
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind not in ("application/problem+json", "application/json"):
        return {}
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _text(response: httpx.Response) -> str:
    try:
        text = response.text
    except (httpx.ResponseNotRead, UnicodeDecodeError):
        return ""
    return " ".join(text.split())[:PROBLEM_CHARS]
