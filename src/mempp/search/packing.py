"""Evidence packing: query-focused excerpts of long records, so more records fit a window.

An optional evidence mode (``render_evidence(hits, packing=PackingOptions(), query=...)``).
The first ``whole_first`` hits, and any record of at most ``threshold`` characters, are shown
whole. Every other record is cut into passages (paragraph-, line- and sentence-aware windows
of at most ``passage`` characters) and shown as an excerpt of at most ``cap`` characters: its
opening passage, then the passages that add the most query words not yet shown (idf-weighted
over the passages of all the hits being rendered; BM25 breaks ties), then, while room is
left, the earliest remaining passages. Passages keep document order, ``[…]`` marks what was
left out, and a marker line names the record whose full text holds the rest.

Everything here is pure and deterministic: no model, no encoder, no store.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from mempp.errors import InvalidInput
from mempp.search.query import ENGLISH_STOP_WORDS, word_tokens

ELISION = "[…]"
# Defaults, chosen on the OrgMemBench development half (docs/benchmarks.md, "Evidence packing").
THRESHOLD = 1200
CAP = 500
PASSAGE = 300
WHOLE_FIRST = 8
# BM25 constants for scoring passages (the usual values; passages are of similar size).
K1 = 1.2
B = 0.75

# Where a passage may end, strongest first: a blank line, a line break, a sentence end, any
# space. Each split point is the end of the separator, so a piece keeps its trailing space.
_BOUNDARIES = (
    re.compile(r"\n[ \t\r\f\v]*\n\s*"),
    re.compile(r"\n\s*"),
    re.compile(r"(?<=[.!?…。！？])[\"'”’)\]]*\s+"),
    re.compile(r"\s+"),
)


@dataclass(frozen=True, slots=True)
class PackingOptions:
    """How evidence is packed (all sizes in characters).

    ``threshold``: records of at most this length are shown whole. ``cap``: at most this much
    of a longer record's text is shown (the marker line and ``[…]`` marks not counted).
    ``passage``: the longest passage; passages end at the strongest boundary that keeps them
    within it. ``whole_first``: the first this many hits (the best ranked) are shown whole
    whatever their length.
    """

    threshold: int = THRESHOLD
    cap: int = CAP
    passage: int = PASSAGE
    whole_first: int = WHOLE_FIRST

    def __post_init__(self) -> None:
        for name in ("threshold", "cap", "passage", "whole_first"):
            value = getattr(self, name)
            least = 0 if name == "whole_first" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                what = "a number of hits (0 or more)" if least == 0 else "a positive length"
                raise InvalidInput(f"packing {name} must be {what}, got {value!r}")
        if self.cap > self.threshold:
            raise InvalidInput(
                f"packing cap ({self.cap}) must not exceed threshold ({self.threshold}): "
                "an excerpt would be longer than a record shown whole"
            )
        if self.passage > self.cap:
            raise InvalidInput(
                f"packing passage ({self.passage}) must not exceed cap ({self.cap}): "
                "no passage could be shown"
            )

    def to_dict(self) -> dict[str, int]:
        return {
            "threshold": self.threshold,
            "cap": self.cap,
            "passage": self.passage,
            "whole_first": self.whole_first,
        }


@dataclass(frozen=True, slots=True)
class Passage:
    """``text[start:end]`` of the record it was cut from (trailing space included)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Excerpt:
    """What evidence shows of one record.

    ``body`` is the whole text, or the chosen passages in document order joined by ``[…]``.
    ``marker`` is the excerpt's one-line marker (``None`` when the record is shown whole).
    ``spans`` place the record's text inside ``body``: ``(body offset, record offset,
    length)``, one per run of consecutive passages shown.
    """

    body: str
    marker: str | None
    spans: tuple[tuple[int, int, int], ...]
    passages: int = 1
    chosen: int = 1

    @property
    def excerpt(self) -> bool:
        return self.marker is not None

    @property
    def shown(self) -> int:
        """Characters of the record's text in ``body``."""
        return sum(length for _, _, length in self.spans)


def whole(text: str) -> Excerpt:
    """The record shown whole."""
    return Excerpt(text, None, ((0, 0, len(text)),))


def split_passages(text: str, size: int) -> list[Passage]:
    """Contiguous passages of at most ``size`` characters covering ``text`` exactly.

    A span longer than ``size`` is split at its blank lines; pieces still too long at their
    line breaks, then sentence ends, then spaces, and as a last resort every ``size``
    characters. Adjacent pieces are then merged while the result stays within ``size``.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidInput(f"passage size must be a positive number of characters, got {size!r}")
    if not text:
        return []
    return [Passage(start, end) for start, end in _split(text, 0, len(text), size, 0)]


def _split(text: str, start: int, end: int, size: int, level: int) -> list[tuple[int, int]]:
    if end - start <= size:
        return [(start, end)]
    if level == len(_BOUNDARIES):
        return [(i, min(i + size, end)) for i in range(start, end, size)]
    cuts = [m.end() for m in _BOUNDARIES[level].finditer(text, start, end) if m.end() < end]
    bounds = [start, *(c for c in cuts if c > start), end]
    pieces: list[tuple[int, int]] = []
    for a, b in pairwise(bounds):
        pieces.extend(_split(text, a, b, size, level + 1))
    merged: list[tuple[int, int]] = []
    for a, b in pieces:
        if merged and b - merged[-1][0] <= size:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


@lru_cache(maxsize=1 << 16)
def _fold(token: str) -> str:
    """A light, deterministic plural fold, so "budgets" meets "budget"."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def _tokens(text: str) -> list[str]:
    return [_fold(t) for t in word_tokens(text)]


