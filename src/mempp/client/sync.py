"""``Client``: the ``Memory`` API over a mempp server's ``/v1``, one call per method.

from mempp import Client

with Client("http://127.0.0.1:8765", api_key="mempp_...") as memory:
    memory.add("We ship on Friday.", author="Ana", date="2024-03-01")
    for hit in memory.search("when do we ship?", as_of="2024-03-31"):
        print(hit.rank, hit.record.date, hit.record.text)

The methods take ``Memory``'s arguments and return its types, and raise its exceptions (a
422 is ``InvalidInput`` naming the field, a 404 ``RecordNotFound``), plus ``Unauthorized``
(401) and ``Forbidden`` (403). What cannot travel over HTTP (a custom ``Settings``, an
``actor``, an ``llm``, graph options) is refused with an error naming it. The key's scope is
the client's scope. See :mod:`mempp.client.transport` for the retries and timeouts. Each
method is defined once in :mod:`mempp.client.methods`; this module sends its calls.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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

P = ParamSpec("P")
T = TypeVar("T")


def _blocking(plan: Callable[P, Steps[T]]) -> Callable[Concatenate[Client, P], T]:
    def run(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._drive(plan(*args, **kwargs))

    return methods.method(run, plan)  # type: ignore[no-any-return]


class Client:
    """A mempp server's memory, for the scope of ``api_key`` (or ``$MEMPP_API_KEY``).

    ``url`` defaults to ``$MEMPP_URL``, else ``http://127.0.0.1:8765``. ``timeout`` is
    seconds per request (or an ``httpx.Timeout``); ``retries`` a :class:`RetryPolicy` or a
    count of retries. ``transport`` is handed to httpx (tests, proxies, HTTP/2).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        retries: RetryPolicy | int | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        base, sent, limits = settings(url, api_key, timeout, headers)
        self.url = base
        self.retries = retry_policy(retries)
        self._sleep = sleep
        self._http = httpx.Client(base_url=base, headers=sent, timeout=limits, transport=transport)
        self._info: Info | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def scope(self) -> str:
        """The scope the API key reads and writes (asked of the server once)."""
        if self._info is None:
            self._info = self.info()
        return self._info.scope

    def __len__(self) -> int:
        """Active records of the scope, as ``len(memory)``."""
        return self.info().active

    # -- the Memory API (mempp.client.methods) ------------------------------------------
    add = _blocking(methods.add)
    add_many = _blocking(methods.add_many)
    get = _blocking(methods.get)
    search = _blocking(methods.search)
    evidence = _blocking(methods.evidence)
    ask = _blocking(methods.ask)
    history = _blocking(methods.history)
    changes = _blocking(methods.changes)
    supersede = _blocking(methods.supersede)
    archive = _blocking(methods.archive)
    redact = _blocking(methods.redact)
    corrections = _blocking(methods.corrections)
    undo = _blocking(methods.undo)

    def info(self) -> Info:
        """What the key's scope holds: counts, encoder, schema version, the key's role."""
        found: Info = self._drive(one(wire.info()))
        self._info = found
        return found

    # -- the streams --------------------------------------------------------------------
    def ingest(
        self, source: bytes | str | os.PathLike[str] | IO[bytes] | Iterable[bytes]
    ) -> IngestReport:
        """Upload JSON Lines (``mempp export``'s format) to ``POST /v1/ingest``: bytes, a
        file path, a binary file, or an iterable of byte chunks, streamed. Every line is
        accounted for in the report. Sent once, never retried (part of it may be stored)."""
        upload = {"content": _upload(source), "headers": {"Content-Type": JSONL}}
        report: IngestReport = self._drive(one(wire.ingest()), **upload)
        return report

    def records(self, *, active_only: bool = False, page: int = 1000) -> Iterator[Record]:
        """Every record of the scope in the order written, streamed from ``GET /v1/export``
        (``page`` is checked as ``Memory`` checks it; the server pages on its side)."""
        validate.count(page, "page", maximum=validate.MAX_PAGE)
        for line in self._lines(active_only):
            yield wire.export_line(line)

    def export(self, out: IO[bytes], *, active_only: bool = False) -> int:
        """Write the scope's records to ``out`` as JSON Lines, as ``mempp export`` does;
        returns how many."""
        written = 0
        for line in self._lines(active_only):
            out.write(line + b"\n")
            written += 1
        return written

    # -- the wire -----------------------------------------------------------------------
    def _drive(self, plan: Steps[T], **request: Any) -> T:
        headers = request.pop("headers", {})
        steps = sent(plan, self.retries, self.url)
        step = next(steps)
        while True:
            outcome: Outcome = None
            if isinstance(step, Call):
                try:
                    outcome = self._http.request(
                        **step.request(), headers={**step.headers(), **headers}, **request
                    )
                except httpx.TransportError as exc:
                    outcome = exc
            else:
                self._sleep(step)
            try:
                step = steps.send(outcome)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _lines(self, active_only: bool) -> Iterator[bytes]:
        params = wire.export_params(active_only)
        try:
            with self._http.stream("GET", EXPORT.path, params=params) as response:
                if not response.is_success:
                    response.read()
                    raise error_from(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield line.encode()
        except httpx.TransportError as exc:  # a stream cut midway is not resumed: say so
            raise ServerUnavailable(failure_message(self.url, EXPORT, exc, 1)) from exc


def _upload(source: bytes | str | os.PathLike[str] | IO[bytes] | Iterable[bytes]) -> Any:
    return wire.upload_body(source, chunks=_chunks, pieces=lambda given: given)


def _chunks(source: str | IO[bytes]) -> Iterator[bytes]:
    """A path's or a binary file's bytes, a chunk at a time (a path is opened when the
    upload starts, and closed when it ends)."""
    if isinstance(source, str):
        with open(source, "rb") as handle:
            yield from _chunks(handle)
        return
    while piece := source.read(UPLOAD_CHUNK):
        yield piece
