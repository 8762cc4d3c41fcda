"""An exact in-RAM replica of SQLite FTS5's ``bm25()`` ranking, for large stores.

FTS5 scores every row an OR query matches, about a microsecond each; with common words in
a question that is tens of thousands of rows and ~100 ms at 100k records. This index keeps
FTS5's own postings (read from its ``fts5vocab`` tables, so tokens and stems are exactly
FTS5's) as numpy arrays and evaluates the same formula, in the same order, in float64:

    score = sum_i idf_i * f_i * (k1 + 1) / (f_i + k1 * (1 - b + b * D / avgdl))
    idf_i = log((N - n_i + 0.5) / (n_i + 0.5)), or 1e-6 where that is <= 0

with k1 = 1.2, b = 0.75, N and avgdl over the whole FTS table. Scores are bit-identical to
FTS5's, so the ranking (score, then newer id) is the same; tests check this.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence

import numpy as np

K1 = 1.2
B = 0.75


class Bm25Index:
    """Postings ``term -> (ids, term frequencies)`` plus document lengths, append-only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._doclen = np.zeros(1024, dtype=np.float64)  # indexed by record id
        self.rows = 0  # N: rows in the FTS table, including rows without tokens
        self.tokens = 0  # total tokens over all rows
        self.max_id = 0

    def add_postings(
        self, postings: dict[str, tuple[np.ndarray, np.ndarray]], new_rows: int, max_id: int
    ) -> None:
        """Append the postings of rows with ids above ``self.max_id`` (``new_rows`` of them)."""
        with self._lock:
            if max_id >= len(self._doclen):
                grown = np.zeros(max(max_id + 1, 2 * len(self._doclen)), dtype=np.float64)
                grown[: len(self._doclen)] = self._doclen
                self._doclen = grown
            for term, (ids, tf) in postings.items():
                self._chunks.setdefault(term, []).append((ids, tf))
                np.add.at(self._doclen, ids, tf)
                self.tokens += int(tf.sum())
            self.rows += new_rows
            self.max_id = max(self.max_id, max_id)

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        chunks = self._chunks.get(term)
        if not chunks:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        if len(chunks) > 1:  # merge lazily, once per term after each round of appends
            chunks[:] = [
                (np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]))
            ]
        return chunks[0]

    def _scores(
        self, ids: np.ndarray, tf: np.ndarray, matches: int, n_rows: int, avgdl: float
    ) -> np.ndarray:
        idf = math.log((n_rows - matches + 0.5) / (matches + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        length = self._doclen[ids]
        return idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * length / avgdl)))

    def phrase_scores(self, ids: np.ndarray, tf: np.ndarray, matches: int) -> np.ndarray:
        """BM25 of a phrase occurring ``tf`` times in rows ``ids`` and matching ``matches``
        rows in all, under this index's row count and lengths (for ``search(extra=)``)."""
        with self._lock:
            if self.rows == 0 or len(ids) == 0:
                return np.zeros(len(ids), dtype=np.float64)
            return self._scores(ids, tf, matches, self.rows, self.tokens / self.rows)

    def search(
        self,
        terms: Sequence[str],
        conjunctive: bool,
        eligible: Callable[[np.ndarray], np.ndarray],
        limit: int,
        extra: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> list[int]:
        """Ids of the best ``limit`` eligible rows, best first, ties to the newer id.

        ``terms`` are FTS5 tokens (one per query phrase, in query order); ``eligible`` maps
        candidate ids to a boolean mask (tenant, active, as-of), applied before ranking.
        ``extra`` = (ids, scores) adds the scores of multi-word phrases, which FTS5 computes
        (it knows positions); a row matching a phrase also matches its words.
        """
        if not terms or limit <= 0 or self.rows == 0:
            return []
        with self._lock:
            lists = [self._postings(term) for term in terms]
            avgdl = self.tokens / self.rows
            n_rows = self.rows
            size = self.max_id + 1
            score = np.zeros(size, dtype=np.float64)
            hits = np.zeros(size, dtype=np.int16)
            for ids, tf in lists:
                if len(ids) == 0:
                    continue
                score[ids] += self._scores(ids, tf, len(ids), n_rows, avgdl)
                hits[ids] += 1
            if extra is not None:
                ids, values = extra
                known = ids < size
                np.add.at(score, ids[known], values[known])
        needed = len(terms) if conjunctive else 1
        candidates = np.flatnonzero(hits >= needed)
        if len(candidates) == 0:
            return []
        candidates = candidates[eligible(candidates)]
        if len(candidates) > limit:
            values = score[candidates]
            cutoff = np.partition(values, len(values) - limit)[len(values) - limit]
            candidates = candidates[values >= cutoff]  # ties at the cut stay for the tie-break
        order = np.lexsort((-candidates, -score[candidates]))[:limit]
        return candidates[order].tolist()
