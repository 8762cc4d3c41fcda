"""From a question to what each leg looks up: lexical terms and tag labels.

User text is never passed to a search engine as query syntax: it is cut into plain word
tokens here, and each engine quotes every token as a literal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mempp.records import normalize_tag
from mempp.settings import Settings

_WORD = re.compile(r"[^\W_]+")

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
    """Plain terms and how to combine them; an empty term list matches nothing."""

    terms: tuple[str, ...]
    mode: str  # "disjunctive" | "conjunctive"


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
    return LexicalQuery(tuple(terms), settings.lexical_mode)


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
