"""Running each kind of system for one question, down to ranked entries and rendered evidence.

* mempp systems go through the library's own read path (``run_legs``, ``fuse_and_select``,
  ``to_hits``: exactly what ``Memory.search`` calls) with the scope passed explicitly, so one
  open store serves every scope (LoCoMo's ten conversations, LongMemEval's one scope per
  question) and the legs can be reused across the ``k`` sweep. A test checks that the
  results equal ``Memory(scope=...).search``.
* RAG-N ranks the chunks of the scope's history by cosine with the question vector.
* Full context is the scope's history in date order (oldest first).

Every system's evidence is rendered the same way (``mempp.search.evidence`` layout: entries joined
by a blank line), so the answer-window metrics compare like with like.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mempp.bench.chunking import Chunk, parts_per_item
from mempp.bench.metrics import WindowEntry
from mempp.dates import parse_event_date
from mempp.records import Hit, Record
from mempp.search.corrections import with_corrections
from mempp.search.evidence import SEPARATOR, EvidenceStyle, render_evidence
from mempp.search.packing import PackingOptions
from mempp.search.retrieval import LegLists, fuse_and_select, run_legs, to_hits
from mempp.settings import Settings
from mempp.store import Store
from mempp.store.indexes import require as require_indexes

UNDATED = np.iinfo(np.int64).max


@dataclass(slots=True)
class Retrieved:
    """One system's result for one question.

    ``ranked[i]`` holds the item ids the i-th entry carries (``None`` for full context, which
    does not rank); ``window`` places every rendered entry; ``parts`` says over how many
    entries an item may be split (chunks); ``evidence`` is the rendered text, uncut.
    """

    ranked: list[frozenset[str]] | None
    window: list[WindowEntry]
    parts: Mapping[str, int] | None
    evidence: str


def clean_question(text: str) -> str:
    """What ``Memory.search`` does to a query before the legs see it."""
    return text.replace("\x00", " ").strip()


def date_key(value: str | None) -> int:
    """Sortable key of an ISO date (undated sorts last and fails every as-of bound)."""
    parsed = parse_event_date(value)
    return UNDATED if parsed is None else parsed.key


class MemppRetriever:
    """The mempp read path over one store, any scope."""

    def __init__(self, store: Store, record_items: Mapping[int, Sequence[str]]) -> None:
        self.store = store
        self.record_items = record_items

    def legs(
        self,
        scope: str,
        question: str,
        vector: np.ndarray | None,
        as_of: int | None,
        settings: Settings,
    ) -> LegLists:
        require_indexes(settings, self.store)  # run_legs leaves the check to its caller
        return run_legs(self.store, scope, clean_question(question), vector, as_of, settings)

    def hits(
        self, scope: str, legs: LegLists, as_of: int | None, settings: Settings, k: int
    ) -> list[Hit]:
        chosen = fuse_and_select(self.store, scope, legs, as_of, settings, k)
        # As Memory.search does (no known_at here): a correction the question can see.
        return with_corrections(self.store, scope, to_hits(self.store, scope, chosen), as_of, None)

    def retrieved(
        self,
        hits: Sequence[Hit],
        style: EvidenceStyle,
        packing: PackingOptions | None = None,
        query: str | None = None,
    ) -> Retrieved:
        return from_hits(hits, self.record_items, style, packing, query)


def from_hits(
    hits: Sequence[Hit],
    record_items: Mapping[int, Sequence[str]],
    style: EvidenceStyle,
    packing: PackingOptions | None = None,
    query: str | None = None,
) -> Retrieved:
    """Ranked entries and window placement of records rendered by ``render_evidence`` (packed
    for ``query`` when ``packing`` is given); each entry records which record text it shows."""
    evidence = render_evidence(hits, style=style, packing=packing, query=query)
    ranked = [frozenset(record_items.get(hit.id, ())) for hit in hits]
    window = [
        WindowEntry(
            row.offset,
            row.length,
            dict.fromkeys(record_items.get(row.id, ()), 0),
            row.spans,
            row.note,
        )
        for row in evidence.rows
    ]
    return Retrieved(ranked, window, None, evidence.text)


class GoldSizes:
    """How many characters each benchmark item has: the length of the record that stores it
    (0 for an item that stored nothing). Looked up in the store on demand and kept."""

    def __init__(self, store: Store, item_record: Mapping[tuple[str, str], int | None]) -> None:
        self.store = store
        self.item_record = item_record
        self._length: dict[tuple[str, int], int] = {}

    def __call__(self, scope: str, items: Sequence[str]) -> dict[str, int]:
        records = {item: self.item_record.get((scope, item)) for item in items}
        missing = {r for r in records.values() if r is not None and (scope, r) not in self._length}
        if missing:
            found = self.store.get(scope, sorted(missing))
            for record_id in missing:
                record = found.get(record_id)
                self._length[(scope, record_id)] = len(record.text) if record else 0
        return {
            item: 0 if record_id is None else self._length[(scope, record_id)]
            for item, record_id in records.items()
        }


class RagIndex:
    """Chunks of each scope's dated history with their vectors, searched by exact cosine."""

    def __init__(
        self,
        chunks: Mapping[str, Sequence[Chunk]],
        vectors: Mapping[str, np.ndarray],
        item_keys: Mapping[tuple[str, str], int],
    ) -> None:
        self.chunks = chunks
        self.vectors = vectors
        self.parts = {scope: parts_per_item(scope_chunks) for scope, scope_chunks in chunks.items()}
        # A chunk is in an as-of scope only when every item it carries is dated up to it.
        self.latest = {
            scope: np.array(
                [max(item_keys[(scope, item)] for item in chunk.items) for chunk in scope_chunks],
                dtype=np.int64,
            )
            for scope, scope_chunks in chunks.items()
        }

    def retrieve(self, scope: str, vector: np.ndarray, as_of: int | None, limit: int) -> Retrieved:
        chunks = self.chunks.get(scope, ())
        if not chunks:
            return Retrieved([], [], {}, "")
        scores = self.vectors[scope] @ vector.astype(np.float32, copy=False)
        eligible = np.ones(len(chunks), dtype=bool)
        if as_of is not None:
            eligible = self.latest[scope] <= as_of
        candidates = np.flatnonzero(eligible)
        # Best cosine first; equal scores go to the earlier chunk.
        order = candidates[np.lexsort((candidates, -scores[candidates]))][:limit]
        picked = [chunks[i] for i in order]
        ranked = [frozenset(chunk.items) for chunk in picked]
        window, pieces, used = [], [], 0
        for position, chunk in enumerate(picked, start=1):
            head = f"{position}. "  # the paper's plain numbering: a chunk has no single date
            sep = SEPARATOR if pieces else ""
            offset = used + len(sep)
            entry = head + chunk.text
            items = {item: len(head) + start for item, start in chunk.items.items()}
            window.append(WindowEntry(offset, len(entry), items))
            pieces.append(sep + entry)
            used = offset + len(entry)
        return Retrieved(ranked, window, self.parts[scope], "".join(pieces))


