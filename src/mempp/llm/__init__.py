"""The optional language-model layers, and the one client they all speak through.

``client`` talks to any OpenAI-compatible chat endpoint (``config`` says where and how,
``transports`` carry the HTTP, ``cache`` keeps replies, ``replies`` reads JSON strictly,
``concurrency`` fans calls out); ``answer`` (``Memory.ask``), ``consolidate`` (the offline
operator) and ``graph`` (Mem^g++ triples) sit beside it. Nothing on the write or read path
imports this package: these layers use the store protocol, the search functions and the
vocabulary (records, dates, errors), never ``mempp.memory``. The names below are the layer's
public API, so ``from mempp.llm import LLMClient`` reads as before.
"""

from mempp.llm.cache import LLMCache
from mempp.llm.client import LLMClient
from mempp.llm.concurrency import map_concurrent, ordered_map
from mempp.llm.config import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_CACHE,
    ENV_DEADLINE,
    ENV_JSON_MODE,
    ENV_MODEL,
    ENV_TIMEOUT,
    LLMConfig,
    LLMUsage,
)
from mempp.llm.errors import LLMContextOverflow, LLMError, LLMReplyError, LLMUnavailable
from mempp.llm.replies import (
    Message,
    json_schema,
    parse_json_reply,
    placeholder_problem,
    strip_reasoning,
)
from mempp.llm.transports import INSTALL_HINT

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
