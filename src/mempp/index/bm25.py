"""An exact in-RAM replica of SQLite FTS5's ``bm25()`` ranking, for large stores.

FTS5 scores every row an OR query matches, about a microsecond each; with common words in
a question that is tens of thousands of rows and ~100 ms at 100k records. This index keeps
FTS5's own postings (read from its ``fts5vocab`` tables, so tokens and stems are exactly
FTS5's) as numpy arrays and evaluates the same formula, in the same order, in float64:

    score = sum_i idf_i * f_i * (k1 + 1) / (f_i + k1 * (1 - b + b * D / avgdl))
    idf_i = log((N - n_i + 0.5) / (n_i + 0.5)), or 1e-6 where that is <= 0

with k1 = 1.2, b = 0.75, N and avgdl over the whole FTS table. Scores are bit-identical to
FTS5's, so the ranking (score, then newer id) is the same; tests check this.

The statistics may instead be taken over a subset of the rows (``Among``: one tenant's rows in
a file that holds several), so that one tenant's words never move another's ranking: N, avgdl
and each term's document frequency are then those of the subset, as PostgreSQL's per-scope
replica computes them. ``idf``, ``length_norms`` and ``term_scores`` are the formula itself,
pure, shared by every caller and both engines.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from mempp.index import array_file

K1 = 1.2
B = 0.75


def idf(rows: int, matches: int) -> float:
    """A term's weight among ``rows`` rows of which ``matches`` hold it, as FTS5 computes it
    (never below 1e-6, so every match scores above zero)."""
    value = math.log((rows - matches + 0.5) / (matches + 0.5))
    return 1e-6 if value <= 0.0 else value


def length_norms(lengths: np.ndarray, rows: int, tokens: int) -> np.ndarray:
    """``k1 * (1 - b + b * D / avgdl)`` for rows of ``lengths`` tokens, avgdl = tokens / rows
    (FTS5's expression, in its order)."""
    avgdl = tokens / rows
    return K1 * (1 - B + B * lengths / avgdl)


def term_scores(tf: np.ndarray, norms: np.ndarray, weight: float) -> np.ndarray:
    """``weight * tf * (k1 + 1) / (tf + norm)`` per row; ``norms`` is consumed (the result is
    written into it). ``+`` and ``*`` commute exactly in IEEE 754, so this equals FTS5's."""
    norms += tf
    np.divide(tf * (K1 + 1.0), norms, out=norms)
    norms *= weight
    return norms


def frequencies_from_scores(
    scores: np.ndarray, lengths: np.ndarray, rows: int, tokens: int, matches: int
) -> np.ndarray:
    """How often a phrase occurs in each row, from FTS5's bm25 of that phrase alone (which
    FTS5 reports; the count it does not): s = w f (k1 + 1) / (f + norm) gives
    f = s norm / (w (k1 + 1) - s), an integer, under the statistics FTS5 scored with (its
    table's ``rows`` and ``tokens``; ``matches`` rows hold the phrase; rows of ``lengths``)."""
    weight = idf(rows, matches)
    norms = length_norms(lengths, rows, tokens)
    return np.rint(scores * norms / (weight * (K1 + 1.0) - scores))


@dataclass(frozen=True, slots=True)
class Among:
    """The rows BM25's statistics are taken over: ``members`` a mask indexed by row id (ids
    past its end are not members), their number ``rows`` (rows without tokens included) and
    their ``tokens`` in all. Made by ``Bm25Index.among``."""

    members: np.ndarray
    rows: int
    tokens: int


def _within(ids: np.ndarray, tf: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The postings of ``ids`` that are members."""
    keep = np.zeros(len(ids), dtype=bool)
    inside = ids < len(members)
    keep[inside] = members[ids[inside]]
    return ids[keep], tf[keep]


# The file written by Bm25Index.save (format 1 was a NumPy .npz, still read).
_FILE_KIND = "mempp bm25 replica"
_FILE_FORMAT = 2

# Appended postings are merged into the flat arrays once they hold this share of all pairs
# (or at least _MIN_DELTA pairs): searches meanwhile concatenate a term's few appended chunks.
_DELTA_SHARE = 8
_MIN_DELTA = 200_000


class _Run:
    """Terms ``0 .. k-1`` in sorted order, as UTF-8 in one blob (uint8, perhaps mapped) with
    offsets: no str objects, and no bytes but those a lookup's bisection visits. UTF-8 byte
    order is code point order, so bytes compare as the terms do."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self._blob = blob
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, number: int) -> bytes:
        return self._blob[int(self._offsets[number]) : int(self._offsets[number + 1])].tobytes()


class _Terms:
    """``term -> number``: a sorted run of terms (numbers 0 .. k-1) found by bisection, then a
    dict of the terms numbered after it. A replica built from FTS5 reads its terms in sorted
    order, so loading a saved one needs no dict of a million entries (a second at 1M rows)."""

    def __init__(self, run: _Run | None = None, after: Sequence[str] = ()) -> None:
        self._sorted = run or _Run(np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
        start = len(self._sorted)
        self._added = {name: number for number, name in enumerate(after, start=start)}

    @classmethod
    def from_names(cls, names: list[str]) -> _Terms:
        """Terms in number order; the longest sorted prefix becomes the run."""
        encoded = [name.encode("utf-8") for name in names]
        run = _sorted_run(encoded)
        blob, offsets = _packed(encoded[:run])
        return cls(_Run(np.frombuffer(blob, dtype=np.uint8), offsets), names[run:])

    def __len__(self) -> int:
        return len(self._sorted) + len(self._added)

    def __iter__(self) -> Iterator[str]:
        """Every term in number order."""
        for number in range(len(self._sorted)):
            yield self._sorted[number].decode("utf-8")
        yield from self._added

    def get(self, term: str) -> int | None:
        key = term.encode("utf-8")
        at = bisect.bisect_left(self._sorted, key)
        if at < len(self._sorted) and self._sorted[at] == key:
            return at
        return self._added.get(term)

    def number(self, term: str) -> int:
        """The term's number, a new one if it is new."""
        found = self.get(term)
        if found is None:
            found = self._added[term] = len(self)
        return found


def _sorted_run(encoded: Sequence[bytes]) -> int:
    """How many leading terms are in strictly increasing order."""
    run = 1 if encoded else 0
    for before, after in zip(encoded, islice(encoded, 1, None), strict=False):
        if before >= after:
            break
        run += 1
    return run


def _packed(encoded: Sequence[bytes]) -> tuple[bytes, np.ndarray]:
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return b"".join(encoded), offsets


class Bm25Index:
    """Postings ``term -> (ids, term frequencies)`` plus document lengths, append-only.

    Postings are flat arrays (CSR): a term dictionary (``term -> number``), ``indptr`` (where
    each term's pairs start), then every term's ids in increasing order and their
    frequencies, in the smallest integer types that hold them (typically 5 bytes a pair,
    against 16 in one pair of int64/float64 arrays per term). Appended postings wait in a
    small delta and are merged in bulk.

    ``postings(term)`` and ``lengths(ids)`` give what per-scope statistics need (a term's
    document frequency among a scope's rows, their mean length).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._terms = _Terms()
        self._indptr = np.zeros(1, dtype=np.int64)
        self._ids = np.empty(0, dtype=np.int32)
        self._tf = np.empty(0, dtype=np.uint8)
        self._delta: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._delta_pairs = 0
        self._doclen = np.zeros(1024, dtype=np.float64)  # indexed by record id
        self.rows = 0  # N: rows in the FTS table, including rows without tokens
        self.tokens = 0  # total tokens over all rows
        self.max_id = 0
        self.label = ""  # the caller's note on what the index covers, kept by save/load
        # k1 * (1 - b + b * D / avgdl) per row id, for the statistics it was computed under.
        self._norms = np.empty(0, dtype=np.float64)
        self._norms_for: tuple[int, int, int] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the flat arrays and document lengths (not the term dictionary)."""
        held = self._indptr.nbytes + self._ids.nbytes + self._tf.nbytes + self._doclen.nbytes
        return held + sum(a.nbytes + b.nbytes for c in self._delta.values() for a, b in c)

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
                if len(ids) == 0:
                    continue
                number = self._terms.number(term)
                self._delta.setdefault(number, []).append((ids, tf))
                self._doclen[ids] += tf  # a term's ids are distinct
                self.tokens += int(tf.sum())
                self._delta_pairs += len(ids)
            self.rows += new_rows
            self.max_id = max(self.max_id, max_id)
            if self._delta_pairs > max(_MIN_DELTA, len(self._ids) // _DELTA_SHARE):
                self._merge()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` (``mempp.index.array_file``: a checksummed header and raw
        arrays), atomically: a reader sees the old file or the new one. ``load`` reads it
        back; postings added later are appended."""
        with self._lock:
            if self._delta:
                self._merge()
            encoded = [name.encode("utf-8") for name in self._terms]
            run = _sorted_run(encoded)
            blob, offsets = _packed(encoded)
            meta = {
                "kind": _FILE_KIND,
                "version": _FILE_FORMAT,
                "rows": self.rows,
                "tokens": self.tokens,
                "max_id": self.max_id,
                "label": self.label,
                "sorted_terms": run,  # terms 0 .. run-1 are in sorted order
            }
            arrays = {
                "terms": np.frombuffer(blob, dtype=np.uint8),
                "term_offsets": offsets,
                "indptr": self._indptr,
                "ids": self._ids,
                "tf": self._tf,
                "doclen": self._doclen[: self.max_id + 1],
            }
            array_file.write(path, meta, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Bm25Index:
        """The index ``save`` wrote (or an earlier mempp's ``.npz``); ``ValueError`` naming
        the file if it is not one. The file is mapped, not read (``array_file.read(...,
        mapped=True, lazy=True)``): a load is one pass over it (the checksums), the postings
        stay in the OS's page cache, and a search pages in only its terms' lists."""
        try:
            with open(path, "rb") as source:
                magic = source.read(len(array_file.MAGIC))
        except OSError as error:
            raise ValueError(f"{path}: not a BM25 index file ({error})") from None
        if magic != array_file.MAGIC:
            return cls._load_npz(path)
        return array_file.load_lazily(path, cls._from_arrays, "a BM25 index file")

    @classmethod
    def _from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Bm25Index:
        if (meta["kind"], int(meta["version"])) != (_FILE_KIND, _FILE_FORMAT):
            raise ValueError("another kind or version")
        rows, tokens, max_id = (int(meta[k]) for k in ("rows", "tokens", "max_id"))
        run, label = int(meta["sorted_terms"]), str(meta["label"])
        blob, offsets = arrays["terms"], arrays["term_offsets"]
        indptr, ids, tf, doclen = (arrays[k] for k in ("indptr", "ids", "tf", "doclen"))
        consistent = (
            blob.dtype == np.uint8
            and offsets.dtype == np.int64
            and len(offsets) >= 1
            and 0 <= run < len(offsets)
            and int(offsets[0]) == 0
            and int(offsets[-1]) == len(blob)
            and bool(np.all(np.diff(offsets) >= 0))
        )
        if not consistent:
            raise ValueError("its terms do not add up")
        after = [
            blob[int(offsets[n]) : int(offsets[n + 1])].tobytes().decode("utf-8")
            for n in range(run, len(offsets) - 1)
        ]
        terms = _Terms(_Run(blob[: int(offsets[run])], offsets[: run + 1]), after)
        return cls._assembled(terms, indptr, ids, tf, doclen, rows, tokens, max_id, label)

    @classmethod
    def _load_npz(cls, path: str | os.PathLike[str]) -> Bm25Index:
        """The ``.npz`` of format 1 (mempp before the array file)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
            version, rows, tokens, max_id = (int(v) for v in arrays["format"])
            terms = bytes(arrays["terms"]).decode("utf-8")
            indptr, ids, tf, doclen = (arrays[k] for k in ("indptr", "ids", "tf", "doclen"))
            label = bytes(arrays["label"]).decode("utf-8")
        except (OSError, KeyError, ValueError, TypeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not a BM25 index file ({error})") from None
        if version != 1:
            raise ValueError(f"{path}: not a BM25 index file of format 1")
        names = _Terms.from_names(terms.split("\0") if terms else [])
        try:
            return cls._assembled(names, indptr, ids, tf, doclen, rows, tokens, max_id, label)
        except ValueError as error:
            raise ValueError(f"{path}: not a BM25 index file ({error})") from None

    @classmethod
    def _assembled(
        cls,
        terms: _Terms,
        indptr: np.ndarray,
        ids: np.ndarray,
        tf: np.ndarray,
        doclen: np.ndarray,
        rows: int,
        tokens: int,
        max_id: int,
        label: str,
    ) -> Bm25Index:
        consistent = (
            len(indptr) == len(terms) + 1
            and int(indptr[0]) == 0
            and bool(np.all(np.diff(indptr) >= 0))
            and int(indptr[-1]) == len(ids) == len(tf)
            and len(doclen) == max_id + 1
            and (len(ids) == 0 or int(ids.max()) <= max_id)
        )
        if not consistent:
            raise ValueError("its arrays do not add up")
        index = cls()
        index._terms = terms
        index._indptr, index._ids, index._tf = indptr, ids, tf
        # Held as read (mapped, or the .npz's copy): rows appended later have ids above
        # max_id, so add_postings grows it into RAM before it writes any.
        index._doclen = doclen.astype(np.float64, copy=False)
        index.rows, index.tokens, index.max_id = rows, tokens, max_id
        index.label = label
        return index

    @classmethod
    def from_flat(cls, flat: FlatPostings, rows: int, max_id: int) -> Bm25Index:
        """An index of the postings ``flat_postings`` read (``rows`` rows, ids up to
        ``max_id``), assembled in bulk: a few passes over all pairs, where ``add_postings``
        costs some numpy calls per term (a second for the 4,000 terms of 1,000 short rows)."""
        names, indptr, ids, tf = flat
        index = cls()
        index._terms = _Terms.from_names(names)
        index._indptr = indptr
        id_type = np.min_scalar_type(max(max_id, 0))
        index._ids = ids.astype(np.int32 if id_type.itemsize < 4 else id_type)  # as _merge
        top_tf = int(tf.max()) if len(tf) else 0
        index._tf = tf.astype(np.min_scalar_type(top_tf))
        index._doclen = np.zeros(max(1024, max_id + 1), dtype=np.float64)
        if len(ids):
            index._doclen[: int(ids.max()) + 1] = np.bincount(ids, weights=tf)
        index.rows, index.tokens, index.max_id = rows, int(tf.sum()), max_id
        return index

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """A term's ids (increasing) and frequencies (float64)."""
        with self._lock:
            return self._postings(term)

    def lengths(self, ids: np.ndarray) -> np.ndarray:
        """Token counts of rows ``ids`` (float64)."""
        with self._lock:
            return self._doclen[ids]

    def among(self, members: np.ndarray) -> Among:
        """The statistics of the rows ``members`` marks (a mask by id): their number and their
        tokens, over the rows held (ids past ``max_id`` are left out, so the three agree)."""
        with self._lock:
            held = members[: self.max_id + 1]
            tokens = int(self._doclen[: len(held)][held].sum())
        return Among(held, int(np.count_nonzero(held)), tokens)

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        number = self._terms.get(term)
        if number is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        ids: list[np.ndarray] = []
        tf: list[np.ndarray] = []
        if number + 1 < len(self._indptr):
            start, stop = self._indptr[number], self._indptr[number + 1]
            ids.append(self._ids[start:stop])
            tf.append(self._tf[start:stop])
        for chunk_ids, chunk_tf in self._delta.get(number, ()):
            ids.append(chunk_ids)
            tf.append(chunk_tf)
        if len(ids) == 1:
            return ids[0], tf[0].astype(np.float64)
        return np.concatenate(ids), np.concatenate(tf).astype(np.float64)

    def _merge(self) -> None:
        """Fold the delta into the flat arrays (caller holds the lock)."""
        count = len(self._terms)
        held = np.diff(self._indptr)
        sizes = np.zeros(count, dtype=np.int64)
        sizes[: len(held)] = held
        for number, chunks in self._delta.items():
            sizes[number] += sum(len(c[0]) for c in chunks)
        indptr = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(sizes, out=indptr[1:])
        top_id = max(self.max_id, 0)
        top_tf = max(
            [int(self._tf.max()) if len(self._tf) else 0]
            + [int(c[1].max()) for chunks in self._delta.values() for c in chunks]
        )
        ids = np.empty(int(indptr[-1]), dtype=np.min_scalar_type(top_id))
        if ids.dtype.itemsize < 4:
            ids = ids.astype(np.int32)  # one index type for every small store
        tf = np.empty(len(ids), dtype=np.min_scalar_type(top_tf))
        old = self._indptr
        for number in range(count):
            at = int(indptr[number])
            if number + 1 < len(old):
                begin, end = int(old[number]), int(old[number + 1])
                ids[at : at + end - begin] = self._ids[begin:end]
                tf[at : at + end - begin] = self._tf[begin:end]
                at += end - begin
            for chunk_ids, chunk_tf in self._delta.get(number, ()):
                ids[at : at + len(chunk_ids)] = chunk_ids
                tf[at : at + len(chunk_ids)] = chunk_tf
                at += len(chunk_ids)
        self._indptr, self._ids, self._tf = indptr, ids, tf
        self._delta = {}
        self._delta_pairs = 0

    def _row_norms(self) -> np.ndarray:
        """``length_norms`` of every row id under the whole index's statistics (caller holds
        the lock).

        Computed once per state of the statistics rather than per posting: a question with
        common words has hundreds of thousands of postings at 1M rows."""
        state = (self.rows, self.tokens, self.max_id)
        if self._norms_for != state:
            self._norms = length_norms(self._doclen[: self.max_id + 1], self.rows, self.tokens)
            self._norms_for = state
        return self._norms

    def _scores(
        self, ids: np.ndarray, tf: np.ndarray, matches: int, among: Among | None
    ) -> np.ndarray:
        if among is None:
            return term_scores(tf, self._row_norms()[ids], idf(self.rows, matches))
        # Per posting, not cached per row: the same expression on the same values, so a
        # subset's norms equal those an index of the subset's rows alone would cache.
        norms = length_norms(self._doclen[ids], among.rows, among.tokens)
        return term_scores(tf, norms, idf(among.rows, matches))

    def phrase_scores(
        self, ids: np.ndarray, tf: np.ndarray, matches: int, among: Among | None = None
    ) -> np.ndarray:
        """BM25 of a phrase occurring ``tf`` times in rows ``ids`` and matching ``matches``
        rows in all, under this index's row count and lengths (or ``among``'s statistics),
        for ``search(extra=)``."""
        rows = self.rows if among is None else among.rows
        with self._lock:
            if rows == 0 or len(ids) == 0:
                return np.zeros(len(ids), dtype=np.float64)
            return self._scores(ids, tf, matches, among)

    def scored(
        self,
        terms: Sequence[str],
        conjunctive: bool,
        extra: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
        among: Among | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every row the query matches (ids ascending, any state; with ``among``, only its
        members, under its statistics) and the BM25 of each row id (an array indexed by id),
        as ``search`` ranks them."""
        empty = np.empty(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        if (not terms and extra is None) or (self.rows if among is None else among.rows) == 0:
            return empty
        with self._lock:
            lists = [self._postings(term) for term in terms]
            if among is not None:
                lists = [_within(ids, tf, among.members) for ids, tf in lists]
            if conjunctive and any(len(ids) == 0 for ids, _ in lists):
                return empty
            score = np.zeros(self.max_id + 1, dtype=np.float64)
            hits = np.zeros(len(score), dtype=np.int16) if conjunctive else None
            for ids, tf in lists:
                if len(ids) == 0:
                    continue
                ids = ids.astype(np.intp, copy=False)  # one conversion for both updates
                np.add.at(score, ids, self._scores(ids, tf, len(ids), among))
                if hits is not None:
                    hits[ids] += 1  # a term's ids are distinct
            candidates = None if hits is None else np.flatnonzero(hits == len(terms))
        if candidates is not None and len(candidates) == 0:
            return empty
        if extra is not None:  # score is this call's own array: no lock needed
            ids, values = extra()
            known = ids < len(score)
            np.add.at(score, ids[known], values[known])
        if candidates is None:
            # Every posting and phrase scores above zero (idf is at least 1e-6), so a
            # disjunctive query's candidates are the rows with a score.
            candidates = np.flatnonzero(score > 0)
        return candidates, score

    def search(
        self,
        terms: Sequence[str],
        conjunctive: bool,
        eligible: Callable[[np.ndarray], np.ndarray],
        limit: int,
        extra: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
        among: Among | None = None,
    ) -> list[int]:
        """Ids of the best ``limit`` eligible rows, best first, ties to the newer id.

        ``terms`` are FTS5 tokens (one per query phrase, in query order); ``eligible`` maps
        candidate ids to a boolean mask (tenant, active, as-of), applied before ranking.
        ``extra`` returns (ids, scores) to add: the scores of multi-word phrases, which FTS5
        computes (it knows positions). In disjunctive mode a row matching only a phrase is a
        candidate too, as in FTS5's OR; in conjunctive mode ``eligible`` says which rows
        hold the phrases. It is called once the words are scored, so it may be computed on
        another thread meanwhile. ``among``: the rows whose statistics score them (``scored``).
        """
        if limit <= 0:
            return []
        candidates, score = self.scored(terms, conjunctive, extra, among)
        if len(candidates) == 0:
            return []
        candidates = candidates[eligible(candidates)]
        if len(candidates) > limit:
            values = score[candidates]
            cutoff = np.partition(values, len(values) - limit)[len(values) - limit]
            candidates = candidates[values >= cutoff]  # ties at the cut stay for the tie-break
        order = np.lexsort((-candidates, -score[candidates]))[:limit]
        return candidates[order].tolist()


# (terms in number order, where each term's pairs start, ids, term frequencies): CSR postings.
FlatPostings = tuple[list[str], np.ndarray, np.ndarray, np.ndarray]


def flat_postings(grouped: Iterable[tuple[str, str]], chunk: int = 1 << 25) -> FlatPostings:
    """``postings_from_groups`` for every term at once, as CSR arrays (``Bm25Index.from_flat``):
    the id lists of up to ``chunk`` characters of groups are joined and parsed in one pass, so
    the cost is per pair, not per term, and the memory held aside a chunk's (32 MB of text)."""
    names: list[str] = []
    pairs: list[np.ndarray] = []  # per chunk: each term's number of pairs
    ids: list[np.ndarray] = []
    tfs: list[np.ndarray] = []
    lists: list[str] = []
    held = 0
    for term, joined in grouped:
        names.append(term)
        lists.append(joined)
        held += len(joined)
        if held >= chunk:
            _flat_chunk(lists, pairs, ids, tfs)
            lists, held = [], 0
    if lists:
        _flat_chunk(lists, pairs, ids, tfs)
    indptr = np.zeros(len(names) + 1, dtype=np.int64)
    if pairs:
        np.cumsum(np.concatenate(pairs), out=indptr[1:])
    if not ids:
        return names, indptr, _NO_IDS, _NO_IDS
    return names, indptr, np.concatenate(ids), np.concatenate(tfs)


def _flat_chunk(
    lists: Sequence[str], pairs: list[np.ndarray], ids: list[np.ndarray], tfs: list[np.ndarray]
) -> None:
    """Parse one chunk of groups' id lists (one id per occurrence) into pairs."""
    sizes = np.fromiter((g.count(",") + 1 for g in lists), dtype=np.int64, count=len(lists))
    occurrences = np.fromstring(",".join(lists), dtype=np.int64, sep=",")
    if len(occurrences) != int(sizes.sum()):
        raise ValueError("the postings' id lists do not parse")
    term_of = np.repeat(np.arange(len(lists), dtype=np.int64), sizes)
    same_term = term_of[1:] == term_of[:-1]
    if bool(np.any((occurrences[1:] < occurrences[:-1]) & same_term)):
        order = np.lexsort((occurrences, term_of))  # FTS5 lists them by id; never rely on it
        occurrences, term_of = occurrences[order], term_of[order]
        same_term = term_of[1:] == term_of[:-1]
    starts = np.flatnonzero(np.r_[True, (occurrences[1:] != occurrences[:-1]) | ~same_term])
    pairs.append(np.bincount(term_of[starts], minlength=len(lists)))
    ids.append(occurrences[starts])
    tfs.append(np.diff(np.r_[starts, len(occurrences)]))


_NO_IDS = np.empty(0, dtype=np.int64)


def postings_from_groups(
    grouped: Iterable[tuple[str, str]],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """FTS5 ``fts5vocab`` instance rows grouped by term, ``(term, "id,id,...")`` with one id
    per occurrence, into each term's increasing ids and their frequencies."""
    postings = {}
    for term, joined in grouped:
        occurrences = np.fromstring(joined, dtype=np.int64, sep=",")  # ~9x str.split
        if len(occurrences) > 1 and bool(np.any(occurrences[1:] < occurrences[:-1])):
            occurrences.sort()  # FTS5 lists them by id; never rely on it blindly
        starts = np.flatnonzero(np.r_[True, occurrences[1:] != occurrences[:-1]])
        counts = np.diff(np.r_[starts, len(occurrences)])
        postings[term] = (occurrences[starts], counts.astype(np.float64))
    return postings
