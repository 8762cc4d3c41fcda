"""How the clients reach a server: its address, the API key, timeouts, and when to retry.

A call is retried only when repeating it cannot do anything twice: reads always, writes
because each carries an ``Idempotency-Key`` the server honours (the same key on every
attempt of one call), and nothing else (a streamed ``ingest`` upload is sent once). A call
is retried after a connection failure or a timeout, and after a 429 or 503 answer (honouring
``Retry-After``), with exponential backoff; any other answer is final. These attempts are
planned here without I/O (:func:`sent`), so the sync and the async client retry alike.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar

import httpx

from mempp.client.problems import ServerUnavailable, error_from
from mempp.errors import InvalidInput

T = TypeVar("T")
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

    def request(self) -> dict[str, Any]:
        """The arguments of ``httpx.Client.request`` (and the async one's) but the headers."""
        return {"method": self.method, "url": self.path, "json": self.json, "params": self.params}


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


# -- the attempts at a plan's calls, without their I/O ---------------------------------------
Steps = Generator[Call, Any, T]  # a plan: yields calls, is sent their answers, returns T
# What a driver sends back to ``sent``: the response, or the transport error instead.
Outcome = httpx.Response | httpx.TransportError | None


def sent(plan: Steps[T], policy: RetryPolicy, url: str) -> Generator[Call | float, Outcome, T]:
    """``plan`` with each of its calls attempted as ``policy`` allows, still without I/O:
    yields the :class:`Call` to send now (the driver sends back the response, or the
    ``httpx.TransportError`` instead) or the seconds to wait before the next attempt (the
    driver sends back ``None``); returns the plan's result, or raises what the last answer
    or failure of a call means."""
    result = None  # what the previous call's answer decoded to
    while True:
        try:
            call = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        result = yield from _attempts(call, policy, url)


def one(call: Call) -> Steps[Any]:
    """The plan of a single call."""
    return (yield call)


def _attempts(call: Call, policy: RetryPolicy, url: str) -> Generator[Call | float, Outcome, Any]:
    attempts = policy.attempts if call.repeatable else 1
    for attempt in range(attempts):
        last = attempt + 1 == attempts
        outcome = yield call
        if isinstance(outcome, httpx.TransportError):
            if last or not retryable_failure(outcome, call):
                raise ServerUnavailable(
                    failure_message(url, call, outcome, attempt + 1)
                ) from outcome
            yield policy.delay(attempt)
            continue
        assert outcome is not None, "the driver sends the response back"
        if not last and outcome.status_code in policy.statuses:
            yield policy.delay(attempt, outcome.headers.get("retry-after"))
            continue
        if outcome.is_success:
            return call.decode(outcome.json())
        raise error_from(outcome, call.field_of)
    raise AssertionError("unreachable: the last attempt returns or raises")


def failure_message(url: str, call: Call, exc: Exception, tries: int) -> str:
    reason = str(exc) or type(exc).__name__
    times = "once" if tries == 1 else f"{tries} times"
    return f"{call.method} {url}{call.path} failed ({times}): {reason}"


def _version() -> str:
    try:
        return metadata.version("mempp")
    except metadata.PackageNotFoundError:  # a source tree on the path, not installed
        return "unknown"
