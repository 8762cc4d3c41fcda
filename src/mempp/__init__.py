"""mempp: a non-destructive memory for organizational LLM agents.

Every document is stored whole with its date and author; nothing is rewritten or deleted;
no language model runs on the write path. At read time, rows dated up to the question's
as-of date are ranked by lexical, tag and vector legs, fused by weighted reciprocal rank
fusion with recency slots, and rendered as dated, attributed evidence.
"""

from typing import TYPE_CHECKING, Any

from mempp.dates import EventDate
from mempp.encoders import Embedder
from mempp.errors import (
    EncoderMismatch,
    Forbidden,
    InvalidDate,
    InvalidInput,
    MemppError,
    RecordNotFound,
    StoreError,
    Unauthorized,
)
from mempp.memory import Memory
from mempp.records import AddResult, Document, Hit, Record
from mempp.search.evidence import Evidence, EvidenceRow, render_evidence
from mempp.search.packing import PackingOptions
from mempp.settings import PRESETS, Settings, preset

if TYPE_CHECKING:
    from mempp.client.aio import AsyncClient
    from mempp.client.sync import Client

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The HTTP clients need httpx (the `client` extra): loaded on first use, not with mempp.
    if name == "Client":
        from mempp.client.sync import Client

        return Client
    if name == "AsyncClient":
        from mempp.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'mempp' has no attribute {name!r}")


__all__ = [
    "PRESETS",
    "AddResult",
    "AsyncClient",
    "Client",
    "Document",
    "Embedder",
    "EncoderMismatch",
    "EventDate",
    "Evidence",
    "EvidenceRow",
    "Forbidden",
    "Hit",
    "InvalidDate",
    "InvalidInput",
    "Memory",
    "MemppError",
    "PackingOptions",
    "Record",
    "RecordNotFound",
    "Settings",
    "StoreError",
    "Unauthorized",
    "__version__",
    "preset",
    "render_evidence",
]
