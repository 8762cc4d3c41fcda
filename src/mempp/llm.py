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
import hashlib
import json
import logging
import os
import random
import re
import sqlite3
import sys
import threading
import time
import types
import typing
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from mempp.errors import InvalidInput, MemppError

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "LLMCache",
    "LLMClient",
    "LLMConfig",
    "LLMContextOverflow",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailable",
    "LLMUsage",
    "Message",
    "json_schema",
    "map_concurrent",
    "ordered_map",
    "parse_json_reply",
    "placeholder_problem",
    "strip_reasoning",
]

ENV_BASE_URL = "MEMPP_LLM_BASE_URL"
ENV_MODEL = "MEMPP_LLM_MODEL"
ENV_API_KEY = "MEMPP_LLM_API_KEY"
ENV_TIMEOUT = "MEMPP_LLM_TIMEOUT"
ENV_CACHE = "MEMPP_LLM_CACHE"
ENV_JSON_MODE = "MEMPP_LLM_JSON_MODE"
ENV_DEADLINE = "MEMPP_LLM_DEADLINE"
DEFAULT_DEADLINE = 120.0
# Statuses that a repeat cannot fix. 501 is "not implemented" (e.g. no embeddings on this
# server), not a passing outage, so it is the one 5xx that is not retried.
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 413, 422, 501})
# How the JSON shape is asked for, strongest first (see LLMClient.chat_json).
FORMAT_MODES = ("json_schema", "json_object", "text")
NOTICE_AFTER = 5.0  # seconds of waiting before a terminal hears about it
INSTALL_HINT = "pip install 'mempp[llm]'"
CHAT_PATH = "/chat/completions"

log = logging.getLogger(__name__)

Message = Mapping[str, Any]
T = TypeVar("T")
R = TypeVar("R")


# -- errors ---------------------------------------------------------------------------------
class LLMError(MemppError):
    """A chat call failed. ``status`` is the HTTP status when the endpoint answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LLMUnavailable(LLMError):
    """No usable endpoint: not configured, unreachable, or still failing after every retry."""


class LLMContextOverflow(LLMError):
    """The request does not fit the model's context or input limit (the server said so). Not
    retried: the same request would overflow again."""


class LLMReplyError(LLMError):
    """The endpoint answered, but the reply cannot be used (no text, malformed or partial JSON,
    missing keys, wrong types). ``reply`` holds the raw text for the record."""

    def __init__(self, message: str, *, reply: str | None = None) -> None:
        super().__init__(message)
        self.reply = reply


# -- configuration --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LLMConfig:
    """Where and how to call the model. Build from the environment with :meth:`from_env`.

    ``json_mode`` lets JSON calls send ``response_format`` (a ``json_schema``, else
    ``json_object``); turn it off for servers that mishandle that field (the reply is still
    parsed strictly). ``deadline`` caps one call, every attempt and wait included, in seconds.
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never printed
    timeout: float = 60.0
    max_retries: int = 4
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    max_retry_after: float = 120.0
    max_concurrency: int = 4
    json_mode: bool = True
    deadline: float = DEFAULT_DEADLINE
    cache_path: str | os.PathLike[str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LLMConfig:
        """Read ``MEMPP_LLM_*`` variables; keyword overrides win, and ``None`` overrides are
        ignored so a CLI can pass its optional flags straight through."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        if env.get(ENV_BASE_URL):
            values["base_url"] = env[ENV_BASE_URL]
        if env.get(ENV_MODEL):
            values["model"] = env[ENV_MODEL]
        if env.get(ENV_API_KEY):
            values["api_key"] = env[ENV_API_KEY]
        if env.get(ENV_CACHE):
            values["cache_path"] = env[ENV_CACHE]
        if env.get(ENV_TIMEOUT):
            try:
                values["timeout"] = float(env[ENV_TIMEOUT])
            except ValueError:
                raise InvalidInput(f"{ENV_TIMEOUT} must be a number of seconds") from None
        if env.get(ENV_DEADLINE):
            try:
                values["deadline"] = float(env[ENV_DEADLINE])
            except ValueError:
                raise InvalidInput(f"{ENV_DEADLINE} must be a number of seconds") from None
        if env.get(ENV_JSON_MODE):
            values["json_mode"] = env[ENV_JSON_MODE].strip().lower() not in ("0", "false", "no")
        return cls(**values).with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> LLMConfig:
        """A copy with the non-``None`` overrides applied."""
        unknown = set(overrides) - {f.name for f in fields(self)}
        if unknown:
            raise InvalidInput(f"unknown LLMConfig field(s): {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def endpoint(self, path: str = CHAT_PATH) -> str:
        """The URL of an API route, by default chat completions (see the module docstring for
        the joining rule)."""
        if not self.base_url:
            raise LLMUnavailable(
                f"no LLM endpoint configured: set {ENV_BASE_URL} "
                "(e.g. https://api.openai.com/v1 or http://localhost:11434/v1) or pass base_url"
            )
        base = self.base_url.strip().rstrip("/")
        if not re.match(r"^https?://", base):
            raise InvalidInput(f"LLM base URL must start with http:// or https://, got {base!r}")
        base = base.removesuffix(CHAT_PATH)
        return base + path

    def validate(self) -> None:
        self.endpoint()
        if not self.model:
            raise LLMUnavailable(f"no model configured: set {ENV_MODEL} or pass model")
        if self.timeout <= 0:
            raise InvalidInput("timeout must be > 0 seconds")
        if self.deadline <= 0:
            raise InvalidInput(f"deadline must be > 0 seconds ({ENV_DEADLINE})")
        if self.max_retries < 0:
            raise InvalidInput("max_retries must be >= 0")
        if self.max_concurrency < 1:
            raise InvalidInput("max_concurrency must be >= 1")


@dataclass(slots=True)
class LLMUsage:
    """Counters for one client (thread-safe updates happen inside the client)."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# -- transports -----------------------------------------------------------------------------
class _TransportFailure(Exception):
    """The request did not get an HTTP answer (refused, reset, timed out)."""


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


class _HttpxTransport:
    def __init__(self, timeout: float) -> None:
        try:
            import httpx
        except ImportError:  # pragma: no cover - exercised only without httpx
            raise LLMUnavailable(
                f"httpx is not installed: {INSTALL_HINT} (or use transport='urllib')"
            ) from None
        self._httpx = httpx
        # Connecting should fail fast even when a long generation is allowed.
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))

    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> _Response:
        limit = self._httpx.Timeout(timeout, connect=min(timeout, 10.0))
        try:
            response = self._client.post(url, headers=dict(headers), content=body, timeout=limit)
        except self._httpx.TimeoutException as exc:
            raise _TransportFailure(f"timed out ({type(exc).__name__})") from exc
        except self._httpx.TransportError as exc:
            raise _TransportFailure(f"{type(exc).__name__}: {exc}") from exc
        lowered = {k.lower(): v for k, v in response.headers.items()}
        return _Response(response.status_code, lowered, response.content)

    def close(self) -> None:
        self._client.close()


