"""``AsyncClient``: ``Client`` for asyncio code, the same methods awaited.

from mempp import AsyncClient

async with AsyncClient("http://127.0.0.1:8765") as memory:
    await memory.add("We ship on Friday.", author="Ana", date="2024-03-01")
    hits = await memory.search("when do we ship?", as_of="2024-03-31")

Every method of :class:`mempp.Client` is here as a coroutine, the same
:mod:`mempp.client.methods` plan sent the same way, with the same retries; ``records()`` is
an async iterator, and the scope is ``await memory.scope()`` (a property cannot wait for the
server).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import IO, Any, Concatenate, ParamSpec, TypeVar

import httpx

from mempp import validate
from mempp.client import methods, wire
from mempp.client.problems import ServerUnavailable, error_from
from mempp.client.transport import (
    Call,
    Outcome,
    RetryPolicy,
    Steps,
    failure_message,
    one,
    retry_policy,
    sent,
    settings,
)
from mempp.client.wire import EXPORT, JSONL, UPLOAD_CHUNK, Info, IngestReport
from mempp.records import Record

Upload = bytes | str | os.PathLike[str] | IO[bytes] | Iterable[bytes] | AsyncIterator[bytes]
P = ParamSpec("P")
T = TypeVar("T")


def _awaited(
    plan: Callable[P, Steps[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    async def run(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._drive(plan(*args, **kwargs))

    return methods.method(run, plan)  # type: ignore[no-any-return]


class AsyncClient:
    """A mempp server's memory, for the scope of ``api_key`` (or ``$MEMPP_API_KEY``), from
    asyncio code. The arguments are :class:`mempp.Client`'s.

    """

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        retries: RetryPolicy | int | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        base, sent, limits = settings(url, api_key, timeout, headers)
        self.url = base
        self.retries = retry_policy(retries)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=base, headers=sent, timeout=limits, transport=transport
        )
        self._info: Info | None = None

    # -- lifecycle ----------------------------------------------------------------------
    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def scope(self) -> str:
        """The scope the API key reads and writes (asked of the server once)."""
        if self._info is None:
            self._info = await self.info()
        return self._info.scope

    # -- the Memory API (mempp.client.methods) ------------------------------------------
    add = _awaited(methods.add)
    add_many = _awaited(methods.add_many)
    get = _awaited(methods.get)
    search = _awaited(methods.search)
    evidence = _awaited(methods.evidence)
    ask = _awaited(methods.ask)
    history = _awaited(methods.history)
    changes = _awaited(methods.changes)
    supersede = _awaited(methods.supersede)
    archive = _awaited(methods.archive)
    redact = _awaited(methods.redact)
    corrections = _awaited(methods.corrections)
    undo = _awaited(methods.undo)

    async def info(self) -> Info:
        """What the key's scope holds: counts, encoder, schema version, the key's role."""
        found: Info = await self._drive(one(wire.info()))
        self._info = found
        return found

    # -- the streams --------------------------------------------------------------------
    async def ingest(self, source: Upload) -> IngestReport:
        """Upload JSON Lines (``mempp export``'s format) to ``POST /v1/ingest``: bytes, a
        file path, a binary file, or an iterable of byte chunks, streamed. Every line is
        accounted for in the report. Sent once, never retried (part of it may be stored)."""
        upload = {"content": _upload(source), "headers": {"Content-Type": JSONL}}
        report: IngestReport = await self._drive(one(wire.ingest()), **upload)
        return report

    async def records(
        self, *, active_only: bool = False, page: int = 1000
    ) -> AsyncIterator[Record]:
        """Every record of the scope in the order written, streamed from ``GET /v1/export``
        (``page`` is checked as ``Memory`` checks it; the server pages on its side)."""
        validate.count(page, "page", maximum=validate.MAX_PAGE)
        async for line in self._lines(active_only):
            yield wire.export_line(line)

    async def export(self, out: IO[bytes], *, active_only: bool = False) -> int:
        """Write the scope's records to ``out`` as JSON Lines, as ``mempp export`` does;
        returns how many."""
        written = 0
        async for line in self._lines(active_only):
            out.write(line + b"\n")
            written += 1
        return written

    # -- the wire -----------------------------------------------------------------------
    async def _drive(self, plan: Steps[T], **request: Any) -> T:
        headers = request.pop("headers", {})
        steps = sent(plan, self.retries, self.url)
        step = next(steps)
        while True:
            outcome: Outcome = None
            if isinstance(step, Call):
                try:
                    outcome = await self._http.request(
                        **step.request(), headers={**step.headers(), **headers}, **request
                    )
                except httpx.TransportError as exc:
                    outcome = exc
            else:
                await self._sleep(step)
            try:
                step = steps.send(outcome)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _lines(self, active_only: bool) -> AsyncIterator[bytes]:
        params = wire.export_params(active_only)
        try:
            async with self._http.stream("GET", EXPORT.path, params=params) as response:
                if not response.is_success:
                    await response.aread()
                    raise error_from(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield line.encode()
        except httpx.TransportError as exc:  # a stream cut midway is not resumed: say so
            raise ServerUnavailable(failure_message(self.url, EXPORT, exc, 1)) from exc


def _upload(source: Upload) -> Any:
    if isinstance(source, AsyncIterator):
        return source
    return wire.upload_body(source, chunks=_opened, pieces=_from_sync)


def _opened(source: str | IO[bytes]) -> AsyncIterator[bytes]:
    """A path's or a binary file's bytes, a chunk at a time (a path is opened now, and
    closed when the upload ends)."""
    return _chunks(open(source, "rb")) if isinstance(source, str) else _chunks(source, close=False)


async def _chunks(handle: IO[bytes], *, close: bool = True) -> AsyncIterator[bytes]:
    try:
        while piece := handle.read(UPLOAD_CHUNK):
            yield piece
    finally:
        if close:
            handle.close()


async def _from_sync(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in chunks:
        yield piece
