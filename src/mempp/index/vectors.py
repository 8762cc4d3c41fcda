"""Exact cosine search in RAM with the scope applied before ranking.

Vectors are unit length, so cosine is a dot product. Two copies serve a search:

* a compact scan copy, int8 with one scale per vector (``v ~ scale * code``, a quarter of
  float32's bytes), kept in event-date order (then id): an as-of bound is a prefix of it,
  so the scan reads only rows dated up to the bound. Rows added since the last reordering
  form a short tail in arrival order, scanned whole with a date mask; the tail is merged in
  by the first search after it outgrows an eighth of the sorted part.
* the float32 vectors themselves, for the exact scores of the candidates.

The scan quantizes the query to int8 as well and scores every eligible row by an integer dot
product (SimSIMD's kernels: exact int32 sums, no float copy of the rows; a large scan is cut
into chunks that up to ``SCAN_THREADS`` threads take in turn); the best ``2 * limit`` are
rescored exactly. Rounding bounds the approximation's error per row (the row's half steps
against the query's codes, the query's half steps against the row), so the result is exact,
not just likely: when the limit-th exact score does not clear the best score a non-candidate
could have, every row whose bound reaches it is rescored too. Scope (tenant, active) is a
mask over the scanned rows, and so are the ids a search's filters keep; masked rows get
``-inf``. Ties go to the newer row.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import simsimd

UNDATED = np.iinfo(np.int64).max  # never <= any as-of bound

# float32 rows for the given ids, in that order (the store's copy); see ExactVectorIndex.
ExactRows = Callable[[np.ndarray], np.ndarray]

# Rows per block when quantizing appended vectors: no temporary as large as the batch.
_BLOCK = 4096
# Candidates rescored exactly per result slot, before the rounding bound adds any row that
# could still win. Every float32 row read back costs a pread (or, for a row the float32 file
# lacks, an SQLite lookup): 2 read 13-49% fewer rows than 4 at 100k and 1M, with the same
# results (docs/scaling.md).
_RESCORE = 2
# A scan of at least this many rows is split across up to SCAN_THREADS threads (SimSIMD leaves
# the GIL while it scores a part). Our own pool rather than SimSIMD's OpenMP threads: each
# part is milliseconds long and nobody spins waiting, which matters on a busy machine.
# Measured on 2 quiet cores (search p50): 100k rows 7.5 ms in one part, 5.0 in two; 1M rows
# 61 ms in one part, 36 in two.
_PARALLEL_ROWS = 32_768
SCAN_THREADS = min(4, os.cpu_count() or 1)
# A split scan is cut into chunks of about this many rows (6 MB of codes at 384-d), at most
# _MAX_CHUNKS of them, which the searching thread and the pool's take in turn: a thread the
# OS leaves waiting for a core delays the scan by the chunk it holds, not by a fixed half.
# Each chunk costs about 10 us of calls: 6 chunks at 100k rows, 61 at 1M.
_CHUNK_ROWS = _PARALLEL_ROWS // 2
_MAX_CHUNKS = 64
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _scan_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(SCAN_THREADS - 1, thread_name_prefix="mempp-scan")
        return _pool


def _forget_scan_pool() -> None:
    # A forked child has none of the parent's threads: a pool inherited from it would queue
    # work that no thread ever runs.
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_scan_pool)


# A tail up to this many rows is never merged (merging costs a pass over every row).
_MIN_TAIL = 8192
# Rounding to the nearest code errs by at most half a step per component. The integer sums are
# exact; the margin covers the float32 products that scale them and the query's error norm.
_MARGIN = 1.02


@dataclass(frozen=True)
class _Scan:
    """What one search reads, taken under the lock: arrays are replaced, never resized."""

    codes: np.ndarray  # (capacity, dim) int8, scan order
    scales: np.ndarray  # (capacity,) float32, scan order
    order: np.ndarray  # scan position -> arrival position
    scope: np.ndarray  # scan position -> scope code
    active: np.ndarray  # scan position -> active
    sorted_event: np.ndarray  # event keys of the sorted part, ascending
    sorted_n: int
    n: int


def _among(ids: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``np.isin(ids, allowed)`` for ids >= 0 and ``allowed`` sorted, by a table indexed by
    id: isin sorts both arrays, about 10x slower on a filtered search over 1M rows."""
    if len(ids) == 0 or len(allowed) == 0:
        return np.zeros(len(ids), dtype=bool)
    table = np.zeros(max(int(ids.max()), int(allowed[-1])) + 1, dtype=bool)
    table[allowed] = True
    return table[ids]


