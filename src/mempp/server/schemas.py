"""The wire format of the HTTP API and the MCP tools: request and response models.

Requests are validated here, once, at the edge: strict JSON types (a string where a number
is due is refused, not converted), no unknown fields, bounded sizes, and dates parsed by
mempp's own parser so the error names the field. Inside, the routes trust the values.
Responses mirror the library's ``to_dict`` shapes one to one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mempp.dates import parse_as_of, parse_event_date
from mempp.errors import MemppError
from mempp.packing import CAP, PASSAGE, THRESHOLD, WHOLE_FIRST, PackingOptions
from mempp.settings import PRESETS

MAX_K = 1000
MAX_BUDGET = 2_000_000
MAX_QUERY_CHARS = 10_000
MAX_BATCH = 1000
MAX_TAGS = 100
MAX_LABEL_CHARS = 1000  # author, thread, tag, source

_STRICT = ConfigDict(extra="forbid", strict=True)

AS_OF_HELP = (
    "Only records dated up to this moment are eligible (ISO 8601: YYYY-MM-DD, which includes "
    "that whole day, or a datetime). Pass it whenever the question is about a past moment "
    "('what was the plan in March?'), so later revisions stay out; omit it for 'now'."
)
K_HELP = f"How many records to return, 1 to {MAX_K} (default: the preset's k, 50)."
PRESET_HELP = "Read-path settings preset: " + ", ".join(sorted(PRESETS)) + " (default: default)."

Query = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description=f"The question or keywords, 1 to {MAX_QUERY_CHARS} characters.",
    ),
]
Label = Annotated[str, Field(max_length=MAX_LABEL_CHARS)]


def _check_as_of(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_as_of(value)
        except MemppError as exc:
            raise ValueError(str(exc)) from None
    return value


def _check_preset(value: str | None) -> str | None:
    if value is not None and value not in PRESETS:
        raise ValueError(f"unknown preset {value!r} (choose from: {', '.join(sorted(PRESETS))})")
    return value


class DocumentIn(BaseModel):
    """One document to store, whole. Only ``text`` is required."""

    model_config = _STRICT

    text: str = Field(description="The document text, stored exactly as given.")
    author: Label | None = Field(None, description="Who wrote it (a person, a bot, a team).")
    date: str | None = Field(
        None,
        description="When it happened or was written, ISO 8601 (YYYY-MM-DD or a datetime). "
        "The as-of filter of every search reads this date; undated records drop out of "
        "as-of searches.",
    )
    tags: list[Label] = Field(
        default_factory=list, max_length=MAX_TAGS, description="Labels, e.g. a project or topic."
    )
    source: Label | None = Field(None, description="Where it came from (a URI or a path).")
    thread: Label | None = Field(
        None,
        description="The conversation, channel thread, e-mail thread or ticket it belongs to.",
    )

    @field_validator("date")
    @classmethod
    def _date(cls, value: str | None) -> str | None:
        try:
            parse_event_date(value)
        except MemppError as exc:
            raise ValueError(str(exc)) from None
        return value

    def as_mapping(self) -> dict[str, Any]:
        return self.model_dump()


class DocumentsIn(BaseModel):
    model_config = _STRICT

    records: list[DocumentIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"1 to {MAX_BATCH} documents, validated all before any is stored.",
    )


class AddOut(BaseModel):
    id: int | None = Field(description="The new record's id, or null when skipped.")
    skipped: Literal["duplicate", "empty"] | None = Field(
        description="Why nothing was stored: 'empty' text, or a 'duplicate' of an active record "
        "of the same author and text."
    )


class AddManyOut(BaseModel):
    results: list[AddOut] = Field(description="One result per document, in the order sent.")


class SearchIn(BaseModel):
    model_config = _STRICT

    query: Query
    as_of: str | None = Field(None, description=AS_OF_HELP)
    k: int | None = Field(None, ge=1, le=MAX_K, description=K_HELP)
    preset: str | None = Field(None, description=PRESET_HELP)

    _as_of = field_validator("as_of")(_check_as_of)
    _preset = field_validator("preset")(_check_preset)


class PackIn(BaseModel):
    """Show long records below the best-ranked as query-focused excerpts (all in characters)."""

    model_config = _STRICT

    threshold: int = Field(THRESHOLD, ge=1, description="Shown whole up to this.")
    cap: int = Field(CAP, ge=1, description="Characters of a long record shown.")
    passage: int = Field(PASSAGE, ge=1, description="Longest passage.")
    whole_first: int = Field(WHOLE_FIRST, ge=0, description="Best-ranked hits always shown whole.")


class EvidenceIn(SearchIn):
    budget: int | None = Field(
        None, ge=1, le=MAX_BUDGET, description="Most characters of the block (default: no cap)."
    )
    style: Literal["headers", "paper"] = Field(
        "headers",
        description="'headers': each record under '[i] date | author | record N'; 'paper': "
        "the paper's plain '{i}. text'.",
    )
    pack: PackIn | bool = Field(
        False, description="true for the default packing, or its options; false: whole records."
    )

    def packing(self) -> PackingOptions | None:
        if self.pack is False:
            return None
        if self.pack is True:
            return PackingOptions()
        return PackingOptions(**self.pack.model_dump())


class AskIn(BaseModel):
    model_config = _STRICT

    question: Query
    as_of: str | None = Field(None, description=AS_OF_HELP)
    k: int = Field(50, ge=1, le=MAX_K, description="Records of evidence to retrieve.")
    budget: int = Field(40_000, ge=1, le=MAX_BUDGET, description="Most characters of evidence.")
    pack: bool = Field(False, description="Long records below the best-ranked as excerpts.")

    _as_of = field_validator("as_of")(_check_as_of)


class RecordOut(BaseModel):
    id: int = Field(description="The record id: cite it as 'record N'.")
    text: str
    author: str | None
    date: str | None = Field(description="The event day, YYYY-MM-DD (null when undated).")
    datetime: str | None = Field(description="The event date as stored (with time of day).")
    tags: list[str]
    source: str | None
    scope: str
    ingested_at: str = Field(description="When the store received it (UTC).")
    state: Literal["active", "archived"]
    superseded_by: int | None
    thread: str | None


class HitOut(RecordOut):
    rank: int = Field(description="1-based position in the result.")
    score: float = Field(description="Fused score (weighted reciprocal rank fusion).")
    legs: list[str] = Field(description="The legs that found it: lex, tag, vec, date, thread.")
    leg_ranks: dict[str, int] = Field(description="Its 1-based rank in each leg's list.")
    reserved: bool = Field(description="Placed by a recency slot.")


class SearchOut(BaseModel):
    hits: list[HitOut]


class EvidenceRowOut(BaseModel):
    id: int
    offset: int = Field(description="Where the entry starts in 'text'.")
    length: int
    truncated: bool
    excerpt: bool
    shown: int | None


class EvidenceOut(BaseModel):
    text: str = Field(description="The dated, attributed evidence block.")
    rows: list[EvidenceRowOut]


class AnswerOut(BaseModel):
    answer: str
    citations: list[int] = Field(description="Ids of the records the answer rests on.")
    evidence: list[int] = Field(description="Ids of every record the model was shown.")


class EncoderOut(BaseModel):
    name: str
    dim: int


class InfoOut(BaseModel):
    scope: str = Field(description="The scope (tenant) this key reads and writes.")
    records: int
    active: int
    archived: int
    encoder: EncoderOut | None
    schema_version: int = Field(description="The store's newest schema migration.")
    role: Literal["read", "write", "admin"] = Field(description="What this key may do.")


class IngestFailure(BaseModel):
    line: int = Field(description="1-based line number in the upload.")
    reason: str


class IngestOut(BaseModel):
    added: int
    skipped: int
    skipped_by_reason: dict[str, int]
    failed: int
    failures: list[IngestFailure] = Field(description="Lines not stored, with the reason.")
    ids: list[int] = Field(description="Ids of the records added, in upload order.")


class StatusOut(BaseModel):
    status: str


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(description="'about:blank': the status says what kind of problem.")
    title: str
    status: int
    detail: str = Field(description="What went wrong, in one sentence.")
    field: str | None = Field(None, description="The offending input, e.g. 'records.3.date'.")
    errors: list[dict[str, str]] | None = Field(
        None, description="Every invalid field: {field, message}."
    )
