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

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

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
# How a context vector is made from its records (``ContextRule.kind``).
RULE_KINDS = ("text", "sum")
# The text rule: characters of each predecessor read (a long predecessor's first part says
# what it is about, and the record itself must stay inside the encoder's word pieces).
DEFAULT_CHARS = 400
MAX_CHARS = 4000
# The sum rule's weight of the k-th predecessor back is DEFAULT_DECAY ** k.
DEFAULT_DECAY = 0.5


@dataclass(frozen=True, slots=True)
class ContextRule:
    """How each context is made, a setting of the index (``mempp_meta``: ``context_depth``
    and ``context_rule``; a dump carries both and a restore rebuilds the same contexts).

    ``depth`` predecessors are read (picked by ``pick_members``). ``kind`` says what of them:
    ``"text"`` encodes the predecessors' texts, ``chars`` characters of each, oldest first,
    then the record's own text (one more encoding a record); ``"sum"`` encodes nothing: the
    context is the normalised weighted sum of the stored vectors of the record (weight 1)
    and its predecessors (the k-th before it weighs ``decay ** k``), so it is computed in the
    record's own write transaction from vectors already at hand.

    ``ContextRule()`` is the default, chosen on LoCoMo's development half (docs/retrieval.md,
    "The context rule"): the sum rule at depth 2, decay 0.5, within noise of the text rule
    (depth 2, 400 characters; a store that enabled the index before the rule was a setting
    holds that one, ``LEGACY_RULE``) and free at ingest.
    """

    kind: str = "sum"
    depth: int = DEFAULT_DEPTH
    chars: int = DEFAULT_CHARS
    decay: float = DEFAULT_DECAY

    def __post_init__(self) -> None:
        from mempp.errors import InvalidInput

        if self.kind not in RULE_KINDS:
            raise InvalidInput(
                f"must be one of {', '.join(RULE_KINDS)}, got {self.kind!r}", field="kind"
            )
        check_depth(self.depth)
        if not isinstance(self.chars, int) or isinstance(self.chars, bool):
            raise InvalidInput(f"must be an integer, got {self.chars!r}", field="chars")
        if not 1 <= self.chars <= MAX_CHARS:
            raise InvalidInput(f"must be from 1 to {MAX_CHARS}, got {self.chars}", field="chars")
        decay = self.decay
        if isinstance(decay, bool) or not isinstance(decay, int | float) or not 0 < decay <= 1:
            raise InvalidInput(f"must be a number in (0, 1], got {decay!r}", field="decay")
        object.__setattr__(self, "decay", float(decay))
        # The part the kind does not read is not stored (to_meta), so it is the default here:
        # a rule read back from the store then equals the one enabled, and enabling it again
        # makes nothing again.
        if self.kind == "sum":
            object.__setattr__(self, "chars", DEFAULT_CHARS)
        else:
            object.__setattr__(self, "decay", DEFAULT_DECAY)

    def to_meta(self) -> str:
        """The ``context_rule`` meta value (the depth has its own key)."""
        if self.kind == "text":
            return json.dumps({"kind": "text", "chars": self.chars})
        return json.dumps({"kind": "sum", "decay": self.decay})

    @classmethod
    def from_meta(cls, depth: str | None, rule: str | None) -> ContextRule:
        """The rule the meta values name; a store written before the rule was a setting
        holds no ``context_rule``: its contexts are the text rule's at 400 characters."""
        from mempp.errors import InvalidInput

        try:
            depth_read = DEFAULT_DEPTH if depth is None else int(depth)
        except ValueError:
            raise InvalidInput(f"not a depth: {depth!r}", field="context_depth") from None
        if rule is None:
            return cls("text", depth_read, DEFAULT_CHARS)
        try:
            fields = json.loads(rule)
        except ValueError:
            fields = None
        if not isinstance(fields, dict) or set(fields) - {"kind", "chars", "decay"}:
            raise InvalidInput(f"not a context rule: {rule!r}", field="context_rule")
        return cls(depth=depth_read, **fields)

    def to_dict(self) -> dict[str, object]:
        """The rule as a dump's header names it (``from_dict`` reads it back)."""
        return {"depth": self.depth, **json.loads(self.to_meta())}

    @classmethod
    def from_dict(cls, value: object) -> ContextRule:
        from mempp.errors import InvalidInput

        if not isinstance(value, dict) or set(value) - {"kind", "depth", "chars", "decay"}:
            raise InvalidInput(f"not a context rule: {value!r}", field="context_rule")
        return cls(**value)

    def describe(self) -> str:
        if self.kind == "text":
            return f"text, depth {self.depth}, {self.chars} characters a predecessor"
        return f"sum of stored vectors, depth {self.depth}, decay {self.decay:g}"

    def combine(self, vectors: np.ndarray) -> np.ndarray:
        """The sum rule's context of one record from its stored vectors: predecessors
        oldest first, the record last (float32, unit length; zero if they cancel)."""
        rows = np.asarray(vectors, dtype=np.float32)
        back = np.arange(len(rows) - 1, -1, -1, dtype=np.float32)
        summed = (np.float32(self.decay) ** back) @ rows
        norm = float(np.linalg.norm(summed))
        return (summed / norm if norm > 0 else summed).astype(np.float32)


