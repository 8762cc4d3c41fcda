"""The optional language-model layers, and the one client they all speak through.

``client`` talks to any OpenAI-compatible chat endpoint (``config`` says where and how,
``transports`` carry the HTTP, ``cache`` keeps replies, ``replies`` reads JSON strictly,
``concurrency`` fans calls out); ``answer`` (``Memory.ask``), ``consolidate`` (the offline
operator) and ``graph`` (Mem^g++ triples) sit beside it. Nothing on the write or read path
imports this package: these layers use the store protocol, the search functions and the
vocabulary (records, dates, errors), never ``mempp.memory``. The names below are the layer's
public API, so ``from mempp.llm import LLMClient`` reads as before; they load on first use,
so importing ``mempp.llm.answer`` (as ``Memory`` does, lazily) loads no HTTP client.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ENV_API_KEY": "mempp.llm.config",
    "ENV_BASE_URL": "mempp.llm.config",
    "ENV_CACHE": "mempp.llm.config",
    "ENV_DEADLINE": "mempp.llm.config",
    "ENV_JSON_MODE": "mempp.llm.config",
    "ENV_MODEL": "mempp.llm.config",
    "ENV_TIMEOUT": "mempp.llm.config",
    "INSTALL_HINT": "mempp.llm.transports",
    "LLMCache": "mempp.llm.cache",
    "LLMClient": "mempp.llm.client",
    "LLMConfig": "mempp.llm.config",
    "LLMContextOverflow": "mempp.llm.errors",
    "LLMError": "mempp.llm.errors",
    "LLMReplyError": "mempp.llm.errors",
    "LLMUnavailable": "mempp.llm.errors",
    "LLMUsage": "mempp.llm.config",
    "Message": "mempp.llm.replies",
    "json_schema": "mempp.llm.replies",
    "map_concurrent": "mempp.llm.concurrency",
    "ordered_map": "mempp.llm.concurrency",
    "parse_json_reply": "mempp.llm.replies",
    "placeholder_problem": "mempp.llm.replies",
    "strip_reasoning": "mempp.llm.replies",
}

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_CACHE",
    "ENV_DEADLINE",
    "ENV_JSON_MODE",
    "ENV_MODEL",
    "ENV_TIMEOUT",
    "INSTALL_HINT",
    "LLMCache",
    "LLMClient",
    "LLMConfig",
    "LLMContextOverflow",
    "LLMError",
    "LLMReplyError",
    "LLMUnavailable",
    "LLMUsage",
    "Message",
    "json_schema",
    "map_concurrent",
    "ordered_map",
    "parse_json_reply",
    "placeholder_problem",
    "strip_reasoning",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'mempp.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
