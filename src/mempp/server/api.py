"""The HTTP API under ``/v1``: the library's calls, one route each, for the key's scope.

| route | library |
|---|---|
| ``POST /v1/records`` | ``Memory.add`` |
| ``POST /v1/records/batch`` | ``Memory.add_many`` |
| ``GET /v1/records/{id}``, ``GET /v1/records?id=..`` | ``Memory.get`` |
| ``POST /v1/search`` | ``Memory.search`` |
| ``POST /v1/evidence`` | ``Memory.evidence`` |
| ``POST /v1/ask`` | ``Memory.ask`` (503 unless an LLM endpoint is configured) |
| ``POST /v1/history`` | ``Memory.history`` |
| ``POST /v1/changes`` | ``Memory.changes`` |
| ``GET /v1/corrections`` | ``Memory.corrections`` |
| ``POST /v1/records/{id}/supersede`` | ``Memory.supersede`` (role admin) |
| ``POST /v1/records/{id}/archive`` | ``Memory.archive`` (role admin) |
| ``POST /v1/records/{id}/redact`` | ``Memory.redact`` (role admin) |
| ``POST /v1/runs/{id}/undo`` | ``Memory.undo`` (role admin) |
| ``GET /v1/info`` | ``mempp info`` |
| ``GET /v1/export`` | ``Memory.records`` as JSON Lines (``mempp export``) |
| ``POST /v1/ingest`` | ``mempp ingest`` of an uploaded JSON Lines body |
| ``POST /v1/import/{source}`` | ``mempp import SOURCE FILE`` of an export sent as the body |

Every route acts on the scope of the request's key and nothing else. A correction is
attributed to the calling key (its id, or ``local`` on a keyless loopback server), never to a
name the body gives. Routes are plain
``def`` functions, so FastAPI runs them in its thread pool, off the event loop; the ingest
upload is read asynchronously and written a batch at a time in that pool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from mempp.llm.consolidate import history as runs_of
from mempp.memory import Memory
from mempp.server import imports
from mempp.server import ingest as upload
from mempp.server.problems import Problem, problem_responses
from mempp.server.schemas import (
    MAX_BATCH,
    MAX_ID,
    AddManyOut,
    AddOut,
    AnswerOut,
    AskIn,
    ChangesIn,
    ChangesOut,
    CorrectionIn,
    CorrectionOut,
    CorrectionsOut,
    DocumentIn,
    DocumentsIn,
    EvidenceIn,
    EvidenceOut,
    HistoryIn,
    HistoryOut,
    ImportOut,
    InfoOut,
    IngestOut,
    RecordOut,
    SearchIn,
    SearchOut,
    SupersedeIn,
    UndoOut,
)
from mempp.server.state import Principal, require, state_of
from mempp.transfer.export import record_line

JSONL = "application/x-ndjson"

router = APIRouter(prefix="/v1", responses=problem_responses(400, 401, 403, 413, 422, 503))

Reader = Annotated[Principal, Depends(require("read"))]
Writer = Annotated[Principal, Depends(require("write"))]
Admin = Annotated[Principal, Depends(require("admin"))]
RecordId = Annotated[int, Path(ge=1, le=MAX_ID, description="The record id.")]


def _memory(request: Request, principal: Principal) -> Memory:
    return state_of(request).memory(principal.scope)


@router.post(
    "/records",
    response_model=AddOut,
    summary="Store one document",
    description="Stores the document whole with its date and author (no LLM is called). "
    "Returns its new id, or why it was skipped: empty text, or the same text by the same "
    "author on the same event date already active in this scope.",
)
def add_record(document: DocumentIn, request: Request, principal: Writer) -> AddOut:
    fields = document.as_mapping()
    result = _memory(request, principal).add(fields.pop("text"), **fields)
    return AddOut.of(result)


@router.post(
    "/records/batch",
    response_model=AddManyOut,
    summary="Store many documents",
    description=f"Up to {MAX_BATCH} documents, all validated before any is stored, written in "
    "one transaction: stored whole or not at all. One result per document, in order; a "
    "duplicate names the record it repeats (duplicate_of).",
)
def add_records(batch: DocumentsIn, request: Request, principal: Writer) -> AddManyOut:
    documents = [d.as_mapping() for d in batch.records]
    # The whole request in one transaction (the COPY path on PostgreSQL from its size on):
    # a batch is stored whole or not at all, whatever its size.
    results = _memory(request, principal).add_many(documents, batch_size=max(1, len(documents)))
    return AddManyOut(results=[AddOut.of(r) for r in results])


@router.get(
    "/records/{record_id}",
    response_model=RecordOut,
    summary="Get one record by id",
    description="The record whole, in any state. 404 when this scope has no such record.",
    responses=problem_responses(404),
)
def get_record(
    record_id: RecordId,
    request: Request,
    principal: Reader,
) -> RecordOut:
    return RecordOut(**_memory(request, principal).get(record_id).to_dict())


@router.get(
    "/records",
    response_model=list[RecordOut],
    summary="Get records by id",
    description="The records whole, in the order asked (repeats once). 404 names the first "
    "id this scope does not have; then nothing is returned.",
    responses=problem_responses(404),
)
def get_records(
    request: Request,
    principal: Reader,
    id: Annotated[
        list[Annotated[int, Query(ge=1, le=MAX_ID)]],
        Query(min_length=1, max_length=MAX_BATCH, description="Record ids: ?id=1&id=2."),
    ],
) -> list[RecordOut]:
    memory = _memory(request, principal)
    return [RecordOut(**memory.get(i).to_dict()) for i in dict.fromkeys(id)]


@router.post(
    "/search",
    response_model=SearchOut,
    summary="Ranked records for a query",
    description="The read path: the as-of scope and the filters (known_at, since, author, "
    "tags, thread, source) first, then lexical, tag and vector rankings "
    "fused by weighted reciprocal rank fusion, the date leg, thread context and recency "
    "slots. Best first; every hit is dated and attributed and names its record id.",
)
def search(body: SearchIn, request: Request, principal: Reader) -> SearchOut:
    hits = _memory(request, principal).search(
        body.query, as_of=body.as_of, k=body.k, settings=body.preset, **body.filter_args()
    )
    return SearchOut.model_validate({"hits": [hit.to_dict() for hit in hits]})


@router.post(
    "/evidence",
    response_model=EvidenceOut,
    summary="The evidence block for a query",
    description="Searches, then renders the hits as a dated, attributed block, each record "
    "under '[i] date | author | record N', within 'budget' characters.",
)
def evidence(body: EvidenceIn, request: Request, principal: Reader) -> EvidenceOut:
    block = _memory(request, principal).evidence(
        body.query,
        as_of=body.as_of,
        k=body.k,
        budget=body.budget,
        style=body.style,
        settings=body.preset,
        packing=body.packing(),
        **body.filter_args(),
    )
    out = block.to_dict()
    out["rows"] = [{**row.to_dict(), "spans": list(row.spans)} for row in block.rows]
    return EvidenceOut.model_validate(out)


@router.post(
    "/ask",
    response_model=AnswerOut,
    summary="Answer a question from the evidence, with a language model",
    description="Searches, renders the evidence and makes one chat call; the answer cites "
    "record ids, checked against the evidence shown. 503 unless the server was started "
    "with an LLM endpoint; 502 when the model fails.",
    responses=problem_responses(502),
)
def ask(body: AskIn, request: Request, principal: Reader) -> AnswerOut:
    llm = state_of(request).llm
    if llm is None:
        raise Problem(
            503,
            "ask needs a language model: start the server with --llm-base-url "
            "or $MEMPP_LLM_BASE_URL",
        )
    answer = _memory(request, principal).ask(
        body.question,
        as_of=body.as_of,
        k=body.k,
        llm=llm,
        budget=body.budget,
        packing=body.packing(),
        **body.filter_args(),
    )
    return AnswerOut(
        **answer.to_dict(), dropped_citations=answer.dropped_citations, as_of=answer.as_of
    )


@router.post(
    "/history",
    response_model=HistoryOut,
    summary="The timeline of one subject",
    description="The records about one subject (a record id, or the best hit of a query), "
    "oldest event first: the subject, its thread, the records it supersedes or that "
    "supersede it (any state, tombstones included), and the records the legs rank close to "
    "it. Each with its date, author, state and what superseded it. 404 for an id this scope "
    "does not have.",
    responses=problem_responses(404),
)
def history(body: HistoryIn, request: Request, principal: Reader) -> HistoryOut:
    entries = _memory(request, principal).history(
        body.query, record_id=body.record_id, as_of=body.as_of, limit=body.limit
    )
    return HistoryOut.model_validate({"entries": [entry.to_dict() for entry in entries]})


@router.post(
    "/changes",
    response_model=ChangesOut,
    summary="What changed between two dates",
    description="The records dated between since and until (and ingested between "
    "known_since and known_until when given), the records they supersede, and the "
    "archivals and erasures logged in the window.",
)
def changes(body: ChangesIn, request: Request, principal: Reader) -> ChangesOut:
    found = _memory(request, principal).changes(
        body.since,
        body.until,
        query=body.query,
        known_since=body.known_since,
        known_until=body.known_until,
        limit=body.limit,
    )
    return ChangesOut.model_validate(found.to_dict())


@router.get(
    "/corrections",
    response_model=CorrectionsOut,
    summary="Every manual correction of this scope",
    description="Supersessions, archivals and erasures, oldest first, each with its run id, "
    "the key that made it, when and why (undone ones too).",
)
def corrections(request: Request, principal: Reader) -> CorrectionsOut:
    listed = _memory(request, principal).corrections()
    return CorrectionsOut.model_validate({"corrections": [c.to_dict() for c in listed]})


CORRECTION_ERRORS = problem_responses(404, 409)


@router.post(
    "/records/{record_id}/supersede",
    response_model=CorrectionOut,
    summary="Record that another record supersedes this one",
    description="Links the record to its successor 'by' in the change log (both stay "
    "searchable; the history shows the link), attributed to the calling key. Role admin. "
    "404 when this scope lacks either id; 422 for a record superseding itself, a redacted "
    "record on either side, a cycle or a link that already holds. Undo with "
    "POST /v1/runs/{run_id}/undo.",
    responses=CORRECTION_ERRORS,
)
def supersede(
    record_id: RecordId, body: SupersedeIn, request: Request, principal: Admin
) -> CorrectionOut:
    if body.by == record_id:
        raise Problem(422, f"record {record_id} cannot supersede itself", field="by")
    done = _memory(request, principal).supersede(
        record_id, by=body.by, reason=body.reason, actor=principal.key_id
    )
    return CorrectionOut.model_validate(done.to_dict())


@router.post(
    "/records/{record_id}/archive",
    response_model=CorrectionOut,
    summary="Take a record out of every search",
    description="The record stays in the store, the history and the export; searches leave "
    "it out. Logged with the calling key; role admin; undoable. 404 for an id this scope "
    "does not have; 422 when it is already archived or redacted.",
    responses=CORRECTION_ERRORS,
)
def archive(
    record_id: RecordId, body: CorrectionIn, request: Request, principal: Admin
) -> CorrectionOut:
    done = _memory(request, principal).archive(
        record_id, reason=body.reason, actor=principal.key_id
    )
    return CorrectionOut.model_validate(done.to_dict())


@router.post(
    "/records/{record_id}/redact",
    response_model=CorrectionOut,
    summary="Erase a record for good (a legal erasure request)",
    description="Its text, vector, full-text and tag entries and everything derived from it "
    "are erased; a tombstone (id, dates, state 'redacted', when, why, which key) remains. "
    "Role admin. Cannot be undone. 404 for an id this scope does not have; 422 when it is "
    "already redacted.",
    responses=CORRECTION_ERRORS,
)
def redact(
    record_id: RecordId, body: CorrectionIn, request: Request, principal: Admin
) -> CorrectionOut:
    done = _memory(request, principal).redact(record_id, reason=body.reason, actor=principal.key_id)
    return CorrectionOut.model_validate(done.to_dict())


@router.post(
    "/runs/{run_id}/undo",
    response_model=UndoOut,
    summary="Undo a correction or a consolidation run",
    description="Restores every state the run changed and archives the merged rows it "
    "wrote, all or nothing, logged as a run of its own. Role admin. 404 for a run this scope "
    "does not have; 422 for an erasure, a dry run, an undo or a run already undone; 409 "
    "when its rows changed again since (undo the later runs first).",
    responses=CORRECTION_ERRORS,
)
def undo(
    run_id: Annotated[int, Path(ge=1, le=MAX_ID, description="The run id.")],
    request: Request,
    principal: Admin,
) -> UndoOut:
    memory = _memory(request, principal)
    if run_id not in {run.id for run in runs_of(memory)}:  # the store's own error is a 422
        raise Problem(404, f"no run {run_id} in scope {memory.scope!r}")
    return UndoOut.model_validate(memory.undo(run_id).to_dict())


@router.get(
    "/info",
    response_model=InfoOut,
    summary="What this scope holds",
    description="Record counts of this key's scope, the encoder and the schema version.",
)
def info(request: Request, principal: Reader) -> InfoOut:
    store = _memory(request, principal).store
    active = store.count(principal.scope)  # first: rows are never deleted
    records = store.count(principal.scope, active_only=False)
    encoder = store.encoder()
    return InfoOut(
        scope=principal.scope,
        records=records,
        active=active,
        archived=records - active,
        encoder=None if encoder is None else {"name": encoder[0], "dim": encoder[1]},
        schema_version=store.schema_version(),
        role=principal.role,
    )


@router.get(
    "/export",
    summary="Every record as JSON Lines",
    description="One JSON object per line, in the order written, streamed: the format "
    "`mempp ingest` and POST /v1/ingest read back.",
    response_class=StreamingResponse,
    responses={200: {"content": {JSONL: {"schema": {"type": "string"}}}}},
)
def export(
    request: Request,
    principal: Reader,
    active_only: Annotated[bool, Query(description="Leave archived records out.")] = False,
) -> StreamingResponse:
    memory = _memory(request, principal)

    def lines() -> Iterator[bytes]:
        for record in memory.records(active_only=active_only):
            yield (json.dumps(record_line(record), ensure_ascii=False) + "\n").encode()

    return StreamingResponse(lines(), media_type=JSONL)


@router.post(
    "/ingest",
    response_model=IngestOut,
    summary="Store documents from an uploaded JSON Lines body",
    description="The body is JSON Lines (one document object per line, as `mempp export` "
    "writes), read as it arrives and stored a batch at a time. A bad line is reported with "
    "its number and reason; the good lines are kept.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {JSONL: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
    responses=problem_responses(415),
)
async def ingest(request: Request, principal: Writer) -> IngestOut:
    memory = await run_in_threadpool(_memory, request, principal)  # may load the encoder
    given = request.headers.get("content-type")
    kind = None if given is None else given.split(";")[0].strip().lower()
    if kind not in upload.MEDIA_TYPES:
        raise Problem(
            415,
            f"send JSON Lines as {JSONL} (got {kind or 'no Content-Type'})",
            field="Content-Type",
        )
    try:
        return await upload.ingest_stream(request.stream(), memory, run_in_threadpool)
    except ClientDisconnect:  # gone, or cut off by the size limit (already answered 413)
        raise Problem(400, "the upload ended early; the batches before are stored") from None


@router.post(
    "/import/{source}",
    response_model=ImportOut,
    summary="Store an export read by one of mempp's importers",
    description="The body is one file of a tool's export, as `mempp import SOURCE FILE` reads "
    "it (a Slack or Notion zip, saved GitHub or GitLab API pages, a Jira XML or CSV, a "
    "Confluence page or space zip, DiscordChatExporter or Trello JSON, a Teams export zip, a "
    "transcript, a Keep Takeout, mail, a document), with `name` its file name (its suffix "
    "matters to several importers). A file that cannot be read at all is refused before "
    "anything is stored; otherwise every item is accounted for: added, skipped by reason, "
    "failed. `dry_run` counts without storing.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
    responses=problem_responses(415),
)
async def import_export(
    request: Request,
    principal: Writer,
    source: Annotated[str, Path(max_length=64, description="The importer: `mempp import`'s.")],
    name: Annotated[str, Query(min_length=1, max_length=255, description="The file's name.")],
    dry_run: Annotated[bool, Query(description="Count, store nothing.")] = False,
) -> ImportOut:
    if request.headers.get("content-type") is None:
        raise Problem(415, "send the file with its media type", field="Content-Type")
    memory = await run_in_threadpool(_memory, request, principal)
    try:
        report = await imports.import_body(
            request.stream(), memory, source, name, dry_run=dry_run, in_thread=run_in_threadpool
        )
    except ClientDisconnect:  # gone, or cut off by the size limit (already answered 413)
        raise Problem(400, "the upload ended early; nothing was stored") from None
    return ImportOut.of(report)