@dataclass(frozen=True, slots=True)
class ContextSource:
    """What a record's context is made of: its predecessors' ids and texts, oldest first,
    and the record's own text; under the sum rule also the stored vectors of the
    predecessors, oldest first, then the record's (``vectors``)."""

    record_id: int
    members: tuple[int, ...]
    member_texts: tuple[str, ...]
    text: str
    vectors: np.ndarray | None = None


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

    def context_rule(self) -> ContextRule | None:
        """How the contexts are made, or None while the index is not enabled."""
        ...

    def set_context_rule(self, rule: ContextRule) -> None:
        """Make contexts by ``rule`` from now on (another rule than before drops the contexts
        stored, to be made again)."""
        ...

    def context_pending(self, after: int, limit: int) -> list[int]:
        """Ids above ``after`` (ascending, every scope) of unerased records with no context."""
        ...

    def context_sources(self, ids: Collection[int]) -> list[ContextSource]:
        """The sources of the contexts of ``ids`` by the rule above, in id order."""
        ...

    def sum_sources(self, ids: Collection[int], depth: int) -> dict[int, SumSource]:
        """The sum rule's sources of the contexts of ``ids`` at ``depth``, whether the index is
        on or not (the query-time contexts, ``mempp.search.query_context``): rows with at
        least one predecessor only, read in one snapshot, batched (``window_picks``)."""
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


#: Encodes texts into unit vectors (an encoder's ``embed``): what the text rule needs.
Encode = Callable[[list[str]], np.ndarray]


def context_text(source: ContextSource, chars: int = DEFAULT_CHARS) -> str:
    """The text a record's context vector encodes under the text rule."""
    parts = [text[:chars] for text in source.member_texts]
    return "\n".join([*parts, source.text])


def make_vectors(
    rule: ContextRule, sources: Sequence[ContextSource], encode: Encode | None, dim: int
) -> np.ndarray | None:
    """The context vectors of ``sources`` by ``rule``, one row each (zero for a record with no
    predecessor: its context is itself, which its own vector already is, so the leg leaves
    it to the vector leg and a store of unthreaded documents pays nothing). The text rule
    encodes with ``encode`` (None without one: nothing can be made); the sum rule reads only
    the sources' stored vectors."""
    vectors = np.zeros((len(sources), dim), dtype=np.float32)
    threaded = [i for i, source in enumerate(sources) if source.members]
    if not threaded:
        return vectors
    if rule.kind == "sum":
        for i in threaded:
            stored = sources[i].vectors
            assert stored is not None, "the store reads the vectors under the sum rule"
            vectors[i] = rule.combine(stored)
        return vectors
    if encode is None:
        return None
    vectors[threaded] = encode([context_text(sources[i], rule.chars) for i in threaded])
    return vectors


