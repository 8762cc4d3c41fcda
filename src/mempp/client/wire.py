"""The ``Memory`` API as ``/v1`` calls: arguments to requests, answers to the library's types.

The sync and the async client share these builders, so the two cannot drift apart. Each
builder checks its arguments with the library's own validators first (the error a caller
gets for a bad date or a bad filter is the one ``Memory`` raises), refuses what the HTTP API
cannot carry (a custom ``Settings``, an ``actor``, a caller's ``llm``) with an error naming
it rather than dropping it, and returns a :class:`~mempp.client.transport.Call` whose
``decode`` builds the same objects ``Memory`` returns: ``Record``, ``Hit``, ``AddResult``,
``Evidence``, ``Answer``, ``HistoryEntry``, ``Changes``, ``Correction``, ``UndoReport``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from mempp import validate
from mempp.client.transport import Call, write_call
from mempp.dates import key_to_datetime, parse_as_of
from mempp.errors import InvalidDate, InvalidInput
from mempp.filters import Filters
from mempp.llm.answer import Answer
from mempp.llm.consolidate import UndoReport
from mempp.records import AddResult, Document, Hit, Record
from mempp.search.evidence import Evidence, EvidenceRow
from mempp.search.packing import PackingOptions
from mempp.settings import PRESETS, Settings, preset
from mempp.timeline import Changes, Correction, HistoryEntry

DateLike = str | date | datetime | None
DocumentLike = Document | Mapping[str, Any] | str
MAX_BATCH = 1000  # the server's largest batch (POST /v1/records/batch)
_ITEM = re.compile(r"^records\.(\d+)(.*)$")


@dataclass(frozen=True, slots=True)
class Info:
    """What the key's scope holds (``GET /v1/info``)."""

    scope: str
    records: int
    active: int
    archived: int
    encoder: tuple[str, int] | None
    schema_version: int
    role: str


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What an ingest upload stored: every line is added, skipped or failed with a reason."""

    added: int
    skipped: int
    skipped_by_reason: dict[str, int]
    failed: int
    failures: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    ids: list[int] = field(default_factory=list)


# -- documents -------------------------------------------------------------------------------
def as_document(item: DocumentLike) -> Document:
    """One incoming item (Document, mapping or string) validated, as ``Memory`` does it."""
    if isinstance(item, Document):
        return item
    if isinstance(item, str):
        return Document.create(item)
    if isinstance(item, Mapping):
        return Document.from_fields(item)
    raise InvalidInput(f"cannot make a document from {type(item).__name__}")


def document_json(doc: Document) -> dict[str, Any]:
    return {
        "text": doc.text,
        "author": doc.author,
        "date": None if doc.date is None else doc.date.text,
        "tags": list(doc.tags),
        "source": doc.source,
        "thread": doc.thread,
        "metadata": doc.meta,
    }


def documents(items: Iterable[DocumentLike]) -> list[Document]:
    """Every item validated before anything is sent; the error names the item."""
    if isinstance(items, str | bytes | Mapping | Document) or not isinstance(items, Iterable):
        raise InvalidInput(
            f"must be an iterable of documents, got {type(items).__name__}", field="documents"
        )
    docs: list[Document] = []
    for position, item in enumerate(items):
        try:
            docs.append(as_document(item))
        except InvalidInput as exc:
            raise exc.within(f"items[{position}]") from None
    return docs


def add(doc: Document) -> Call:
    return write_call("POST", "/v1/records", add_result, json=document_json(doc))


def add_batch(docs: list[Document], first: int) -> Call:
    """One batch of at most ``MAX_BATCH``; ``first`` is its first item's position in the
    caller's list, so an error names ``items[first + i]``."""

    def field_of(name: str) -> str:
        found = _ITEM.match(name)
        return f"items[{first + int(found.group(1))}]{found.group(2)}" if found else name

    return write_call(
        "POST",
        "/v1/records/batch",
        lambda body: [add_result(r) for r in body["results"]],
        json={"records": [document_json(d) for d in docs]},
        field_of=field_of,
    )


