"""Settings, presets and how a question becomes lexical terms."""

from __future__ import annotations

import pytest

from mempp import InvalidInput, Settings, preset
from mempp.query import lexical_query, tag_labels

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


def test_paper_disjunctive_terms_keep_the_first_eight_long_words() -> None:
    terms = lexical_query(QUESTION, preset("paper")).terms
    assert terms == ("jane", "doe", "decide", "about", "pricing", "team", "plan", "why")
    assert len(terms) == 8


def test_default_terms_drop_english_stop_words_without_a_cap() -> None:
    query = lexical_query(QUESTION, preset("default"))
    assert query.mode == "disjunctive"
    assert query.terms == ("jane", "doe", "decide", "q3", "pricing", "team", "plan", "changed")


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
    ],
)
def test_invalid_settings_are_refused(changes) -> None:
    with pytest.raises(InvalidInput):
        Settings().with_(**changes)
    with pytest.raises(InvalidInput):
        Settings().with_(no_such_knob=1)
