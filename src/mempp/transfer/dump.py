"""``mempp dump``: a lossless, versioned, streamed snapshot of a store (or of some scopes).

The snapshot is JSON Lines, one object per line, written as the store gives its rows (a page
at a time, from one consistent view: see ``SnapshotStore.snapshot``):

* line 1, the header: ``{"format": "mempp-dump", "version": 1, "encoder": {"name", "dim"}
  or null, "scopes": [...] or null (every scope), "vectors": true/false, "mempp": version,
  "engine": the source engine, "created_at": ..., "indexes": the optional indexes the store
  has enabled (mempp.store.indexes), which a restore builds again, "context_rule": how the
  context index makes its contexts (``mempp.store.context.ContextRule.to_dict``; null
  without it), which a restore makes them by}``;
* then one line per row, ``{"row": "record" | "run" | "group" | "change" | "redaction" |
  "triple" | "extraction" | "key", ...}`` with the fields ``SnapshotStore`` names, kind by
  kind (records first); a record's ``vector`` is its float32 embedding, little-endian, in
  base64 (absent from a dump written without vectors: a restore then encodes the texts
  again, with the same encoder); an API key's ``secret_hash`` is hex (never the secret);
* the last line, ``{"row": "end", "lines": N, "counts": {...}, "scopes": [...]}``.

A redacted record is in the snapshot as its tombstone (id, scope, dates, when, why, by whom):
the erased text is not in the store, so it cannot be in the snapshot.

Every line ends with ``"c"``, the SHA-256 (hex) of the previous line's ``c`` followed by this
line's text without its ``c``: a chain, so an altered line breaks at that
line, a removed one at the next, and a cut file lacks its end line. ``mempp restore``
(mempp.transfer.restore) checks it all before writing anything.

``mempp export`` is something else: the human-readable JSON Lines that ``mempp ingest`` reads
as new documents (new ids, new ingest times, no links, states or log).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

import numpy as np

from mempp.store.base import SNAPSHOT_KINDS, SnapshotStore, Store

FORMAT = "mempp-dump"
VERSION = 1


@dataclass
class DumpReport:
    """What a dump wrote: lines (header and end line included) and rows of each kind."""

    lines: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SNAPSHOT_KINDS, 0))
    scopes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        shown = ", ".join(f"{n} {kind}s" for kind, n in self.counts.items() if n)
        return f"dumped {shown or 'nothing'} ({self.lines} lines, {len(self.scopes)} scopes)"

    def to_dict(self) -> dict[str, object]:
        return {"lines": self.lines, "counts": dict(self.counts), "scopes": list(self.scopes)}


class ChainWriter:
    """Writes objects as chained lines (see the module docstring)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._previous = ""
        self.lines = 0

    def write(self, value: dict[str, Any]) -> None:
        body = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        digest = chain_digest(self._previous, body)
        self._out.write(f'{body[:-1]},"c":"{digest}"}}\n')
        self._previous = digest
        self.lines += 1


def chain_digest(previous: str, body: str) -> str:
    return hashlib.sha256((previous + body).encode("utf-8")).hexdigest()


def encode_row(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A store row as a line's object: vectors in base64, key hashes in hex."""
    line = {"row": kind, **fields}
    if kind == "record":
        vector = line.pop("vector")
        if vector is not None:
            raw = np.asarray(vector, dtype="<f4").tobytes()
            line["vector"] = base64.b64encode(raw).decode("ascii")
    elif kind == "key":
        line["secret_hash"] = bytes(fields["secret_hash"]).hex()
    return line


def _context_rule(store: object) -> dict[str, object] | None:
    """How the contexts are made, when the context index is enabled: a restore makes them by
    the same rule, so the copy searches like the source."""
    from mempp.store.context import ContextStore

    rule = store.context_rule() if isinstance(store, ContextStore) else None
    return None if rule is None else rule.to_dict()


def write_dump(
    store: Store,
    out: TextIO,
    *,
    scopes: Collection[str] | None = None,
    vectors: bool = True,
) -> DumpReport:
    """Write a snapshot of ``scopes`` (None: the whole store) to ``out``."""
    if not isinstance(store, SnapshotStore):
        from mempp.errors import StoreError

        raise StoreError(f"the {type(store).__name__} engine cannot dump a snapshot")
    encoder = store.encoder()
    writer = ChainWriter(out)
    writer.write(
        {
            "format": FORMAT,
            "version": VERSION,
            "mempp": _version(),
            "engine": type(store).__name__,
            "created_at": datetime.now(UTC).isoformat(),
            "encoder": None if encoder is None else {"name": encoder[0], "dim": encoder[1]},
            "scopes": None if scopes is None else sorted(set(scopes)),
            "vectors": vectors,
            "indexes": list(store.indexes()),
            "context_rule": _context_rule(store),
        }
    )
    report = DumpReport()
    seen: set[str] = set()
    with store.snapshot(None if scopes is None else set(scopes), vectors=vectors) as rows:
        for kind, fields in rows:
            writer.write(encode_row(kind, fields))
            report.counts[kind] += 1
            seen.add(fields["scope"])
    report.scopes = sorted(seen)
    writer.write(
        {
            "row": "end",
            "lines": writer.lines + 1,
            "counts": dict(report.counts),
            "scopes": report.scopes,
        }
    )
    report.lines = writer.lines
    return report


def _version() -> str:
    """The installed mempp's version, for the header (read from the package metadata: the
    ``mempp`` package itself imports Memory, which imports this module)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mempp")
    except PackageNotFoundError:
        return "unknown"
