"""``POST /v1/ingest``: a JSON Lines upload, read as it arrives, stored a batch at a time.

Each line is parsed like a line of a ``.jsonl`` file given to ``mempp ingest``; a line that is
not a document (bad JSON, bad date, not UTF-8, longer than ``MAX_LINE_BYTES``) is reported by
number and reason and the good lines are kept. Batches are written in a worker thread, one
transaction each, while the next lines are read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, TypeVar

from mempp.importers.files import parse_json_line
from mempp.memory import DEFAULT_BATCH, Memory
from mempp.records import Document
from mempp.server.schemas import IngestFailure, IngestOut

T = TypeVar("T")

# Only types a page on another site cannot send without a CORS preflight: no text/plain,
# no application/octet-stream (the guard refuses those on every /v1 write as well).
MEDIA_TYPES = (
    "application/x-ndjson",
    "application/jsonl",
    "application/json-lines",
)
MAX_LINE_BYTES = 1 << 20


class _Upload:
    """The state of one upload: the partial line, the batch, the tallies."""

    def __init__(self) -> None:
        self.pending = bytearray()
        self.number = 0
        self.overlong = False  # inside a line already reported as too long
        self.batch: list[Document] = []
        self.failures: list[IngestFailure] = []
        self.skipped: Counter[str] = Counter()
        self.ids: list[int] = []

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._extend(chunk[start:])
                return
            self._extend(chunk[start:end])
            self._finish_line()
            start = end + 1

    def _extend(self, piece: bytes) -> None:
        if self.overlong:
            return
        self.pending += piece
        if len(self.pending) > MAX_LINE_BYTES:
            self.overlong = True
            self.pending.clear()

    def _finish_line(self) -> None:
        self.number += 1
        raw, overlong = bytes(self.pending), self.overlong
        self.pending.clear()
        self.overlong = False
        if overlong:
            self._fail(f"line longer than {MAX_LINE_BYTES} bytes")
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._fail(f"not UTF-8 text ({exc.reason})")
            return
        if not line.strip():
            return
        item = parse_json_line(f"line {self.number}", line)
        if item.document is None:
            self._fail(item.error or "unreadable")
        else:
            self.batch.append(item.document)

    def finish(self) -> None:
        if self.pending or self.overlong:
            self._finish_line()

    def _fail(self, reason: str) -> None:
        self.failures.append(IngestFailure(line=self.number, reason=reason))

    def take_batch(self) -> list[Document]:
        batch, self.batch = self.batch, []
        return batch

    def record(self, results: list[Any]) -> None:
        for result in results:
            if result.added:
                self.ids.append(result.id)
            else:
                self.skipped[result.skipped] += 1

    def summary(self) -> IngestOut:
        return IngestOut(
            added=len(self.ids),
            skipped=sum(self.skipped.values()),
            skipped_by_reason=dict(self.skipped),
            failed=len(self.failures),
            failures=self.failures,
            ids=self.ids,
        )


async def ingest_stream(
    chunks: AsyncIterable[bytes],
    memory: Memory,
    run: Callable[..., Awaitable[Any]],
    *,
    batch_size: int = DEFAULT_BATCH,
) -> IngestOut:
    """Store the documents of a JSON Lines byte stream; ``run(fn, *args)`` runs a blocking
    write off the event loop (Starlette's ``run_in_threadpool``)."""
    upload = _Upload()

    async def flush() -> None:
        batch = upload.take_batch()
        if batch:
            upload.record(await run(memory.add_many, batch, batch_size=len(batch)))

    async for chunk in chunks:
        upload.feed(chunk)
        if len(upload.batch) >= batch_size:
            await flush()
    upload.finish()
    await flush()
    return upload.summary()