class _UrllibTransport:
    def post(self, url: str, headers: Mapping[str, str], body: bytes, timeout: float) -> _Response:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                lowered = {k.lower(): v for k, v in response.headers.items()}
                return _Response(response.status, lowered, response.read())
        except urllib.error.HTTPError as exc:  # an HTTP answer, just not 2xx
            lowered = {k.lower(): v for k, v in (exc.headers or {}).items()}
            return _Response(exc.code, lowered, exc.read() or b"")
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise _TransportFailure(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        pass


def _make_transport(kind: str, timeout: float) -> _HttpxTransport | _UrllibTransport:
    if kind == "httpx":
        return _HttpxTransport(timeout)
    if kind == "urllib":
        return _UrllibTransport()
    if kind == "auto":
        try:
            import httpx  # noqa: F401
        except ImportError:
            return _UrllibTransport()
        return _HttpxTransport(timeout)
    raise InvalidInput(f"transport must be 'auto', 'httpx' or 'urllib', got {kind!r}")


# -- cache ----------------------------------------------------------------------------------
class LLMCache:
    """Replies on disk in one SQLite file, keyed by a hash of the full request.

    Only successful replies are stored. A reply the caller found unusable is evicted
    (:meth:`discard`), so a retry or a rerun asks the model again instead of replaying it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        with self._lock, self._db:
            # WAL lets several benchmark processes share one cache file.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS calls ("
                " key TEXT PRIMARY KEY, created TEXT NOT NULL, model TEXT,"
                " request TEXT NOT NULL, reply TEXT NOT NULL)"
            )

    @staticmethod
    def key(endpoint: str, payload: Mapping[str, Any], tag: str | None = None) -> str:
        """Hash of endpoint, model, messages and every sampling parameter (never the API key)."""
        material = {"endpoint": endpoint, "payload": payload, "tag": tag}
        blob = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT reply FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, payload: Mapping[str, Any], reply: str) -> None:
        request = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (key, created, model, request, reply)"
                " VALUES (?, ?, ?, ?, ?)",
                (key, now, payload.get("model"), request, reply),
            )

    def discard(self, key: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM calls WHERE key = ?", (key,))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


# -- JSON replies ---------------------------------------------------------------------------
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)

# A type, a union of types, list[...] / dict[str, ...] of those, or a mapping of keys to specs
# (a nested object).
SchemaSpec = Any


def strip_reasoning(text: str) -> str:
    """Drop a leading ``<think>...</think>`` block that reasoning models served through
    Ollama, vLLM or llama.cpp put in the content, and surrounding whitespace."""
    return _THINK.sub("", text, count=1).strip()


def parse_json_reply(
    text: str,
    schema: Mapping[str, SchemaSpec] | None = None,
    *,
    check: Callable[[dict[str, Any]], None] | None = None,
    required: Collection[str] | None = None,
) -> dict[str, Any]:
    """Read one JSON object out of a model reply, strictly.

    Accepted wrappers: a reasoning block, a Markdown code fence, prose before the object, text
    after it. The object itself must be complete and valid JSON: a truncated or malformed one
    raises :class:`LLMReplyError` rather than being patched up. ``schema`` maps each required key
    to its type (``str``, ``int``, ``float``, ``bool``, ``list[int]``, ``dict[str, float]``,
    ``int | str``, ``Literal["a", "b"]``, a nested mapping, ``[spec]`` for a list of ``spec``).
    ``required`` names the keys that must be present (default: all); another key that does
    not fit its type is dropped from the result. ``check`` may raise ``ValueError`` for rules
    a schema cannot express.
    """
    if not isinstance(text, str):
        raise LLMReplyError("reply is not text", reply=None)
    body = strip_reasoning(text)
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(1).strip()
    start = body.find("{")
    if start < 0:
        raise LLMReplyError(f"reply holds no JSON object: {_snippet(text)}", reply=text)
    try:
        # raw_decode reads exactly one value and tolerates trailing text; taking the span from
        # the first "{" to the last "}" instead would accept two glued objects or a half one.
        value, _ = json.JSONDecoder().raw_decode(body, start)
    except json.JSONDecodeError as exc:
        # Input ending mid-value means the reply was cut (often max_tokens), not mangled.
        truncated = exc.pos >= len(body.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "partial (truncated)" if truncated else "malformed"
        raise LLMReplyError(
            f"{kind} JSON in reply: {exc.msg}: {_snippet(text)}", reply=text
        ) from None
    if not isinstance(value, dict):
        raise LLMReplyError("reply JSON is not an object", reply=text)
    problems: list[str] = []
    needed = set(schema or {}) if required is None else set(required)
    for key, spec in (schema or {}).items():
        if key not in value:
            if key in needed:
                problems.append(f"missing key {key!r}")
        elif not _matches(value[key], spec):
            if key not in needed:  # an optional key that is malformed is as good as absent
                del value[key]
                continue
            problems.append(f"key {key!r} should be {_spec_name(spec)}, got {value[key]!r:.80}")
    if problems:
        raise LLMReplyError("reply JSON does not fit: " + "; ".join(problems), reply=text)
    if check is not None:
        try:
            check(value)
        except ValueError as exc:
            raise LLMReplyError(f"reply JSON does not fit: {exc}", reply=text) from None
    return value


def _matches(value: Any, spec: SchemaSpec) -> bool:
    if spec is Any or spec is object:
        return True
    if isinstance(spec, Mapping):  # a nested object with these required keys
        return isinstance(value, dict) and all(
            key in value and _matches(value[key], sub) for key, sub in spec.items()
        )
    if isinstance(spec, list):  # [spec]: a list of spec
        return isinstance(value, list) and all(_matches(v, spec[0]) for v in value)
    origin: Any = typing.get_origin(spec)
    if origin is typing.Literal:
        # Case and surrounding space are forgiven: small models write "Conflict" for
        # "conflict" when nothing enforces the schema; callers normalise the value.
        options = {str(arg).casefold() for arg in typing.get_args(spec)}
        return isinstance(value, str) and value.strip().casefold() in options
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(spec))
    if origin is list:
        (item,) = typing.get_args(spec) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        key_spec, val_spec = typing.get_args(spec) or (Any, Any)
        return isinstance(value, dict) and all(
            _matches(k, key_spec) and _matches(v, val_spec) for k, v in value.items()
        )
    if spec is type(None) or spec is None:
        return value is None
    if spec is float:  # JSON does not tell 1 from 1.0
        return isinstance(value, int | float) and not isinstance(value, bool)
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(spec, type):
        return isinstance(value, spec)
    raise InvalidInput(f"unsupported schema type {spec!r}")


def _spec_name(spec: SchemaSpec) -> str:
    if isinstance(spec, Mapping):
        return "an object with " + ", ".join(repr(k) for k in spec)
    if isinstance(spec, list):
        return f"a list of {_spec_name(spec[0])}"
    if typing.get_origin(spec) is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(spec))
    return getattr(spec, "__name__", None) or str(spec)


def json_schema(spec: Mapping[str, SchemaSpec]) -> dict[str, Any]:
    """The JSON Schema of a reply spec (the mapping :func:`parse_json_reply` takes): an object
    whose keys are all required and the only ones allowed, as OpenAI's strict mode wants."""
    return _object_schema(spec)


def _object_schema(spec: Mapping[str, SchemaSpec]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: _type_schema(value) for key, value in spec.items()},
        "required": list(spec),
        "additionalProperties": False,
    }


