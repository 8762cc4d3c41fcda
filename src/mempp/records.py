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
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Literal

from mempp.dates import EventDate, parse_event_date
from mempp.errors import InvalidInput

State = Literal["active", "archived"]
# What a stored row reports: its state, or "redacted" for an erased row's tombstone.
RecordState = Literal["active", "archived", "redacted"]
SkipReason = Literal["duplicate", "empty"]

_TAG_RUNS = re.compile(r"[\s_\-]+")
# Half of a UTF-16 pair on its own (from a bad decode): no database can store it as text.
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def normalize_tag(label: str) -> str:
    """Tags compare case-insensitively with runs of space, ``_`` and ``-`` collapsed to ``-``."""
    return _TAG_RUNS.sub("-", label.strip().lower()).strip("-")


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
        tags: Iterable[str] = (),
        source: str | None = None,
        thread: str | None = None,
    ) -> Document:
        if not isinstance(text, str):
            raise InvalidInput(f"text must be a string, got {type(text).__name__}")
        if "\x00" in text:
            raise InvalidInput("text contains a NUL character")
        if _SURROGATE.search(text):
            raise InvalidInput("text contains a lone surrogate (not valid Unicode)")
        if author is not None and not isinstance(author, str):
            raise InvalidInput(f"author must be a string, got {type(author).__name__}")
        if source is not None and not isinstance(source, str):
            raise InvalidInput(f"source must be a string, got {type(source).__name__}")
        if thread is not None and not isinstance(thread, str):
            raise InvalidInput(f"thread must be a string, got {type(thread).__name__}")
        for name, value in (("author", author), ("source", source), ("thread", thread)):
            if value is not None and "\x00" in value:
                raise InvalidInput(f"{name} contains a NUL character")
            if value is not None and _SURROGATE.search(value):
                raise InvalidInput(f"{name} contains a lone surrogate (not valid Unicode)")
        if isinstance(tags, str):
            raise InvalidInput("tags must be a list of strings, not one string")
        clean_tags: list[str] = []
        for tag in tags:
            if not isinstance(tag, str):
                raise InvalidInput(f"every tag must be a string, got {type(tag).__name__}")
            if "\x00" in tag:
                raise InvalidInput("a tag contains a NUL character")
            if _SURROGATE.search(tag):
                raise InvalidInput("a tag contains a lone surrogate (not valid Unicode)")
            if tag.strip() and tag.strip() not in clean_tags:
                clean_tags.append(tag.strip())
        author = author.strip() or None if author is not None else None
        thread = thread.strip() or None if thread is not None else None
        return cls(text, author, parse_event_date(date), tuple(clean_tags), source or None, thread)

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
