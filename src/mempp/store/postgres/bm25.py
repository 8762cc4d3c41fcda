"""BM25 for the PostgreSQL engine: an in-RAM replica of each scope's postings.

PostgreSQL's own full-text ranking, ``ts_rank_cd`` (cover density), has no collection
statistics: a common word weighs as much as a rare one, and it must score every matching row,
which for an OR of common words is most of a scope. The default preset ranks by BM25 instead,
as SQLite does. This replica holds, per scope, the postings of the rows' ``terms`` (FTS5's
tokens of each text, ``mempp.index.analysis``, schema 10: a term's frequency is its number of
occurrences, uncapped, and a row's length its number of tokens, as FTS5 counts them) in a
:class:`mempp.index.bm25.Bm25Index` over row numbers local to the scope, plus each row's event
key, and scores with the same formula (k1 = 1.2, b = 0.75; N and the mean length over the
scope's rows of every state and date, as FTS5 counts over its whole table).

Phrases (a question's adjacent words, or a query word FTS5 reads as several tokens) are
matched from the token positions held beside the postings (``Positions``), as FTS5 matches
them: the rows found, and how often, are those where the tokens stand in turn.

Freshness and states: before each search, the rows with ids above the newest one held are
read; PostgreSQL keeps the active rows of the ranking (``mempp.store.postgres.replicas``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from mempp.index.bm25 import Bm25Index

# (ids, event keys, {term: (ids, term frequencies, positions)}) of the rows after a given
# id; a term's positions are those of its rows in turn, each row's ascending.
Postings = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
Fetch = Callable[[int], tuple[np.ndarray, np.ndarray, Postings]]
# A row's token positions (from 1) are below this; a key adds the row's place in the phrase's
# rows times this.
_POSITION_SPAN = 1 << 32
_EMPTY_IDS = np.empty(0, dtype=np.int64)


class Positions:
    """Each term's positions (int32), in the order of its BM25 postings: rows ascending,
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
                return np.empty(0, dtype=np.int32)
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

    def phrase_rows(self, phrases: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per phrase (its terms, one or more): the record ids of the rows where its terms
        stand in turn, and how often they do (empty arrays where it occurs nowhere)."""
        return [self._phrase(tuple(terms)) for terms in phrases]

    def _phrase(self, terms: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        lists = [self.index.postings(term) for term in terms]
        if len(terms) == 1:
            rows, tf = lists[0]
            return self.ids[rows], tf
        common = lists[0][0]
        for rows, _ in lists[1:]:
            common = np.intersect1d(common, rows, assume_unique=True)
        if len(common) == 0:
            return _EMPTY_IDS, np.empty(0, dtype=np.float64)
        keys = []
        for term, (rows, tf) in zip(terms, lists, strict=True):
            counts = tf.astype(np.int64)
            picked = np.searchsorted(rows, common)
            group, term_keys = _keys(picked, counts, self.positions.of(term, int(counts.sum())))
            keys.append((group, term_keys))
        # Every key array ascends (rows, then positions): the phrase starts at a position of
        # its first term where the k-th term stands k places further on, for every k.
        group, starts = keys[0]
        found = np.ones(len(starts), dtype=bool)
        for shift, (_, term_keys) in enumerate(keys[1:], start=1):
            wanted = starts + shift
            place = np.minimum(np.searchsorted(term_keys, wanted), len(term_keys) - 1)
            found &= term_keys[place] == wanted
        occurrences = np.bincount(group[found], minlength=len(common))
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
        the scope where it occurs; each adds its BM25 like one more query term, and in
        ``conjunctive`` mode a row must hold every one of them too."""
        parts = self._phrase_parts(phrases, conjunctive)
        if parts is None:
            return _EMPTY_IDS
        required, extra = parts

        def eligible(rows: np.ndarray) -> np.ndarray:
            keep = _holding(rows, required)
            if as_of is not None:
                keep &= self.keys[rows] <= as_of  # read now: it covers every row ranked
            return keep

        rows = self.index.search(
            lexemes, conjunctive, eligible, limit, None if extra is None else lambda: extra
        )
        return self.ids[np.asarray(rows, dtype=np.int64)]  # read after the ranking, likewise

    def scored(
        self,
        lexemes: Sequence[str],
        conjunctive: bool,
        phrases: Sequence[tuple[np.ndarray, np.ndarray]] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """The record ids of every row the query matches (any state or date), ascending,
        and their BM25, as ``ranked`` ranks them."""
        parts = self._phrase_parts(phrases, conjunctive)
        if parts is None:
            return _EMPTY_IDS, np.empty(0, dtype=np.float64)
        required, extra = parts
        rows, score = self.index.scored(
            lexemes, conjunctive, None if extra is None else lambda: extra
        )
        rows = rows[_holding(rows, required)]
        return self.ids[rows], score[rows]

    def _phrase_parts(
        self, phrases: Sequence[tuple[np.ndarray, np.ndarray]], conjunctive: bool
    ) -> tuple[list[np.ndarray], tuple[np.ndarray, np.ndarray] | None] | None:
        """The row numbers of each phrase's rows (in conjunctive mode, where a row must hold
        them all) and the phrases' (row numbers, BM25) to add; None if a conjunctive phrase
        occurs nowhere."""
        required = []
        parts = []
        ids = self.ids
        for record_ids, tf in phrases:
            if conjunctive and len(record_ids) == 0:
                return None
            rows = np.searchsorted(ids, record_ids)
            held = rows < len(ids)
            held[held] = ids[rows[held]] == record_ids[held]
            rows, tf = rows[held], tf[held]
            if conjunctive:
                required.append(rows)
            parts.append((rows, self.index.phrase_scores(rows, tf, len(rows))))
        if not parts:
            return required, None
        return required, (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
        )


def _holding(rows: np.ndarray, required: Sequence[np.ndarray]) -> np.ndarray:
    """Which of ``rows`` are in every one of ``required`` (ascending row numbers each)."""
    keep = np.ones(len(rows), dtype=bool)
    for held in required:
        if len(held) == 0:
            return np.zeros(len(rows), dtype=bool)
        place = np.minimum(np.searchsorted(held, rows), len(held) - 1)
        keep &= held[place] == rows
    return keep


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
