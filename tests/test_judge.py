"""Judges: rubric arithmetic, run statistics, failure records, label prompts, F1 and BLEU-1."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from mempp.bench.judge import (
    CANDIDATE_CHARS,
    LONGMEMEVAL_TYPES,
    LabelJudgement,
    RubricJudgement,
    RubricRun,
    bleu1,
    judge_locomo,
    judge_longmemeval,
    judge_rubric,
    label_summary,
    longmemeval_messages,
    longmemeval_prompt_kind,
    normalize_answer,
    rubric_score,
    subpoint_weight,
    summarize_rubric,
    token_f1,
)
from mempp.errors import InvalidInput
from mempp.llm import LLMClient

import fake_openai
from fake_openai import FakeOpenAI

# The shared fixture (pytest finds fixtures among module attributes).
server = fake_openai.server

THIRDS = [
    {"id": "a", "max_score": 0.333, "criterion": "names the new vendor", "fail_criterion": "x"},
    {"id": "b", "max_score": 0.333, "criterion": "gives the change date", "fail_criterion": "y"},
    {"id": "c", "max_score": 0.333, "criterion": "gives the reason", "fail_criterion": "z"},
]
TRUTH = {"current_value": "Acme", "prior_value": "Globex", "change_date": "2023-05-02"}


@pytest.fixture
def llm(server: FakeOpenAI) -> Iterator[LLMClient]:
    with LLMClient(base_url=server.base_url, model="judge-model", sleep=lambda s: None) as client:
        yield client


def rubric_reply(a: float, b: float, c: float, **extra: object) -> dict[str, object]:
    reply = {
        "subpoint_scores": {"a": a, "b": b, "c": c},
        "semantic_score": 0.5,
        "faithful": True,
        "failure_mode": "none",
        "rationale": "ok",
    }
    reply.update(extra)
    return reply


# -- rubric arithmetic ----------------------------------------------------------------------
def test_rubric_score_normalises_thirds():
    # (0.333*1 + 0.333*0.5 + 0.333*0) / 0.999 = 0.5
    assert rubric_score(THIRDS, {"a": 1.0, "b": 0.5, "c": 0.0}) == pytest.approx(0.5)
    assert rubric_score(THIRDS, {"a": 1.0, "b": 1.0, "c": 1.0}) == pytest.approx(1.0)


def test_rubric_score_missing_zero_and_bad_weights_count_one():
    subpoints = [
        {"id": "a", "max_score": 2},
        {"id": "b"},  # missing -> 1
        {"id": "c", "max_score": 0},  # zero -> 1
        {"id": "d", "max_score": "heavy"},  # unparseable -> 1
    ]
    assert [subpoint_weight(sp) for sp in subpoints] == [2.0, 1.0, 1.0, 1.0]
    # (2*0.5 + 1*1 + 1*0 + 1*0) / 5 = 0.4
    assert rubric_score(subpoints, {"a": 0.5, "b": 1, "c": 0, "d": 0}) == pytest.approx(0.4)
    assert subpoint_weight({"weight": 3}) == 3.0


def test_rubric_score_clamps_fractions():
    # 1.7 -> 1, -0.3 -> 0, missing -> 0: (0.333*1) / 0.999
    assert rubric_score(THIRDS, {"a": 1.7, "b": -0.3}) == pytest.approx(1 / 3)


def test_judge_rubric_three_runs_mean_and_sd(server, llm):
    server.reply_json(rubric_reply(1, 1, 0))  # 2/3
    server.reply_json(rubric_reply(1, 0, 0))  # 1/3
    server.reply_json(rubric_reply(1, 1, 1))  # 1
    result = judge_rubric(
        "Who supplies us now?",
        "supersession",
        TRUTH,
        THIRDS,
        "Acme since May.",
        llm,
        question_id="Q-0001",
    )
    assert [run.score for run in result.runs] == pytest.approx([2 / 3, 1 / 3, 1.0])
    assert result.score == pytest.approx(2 / 3)
    # sample sd of (2/3, 1/3, 1): sqrt((0 + 1/9 + 1/9) / 2) = 1/3
    assert result.sd == pytest.approx(1 / 3)
    assert result.score_100 == pytest.approx(200 / 3)
    assert result.sd_100 == pytest.approx(100 / 3)
    assert result.failed_runs == 0
    assert result.to_dict()["question_id"] == "Q-0001"
    assert len(server.requests) == 3


def test_judge_rubric_prompt_hides_weights_and_cuts_the_candidate(server, llm):
    for _ in range(3):
        server.reply_json(rubric_reply(1, 1, 1))
    candidate = "A" * CANDIDATE_CHARS + "HIDDEN-TAIL"
    judge_rubric("Who supplies us now?", "supersession", TRUTH, THIRDS, candidate, llm)
    request = server.requests[0]
    assert request.body["temperature"] == 0
    prompt = request.text()
    assert "0.333" not in prompt and "max_score" not in prompt
    for sp in THIRDS:
        assert sp["criterion"] in prompt and f'"fail_criterion": "{sp["fail_criterion"]}"' in prompt
    assert '"current_value": "Acme"' in prompt
    assert "supersession" in prompt and "Who supplies us now?" in prompt
    assert "A" * CANDIDATE_CHARS in prompt and "HIDDEN-TAIL" not in prompt
    # every run is asked, none replayed from another
    assert [r.body == request.body for r in server.requests] == [True, True, True]


def test_fail_if_is_accepted_as_fail_criterion(server, llm):
    server.reply_json({"subpoint_scores": {"s": 1}})
    subpoints = [{"id": "s", "criterion": "says yes", "fail_if": "says no"}]
    result = judge_rubric("Q?", "provenance", {}, subpoints, "yes", llm, runs=1)
    assert result.score == 1.0
    assert '"fail_criterion": "says no"' in server.requests[0].text()


def test_malformed_judge_reply_is_retried_then_recorded_as_failure(server, llm):
    server.reply("Scores: a=1, b=1, c=0")  # run 1, malformed
    server.reply_json(rubric_reply(1, 1, 0))  # run 1, retry succeeds
    server.reply('{"subpoint_scores": {"a": 1, "b": 1}')  # run 2, partial JSON
    server.reply_json({"subpoint_scores": {"a": 1, "b": 1}})  # run 2 retry: facet c missing
    server.reply_json(rubric_reply(0, 0, 0))  # run 3
    result = judge_rubric("Q?", "supersession", TRUTH, THIRDS, "answer", llm)
    ok1, failed, ok3 = result.runs
    assert ok1.ok and ok1.score == pytest.approx(2 / 3)
    assert not failed.ok and failed.score is None and "c" in (failed.error or "")
    assert ok3.ok and ok3.score == 0.0
    assert result.failed_runs == 1
    assert result.score == pytest.approx(1 / 3)  # mean of the two good runs, not of three
    assert len(server.requests) == 5


def test_judge_rubric_keeps_judge_details(server, llm):
    server.reply_json(
        rubric_reply(1, 0.5, 0, faithful=False, failure_mode="odd", rationale="r" * 900)
    )
    [run] = judge_rubric("Q?", "contradiction", TRUTH, THIRDS, "ans", llm, runs=1).runs
    assert run.fractions == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert run.faithful is False and run.failure_mode == "none" and len(run.rationale) == 500


def test_no_facets_falls_back_to_the_semantic_score(server, llm):
    server.reply_json({"subpoint_scores": {}, "semantic_score": 0.8})
    result = judge_rubric("Q?", "bitemporal", TRUTH, [], "ans", llm, runs=1)
    assert result.score == pytest.approx(0.8)


def test_summarize_rubric_over_runs():
    def judgement(category: str, *scores: float | None) -> RubricJudgement:
        runs = [
            RubricRun(i + 1, s, error=None if s is not None else "bad")
            for i, s in enumerate(scores)
        ]
        return RubricJudgement(category, runs)

    items = [
        judgement("C1", 1.0, 0.5, 0.0),  # mean 0.5
        judgement("C1", 0.0, 0.0, None),  # mean 0; the failed run 3 counts as that mean
        judgement("C2", None, None, None),  # unscored
    ]
    summary = summarize_rubric(items)
    assert summary.per_run == pytest.approx([50.0, 25.0, 0.0])
    assert summary.overall == pytest.approx(25.0)
    assert summary.sd == pytest.approx(25.0)  # stdev of (50, 25, 0)
    assert summary.by_category == pytest.approx({"C1": 25.0})
    assert (summary.questions, summary.unscored, summary.failed_runs) == (3, 1, 4)


# -- LoCoMo ---------------------------------------------------------------------------------
def test_judge_locomo_labels(server, llm):
    server.reply_json({"reasoning": "same date", "label": "CORRECT"})
    server.reply_json({"reasoning": "different", "label": "wrong"})
    good = judge_locomo("When did she move?", 2022, "In 2022.", llm)
    bad = judge_locomo("When did she move?", "2022", "2019", llm)
    assert (good.label, good.correct, good.reasoning) == ("CORRECT", True, "same date")
    assert (bad.label, bad.correct) == ("WRONG", False)
    prompt = server.requests[0].text()
    assert "Gold answer: 2022" in prompt and "Generated answer: In 2022." in prompt
    assert server.requests[0].body["temperature"] == 0


def test_judge_locomo_records_unusable_replies(server, llm):
    server.reply_json({"label": "MAYBE"}).reply("CORRECT")
    result = judge_locomo("Q?", "a", "a", llm)
    assert result.correct is None and result.label is None and result.error
    assert len(server.requests) == 2
    summary = label_summary([result, LabelJudgement("CORRECT", True, "locomo")])
    assert (summary.score, summary.judged, summary.failed) == (100.0, 1, 1)


# -- LongMemEval ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question_type", "kind", "phrase"),
    [
        ("single-session-user", "standard", "contains the correct answer"),
        ("single-session-assistant", "standard", "contains the correct answer"),
        ("multi-session", "standard", "contains the correct answer"),
        ("temporal-reasoning", "temporal-reasoning", "off-by-one"),
        ("knowledge-update", "knowledge-update", "updated"),
        ("single-session-preference", "single-session-preference", "rubric"),
    ],
)
def test_longmemeval_prompt_by_type(question_type, kind, phrase):
    assert longmemeval_prompt_kind(question_type) == kind
    system, user = longmemeval_messages(question_type, "Q?", "gold", "resp")
    assert phrase in system["content"]
    assert "Response: resp" in user["content"]
    if kind != "temporal-reasoning":
        assert "off-by-one" not in system["content"]
    if kind == "single-session-preference":
        assert "Rubric: gold" in user["content"]
    else:
        assert "Correct answer: gold" in user["content"]


def test_longmemeval_abstention_prompt_for_any_type():
    for question_type in LONGMEMEVAL_TYPES:
        assert longmemeval_prompt_kind(question_type, abstention=True) == "abstention"
    system, user = longmemeval_messages("multi-session", "Q?", "never said", "r", abstention=True)
    assert "cannot be answered" in system["content"]
    assert "Why it is unanswerable: never said" in user["content"]


def test_longmemeval_unknown_type():
    with pytest.raises(InvalidInput, match="unknown LongMemEval"):
        longmemeval_prompt_kind("single-hop")


def test_judge_longmemeval_over_http(server, llm):
    server.reply_json({"reasoning": "declines", "label": "yes"})
    server.reply_json({"label": "No"})
    abstained = judge_longmemeval(
        "temporal-reasoning",
        "How many days?",
        "not mentioned",
        "I don't know.",
        llm,
        question_id="gpt4_123_abs",
    )
    assert (abstained.kind, abstained.label, abstained.correct) == ("abstention", "yes", True)
    assert "cannot be answered" in server.requests[0].messages[0]["content"]
    updated = judge_longmemeval("knowledge-update", "Where?", "Paris", "Lyon", llm)
    assert (updated.kind, updated.label, updated.correct) == ("knowledge-update", "no", False)
    assert "updated value" in server.requests[1].messages[0]["content"]


# -- token F1 and BLEU-1 --------------------------------------------------------------------
def test_normalize_answer():
    assert normalize_answer("The Meeting, on a Friday!") == "meeting on friday"
    assert normalize_answer(2022) == "2022"
    assert normalize_answer("  An   apple ") == "apple"


def test_f1_hand_computed():
    # gold -> [meeting, is, on, friday]; pred -> [meeting, on, friday, afternoon]; 3 shared
    assert token_f1("meeting on Friday afternoon", "The meeting is on Friday") == 0.75
    # P = 1, R = 1/2 -> 2/3
    assert token_f1("Friday", "on Friday") == pytest.approx(2 / 3)
    # multiset overlap: one "friday" shared; P = 1/3, R = 1 -> 0.5
    assert token_f1("friday friday friday", "Friday") == pytest.approx(0.5)
    assert token_f1("Paris", "Lyon") == 0.0
    assert token_f1("the", "a") == 1.0  # both normalise to nothing
    assert token_f1("", "Lyon") == 0.0


def test_bleu1_hand_computed():
    # equal length: BP = 1; clipped precision 3/4
    assert bleu1("meeting on Friday afternoon", "The meeting is on Friday") == 0.75
    # shorter than the gold: BP = exp(1 - 2/1); precision 1
    assert bleu1("Friday", "on Friday") == pytest.approx(math.exp(-1))
    # longer than the gold: BP = 1; clipping keeps one "friday" of three
    assert bleu1("friday friday friday", "Friday") == pytest.approx(1 / 3)
    # 2 tokens vs 3: BP = exp(1 - 3/2); precision 1/2
    assert bleu1("went Paris", "she visited Paris") == pytest.approx(0.5 * math.exp(-0.5))
    assert bleu1("", "Paris") == 0.0
    assert bleu1("Paris", "") == 0.0


def test_judges_send_their_reply_schemas(server, llm):
    server.reply_json({"subpoint_scores": {"a": 1, "b": 0, "c": 1}})
    server.reply_json({"reasoning": "same date", "label": "CORRECT"})
    server.reply_json({"reasoning": "it says Acme", "label": "yes"})
    judge_rubric("Q?", "contradiction", TRUTH, THIRDS, "ans", llm, runs=1)
    assert judge_locomo("When?", "7 May", "May 7th", llm).correct is True
    assert judge_longmemeval("multi-session", "Who?", "Acme", "Acme.", llm).correct is True
    rubric, locomo, lme = (r.body["response_format"]["json_schema"] for r in server.requests)
    scores = rubric["schema"]["properties"]["subpoint_scores"]
    assert scores["required"] == ["a", "b", "c"] and rubric["strict"] is True
    assert locomo["schema"]["properties"]["label"]["enum"] == ["CORRECT", "WRONG"]
    assert lme["schema"]["properties"]["label"]["enum"] == ["yes", "no"]
    for request in server.requests:
        assert "<one sentence>" not in request.text()
