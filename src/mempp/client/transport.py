"""How the clients reach a server: its address, the API key, timeouts, and when to retry.

A call is retried only when repeating it cannot do anything twice: reads always, writes
because each carries an ``Idempotency-Key`` the server honours (the same key on every
attempt of one call), and nothing else (a streamed ``ingest`` upload is sent once). A call
is retried after a connection failure or a timeout, and after a 429 or 503 answer (honouring
``Retry-After``), with exponential backoff; any other answer is final.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import httpx

from mempp.errors import InvalidInput

ENV_URL = "MEMPP_URL"
ENV_API_KEY = "MEMPP_API_KEY"
DEFAULT_URL = "http://127.0.0.1:8765"  # `mempp serve`'s default address
DEFAULT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` tries in all (1: never retry); the n-th retry waits ``backoff_s * 2**n``,
    at most ``max_backoff_s`` (a ``Retry-After`` the server sends is used instead, within the
    same cap)."""

    attempts: int = 3
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    statuses: frozenset[int] = field(default_factory=lambda: frozenset({429, 503}))

    def __post_init__(self) -> None:
        if not (isinstance(self.attempts, int) and 1 <= self.attempts <= 20):
            raise InvalidInput(f"must be 1 to 20, got {self.attempts!r}", field="attempts")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise InvalidInput("backoff times must be >= 0", field="backoff_s")

    def delay(self, retry: int, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.max_backoff_s)
            except ValueError:
                pass  # an HTTP date: fall back to the backoff
        return min(self.backoff_s * (2**retry), self.max_backoff_s)


NO_RETRIES = RetryPolicy(attempts=1)


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP call of the API: the request, how to read its answer, how to name fields.

    ``repeatable``: the call may be sent again (a read, or a write with ``idempotency_key``).
    ``field_of`` turns a field the server names into the one ``Memory`` would name
    (``records.3.date`` -> ``items[3].date``).
    """

    method: str
    path: str
    decode: Callable[[Any], Any]
    json: Any = None
    params: Any = None
    repeatable: bool = True
    idempotency_key: str | None = None
    field_of: Callable[[str], str] | None = None

    def headers(self) -> dict[str, str]:
        return {} if self.idempotency_key is None else {"Idempotency-Key": self.idempotency_key}


def write_call(method: str, path: str, decode: Callable[[Any], Any], **kwargs: Any) -> Call:
    """A write, made repeatable by a fresh idempotency key (kept for all its attempts)."""
    return Call(method, path, decode, idempotency_key=uuid.uuid4().hex, **kwargs)


def settings(
    url: str | None,
    api_key: str | None,
    timeout: float | httpx.Timeout | None,
    headers: Mapping[str, str] | None,
) -> tuple[str, dict[str, str], httpx.Timeout]:
    """The base URL, the headers every request carries, and the timeouts."""
    base = url or os.environ.get(ENV_URL) or DEFAULT_URL
    if not isinstance(base, str) or not base.startswith(("http://", "https://")):
        raise InvalidInput(f"must be an http:// or https:// URL, got {base!r}", field="url")
    key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
    sent = {"User-Agent": f"mempp-client/{_version()}", "Accept": "application/json"}
    if key:
        if not isinstance(key, str) or any(c in key for c in "\r\n"):
            raise InvalidInput("must be one line of text", field="api_key")
        sent["Authorization"] = f"Bearer {key}"
    sent.update(headers or {})
    if isinstance(timeout, httpx.Timeout):
        limits = timeout
    elif timeout is None:
        limits = httpx.Timeout(DEFAULT_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    elif isinstance(timeout, int | float) and timeout > 0:
        limits = httpx.Timeout(float(timeout), connect=min(float(timeout), CONNECT_TIMEOUT_S))
    else:
        raise InvalidInput(
            f"must be seconds > 0 or an httpx.Timeout, got {timeout!r}", field="timeout"
        )
    return base.rstrip("/"), sent, limits


def retry_policy(retries: RetryPolicy | int | None) -> RetryPolicy:
    if retries is None:
        return RetryPolicy()
    if isinstance(retries, RetryPolicy):
        return retries
    if isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0:
        return RetryPolicy(attempts=retries + 1)
    raise InvalidInput(f"must be a RetryPolicy or a count >= 0, got {retries!r}", field="retries")


def retryable_failure(exc: httpx.TransportError, call: Call) -> bool:
    """Whether a call that failed in transit may be sent again: when repeating it is
    harmless (a streamed upload cannot be sent again anyway)."""
    del exc  # every transport failure is judged alike: it may have reached the server
    return call.repeatable


def _version() -> str:
    try:
        return metadata.version("mempp")
    except metadata.PackageNotFoundError:  # a source tree on the path, not installed
        return "unknown"
