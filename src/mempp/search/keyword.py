"""The keyword leg: the question's content words matched as substrings of the record text,
and the one ranking both engines apply to what their substring indexes find.

The lexical leg matches whole stemmed tokens; this leg finds a word inside a longer one
("hike" in "hiking", "paint" in "painting", "adopt" in "adoption") and a name glued to
punctuation, which a chat turn's short, informal text often needs. Each engine finds, per
term, the ids of its in-scope rows (tenant, active, as-of bound, filters) whose text holds the
term, through an index (SQLite FTS5's ``trigram`` tokenizer, PostgreSQL's ``pg_trgm``), by
one rule: the term is a substring of the text folded by ``fold`` (A-Z to a-z, and the two
characters outside ASCII that FTS5's case folding turns into ASCII letters: the Kelvin sign
to ``k``, the long s to ``s``; every other character keeps its case). FTS5's own match is
exactly that rule for an ASCII term, so SQLite reads no text for one; for a term with other
letters (which FTS5 folds more widely) it checks the folded text of each row it finds.
PostgreSQL indexes the folded text itself and asks ``LIKE``, so its match is the rule too.
Both engines thus agree on every match and so on the ranking (``rank_matches``).

With ``kw_match="prefix"`` the leg needs no index of its own: each content word, read by
the full-text tokenizer both engines share (``mempp.index.analysis``: FTS5's ``porter
unicode61 remove_diacritics 2``, so "hiking" is ``hike``), matches every row holding a token
that begins with that token (``hike`` finds "hiking", "hikes", "Hiker's"; ``adopt`` finds
"adoption"). SQLite asks its lexical FTS5 table for the prefix, PostgreSQL its ``tsv`` GIN
index (a ``'hike':*`` query on the same tokens), so both match the same rows. A prefix reads
one range of the index's vocabulary and the postings of the words in it, where a substring
intersects the postings of all its trigrams, which grow with the store (docs/retrieval.md:
at 1M records the leg alone is 46 ms at p95 against 126 ms).

Both rules rank by ``rank_matches``. A term matched by more than ``MAX_TERM_ROWS`` in-scope
rows is dropped from the question: it
says little (its weight would be near zero) and listing its rows would cost a read of each,
so the leg stays bounded however large the scope grows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from mempp.index.analysis import analyze
from mempp.search.query import ENGLISH_STOP_WORDS, UNSTORABLE

# Letters and digits of any script; ``_`` would be a LIKE wildcard.
_WORD = re.compile(r"[^\W_]+")
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# What FTS5's trigram tokenizer folds into an ASCII letter: A-Z, KELVIN SIGN, LATIN SMALL
# LETTER LONG S (checked over every code point with SQLite 3.40's FTS5).
FOLD_FROM = _UPPER + "\u212a\u017f"
FOLD_TO = _UPPER.lower() + "ks"
_FOLD = str.maketrans(FOLD_FROM, FOLD_TO)
# Both indexes work on three-character pieces: a shorter term cannot be looked up in them.
MIN_TERM_CHARS = 3
MAX_TERMS = 8
MAX_TERM_ROWS = 1_000
# PostgreSQL refuses a tsquery word over 2,047 bytes ("word is too long in tsquery") and
# indexes no such lexeme, so no row of it could match: the prefix match drops a longer token
# on both engines, which keeps their lists equal.
MAX_PREFIX_BYTES = 2_047
# Light stemming: the suffix goes when at least this much of the word stays.
_SUFFIXES = ("ing", "ies", "ied", "ed", "es", "s", "ly")
_MIN_STEM = 3


def fold(text: str) -> str:
    """``text`` as the leg compares it: ``FOLD_FROM`` mapped to ``FOLD_TO``, every other
    character as it is."""
    return text.translate(_FOLD)


def stem(word: str) -> str:
    """``word`` without one common English suffix, when enough of it stays ("hiking" ->
    "hik", "stories" -> "stor", "adopted" -> "adopt"); substring matching then finds the
    other forms ("hike", "story", "adoption")."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            return word[: -len(suffix)]
    return word


def keyword_terms(question: str) -> tuple[str, ...]:
    """The question's content words as substring terms: folded (``fold``), English stop words
    dropped, lightly stemmed, at least ``MIN_TERM_CHARS`` characters, a term that holds
    another one dropped (the shorter one matches all its rows), at most ``MAX_TERMS`` in
    question order. A question of stop words only, or of words too short to index (most
    words of a CJK question are one or two characters), has none: the leg then returns
    nothing."""
    words = _WORD.findall(fold(UNSTORABLE.sub("", question)))
    stems: list[str] = []
    for word in words:
        if word in ENGLISH_STOP_WORDS:
            continue
        term = stem(word)
        if len(term) >= MIN_TERM_CHARS and term not in stems:
            stems.append(term)
    # A term holding another one is dropped: every row it matches, the shorter one matches.
    kept = [t for t in stems if not any(t != other and other in t for other in stems)]
    return tuple(kept[:MAX_TERMS])


