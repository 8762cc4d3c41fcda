"""Filters of a search beyond the as-of bound: what the memory knew by a moment, event dates
from a lower bound, one author, tags, one thread, a source prefix.

Like ``as_of`` they narrow the scope *before* ranking, inside every leg and the reserve, so
all ``k`` slots still go to eligible rows. :meth:`Filters.create` is the one place caller
values are validated; engines receive the frozen result and render it to their SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

from mempp.dates import parse_as_of, parse_event_date
from mempp.errors import InvalidInput
from mempp.records import normalize_tag

TagsMode = Literal["any", "all"]
DateLike = str | date | datetime | None


@dataclass(frozen=True, slots=True)
class Filters:
    """Eligibility conditions a row must meet, all of them (an unset field allows every row).

    * ``known_at``: ingested at or before this key ("what did the memory hold then").
    * ``since``: event date at or after this key; undated rows drop out, as under ``as_of``.
    * ``author``: the record's author, exactly as stored.
    * ``tags``: tag-index labels (normalised like :func:`mempp.records.normalize_tag`; a
      record's author is one of its labels, as in the tag leg); ``tags_mode`` ``"any"`` wants
      one of them, ``"all"`` every one.
    * ``thread``: the record's thread, exactly.
    * ``source``: a prefix of the record's source (``"slack:"``, ``"https://wiki/"``).
    """

    known_at: int | None = None
    since: int | None = None
    author: str | None = None
    tags: tuple[str, ...] = ()
    tags_mode: TagsMode = "any"
    thread: str | None = None
    source: str | None = None

    @classmethod
    def create(
        cls,
        *,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
    ) -> Filters:
        """Validate caller values; errors name the field. A bare ``known_at`` date includes
        that whole day; a bare ``since`` date starts at its first moment."""
        known_key = _bound("known_at", known_at, parse_as_of)
        since_key = _bound("since", since, _start_key)
        if tags_mode not in ("any", "all"):
            raise InvalidInput(f"tags_mode must be 'any' or 'all', got {tags_mode!r}")
        labels: list[str] = []
        if tags is not None:
            if isinstance(tags, str):
                raise InvalidInput("tags must be a list of strings, not one string")
            for tag in tags:
                label = normalize_tag(_text("tags", tag))
                if not label:
                    raise InvalidInput(f"tags: {tag!r} is empty once normalised")
                if label not in labels:
                    labels.append(label)
        return cls(
            known_at=known_key,
            since=since_key,
            author=_optional_text("author", author),
            tags=tuple(labels),
            tags_mode="all" if tags_mode == "all" else "any",
            thread=_optional_text("thread", thread),
            source=_source_prefix(source),
        )

    @property
    def is_empty(self) -> bool:
        return self == NO_FILTERS

    def check_with_as_of(self, as_of: int | None) -> None:
        """Refuse an event window that ends before it starts."""
        if as_of is not None and self.since is not None and self.since > as_of:
            raise InvalidInput("since is later than as_of: no row could match")

    def to_dict(self) -> dict[str, object]:
        return {
            "known_at": self.known_at,
            "since": self.since,
            "author": self.author,
            "tags": list(self.tags),
            "tags_mode": self.tags_mode,
            "thread": self.thread,
            "source": self.source,
        }


NO_FILTERS = Filters()


def _start_key(value: str | date | datetime) -> int | None:
    parsed = parse_event_date(value)
    return None if parsed is None else parsed.key


def _bound(
    name: str, value: DateLike, parse: Callable[[str | date | datetime], int | None]
) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():
        raise InvalidInput(f"{name} is empty")
    try:
        return parse(value)
    except InvalidInput as exc:
        raise InvalidInput(f"{name}: {exc}") from None


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInput(f"{name} contains a NUL character")
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        raise InvalidInput(f"{name} contains a lone surrogate (not valid Unicode)")
    return value


def _optional_text(name: str, value: object) -> str | None:
    if value is None:
        return None
    text = _text(name, value).strip()
    if not text:
        raise InvalidInput(f"{name} is empty")
    return text


def _source_prefix(value: object) -> str | None:
    # Sources are stored as given (not stripped), so the prefix is taken as given too.
    if value is None:
        return None
    text = _text("source", value)
    if not text:
        raise InvalidInput("source is empty")
    return text
