"""What the PostgreSQL engine's in-RAM replicas (BM25 postings, tag postings, vectors) share,
and the tag and vector replicas themselves.

A replica holds one scope's rows up to the newest id it has read, and is caught up before each
search from the rows with ids above it: within one scope, ids commit in increasing order,
because every writer of a scope inserts while holding the scope's lock. States are not held:
the ids a replica ranks pass through PostgreSQL, which keeps the active ones that meet the
search's filters, so an archived row never appears however recently it was archived.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from mempp.index.tags import TagPostings
from mempp.index.vectors import ExactRows, ExactVectorIndex


class Replica(Protocol):
    def __len__(self) -> int: ...  # rows held


R = TypeVar("R", bound=Replica)


class ScopeCache(Generic[R]):
    """One replica per scope, made on first use; past a budget of rows in all, the least
    recently searched scopes' replicas are dropped (made again if searched again)."""

    def __init__(self, make: Callable[[], R]) -> None:
        self._make = make
        self._held: dict[str, R] = {}
        self._erasures: dict[str, int] = {}  # the scope's erasure count its replica was read at
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[str]:
        """Scopes held, the least recently used first."""
        with self._lock:
            return iter(list(self._held))

    def get(self, scope: str) -> R | None:
        return self._held.get(scope)

    def use(self, scope: str, erasures: int = 0) -> R:
        """The scope's replica, made if need be, now the most recently used. ``erasures`` is
        the scope's count of erased rows now: a replica read at another count holds words,
        labels or vectors an erasure removed (on any node), so a new one is made."""
        with self._lock:
            replica = self._held.pop(scope, None)
            if replica is None or self._erasures.get(scope, 0) != erasures:
                replica = self._make()  # (not ``or``: an empty replica has length 0)
                self._erasures[scope] = erasures
            self._held[scope] = replica
            return replica

    def evict(self, keep: str, max_rows: int) -> None:
        """Drop the least recently used replicas while all together hold more than
        ``max_rows`` rows (the one of ``keep`` stays, whatever its size)."""
        with self._lock:
            held = sum(len(replica) for replica in self._held.values())
            for scope in list(self._held):
                if held <= max_rows:
                    break
                if scope != keep:
                    held -= len(self._held.pop(scope))

    def drop(self, scope: str) -> None:
        with self._lock:
            self._held.pop(scope, None)
            self._erasures.pop(scope, None)


# (ids ascending, event keys, {label: ids ascending}) of the rows after a given id.
TagFetch = Callable[[int], tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]

_EMPTY = np.empty(0, dtype=np.int64)
# Tag postings read since the last merge are searched as a tail, merged in once they outnumber an
# eighth of the merged ones (merging costs a pass over all of them).
_MIN_TAIL = 8192


@dataclass(frozen=True)
class _Held:
    """What one ranking reads, replaced as a whole by a catch-up."""

    ids: np.ndarray  # record ids, increasing
    keys: np.ndarray  # their event keys
    postings: TagPostings
    tail: dict[str, np.ndarray]  # per label, ids above postings.max_id


