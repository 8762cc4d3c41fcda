"""Exact cosine search in RAM with the scope applied before ranking.

Vectors are unit length, so cosine is one matrix-vector product. The scope (tenant, active,
``event_key <= as_of``, and the ids a search's filters keep) becomes a boolean mask over the
whole matrix; masked rows get ``-inf``
and the top ``limit`` eligible rows are picked with ``argpartition``. At 100k x 384 this is
one pass over ~150 MB, about 10 ms on two cores: no approximate index is needed at that size,
and results are exact by construction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np

UNDATED = np.iinfo(np.int64).max  # never <= any as-of bound


class ExactVectorIndex:
    """Append-only matrix of unit vectors with per-row id, scope code, date key and state."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self._n = 0
        self._matrix = np.empty((0, dim), dtype=np.float32)
        self._ids = np.empty(0, dtype=np.int64)
        self._scope = np.empty(0, dtype=np.int32)
        self._event = np.empty(0, dtype=np.int64)
        self._active = np.empty(0, dtype=bool)
        self._position: dict[int, int] = {}
        self._scope_codes: dict[str, int] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def max_id(self) -> int:
        return int(self._ids[self._n - 1]) if self._n else 0

    def scope_code(self, scope: str) -> int:
        return self._scope_codes.setdefault(scope, len(self._scope_codes))

    def append(
        self,
        ids: np.ndarray,
        vectors: np.ndarray,
        scopes: Iterable[str],
        event_keys: Iterable[int | None],
        active: Iterable[bool],
    ) -> None:
        count = len(ids)
        if count == 0:
            return
        with self._lock:
            self._reserve(self._n + count)
            end = self._n + count
            self._matrix[self._n : end] = vectors
            self._ids[self._n : end] = ids
            self._scope[self._n : end] = [self.scope_code(s) for s in scopes]
            self._event[self._n : end] = [UNDATED if k is None else k for k in event_keys]
            self._active[self._n : end] = list(active)
            for offset, row_id in enumerate(ids.tolist()):
                self._position[row_id] = self._n + offset
            self._n = end

    def set_active(self, states: Iterable[tuple[int, bool]]) -> None:
        with self._lock:
            for row_id, is_active in states:
                position = self._position.get(row_id)
                if position is not None:
                    self._active[position] = is_active

    def eligible(
        self,
        ids: np.ndarray,
        scope: str,
        as_of: int | None,
        allowed: np.ndarray | None = None,
    ) -> np.ndarray:
        """Mask over ``ids``: known rows of this tenant, active, dated up to ``as_of`` and,
        when given, among ``allowed`` (sorted ids the search's filters keep)."""
        code = self._scope_codes.get(scope)
        n = self._n
        if code is None or n == 0:
            return np.zeros(len(ids), dtype=bool)
        positions = np.minimum(np.searchsorted(self._ids[:n], ids), n - 1)
        mask = (self._ids[positions] == ids) & self._active[positions]
        mask &= self._scope[positions] == code
        if as_of is not None:
            mask &= self._event[positions] <= as_of
        if allowed is not None:
            mask &= np.isin(ids, allowed, assume_unique=False)
        return mask

    def search(
        self,
        query: np.ndarray,
        scope: str,
        as_of: int | None,
        limit: int,
        allowed: np.ndarray | None = None,
    ) -> list[int]:
        """The ``limit`` eligible rows most similar to ``query``; with ``allowed`` (sorted
        ids), only rows among them."""
        code = self._scope_codes.get(scope)
        if code is None or self._n == 0 or limit <= 0:
            return []
        n = self._n
        mask = self._active[:n] & (self._scope[:n] == code)
        if as_of is not None:
            mask &= self._event[:n] <= as_of
        if allowed is not None:
            mask &= np.isin(self._ids[:n], allowed)
        eligible = int(np.count_nonzero(mask))
        if eligible == 0:
            return []
        scores = self._matrix[:n] @ query.astype(np.float32, copy=False)
        scores[~mask] = -np.inf
        if eligible > limit:
            # Keep every row tied with the limit-th score, so the tie-break below decides.
            cutoff = np.partition(scores, n - limit)[n - limit]
            top = np.flatnonzero(scores >= cutoff)
        else:
            top = np.flatnonzero(mask)
        # Best score first; equal scores go to the newer row.
        order = np.lexsort((-self._ids[top], -scores[top]))[:limit]
        return self._ids[top[order]].tolist()

    def _reserve(self, needed: int) -> None:
        capacity = len(self._ids)
        if needed <= capacity:
            return
        new_capacity = max(needed, capacity * 2, 1024)
        matrix = np.empty((new_capacity, self.dim), dtype=np.float32)
        matrix[: self._n] = self._matrix[: self._n]
        self._matrix = matrix
        for name, dtype in (("_ids", np.int64), ("_scope", np.int32), ("_event", np.int64)):
            grown = np.empty(new_capacity, dtype=dtype)
            grown[: self._n] = getattr(self, name)[: self._n]
            setattr(self, name, grown)
        active = np.zeros(new_capacity, dtype=bool)
        active[: self._n] = self._active[: self._n]
        self._active = active
