"""The context index's rule and protocol, the same on every engine (opt-in; see
docs/retrieval.md, "The context leg").

A record's context is the record read after the few records before it in its thread, encoded
once as a second vector (a record with none has a row without a vector: its context is
itself, which its own vector already is). Which records those are is a rule over facts that
never change once written, so every engine, the write path and a rebuild pick the same
ones, and the rule alone keeps a record's context inside every scope the record itself is in:

* the same tenant scope and thread, stored before it (a smaller id, ingested no later);
* a dated record takes only dated predecessors dated no later than itself (an undated one
  takes any), so a record visible under an ``as_of`` bound has a context visible under it,
  and one visible under ``known_at`` has one known then;
* not erased (an erased row leaves its thread), and among the ``CONTEXT_WINDOW`` rows
  nearest before it in thread order (event date, an undated row at its ingest time, then
  id); of those that qualify, the ``depth`` nearest count.

The window bounds the work of a write: one walk of the thread index, never the whole
thread, even in a thread of 100,000 rows that arrived in reverse date order. A record that
arrives late is never read into the context of a record stored before it (it is stored
after it), and contexts are fixed when written. A rebuild (switching the index on over a
stored store, a re-encoding) applies the same rule to the rows as they are then: it reads
the same predecessors, except where more than ``CONTEXT_WINDOW - depth`` later arrivals sit
between a record and them in thread order, when it reads fewer of them (never others).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.store.verify import Check

# Rows nearest before a record in thread order among which its predecessors are picked: the
# most a write reads of its thread (ids and dates only; then the texts of those picked).
CONTEXT_WINDOW = 256
# The most predecessors a context may read (its encoder reads 256 word pieces anyway).
MAX_DEPTH = 8
# Predecessors read when the index is enabled without a depth (chosen on the development
# halves; docs/retrieval.md, "The context leg").
DEFAULT_DEPTH = 2


@dataclass(frozen=True, slots=True)
class ContextSource:
    """What a record's context is made of: its predecessors' ids and texts, oldest first,
    and the record's own text."""

    record_id: int
    members: tuple[int, ...]
    member_texts: tuple[str, ...]
    text: str


@runtime_checkable
class ContextStore(Protocol):
    """An engine that keeps the context index (both of mempp's do)."""

    def context_depth(self) -> int | None:
        """The predecessors each context reads, or None while the ``context`` index (an
        optional index, ``mempp.store.indexes``) is not enabled."""
        ...

    def context_encoder(self) -> tuple[str, int] | None:
        """The encoder the stored contexts were encoded with (None: none stored yet)."""
        ...

    def set_context_depth(self, depth: int) -> None:
        """Read ``depth`` predecessors from now on (another depth than before drops the
        contexts stored, to be encoded again)."""
        ...

    def context_pending(self, after: int, limit: int) -> list[int]:
        """Ids above ``after`` (ascending, every scope) of unerased records with no context."""
        ...

    def context_sources(self, ids: Collection[int]) -> list[ContextSource]:
        """The sources of the contexts of ``ids`` by the rule above, in id order."""
        ...

    def store_contexts(
        self, encoder: tuple[str, int], sources: Sequence[ContextSource], vectors: np.ndarray
    ) -> None:
        """Write the contexts of ``sources`` (one transaction; a row erased since is left out)."""
        ...

    def contextual(
        self,
        scope: str,
        vector: np.ndarray,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        """The context leg: in-scope rows ranked by their context vector's cosine, exact."""
        ...

    def context_members(self, ids: Collection[int]) -> dict[int, tuple[int, ...]]:
        """The predecessors each of ``ids``'s contexts read (rows with a context only)."""
        ...

    def context_eligible(
        self, scope: str, ids: Collection[int], as_of: int | None, filters: Filters = NO_FILTERS
    ) -> set[int]:
        """The rows of ``ids`` in the search's scope: those a context hit may credit."""
        ...

    def context_count(self) -> tuple[int, int]:
        """(contexts stored, unerased records): verify's check."""
        ...


def context_store(store: object) -> ContextStore | None:
    """``store`` when its context index is on, else None."""
    if isinstance(store, ContextStore) and store.context_depth() is not None:
        return store
    return None


def check_depth(depth: object) -> int:
    from mempp.errors import InvalidInput

    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_DEPTH:
        raise InvalidInput(
            f"must be an integer from 1 to {MAX_DEPTH}, got {depth!r}", field="depth"
        )
    return depth


def pick_members(
    record: tuple[int, int | None, int],
    window: Sequence[tuple[int, int | None, int]],
    depth: int,
) -> list[int]:
    """The rule's choice among ``window`` (the rows nearest before the record in thread
    order, nearest first: id, event key, ingested key) for ``record`` (id, event key,
    ingested key): the ids of the ``depth`` nearest qualifying ones, oldest first."""
    record_id, event_key, ingested_key = record
    chosen: list[int] = []
    for row_id, row_event, row_ingested in window:
        if row_id >= record_id or row_ingested > ingested_key:
            continue
        if event_key is not None and (row_event is None or row_event > event_key):
            continue
        chosen.append(row_id)
        if len(chosen) == depth:
            break
    return chosen[::-1]


def context_check(
    stored: int, missing: int, context_encoder: object, store_encoder: list[object]
) -> Check:
    """``verify``'s verdict on the context index, from what each engine counts and reads: the
    number of context rows, of unerased records without one, the encoder the contexts were
    written by (``[name, dim]`` as stored, or None) and the store's own."""
    name = "context index"
    if stored and context_encoder != store_encoder:
        return Check(name, False, "the contexts are another encoder's: run `mempp reembed`")
    if missing:
        return Check(
            name,
            False,
            f"{missing} records have no context vector: run `mempp index enable context` "
            "again to encode them",
        )
    return Check(name, True, f"{stored} context vectors, one per record")
