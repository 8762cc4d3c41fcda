"""The wire format of the HTTP API and the MCP tools: request and response models.

Requests are validated here, once, at the edge: strict JSON types (a string where a number
is due is refused, not converted), no unknown fields, bounded sizes, and dates parsed by
mempp's own parser so the error names the field. Inside, the routes trust the values.
Responses mirror the library's ``to_dict`` shapes one to one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from mempp import validate
from mempp.dates import parse_as_of, parse_event_date
from mempp.errors import InvalidInput, MemppError
from mempp.filters import Filters
from mempp.records import AddResult

if TYPE_CHECKING:
    from mempp.importers.base import ImportReport
from mempp.search.packing import CAP, PASSAGE, THRESHOLD, WHOLE_FIRST, PackingOptions
from mempp.settings import PRESETS

MAX_K = 1000  # tighter than the library's: every hit travels whole in the response
MAX_BUDGET = 2_000_000
MAX_QUERY_CHARS = validate.MAX_QUERY_CHARS
MAX_BATCH = 1000
MAX_TAGS = 100
MAX_LABEL_CHARS = validate.MAX_LABEL_BYTES  # author, thread, tag; the library counts bytes
MAX_REASON_CHARS = 10_000
MAX_ID = validate.MAX_ID

_STRICT = ConfigDict(extra="forbid", strict=True)

# The ISO 8601 forms mempp reads (mempp.dates), for the schema only: mempp's parser judges,
# so that a date matching the form but absent from the calendar (2024-02-30) is refused with
# its own message naming the field.
DATE_FORM = {
    "pattern": r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?$",
    "examples": ["2024-03-01", "2024-03-01T09:30:00Z"],
}

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
        json_schema_extra=DATE_FORM,
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
    metadata: dict[str, Any] | None = Field(
        None,
        description="What the source says beyond these fields (ids, addresses), kept as JSON "
        "with the record and returned with it.",
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
        "of the same author, text and event date."
    )
    duplicate_of: int | None = Field(
        default=None,
        description="For a 'duplicate': the id of the active record it repeats, so a retried "
        "write learns every id.",
    )

    @classmethod
    def of(cls, result: AddResult) -> AddOut:
        return cls(id=result.id, skipped=result.skipped, duplicate_of=result.duplicate_of)


class AddManyOut(BaseModel):
    results: list[AddOut] = Field(description="One result per document, in the order sent.")


def _library_filter(value: Any, info: ValidationInfo) -> Any:
    """One filter field, judged by :meth:`Filters.create` (the library's one check)."""
    if value is not None:
        name = str(info.field_name)
        try:
            Filters.create(**{name: value})
        except InvalidInput as exc:
            raise ValueError(str(exc).removeprefix(f"{name}: ")) from None
    return value


class FiltersIn(BaseModel):
    """The scope of a read: the as-of bound and the filters, all applied before ranking."""

    model_config = _STRICT

    as_of: str | None = Field(None, description=AS_OF_HELP, json_schema_extra=DATE_FORM)
    known_at: str | None = Field(
        None,
        json_schema_extra=DATE_FORM,
        description="Only records the memory had received by this moment (ingest time; a "
        "bare date includes that whole day): 'what did the memory hold on D'. Combines with "
        "as_of.",
    )
    since: str | None = Field(
        None,
        json_schema_extra=DATE_FORM,
        description="Only records dated from this moment on (a bare date starts at its first "
        "moment); undated records drop out. With as_of, an event window; it may not start "
        "after as_of.",
    )
    author: Label | None = Field(None, description="Only records by this author, exactly.")
    tags: list[Label] | None = Field(
        None,
        max_length=MAX_TAGS,
        description="Only records with these tags (normalised as stored; a record's author "
        "counts as one of its tags); see tags_mode.",
    )
    tags_mode: Literal["any", "all"] = Field(
        "any", description="'any': one of the tags suffices; 'all': every one is needed."
    )
    thread: Label | None = Field(None, description="Only records of this thread, exactly.")
    source: Label | None = Field(
        None, description="Only records whose source starts with this (e.g. 'slack:')."
    )

    _as_of = field_validator("as_of")(_check_as_of)
    _filters = field_validator("known_at", "since", "author", "tags", "thread", "source")(
        _library_filter
    )

    @field_validator("since")
    @classmethod
    def _window(cls, value: str | None, info: ValidationInfo) -> str | None:
        as_of = info.data.get("as_of")
        if value is not None and as_of is not None:
            start = Filters.create(since=value).since
            end = parse_as_of(as_of)
            if start is not None and end is not None and start > end:
                raise ValueError("is later than as_of: no record could match")
        return value

    def filter_args(self) -> dict[str, Any]:
        """The filters as ``Memory.search`` keywords."""
        return self.model_dump(
            include={"known_at", "since", "author", "tags", "tags_mode", "thread", "source"}
        )


class SearchIn(FiltersIn):
    query: Query
    k: int | None = Field(None, ge=1, le=MAX_K, description=K_HELP)
    preset: str | None = Field(None, description=PRESET_HELP)

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


class AskIn(FiltersIn):
    question: Query
    k: int = Field(50, ge=1, le=MAX_K, description="Records of evidence to retrieve.")
    budget: int = Field(40_000, ge=1, le=MAX_BUDGET, description="Most characters of evidence.")
    pack: PackIn | bool = Field(
        False,
        description="Long records below the best-ranked as excerpts: true for the default "
        "packing, or its options; false: whole records.",
    )

    def packing(self) -> PackingOptions | None:
        return EvidenceIn.packing(self)  # type: ignore[arg-type]


def _check_reason(value: str) -> str:
    try:
        validate.clean_text(value, "reason")
    except InvalidInput as exc:
        raise ValueError(exc.problem) from None
    if not value.strip():
        raise ValueError("is blank: say why")
    return value


class HistoryIn(BaseModel):
    """The subject: a record id, or the best hit of a query (exactly one of them)."""

    model_config = _STRICT

    query: Query | None = Field(
        None, description="Find the subject by the read path: its best hit anchors the history."
    )
    record_id: int | None = Field(
        None,
        ge=1,
        le=MAX_ID,
        validate_default=True,
        description="The subject's record id (instead of query).",
    )
    as_of: str | None = Field(
        None,
        json_schema_extra=DATE_FORM,
        description="Only records dated up to this moment (the history as it stood then).",
    )
    limit: int = Field(50, ge=1, le=MAX_K, description="Most records in the history.")

    _as_of = field_validator("as_of")(_check_as_of)

    @field_validator("record_id")
    @classmethod
    def _one_subject(cls, value: int | None, info: ValidationInfo) -> int | None:
        if "query" in info.data and (info.data["query"] is None) == (value is None):
            raise ValueError("give either a query or a record_id, not both and not neither")
        return value


class ChangesIn(BaseModel):
    """Two event dates (both days included) and, optionally, two ingest times."""

    model_config = _STRICT

    since: str = Field(json_schema_extra=DATE_FORM, description="First event day of the window.")
    until: str = Field(json_schema_extra=DATE_FORM, description="Last event day of the window.")
    query: Query | None = Field(
        None, description="Rank the records that entered by this query (else oldest first)."
    )
    known_since: str | None = Field(
        None,
        json_schema_extra=DATE_FORM,
        description="Only records ingested from this moment on (give known_until too).",
    )
    known_until: str | None = Field(
        None,
        json_schema_extra=DATE_FORM,
        validate_default=True,
        description="Only records ingested up to this moment (give known_since too).",
    )
    limit: int = Field(200, ge=1, le=MAX_K, description="Most records that entered.")

    @field_validator("since", "known_since")
    @classmethod
    def _start(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Filters.create(since=value)
            except InvalidInput as exc:
                raise ValueError(str(exc).removeprefix("since: ")) from None
        return value

    @field_validator("until", "known_until")
    @classmethod
    def _end(cls, value: str | None, info: ValidationInfo) -> str | None:
        start_name = "since" if info.field_name == "until" else "known_since"
        start = info.data.get(start_name)
        if value is None:
            if start is not None:
                raise ValueError(f"is required with {start_name}")
            return value
        try:
            end = Filters.create(known_at=value).known_at
        except InvalidInput as exc:
            raise ValueError(str(exc).removeprefix("known_at: ")) from None
        if start is not None:
            begin = Filters.create(since=start).since
            if begin is not None and end is not None and begin > end:
                raise ValueError(f"is earlier than {start_name}")
        elif info.field_name == "known_until":
            raise ValueError("needs known_since too")
        return value


class CorrectionIn(BaseModel):
    model_config = _STRICT

    reason: str = Field(
        min_length=1,
        max_length=MAX_REASON_CHARS,
        description="Why: kept in the change log with the calling key and the time.",
    )

    _reason = field_validator("reason")(_check_reason)


class SupersedeIn(CorrectionIn):
    by: int = Field(ge=1, le=MAX_ID, description="The id of the record that supersedes it.")


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
    state: Literal["active", "archived", "redacted"] = Field(
        description="'redacted': an erased record's tombstone (id and dates, no content)."
    )
    superseded_by: int | None
    thread: str | None
    metadata: dict[str, Any] | None = Field(description="What the source said beyond these.")


class HitOut(RecordOut):
    rank: int = Field(description="1-based position in the result.")
    score: float = Field(description="Fused score (weighted reciprocal rank fusion).")
    legs: list[str] = Field(description="The legs that found it: lex, tag, vec, kw, date, thread.")
    leg_ranks: dict[str, int] = Field(description="Its 1-based rank in each leg's list.")
    reserved: bool = Field(description="Placed by a recency slot.")
    superseded_on: str | None = Field(
        default=None,
        description="The day its supersession by 'superseded_by' took effect, when the "
        "question's as_of and known_at can see it (else superseded_by is null).",
    )
    archived_on: str | None = Field(
        default=None, description="The day it was archived, when the question can see it."
    )


class SearchOut(BaseModel):
    hits: list[HitOut]


class EvidenceRowOut(BaseModel):
    id: int
    offset: int = Field(description="Where the entry starts in 'text'.")
    length: int
    truncated: bool
    excerpt: bool
    shown: int | None
    spans: list[tuple[int, int, int]] = Field(
        default_factory=list,
        description="Where the record's text sits in the entry: [offset in the entry, offset "
        "in the record, length] per contiguous piece.",
    )


class EvidenceOut(BaseModel):
    text: str = Field(description="The dated, attributed evidence block.")
    rows: list[EvidenceRowOut]


class AnswerOut(BaseModel):
    answer: str
    citations: list[int] = Field(description="Ids of the records the answer rests on.")
    evidence: list[int] = Field(description="Ids of every record the model was shown.")
    citations_from_text: bool = Field(
        False, description="The reply had no citation list: read from 'record N' mentions."
    )
    dropped_citations: list[int | str] = Field(
        default_factory=list, description="What the model cited but was not shown."
    )
    as_of: str | None = Field(None, description="The as-of bound the answer was asked under.")


class HistoryEntryOut(RecordOut):
    reasons: list[str] = Field(
        description="Why it belongs: subject, thread, superseded, successor, neighbour."
    )
    superseded_by_record: RecordOut | None = Field(description="The record that superseded it.")


class HistoryOut(BaseModel):
    entries: list[HistoryEntryOut] = Field(description="Oldest event first.")


class CorrectionOut(BaseModel):
    run_id: int = Field(description="The change-log run: POST /v1/runs/{run_id}/undo undoes it.")
    operation: Literal["supersede", "archive", "redact"]
    record_ids: list[int] = Field(description="The records whose state it changed.")
    by: int | None = Field(description="For a supersession: the superseding record.")
    reason: str
    actor: str | None = Field(description="Who made it: the API key's id, or 'local'.")
    at: str = Field(description="When it was logged (UTC).")


class CorrectionsOut(BaseModel):
    corrections: list[CorrectionOut] = Field(description="Oldest first, undone ones too.")


class ChangesOut(BaseModel):
    since: str
    until: str
    entered: list[RecordOut] = Field(description="Records dated in the window.")
    superseded: list[RecordOut] = Field(description="Records that those supersede.")
    archived: list[CorrectionOut] = Field(description="Archivals logged in the window.")
    redacted: list[CorrectionOut] = Field(description="Erasures logged in the window.")


class UndoOut(BaseModel):
    run_id: int
    undo_run_id: int = Field(description="The run that logs the undo.")
    restored: int
    archived_merged: int
    restored_ids: list[int]
    archived_merged_ids: list[int]


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


class ImportItemOut(BaseModel):
    location: str = Field(description="`file:item`: the file as named, and the item in it.")
    reason: str


class ImportOut(BaseModel):
    source: str = Field(description="The importer that read the file.")
    dry_run: bool
    read: int = Field(description="Documents read from the file.")
    added: int = Field(description="Records stored (with dry_run: that would be).")
    skipped: int
    skipped_by_reason: dict[str, int]
    failed: int
    failures: list[ImportItemOut] = Field(description="Items not read, with the reason.")
    warnings: list[ImportItemOut] = Field(description="Items read, with something to tell.")
    ids: list[int] = Field(description="Ids of the records added, in reading order.")

    @classmethod
    def of(cls, report: ImportReport) -> ImportOut:
        return cls(
            source=report.source,
            dry_run=report.dry_run,
            read=report.read,
            added=report.added,
            skipped=sum(report.skipped.values()),
            skipped_by_reason=dict(report.skipped),
            failed=report.failed,
            failures=[ImportItemOut(location=f.location, reason=f.reason) for f in report.failures],
            warnings=[ImportItemOut(location=n.location, reason=n.message) for n in report.notices],
            ids=list(report.ids),
        )


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