def query_terms(query: str) -> tuple[str, ...]:
    """The query's content words, folded, once each, in order: stop words and single letters
    are dropped (single digits are kept)."""
    terms = (
        _fold(t)
        for t in word_tokens(query)
        if t not in ENGLISH_STOP_WORDS and (len(t) > 1 or t.isdigit())
    )
    return tuple(dict.fromkeys(terms))


@dataclass(frozen=True, slots=True)
class Split:
    """A record cut into passages, with each passage's folded word counts and length."""

    text: str
    passages: list[Passage]
    counts: list[Counter[str]]
    lengths: list[int]


def prepare(text: str, size: int) -> Split:
    passages = split_passages(text, size)
    counts = [Counter(_tokens(text[p.start : p.end])) for p in passages]
    return Split(text, passages, counts, [sum(c.values()) for c in counts])


def pack(records: Sequence[tuple[int, str]], query: str, options: PackingOptions) -> list[Excerpt]:
    """What to show of each ``(record id, text)``, in the order given.

    Passage scores are BM25 of the query's content words, with document frequencies and the
    average passage length taken over the passages of all ``records`` (the hits being
    rendered). Without any content word every passage scores 0 and an excerpt is the
    record's beginning.
    """
    if not isinstance(options, PackingOptions):
        raise InvalidInput(f"packing must be PackingOptions, got {type(options).__name__}")
    if not isinstance(query, str):
        raise InvalidInput(f"packing needs the query text, got {type(query).__name__}")
    terms = query_terms(query)
    splits = [prepare(text, options.passage) for _, text in records]
    every = [counts for split in splits for counts in split.counts]
    n = len(every)
    frequency = Counter(term for counts in every for term in terms if term in counts)
    idf = {t: math.log(1.0 + (n - frequency[t] + 0.5) / (frequency[t] + 0.5)) for t in terms}
    lengths = [length for split in splits for length in split.lengths]
    average = sum(lengths) / n if n and sum(lengths) else 1.0
    out: list[Excerpt] = []
    for rank, ((record_id, text), split) in enumerate(zip(records, splits, strict=True)):
        if len(text) <= options.threshold or rank < options.whole_first:
            out.append(whole(text))
            continue
        scores = [
            _bm25(counts, length, terms, idf, average)
            for counts, length in zip(split.counts, split.lengths, strict=True)
        ]
        chosen = choose(split, terms, idf, scores, options.cap)
        out.append(excerpt(text, split.passages, chosen, record_id))
    return out


def _bm25(
    counts: Counter[str],
    length: int,
    terms: Sequence[str],
    idf: dict[str, float],
    average: float,
) -> float:
    norm = K1 * (1.0 - B + B * length / average)
    score = 0.0
    for term in terms:
        tf = counts.get(term, 0)
        if tf:
            score += idf[term] * tf * (K1 + 1.0) / (tf + norm)
    return score


def choose(
    split: Split,
    terms: Sequence[str],
    idf: Mapping[str, float],
    scores: Sequence[float],
    cap: int,
) -> list[int]:
    """Indices of the passages to show (never a blank one), in document order, within ``cap``
    characters of stripped text.

    The opening passage comes first (a title, subject line or first message says what the
    record is). Then, while a passage still fits, the one adding the most ``idf`` of query
    ``terms`` not yet shown (higher ``scores`` then earlier on a tie); once none adds a new
    term, the earliest that fit.
    """
    text = split.text
    sizes = [len(text[p.start : p.end].strip()) for p in split.passages]
    left = [i for i, size in enumerate(sizes) if size]
    chosen: list[int] = []
    shown: set[str] = set()
    used = 0
    while True:
        fits = [i for i in left if used + sizes[i] <= cap]
        if not fits:
            break
        pick = fits[0]
        if chosen:
            gains = {
                i: sum(idf[t] for t in terms if t not in shown and t in split.counts[i])
                for i in fits
            }
            best = max(fits, key=lambda i: (gains[i], scores[i], -i))
            if gains[best] > 0:
                pick = best
        left.remove(pick)
        chosen.append(pick)
        used += sizes[pick]
        shown.update(t for t in terms if t in split.counts[pick])
    return sorted(chosen)


def excerpt(
    text: str, passages: Sequence[Passage], chosen: Sequence[int], record_id: int
) -> Excerpt:
    """The chosen passages of ``text`` as an excerpt body with its marker; the whole text when
    every passage that is not blank fits."""
    total = sum(1 for p in passages if text[p.start : p.end].strip())
    if len(chosen) == total:
        return whole(text)
    runs: list[tuple[int, int]] = []  # (start, end) in the text of consecutive passages shown
    for i in chosen:
        if runs and runs[-1][1] == passages[i].start:
            runs[-1] = (runs[-1][0], passages[i].end)
        else:
            runs.append((passages[i].start, passages[i].end))
    body = ""
    spans: list[tuple[int, int, int]] = []
    previous = 0
    for start, end in runs:
        raw = text[start:end]
        piece = raw.strip()
        left_out = bool(text[previous:start].strip())
        if body:
            body += "\n" + (ELISION + "\n" if left_out else "")
        elif left_out:
            body += ELISION + "\n"
        spans.append((len(body), start + len(raw) - len(raw.lstrip()), len(piece)))
        body += piece
        previous = end
    if text[previous:].strip():
        body += "\n" + ELISION
    marker = f"[excerpt: {len(chosen)} of {total} passages; full text: record {record_id}]"
    return Excerpt(body, marker, tuple(spans), total, len(chosen))
