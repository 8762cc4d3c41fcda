"""In-RAM tag postings for the tag leg: label -> ascending record ids, as flat numpy arrays.

The tag leg ranks a scope's eligible rows by how many of the question's labels they carry,
then newest first (in SQL: ``GROUP BY id ORDER BY count(*) DESC, id DESC LIMIT n``). SQL
visits every posting of every asked label and looks each row up; a frequent author holds a
sixth of a store, so at a million rows that is 100k+ random reads per search. Here the
postings sit in one id array with one offset per label (CSR), and a search touches only what
decides its answer:

* rows carrying two or more of the asked labels (they rank above every one-label row) are
  found by looking the smaller lists' ids up in the largest list; they are few unless two
  asked labels are both frequent;
* one-label rows are walked from the newest id backwards, in windows that grow, until
  ``limit`` eligible rows are found.

Eligibility (tenant, active, as-of bound, filters) is a mask the caller supplies (the vector
index's, which tracks states); this module holds no state beyond the postings and is pure
numpy. The postings are append-only like the rows they index; an erasure removes labels, so
the store drops and rebuilds them then.

``save`` writes them as an array file (``mempp.index.array_file``: labels as one UTF-8 blob
with offsets, the offsets and ids as they are held) and ``load`` maps it back, checked and
not kept resident (``lazy``): a search pages in only the lists it asks for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mempp.index import array_file

# ids -> mask of the eligible ones (any order in, same order out).
Eligible = Callable[[np.ndarray], np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)
# The first window of a walk holds about this many postings per result wanted (at least
# _MIN_WINDOW); each next window is twice as large, so a sparse eligibility costs O(log) steps.
_WINDOW_PER_RESULT = 2
_MIN_WINDOW = 256

# The file written by TagPostings.save.
_FILE_KIND = "mempp tag postings"
_FILE_FORMAT = 1


class TagPostings:
    """Every label's record ids, ascending, covering rows up to ``max_id``."""

    def __init__(
        self, labels: Sequence[str], offsets: np.ndarray, ids: np.ndarray, max_id: int
    ) -> None:
        if len(offsets) != len(labels) + 1:
            raise ValueError("TagPostings: one offset per label, plus the end")
        self._slot = {label: number for number, label in enumerate(labels)}
        self._offsets = offsets
        self._ids = ids
        self.max_id = max_id
        self.label = ""  # what the owner read them from (free text)

    @classmethod
    def from_groups(cls, groups: Iterable[tuple[str, str]], max_id: int) -> TagPostings:
        """From ``(label, "id,id,...")`` rows (SQL ``group_concat``), ids ascending per label."""
        lists: dict[str, np.ndarray] = {}
        for label, joined in groups:
            ids = np.array(joined.split(","), dtype=np.int64)
            if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
                ids = np.unique(ids)  # group_concat's order is SQLite's choice, not a promise
            lists[label] = ids
        return cls.from_lists(lists, max_id)

    @classmethod
    def from_lists(cls, lists: Mapping[str, np.ndarray], max_id: int) -> TagPostings:
        """From each label's ids, ascending without repeats."""
        labels = list(lists)
        parts = [np.asarray(lists[label], dtype=np.int64) for label in labels]
        sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        ids = np.concatenate(parts) if parts else _EMPTY
        return cls(labels, offsets, ids, max_id)

    def extended(self, tail: Mapping[str, np.ndarray], max_id: int) -> TagPostings:
        """New postings up to ``max_id``: these with ``tail`` appended (per label, ids above
        this object's ``max_id``, ascending)."""
        labels = dict.fromkeys([*self._slot, *tail])
        lists = {
            label: np.concatenate([self.postings(label), tail.get(label, _EMPTY)])
            for label in labels
        }
        return TagPostings.from_lists(lists, max_id)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the postings and ``label`` to ``path`` atomically (a reader sees the old file
        or the new one); ``OSError`` if the folder refuses it."""
        encoded = [label.encode("utf-8") for label in self._slot]
        starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=starts[1:])
        meta = {
            "kind": _FILE_KIND,
            "version": _FILE_FORMAT,
            "max_id": self.max_id,
            "label": self.label,
        }
        arrays = {
            "labels": np.frombuffer(b"".join(encoded), dtype=np.uint8),
            "label_offsets": starts,
            "offsets": self._offsets,
            "ids": self._ids,
        }
        array_file.write(path, meta, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TagPostings:
        """The postings ``save`` wrote, mapped (see the module's note); ``ValueError`` naming
        the file if it is missing, truncated, damaged, of another kind, or its arrays do not
        add up."""
        return array_file.load_lazily(path, cls._from_arrays, "a tag postings file")

    @classmethod
    def _from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> TagPostings:
        if (meta["kind"], int(meta["version"])) != (_FILE_KIND, _FILE_FORMAT):
            raise ValueError("another kind or version")
        max_id, label = int(meta["max_id"]), str(meta["label"])
        blob, starts = arrays["labels"], arrays["label_offsets"]
        offsets, ids = arrays["offsets"], arrays["ids"]
        consistent = (
            blob.dtype == np.uint8
            and starts.dtype == offsets.dtype == ids.dtype == np.int64
            and len(starts) == len(offsets) >= 1
            and int(starts[0]) == 0 == int(offsets[0])
            and int(starts[-1]) == len(blob)
            and int(offsets[-1]) == len(ids)
            and bool(np.all(np.diff(starts) >= 0))
            and bool(np.all(np.diff(offsets) >= 0))
            and (len(ids) == 0 or (int(ids.min()) > 0 and int(ids.max()) <= max_id))
        )
        if not consistent:
            raise ValueError("its arrays do not add up")
        raw = blob.tobytes()
        labels = [
            raw[int(starts[n]) : int(starts[n + 1])].decode("utf-8") for n in range(len(starts) - 1)
        ]
        if len(set(labels)) != len(labels):
            raise ValueError("a label is listed twice")
        postings = cls(labels, offsets, ids, max_id)
        postings.label = label
        return postings

    def __len__(self) -> int:
        """Postings held (label, row pairs)."""
        return len(self._ids)

    @property
    def nbytes(self) -> int:
        return self._ids.nbytes + self._offsets.nbytes

    def postings(self, label: str) -> np.ndarray:
        """The ids carrying ``label``, ascending (a view; empty for an unknown label)."""
        slot = self._slot.get(label)
        if slot is None:
            return _EMPTY
        return self._ids[self._offsets[slot] : self._offsets[slot + 1]]

    def search(
        self,
        labels: Iterable[str],
        eligible: Eligible,
        limit: int,
        tail: Mapping[str, np.ndarray] | None = None,
    ) -> list[int]:
        """The tag leg's ranking over these postings plus ``tail`` (ids above ``max_id`` per
        label, ascending), eligible rows only."""
        lists = []
        for label in dict.fromkeys(labels):
            held = self.postings(label)
            extra = None if tail is None else tail.get(label)
            if extra is not None and len(extra):
                held = np.concatenate([held, extra])
            lists.append(held)
        return rank_tagged(lists, eligible, limit)


def rank_tagged(postings: Sequence[np.ndarray], eligible: Eligible, limit: int) -> list[int]:
    """Eligible ids by the number of ``postings`` lists (each ascending, no repeats) holding
    them, then id, both descending; at most ``limit``."""
    lists = [p for p in postings if len(p)]
    if not lists or limit <= 0:
        return []
    multi = _multi_label_rows(lists)
    found: list[int] = []
    if len(multi[0]):
        ids, counts = multi
        ranked = ids[np.lexsort((-ids, -counts))]
        found = _first_eligible(ranked, eligible, limit)
    if len(found) < limit:
        found += _walk_single_label_rows(lists, multi[0], eligible, limit - len(found))
    return found


def _multi_label_rows(lists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows in two or more lists (ascending) with their counts. Each such row is in some list
    other than the largest, so only the smaller lists are enumerated."""
    if len(lists) < 2:
        return _EMPTY, _EMPTY
    largest = max(range(len(lists)), key=lambda i: len(lists[i]))
    others = np.concatenate([p for i, p in enumerate(lists) if i != largest])
    ids, counts = np.unique(others, return_counts=True)
    counts += _members(ids, lists[largest])
    keep = counts >= 2
    return ids[keep], counts[keep]


