"""BM25 for the PostgreSQL engine: an in-RAM replica of each scope's ``tsvector`` postings.

PostgreSQL's own full-text ranking, ``ts_rank_cd`` (cover density), has no collection
statistics: a common word weighs as much as a rare one, and it must score every matching row,
which for an OR of common words is most of a scope. The default preset ranks by BM25 instead,
as SQLite does. This replica holds, per scope, the postings of PostgreSQL's own ``tsvector``
column (Snowball lexemes; a lexeme's term frequency is its number of positions) in a
:class:`mempp.bm25.Bm25Index` over row numbers local to the scope, plus each row's event key,
and scores with the same formula (k1 = 1.2, b = 0.75; N and the mean length over the scope's
rows of every state and date, as FTS5 counts over its whole table).

PostgreSQL keeps at most 255 positions of a lexeme per row, so on long rows with a very
frequent word its frequency (and the row's length) is counted lower than FTS5 counts it.

Freshness and states: before each search, the rows with ids above the newest one held are
read; PostgreSQL keeps the active rows of the ranking (``mempp.store.postgres.replicas``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from mempp.bm25 import Bm25Index

# (ids, event keys, {lexeme: (ids, term frequencies)}) of the rows after a given id.
Fetch = Callable[[int], tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]]


class ScopeReplica:
    """One scope's postings. ``catch_up`` runs with ``lock`` held; ``ranked`` may run beside
    it, because a catch-up extends ``ids`` and ``keys`` before the postings that refer to them.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.index = Bm25Index()
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
            for lexeme, (rows, tf) in postings.items()
        }
        self.index.add_postings(local, len(ids), len(self.ids) - 1)

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
