"""Exceptions mempp raises on purpose. Anything else escaping the library is a bug."""

from __future__ import annotations


class MemppError(Exception):
    """Base class of every error mempp raises deliberately."""


class InvalidInput(MemppError, ValueError):
    """A caller passed a value mempp cannot accept (bad date, bad setting, bad record)."""


class InvalidDate(InvalidInput):
    """A date or datetime that is not ISO 8601."""


class StoreError(MemppError):
    """The store could not be opened or used as asked."""


class EncoderMismatch(StoreError):
    """The store was filled by another encoder than the one now given."""


class RecordNotFound(MemppError, KeyError):
    """No record with that id in this scope."""

    def __str__(self) -> str:
        # KeyError would print the message in quotes, as if it were the missing key.
        return str(self.args[0]) if self.args else "record not found"
