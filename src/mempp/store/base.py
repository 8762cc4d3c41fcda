"""The ``Store`` protocol: what the write and read paths need from a storage engine.

Every engine keeps the same guarantees: rows are never deleted, a row's content never changes
(only ``state`` and ``superseded_by``), each write batch is one transaction, and every
ranked lookup applies the scope *before* ranking (same tenant scope, active rows, with an
as-of bound ``event_key <= as_of``, so undated rows drop out, and every condition of its
``filters``: see mempp.filters), so all ``limit`` slots go to eligible rows. Ties in every
ranking go to the newer ingest (larger id).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from mempp.errors import StoreError
from mempp.filters import NO_FILTERS, Filters
from mempp.records import AddResult, Document, Record, State
from mempp.search.query import LexicalQuery
from mempp.store.indexes import IndexedStore

T = TypeVar("T")

#: The keys of ``Store.state_counts``, in the order ``mempp info`` shows them.
STATE_COUNT_KEYS = ("active", "archived", "redacted", "superseded")


@runtime_checkable
class Store(IndexedStore, Protocol):
    """Every engine's reads and writes; the optional indexes and their legs are
    ``IndexedStore``'s (mempp.store.indexes)."""

    #: Where the data lives, for messages (a path or a URL without password).
    location: str

    def close(self) -> None: ...

    def gather(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Results of independent read calls on this store, in order. An engine whose calls
        wait on a server runs them at once; one whose calls share a connection, in turn.
        When a call raises, the error reaches the caller once no call is left running.
        An engine that runs them at once says so with a class attribute
        ``gathers_at_once = True`` and runs the first call on the caller's thread (the read
        path then encodes the question there); without it the read path runs the legs that
        need no vector on a thread of its own."""
        ...

    def schema_version(self) -> int:
        """The newest schema migration applied to this store."""
        ...

    def reachable(self) -> bool:
        """Does the store answer now? (A server's readiness: PostgreSQL may be away.)"""
        ...

    def reading(self) -> AbstractContextManager[None]:
        """Run the reads inside as one read: on PostgreSQL with read URLs, on a standby that
        has every write answered before it began (see mempp.store.postgres.standby)."""
        ...

    def warm(self, scope: str) -> None:
        """Load now what the first search of ``scope`` would otherwise load (in-RAM indexes
        and replicas), so that search is as fast as later ones. Safe to run in a thread of
        its own while others search and write; calling it again only catches up."""
        ...

    # -- encoder identity -------------------------------------------------------------
    def encoder(self) -> tuple[str, int] | None:
        """(name, dim) of the encoder that filled this store, or None while empty."""
        ...

    def bind_encoder(self, name: str, dim: int) -> None:
        """Remember the encoder; raise ``EncoderMismatch`` if another one filled the store."""
        ...

    # -- write path -------------------------------------------------------------------
    def stored_sources(self, scope: str, sources: Collection[str]) -> set[str]:
        """Which of ``sources`` a row of the scope (any state) already has: how an import of
        a source whose items have stable URIs (a Slack message, a Message-ID) skips what an
        earlier import stored."""
        ...

    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[int | None]:
        """For each document, the id of the active row of the same scope, author and event
        date that has its text (the oldest, if several), else None. (A message repeated on
        another date is a new record.)"""
        ...

    def insert(
        self,
        scope: str,
        docs: Sequence[Document],
        vectors: np.ndarray,
        *,
        encode_context: Callable[[list[str]], np.ndarray] | None = None,
    ) -> list[AddResult]:
        """Store documents (``vectors[i]`` belongs to ``docs[i]``) in ONE transaction.

        With the context index enabled, the rows' contexts are written in that transaction
        too (``mempp.store.context``): the sum rule's from the vectors, the text rule's by
        ``encode_context`` (an encoder's ``embed``; without it they wait for the next fill).

        Duplicates are checked again inside the transaction, against the store and against
        earlier documents of the same batch, so concurrent writers never store one twice; each
        is reported with the id of the row it repeats (``AddResult.duplicate_of``).
        """
        ...

    def bulk_load(self) -> AbstractContextManager[None]:
        """A context for loading many rows: inserts inside it may skip the upkeep of an
        index that is cheaper to build once at the end (PostgreSQL's HNSW index), which is
        built when it ends. What is stored, and what searches return meanwhile, is the
        same as without it. Re-entrant."""
        ...

    # -- state (consolidation) --------------------------------------------------------
    def set_state(
        self, scope: str, ids: Collection[int], state: State, superseded_by: int | None
    ) -> None: ...

    # -- reads ------------------------------------------------------------------------
    def get(self, scope: str, ids: Collection[int]) -> dict[int, Record]: ...

    def count(self, scope: str, *, active_only: bool = True) -> int: ...

    def state_counts(self, scope: str) -> dict[str, int]:
        """How many rows of the scope are in each state, keyed by ``STATE_COUNT_KEYS``:
        ``active``, ``archived`` and ``redacted`` (tombstones) partition the scope;
        ``superseded`` counts the rows of the first two with a successor link."""
        ...

    def scopes(self) -> list[str]:
        """Every scope holding at least one record (any state)."""
        ...

    def records_after(
        self, scope: str, after: int, limit: int, *, active_only: bool = False
    ) -> list[Record]:
        """Up to ``limit`` records of ``scope`` with ids above ``after``, in id order (the
        order they were written): a page of the whole record, for export and inspection."""
        ...

    def lexical(
        self,
        scope: str,
        query: LexicalQuery,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        """Full-text leg: ids ranked by relevance (best first)."""
        ...

    def tagged(
        self,
        scope: str,
        labels: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        """Tag leg: rows carrying any label, most labels first, then newest."""
        ...

    def nearest(
        self,
        scope: str,
        vector: np.ndarray,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        """Vector leg: cosine ranking of in-scope rows (best first), exact. (PostgreSQL with
        ``vector_replica`` off walks HNSW past 10,000 eligible rows: approximate.)"""
        ...

    def dated_within(
        self,
        scope: str,
        spans: Sequence[tuple[int, int]],
        as_of: int | None,
        limit: int,
        among: Collection[int] | None = None,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        """In-scope rows whose event date lies in one of the ``[start, end)`` key spans,
        newest ingest first, at most ``limit``; with ``among``, only rows of that set."""
        ...

    def thread_followers(
        self,
        scope: str,
        ids: Collection[int],
        as_of: int | None,
        depth: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> dict[int, list[int]]:
        """For each row of ``ids`` that has a thread: the next ``depth`` in-scope rows of that
        thread, in thread order (event date, undated rows at their ingest time, then id).
        Rows with no thread, or at the end of theirs, are left out."""
        ...

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, tuple[int | None, int]]:
        """``(event-date key or None when undated, ingest-time key)`` of each row."""
        ...

    def latest_unmatched(
        self,
        scope: str,
        exclude: Collection[int],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        """The most recently ingested in-scope rows whose ids are not in ``exclude``."""
        ...


# -- optional capabilities -------------------------------------------------------------------
# The LLM layers (mempp.llm.consolidate, mempp.llm.graph) need more than the read and write
# paths. An engine offers them by implementing the protocols below; the layers check for them at
# run time (``supports``), so an engine without them still serves every read and write.


class StateConflict(StoreError):
    """A row's state is not what the operation expected (it was changed by someone else)."""

    def __init__(self, message: str, ids: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.ids = list(ids)


@dataclass(frozen=True, slots=True)
class StateChange:
    """One row's state before and after a consolidation step.

    ``old_state is None`` marks a row *created* by the step (a merged row); undoing such a
    change archives the row, because rows are never deleted.
    """

    record_id: int
    old_state: State | None
    old_superseded_by: int | None
    new_state: State
    new_superseded_by: int | None

    def to_dict(self) -> dict[str, object]:
        return {
            "record_id": self.record_id,
            "old_state": self.old_state,
            "old_superseded_by": self.old_superseded_by,
            "new_state": self.new_state,
            "new_superseded_by": self.new_superseded_by,
        }


@dataclass(frozen=True, slots=True)
class MergedRow:
    """A row a consolidation step writes: the document, its vector and its tag-index labels."""

    document: Document
    vector: np.ndarray
    labels: frozenset[str]


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """What one group of a run came to. ``changes`` may be empty (distinct, failed, dry run).

    ``changes`` name each member's expected current state as ``old_*``: the engine applies them
    only if every member still has it (compare-and-set), else raises :class:`StateConflict`.
    """

    group: int
    label: str
    members: tuple[int, ...]
    changes: tuple[StateChange, ...] = ()
    merged: MergedRow | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One row of the runs table."""

    id: int
    scope: str
    kind: str  # "consolidate" or "undo"
    dry_run: bool
    started_at: str
    finished_at: str | None
    settings: dict[str, Any]
    counts: dict[str, Any] | None
    undoes: int | None
    undone_by: int | None

    @property
    def operation(self) -> str:
        """What the run did, for people: ``supersede``, ``archive``, ``redact`` (a manual
        correction), ``undo`` or ``consolidate`` (the LLM operator)."""
        named = self.settings.get("operation")
        if isinstance(named, str) and named:
            return named
        return "undo" if self.kind == "undo" else "consolidate"

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "scope": self.scope,
            "kind": self.kind,
            "operation": self.operation,
            "dry_run": self.dry_run,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "settings": self.settings,
            "counts": self.counts,
            "undoes": self.undoes,
            "undone_by": self.undone_by,
        }


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One row of the groups table: a group of a run and its label."""

    run_id: int
    group: int
    label: str
    members: tuple[int, ...]
    detail: str | None


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One row of the changes table."""

    run_id: int
    group: int | None
    label: str
    change: StateChange
    merged_id: int | None


@runtime_checkable
class ConsolidationStore(Protocol):
    """What the consolidation operator needs: vectors of current rows and an audited log."""

    def current_vectors(self, scope: str) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, matrix)`` of the scope's rows that are active and not superseded, in ingest
        order (ascending id): ids as int64, one float32 embedding per row."""
        ...

    def begin_run(
        self, scope: str, *, kind: str, dry_run: bool, settings: Mapping[str, Any]
    ) -> int:
        """Open a run (``kind`` "consolidate") and return its id."""
        ...

    def record_group(
        self,
        scope: str,
        run_id: int,
        outcome: GroupOutcome,
        *,
        encode_context: Callable[[list[str]], np.ndarray] | None = None,
    ) -> int | None:
        """In ONE transaction: check every change's ``old_*`` against the row (else raise
        :class:`StateConflict` and change nothing), apply the changes, insert ``merged`` (if
        any) through the normal insert code, its context too when the context index is on
        (as ``insert`` writes one, ``encode_context`` alike), and log the group and each
        change, the merged row's creation included. Returns the merged row's id (or None)."""
        ...

    def finish_run(self, scope: str, run_id: int, counts: Mapping[str, Any]) -> None: ...

    def runs(self, scope: str) -> list[RunInfo]:
        """Every run of the scope, oldest first."""
        ...

    def run_groups(self, scope: str, run_id: int) -> list[GroupRecord]: ...

    def run_changes(self, scope: str, run_id: int) -> list[ChangeRecord]: ...

    def undo_run(self, scope: str, run_id: int) -> tuple[int, list[ChangeRecord]]:
        """In ONE transaction, restore every state a ``consolidate`` run changed.

        Refuses (``StateConflict``, nothing changed) when any row no longer has the state the
        run gave it; refuses (``InvalidInput``) an unknown run, a dry run, an undo run or a run
        already undone. A row the run created is archived. The undo is itself logged as a run
        of kind "undo" (``undoes`` = ``run_id``; the run gets ``undone_by``). Returns the undo
        run's id and its changes."""
        ...


@runtime_checkable
class TimelineStore(Protocol):
    """What a subject's history and the changes between two dates need (mempp.timeline)."""

    def linked(self, scope: str, ids: Collection[int], as_of: int | None) -> dict[int, str]:
        """Rows of any state one step from ``ids``: ``"thread"`` (same thread as one of them),
        ``"superseded"`` (superseded by one of them), ``"successor"`` (supersedes one of
        them). With ``as_of``, only rows with ``event_key <= as_of``. ``ids`` themselves are
        left out."""
        ...

    def entered(
        self,
        scope: str,
        since: int,
        until: int,
        known_since: int | None,
        known_until: int | None,
        limit: int,
    ) -> list[int]:
        """Rows of any state with ``since <= event_key <= until`` (and the ingest key in
        ``[known_since, known_until]`` when given), oldest event first, at most ``limit``."""
        ...

    def superseded_by_any(self, scope: str, ids: Collection[int]) -> list[int]:
        """Rows of any state whose ``superseded_by`` is one of ``ids``, by id."""
        ...

    def state_log(self, scope: str, ids: Collection[int]) -> list[tuple[int, str, int | None, str]]:
        """Every logged state change of the rows ``ids`` (dry runs left out), oldest first:
        ``(record id, new state, new superseded_by, when its run started, ISO 8601 UTC)``.
        What tells when a row's current link or archive became known
        (mempp.search.corrections)."""
        ...


@runtime_checkable
class RedactionStore(Protocol):
    """Erasure: the one sanctioned change of a record's content (mempp.timeline.redact)."""

    def redact(
        self, scope: str, record_id: int, *, reason: str, actor: str | None
    ) -> tuple[int, list[int]]:
        """In ONE transaction: erase the row's text, vector, tags, author, source, thread,
        full-text entries and graph triples, and those of every merged row made from it
        (its inputs stay listed in the change log); archive them; keep a tombstone (id,
        scope, dates, ``redacted`` state, when, why, by whom); log it as a run of
        ``operation`` "redact" that cannot be undone. Then leave no copy of the text in the
        engine's free space or journal where the engine allows (SQLite: secure_delete and a
        WAL checkpoint). Refuses (``InvalidInput``, nothing changed) a row already
        redacted; ``RecordNotFound`` an unknown id. Returns the run id and the erased ids."""
        ...


#: The kinds of row a snapshot holds, in the order a store gives and takes them: a row of each
#: kind refers only to rows of the kinds before it (or, for ``superseded_by`` and
#: ``undone_by``, to rows of its own kind, which a restore links once all are in).
SNAPSHOT_KINDS = ("record", "run", "group", "change", "redaction", "triple", "extraction", "key")
# The fields of each kind but ``record`` (built by each engine), in the order they are read
# and written back: the same on every engine (see SnapshotStore).
SNAPSHOT_FIELDS: dict[str, tuple[str, ...]] = {
    "run": (
        "id",
        "scope",
        "kind",
        "dry_run",
        "started_at",
        "finished_at",
        "settings",
        "counts",
        "undoes",
        "undone_by",
    ),
    "group": ("scope", "run_id", "group", "label", "members", "detail"),
    "change": (
        "id",
        "scope",
        "run_id",
        "group",
        "label",
        "record_id",
        "old_state",
        "old_superseded_by",
        "new_state",
        "new_superseded_by",
        "merged_id",
    ),
    "redaction": ("scope", "record_id", "run_id", "redacted_at", "reason", "actor"),
    "triple": (
        "id",
        "scope",
        "record_id",
        "subject",
        "relation",
        "object",
        "subject_key",
        "object_key",
    ),
    "extraction": ("scope", "record_id", "extracted_at", "model", "triples"),
    "key": ("key_id", "scope", "role", "label", "created_at", "revoked_at", "secret_hash"),
}


@runtime_checkable
class SnapshotStore(Protocol):
    """What ``mempp dump`` / ``mempp restore`` (mempp.transfer) need: every stored row, as
    plain values an engine of another kind writes back id for id.

    A row is ``(kind, fields)``; the fields of each kind, the same on every engine:

    * ``record``: id, scope, text, author, event_date, event_key, tags (list), source,
      ingested_at (ISO 8601, UTC), ingested_key, state (``active``/``archived`` as stored: a
      tombstone is archived), superseded_by, thread, metadata (dict or None), labels (the tag
      index's labels, sorted), vector (float32 array; None from ``snapshot(vectors=False)``)
    * ``run``: id, scope, kind, dry_run, started_at, finished_at, settings, counts, undoes,
      undone_by
    * ``group``: scope, run_id, group, label, members (list), detail
    * ``change``: id, scope, run_id, group, label, record_id, old_state, old_superseded_by,
      new_state, new_superseded_by, merged_id
    * ``redaction``: scope, record_id, run_id, redacted_at, reason, actor
    * ``triple``: id, scope, record_id, subject, relation, object, subject_key, object_key
    * ``extraction``: scope, record_id, extracted_at, model, triples
    * ``key``: key_id, scope, role, label, created_at, revoked_at, secret_hash (bytes)
    """

    def is_empty(self) -> bool:
        """True when the store holds no record, run or API key in any scope."""
        ...

    def snapshot(
        self, scopes: Collection[str] | None, *, vectors: bool
    ) -> AbstractContextManager[Iterator[tuple[str, dict[str, Any]]]]:
        """A context yielding the rows of ``scopes`` (None: every scope), kind by kind in
        ``SNAPSHOT_KINDS`` order, each kind by id, read from ONE consistent view of the store
        while writers go on, a page at a time."""
        ...

    def restore(
        self, encoder: tuple[str, int] | None, rows: Iterable[tuple[str, dict[str, Any]]]
    ) -> dict[str, int]:
        """Write ``rows`` (in ``SNAPSHOT_KINDS`` order, every record with its vector) into this
        EMPTY store with their own ids, and bind ``encoder``, in ONE transaction: on any error
        nothing is written. Refuses (``InvalidInput``) a store that is not empty. Returns how
        many rows of each kind were written."""
        ...


@dataclass(frozen=True, slots=True)
class Triple:
    """One entity-relation triple as extracted, with normalised entity keys."""

    subject: str
    relation: str
    object: str
    subject_key: str
    object_key: str


@dataclass(frozen=True, slots=True)
class TripleHit:
    """A stored triple found from query entities, with its source row's date."""

    id: int
    subject: str
    relation: str
    object: str
    subject_key: str
    object_key: str
    record_id: int
    date: str | None
    touched: int  # how many of the query's entity keys it names (1 or 2)


@runtime_checkable
class GraphStore(Protocol):
    """What Mem^g++ needs: triples keyed to their source rows."""

    def pending_extraction(self, scope: str, ids: Collection[int] | None) -> list[int]:
        """Ids of active rows of the scope not yet extracted (ascending); ``ids`` narrows."""
        ...

    def add_triples(
        self, scope: str, record_id: int, triples: Sequence[Triple], model: str | None
    ) -> bool:
        """Store a row's triples and mark it extracted, in one transaction. False (and
        nothing stored) if the row was already extracted."""
        ...

    def search_triples(
        self,
        scope: str,
        keys: Collection[str],
        as_of: int | None,
        *,
        dated: bool,
        limit: int,
    ) -> list[TripleHit]:
        """Triples whose subject or object key is in ``keys``, from active source rows; with
        ``dated`` and ``as_of``, only rows with ``event_key <= as_of``. Ranked by keys touched,
        then source recency (dated: event date, else ingest time; not dated: ingest order),
        then triple id, all descending."""
        ...

    def triples_of(self, scope: str, record_ids: Collection[int]) -> list[TripleHit]:
        """Every stored triple of these rows (for inspection), by triple id."""
        ...


def supports(store: object, capability: type, feature: str) -> None:
    """Raise ``StoreError`` naming the engine when ``store`` lacks an optional capability."""
    if not isinstance(store, capability):
        raise StoreError(
            f"the {type(store).__name__} engine does not support {feature} yet "
            f"(it must implement {capability.__name__})"
        )


# The write path's dedupe key is scope, author, text and event date: a message repeated on
# another date is a new record. Undated rows share this key (no date is that early).
UNDATED_DEDUPE_KEY = -(2**63 - 1)


def dedupe_date(doc: Document) -> int:
    """The event-date part of a document's dedupe key."""
    return doc.date.key if doc.date is not None else UNDATED_DEDUPE_KEY


# Undo rules shared by every engine.


def followers_in_order(rows: Sequence[Sequence[Any]]) -> dict[int, list[int]]:
    """``(row, follower, follower's thread key)`` rows into ``row -> followers`` in thread order
    (SQL returns a lookup's rows in no guaranteed order once they are joined)."""
    found: dict[int, list[tuple[int, int]]] = {}
    for row, follower, key in rows:
        found.setdefault(int(row), []).append((int(key), int(follower)))
    return {row: [follower for _, follower in sorted(pairs)] for row, pairs in found.items()}


def first_reasons(rows: Sequence[Sequence[Any]], ids: Collection[int]) -> dict[int, str]:
    """``(row, reason, priority)`` rows, priority ascending, into ``row -> reason`` (the first
    reason of each row), leaving out ``ids`` themselves: what ``TimelineStore.linked`` returns."""
    wanted = {int(i) for i in ids}
    found: dict[int, str] = {}
    for row, why, _ in rows:
        if int(row) not in wanted:
            found.setdefault(int(row), why)
    return found


# -- API keys (the server's keys, bound to one scope each) -----------------------------------


# The api_keys columns that hold an ApiKey, in its field order (the secret's hash is apart).
API_KEY_COLUMNS = "key_id, scope, role, label, created_at, revoked_at"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key as stored: never the secret itself, only its hash (kept apart)."""

    key_id: str
    scope: str
    role: str  # "read", "write" or "admin"
    label: str | None
    created_at: str
    revoked_at: str | None = None

    def row(self) -> tuple[str | None, ...]:
        """The key's values in the order of ``API_KEY_COLUMNS``."""
        return (self.key_id, self.scope, self.role, self.label, self.created_at, self.revoked_at)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ApiKey:
        """The key from a row that starts with ``API_KEY_COLUMNS``."""
        return cls(*row[:6])

    def to_dict(self) -> dict[str, object]:
        return {
            "key_id": self.key_id,
            "scope": self.scope,
            "role": self.role,
            "label": self.label,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


@runtime_checkable
class KeyStore(Protocol):
    """What the server needs to keep API keys in the store they open."""

    def add_key(self, key: ApiKey, secret_hash: bytes) -> None:
        """Store a new key (its id is new; one transaction)."""
        ...

    def api_key(self, key_id: str) -> tuple[ApiKey, bytes] | None:
        """The key with this id and its secret's hash, revoked or not; None if unknown."""
        ...

    def api_keys(self, scope: str | None = None) -> list[ApiKey]:
        """Every key (of ``scope``, if given), revoked ones too, oldest first."""
        ...

    def revoke_key(self, key_id: str, revoked_at: str) -> ApiKey | None:
        """Mark a key revoked (a revoked key stays revoked, with its first date); None if
        there is no such key."""
        ...

    def key_count(self) -> int:
        """How many keys were ever created, revoked ones included."""
        ...


# -- re-encoding (mempp reembed) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReembedStatus:
    """A re-encoding under way: its target encoder, rows with a new vector staged, and rows
    in all (every scope and state; erased rows need none and count as done)."""

    encoder: str
    dim: int
    staged: int
    total: int

    @property
    def pending(self) -> int:
        return self.total - self.staged


@runtime_checkable
class ReembedStore(Protocol):
    """Re-encoding a whole store with another encoder (``Memory.reembed``).

    New vectors are staged beside the records, batch by batch, each batch one transaction,
    so a run killed at any point resumes where it stopped. Until ``reembed_switch`` commits,
    the records keep their vectors and every search uses them; the switch replaces every
    vector and the bound encoder in one transaction. Nothing else of a record changes."""

    def reembed_status(self) -> ReembedStatus | None:
        """The re-encoding under way, or None."""
        ...

    def reembed_begin(self, name: str, dim: int, *, restart: bool = False) -> ReembedStatus:
        """Start re-encoding to ``(name, dim)``, or resume the one under way to it. Refuses
        (``InvalidInput``) a store with no encoder bound, the encoder already bound, and
        another target under way unless ``restart`` (which drops its staged vectors)."""
        ...

    def reembed_pending(self, after: int, limit: int) -> list[tuple[int, str]]:
        """``(id, text)`` of up to ``limit`` rows above id ``after`` (any scope and state, not
        erased) with no new vector staged, in id order."""
        ...

    def reembed_stage(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Stage the new vectors of rows ``ids`` (one transaction; rows erased meanwhile are
        skipped). ``InvalidInput`` when a vector is not of the target's width."""
        ...

    def reembed_switch(self) -> bool:
        """In one transaction: if every row has a staged vector, replace every vector by it
        (erased rows get zeros of the new width), bind the target encoder, drop the staging,
        and return True; else change nothing and return False (rows were added since)."""
        ...

    def reembed_abandon(self) -> bool:
        """Drop a re-encoding under way (its staged vectors); the store stays as it was."""
        ...
