"""The record model: what a caller hands in, what the store keeps, what a search returns.

A record's text, author, date, tags, source, thread, metadata and embedding never change after
it is written.
Only its state does: ``active`` or ``archived``, and ``superseded_by``. The one exception is
erasure (``Memory.redact``): the content is wiped and the row stays as a tombstone in state
``redacted``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal

from mempp import validate
from mempp.dates import EventDate, parse_event_date
from mempp.errors import InvalidDate, InvalidInput

State = Literal["active", "archived"]
# What a stored row reports: its state, or "redacted" for an erased row's tombstone.
RecordState = Literal["active", "archived", "redacted"]
SkipReason = Literal["duplicate", "empty"]

_TAG_RUNS = re.compile(r"[\s_\-]+")
MAX_METADATA_BYTES = 64 * 1024


def text_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def normalize_tag(label: str) -> str:
    """Tags compare case-insensitively with runs of space, ``_`` and ``-`` collapsed to ``-``."""
    return _TAG_RUNS.sub("-", label.strip().lower()).strip("-")


def event_date(value: object, field: str) -> EventDate | None:
    """An event date (ISO 8601 text, ``date``, ``datetime`` or ``None``), the error naming
    ``field``."""
    try:
        return parse_event_date(value)  # type: ignore[arg-type]
    except InvalidDate as exc:
        raise exc.within(field) from None


@dataclass(frozen=True, slots=True)
class Document:
    """One incoming document, validated. Build it with :meth:`Document.create`."""

    text: str
    author: str | None = None
    date: EventDate | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None
    # The conversation, channel thread, e-mail thread or ticket the document belongs to: rows
    # of one thread, in date order, lend each other context at read time (``thread_weight``).
    thread: str | None = None
    # What the source says beyond those fields (a Slack user id, a mail's addresses, unknown
    # front-matter keys), as JSON object text with sorted keys; kept and exported, not ranked.
    metadata: str | None = None

    @classmethod
    def create(
        cls,
        text: str,
        *,
        author: str | None = None,
        date: str | date | datetime | None = None,
        tags: Iterable[str] | str = (),
        source: str | None = None,
        thread: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Document:
        """Validate one document's fields (see :mod:`mempp.validate`); a single string
        ``tags`` is one tag; ``metadata`` is a JSON-able mapping with string keys."""
        return cls(
            validate.clean_text(text, "text"),
            validate.label(author, "author"),
            event_date(date, "date"),
            validate.tags(tags),
            validate.source(source),
            validate.label(thread, "thread"),
            metadata_json(metadata),
        )

    @property
    def meta(self) -> dict[str, Any] | None:
        """The metadata as a dict (``None`` when there is none)."""
        return None if self.metadata is None else json.loads(self.metadata)

    @classmethod
    def from_fields(cls, item: Mapping[str, Any], *, numbers_as_text: bool = False) -> Document:
        """A document from a mapping with ``text`` and optional ``author``, ``date``, ``tags``,
        ``source``, ``thread``, ``metadata`` (other keys are ignored, so a line of ``mempp
        export`` reads back). ``numbers_as_text`` is for file formats: ``thread: 42`` is the
        thread "42"."""
        if "text" not in item:
            raise InvalidInput("a document needs a 'text' field", field="text")
        return cls(
            validate.clean_text(item["text"], "text"),
            validate.label(item.get("author"), "author", numbers_as_text=numbers_as_text),
            event_date(item.get("date"), "date"),
            validate.tags(item.get("tags")),
            validate.source(item.get("source"), numbers_as_text=numbers_as_text),
            validate.label(item.get("thread"), "thread", numbers_as_text=numbers_as_text),
            metadata_json(item.get("metadata")),
        )

    @property
    def is_empty(self) -> bool:
        return not self.text.strip()

    def tag_labels(self) -> set[str]:
        """Labels for the tag index: the normalised author and every normalised tag."""
        labels = {normalize_tag(t) for t in self.tags}
        if self.author:
            labels.add(normalize_tag(self.author))
        labels.discard("")
        return labels


def metadata_json(value: object, field: str = "metadata") -> str | None:
    """Metadata as canonical JSON object text: ``None`` or an empty mapping is none; keys must
    be strings, values JSON (no NaN), the whole at most ``MAX_METADATA_BYTES``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInput(f"must be a mapping, got {type(value).__name__}", field=field)
    if not value:
        return None
    _check_json(value, field, 0)
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidInput(f"is longer than {MAX_METADATA_BYTES} bytes as JSON", field=field)
    return text


