"""Records as JSON Lines that ``mempp ingest`` reads back: the export format.

One line per record, whole: the fields a document is written with (``text``, ``author``,
``date``, ``tags``, ``source``, ``thread``, ``metadata``; ``date`` keeps its time of day)
and what the store added (``id``, ``scope``, ``ingested_at``, ``state``, ``superseded_by``).
Ingesting the file into another store writes each line as a new active record, with a new id
and a fresh embedding; the store's own fields stay in the file for whoever reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TextIO

from mempp.records import Record


def record_line(record: Record) -> dict[str, object]:
    """The export object of one record (``date`` is the full stored value, not the day)."""
    return {
        "id": record.id,
        "text": record.text,
        "author": record.author,
        "date": record.date,
        "tags": list(record.tags),
        "source": record.source,
        "thread": record.thread,
        "metadata": record.metadata,
        "scope": record.scope,
        "ingested_at": record.ingested_at,
        "state": record.state,
        "superseded_by": record.superseded_by,
    }


def write_jsonl(records: Iterable[Record], out: TextIO) -> int:
    """Write one JSON line per record; returns how many were written."""
    written = 0
    for record in records:
        out.write(json.dumps(record_line(record), ensure_ascii=False))
        out.write("\n")
        written += 1
    return written
