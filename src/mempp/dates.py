"""ISO 8601 dates and datetimes: parsing, the sortable key stored with each record, display.

Every event date becomes an integer key, microseconds since 1970-01-01 UTC, so the as-of
scope is one integer comparison in any engine. Naive datetimes are read as UTC. A bare date
used as an as-of bound means the *end* of that day, so "as of 2024-03-01" includes
everything dated that day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from mempp.errors import InvalidDate
from mempp.validate import shown

# What a date argument of the public API accepts: an ISO 8601 string, a date, a datetime, or
# None (no bound).
DateLike = str | date | datetime | None

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# fromisoformat also takes week dates and other rarities; accept the common calendar forms only.
_DATETIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$"
)


@dataclass(frozen=True, slots=True)
class EventDate:
    """A parsed event date: the text shown to people and the integer key used for ranking."""

    text: str
    key: int

    @property
    def day(self) -> str:
        """``YYYY-MM-DD`` of the date as written (before any UTC conversion)."""
        return self.text[:10]


def _to_key(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def key_to_datetime(key: int) -> datetime:
    """Inverse of the stored key, as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=key)


def parse_event_date(value: str | date | datetime | None) -> EventDate | None:
    """Parse a record's event date. ``None`` or an empty string means undated."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return EventDate(value.isoformat(), _to_key(value))
    if isinstance(value, date):
        return EventDate(value.isoformat(), _to_key(datetime.combine(value, time.min)))
    if not isinstance(value, str):
        raise InvalidDate(f"expected an ISO 8601 date, got {type(value).__name__}")
    text = value.strip()
    if not text:
        return None
    if _DATE_ONLY.match(text):
        day = _parse_day(text)
        return EventDate(day.isoformat(), _to_key(datetime.combine(day, time.min)))
    moment = _parse_moment(text)
    return EventDate(moment.isoformat(), _to_key(moment))


def parse_as_of(value: str | date | datetime | None) -> int | None:
    """Parse an as-of bound into an inclusive key. A bare date means the end of that day."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return _to_key(value)
    if isinstance(value, date):
        return _to_key(datetime.combine(value, time.max))
    if not isinstance(value, str):
        raise InvalidDate(f"expected an ISO 8601 date, got {type(value).__name__}")
    text = value.strip()
    if _DATE_ONLY.match(text):
        return _to_key(datetime.combine(_parse_day(text), time.max))
    return _to_key(_parse_moment(text))


def _parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidDate(f"not a valid date: {shown(text)} (expected YYYY-MM-DD)") from None


def _parse_moment(text: str) -> datetime:
    if not _DATETIME.match(text):
        raise InvalidDate(
            f"not an ISO 8601 date or datetime: {shown(text)} "
            "(expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM])"
        )
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidDate(f"not a valid datetime: {shown(text)}") from None


def now_key() -> int:
    """The current moment as a key (used for ingest time)."""
    return _to_key(datetime.now(UTC))
