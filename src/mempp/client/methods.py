"""The client's methods, each defined once: its signature, its docstring, the arguments
checked and the ``/v1`` calls it makes, as a plan that ``Client`` runs blocking and
``AsyncClient`` awaits.

A plan is a generator: it yields each :class:`~mempp.client.transport.Call` it needs and is
sent back that call's decoded answer; what it returns is the method's result. It does no
I/O, and neither does :func:`mempp.client.transport.sent`, which adds the retries of each
call, so the two clients differ only in how they send a request and wait, and cannot drift
apart in what they send, retry or return.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mempp import validate
from mempp.client import wire
from mempp.client.transport import Steps
from mempp.client.wire import DateLike, DocumentLike
from mempp.errors import InvalidInput
from mempp.filters import Filters
from mempp.llm.answer import Answer
from mempp.llm.consolidate import UndoReport
from mempp.records import AddResult, Document, Hit, Record
from mempp.search.evidence import Evidence
from mempp.search.packing import PackingOptions
from mempp.settings import Settings
from mempp.timeline import Changes, Correction, HistoryEntry


def method(bound: Callable[..., Any], plan: Callable[..., Any]) -> Any:
    """``bound`` (a client's ``(self, *args, **kwargs)`` that runs ``plan``) dressed as the
    method it is: ``plan``'s name, docstring and signature (with ``self``), and the result
    type the plan returns as its annotation, so that ``help()`` and ``inspect`` show the
    method ``Memory`` has."""
    functools.update_wrapper(bound, plan)
    returns = plan.__annotations__["return"]
    if not (isinstance(returns, str) and returns.startswith("Steps[")):
        raise TypeError(f"{plan.__name__}: a plan is annotated -> Steps[...]")
    bound.__annotations__ = {**plan.__annotations__, "return": returns[len("Steps[") : -1]}
    shape = inspect.signature(plan)
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    bound.__signature__ = shape.replace(  # type: ignore[attr-defined]
        parameters=[this, *shape.parameters.values()],
        return_annotation=bound.__annotations__["return"],
    )
    return bound


# -- write path ----------------------------------------------------------------------------
def add(
    text: str,
    *,
    author: str | None = None,
    date: DateLike = None,
    tags: Iterable[str] | str = (),
    source: str | None = None,
    thread: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Steps[AddResult]:
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
    result: AddResult = yield wire.add(doc)
    return result


def add_many(
    documents: Iterable[DocumentLike],
    *,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> Steps[list[AddResult]]:
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
        results.extend((yield wire.add_batch(batch, start)))
        if progress is not None:
            progress(len(batch))
    return results


# -- read path -----------------------------------------------------------------------------
def get(record_id: int) -> Steps[Record]:
    """The record with this id (any state). Raises ``RecordNotFound``."""
    found: Record = yield wire.get(record_id)
    return found


def search(
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
) -> Steps[list[Hit]]:
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
    hits: list[Hit] = yield wire.search(query, as_of=as_of, k=k, settings=settings, filters=chosen)
    return hits


def evidence(
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
) -> Steps[Evidence]:
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
    block: Evidence = yield wire.evidence(
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
    return block


def ask(
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
) -> Steps[Answer]:
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
    found: Answer = yield wire.ask(
        question, as_of=as_of, k=k, llm=llm, budget=budget, packing=packing, filters=chosen
    )
    return found


# -- time and truth ------------------------------------------------------------------------
def history(
    query: str | None = None,
    *,
    record_id: int | None = None,
    as_of: DateLike = None,
    limit: int = 50,
) -> Steps[list[HistoryEntry]]:
    """The records about one subject, oldest event first (see ``Memory.history``)."""
    entries: list[HistoryEntry] = yield wire.history(
        query, record_id=record_id, as_of=as_of, limit=limit
    )
    return entries


def changes(
    since: DateLike,
    until: DateLike,
    *,
    query: str | None = None,
    known_since: DateLike = None,
    known_until: DateLike = None,
    limit: int = 200,
) -> Steps[Changes]:
    """What changed between two event dates (see ``Memory.changes``)."""
    found: Changes = yield wire.changes(
        since, until, query=query, known_since=known_since, known_until=known_until, limit=limit
    )
    return found


def supersede(old_id: int, *, by: int, reason: str, actor: str | None = None) -> Steps[Correction]:
    """Record that ``by`` supersedes ``old_id`` (role admin; attributed to the key)."""
    validate.record_id(by, "by")
    done: Correction = yield wire.correct("supersede", old_id, reason=reason, actor=actor, by=by)
    return done


def archive(record_id: int, *, reason: str, actor: str | None = None) -> Steps[Correction]:
    """Take a record out of every search (role admin; undoable)."""
    done: Correction = yield wire.correct("archive", record_id, reason=reason, actor=actor)
    return done


def redact(record_id: int, *, reason: str, actor: str | None = None) -> Steps[Correction]:
    """Erase a record's content for good, keeping a tombstone (role admin)."""
    done: Correction = yield wire.correct("redact", record_id, reason=reason, actor=actor)
    return done


def corrections() -> Steps[list[Correction]]:
    """Every manual correction of the scope, oldest first."""
    listed: list[Correction] = yield wire.corrections()
    return listed


def undo(run_id: int) -> Steps[UndoReport]:
    """Undo a correction or a consolidation run (role admin)."""
    report: UndoReport = yield wire.undo(run_id)
    return report