def _type_schema(spec: SchemaSpec) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return _object_schema(spec)
    if isinstance(spec, list):
        return {"type": "array", "items": _type_schema(spec[0])}
    origin: Any = typing.get_origin(spec)
    if origin is typing.Literal:
        return {"type": "string", "enum": [str(arg) for arg in typing.get_args(spec)]}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(arg) for arg in typing.get_args(spec)]}
    if origin is list:
        (item,) = typing.get_args(spec) or (Any,)
        return {"type": "array", "items": _type_schema(item)}
    if origin is dict:
        _, value = typing.get_args(spec) or (Any, Any)
        return {"type": "object", "additionalProperties": _type_schema(value)}
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if spec in names:
        return {"type": names[spec]}
    if spec is type(None) or spec is None:
        return {"type": "null"}
    return {}  # Any: no constraint


def _is_strict(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict mode accepts the schema: every object lists its properties."""
    if schema.get("type") == "object" and "properties" not in schema:
        return False
    children: list[Any] = [*schema.get("properties", {}).values(), *schema.get("anyOf", [])]
    if isinstance(schema.get("items"), Mapping):
        children.append(schema["items"])
    return all(_is_strict(child) for child in children)


# A value that is only an angle-bracketed slot ("<your answer>"), dots, or the word "string":
# what a model that copies the reply shape from its instructions sends back.
_PLACEHOLDER = re.compile(
    r"^\s*(?:<[^<>]*>|\.{2,}|…|string)\s*$",
    re.IGNORECASE,
)
_ECHO_WORDS = 4  # a reply phrase this long found in the instructions (not the input) is an echo


def placeholder_problem(value: Any, messages: Sequence[Message] = ()) -> str | None:
    """Why ``value`` (a parsed reply) holds no content of its own, or ``None`` if it does.

    Every string in it is checked: a placeholder (:data:`_PLACEHOLDER`), a key of the reply
    itself given as a value (``{"answer": "citations"}``: the model copied the reply's shape),
    or a phrase of at least four words that the system messages contain and the other
    messages do not (the model repeated its instructions instead of reading its input).
    """
    keys = {key.strip().casefold() for key in _keys(value)}
    system = " ".join(
        _flat(m.get("content")) for m in messages if m.get("role") == "system"
    ).casefold()
    user = " ".join(
        _flat(m.get("content")) for m in messages if m.get("role") != "system"
    ).casefold()
    for text in _strings(value):
        if _PLACEHOLDER.match(text):
            return f"{text.strip()!r:.60} is a placeholder, not content"
        if text.strip().strip("\"'").casefold() in keys:
            return f"{text.strip()!r:.60} is a key of the reply's shape, not content"
        flat = _flat(text).casefold()
        if len(flat.split()) >= _ECHO_WORDS and flat in system and flat not in user:
            return f"{text.strip()!r:.60} repeats the instructions"
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def _flat(text: Any) -> str:
    return " ".join(str(text or "").split())


def _snippet(text: str, width: int = 160) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


# -- concurrency ----------------------------------------------------------------------------
def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, max_workers: int) -> Iterator[R]:
    """``fn`` over ``items`` on at most ``max_workers`` threads, each result yielded in input
    order as soon as it is ready, so a caller can apply results one by one while later calls
    run. If the caller stops early (an error), calls not yet started are never made."""
    if max_workers == 1:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(max_workers=max_workers)
    try:
        yield from pool.map(fn, items)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def map_concurrent(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    max_workers: int,
    return_exceptions: bool = False,
) -> list[R | BaseException]:
    """``[fn(x) for x in items]`` on at most ``max_workers`` threads, results in input order.

    By default the first exception cancels the calls not yet started and is raised. With
    ``return_exceptions=True`` each failed item yields its exception instead, so one bad
    question does not end a benchmark run.
    """
    if max_workers < 1:
        raise InvalidInput("max_workers must be >= 1")
    work = list(items)
    if not work:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(work))) as pool:
        futures: list[Future[R]] = [pool.submit(fn, item) for item in work]
        if not return_exceptions:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:
                for future in futures:
                    future.cancel()
                raise failed.exception()  # type: ignore[misc]
        results: list[R | BaseException] = []
        for future in futures:
            error = future.exception()
            results.append(error if error is not None else future.result())
        return results


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