# -- reads -----------------------------------------------------------------------------------
def get(record_id: int) -> Call:
    validate.record_id(record_id)
    return Call("GET", f"/v1/records/{record_id}", record, field_of=_rename({"record_id": "id"}))


def search(
    query: str,
    *,
    as_of: DateLike,
    k: int | None,
    settings: Settings | str | None,
    filters: Mapping[str, Any],
) -> Call:
    body = {"query": validate.query(query), "as_of": _as_of(as_of), "k": _k(k)}
    body.update(preset=_preset(settings), **filters)
    return Call("POST", "/v1/search", lambda out: [hit(h) for h in out["hits"]], json=_bare(body))


def evidence(
    query: str,
    *,
    as_of: DateLike,
    k: int | None,
    budget: int | None,
    style: str,
    settings: Settings | str | None,
    graph: object,
    packing: PackingOptions | None,
    filters: Mapping[str, Any],
) -> Call:
    if budget is not None:
        validate.count(budget, "budget")
    if style not in ("headers", "paper"):
        raise InvalidInput(
            f"must be 'headers' or 'paper', got {validate.shown(style)}", field="style"
        )
    if graph is not None:
        raise InvalidInput(
            "the graph's related facts are not offered over HTTP (they need the server's "
            "language model and graph options); use Memory in process",
            field="graph",
        )
    body = {"query": validate.query(query), "as_of": _as_of(as_of), "k": _k(k)}
    body.update(budget=budget, style=style, preset=_preset(settings), pack=_pack(packing))
    body.update(filters)
    return Call("POST", "/v1/evidence", evidence_of, json=_bare(body))


def ask(
    question: str,
    *,
    as_of: DateLike,
    k: int,
    llm: object,
    budget: int,
    packing: PackingOptions | None,
    filters: Mapping[str, Any],
) -> Call:
    validate.query(question, "question")
    validate.count(k, "k", maximum=validate.MAX_K)
    validate.count(budget, "budget")
    if llm is not None:
        raise InvalidInput(
            "the server answers with the model it was started with (--llm-base-url); a "
            "client's LLMClient cannot be sent",
            field="llm",
        )
    body = {"question": question, "as_of": _as_of(as_of), "k": k, "budget": budget}
    body.update(pack=_pack(packing), **filters)
    return Call("POST", "/v1/ask", answer, json=_bare(body))


def history(query: str | None, *, record_id: int | None, as_of: DateLike, limit: int) -> Call:
    if (query is None) == (record_id is None):
        raise InvalidInput("history needs a query or a record_id (one of them)")
    if record_id is not None:
        validate.record_id(record_id, "record_id")
    body = {"query": query, "record_id": record_id, "as_of": _as_of(as_of), "limit": limit}
    return Call(
        "POST",
        "/v1/history",
        lambda out: [history_entry(e) for e in out["entries"]],
        json=_bare(body),
    )


def changes(
    since: DateLike,
    until: DateLike,
    *,
    query: str | None,
    known_since: DateLike,
    known_until: DateLike,
    limit: int,
) -> Call:
    body = {
        "since": _date_text(since, "since"),
        "until": _date_text(until, "until"),
        "query": query,
        "known_since": _date_text(known_since, "known_since"),
        "known_until": _date_text(known_until, "known_until"),
        "limit": limit,
    }
    return Call("POST", "/v1/changes", changes_of, json=_bare(body))


def corrections() -> Call:
    return Call("GET", "/v1/corrections", lambda out: [correction(c) for c in out["corrections"]])


def info() -> Call:
    return Call("GET", "/v1/info", info_of)


# -- corrections -----------------------------------------------------------------------------
def correct(operation: str, record_id: int, *, reason: str, actor: str | None, **more: Any) -> Call:
    """``supersede``, ``archive`` or ``redact`` of one record (the key's role must be admin)."""
    validate.record_id(record_id)
    if actor is not None:
        raise InvalidInput(
            "the server attributes a correction to the calling API key; it cannot be named "
            "over HTTP (leave actor unset)",
            field="actor",
        )
    return write_call(
        "POST",
        f"/v1/records/{record_id}/{operation}",
        correction,
        json={"reason": reason, **more},
        field_of=_rename({"record_id": "id"}),
    )


