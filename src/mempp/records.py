"""The record model: what a caller hands in, what the store keeps, what a search returns.

A record's text, author, date, tags, source, thread and embedding never change after it is
written.
Only its state does: ``active`` or ``archived``, and ``superseded_by``. The one exception is
erasure (``Memory.redact``): the content is wiped and the row stays as a tombstone in state
``redacted``.
"""

from __future__ import annotations

import hashlib
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
    ) -> Document:
        """Validate one document's fields (see :mod:`mempp.validate`); a single string
        ``tags`` is one tag."""
        return cls(
            validate.clean_text(text, "text"),
            validate.label(author, "author"),
            event_date(date, "date"),
            validate.tags(tags),
            validate.source(source),
            validate.label(thread, "thread"),
        )

    @classmethod
    def from_fields(cls, item: Mapping[str, Any], *, numbers_as_text: bool = False) -> Document:
        """A document from a mapping with ``text`` and optional ``author``, ``date``, ``tags``,
        ``source``, ``thread`` (other keys are ignored, so a line of ``mempp export`` reads
        back). ``numbers_as_text`` is for file formats: ``thread: 42`` is the thread "42"."""
        if "text" not in item:
            raise InvalidInput("a document needs a 'text' field", field="text")
        return cls(
            validate.clean_text(item["text"], "text"),
            validate.label(item.get("author"), "author", numbers_as_text=numbers_as_text),
            event_date(item.get("date"), "date"),
            validate.tags(item.get("tags")),
            validate.source(item.get("source"), numbers_as_text=numbers_as_text),
            validate.label(item.get("thread"), "thread", numbers_as_text=numbers_as_text),
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
        }


@dataclass(frozen=True, slots=True)
class AddResult:
    """Outcome of adding one document: the new id, or why nothing was stored."""

    id: int | None
    skipped: SkipReason | None = None

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
    marks the recency slots.
    """

    record: Record
    rank: int
    score: float
    leg_ranks: dict[str, int] = field(default_factory=dict)
    reserved: bool = False

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
        )
        return out
