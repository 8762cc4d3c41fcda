"""Evidence packing: passage splitting, query-focused excerpts, markers, options."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest

from mempp.errors import InvalidInput
from mempp.search.packing import (
    ELISION,
    PackingOptions,
    pack,
    query_terms,
    split_passages,
)

# Six paragraphs of about 150 characters; only the fourth mentions the warehouse in Lisbon.
FILLER = [
    "Quarterly planning notes for the operations team, covering staffing, vendor reviews and "
    "the schedule of recurring meetings for the months ahead.",
    "Staffing stays flat this quarter. Two open roles are paused until the hiring committee "
    "reviews the budget again at the end of the month, as agreed.",
    "Vendor reviews continue as before: each contract is checked by procurement and legal, and "
    "renewals need a sign-off from the finance lead first.",
    "The Lisbon warehouse lease was renewed on 2024-03-01 for three years, because the port "
    "expansion cut delivery times to Spanish customers by a third.",
    "Recurring meetings move to Tuesdays. The weekly sync keeps its thirty minutes and the "
    "monthly review gets a written agenda two days in advance.",
    "Open questions remain about travel policy and the shared calendar; both are parked for "
    "the next planning session and owners will be named there.",
]
DOCUMENT = "\n\n".join(FILLER)
SMALL = PackingOptions(threshold=400, cap=320, passage=160, whole_first=0)


def _covers(text: str, size: int) -> list[tuple[int, int]]:
    passages = split_passages(text, size)
    bounds = [(p.start, p.end) for p in passages]
    assert "".join(text[a:b] for a, b in bounds) == text  # nothing lost, nothing repeated
    assert all(a < b for a, b in bounds)
    assert all(b1 == a2 for (_, b1), (a2, _) in pairwise(bounds))
    assert all(b - a <= size for a, b in bounds)
    return bounds


def test_split_covers_text_exactly_within_size() -> None:
    for size in (1, 7, 50, 160, 300, 10_000):
        _covers(DOCUMENT, size)
    _covers("x" * 1000, 64)  # no boundary at all: cut every `size` characters
    _covers("  leading and trailing space  \n\n\n", 10)
    assert split_passages("", 100) == []
    assert [(p.start, p.end) for p in split_passages("short", 100)] == [(0, 5)]


def test_split_prefers_paragraphs_then_sentences() -> None:
    bounds = _covers(DOCUMENT, 160)
    # Every paragraph (about 150 characters) is its own passage, ending with its blank line.
    starts = [m.start() for m in re.finditer(r"(?:^|\n\n)\S", DOCUMENT)]
    assert [a for a, _ in bounds] == [0, *(s + 2 for s in starts[1:])]
    # A paragraph longer than the size is cut after a sentence, not inside a word.
    text = "First sentence is here. Second sentence follows it. Third one ends the paragraph."
    cut = [text[a:b] for a, b in _covers(text, 55)]
    assert cut == [
        "First sentence is here. Second sentence follows it. ",
        "Third one ends the paragraph.",
    ]


def test_split_unicode_offsets() -> None:
    text = "Ünïcödé ñoël — 東京の倉庫は三月に更新された。\n\nEmoji 🚚 line two. " * 8
    bounds = _covers(text, 40)
    assert len(bounds) > 5


def test_short_records_and_first_hits_are_whole() -> None:
    records = [(1, DOCUMENT), (2, "A short note about Lisbon."), (3, DOCUMENT)]
    out = pack(records, "Lisbon warehouse lease", PackingOptions(400, 320, 160, 1))
    first, short, third = out
    assert (first.body, first.marker, first.excerpt) == (DOCUMENT, None, False)
    assert short.body == "A short note about Lisbon." and not short.excerpt
    assert short.shown == len(short.body)
    assert third.excerpt and third.marker is not None
    # A threshold at the record's length keeps it whole; one character less excerpts it.
    at = PackingOptions(threshold=len(DOCUMENT), cap=300, passage=160, whole_first=0)
    assert not pack([(5, DOCUMENT)], "lisbon", at)[0].excerpt
    below = PackingOptions(threshold=len(DOCUMENT) - 1, cap=300, passage=160, whole_first=0)
    assert pack([(5, DOCUMENT)], "lisbon", below)[0].excerpt
    # The default shows the first hits whole, whatever their length.
    long = DOCUMENT + "\n\n" + DOCUMENT
    assert len(long) > PackingOptions().threshold
    default = pack([(i, long) for i in range(12)], "lisbon", PackingOptions())
    assert [e.excerpt for e in default] == [False] * PackingOptions().whole_first + [True] * (
        12 - PackingOptions().whole_first
    )


def test_excerpt_is_query_focused_in_document_order_within_cap() -> None:
    [excerpt] = pack([(123, DOCUMENT)], "Why was the Lisbon warehouse lease renewed?", SMALL)
    assert excerpt.excerpt
    assert excerpt.marker == "[excerpt: 2 of 6 passages; full text: record 123]"
    # The opening paragraph, then the one about Lisbon; the rest is elided.
    assert excerpt.body == f"{FILLER[0]}\n{ELISION}\n{FILLER[3]}\n{ELISION}"
    assert excerpt.shown <= SMALL.cap
    offsets = [source for _, source, _ in excerpt.spans]
    assert offsets == sorted(offsets)  # document order
    for inside, source, length in excerpt.spans:  # every span is the record's own text
        assert excerpt.body[inside : inside + length] == DOCUMENT[source : source + length]
    assert excerpt.shown == sum(length for _, _, length in excerpt.spans)


def test_selection_respects_the_cap_for_every_size() -> None:
    for cap in (160, 200, 320, 500, 900):
        options = PackingOptions(threshold=max(cap, 400), cap=cap, passage=160, whole_first=0)
        [excerpt] = pack([(7, DOCUMENT)], "travel policy calendar vendor", options)
        assert excerpt.shown <= cap or not excerpt.excerpt
        if excerpt.excerpt:
            spans = excerpt.spans
            assert all(a[1] + a[2] <= b[1] for a, b in pairwise(spans))


def test_new_query_words_beat_repeats() -> None:
    paragraphs = [
        "Opening summary of the alpha programme, written for the steering group this week.",
        "Alpha alpha alpha alpha: the alpha word again and again, alpha and nothing else new.",
        "A short line that mentions beta once, among other words of no interest at all here.",
        "Another line with beta in it, also padding the record out to a realistic length.",
        "A last line naming beta again, so that beta is the commoner word of the two here.",
    ]
    text = "\n\n".join(paragraphs)
    options = PackingOptions(threshold=200, cap=190, passage=100, whole_first=0)
    [excerpt] = pack([(9, text)], "alpha beta", options)
    # The opening shows "alpha"; of the rest, a passage adding "beta" wins over the passage
    # that only repeats "alpha" (which plain BM25 would rank first: alpha is the rarer word).
    # Among the three adding "beta", BM25 breaks the tie: the last one names it twice.
    assert excerpt.body == f"{paragraphs[0]}\n{ELISION}\n{paragraphs[4]}"
    assert excerpt.marker == "[excerpt: 2 of 5 passages; full text: record 9]"


def test_no_query_words_fall_back_to_the_beginning() -> None:
    for query in ("", "what is the it of and?", "   "):
        [excerpt] = pack([(4, DOCUMENT)], query, SMALL)
        assert excerpt.excerpt
        assert excerpt.body == f"{FILLER[0]}\n\n{FILLER[1]}\n{ELISION}"
        assert excerpt.spans[0][1] == 0
    assert query_terms("What is the status of the Q3 budgets, and why?") == (
        "status",
        "q3",
        "budget",
    )


def test_packing_is_deterministic() -> None:
    records = [(i, DOCUMENT.replace("Lisbon", f"Lisbon{i}")) for i in range(5)]
    first = pack(records, "Lisbon3", SMALL)
    assert first == pack(records, "Lisbon3", SMALL)
    assert "Lisbon3" in first[3].body and "Lisbon2" not in first[2].body


def test_unicode_records() -> None:
    paragraphs = [
        "Über das Lager in Köln: die Miete wurde verlängert, weil die Zufahrt besser ist.",
        "東京の倉庫は三月に更新された。理由は港の拡張である。",
        "Réunion du comité: le budget reste inchangé pour le trimestre à venir.",
        "Emoji status 🚚📦 shipments resumed after the strike ended in Gdańsk.",
    ] * 3
    text = "\n\n".join(paragraphs)
    options = PackingOptions(threshold=200, cap=200, passage=100, whole_first=0)
    [excerpt] = pack([(77, text)], "Gdańsk shipments 🚚", options)
    assert excerpt.excerpt and "Gdańsk" in excerpt.body
    for inside, source, length in excerpt.spans:
        assert excerpt.body[inside : inside + length] == text[source : source + length]
    assert excerpt.marker is not None and "record 77" in excerpt.marker


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0},
        {"cap": -5},
        {"passage": 0},
        {"threshold": 1.5},
        {"cap": True},
        {"whole_first": -1},
        {"whole_first": "3"},
        {"threshold": 300, "cap": 400},  # cap above threshold
        {"cap": 200, "passage": 300},  # passage above cap
    ],
)
def test_invalid_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInput, match="packing"):
        PackingOptions(**kwargs)  # type: ignore[arg-type]


def test_invalid_calls() -> None:
    with pytest.raises(InvalidInput):
        pack([(1, DOCUMENT)], None, SMALL)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        pack([(1, DOCUMENT)], "q", {"cap": 10})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        split_passages(DOCUMENT, 0)
    assert PackingOptions().to_dict() == {
        "threshold": PackingOptions().threshold,
        "cap": PackingOptions().cap,
        "passage": PackingOptions().passage,
        "whole_first": PackingOptions().whole_first,
    }
