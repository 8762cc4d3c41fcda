"""Reading the pages' query strings and forms: one check per field, errors that name it.

Values arrive as text (an empty field is "not given"); each reader returns the typed value or
raises :class:`~mempp.server.web.access.WebError` (400) naming the field, so a bad date in a
URL is a readable page, never a traceback.
"""

from __future__ import annotations

from mempp.dates import parse_as_of
from mempp.errors import InvalidDate
from mempp.server.web.access import WebError

MAX_K = 200
MAX_BUDGET = 200_000


def text(value: str | None) -> str | None:
    """A free-text field: stripped, ``None`` when empty."""
    if value is None:
        return None
    value = value.strip()
    return value or None


def date_field(name: str, value: str | None) -> str | None:
    """An ISO 8601 date or datetime (checked the way the library checks ``as_of``)."""
    value = text(value)
    if value is None:
        return None
    try:
        parse_as_of(value)
    except InvalidDate as exc:
        raise WebError(400, "Bad date", f"{name}: {exc}") from None
    return value


def int_field(name: str, value: str | None, *, default: int, low: int, high: int) -> int:
    value = text(value)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise WebError(400, "Bad number", f"{name}: {value!r} is not a whole number") from None
    if not low <= number <= high:
        raise WebError(400, "Bad number", f"{name}: must be between {low} and {high}")
    return number


def record_id(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise WebError(
            404, "No such record", f"{value!r} is not a record id (ids are whole numbers)"
        ) from None
    if number < 1:
        raise WebError(404, "No such record", f"there is no record {number}")
    return number


def tag_list(value: str | None) -> list[str]:
    """Comma-separated tags."""
    value = text(value)
    return [] if value is None else [t.strip() for t in value.split(",") if t.strip()]


def choice(name: str, value: str | None, allowed: tuple[str, ...]) -> str:
    """One of ``allowed``; the first when not given."""
    value = text(value)
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise WebError(400, "Cannot read that", f"{name}: choose one of {', '.join(allowed)}")
    return value
