"""From a question to what each leg looks up: lexical terms, tag labels, dates it names, and
the as-of bound an "as of <date>" phrase sets.

User text is never passed to a search engine as query syntax: it is cut into plain word
tokens here, and each engine quotes every token as a literal.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from datetime import date

from mempp.dates import parse_event_date
from mempp.records import normalize_tag
from mempp.settings import Settings

_WORD = re.compile(r"[^\W_]+")
# NUL and lone surrogates (halves of UTF-16 pairs, from a bad decode): no engine can store,
# compare or bind them as text.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

# Disjunctive mode drops these (and tokens under 3 characters), as the authors' code does
# with its own short list; the words are ours.
SHORT_STOP_WORDS = frozenset(
    "the and for are was were what when where which who how did does with from".split()
)

# Conjunctive mode follows web-search parsing with an English stop list: every remaining word
# of the question must occur in the document.
ENGLISH_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    """.split()
)


@dataclass(frozen=True, slots=True)
class LexicalQuery:
    """Plain terms and how to combine them; an empty term list matches nothing.

    ``phrases`` (disjunctive mode only) are two-word phrases that add their own BM25 score
    where the two words stand side by side. With ``unique_stems`` the engine keeps the first
    of several terms that its analyser reduces to one stem ("announced", "announcement"), so
    a stem counts once, as BM25 assumes. ``ranking`` is ``"bm25"`` or ``"cover_density"``
    (PostgreSQL's ``ts_rank_cd``; engines without it rank by BM25).
    """

    terms: tuple[str, ...]
    mode: str  # "disjunctive" | "conjunctive"
    phrases: tuple[str, ...] = ()
    unique_stems: bool = False
    ranking: str = "bm25"


def storable_query(query: LexicalQuery) -> LexicalQuery:
    """``query`` with NUL and lone surrogates removed from its terms and phrases, and the
    terms and phrases left empty dropped: what an engine can pass to its database."""

    def kept(items: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = (UNSTORABLE.sub("", item) for item in items)
        return tuple(item for item in cleaned if item.strip())

    return replace(query, terms=kept(query.terms), phrases=kept(query.phrases))


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, any script)."""
    return _WORD.findall(text.lower())


def lexical_query(question: str, settings: Settings) -> LexicalQuery:
    tokens = word_tokens(question)
    if settings.lexical_mode == "conjunctive" or settings.stop_words == "english":
        terms = _unique(t for t in tokens if t not in ENGLISH_STOP_WORDS)
    else:
        terms = _unique(t for t in tokens if len(t) >= 3 and t not in SHORT_STOP_WORDS)
    if settings.lexical_mode == "disjunctive" and settings.max_terms is not None:
        terms = terms[: settings.max_terms]
    phrases: list[str] = []
    if settings.phrases and settings.lexical_mode == "disjunctive":
        # Adjacent content words of the question: names ("ethan brooks"), compounds
        # ("uptime target"), identifiers split by punctuation ("api v2").
        phrases = _unique(
            f"{a} {b}"
            for a, b in itertools.pairwise(tokens)
            if a not in ENGLISH_STOP_WORDS and b not in ENGLISH_STOP_WORDS
        )
    return LexicalQuery(
        tuple(terms),
        settings.lexical_mode,
        tuple(phrases),
        settings.unique_stems,
        settings.lexical_rank,
    )


def tag_labels(question: str, settings: Settings) -> tuple[str, ...]:
    """Candidate tag labels: each token, runs of up to ``tag_ngrams`` tokens, the whole question."""
    tokens = word_tokens(question)
    labels: list[str] = []
    for n in range(1, settings.tag_ngrams + 1):
        labels.extend(
            normalize_tag(" ".join(tokens[i : i + n])) for i in range(len(tokens) - n + 1)
        )
    labels.append(normalize_tag(question))
    return tuple(label for label in _unique(labels) if label)


def _unique(items) -> list[str]:  # type: ignore[no-untyped-def]
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_MONTH = "(" + "|".join(_MONTHS) + ")"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
# Most specific first; a span of text is read by the first pattern that matches it.
_DATE_PATTERNS: tuple[tuple[re.Pattern[str], tuple[int, int, int | None]], ...] = (
    # (pattern, group numbers of year, month, day)
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), (1, 2, 3)),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(\d{{4}})\b", re.IGNORECASE), (3, 1, 2)),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE), (3, 2, 1)),
    (re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE), (2, 1, None)),
    (re.compile(r"\b(\d{4})-(\d{2})\b(?!-)"), (1, 2, None)),
)


def date_spans(question: str) -> tuple[tuple[int, int], ...]:
    """The days and months a question names, as ``[start, end)`` date keys.

    Explicit dates only: ISO ``2023-11-15`` and ``2023-11``, ``March 31, 2023``,
    ``31 March 2023``, ``16 June, 2023``, ``May 2023``. Relative phrases ("last March",
    "yesterday") need the asker's date and are not read; invalid dates are ignored.
    """
    spans: list[tuple[int, int]] = []
    taken: list[tuple[int, int]] = []
    for pattern, groups in _DATE_PATTERNS:
        for match in pattern.finditer(question):
            if any(start <= match.start() < end for start, end in taken):
                continue
            taken.append(match.span())
            span = _span(match, groups)
            if span is not None and span not in spans:
                spans.append(span)
    return tuple(spans)


def _span(match: re.Match[str], groups: tuple[int, int, int | None]) -> tuple[int, int] | None:
    """The ``[start, end)`` date keys of the day or month a date pattern matched, given the
    pattern's group numbers of year, month and day (None: a whole month)."""
    year, month = match.group(groups[0]), match.group(groups[1])
    day = None if groups[2] is None else match.group(groups[2])
    number = int(month) if month.isdigit() else _MONTHS.index(month.lower()) + 1
    try:
        if day is None:
            first = date(int(year), number, 1)
            after = date(first.year + (number == 12), number % 12 + 1, 1)
        else:
            first = date(int(year), number, int(day))
            after = date.fromordinal(first.toordinal() + 1)
    except ValueError:  # month 13, February 30, year 0
        return None
    start, end = parse_event_date(first), parse_event_date(after)
    assert start is not None and end is not None
    return start.key, end.key


_AS_OF_PHRASE = re.compile(r"\bas\s+(?:of|at)\s+|\bas\s+it\s+stood\s+on\s+", re.IGNORECASE)


def question_as_of(question: str) -> int | None:
    """The as-of bound a question states: "as of 2023-04-02", "as at March 31, 2023",
    "as it stood on 16 June 2023", "as of May 2023" give the end of that day or month (an
    inclusive key, like a bare as-of date). The first such phrase counts; a date that does not
    follow one of those phrases sets no bound."""
    for phrase in _AS_OF_PHRASE.finditer(question):
        for pattern, groups in _DATE_PATTERNS:
            match = pattern.match(question, phrase.end())
            if match is None:
                continue
            span = _span(match, groups)
            if span is not None:
                return span[1] - 1
            break  # the phrase names an invalid date: no bound from it
    return None
