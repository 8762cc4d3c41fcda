"""One small client for any OpenAI-compatible chat-completions endpoint.

The same code talks to OpenAI, vLLM, Ollama and the llama.cpp server: they all accept
``POST {base_url}/chat/completions`` with ``{"model", "messages", ...}`` and answer with
``choices[0].message.content``. Nothing else in mempp imports this module at import time, so the
read and write paths never depend on an HTTP library or on an endpoint being configured.

URL rule: ``base_url`` is the API root *including* its version prefix, exactly as the OpenAI
SDKs expect (``https://api.openai.com/v1``, ``http://localhost:8000/v1`` for vLLM,
``http://localhost:11434/v1`` for Ollama, ``http://localhost:8080/v1`` for llama.cpp). The client
appends ``/chat/completions``. A base URL that already ends in ``/chat/completions`` is used as
given.

What the client adds over a bare POST, and why:

* errors by kind: 429, 5xx (but 501), timeouts and resets are retried with exponential backoff
  and jitter, honouring ``Retry-After``; 400/401/403/404/413/422/501 and a context overflow fail
  at once with the server's message, because repeating them cannot help; every call has a total
  deadline (``MEMPP_LLM_DEADLINE``, default 120 s) that caps its attempts and waits, and a wait
  longer than a few seconds says what it waits for on a terminal;
* :meth:`LLMClient.chat_json`, a strict reader of JSON replies with a caller-given schema. The
  schema is also sent: ``response_format`` ``json_schema`` (strict), else ``json_object``, else
  nothing, stepping down once when the server refuses a format and remembering it for the
  client's life. A reply that repeats a placeholder or a phrase of the instructions instead of
  content is unusable (:class:`LLMReplyError`), like malformed or truncated JSON;
* a bounded number of requests in flight, and :meth:`LLMClient.map` to fan work out over threads;
* an opt-in on-disk SQLite cache keyed by (endpoint, model, messages, parameters), so re-judging a
  benchmark run costs nothing and gives the same replies.

httpx is used when installed (``pip install 'mempp[llm]'``); otherwise the standard library's
urllib does the same job, a little less efficiently (no connection reuse).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar

from mempp.errors import InvalidInput
from mempp.llm.cache import LLMCache
from mempp.llm.concurrency import map_concurrent
from mempp.llm.config import ENV_DEADLINE, LLMConfig, LLMUsage
from mempp.llm.errors import LLMContextOverflow, LLMError, LLMReplyError, LLMUnavailable
from mempp.llm.replies import (
    Message,
    SchemaSpec,
    _is_strict,
    _snippet,
    json_schema,
    parse_json_reply,
    placeholder_problem,
)
from mempp.llm.transports import _make_transport, _Response, _TransportFailure

# Statuses that a repeat cannot fix. 501 is "not implemented" (e.g. no embeddings on this
# server), not a passing outage, so it is the one 5xx that is not retried.
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 413, 422, 501})
# How the JSON shape is asked for, strongest first (see LLMClient.chat_json).
FORMAT_MODES = ("json_schema", "json_object", "text")
NOTICE_AFTER = 5.0  # seconds of waiting before a terminal hears about it

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


# -- the client -----------------------------------------------------------------------------
class LLMClient:
    """A chat-completions client with retries, a concurrency bound and an optional cache.

    ``LLMClient.from_env(model="gpt-4o-mini")`` reads the ``MEMPP_LLM_*`` variables; or pass an
    :class:`LLMConfig`. Thread-safe: one client may serve a whole thread pool. ``sleep`` and
    ``rng`` exist so tests can observe backoff without waiting.
    """

    def __init__(
        self,
        config: LLMConfig | None = None,
        *,
        transport: Literal["auto", "httpx", "urllib"] = "auto",
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        notify: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **overrides: Any,
    ) -> None:
        base = config if config is not None else LLMConfig()
        self.config = base.with_overrides(**overrides)
        self.config.validate()
        self.endpoint = self.config.endpoint()
        self._transport = _make_transport(transport, self.config.timeout)
        self.cache = LLMCache(self.config.cache_path) if self.config.cache_path else None
        self.usage = LLMUsage()
        self._sleep = sleep
        self._clock = clock
        self._notify = notify or _terminal_notice
        self._format = FORMAT_MODES[0] if self.config.json_mode else "text"
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        # Bounds requests in flight even when callers bring their own threads.
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        transport: Literal["auto", "httpx", "urllib"] = "auto",
        **overrides: Any,
    ) -> LLMClient:
        return cls(LLMConfig.from_env(env, **overrides), transport=transport)

    @property
    def model(self) -> str:
        return str(self.config.model)

    def close(self) -> None:
        self._transport.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLMClient(endpoint={self.endpoint!r}, model={self.config.model!r})"

    # -- calls ------------------------------------------------------------------------------
    def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = 0.0,
        max_tokens: int | None = 1024,
        json_mode: bool = False,
        response_format: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        cache_tag: str | None = None,
    ) -> str:
        """Send one chat request and return the reply text.

        ``temperature``/``max_tokens`` set to ``None`` are left out of the request (some
        reasoning models reject them). ``json_mode`` asks for a JSON object when the config
        allows it; ``response_format`` sets the field verbatim. ``extra`` adds body fields
        (``seed``, ``top_p``, ...). ``cache_tag`` separates otherwise identical calls in the
        cache, e.g. the three runs of a judge.
        """
        text, _ = self._complete(
            messages,
            temperature=temperature,
            max_tokens=max_tokens,
            json_mode=json_mode,
            response_format=response_format,
            extra=extra,
            cache_tag=cache_tag,
        )
        return text

    def chat_json(
        self,
        messages: Sequence[Message],
        *,
        schema: Mapping[str, SchemaSpec] | None = None,
        name: str = "reply",
        required: Collection[str] | None = None,
        check: Callable[[dict[str, Any]], None] | None = None,
        reply_retries: int = 0,
        temperature: float | None = 0.0,
        max_tokens: int | None = 1024,
        extra: Mapping[str, Any] | None = None,
        cache_tag: str | None = None,
    ) -> dict[str, Any]:
        """Like :meth:`chat`, but the reply must be a JSON object fitting ``schema``.

        The schema goes out as ``response_format`` (``json_schema`` named ``name``, strict when
        the schema allows it), or ``json_object`` or nothing on servers that refused the
        stronger one: the first refusal steps this client down for good. The reply is parsed
        strictly whatever the server enforced, and a reply holding a placeholder or an echo of
        the instructions (:func:`placeholder_problem`) is unusable. ``required`` relaxes the
        parse to those keys (the schema sent still asks for every key).

        With ``reply_retries`` > 0, an unusable reply is answered once more with a short note
        saying what was wrong, and the model tries again; after the last try the
        :class:`LLMReplyError` is raised. Unusable replies never stay in the cache.
        """
        conversation = list(messages)
        shape = json_schema(schema or {})

        def checked(value: dict[str, Any]) -> None:
            problem = placeholder_problem(value, messages)
            if problem is not None:
                raise ValueError(problem)
            if check is not None:
                check(value)

        attempt = 0
        while True:
            text: str | None = None
            try:
                text, key = self._complete_structured(
                    conversation,
                    name=name,
                    shape=shape,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    extra=extra,
                    cache_tag=cache_tag,
                )
                try:
                    return parse_json_reply(text, schema, check=checked, required=required)
                except LLMReplyError:
                    if self.cache is not None and key is not None:
                        self.cache.discard(key)
                    raise
            except LLMReplyError as exc:
                if attempt >= reply_retries:
                    raise
                attempt += 1
                if text is None:  # no text at all: simply ask again
                    conversation = list(messages)
                    continue
                # Showing the model its own reply and the fault fixes most slips (a missing
                # key, prose around the object) where a blind repeat at temperature 0 would not.
                conversation = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": f"That reply could not be used ({exc}). Reply again with "
                        "only the JSON object, complete and valid, with every required key, "
                        "filled from the input above.",
                    },
                ]

    @property
    def format_mode(self) -> str:
        """How JSON calls ask for their shape now: ``json_schema``, ``json_object`` or
        ``text`` (the client steps down when a server refuses a format)."""
        return self._format

    def _complete_structured(
        self,
        messages: Sequence[Message],
        *,
        name: str,
        shape: dict[str, Any],
        temperature: float | None,
        max_tokens: int | None,
        extra: Mapping[str, Any] | None,
        cache_tag: str | None,
    ) -> tuple[str, str | None]:
        while True:
            mode = self._format
            response_format: dict[str, Any] | None = None
            if mode == "json_schema" and not shape["properties"]:
                # No schema given: an empty one would force "{}"; ask for any object instead.
                response_format = {"type": "json_object"}
            elif mode == "json_schema":
                spec: dict[str, Any] = {"name": _schema_name(name), "schema": shape}
                if _is_strict(shape):
                    spec["strict"] = True
                response_format = {"type": "json_schema", "json_schema": spec}
            elif mode == "json_object":
                response_format = {"type": "json_object"}
            try:
                return self._complete(
                    messages,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    json_mode=False,
                    response_format=response_format,
                    extra=extra,
                    cache_tag=cache_tag,
                )
            except LLMError as exc:
                if response_format is None or not _refuses_format(exc):
                    raise
                with self._lock:
                    if self._format == mode:  # another thread may have stepped down already
                        self._format = FORMAT_MODES[FORMAT_MODES.index(mode) + 1]
                        log.info("%s refused response_format %s: %s", self.endpoint, mode, exc)

    def map(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        *,
        max_workers: int | None = None,
        return_exceptions: bool = False,
    ) -> list[R | BaseException]:
        """:func:`map_concurrent` with the client's concurrency bound as the default width."""
        width = max_workers or self.config.max_concurrency
        return map_concurrent(fn, items, max_workers=width, return_exceptions=return_exceptions)

    # -- internals --------------------------------------------------------------------------
    def _payload(
        self,
        messages: Sequence[Message],
        temperature: float | None,
        max_tokens: int | None,
        json_mode: bool,
        response_format: Mapping[str, Any] | None,
        extra: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        clean: list[dict[str, Any]] = []
        for message in messages:
            if not isinstance(message, Mapping) or "role" not in message:
                raise InvalidInput("each message must be a mapping with 'role' and 'content'")
            clean.append(dict(message))
        if not clean:
            raise InvalidInput("messages is empty")
        payload: dict[str, Any] = {"model": self.config.model, "messages": clean}
        if temperature is not None:
            payload["temperature"] = temperature
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if response_format is not None:
            payload["response_format"] = dict(response_format)
        elif json_mode and self.config.json_mode:
            payload["response_format"] = {"type": "json_object"}
        if extra:
            payload.update(extra)
        return payload

    def _complete(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None,
        max_tokens: int | None,
        json_mode: bool,
        response_format: Mapping[str, Any] | None,
        extra: Mapping[str, Any] | None,
        cache_tag: str | None,
    ) -> tuple[str, str | None]:
        payload = self._payload(
            messages, temperature, max_tokens, json_mode, response_format, extra
        )
        key = None
        if self.cache is not None:
            key = LLMCache.key(self.endpoint, payload, cache_tag)
            cached = self.cache.get(key)
            if cached is not None:
                with self._lock:
                    self.usage.cache_hits += 1
                return cached, key
        text = self._read_reply(self._post_with_retries(self.endpoint, payload))
        if self.cache is not None and key is not None:
            self.cache.put(key, payload, text)
        return text, key

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        headers.update(self.config.headers)
        return headers

    def post_json(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to another route of the same API (``"/embeddings"``), with the
        same retries, concurrency bound and errors as :meth:`chat`; the reply's JSON object."""
        url = self.config.endpoint(path)
        response = self._post_with_retries(url, payload)
        data = _json_object(response, url)
        if "error" in data:
            raise LLMError(f"{url} reported an error: {_error_detail(response.body)}")
        return data

    def _post_with_retries(self, url: str, payload: Mapping[str, Any]) -> _Response:
        """The first 2xx response. Retries 429, 5xx but 501, and transport failures, within
        the config's deadline; everything else fails at once (see the module docstring)."""
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        headers = self._headers()
        attempts = self.config.max_retries + 1
        deadline = self._clock() + self.config.deadline
        for attempt in range(attempts):
            remaining = deadline - self._clock()
            with self._lock:
                self.usage.requests += 1
            try:
                with self._slots, self._watch(url, attempt):
                    response = self._transport.post(
                        url, headers, body, max(0.1, min(self.config.timeout, remaining))
                    )
            except _TransportFailure as exc:
                failure: LLMError = LLMUnavailable(
                    f"{url} unreachable after {attempt + 1} attempt(s): {exc}"
                )
                delay = self._backoff(attempt)
                reason = str(exc)
            else:
                if 200 <= response.status < 300:
                    return response
                failure = _status_error(url, response)
                if not _retryable(failure):
                    raise failure
                waited = self._retry_after(response.headers)
                delay = waited if waited is not None else self._backoff(attempt)
                reason = f"HTTP {response.status}"
            if attempt == attempts - 1:
                raise failure
            if self._clock() + delay >= deadline:
                raise LLMUnavailable(
                    f"{failure} (gave up at the {self.config.deadline:g} s deadline, "
                    f"{ENV_DEADLINE})",
                    status=failure.status,
                )
            with self._lock:
                self.usage.retries += 1
            if delay >= NOTICE_AFTER:
                self._notify(f"{reason} from {url}; retrying in {delay:.0f} s")
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def _watch(self, url: str, attempt: int) -> Iterator[None]:
        """Say so once when a request has been waiting longer than :data:`NOTICE_AFTER`."""
        started = self._clock()
        timer = threading.Timer(
            NOTICE_AFTER,
            lambda: self._notify(
                f"waiting for {url} (attempt {attempt + 1}, "
                f"{self._clock() - started:.0f} s so far, deadline {self.config.deadline:g} s)"
            ),
        )
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _backoff(self, attempt: int) -> float:
        # Exponential with "equal jitter": half fixed, half random, so clients that failed
        # together do not retry together, yet each still waits a meaningful minimum.
        ceiling = float(min(self.config.backoff_max, self.config.backoff_base * (2**attempt)))
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def _retry_after(self, headers: Mapping[str, str]) -> float | None:
        """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After`` as
        seconds or an HTTP date), capped at ``max_retry_after``; ``None`` if absent."""
        seconds: float | None = None
        if "retry-after-ms" in headers:
            try:
                seconds = float(headers["retry-after-ms"]) / 1000
            except ValueError:
                seconds = None
        if seconds is None and "retry-after" in headers:
            raw = headers["retry-after"].strip()
            try:
                seconds = float(raw)
            except ValueError:
                try:
                    when = parsedate_to_datetime(raw)
                except (TypeError, ValueError):
                    return None
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                seconds = (when - datetime.now(UTC)).total_seconds()
        if seconds is None:
            return None
        return min(max(seconds, 0.0), self.config.max_retry_after)

    def _read_reply(self, response: _Response) -> str:
        data = _json_object(response, self.endpoint)
        if "error" in data and "choices" not in data:
            raise LLMError(f"{self.endpoint} reported an error: {_error_detail(response.body)}")
        usage = data.get("usage")
        if isinstance(usage, dict):
            with self._lock:
                self.usage.prompt_tokens += _as_int(usage.get("prompt_tokens"))
                self.usage.completion_tokens += _as_int(usage.get("completion_tokens"))
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise LLMReplyError(
                f"reply has no choices[0].message: {_snippet(str(data))}", reply=None
            ) from None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # some servers send content parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(content, str) or not content.strip():
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            raise LLMReplyError(f"reply has no text (finish_reason={reason!r})", reply=None)
        return content


_OVERFLOW = re.compile(
    r"context (?:size|length|window)|too large|too long|maximum context|exceeds? the|"
    r"reduce the length|n_ctx|physical batch",
    re.IGNORECASE,
)
_FORMAT_REFUSAL = re.compile(r"response_format|json_schema|json_object|schema|grammar", re.I)


def _status_error(url: str, response: _Response) -> LLMError:
    """The error a non-2xx answer stands for, by kind (see :func:`_retryable`)."""
    detail = _error_detail(response.body)
    status = response.status
    if status == 413 or (status in (400, 422, 500) and _OVERFLOW.search(detail)):
        # llama.cpp answers an oversized input with 500; the cause is the request, not the
        # server, so it is the caller's to shrink, not ours to repeat.
        return LLMContextOverflow(
            f"HTTP {status} from {url}: the request is too large for the model: {detail}",
            status=status,
        )
    hint = " (check the base URL: it usually ends in /v1)" if status == 404 else ""
    message = f"HTTP {status} from {url}{hint}: {detail}"
    if status in PERMANENT_STATUSES:
        return LLMError(message, status=status)
    return LLMUnavailable(message, status=status)


def _retryable(error: LLMError) -> bool:
    return isinstance(error, LLMUnavailable)


def _refuses_format(error: LLMError) -> bool:
    """A refusal of ``response_format`` itself, as opposed to any other bad request."""
    return error.status in (400, 422, 500, 501) and bool(_FORMAT_REFUSAL.search(str(error)))


def _schema_name(name: str) -> str:
    # OpenAI allows letters, digits, "_" and "-" (at most 64).
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "reply"


def _terminal_notice(message: str) -> None:
    stream = sys.stderr
    if stream is not None and stream.isatty():
        print(f"mempp: {message}", file=stream, flush=True)


def _json_object(response: _Response, url: str) -> dict[str, Any]:
    try:
        data = json.loads(response.body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LLMError(
            f"{url} answered HTTP {response.status} with a body that is not JSON "
            f"(is the base URL right?): {_snippet(response.body.decode('utf-8', 'replace'))}",
            status=response.status,
        ) from None
    if not isinstance(data, dict):
        raise LLMError(f"unexpected reply from {url}: {_snippet(str(data))}")
    return data


def _as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_detail(body: bytes) -> str:
    """The server's error message if it sent the usual ``{"error": {"message": ...}}``."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _snippet(text) if text.strip() else "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    return _snippet(text)