def prefix_terms(question: str) -> tuple[str, ...]:
    """The question's content words for the prefix match: folded (``fold``), English stop
    words dropped, each kept when the shared tokenizer reads it as one token of at least
    ``MIN_TERM_CHARS`` characters and at most ``MAX_PREFIX_BYTES`` bytes; a word whose token
    another kept token begins is dropped (the shorter prefix matches all its rows), as is a
    second word of the same token; at most ``MAX_TERMS`` in question order. The words are
    returned, not their tokens: SQLite's FTS5 reads its MATCH expression through the same
    tokenizer, PostgreSQL analyses them (``mempp.index.analysis``), so both engines look up
    the same token."""
    words = [
        word
        for word in _WORD.findall(fold(UNSTORABLE.sub("", question)))
        if word not in ENGLISH_STOP_WORDS
    ]
    tokens: dict[str, str] = {}  # token -> its first word
    for word, found in zip(words, analyze(words), strict=True):
        if (
            len(found) == 1
            and len(found[0]) >= MIN_TERM_CHARS
            and len(found[0].encode("utf-8")) <= MAX_PREFIX_BYTES
        ):
            tokens.setdefault(found[0], word)
    kept = [w for t, w in tokens.items() if not any(t != o and t.startswith(o) for o in tokens)]
    return tuple(kept[:MAX_TERMS])


def rows_to_measure(matches: Mapping[str, Sequence[int]]) -> set[int]:
    """The rows whose lengths ``rank_matches`` reads: those of the terms it counts."""
    rows: set[int] = set()
    for ids in matches.values():
        if len(ids) <= MAX_TERM_ROWS:
            rows.update(ids)
    return rows


def prefix_token(word: str) -> str:
    """The token a ``prefix_terms`` word stands for (what PostgreSQL looks up)."""
    (token,) = analyze([word])[0]
    return token


def rank_matches(
    matches: Mapping[str, Sequence[int]],
    limit: int,
    lengths: Mapping[int, int] | None = None,
    max_tokens: int | None = None,
) -> list[int]:
    """Rows by how many of the question's terms they hold, then by the summed weight of those
    terms, ties to the newer ingest (larger id), at most ``limit``.

    With ``max_tokens``, a row longer than that many full-text tokens (``lengths[row]``, as
    FTS5 counts them; both engines hold the same count) is not ranked: it is left out after
    the too-common terms are dropped, as if it matched nothing (``kw_max_tokens``,
    docs/retrieval.md, session 17: the leg is for chat-length records; on a document most
    subject words of a question occur in its neighbours too, and the leg's list pushed the
    answer out of the evidence window).

    ``matches[term]`` lists the in-scope rows holding ``term`` (any order; more than
    ``MAX_TERM_ROWS`` means the term is too common and counts for nothing). A term's weight is
    ``log(1 + n / df)``, ``n`` the rows matched by any counted term and ``df`` its own rows:
    a rare word outweighs a common one, as in BM25, with no statistics beyond the matches.

    Coordination comes first: a row holding two of the question's words ranks above a row
    holding one, however rare that one is. Weight alone ranked first any row holding a word
    only it holds; in a long question that word is often an instruction ("enumerate", "on
    behalf of") rather than the subject, and the row it lifted pushed relevant rows out of
    the answer window (OrgMemBench, docs/retrieval.md).
    """
    counted = {term: set(ids) for term, ids in matches.items() if len(ids) <= MAX_TERM_ROWS}
    if max_tokens is not None:
        if lengths is None:
            raise ValueError("rank_matches: max_tokens needs the rows' lengths")
        counted = {
            term: {row for row in ids if lengths[row] <= max_tokens}
            for term, ids in counted.items()
        }
    counted = {term: ids for term, ids in counted.items() if ids}
    if not counted or limit <= 0:
        return []
    rows = set().union(*counted.values())
    n = len(rows)
    scores = dict.fromkeys(rows, 0.0)
    held = dict.fromkeys(rows, 0)
    # Terms in sorted order: the float sums are then the same whatever order the engine
    # returned them in.
    for term in sorted(counted):
        ids = counted[term]
        weight = math.log1p(n / len(ids))
        for row in ids:
            scores[row] += weight
            held[row] += 1
    return sorted(rows, key=lambda row: (-held[row], -scores[row], -row))[:limit]