def undo(run_id: int) -> Call:
    validate.record_id(run_id, "run_id")
    return write_call("POST", f"/v1/runs/{run_id}/undo", undo_report)


# -- the streams ---------------------------------------------------------------------------
# Named in the error when the export stream breaks: a stream cut midway is not resumed.
EXPORT = Call("GET", "/v1/export", lambda body: body)
JSONL = "application/x-ndjson"
UPLOAD_CHUNK = 1 << 16


def export_params(active_only: bool) -> dict[str, str]:
    """The query of ``GET /v1/export`` (``records`` and ``export``)."""
    if not isinstance(active_only, bool):
        raise InvalidInput("must be true or false", field="active_only")
    return {"active_only": "true" if active_only else "false"}


def ingest() -> Call:
    """``POST /v1/ingest``: sent once, never retried (part of the upload may be stored)."""
    return Call("POST", "/v1/ingest", ingest_report, repeatable=False)


def upload_body(
    source: Any, *, chunks: Callable[[Any], Any], pieces: Callable[[Iterable[bytes]], Any]
) -> Any:
    """The body of an ``ingest`` upload: bytes as they are; a path (which must exist) or a
    binary file read a chunk at a time by ``chunks``; any other byte chunks through
    ``pieces``."""
    if isinstance(source, bytes):
        return source
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        try:
            os.stat(path)
        except OSError as exc:
            raise InvalidInput(f"{path}: {exc.strerror or exc}", field="source") from None
        return chunks(path)
    if hasattr(source, "read"):
        return chunks(source)
    if isinstance(source, Iterable):
        return pieces(source)
    raise InvalidInput(
        f"must be bytes, a path, a binary file or byte chunks, got {type(source).__name__}",
        field="source",
    )


# -- answers to library types ----------------------------------------------------------------
def record(d: Mapping[str, Any]) -> Record:
    """A record from the API's record fields (``datetime`` is the stored date)."""
    return Record(
        id=d["id"],
        text=d["text"],
        author=d["author"],
        date=d["datetime"] if "datetime" in d else d["date"],
        tags=tuple(d["tags"]),
        source=d["source"],
        scope=d["scope"],
        ingested_at=d["ingested_at"],
        state=d["state"],
        superseded_by=d["superseded_by"],
        thread=d.get("thread"),
        metadata=d.get("metadata"),
    )


def export_line(line: bytes | str) -> Record:
    """A record from one line of ``GET /v1/export`` (``date`` is the stored value there)."""
    return record(json.loads(line))


def add_result(d: Mapping[str, Any]) -> AddResult:
    return AddResult(d["id"], d["skipped"], d.get("duplicate_of"))


def hit(d: Mapping[str, Any]) -> Hit:
    return Hit(record(d), d["rank"], d["score"], dict(d["leg_ranks"]), d["reserved"])


def evidence_of(d: Mapping[str, Any]) -> Evidence:
    rows = [
        EvidenceRow(
            r["id"],
            r["offset"],
            r["length"],
            r["truncated"],
            r["excerpt"],
            r["shown"],
            tuple(tuple(s) for s in r.get("spans", ())),  # type: ignore[misc]
        )
        for r in d["rows"]
    ]
    return Evidence(d["text"], rows)


def answer(d: Mapping[str, Any]) -> Answer:
    return Answer(
        d["answer"],
        list(d["citations"]),
        list(d["evidence"]),
        list(d.get("dropped_citations", [])),
        d.get("as_of"),
        bool(d.get("citations_from_text", False)),
    )


def history_entry(d: Mapping[str, Any]) -> HistoryEntry:
    successor = d.get("superseded_by_record")
    return HistoryEntry(
        record(d), tuple(d["reasons"]), None if successor is None else record(successor)
    )


def correction(d: Mapping[str, Any]) -> Correction:
    return Correction(
        d["run_id"],
        d["operation"],
        tuple(d["record_ids"]),
        d["reason"],
        d["actor"],
        d["at"],
        d["by"],
    )


def changes_of(d: Mapping[str, Any]) -> Changes:
    return Changes(
        d["since"],
        d["until"],
        [record(r) for r in d["entered"]],
        [record(r) for r in d["superseded"]],
        [correction(c) for c in d["archived"]],
        [correction(c) for c in d["redacted"]],
    )