def _check_json(value: object, field: str, depth: int) -> None:
    if depth > 32:
        raise InvalidInput("is nested more than 32 levels deep", field=field)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"keys must be strings, got {key!r}", field=field)
            validate.clean_text(key, field)
            _check_json(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{field}[{index}]", depth + 1)
    elif isinstance(value, str):
        validate.clean_text(value, field)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput("must be a finite number", field=field)
    elif validate.is_int(value) and value.bit_length() > 64:  # type: ignore[union-attr]
        raise InvalidInput("is an integer of more than 64 bits", field=field)
    elif value is not None and not isinstance(value, bool | int | float):
        raise InvalidInput(f"must be JSON, got {type(value).__name__}", field=field)


@dataclass(frozen=True, slots=True)
class Record:
    """A stored row."""

    id: int
    text: str
    author: str | None
    date: str | None
    tags: tuple[str, ...]
    source: str | None
    scope: str
    ingested_at: str
    state: RecordState
    superseded_by: int | None
    thread: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def day(self) -> str | None:
        """The event date as ``YYYY-MM-DD`` (``None`` if undated)."""
        return self.date[:10] if self.date else None

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "text": self.text,
            "author": self.author,
            "date": self.day,
            "datetime": self.date,
            "tags": list(self.tags),
            "source": self.source,
            "scope": self.scope,
            "ingested_at": self.ingested_at,
            "state": self.state,
            "superseded_by": self.superseded_by,
            "thread": self.thread,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class AddResult:
    """Outcome of adding one document: the new id, or why nothing was stored. A
    ``"duplicate"`` names the active record it repeats in ``duplicate_of``, so a write that is
    retried after a failure learns the id of every document it sent."""

    id: int | None
    skipped: SkipReason | None = None
    duplicate_of: int | None = None

    @property
    def added(self) -> bool:
        return self.id is not None


@dataclass(frozen=True, slots=True)
class Hit:
    """One row of a search result.

    ``rank`` is the 1-based position in the result. ``leg_ranks`` maps each leg that returned
    the row to its 1-based position in that leg's list (``lex``, ``tag``, ``vec``, and
    ``date`` for the date leg); the fused ``score`` is ``sum(w_leg / (gamma + leg_rank - 1))``,
    plus, under ``thread``, the shares lent by earlier rows of its thread (``leg_ranks
    ["thread"]`` is then the fused position of the row that lent the most). ``reserved``
    marks the recency slots. ``superseded_on`` / ``archived_on``: the day the record's
    supersession (by ``record.superseded_by``) / archive took effect, set only when the
    question could see it (see :mod:`mempp.search.corrections`); a link it could not see is
    not on the hit's record.
    """

    record: Record
    rank: int
    score: float
    leg_ranks: dict[str, int] = field(default_factory=dict)
    reserved: bool = False
    superseded_on: str | None = None
    archived_on: str | None = None

    @property
    def id(self) -> int:
        return self.record.id

    @property
    def legs(self) -> list[str]:
        return list(self.leg_ranks)

    def to_dict(self) -> dict[str, object]:
        out = self.record.to_dict()
        out.update(
            rank=self.rank,
            score=self.score,
            legs=self.legs,
            leg_ranks=dict(self.leg_ranks),
            reserved=self.reserved,
            superseded_on=self.superseded_on,
            archived_on=self.archived_on,
        )
        return out
