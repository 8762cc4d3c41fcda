"""``AsyncClient``: ``Client`` for asyncio code, the same methods awaited.

from mempp import AsyncClient

async with AsyncClient("http://127.0.0.1:8765") as memory:
    await memory.add("We ship on Friday.", author="Ana", date="2024-03-01")
    hits = await memory.search("when do we ship?", as_of="2024-03-31")

Every method of :class:`mempp.Client` is here as a coroutine, built by the same
:mod:`mempp.client.wire` calls, with the same retries; ``records()`` is an async iterator,
and the scope is ``await memory.scope()`` (a property cannot wait for the server).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import IO, Any

import httpx

from mempp import validate
from mempp.client import wire
from mempp.client.problems import ServerUnavailable, error_from
from mempp.client.sync import JSONL, UPLOAD_CHUNK, failure_message
from mempp.client.transport import Call, RetryPolicy, retry_policy, retryable_failure, settings
from mempp.client.wire import DateLike, DocumentLike, Info, IngestReport
from mempp.errors import InvalidInput
from mempp.filters import Filters
from mempp.llm.answer import Answer
from mempp.llm.consolidate import UndoReport
from mempp.records import AddResult, Document, Hit, Record
from mempp.search.evidence import Evidence
from mempp.search.packing import PackingOptions
from mempp.settings import Settings
from mempp.timeline import Changes, Correction, HistoryEntry

Upload = bytes | str | os.PathLike[str] | IO[bytes] | Iterable[bytes] | AsyncIterator[bytes]


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

    # -- write path ---------------------------------------------------------------------
    async def add(
        self,
        text: str,
        *,
        author: str | None = None,
        date: DateLike = None,
        tags: Iterable[str] | str = (),
        source: str | None = None,
        thread: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AddResult:
        """Store one document (see ``Memory.add``); retried safely under its idempotency key."""
        doc = Document.create(
            text,
            author=author,
            date=date,
            tags=tags,
            source=source,
            thread=thread,
            metadata=metadata,
        )
        result: AddResult = await self._run(wire.add(doc))
        return result

    async def add_many(
        self,
        documents: Iterable[DocumentLike],
        *,
        batch_size: int = 64,
        progress: Callable[[int], None] | None = None,
    ) -> list[AddResult]:
        """Store many documents (see ``Memory.add_many``): all are validated here before the
        first request, then sent a batch of ``batch_size`` (at most the server's 1000) a
        request, each one transaction on the server."""
        validate.count(batch_size, "batch_size")
        if progress is not None and not callable(progress):
            raise InvalidInput("must be callable or None", field="progress")
        docs = wire.documents(documents)
        size = min(batch_size, wire.MAX_BATCH)
        results: list[AddResult] = []
        for start in range(0, len(docs), size):
            batch = docs[start : start + size]
            results.extend(await self._run(wire.add_batch(batch, start)))
            if progress is not None:
                progress(len(batch))
        return results

    async def ingest(self, source: Upload) -> IngestReport:
        """Upload JSON Lines (``mempp export``'s format) to ``POST /v1/ingest``: bytes, a
        file path, a binary file, or an iterable of byte chunks, streamed. Every line is
        accounted for in the report. Sent once, never retried (part of it may be stored)."""
        call = Call("POST", "/v1/ingest", wire.ingest_report, repeatable=False)
        return await self._run(call, content=_upload(source), headers={"Content-Type": JSONL})  # type: ignore[no-any-return]

    # -- read path ----------------------------------------------------------------------
    async def get(self, record_id: int) -> Record:
        """The record with this id (any state). Raises ``RecordNotFound``."""
        found: Record = await self._run(wire.get(record_id))
        return found

    async def search(
        self,
        query: str,
        *,
        as_of: DateLike = None,
        k: int | None = None,
        settings: Settings | str | None = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
        filters: Filters | None = None,
    ) -> list[Hit]:
        """Ranked records for ``query`` (see ``Memory.search``)."""
        chosen = wire.filters(
            filters,
            known_at=known_at,
            since=since,
            author=author,
            tags=tags,
            tags_mode=tags_mode,
            thread=thread,
            source=source,
        )
        call = wire.search(query, as_of=as_of, k=k, settings=settings, filters=chosen)
        hits: list[Hit] = await self._run(call)
        return hits

    async def evidence(
        self,
        query: str,
        *,
        as_of: DateLike = None,
        k: int | None = None,
        budget: int | None = None,
        style: str = "headers",
        settings: Settings | str | None = None,
        graph: object = None,
        packing: PackingOptions | None = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
        filters: Filters | None = None,
    ) -> Evidence:
        """The dated, attributed evidence block for ``query`` (see ``Memory.evidence``)."""
        chosen = wire.filters(
            filters,
            known_at=known_at,
            since=since,
            author=author,
            tags=tags,
            tags_mode=tags_mode,
            thread=thread,
            source=source,
        )
        call = wire.evidence(
            query,
            as_of=as_of,
            k=k,
            budget=budget,
            style=style,
            settings=settings,
            graph=graph,
            packing=packing,
            filters=chosen,
        )
        block: Evidence = await self._run(call)
        return block

    async def ask(
        self,
        question: str,
        *,
        as_of: DateLike = None,
        k: int = 50,
        llm: object = None,
        budget: int = 40_000,
        packing: PackingOptions | None = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
        filters: Filters | None = None,
    ) -> Answer:
        """An answer from the evidence by the server's language model (see ``Memory.ask``)."""
        chosen = wire.filters(
            filters,
            known_at=known_at,
            since=since,
            author=author,
            tags=tags,
            tags_mode=tags_mode,
            thread=thread,
            source=source,
        )
        call = wire.ask(
            question, as_of=as_of, k=k, llm=llm, budget=budget, packing=packing, filters=chosen
        )
        found: Answer = await self._run(call)
        return found

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

    async def info(self) -> Info:
        """What the key's scope holds: counts, encoder, schema version, the key's role."""
        found: Info = await self._run(wire.info())
        self._info = found
        return found

    # -- time and truth -----------------------------------------------------------------
    async def history(
        self,
        query: str | None = None,
        *,
        record_id: int | None = None,
        as_of: DateLike = None,
        limit: int = 50,
    ) -> list[HistoryEntry]:
        """The records about one subject, oldest event first (see ``Memory.history``)."""
        call = wire.history(query, record_id=record_id, as_of=as_of, limit=limit)
        entries: list[HistoryEntry] = await self._run(call)
        return entries

    async def changes(
        self,
        since: DateLike,
        until: DateLike,
        *,
        query: str | None = None,
        known_since: DateLike = None,
        known_until: DateLike = None,
        limit: int = 200,
    ) -> Changes:
        """What changed between two event dates (see ``Memory.changes``)."""
        call = wire.changes(
            since, until, query=query, known_since=known_since, known_until=known_until, limit=limit
        )
        found: Changes = await self._run(call)
        return found

    async def supersede(
        self, old_id: int, *, by: int, reason: str, actor: str | None = None
    ) -> Correction:
        """Record that ``by`` supersedes ``old_id`` (role admin; attributed to the key)."""
        validate.record_id(by, "by")
        done: Correction = await self._run(
            wire.correct("supersede", old_id, reason=reason, actor=actor, by=by)
        )
        return done

    async def archive(self, record_id: int, *, reason: str, actor: str | None = None) -> Correction:
        """Take a record out of every search (role admin; undoable)."""
        done: Correction = await self._run(
            wire.correct("archive", record_id, reason=reason, actor=actor)
        )
        return done

    async def redact(self, record_id: int, *, reason: str, actor: str | None = None) -> Correction:
        """Erase a record's content for good, keeping a tombstone (role admin)."""
        done: Correction = await self._run(
            wire.correct("redact", record_id, reason=reason, actor=actor)
        )
        return done

    async def corrections(self) -> list[Correction]:
        """Every manual correction of the scope, oldest first."""
        listed: list[Correction] = await self._run(wire.corrections())
        return listed

    async def undo(self, run_id: int) -> UndoReport:
        """Undo a correction or a consolidation run (role admin)."""
        report: UndoReport = await self._run(wire.undo(run_id))
        return report

    # -- the wire -----------------------------------------------------------------------
    async def _run(self, call: Call, **request: Any) -> Any:
        headers = {**call.headers(), **request.pop("headers", {})}
        attempts = self.retries.attempts if call.repeatable else 1
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=headers,
                    **request,
                )
            except httpx.TransportError as exc:
                if last or not retryable_failure(exc, call):
                    raise ServerUnavailable(
                        failure_message(self.url, call, exc, attempt + 1)
                    ) from exc
                await self._sleep(self.retries.delay(attempt))
                continue
            if not last and response.status_code in self.retries.statuses:
                await self._sleep(self.retries.delay(attempt, response.headers.get("retry-after")))
                continue
            if response.is_success:
                return call.decode(response.json())
            raise error_from(response, call.field_of)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _lines(self, active_only: bool) -> AsyncIterator[bytes]:
        if not isinstance(active_only, bool):
            raise InvalidInput("must be true or false", field="active_only")
        params = {"active_only": "true" if active_only else "false"}
        try:
            async with self._http.stream("GET", "/v1/export", params=params) as response:
                if not response.is_success:
                    await response.aread()
                    raise error_from(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield line.encode()
        except httpx.TransportError as exc:  # a stream cut midway is not resumed: say so
            call = Call("GET", "/v1/export", lambda body: body)
            raise ServerUnavailable(failure_message(self.url, call, exc, 1)) from exc


def _upload(source: Upload) -> Any:
    """The upload body: bytes as they are, a path or a file read a chunk at a time."""
    if isinstance(source, bytes):
        return source
    if isinstance(source, AsyncIterator):
        return source
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        try:
            os.stat(path)
        except OSError as exc:
            raise InvalidInput(f"{path}: {exc.strerror or exc}", field="source") from None
        return _chunks(open(path, "rb"))
    if hasattr(source, "read"):
        return _chunks(source, close=False)  # type: ignore[arg-type]
    if isinstance(source, Iterable):
        return _from_sync(source)
    raise InvalidInput(
        f"must be bytes, a path, a binary file or byte chunks, got {type(source).__name__}",
        field="source",
    )


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