def undo_report(d: Mapping[str, Any]) -> UndoReport:
    return UndoReport(
        d["run_id"], d["undo_run_id"], list(d["restored_ids"]), list(d["archived_merged_ids"])
    )


def info_of(d: Mapping[str, Any]) -> Info:
    encoder = d.get("encoder")
    return Info(
        d["scope"],
        d["records"],
        d["active"],
        d["archived"],
        None if encoder is None else (encoder["name"], encoder["dim"]),
        d["schema_version"],
        d["role"],
    )


def ingest_report(d: Mapping[str, Any]) -> IngestReport:
    return IngestReport(
        d["added"],
        d["skipped"],
        dict(d["skipped_by_reason"]),
        d["failed"],
        [(f["line"], f["reason"]) for f in d["failures"]],
        list(d["ids"]),
    )


# -- arguments -------------------------------------------------------------------------------
def filters(
    given: Filters | None,
    *,
    known_at: DateLike,
    since: DateLike,
    author: str | None,
    tags: Iterable[str] | None,
    tags_mode: str,
    thread: str | None,
    source: str | None,
) -> dict[str, Any]:
    """The filters as request fields, checked as ``Memory`` checks them: one by one or as a
    prebuilt ``Filters``, not both."""
    built = Filters.create(
        known_at=known_at,
        since=since,
        author=author,
        tags=tags,
        tags_mode=tags_mode,
        thread=thread,
        source=source,
    )
    if given is not None:
        if not isinstance(given, Filters):
            raise InvalidInput(f"filters must be a Filters, got {type(given).__name__}")
        if not built.is_empty:
            raise InvalidInput("pass filters either one by one or as filters=, not both")
        built = given
    out: dict[str, Any] = {
        "known_at": None if built.known_at is None else _key_text(built.known_at),
        "since": None if built.since is None else _key_text(built.since),
        "author": built.author,
        "tags": list(built.tags) or None,
        "tags_mode": built.tags_mode,
        "thread": built.thread,
        "source": built.source,
    }
    return _bare(out)


def _key_text(key: int) -> str:
    return key_to_datetime(key).isoformat()


def _as_of(value: DateLike) -> str | None:
    try:
        parse_as_of(value)  # type: ignore[arg-type]
    except InvalidDate as exc:
        raise exc.within("as_of") from None
    return _date_text(value, "as_of")


def _date_text(value: object, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, date):  # a datetime too
        return value.isoformat()
    raise InvalidInput(f"expected an ISO 8601 date, got {type(value).__name__}", field=name)


def _k(k: int | None) -> int | None:
    return None if k is None else validate.count(k, "k", maximum=validate.MAX_K)


def _preset(settings: Settings | str | None) -> str | None:
    """A preset's name: the HTTP API takes no other settings."""
    if settings is None:
        return None
    if isinstance(settings, str):
        try:
            preset(settings)
        except InvalidInput as exc:
            raise exc.within("settings") from None
        return settings
    if isinstance(settings, Settings):
        for name in PRESETS:
            if preset(name) == settings:
                return name
        raise InvalidInput(
            "the HTTP API takes a preset name (" + ", ".join(sorted(PRESETS)) + "); custom "
            "Settings run only in process",
            field="settings",
        )
    raise InvalidInput(
        f"must be a Settings or a preset name, got {type(settings).__name__}", field="settings"
    )


def _pack(packing: PackingOptions | None) -> dict[str, int] | bool:
    if packing is None:
        return False
    if not isinstance(packing, PackingOptions):
        raise InvalidInput("must be PackingOptions or None", field="packing")
    return {
        "threshold": packing.threshold,
        "cap": packing.cap,
        "passage": packing.passage,
        "whole_first": packing.whole_first,
    }


def _bare(body: dict[str, Any]) -> dict[str, Any]:
    """The request without its unset fields (the server's defaults apply)."""
    return {k: v for k, v in body.items() if v is not None}


def _rename(names: Mapping[str, str]) -> Any:
    return lambda name: names.get(name, name)
