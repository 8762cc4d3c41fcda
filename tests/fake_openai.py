"""A scripted OpenAI-compatible chat server for tests, over real HTTP on 127.0.0.1.

    with FakeOpenAI() as server:
        server.reply('{"answer": "Friday", "citations": [1]}')
        server.error(429, headers={"Retry-After": "1"})  # queued after the first reply
        client = LLMClient(base_url=server.base_url, model="fake-model")
        ...
        assert server.requests[0].body["temperature"] == 0

Replies are served first in, first out. Every request is recorded (method, path, headers, parsed
JSON body) before its reply is chosen, so a test can assert on prompts, model, sampling settings
and the auth header. ``POST /v1/chat/completions`` and ``POST /chat/completions`` are both
served, matching the client's rule (``base_url`` includes ``/v1``; the client appends
``/chat/completions``), so a base URL with or without ``/v1`` reaches the fake; so are
``/v1/embeddings`` and ``/embeddings`` (script them with ``push(ScriptedReply(body=...))`` or a
``responder``). Any other path gets 404. When the queue is empty the server answers 418 with a
message saying so: a non-retryable status, so a test that scripted too few replies fails at
once and clearly.

Use it as a context manager, or through the ``server`` fixture defined here; ``fast_client``
builds a client for it that does not wait between retries.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mempp.llm import LLMClient

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings")


@dataclass
class ScriptedReply:
    """One scripted answer: ``content`` becomes a chat completion; otherwise ``body`` (JSON) or
    ``raw`` (text, sent as is) with ``status``. ``delay`` seconds pass before answering."""

    status: int = 200
    content: str | None = None
    body: Any = None
    raw: str | None = None
    delay: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    raw: bytes
    body: Any  # parsed JSON, or None when the body was not JSON

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages", []))

    def text(self) -> str:
        """Every message's content joined, for "the prompt mentions X" assertions."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


class FakeOpenAI:
    """The server. ``start()``/``stop()`` or ``with``; ``base_url`` ends in ``/v1``."""

    def __init__(self, responder: Callable[[RecordedRequest], ScriptedReply] | None = None):
        self._queue: deque[ScriptedReply] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.responder = responder  # used when the queue is empty, if set
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True  # a delayed reply must not block stop()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running")
        return int(self._server.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    # -- scripting ------------------------------------------------------------------------
    def push(self, reply: ScriptedReply) -> FakeOpenAI:
        with self._lock:
            self._queue.append(reply)
        return self

    def reply(self, content: str, *, delay: float = 0.0, finish_reason: str = "stop") -> FakeOpenAI:
        """Queue a successful chat completion whose message content is ``content``."""
        return self.push(ScriptedReply(content=content, delay=delay, finish_reason=finish_reason))

    def reply_json(self, value: Any, *, delay: float = 0.0) -> FakeOpenAI:
        """Queue a completion whose content is ``value`` serialised as JSON."""
        return self.reply(json.dumps(value), delay=delay)

    def error(
        self,
        status: int,
        message: str = "scripted error",
        *,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> FakeOpenAI:
        """Queue an OpenAI-style error body with ``status``."""
        body = {"error": {"message": message, "type": "fake", "code": status}}
        return self.push(
            ScriptedReply(status=status, body=body, headers=headers or {}, delay=delay)
        )

    def raw(
        self,
        text: str,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> FakeOpenAI:
        """Queue a body sent verbatim (not a completion), e.g. an HTML error page."""
        return self.push(ScriptedReply(status=status, raw=text, headers=headers or {}, delay=delay))

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    # -- serving --------------------------------------------------------------------------
    def _next(self, request: RecordedRequest) -> ScriptedReply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(request)
        return ScriptedReply(
            status=418, body={"error": {"message": "fake server: no scripted reply left"}}
        )


def completion(content: str, model: str, finish_reason: str = "stop") -> dict[str, Any]:
    """A chat-completion body shaped like OpenAI's."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": max(1, len(content.split())),
            "total_tokens": 10 + max(1, len(content.split())),
        },
    }


def _make_handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

        def log_message(self, format: str, *args: Any) -> None:  # silence test output
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw.decode("utf-8")) if raw else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                body = None
            path = self.path.split("?", 1)[0]
            if path not in CHAT_PATHS + EMBEDDING_PATHS:
                self._send(404, {"error": {"message": f"fake server: no route {path}"}}, {})
                return
            request = RecordedRequest(
                "POST", path, {k.lower(): v for k, v in self.headers.items()}, raw, body
            )
            reply = fake._next(request)
            if reply.delay:
                time.sleep(reply.delay)
            if reply.content is not None:
                model = str((body or {}).get("model", "fake-model"))
                payload: Any = completion(reply.content, model, reply.finish_reason)
            elif reply.raw is not None:
                self._send_bytes(
                    reply.status, reply.raw.encode("utf-8"), "text/html", reply.headers
                )
                return
            else:
                payload = reply.body if reply.body is not None else {}
            self._send(reply.status, payload, reply.headers)

        def do_GET(self) -> None:
            self._send(404, {"error": {"message": "fake server: only POST chat completions"}}, {})

        def _send(self, status: int, payload: Any, headers: Mapping[str, str]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self._send_bytes(status, data, "application/json", headers)

        def _send_bytes(
            self, status: int, data: bytes, content_type: str, headers: Mapping[str, str]
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test); nothing to tell it

    return Handler


def fast_client(server: FakeOpenAI, **kwargs: Any) -> LLMClient:
    """An ``LLMClient`` aimed at ``server`` that never sleeps between retries and gives up
    quickly (5 s timeout, one retry); keyword arguments override."""
    kwargs.setdefault("model", "test-model")
    kwargs.setdefault("sleep", lambda seconds: None)
    kwargs.setdefault("timeout", 5.0)
    kwargs.setdefault("max_retries", 1)
    return LLMClient(base_url=server.base_url, **kwargs)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A running :class:`FakeOpenAI`, stopped after the test. A test module uses it with
    ``server = fake_openai.server`` (pytest finds fixtures among module attributes)."""
    with FakeOpenAI() as fake:
        yield fake
