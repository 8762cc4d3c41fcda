"""Exceptions mempp raises on purpose. Anything else escaping the library is a bug."""

from __future__ import annotations


class MemppError(Exception):
    """Base class of every error mempp raises deliberately."""


class InvalidInput(MemppError, ValueError):
    """A caller passed a value mempp cannot accept (bad date, bad setting, bad record).

    ``field`` names the value at fault as a path a caller can act on (``tags``,
    ``items[3].tags[0]``, ``notes.jsonl:12: date``); ``problem`` is what is wrong with it.
    The message is ``"<field>: <problem>"``, or the problem alone when no field applies.
    """

    def __init__(self, problem: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.problem = problem
        self.field = field

    def within(self, prefix: str) -> InvalidInput:
        """The same error one level out: ``tags`` inside item 3 becomes ``items[3].tags``."""
        if not self.field:
            field = prefix
        elif self.field.startswith("["):
            field = prefix + self.field
        else:
            field = f"{prefix}.{self.field}"
        return type(self)(self.problem, field=field)


class InvalidDate(InvalidInput):
    """A date or datetime that is not ISO 8601."""


class StoreError(MemppError):
    """The store could not be opened or used as asked."""


class StoreUnavailable(StoreError):
    """The store's database cannot be reached now; ``retry_after`` says in how many seconds
    asking again is worth it."""

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EncoderMismatch(StoreError):
    """The store was filled by another encoder than the one now given."""


class RecordNotFound(MemppError, KeyError):
    """No record with that id in this scope."""

    def __str__(self) -> str:
        # KeyError would print the message in quotes, as if it were the missing key.
        return str(self.args[0]) if self.args else "record not found"


class Unauthorized(MemppError):
    """The server wants a valid API key (HTTP 401): none was sent, or it is unknown or
    revoked."""


class Forbidden(MemppError):
    """The API key is valid but its role does not allow the call (HTTP 403)."""
