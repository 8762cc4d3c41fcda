"""BM25 for the PostgreSQL engine: an in-RAM replica of each scope's ``tsvector`` postings.

PostgreSQL's own full-text ranking, ``ts_rank_cd`` (cover density), has no collection
statistics: a common word weighs as much as a rare one, and it must score every matching row,
which for an OR of common words is most of a scope. The default preset ranks by BM25 instead,
as SQLite does. This replica holds, per scope, the postings of PostgreSQL's own ``tsvector``
column (Snowball lexemes; a lexeme's term frequency is its number of positions) in a
:class:`mempp.index.bm25.Bm25Index` over row numbers local to the scope, plus each row's event key,
and scores with the same formula (k1 = 1.2, b = 0.75; N and the mean length over the scope's
rows of every state and date, as FTS5 counts over its whole table).

PostgreSQL keeps at most 255 positions of a lexeme per row, so on long rows with a very
frequent word its frequency (and the row's length) is counted lower than FTS5 counts it.

Two-word phrases are matched from the positions held beside the postings (``Positions``):
GIN keeps none, so in SQL every row holding both words was read from the heap to check that
they stand side by side (p95 183 ms, p99 876 ms at 1M rows, docs/scaling.md). The positions
are PostgreSQL's own, so the rows found, and how often, are the ones ``phraseto_tsquery``
finds (``_phrase_rows_sql``, the reference the tests compare with).

Freshness and states: before each search, the rows with ids above the newest one held are
read; PostgreSQL keeps the active rows of the ranking (``mempp.store.postgres.replicas``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from mempp.index.bm25 import Bm25Index

# (ids, event keys, {lexeme: (ids, term frequencies, positions)}) of the rows after a given
# id; a lexeme's positions are those of its rows in turn, each row's ascending.
Postings = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
Fetch = Callable[[int], tuple[np.ndarray, np.ndarray, Postings]]
# A row's positions in its tsvector run from 1 to 16,383; a key adds the row's place in the
# phrase's rows times this.
_POSITION_SPAN = 1 << 15
_EMPTY_IDS = np.empty(0, dtype=np.int64)


class Positions:
    """Each lexeme's positions (int16), in the order of its BM25 postings: rows ascending,
    each row's positions ascending. A catch-up appends a chunk per lexeme; a lexeme's chunks
    are joined when it is next read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: dict[str, list[np.ndarray]] = {}
        self.nbytes = 0

    def add(self, positions: dict[str, np.ndarray]) -> None:
        with self._lock:
            for lexeme, chunk in positions.items():
                self._chunks.setdefault(lexeme, []).append(chunk)
                self.nbytes += chunk.nbytes

    def of(self, lexeme: str, count: int) -> np.ndarray:
        """The lexeme's first ``count`` positions (those of the postings read before: a
        catch-up adds positions before the postings they belong to)."""
        with self._lock:
            chunks = self._chunks.get(lexeme)
            if not chunks:
                return np.empty(0, dtype=np.int16)
            if len(chunks) > 1:
                chunks[:] = [np.concatenate(chunks)]
            return chunks[0][:count]