class ExactVectorIndex:
    """Append-only unit vectors with per-row id, scope code, date key and state.

    Rows arrive in increasing id order. ``exact_rows`` (ids -> float32 rows) lets the store
    supply the exact vectors of candidates, so that only the compact copy stays in RAM;
    without it the index keeps a float32 copy of its own. ``quick_rows`` is a faster copy
    that may lack rows or hold wrong ones: a row it gives is used only if it quantizes to
    the very codes and scale the index holds for that row, the others come from
    ``exact_rows``.
    """

    def __init__(
        self,
        dim: int,
        exact_rows: ExactRows | None = None,
        quick_rows: ExactRows | None = None,
    ) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self._exact_rows = exact_rows
        self._quick_rows = quick_rows if exact_rows is not None else None
        self._n = 0
        self._sorted_n = 0
        self._max_scale = 0.0
        self._max_norm = 0.0  # of any row held: the query's rounding error is bounded by it
        self._inactive = 0
        self.version = 0  # counts the changes of rows held and of their states
        # Arrival order (ids increase): lookups by id, state, and the exact vectors.
        self._ids = np.empty(0, dtype=np.int64)
        self._scope = np.empty(0, dtype=np.int32)
        self._event = np.empty(0, dtype=np.int64)
        self._active = np.empty(0, dtype=bool)
        self._exact = np.empty((0, dim), dtype=np.float32)
        # Scan order: the sorted part, then the tail in arrival order.
        self._codes = np.empty((0, dim), dtype=np.int8)
        self._scales = np.empty(0, dtype=np.float32)
        self._order = np.empty(0, dtype=np.int64)
        self._scan_scope = np.empty(0, dtype=np.int32)
        self._scan_active = np.empty(0, dtype=bool)  # replaced whenever a state changes
        self._sorted_event = np.empty(0, dtype=np.int64)
        self._scope_codes: dict[str, int] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def max_id(self) -> int:
        return int(self._ids[self._n - 1]) if self._n else 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (capacity included)."""
        arrays = (self._ids, self._scope, self._event, self._active, self._exact, self._codes)
        extra = (self._scales, self._order, self._scan_scope, self._scan_active, self._sorted_event)
        return sum(a.nbytes for a in (*arrays, *extra))

    @property
    def max_norm(self) -> float:
        """A bound on the norm of every row held (what ``restore`` may be handed back)."""
        return self._max_norm

    @property
    def scopes(self) -> list[str]:
        """The tenants of the rows held, in code order."""
        return list(self._scope_codes)

    def scope_code(self, scope: str) -> int:
        return self._scope_codes.setdefault(scope, len(self._scope_codes))

    def export(self) -> dict[str, np.ndarray]:
        """The rows as arrays, every row in the date-ordered part (merged first if a tail is
        waiting): ``ids``, ``scope``, ``event``, ``active`` in arrival order; ``codes``,
        ``scales`` and ``order`` (scan position -> arrival position) in scan order. With
        ``scopes``, what ``restore`` needs."""
        with self._lock:
            if self._n > self._sorted_n:
                self._reorder()
            n = self._n
            return {
                "ids": self._ids[:n].copy(),
                "scope": self._scope[:n].copy(),
                "event": self._event[:n].copy(),
                "active": self._active[:n].copy(),
                "codes": self._codes[:n],  # replaced, never edited, by later appends
                "scales": self._scales[:n],
                "order": self._order[:n],
            }

    @classmethod
    def restore(
        cls,
        dim: int,
        arrays: dict[str, np.ndarray],
        rows: int,
        scopes: list[str],
        exact_rows: ExactRows,
        quick_rows: ExactRows | None = None,
        *,
        max_norm: float | None = None,
    ) -> ExactVectorIndex:
        """An index over what ``export`` gave, the arrays adopted as they are (views of a
        mapped file included). They may hold spare rows after the first ``rows`` (room for
        appends, all arrays alike). ``max_norm``: the exported index's ``max_norm``, which
        spares a pass over the codes to bound it again. ``ValueError`` if they do not
        describe a valid index."""
        ids, scope, event, active = (arrays[k] for k in ("ids", "scope", "event", "active"))
        codes, scales, order = arrays["codes"], arrays["scales"], arrays["order"]
        capacity = len(ids)
        n = rows
        consistent = (
            0 <= n <= capacity
            and all(len(a) == capacity for a in (scope, event, active, codes, scales, order))
            and codes.shape[1:] == (dim,)
            and (ids.dtype, scope.dtype, event.dtype, active.dtype)
            == (np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int64), np.dtype(bool))
            and (codes.dtype, scales.dtype, order.dtype)
            == (np.dtype(np.int8), np.dtype(np.float32), np.dtype(np.int64))
            and bool(np.all(ids[1:n] > ids[: n - 1]))
            and (n == 0 or (int(scope[:n].min()) >= 0 and int(scope[:n].max()) < len(scopes)))
            and len(set(scopes)) == len(scopes)
            and bool(np.all(scales[:n] > 0))
            and (max_norm is None or 0 <= max_norm < np.inf)
        )
        if consistent and n:
            seen = np.zeros(n, dtype=bool)
            inside = (order[:n] >= 0) & (order[:n] < n)
            seen[order[:n][inside]] = True
            consistent = bool(inside.all() and seen.all())
        if consistent:
            sorted_event = event[order[:n]]
            consistent = bool(np.all(sorted_event[1:] >= sorted_event[:-1]))
        if not consistent:
            raise ValueError("ExactVectorIndex.restore: the arrays do not describe an index")
        index = cls(dim, exact_rows=exact_rows, quick_rows=quick_rows)
        index._ids, index._scope, index._event, index._active = ids, scope, event, active
        index._codes, index._scales, index._order = codes, scales, order
        index._scan_scope = np.empty(capacity, dtype=np.int32)
        index._scan_scope[:n] = scope[order[:n]]
        index._scan_active = np.empty(capacity, dtype=bool)
        index._scan_active[:n] = active[order[:n]]
        index._sorted_event = sorted_event
        index._n = index._sorted_n = n
        index._max_scale = float(scales[:n].max()) if n else 0.0
        index._max_norm = (
            _max_norm_of_codes(codes[:n], scales[:n]) if max_norm is None else float(max_norm)
        )
        index._inactive = n - int(np.count_nonzero(active[:n]))
        index._scope_codes = {name: code for code, name in enumerate(scopes)}
        return index

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
        vectors = np.asarray(vectors, dtype=np.float32).reshape(count, self.dim)
        with self._lock:
            if self._n and int(ids[0]) <= self.max_id:
                raise ValueError("ExactVectorIndex.append: ids must increase")
            self._reserve(self._n + count)
            start, end = self._n, self._n + count
            self._ids[start:end] = ids
            self._scope[start:end] = [self.scope_code(s) for s in scopes]
            self._event[start:end] = [UNDATED if k is None else k for k in event_keys]
            flags = np.fromiter(active, dtype=bool, count=count)
            self._active[start:end] = flags
            self.version += 1
            self._inactive += count - int(np.count_nonzero(flags))
            if self._exact_rows is None:
                self._exact[start:end] = vectors
            # The tail sits in arrival order, so its scan positions are its arrival positions.
            # Block by block: no temporary as large as the vectors themselves.
            scales = np.empty(count, dtype=np.float32)
            for block in range(0, count, _BLOCK):
                stop = min(block + _BLOCK, count)
                rows = vectors[block:stop]
                norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
                self._max_norm = max(self._max_norm, float(norms.max()))
                scales[block:stop] = _quantize_rows(rows, self._codes[start + block : start + stop])
            self._scales[start:end] = scales
            self._max_scale = max(self._max_scale, float(scales.max()))
            self._order[start:end] = np.arange(start, end)
            self._scan_scope[start:end] = self._scope[start:end]
            self._scan_active[start:end] = flags
            self._n = end

    def set_archived(self, ids: np.ndarray) -> None:
        """Every row held is active except rows ``ids`` (the whole state in one call)."""
        with self._lock:
            known = self._held(ids)
            self._active[: self._n] = True
            self._active[known] = False
            self.version += 1
            self._inactive = len(np.unique(known))
            self._scan_active = self._active_in_scan_order()

    def _active_in_scan_order(self) -> np.ndarray:
        """A new scan-order copy of the states (caller holds the lock): a search keeps the
        one it started with, and reads it as a slice rather than gathering by arrival."""
        active = np.zeros(len(self._scan_active), dtype=bool)
        active[: self._n] = self._active[self._order[: self._n]]
        return active

    def _held(self, ids: np.ndarray) -> np.ndarray:
        """Arrival positions of those of ``ids`` the index holds (caller holds the lock)."""
        n = self._n
        ids = np.asarray(ids, dtype=np.int64)
        if n == 0 or len(ids) == 0:
            return np.empty(0, dtype=np.int64)
        positions = np.minimum(np.searchsorted(self._ids[:n], ids), n - 1)
        return positions[self._ids[positions] == ids]

    def erase(self, ids: np.ndarray) -> None:
        """Make rows ``ids`` what an erased row loads as (a zero vector: codes 0, scale 1)
        and inactive, in place: their quantised copy leaves RAM and what ``export`` writes."""
        with self._lock:
            n = self._n
            known = self._held(ids)
            scan = np.flatnonzero(np.isin(self._order[:n], known))
            self._codes[scan] = 0
            self._scales[scan] = 1
            if self._exact_rows is None:
                self._exact[known] = 0
            self._active[known] = False
            self.version += 1
            self._inactive = n - int(np.count_nonzero(self._active[:n]))
            self._scan_active = self._active_in_scan_order()

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
        first = int(self._ids[0])
        if int(self._ids[n - 1]) - first == n - 1:  # ids without gaps: arithmetic, no search
            positions = np.clip(ids - first, 0, n - 1)
        else:
            positions = np.minimum(np.searchsorted(self._ids[:n], ids), n - 1)
        mask = (self._ids[positions] == ids) & self._active[positions]
        mask &= self._scope[positions] == code
        if as_of is not None:
            mask &= self._event[positions] <= as_of
        if allowed is not None:
            mask &= _among(ids, allowed)
        return mask

    def eligible_by_id(
        self, scope: str, as_of: int | None, allowed: np.ndarray | None = None
    ) -> np.ndarray:
        """``eligible`` for every id at once: a mask indexed by id (``0..max_id``). One pass
        over the rows; cheaper than ``eligible`` when the ids to check are a large share."""
        n = self._n
        ids = self._ids[:n]
        code = self._scope_codes.get(scope)
        dense = np.zeros(int(ids[-1]) + 1 if n else 1, dtype=bool)
        if code is None or n == 0:
            return dense
        mask = self._active[:n].copy()
        if len(self._scope_codes) > 1:
            mask &= self._scope[:n] == code
        if as_of is not None:
            mask &= self._event[:n] <= as_of
        if int(ids[-1]) - int(ids[0]) == n - 1:  # ids without gaps: a slice, no scatter
            dense[int(ids[0]) :] = mask
        else:
            dense[ids] = mask
        if allowed is not None:
            kept = np.zeros(len(dense), dtype=bool)
            kept[allowed[allowed < len(dense)]] = True
            dense &= kept
        return dense

    def members_by_id(self, scope: str) -> np.ndarray:
        """Mask indexed by id (``0..max_id``) of every row of the tenant held, whatever its
        state or date: the rows a tenant's BM25 statistics are taken over."""
        with self._lock:
            n = self._n
            ids = self._ids[:n]
            code = self._scope_codes.get(scope)
            members = np.zeros(int(ids[-1]) + 1 if n else 1, dtype=bool)
            if code is not None and n:
                members[ids] = self._scope[:n] == code
            return members

    def search(
        self,
        query: np.ndarray,
        scope: str,
        as_of: int | None,
        limit: int,
        allowed: np.ndarray | None = None,
    ) -> list[int]:
        """The ``limit`` eligible rows most similar to ``query``; with ``allowed`` (sorted ids
        the search's filters keep), only among those."""
        code = self._scope_codes.get(scope)
        if code is None or self._n == 0 or limit <= 0:
            return []
        query = np.ascontiguousarray(query, dtype=np.float32)
        codes, step, codes_l1, rounding = _quantized(query)
        scan = self._snapshot()
        prefix = scan.sorted_n
        if as_of is not None:
            prefix = int(np.searchsorted(scan.sorted_event, as_of, side="right"))
        # Scanned rows: the sorted part's prefix, then the whole tail. ``approx`` is in units
        # of the query's step: ``step * approx`` approximates the score.
        spans = [(0, prefix)] + ([(scan.sorted_n, scan.n)] if scan.n > scan.sorted_n else [])
        parts = [self._approximate(scan, codes, a, b) for a, b in spans]
        approx = parts[0] if len(parts) == 1 else np.concatenate(parts)
        mask = self._mask(scan, spans, code, as_of, allowed)
        if mask is not None:
            approx[~mask] = -np.inf
        eligible = len(approx) if mask is None else int(np.count_nonzero(mask))
        if eligible == 0:
            return []

        def positions(picked: np.ndarray) -> np.ndarray:  # index into approx -> scan position
            return np.where(picked < prefix, picked, picked + (scan.sorted_n - prefix))

        wanted = min(eligible, _RESCORE * limit)
        if wanted < eligible:
            # The best ``wanted`` approximations, and any tied with the last of them.
            cut = float(np.partition(approx, len(approx) - wanted)[len(approx) - wanted])
            candidates = np.flatnonzero(approx >= cut)
        else:
            candidates = np.flatnonzero(approx > -np.inf)
        exact = self._exact_scores(scan, positions(candidates), query)
        if wanted < eligible:
            # With v = scale * (c + e) and q = step * (d + f), |e_i|, |f_i| <= 1/2, a row's
            # score v.q differs from its approximation scale * step * c.d by
            # step * (scale * e.d + v.f), at most step * (scale * |d|_1 / 2 + |v| |f|): a row
            # left out scores at most its approximation plus that.
            per_scale = _MARGIN * codes_l1 / 2
            fixed = _MARGIN * rounding * self._max_norm
            kth = np.partition(exact, len(exact) - limit)[len(exact) - limit] / step
            slack = self._max_scale * per_scale + fixed
            if cut + slack >= kth:  # a row left out (approx < cut) might still win
                near = np.flatnonzero((approx >= kth - slack) & (approx < cut))
                reach = approx[near] + np.float32(fixed)
                reach += scan.scales[positions(near)] * np.float32(per_scale)
                extra = near[reach >= kth]
                more = self._exact_scores(scan, positions(extra), query)
                candidates = np.concatenate([candidates, extra])
                exact = np.concatenate([exact, more])
        ids = self._ids[scan.order[positions(candidates)]]
        best = np.lexsort((-ids, -exact))[:limit]
        return ids[best].tolist()

    # -- internals -------------------------------------------------------------------------
    def _snapshot(self) -> _Scan:
        with self._lock:
            tail = self._n - self._sorted_n
            if tail > max(_MIN_TAIL, self._sorted_n // 8):
                self._reorder()
            return _Scan(
                self._codes,
                self._scales,
                self._order,
                self._scan_scope,
                self._scan_active,
                self._sorted_event,
                self._sorted_n,
                self._n,
            )

    def _approximate(self, scan: _Scan, codes: np.ndarray, start: int, stop: int) -> np.ndarray:
        """``scale * (row codes . codes)`` for scan positions ``start..stop``."""
        out = np.empty(stop - start, dtype=np.float32)
        rows = stop - start
        if SCAN_THREADS < 2 or rows < _PARALLEL_ROWS:
            _score(scan.codes[start:stop], codes, scan.scales[start:stop], out)
            return out
        chunks = min(_MAX_CHUNKS, max(2, rows // _CHUNK_ROWS))
        cuts = np.linspace(start, stop, chunks + 1).astype(np.int64).tolist()
        shared = _SharedScan(
            [
                (scan.codes[a:b], codes, scan.scales[a:b], out[a - start : b - start])
                for a, b in itertools.pairwise(cuts)
            ]
        )
        pool = _scan_pool()
        for _ in range(min(SCAN_THREADS - 1, chunks - 1)):
            pool.submit(shared.run)
        # This thread takes chunks too, then waits only for the chunks other threads hold: a
        # helper that starts after the last chunk is taken finds nothing and nobody waits.
        shared.run()
        shared.wait()
        return out

    def _mask(
        self,
        scan: _Scan,
        spans: list[tuple[int, int]],
        code: int,
        as_of: int | None,
        allowed: np.ndarray | None,
    ) -> np.ndarray | None:
        """Eligibility of the scanned rows (the spans' positions in turn), or None when every
        one is eligible."""
        parts = []
        for a, b in spans:
            mask = None
            if len(self._scope_codes) > 1:
                mask = scan.scope[a:b] == code
            arrival = scan.order[a:b]
            if self._inactive:
                mask = scan.active[a:b] if mask is None else mask & scan.active[a:b]
            if as_of is not None and a >= scan.sorted_n:  # the tail is not in date order
                dated = self._event[arrival] <= as_of
                mask = dated if mask is None else mask & dated
            if allowed is not None:
                kept = _among(self._ids[arrival], allowed)
                mask = kept if mask is None else mask & kept
            parts.append(mask)
        if all(part is None for part in parts):
            return None
        return np.concatenate(
            [
                np.ones(b - a, dtype=bool) if p is None else p
                for p, (a, b) in zip(parts, spans, strict=True)
            ]
        )

    def _exact_scores(self, scan: _Scan, positions: np.ndarray, query: np.ndarray) -> np.ndarray:
        if len(positions) == 0:
            return np.empty(0, dtype=np.float64)
        arrival = scan.order[positions]
        if self._exact_rows is None:
            rows = self._exact[arrival]
        elif self._quick_rows is None:
            rows = np.asarray(self._exact_rows(self._ids[arrival]), dtype=np.float32)
        else:
            ids = self._ids[arrival]
            # Written into below: copied only if the copy given is not already writable float32.
            rows = np.require(self._quick_rows(ids), dtype=np.float32, requirements="W")
            codes = np.empty((len(rows), self.dim), dtype=np.int8)
            with np.errstate(all="ignore"):  # a damaged row may hold inf or NaN: it fails below
                scales = _quantize_rows(rows, codes)
            # A missing row (zeros), a damaged one or another database's quantizes otherwise.
            # Only a change of less than half a code step in every component, and none in
            # the largest, would pass; it moves a score by less than the scan's rounding.
            wrong = (scales != scan.scales[positions]) | np.any(
                codes != scan.codes[positions], axis=1
            )
            if wrong.any():
                rows[wrong] = self._exact_rows(ids[wrong])
        # Row by row with one kernel, not ``rows @ query``: BLAS blocks the rows, and equal
        # rows in different places of a block came out a rounding apart, so the older of
        # two equal rows could win their tie. In float64: SimSIMD's float32 kernel sums in
        # float32 (errors of 1e-7 on unit vectors), which ordered two OrgMemBench rows
        # 3.6e-9 apart the wrong way round; a few hundred rows widened cost nothing.
        wide = rows.astype(np.float64)
        return np.asarray(simsimd.cdist(query[None, :].astype(np.float64), wide, "dot")).reshape(-1)

    def _reorder(self) -> None:
        """Sort every row into the date-ordered part (caller holds the lock)."""
        n = self._n
        order = self._order[:n]
        events = self._event[order]
        ids = self._ids[order]
        by_date = np.lexsort((ids, events))
        capacity = len(self._scales)
        codes = np.empty((capacity, self.dim), dtype=np.int8)
        codes[:n] = self._codes[:n][by_date]
        scales = np.empty(capacity, dtype=np.float32)
        scales[:n] = self._scales[:n][by_date]
        new_order = np.empty(capacity, dtype=np.int64)
        new_order[:n] = order[by_date]
        scan_scope = np.empty(capacity, dtype=np.int32)
        scan_scope[:n] = self._scope[new_order[:n]]
        # New arrays, never edited in place: a search holding the old ones stays consistent.
        self._codes, self._scales, self._order, self._scan_scope = (
            codes,
            scales,
            new_order,
            scan_scope,
        )
        self._scan_active = self._active_in_scan_order()
        self._sorted_event = events[by_date]
        self._sorted_n = n

    def _reserve(self, needed: int) -> None:
        capacity = len(self._ids)
        if needed <= capacity:
            return
        new_capacity = max(needed, capacity * 2, 1024)
        n = self._n

        def grown(array: np.ndarray) -> np.ndarray:
            out = np.zeros((new_capacity, *array.shape[1:]), dtype=array.dtype)
            out[:n] = array[:n]
            return out

        self._ids, self._scope, self._event, self._active = (
            grown(a) for a in (self._ids, self._scope, self._event, self._active)
        )
        if self._exact_rows is None:
            self._exact = grown(self._exact)
        self._codes, self._scales, self._order, self._scan_scope, self._scan_active = (
            grown(a)
            for a in (
                self._codes,
                self._scales,
                self._order,
                self._scan_scope,
                self._scan_active,
            )
        )


class _SharedScan:
    """The chunks of one scan (``_score`` arguments), taken one at a time by whichever thread
    asks next; ``wait`` returns once every chunk is scored, raising the first error."""

    def __init__(self, jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]):
        self._jobs = jobs
        self._taken = 0
        self._left = len(jobs)
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()

    def run(self) -> None:
        while True:
            with self._lock:
                if self._taken == len(self._jobs):
                    return
                job = self._jobs[self._taken]
                self._taken += 1
            try:
                _score(*job)
            except BaseException as exc:  # handed to the searching thread by ``wait``
                with self._lock:
                    self._error = self._error or exc
            finally:
                with self._lock:
                    self._left -= 1
                    if self._left == 0:
                        self._done.set()

    def wait(self) -> None:
        self._done.wait()
        if self._error is not None:
            raise self._error


def _quantize_rows(rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Each row as int8 ``codes`` (written into the given array) times a scale per row (the
    returned float32 array): ``row ~ scale * code``, the largest component at code 127. A
    zero row gets scale 1 and codes 0."""
    scale = np.abs(rows).max(axis=1) / np.float32(127)
    scale[scale == 0] = 1
    np.rint(rows / scale[:, None], out=codes, casting="unsafe")
    return scale


def _quantized(query: np.ndarray) -> tuple[np.ndarray, float, float, float]:
    """The query as int8 codes on the scan's grid: ``(codes, step, |codes|_1, |rounding|_2)``
    with ``query = step * (codes + rounding)``."""
    top = float(np.abs(query).max()) if len(query) else 0.0
    step = top / 127 if top > 0 else 1.0
    scaled = query / np.float32(step)
    codes = np.rint(scaled).astype(np.int8)
    rounding = float(np.linalg.norm(scaled - codes))
    return codes, step, float(np.abs(codes.astype(np.int32)).sum()), rounding


def _score(rows: np.ndarray, codes: np.ndarray, scales: np.ndarray, out: np.ndarray) -> None:
    """``out[i] = scales[i] * (rows[i] . codes)``: exact int8 dot products, then scaled."""
    if len(rows):
        # Not ``cdist(..., out=out)``: SimSIMD 6.5 returns None from it one reference short,
        # so every such call took one off None's count and a process aborted after some
        # thousands of searches (``tests/test_vectors.py``).
        dots = np.asarray(simsimd.cdist(codes[None, :], rows, "dot", out_dtype="float32"))
        np.multiply(dots.reshape(-1), scales, out=out)


_NORM_ROWS = 1 << 18  # rows per call: a float64 result of 2 MB


def _max_norm_of_codes(codes: np.ndarray, scales: np.ndarray) -> float:
    """An upper bound on the norms of rows known only by their codes: ``|v| <= scale *
    (|c| + |e|)`` with ``|e| <= sqrt(dim) / 2``; a row of zero codes is a zero vector (its
    largest component would have code 127), such as an erased row."""
    if len(codes) == 0:
        return 0.0
    half_steps = np.sqrt(codes.shape[1]) / 2
    bound = 0.0
    for start in range(0, len(codes), _NORM_ROWS):
        chunk = codes[start : start + _NORM_ROWS]
        squares = np.asarray(simsimd.dot(chunk, chunk))
        norms = np.where(squares > 0, np.sqrt(squares) + half_steps, 0.0)
        bound = max(bound, float((scales[start : start + _NORM_ROWS] * norms).max()))
    return bound
