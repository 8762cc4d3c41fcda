"""``Idempotency-Key`` on the API's writes: a retried write is answered, never done twice.

A client that sends a write, loses the answer (a timeout, a dropped connection) and sends it
again with the same ``Idempotency-Key`` header gets the first answer replayed (with the
header ``Idempotent-Replayed: true``) and nothing is stored again. The same key with another
body (or another route) is a 409; a retry arriving while the first is still running waits
for it and is answered the same way. Keys belong to the caller: the same key sent with
another ``Authorization`` header is another key.

It applies to the JSON writes: ``POST /v1/records``, ``/v1/records/batch``,
``/v1/records/{id}/supersede|archive|redact`` and ``/v1/runs/{id}/undo``. The reads (GET,
and the POST reads: search, evidence, history, changes, ask) may be repeated anyway and pass
the header by. A streamed ``/v1/ingest`` upload is not buffered to be fingerprinted, so a key
there is refused with a 422 rather than ignored.

Only successful answers (2xx) are kept: a write that failed stored nothing (write paths are
transactional), so its retry runs again. Kept answers live in this process's memory for
``ttl_s`` (24 h), at most ``max_entries`` of them and ``max_bytes`` of bodies, the oldest
dropped first; a restart forgets them, and with ``mempp serve --workers N`` each worker has
its own. A retry that reaches a server that forgot its key is run again: ``add`` then finds
the record it stored the first time and answers ``skipped: "duplicate"`` with that record's
id in ``duplicate_of`` (same text, author and event date), so the document is stored once.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempp.server.problems import Problem, problem_response

HEADER = b"idempotency-key"
REPLAYED = (b"idempotent-replayed", b"true")
WRITE_ROUTES = re.compile(
    r"^/v1/(records|records/batch|records/\d+/(supersede|archive|redact)|runs/\d+/undo)$"
)
UNBUFFERED = ("/v1/ingest",)
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, as the IETF draft's examples
TTL_S = 24 * 3600.0
MAX_ENTRIES = 10_000
MAX_BYTES = 64 << 20
WAIT_S = 300.0  # how long a retry waits for the first attempt still running


@dataclass
class _Entry:
    fingerprint: bytes
    done: asyncio.Event = field(default_factory=asyncio.Event)
    status: int | None = None  # None while running, or when the first attempt failed
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    at: float = 0.0


class IdempotencyKeys:
    """ASGI middleware replaying a write's first successful answer for a repeated key."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        ttl_s: float = TTL_S,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.app = app
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[bytes, str], _Entry] = OrderedDict()
        self._bytes = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope["headers"] if k == HEADER), None)
        path = scope["path"]
        if raw is None or not (WRITE_ROUTES.match(path) or path in UNBUFFERED):
            await self.app(scope, receive, send)
            return
        key = raw.decode("latin-1")
        if path in UNBUFFERED:
            await _refuse(
                422,
                f"not honoured on {path}: a streamed upload is not replayed; send the upload "
                "without it (ingesting again skips the documents already stored)",
                scope,
                receive,
                send,
            )
            return
        if not _KEY.match(key):
            await _refuse(422, "must be 1 to 255 visible ASCII characters", scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:  # the client left before the body ended: nothing to run or answer
            return
        caller = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        slot = (hashlib.sha256(caller).digest(), key)
        fingerprint = hashlib.sha256(path.encode() + b"\n" + body).digest()
        self._expire()
        while (entry := self._entries.get(slot)) is not None:
            if entry.fingerprint != fingerprint:
                await _refuse(
                    409,
                    "was already used with another request body or route; use a new key for "
                    "a new request",
                    scope,
                    receive,
                    send,
                )
                return
            if entry.status is not None:
                await _replay(entry, send)
                return
            try:  # the first attempt is still running: answer as it does
                await asyncio.wait_for(entry.done.wait(), WAIT_S)
            except TimeoutError:
                await _refuse(409, "its first request is still running", scope, receive, send)
                return
            if self._entries.get(slot) is entry and entry.status is None:
                self._entries.pop(slot, None)  # the first attempt failed: run it ourselves
        entry = _Entry(fingerprint)
        self._entries[slot] = entry
        try:
            await self.app(scope, _replaying(body, receive), self._capture(entry, send))
        finally:
            if entry.status is None:
                self._entries.pop(slot, None)
            else:
                entry.at = time.monotonic()
                self._bytes += len(entry.body)
                self._trim()
            entry.done.set()

    def _capture(self, entry: _Entry, send: Send) -> Send:
        status: list[int] = []
        headers: list[tuple[bytes, bytes]] = []
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                headers.extend(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False) and 200 <= status[0] < 300:
                    entry.headers, entry.body = headers, b"".join(chunks)
                    entry.status = status[0]
            await send(message)

        return capture

    def _expire(self) -> None:
        horizon = time.monotonic() - self.ttl_s
        for slot, entry in list(self._entries.items()):
            if entry.status is None or entry.at >= horizon:
                break
            self._drop(slot)

    def _trim(self) -> None:
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            done = next((s for s, e in self._entries.items() if e.status is not None), None)
            if done is None:
                return
            self._drop(done)

    def _drop(self, slot: tuple[bytes, str]) -> None:
        entry = self._entries.pop(slot)
        self._bytes -= len(entry.body)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (the size limit outside has bounded it), or None when the
    client disconnected before its end."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """The body read already, then the client's own messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _replay(entry: _Entry, send: Send) -> None:
    headers = [(k, v) for k, v in entry.headers if k != REPLAYED[0]] + [REPLAYED]
    await send({"type": "http.response.start", "status": entry.status, "headers": headers})
    await send({"type": "http.response.body", "body": entry.body, "more_body": False})


async def _refuse(status: int, problem: str, scope: Scope, receive: Receive, send: Send) -> None:
    detail = f"Idempotency-Key: {problem}"
    await problem_response(Problem(status, detail, field="Idempotency-Key"))(scope, receive, send)
