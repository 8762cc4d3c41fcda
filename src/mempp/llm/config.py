"""Where an LLM endpoint is and how to talk to it: ``LLMConfig`` (from arguments or the
``MEMPP_LLM_*`` environment) and the token counts a call reports (``LLMUsage``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mempp.errors import InvalidInput
from mempp.llm.errors import LLMUnavailable

ENV_BASE_URL = "MEMPP_LLM_BASE_URL"
ENV_MODEL = "MEMPP_LLM_MODEL"
ENV_API_KEY = "MEMPP_LLM_API_KEY"
ENV_TIMEOUT = "MEMPP_LLM_TIMEOUT"
ENV_CACHE = "MEMPP_LLM_CACHE"
ENV_JSON_MODE = "MEMPP_LLM_JSON_MODE"
ENV_DEADLINE = "MEMPP_LLM_DEADLINE"
DEFAULT_DEADLINE = 120.0
CHAT_PATH = "/chat/completions"


@dataclass(frozen=True, slots=True)
class LLMConfig:
    """Where and how to call the model. Build from the environment with :meth:`from_env`.

    ``json_mode`` lets JSON calls send ``response_format`` (a ``json_schema``, else
    ``json_object``); turn it off for servers that mishandle that field (the reply is still
    parsed strictly). ``deadline`` caps one call, every attempt and wait included, in seconds.
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never printed
    timeout: float = 60.0
    max_retries: int = 4
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    max_retry_after: float = 120.0
    max_concurrency: int = 4
    json_mode: bool = True
    deadline: float = DEFAULT_DEADLINE
    cache_path: str | os.PathLike[str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LLMConfig:
        """Read ``MEMPP_LLM_*`` variables; keyword overrides win, and ``None`` overrides are
        ignored so a CLI can pass its optional flags straight through."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        if env.get(ENV_BASE_URL):
            values["base_url"] = env[ENV_BASE_URL]
        if env.get(ENV_MODEL):
            values["model"] = env[ENV_MODEL]
        if env.get(ENV_API_KEY):
            values["api_key"] = env[ENV_API_KEY]
        if env.get(ENV_CACHE):
            values["cache_path"] = env[ENV_CACHE]
        if env.get(ENV_TIMEOUT):
            try:
                values["timeout"] = float(env[ENV_TIMEOUT])
            except ValueError:
                raise InvalidInput(f"{ENV_TIMEOUT} must be a number of seconds") from None
        if env.get(ENV_DEADLINE):
            try:
                values["deadline"] = float(env[ENV_DEADLINE])
            except ValueError:
                raise InvalidInput(f"{ENV_DEADLINE} must be a number of seconds") from None
        if env.get(ENV_JSON_MODE):
            values["json_mode"] = env[ENV_JSON_MODE].strip().lower() not in ("0", "false", "no")
        return cls(**values).with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> LLMConfig:
        """A copy with the non-``None`` overrides applied."""
        unknown = set(overrides) - {f.name for f in fields(self)}
        if unknown:
            raise InvalidInput(f"unknown LLMConfig field(s): {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def endpoint(self, path: str = CHAT_PATH) -> str:
        """The URL of an API route, by default chat completions (see the module docstring for
        the joining rule)."""
        if not self.base_url:
            raise LLMUnavailable(
                f"no LLM endpoint configured: set {ENV_BASE_URL} "
                "(e.g. https://api.openai.com/v1 or http://localhost:11434/v1) or pass base_url"
            )
        base = self.base_url.strip().rstrip("/")
        if not re.match(r"^https?://", base):
            raise InvalidInput(f"LLM base URL must start with http:// or https://, got {base!r}")
        base = base.removesuffix(CHAT_PATH)
        return base + path

    def validate(self) -> None:
        self.endpoint()
        if not self.model:
            raise LLMUnavailable(f"no model configured: set {ENV_MODEL} or pass model")
        if self.timeout <= 0:
            raise InvalidInput("timeout must be > 0 seconds")
        if self.deadline <= 0:
            raise InvalidInput(f"deadline must be > 0 seconds ({ENV_DEADLINE})")
        if self.max_retries < 0:
            raise InvalidInput("max_retries must be >= 0")
        if self.max_concurrency < 1:
            raise InvalidInput("max_concurrency must be >= 1")


@dataclass(slots=True)
class LLMUsage:
    """Counters for one client (thread-safe updates happen inside the client)."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
