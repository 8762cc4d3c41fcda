"""mempp: a non-destructive memory for organizational LLM agents.

Every document is stored whole with its date and author; nothing is rewritten or deleted;
no language model runs on the write path. At read time, rows dated up to the question's
as-of date are ranked by lexical, tag and vector legs, fused by weighted reciprocal rank
fusion with recency slots, and rendered as dated, attributed evidence.
"""

from mempp.dates import EventDate
from mempp.encoders import Embedder
from mempp.errors import (
    EncoderMismatch,
    InvalidDate,
    InvalidInput,
    MemppError,
    RecordNotFound,
    StoreError,
)
from mempp.memory import Memory
from mempp.records import AddResult, Document, Hit, Record
from mempp.search.evidence import Evidence, EvidenceRow, render_evidence
from mempp.search.packing import PackingOptions
from mempp.settings import PRESETS, Settings, preset

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AddResult",
    "Document",
    "Embedder",
    "EncoderMismatch",
    "EventDate",
    "Evidence",
    "EvidenceRow",
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
    "__version__",
    "preset",
    "render_evidence",
]
