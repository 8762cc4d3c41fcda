"""The LLM layer's errors: unavailable, context overflow, unusable reply; all ``MemppError``s."""

from __future__ import annotations

from mempp.errors import MemppError


class LLMError(MemppError):
    """A chat call failed. ``status`` is the HTTP status when the endpoint answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LLMUnavailable(LLMError):
    """No usable endpoint: not configured, unreachable, or still failing after every retry."""


class LLMContextOverflow(LLMError):
    """The request does not fit the model's context or input limit (the server said so). Not
    retried: the same request would overflow again."""


class LLMReplyError(LLMError):
    """The endpoint answered, but the reply cannot be used (no text, malformed or partial JSON,
    missing keys, wrong types). ``reply`` holds the raw text for the record."""

    def __init__(self, message: str, *, reply: str | None = None) -> None:
        super().__init__(message)
        self.reply = reply