def _members(ids: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Mask over ``ids``: present in ``ascending``."""
    if len(ascending) == 0:
        return np.zeros(len(ids), dtype=bool)
    positions = np.minimum(np.searchsorted(ascending, ids), len(ascending) - 1)
    return ascending[positions] == ids


def _first_eligible(ranked: np.ndarray, eligible: Eligible, limit: int) -> list[int]:
    """The first ``limit`` eligible ids of ``ranked``, checked in growing chunks."""
    found: list[int] = []
    start, step = 0, max(_WINDOW_PER_RESULT * limit, _MIN_WINDOW)
    while start < len(ranked) and len(found) < limit:
        chunk = ranked[start : start + step]
        found += chunk[eligible(chunk)][: limit - len(found)].tolist()
        start += step
        step *= 2
    return found


def _walk_single_label_rows(
    lists: list[np.ndarray], multi: np.ndarray, eligible: Eligible, limit: int
) -> list[int]:
    """The newest ``limit`` eligible rows held by exactly one list (``multi``, ascending,
    holds the others). Windows of ids run downwards; each takes at most ``step`` ids from
    any list, and at least one id, so the walk ends."""
    ends = [len(p) for p in lists]  # each list's ids below the window still to walk
    found: list[int] = []
    step = max(_WINDOW_PER_RESULT * limit, _MIN_WINDOW)
    while len(found) < limit and any(ends):
        low = max(int(p[max(end - step, 0)]) for p, end in zip(lists, ends, strict=True) if end)
        parts = []
        for number, held in enumerate(lists):
            end = ends[number]
            if end:
                start = int(np.searchsorted(held[:end], low, side="left"))
                parts.append(held[start:end])
                ends[number] = start
        window = np.unique(np.concatenate(parts))[::-1]
        if len(multi):
            window = window[~_members(window, multi)]
        found += window[eligible(window)][: limit - len(found)].tolist()
        step *= 2
    return found