class ScopeTags:
    """One scope's tag postings. ``catch_up`` runs with ``lock`` held; ``ranked`` may run
    beside it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._held = _Held(_EMPTY, _EMPTY, TagPostings.from_lists({}, 0), {})

    def __len__(self) -> int:
        return len(self._held.ids)

    @property
    def newest(self) -> int:
        ids = self._held.ids
        return int(ids[-1]) if len(ids) else 0

    def catch_up(self, fetch: TagFetch) -> None:
        """Append the rows ``fetch`` returns after the newest id held."""
        ids, keys, labelled = fetch(self.newest)
        if len(ids) == 0:
            return
        held = self._held
        tail = dict(held.tail)
        for label, rows in labelled.items():
            before = tail.get(label)
            tail[label] = rows if before is None else np.concatenate([before, rows])
        postings = held.postings
        if sum(len(rows) for rows in tail.values()) > max(_MIN_TAIL, len(postings) // 8):
            postings, tail = postings.extended(tail, int(ids[-1])), {}
        self._held = _Held(
            np.concatenate([held.ids, ids]), np.concatenate([held.keys, keys]), postings, tail
        )

    def ranked(self, labels: Sequence[str], as_of: int | None, limit: int) -> np.ndarray:
        """Ids of the best ``limit`` rows dated up to ``as_of`` by the tag leg's ranking
        (labels carried, then newest first), any state."""
        held = self._held

        def eligible(ids: np.ndarray) -> np.ndarray:
            if as_of is None:
                return np.ones(len(ids), dtype=bool)
            return held.keys[np.searchsorted(held.ids, ids)] <= as_of

        found = held.postings.search(labels, eligible, limit, held.tail)
        return np.asarray(found, dtype=np.int64)


# Blocks of (ids ascending, event keys, unit float32 rows) of the rows after a given id.
VectorFetch = Callable[[int], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]]
_ONE_SCOPE = ""  # the index's only scope: a replica holds one


class ScopeVectors:
    """One scope's vectors for an exact search: the int8 scan copy of
    ``mempp.index.vectors.ExactVectorIndex``, its candidates rescored with float32 rows read from
    PostgreSQL, or, while the scope holds at most ``float32_rows`` rows, from a float32 copy
    held here, which spares a small scope those round trips. Rows are held at unit
    length, so the dot product ranks as pgvector's cosine distance does. ``catch_up`` runs
    with ``lock`` held; ``ranked`` may run beside it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._index: ExactVectorIndex | None = None
        # The float32 copy (capacity grown by doubling) and the part of it filled, replaced
        # together: a ranking reads the pair it finds.
        self._float32 = np.empty((0, 0), dtype=np.float32)
        self._float32_ids = _EMPTY
        self._filled: tuple[np.ndarray, np.ndarray] = (_EMPTY, self._float32)

    def __len__(self) -> int:
        return 0 if self._index is None else len(self._index)

    @property
    def nbytes(self) -> int:
        index = 0 if self._index is None else self._index.nbytes
        return index + self._float32.nbytes + self._float32_ids.nbytes

    def catch_up(
        self, fetch: VectorFetch, dim: int, exact_rows: ExactRows, float32_rows: int
    ) -> None:
        """Append the rows ``fetch`` returns after the newest id held (all of them, into a
        new index, when the dimension is not the one held). ``exact_rows`` gives a new
        index the unit float32 rows of the ids it rescores; up to ``float32_rows`` rows they
        are kept here too (one row missing would cost the round trip, so a scope that
        outgrows the copy drops it)."""
        index = self._index
        if index is None or index.dim != dim:
            index = ExactVectorIndex(dim, exact_rows=exact_rows, quick_rows=self._quick_rows)
            self._drop_float32(dim)
        for ids, keys, rows in fetch(index.max_id):
            count = len(ids)
            # Every row is active to the index: PostgreSQL keeps the active ones it ranks.
            scopes, active = itertools.repeat(_ONE_SCOPE, count), itertools.repeat(True, count)
            index.append(ids, rows, scopes, keys.tolist(), active)
            if len(index) <= float32_rows:
                self._keep_float32(ids, rows, float32_rows)
            elif len(self._filled[0]):
                self._drop_float32(dim)
        self._index = index

    def ranked(
        self,
        query: np.ndarray,
        as_of: int | None,
        limit: int,
        allowed: np.ndarray | None = None,
    ) -> np.ndarray:
        """Ids of the ``limit`` rows dated up to ``as_of`` most similar to ``query``, any
        state (with ``allowed``, sorted ids, only among those), best first (ties to the
        newer row)."""
        index = self._index
        if index is None:
            return _EMPTY
        found = index.search(query, _ONE_SCOPE, as_of, limit, allowed)
        return np.asarray(found, dtype=np.int64)

    def _keep_float32(self, ids: np.ndarray, rows: np.ndarray, float32_rows: int) -> None:
        filled = len(self._filled[0])
        needed = filled + len(ids)
        if needed > len(self._float32_ids):
            capacity = min(max(needed, 2 * len(self._float32_ids), 1024), float32_rows)
            grown = np.empty((capacity, rows.shape[1]), dtype=np.float32)
            grown[:filled] = self._float32[:filled]
            grown_ids = np.empty(capacity, dtype=np.int64)
            grown_ids[:filled] = self._float32_ids[:filled]
            self._float32, self._float32_ids = grown, grown_ids
        self._float32[filled:needed] = rows
        self._float32_ids[filled:needed] = ids
        self._filled = (self._float32_ids[:needed], self._float32[:needed])

    def _quick_rows(self, ids: np.ndarray) -> np.ndarray:
        """The float32 rows of ``ids`` held here, zeros for the others. The index reads
        those from PostgreSQL: a zero row passes its check only for a row held as zero
        itself (an erased one), which is that row's vector."""
        return rows_by_id(*self._filled, ids)

    def _drop_float32(self, dim: int) -> None:
        self._float32 = np.empty((0, dim), dtype=np.float32)
        self._float32_ids = _EMPTY
        self._filled = (_EMPTY, self._float32)


def rows_by_id(held_ids: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The ``rows`` of ``ids`` (given the rows' ids, ascending), in that order, zeros for an
    id not held."""
    out = np.zeros((len(ids), rows.shape[1]), dtype=np.float32)
    if len(held_ids):
        at = np.minimum(np.searchsorted(held_ids, ids), len(held_ids) - 1)
        held = held_ids[at] == ids
        out[held] = rows[at[held]]
    return out