class ScopeReplica:
    """One scope's postings. ``catch_up`` runs with ``lock`` held; ``ranked`` may run beside
    it, because a catch-up extends ``ids`` and ``keys`` before the postings that refer to them.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.index = Bm25Index()
        self.positions = Positions()
        self.ids = np.empty(0, dtype=np.int64)  # local row number -> record id, increasing
        self.keys = np.empty(0, dtype=np.int64)  # local row number -> event key

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def newest(self) -> int:
        return int(self.ids[-1]) if len(self.ids) else 0

    def catch_up(self, fetch: Fetch) -> None:
        """Append the rows ``fetch`` returns after the newest id held."""
        ids, keys, postings = fetch(self.newest)
        if len(ids) == 0:
            return
        start = len(self.ids)
        # Row numbers grow with ids, so "newer id first" is "larger row number first".
        self.ids = np.concatenate([self.ids, ids])
        self.keys = np.concatenate([self.keys, keys])
        local = {
            lexeme: (start + np.searchsorted(ids, rows), tf)
            for lexeme, (rows, tf, _) in postings.items()
        }
        # Positions before postings: a phrase reads a lexeme's postings, then as many of its
        # positions as those postings hold.
        self.positions.add({lexeme: held for lexeme, (_, _, held) in postings.items()})
        self.index.add_postings(local, len(ids), len(self.ids) - 1)

    def phrase_rows(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per (first lexeme, second lexeme): the record ids of the rows where the second
        stands right after the first, and how often it does (pairs found nowhere left out)."""
        found = []
        for first, second in pairs:
            ids, occurrences = self._phrase(first, second)
            if len(ids):
                found.append((ids, occurrences))
        return found

    def _phrase(self, first: str, second: str) -> tuple[np.ndarray, np.ndarray]:
        rows_a, tf_a = self.index.postings(first)
        rows_b, tf_b = self.index.postings(second)
        common, at_a, at_b = np.intersect1d(rows_a, rows_b, assume_unique=True, return_indices=True)
        if len(common) == 0:
            return _EMPTY_IDS, np.empty(0, dtype=np.float64)
        counts_a, counts_b = tf_a.astype(np.int64), tf_b.astype(np.int64)
        group_a, keys_a = _keys(at_a, counts_a, self.positions.of(first, int(counts_a.sum())))
        _, keys_b = _keys(at_b, counts_b, self.positions.of(second, int(counts_b.sum())))
        # Both key arrays ascend (rows, then positions): a position of the first word followed
        # by one of the second is a key of ``keys_a`` plus one found in ``keys_b``.
        wanted = keys_a + 1
        place = np.minimum(np.searchsorted(keys_b, wanted), len(keys_b) - 1)
        adjacent = keys_b[place] == wanted
        occurrences = np.bincount(group_a[adjacent], minlength=len(common))
        matched = occurrences > 0
        return self.ids[common[matched]], occurrences[matched].astype(np.float64)

    def ranked(
        self,
        lexemes: Sequence[str],
        conjunctive: bool,
        as_of: int | None,
        limit: int,
        phrases: Sequence[tuple[np.ndarray, np.ndarray]] = (),
    ) -> np.ndarray:
        """Record ids of the best ``limit`` rows dated up to ``as_of``, best first (any
        state). ``phrases`` holds, per phrase, the (record ids, occurrences) of every row of
        the scope where it occurs; each adds its BM25 like one more query term."""

        def eligible(rows: np.ndarray) -> np.ndarray:
            if as_of is None:
                return np.ones(len(rows), dtype=bool)
            return self.keys[rows] <= as_of  # read now: it covers every row ranked

        extra = None
        parts = []
        ids = self.ids
        for record_ids, tf in phrases:
            rows = np.searchsorted(ids, record_ids)
            held = rows < len(ids)
            held[held] = ids[rows[held]] == record_ids[held]
            rows, tf = rows[held], tf[held]
            parts.append((rows, self.index.phrase_scores(rows, tf, len(rows))))
        if parts:
            extra = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        rows = self.index.search(
            lexemes, conjunctive, eligible, limit, None if extra is None else lambda: extra
        )
        return self.ids[np.asarray(rows, dtype=np.int64)]  # read after the ranking, likewise


def _keys(
    picked: np.ndarray, counts: np.ndarray, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For the postings ``picked`` (places in a lexeme's postings, ascending) with the
    lexeme's ``counts`` of positions per posting: each of their positions' group (the place
    in ``picked``) and key ``group * _POSITION_SPAN + position``."""
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    sizes = counts[picked]
    group = np.repeat(np.arange(len(picked), dtype=np.int64), sizes)
    # Position k of a picked posting is at its start plus k.
    offsets = np.arange(len(group), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    held = positions[np.repeat(starts[picked], sizes) + offsets]
    return group, group * _POSITION_SPAN + held
