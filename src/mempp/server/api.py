"""The HTTP API under ``/v1``: the library's calls, one route each, for the key's scope.

| route | library |
|---|---|
| ``POST /v1/records`` | ``Memory.add`` |
| ``POST /v1/records/batch`` | ``Memory.add_many`` |
| ``GET /v1/records/{id}``, ``GET /v1/records?id=..`` | ``Memory.get`` |
| ``POST /v1/search`` | ``Memory.search`` |
| ``POST /v1/evidence`` | ``Memory.evidence`` |
| ``POST /v1/ask`` | ``Memory.ask`` (503 unless an LLM endpoint is configured) |
| ``GET /v1/info`` | ``mempp info`` |
| ``GET /v1/export`` | ``Memory.records`` as JSON Lines (``mempp export``) |
| ``POST /v1/ingest`` | ``mempp ingest`` of an uploaded JSON Lines body |

Every route acts on the scope of the request's key and nothing else. Routes are plain
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

from mempp.export import record_line
from mempp.memory import Memory
from mempp.packing import PackingOptions
from mempp.server import ingest as upload
from mempp.server.problems import Problem, problem_responses
from mempp.server.schemas import (
    MAX_BATCH,
    AddManyOut,
    AddOut,
    AnswerOut,
    AskIn,
    DocumentIn,
    DocumentsIn,
    EvidenceIn,
    EvidenceOut,
    InfoOut,
    IngestOut,
    RecordOut,
    SearchIn,
    SearchOut,
)
from mempp.server.state import Principal, require, state_of

JSONL = "application/x-ndjson"

router = APIRouter(prefix="/v1", responses=problem_responses(401, 403, 413, 422, 503))

Reader = Annotated[Principal, Depends(require("read"))]
Writer = Annotated[Principal, Depends(require("write"))]


def _memory(request: Request, principal: Principal) -> Memory:
    return state_of(request).memory(principal.scope)


@router.post(
    "/records",
    response_model=AddOut,
    summary="Store one document",
    description="Stores the document whole with its date and author (no LLM is called). "
    "Returns its new id, or why it was skipped: empty text, or the same text by the same "
    "author already active in this scope.",
)
def add_record(document: DocumentIn, request: Request, principal: Writer) -> AddOut:
    fields = document.as_mapping()
    result = _memory(request, principal).add(fields.pop("text"), **fields)
    return AddOut(id=result.id, skipped=result.skipped)


@router.post(
    "/records/batch",
    response_model=AddManyOut,
    summary="Store many documents",
    description=f"Up to {MAX_BATCH} documents, all validated before any is stored, written a "
    "transaction per batch. One result per document, in order.",
)
def add_records(batch: DocumentsIn, request: Request, principal: Writer) -> AddManyOut:
    results = _memory(request, principal).add_many([d.as_mapping() for d in batch.records])
    return AddManyOut(results=[AddOut(id=r.id, skipped=r.skipped) for r in results])


@router.get(
    "/records/{record_id}",
    response_model=RecordOut,
    summary="Get one record by id",
    description="The record whole, in any state. 404 when this scope has no such record.",
    responses=problem_responses(404),
)
def get_record(
    record_id: Annotated[int, Path(ge=1, le=2**63 - 1, description="The record id.")],
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
        list[Annotated[int, Query(ge=1, le=2**63 - 1)]],
        Query(min_length=1, max_length=MAX_BATCH, description="Record ids: ?id=1&id=2."),
    ],
) -> list[RecordOut]:
    memory = _memory(request, principal)
    return [RecordOut(**memory.get(i).to_dict()) for i in dict.fromkeys(id)]


@router.post(
    "/search",
    response_model=SearchOut,
    summary="Ranked records for a query",
    description="The read path: the as-of scope first, then lexical, tag and vector rankings "
    "fused by weighted reciprocal rank fusion, the date leg, thread context and recency "
    "slots. Best first; every hit is dated and attributed and names its record id.",
)
def search(body: SearchIn, request: Request, principal: Reader) -> SearchOut:
    hits = _memory(request, principal).search(
        body.query, as_of=body.as_of, k=body.k, settings=body.preset
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
    )
    return EvidenceOut.model_validate(block.to_dict())


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
        packing=PackingOptions() if body.pack else None,
    )
    return AnswerOut(**answer.to_dict())


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
    memory = _memory(request, principal)
    kind = request.headers.get("content-type", JSONL).split(";")[0].strip().lower()
    if kind not in upload.MEDIA_TYPES:
        raise Problem(
            415,
            f"send JSON Lines as {JSONL} (got {kind})",
            field="Content-Type",
        )
    try:
        return await upload.ingest_stream(request.stream(), memory, run_in_threadpool)
    except ClientDisconnect:  # gone, or cut off by the size limit (already answered 413)
        raise Problem(400, "the upload ended early; the batches before are stored") from None
