"""Settings, presets and how a question becomes lexical terms."""

from __future__ import annotations

import pytest

from mempp import InvalidInput, Settings, preset
from mempp.dates import parse_as_of, parse_event_date
from mempp.search.query import date_spans, lexical_query, question_as_of, tag_labels

QUESTION = "What did Jane Doe decide about the Q3 pricing of the Team plan, and why was it changed?"


def test_paper_presets_follow_table_6() -> None:
    assert preset("paper") == Settings()
    org = preset("paper-orgmembench")
    assert (org.w_lex, org.w_tag, org.w_vec, org.candidates, org.lexical_mode) == (
        1,
        1,
        4,
        50,
        "conjunctive",
    )
    loco = preset("paper-locomo")
    assert (loco.w_vec, loco.candidates, loco.lexical_mode) == (2, 200, "disjunctive")
    lme = preset("paper-longmemeval")
    assert (lme.w_vec, lme.candidates, lme.lexical_mode) == (4, 50, "conjunctive")
    for name in ("paper", "paper-orgmembench", "paper-locomo", "paper-longmemeval"):
        assert preset(name).gamma == 60 and preset(name).reserve == 3 and preset(name).k == 50
        # mempp's own additions stay off in every reproduction of the paper
        paper = preset(name)
        assert paper.w_date == 0 and paper.thread_weight == 0
        assert not paper.phrases and not paper.unique_stems


def test_paper_disjunctive_terms_keep_the_first_eight_long_words() -> None:
    terms = lexical_query(QUESTION, preset("paper")).terms
    assert terms == ("jane", "doe", "decide", "about", "pricing", "team", "plan", "why")
    assert len(terms) == 8


def test_default_terms_drop_english_stop_words_without_a_cap() -> None:
    query = lexical_query(QUESTION, preset("default"))
    assert query.mode == "disjunctive"
    assert query.terms == ("jane", "doe", "decide", "q3", "pricing", "team", "plan", "changed")


def test_default_phrases_are_adjacent_content_words() -> None:
    query = lexical_query(QUESTION, preset("default"))
    assert query.phrases == ("jane doe", "doe decide", "q3 pricing", "team plan")
    assert query.unique_stems
    assert lexical_query(QUESTION, preset("paper")).phrases == ()
    conjunctive = preset("default").with_(lexical_mode="conjunctive")
    assert lexical_query(QUESTION, conjunctive).phrases == ()  # AND of phrases would narrow
    assert lexical_query("budget budget budget", preset("default")).phrases == ("budget budget",)


def _day(text: str) -> int:
    parsed = parse_event_date(text)
    assert parsed is not None
    return parsed.key


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("what changed on 2023-11-15?", [("2023-11-15", "2023-11-16")]),
        (
            "as of March 31, 2023 and April 2nd, 2023",
            [("2023-03-31", "2023-04-01"), ("2023-04-02", "2023-04-03")],
        ),
        ("news on 16 June, 2023", [("2023-06-16", "2023-06-17")]),
        ("on the 3rd of june 2023", [("2023-06-03", "2023-06-04")]),
        ("in May 2023", [("2023-05-01", "2023-06-01")]),
        ("during 2023-12", [("2023-12-01", "2024-01-01")]),
        ("December 2023 and december 2023", [("2023-12-01", "2024-01-01")]),
        ("2024-02-30, February 30, 2024, 2024-13", []),  # invalid dates are not read
        ("last March, yesterday, in 2023, at 10:30", []),  # relative or too vague
    ],
)
def test_date_spans_read_explicit_days_and_months(question, expected) -> None:
    assert date_spans(question) == tuple((_day(a), _day(b)) for a, b in expected)


@pytest.mark.parametrize(
    ("question", "bound"),
    [
        ("What did we charge as of 2023-04-02?", "2023-04-02"),
        ("pricing AS AT March 31, 2023, and why", "2023-03-31"),
        ("the plan as it stood on 16 June 2023", "2023-06-16"),
        ("as of May 2023", "2023-05-31"),
        ("as of 2024-02", "2024-02-29"),
        ("as of 2023-02-30, then as of 2023-01-01", "2023-01-01"),  # an invalid date is skipped
        ("what changed on 2023-04-02?", None),  # a date alone is not a bound
        ("as of now", None),
        ("as of last March", None),
    ],
)
def test_question_as_of_reads_a_stated_bound(question, bound) -> None:
    assert question_as_of(question) == (None if bound is None else parse_as_of(bound))


def test_conjunctive_terms_are_every_content_word() -> None:
    query = lexical_query(QUESTION, preset("paper-orgmembench"))
    assert query.mode == "conjunctive"
    assert "q3" in query.terms and "the" not in query.terms and "about" not in query.terms


def test_tag_labels_include_ngrams_and_the_whole_question() -> None:
    labels = tag_labels("Jane Doe's plan", Settings(tag_ngrams=2))
    assert {"jane", "doe", "jane-doe", "doe-s", "jane-doe's-plan"} <= set(labels)


@pytest.mark.parametrize(
    "changes",
    [
        {"k": 0},
        {"candidates": -1},
        {"w_vec": -1},
        {"gamma": 0},
        {"lexical_mode": "fuzzy"},
        {"stop_words": "klingon"},
        {"reserve": -1},
        {"max_terms": 0},
        {"k": True},
        {"thread_weight": 1.0},
        {"thread_weight": -0.1},
        {"thread_weight": "0.4"},
        {"thread_depth": 0},
        {"w_date": -1},
        {"phrases": "yes"},
        {"unique_stems": 1},
        {"as_of_in_question": "yes"},
        {"reserve_rule": "newest"},
    ],
)
def test_invalid_settings_are_refused(changes) -> None:
    with pytest.raises(InvalidInput):
        Settings().with_(**changes)
    with pytest.raises(InvalidInput):
        Settings().with_(no_such_knob=1)