def write_with_records(
    conn: Any,
    ids: Sequence[int],
    encode: Encode | None,
    *,
    rule_of: Callable[[Any], ContextRule | None],
    has_table: Callable[[Any], bool],
    sources: Callable[[Any, Sequence[int], ContextRule], Sequence[ContextSource]],
    write_rows: Callable[[Any, tuple[str, int], Sequence[ContextSource], np.ndarray], None],
) -> None:
    """Inside the transaction that wrote the records ``ids``, on either engine (its reads and
    its write given): their contexts, so a record is never stored without one (a crash takes
    both or neither). The sum rule needs only the stored vectors; the text rule encodes with
    ``encode`` here (None: the contexts are left to the next ``mempp.context.fill``, which
    verify's count asks for)."""
    rule = rule_of(conn)
    if rule is None or not ids or not has_table(conn):
        return
    name, dim = conn.execute(
        """SELECT (SELECT value FROM mempp_meta WHERE key = 'encoder'),
                  (SELECT value FROM mempp_meta WHERE key = 'dim')"""
    ).fetchone()
    found = sources(conn, ids, rule)
    vectors = make_vectors(rule, found, encode, int(dim))
    if vectors is not None and found:
        write_rows(conn, (str(name), int(dim)), found, vectors)


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


#: What the sum rule reads of one record: its predecessors' ids (oldest first) and the stored
#: vectors of them, then of the record (float32, one row each).
SumSource = tuple[tuple[int, ...], np.ndarray]
# Rows beyond ``depth`` of each record's thread walk a batched read takes (``window_picks``;
# the walk starts at the record itself): chat written in order finds its predecessors right
# there; a record that does not is read alone.
FIRST_EXTRA = 2


def window_picks(
    rows: Sequence[tuple[int, int | None, int, int, int, int | None, int]], depth: int, first: int
) -> tuple[dict[int, list[int]], list[int]]:
    """``pick_members`` over a batched walk: ``rows`` are (record id, event key, ingested key,
    the rows at the record's place in its thread with a larger id (counted up to
    ``CONTEXT_WINDOW``), then id, event key, ingested key of a row among the first ``first``
    of its thread walk from the record's own entry on, in any order). The walk skips the rows
    at the record's place stored after it, which the rule never picks but which fill its
    window: the picks of each record, and the records that need their whole window read
    (fewer than ``depth`` picked from a walk that may have gone on, or a window those rows
    may have filled first), so the answer is the rule's either way."""
    windows: dict[int, list[tuple[int, int | None, int]]] = {}
    records: dict[int, tuple[int, int | None, int]] = {}
    skipped: dict[int, int] = {}
    for record_id, event, ingested, after, row_id, row_event, row_ingested in rows:
        records[record_id] = (record_id, event, ingested)
        skipped[record_id] = after
        windows.setdefault(record_id, []).append((row_id, row_event, row_ingested))
    picked: dict[int, list[int]] = {}
    whole: list[int] = []
    for record_id, window in windows.items():
        # The walk's order: the place in the thread (event date, else ingest time), then id.
        window.sort(key=lambda r: (r[1] if r[1] is not None else r[2], r[0]), reverse=True)
        chosen = pick_members(records[record_id], window, depth)
        if (len(chosen) < depth and len(window) >= first) or (
            skipped[record_id] + first > CONTEXT_WINDOW
        ):
            whole.append(record_id)
        elif chosen:
            picked[record_id] = chosen
    return picked, whole


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


#: The rule of a store that enabled the context index before the rule was a setting (and of
#: a snapshot written then): the text rule at depth 2, 400 characters a predecessor.
LEGACY_RULE = ContextRule("text", DEFAULT_DEPTH, DEFAULT_CHARS)