class FullContext:
    """The scope's records in date order (ingest order among equal dates), rendered up to a
    little past the window; later records cannot reach the window anyway."""

    def __init__(self, store: Store, records_of_scope: Mapping[str, Sequence[int]]) -> None:
        self.store = store
        self.records_of_scope = records_of_scope
        self._scope: str | None = None
        self._ordered: list[tuple[int, Record]] = []

    def _records(self, scope: str) -> list[tuple[int, Record]]:
        if scope != self._scope:  # questions come grouped by scope; keep one scope in RAM
            found = self.store.get(scope, list(self.records_of_scope.get(scope, ())))
            keyed = [(date_key(record.date), record) for record in found.values()]
            keyed.sort(key=lambda pair: (pair[0], pair[1].id))
            self._scope, self._ordered = scope, keyed
        return self._ordered

    def retrieve(
        self,
        scope: str,
        as_of: int | None,
        window: int,
        record_items: Mapping[int, Sequence[str]],
        style: EvidenceStyle,
    ) -> Retrieved:
        hits: list[Hit] = []
        size = 0
        for key, record in self._records(scope):
            if as_of is not None and key > as_of:
                break  # sorted by date: nothing later is in scope either
            hits.append(Hit(record, len(hits) + 1, 0.0))
            size += len(record.text) + 80  # the text plus a generous header allowance
            if size > window:
                break
        result = from_hits(hits, record_items, style)
        result.ranked = None
        return result
