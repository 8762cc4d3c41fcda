"""Benchmark judges: OrgMemBench rubric, LoCoMo (label, F1, BLEU-1), LongMemEval (label).

Every judge call runs at temperature 0 and asks for a JSON reply that is read strictly
(:meth:`mempp.llm.LLMClient.chat_json`). A malformed reply is retried once, with a note on what
was wrong; if it is still unusable the result records the failure (``error`` set, score or label
``None``) so it is never silently counted as a zero. Transport failures (endpoint down, HTTP
4xx) are not caught here: they are not the answer's fault, and the caller decides whether to
stop or to resume later.

The arithmetic is done in code, never by the judge: rubric weights are not shown to the judge,
and F1 and BLEU-1 are pure functions (SPEC, paper appendix B.2).
"""

from __future__ import annotations

import json
import math
import re
import statistics
import string
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mempp.errors import InvalidInput

if TYPE_CHECKING:
    from mempp.llm import LLMClient

__all__ = [
    "CANDIDATE_CHARS",
    "LONGMEMEVAL_TYPES",
    "LabelJudgement",
    "LabelSummary",
    "RubricJudgement",
    "RubricRun",
    "RubricSummary",
    "answer_tokens",
    "bleu1",
    "judge_locomo",
    "judge_longmemeval",
    "judge_rubric",
    "label_summary",
    "locomo_messages",
    "longmemeval_messages",
    "longmemeval_prompt_kind",
    "normalize_answer",
    "rubric_messages",
    "rubric_score",
    "subpoint_weight",
    "summarize_rubric",
    "token_f1",
]

CANDIDATE_CHARS = 6_000  # the OrgMemBench judge reads only this much of an answer
FAILURE_MODES = ("none", "retrieval_miss", "wrong_synthesis", "hallucination", "wrong_abstain")


# ===========================================================================================
# OrgMemBench rubric judge
# ===========================================================================================
RUBRIC_SYSTEM = """\
You grade answers for a benchmark of question answering over an organization's records. You \
receive a question, its ground truth (authoritative), a rubric of facets, and a candidate \
answer. Score every facet on its own, from 0.0 to 1.0: the fraction of the facet's criterion \
that the candidate really meets. An answer matching a facet's fail criterion gets 0 for that \
facet. Be strict: give credit only for what the candidate actually states, and only partial \
credit for a vague or hedged statement. Correct claims that agree with the ground truth earn \
credit; claims that contradict it, or that are asserted confidently without support, earn \
none for the facets they concern. Output JSON only."""

RUBRIC_REPLY = """\
Reply with one JSON object with these keys:
- "subpoint_scores": an object mapping every facet id listed above to a number from 0.0 to 1.0
- "semantic_score": your overall judgement of the answer, from 0.0 to 1.0
- "faithful": false if the candidate confidently asserts something unsupported by or \
contradicting the ground truth, otherwise true
- "failure_mode": one of "none", "retrieval_miss", "wrong_synthesis", "hallucination", \
"wrong_abstain"
- "rationale": one or two sentences"""


@dataclass(frozen=True, slots=True)
class RubricRun:
    """One judge run over one answer. ``score`` is ``None`` when the run failed."""

    run: int
    score: float | None
    fractions: dict[str, float] = field(default_factory=dict)
    semantic_score: float | None = None
    faithful: bool | None = None
    failure_mode: str | None = None
    rationale: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.score is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "score": self.score,
            "fractions": dict(self.fractions),
            "semantic_score": self.semantic_score,
            "faithful": self.faithful,
            "failure_mode": self.failure_mode,
            "rationale": self.rationale,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class RubricJudgement:
    """All judge runs over one answer. Scores are fractions in [0, 1]; ``*_100`` are x100."""

    category: str
    runs: list[RubricRun]
    question_id: str | None = None

    @property
    def scores(self) -> list[float]:
        return [run.score for run in self.runs if run.score is not None]

    @property
    def failed_runs(self) -> int:
        return sum(1 for run in self.runs if not run.ok)

    @property
    def score(self) -> float | None:
        """Mean over the successful runs; ``None`` if every run failed."""
        scores = self.scores
        return statistics.fmean(scores) if scores else None

    @property
    def sd(self) -> float | None:
        """Sample standard deviation over the successful runs (0 with a single run)."""
        scores = self.scores
        if not scores:
            return None
        return statistics.stdev(scores) if len(scores) > 1 else 0.0

    @property
    def score_100(self) -> float | None:
        return None if self.score is None else 100 * self.score

    @property
    def sd_100(self) -> float | None:
        return None if self.sd is None else 100 * self.sd

    def to_dict(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id,
            "category": self.category,
            "score": self.score,
            "sd": self.sd,
            "failed_runs": self.failed_runs,
            "runs": [run.to_dict() for run in self.runs],
        }


def subpoint_weight(subpoint: Mapping[str, Any]) -> float:
    """A facet's weight: ``max_score`` (else ``weight``); missing, zero, negative or not a
    number counts as 1.0, as in the benchmark's own scorer."""
    raw = subpoint.get("max_score", subpoint.get("weight"))
    try:
        weight = float(raw)
    except (TypeError, ValueError):
        return 1.0
    if isinstance(raw, bool) or not math.isfinite(weight) or weight <= 0:
        return 1.0
    return weight


def subpoint_id(subpoint: Mapping[str, Any], index: int) -> str:
    """The facet's id as a string; facets without one are named by position (S1, S2, ...)."""
    raw = subpoint.get("id")
    return str(raw) if raw not in (None, "") else f"S{index + 1}"


def rubric_score(subpoints: Sequence[Mapping[str, Any]], fractions: Mapping[str, float]) -> float:
    """Weighted mean of the judge's fractions: sum(w * f) / sum(w), each f clamped to [0, 1].

    A facet the judge did not score counts 0 here; :func:`judge_rubric` never gets that far
    because it treats such a reply as malformed. Normalising by the total weight puts rubrics
    whose weights add up to 0.999 (3 x 0.333) on the same 0-1 scale as the others.
    """
    if not subpoints:
        raise InvalidInput("a rubric needs at least one subpoint")
    total = 0.0
    earned = 0.0
    for index, subpoint in enumerate(subpoints):
        weight = subpoint_weight(subpoint)
        total += weight
        earned += weight * _clamp(fractions.get(subpoint_id(subpoint, index), 0.0))
    return earned / total


def rubric_reply(ids: Sequence[str]) -> dict[str, Any]:
    """The rubric judge's reply schema: one score per facet id (only ``subpoint_scores`` is
    required when parsing; the other keys are read when present)."""
    return {
        "subpoint_scores": dict.fromkeys(ids, float),
        "semantic_score": float,
        "faithful": bool,
        "failure_mode": str,  # an unknown mode is read as "none" (see _rubric_run)
        "rationale": str,
    }


def rubric_messages(
    question: str,
    category: str,
    ground_truth: Any,
    subpoints: Sequence[Mapping[str, Any]],
    candidate: str,
) -> list[dict[str, str]]:
    """The judge's messages. Facets are shown with id, criterion and fail criterion only."""
    facets = [
        {
            "id": subpoint_id(sp, i),
            "criterion": sp.get("criterion", ""),
            "fail_criterion": sp.get("fail_criterion", sp.get("fail_if", "")),
        }
        for i, sp in enumerate(subpoints)
    ]
    truth = json.dumps(ground_truth, indent=2, ensure_ascii=False, sort_keys=False)
    parts = [
        f"Category: {category}",
        f"Question: {question.strip()}",
        f"Ground truth (authoritative):\n{truth}",
    ]
    if facets:
        parts.append("Rubric facets:\n" + json.dumps(facets, indent=2, ensure_ascii=False))
    else:
        parts.append("This question has no rubric facets: judge it as a whole.")
    parts.append(f'Candidate answer:\n"""\n{(candidate or "")[:CANDIDATE_CHARS]}\n"""')
    parts.append(RUBRIC_REPLY)
    return [
        {"role": "system", "content": RUBRIC_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def judge_rubric(
    question: str,
    category: str,
    ground_truth: Any,
    subpoints: Sequence[Mapping[str, Any]],
    candidate: str,
    llm: LLMClient,
    runs: int = 3,
    *,
    question_id: str | None = None,
    max_tokens: int = 1024,
) -> RubricJudgement:
    """Grade one answer against its rubric ``runs`` times (temperature 0).

    Each run is a separate call (a separate cache entry too), so the spread across runs shows
    how much the judge itself varies. A run whose reply is still unusable after one retry is
    recorded with ``error`` and no score.
    """
    if runs < 1:
        raise InvalidInput("runs must be >= 1")
    ids = [subpoint_id(sp, i) for i, sp in enumerate(subpoints)]
    messages = rubric_messages(question, category, ground_truth, subpoints, candidate)

    def check(reply: dict[str, Any]) -> None:
        scores = reply["subpoint_scores"]
        missing = [i for i in ids if i not in scores]
        if missing:
            raise ValueError(f"subpoint_scores lacks facet(s) {', '.join(missing)}")
        if not ids and not _is_number(reply.get("semantic_score")):
            raise ValueError("semantic_score must be a number when there are no facets")

    results: list[RubricRun] = []
    for run in range(1, runs + 1):
        results.append(_rubric_run(llm, messages, subpoints, ids, check, run, max_tokens))
    return RubricJudgement(category, results, question_id)


def _rubric_run(
    llm: LLMClient,
    messages: list[dict[str, str]],
    subpoints: Sequence[Mapping[str, Any]],
    ids: list[str],
    check: Callable[[dict[str, Any]], None],
    run: int,
    max_tokens: int,
) -> RubricRun:
    from mempp.llm import LLMReplyError

    try:
        reply = llm.chat_json(
            messages,
            schema=rubric_reply(ids),
            name="rubric_judgement",
            required=("subpoint_scores",),
            check=check,
            reply_retries=1,
            temperature=0.0,
            max_tokens=max_tokens,
            cache_tag=f"rubric-run-{run}",
        )
    except LLMReplyError as exc:
        return RubricRun(run, None, error=str(exc))
    fractions = {i: _clamp(reply["subpoint_scores"][i]) for i in ids}
    semantic = reply.get("semantic_score")
    semantic_score = _clamp(semantic) if _is_number(semantic) else None
    score = rubric_score(subpoints, fractions) if ids else float(semantic_score or 0.0)
    faithful = reply.get("faithful")
    mode = reply.get("failure_mode")
    rationale = reply.get("rationale")
    return RubricRun(
        run,
        score,
        fractions,
        semantic_score,
        faithful if isinstance(faithful, bool) else None,
        mode if mode in FAILURE_MODES else ("none" if mode is not None else None),
        str(rationale)[:500] if rationale is not None else None,
    )


@dataclass(frozen=True, slots=True)
class RubricSummary:
    """A benchmark-level rubric score on 0-100.

    For each judge run r, ``per_run[r]`` is 100 x the mean question score of that run; the
    headline ``overall`` is the mean of those, and ``sd`` their sample standard deviation (the
    paper judges each run three times and reports the mean). A question whose run r failed
    contributes its mean over its other runs to run r; a question with no successful run is
    left out and counted in ``unscored``.
    """

    overall: float | None
    sd: float | None
    per_run: list[float]
    by_category: dict[str, float]
    questions: int
    unscored: int
    failed_runs: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall,
            "sd": self.sd,
            "per_run": self.per_run,
            "by_category": self.by_category,
            "questions": self.questions,
            "unscored": self.unscored,
            "failed_runs": self.failed_runs,
        }


def summarize_rubric(judgements: Iterable[RubricJudgement]) -> RubricSummary:
    items = list(judgements)
    scored = [j for j in items if j.score is not None]
    width = max((len(j.runs) for j in items), default=0)
    per_run: list[float] = []
    for r in range(width):
        values: list[float] = []
        for j in scored:
            run = j.runs[r] if r < len(j.runs) else None
            if run is not None and run.score is not None:
                values.append(run.score)
            else:  # this run failed (or was never made): stand in the question's own mean
                values.append(j.score or 0.0)
        if values:
            per_run.append(100 * statistics.fmean(values))
    by_category: dict[str, list[float]] = {}
    for j in scored:
        by_category.setdefault(j.category, []).append(100 * (j.score or 0.0))
    overall = statistics.fmean(per_run) if per_run else None
    sd = statistics.stdev(per_run) if len(per_run) > 1 else (0.0 if per_run else None)
    return RubricSummary(
        overall,
        sd,
        per_run,
        {name: statistics.fmean(v) for name, v in by_category.items()},
        len(items),
        len(items) - len(scored),
        sum(j.failed_runs for j in items),
    )


# ===========================================================================================
# Labels (LoCoMo, LongMemEval)
# ===========================================================================================
@dataclass(frozen=True, slots=True)
class LabelJudgement:
    """A correct/wrong verdict. ``label`` is the judge's word (CORRECT/WRONG or yes/no);
    ``correct`` is ``None`` and ``error`` set when no usable verdict was obtained."""

    label: str | None
    correct: bool | None
    kind: str
    reasoning: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "correct": self.correct,
            "kind": self.kind,
            "reasoning": self.reasoning,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class LabelSummary:
    """Share of correct verdicts on 0-100 over the questions that got a verdict."""

    score: float | None
    correct: int
    judged: int
    failed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "correct": self.correct,
            "judged": self.judged,
            "failed": self.failed,
        }


def label_summary(judgements: Iterable[LabelJudgement]) -> LabelSummary:
    items = list(judgements)
    judged = [j for j in items if j.correct is not None]
    correct = sum(1 for j in judged if j.correct)
    score = 100 * correct / len(judged) if judged else None
    return LabelSummary(score, correct, len(judged), len(items) - len(judged))


def _judge_label(
    llm: LLMClient,
    messages: list[dict[str, str]],
    labels: Mapping[str, bool],
    kind: str,
    max_tokens: int,
) -> LabelJudgement:
    from mempp.llm import LLMReplyError

    def check(reply: dict[str, Any]) -> None:
        if reply["label"].strip().upper() not in labels:
            raise ValueError(f"label must be one of {', '.join(labels)}")

    words = tuple(labels) if kind == "locomo" else tuple(label.lower() for label in labels)
    try:
        reply = llm.chat_json(
            messages,
            schema={"reasoning": str, "label": Literal[words]},
            name=f"{kind}_verdict".replace("-", "_"),
            required=("label",),
            check=check,
            reply_retries=1,
            temperature=0.0,
            max_tokens=max_tokens,
        )
    except LLMReplyError as exc:
        return LabelJudgement(None, None, kind, error=str(exc))
    label = reply["label"].strip().upper()
    reasoning = reply.get("reasoning")
    return LabelJudgement(
        label if label in ("CORRECT", "WRONG") else label.lower(),
        labels[label],
        kind,
        str(reasoning)[:500] if reasoning is not None else None,
    )


# -- LoCoMo ---------------------------------------------------------------------------------
LOCOMO_SYSTEM = """\
You check answers to questions about a long conversation between two people. You receive the \
question, the gold answer and a generated answer, and decide whether the generated answer is \
CORRECT or WRONG.

Be generous about form and strict about substance. The generated answer is CORRECT when it \
states the same fact as the gold answer, even if it is worded differently, longer, or adds \
detail that does not contradict the gold answer. For dates and times, any format or relative \
phrasing that points to the same date or period is fine (for example "May 7th" and "7 May"). \
It is WRONG when it misses the key fact, gives a different one, or says it does not know.

Reply with one JSON object with two keys: "reasoning", one sentence saying why, and "label", \
the word CORRECT or the word WRONG."""


def locomo_messages(question: str, gold: Any, candidate: str) -> list[dict[str, str]]:
    user = (
        f"Question: {question.strip()}\n"
        f"Gold answer: {_as_text(gold)}\n"
        f"Generated answer: {(candidate or '').strip()}"
    )
    return [{"role": "system", "content": LOCOMO_SYSTEM}, {"role": "user", "content": user}]


def judge_locomo(
    question: str, gold: Any, candidate: str, llm: LLMClient, *, max_tokens: int = 256
) -> LabelJudgement:
    """CORRECT/WRONG verdict on one LoCoMo answer (gold answers may be numbers: stringified)."""
    return _judge_label(
        llm,
        locomo_messages(question, gold, candidate),
        {"CORRECT": True, "WRONG": False},
        "locomo",
        max_tokens,
    )


# -- LongMemEval ----------------------------------------------------------------------------
LONGMEMEVAL_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)

_LME_INTRO = """\
You check a chat assistant's response to a question about its past conversations with a user. \
"""
_LME_REPLY = """
Reply with one JSON object with two keys: "reasoning", one sentence saying why, and "label", \
the word yes or the word no."""

_LME_STANDARD = """\
You receive the question, the correct answer and the response. Say "yes" if the response \
contains the correct answer: a response that is equivalent to it, or that gives it together \
with intermediate steps or extra context, counts. Say "no" if the response gives a different \
answer, or only part of what the correct answer requires."""

_LME_RULES = {
    "standard": _LME_STANDARD,
    "temporal-reasoning": _LME_STANDARD
    + """ Do not count an off-by-one difference in a number of days, weeks or months against \
the response (for example 18 days where the correct answer says 19).""",
    "knowledge-update": _LME_STANDARD
    + """ The user's information changed over time and the correct answer is the updated \
value. A response that also mentions the earlier value still counts, as long as it gives the \
updated value as the current one.""",
    "single-session-preference": """\
You receive the question, a rubric describing the personalised response the user would want, \
and the response. Say "yes" if the response satisfies the rubric: it recalls and correctly uses \
the user's own preferences or circumstances. It does not need to cover every point of the \
rubric. Say "no" if it ignores or misremembers them and stays generic.""",
    "abstention": """\
This question cannot be answered from the conversation history: it asks about something the \
user never mentioned, or mentions it only in a way that does not settle the question. You \
receive the question, an explanation of why it is unanswerable, and the response. Say "yes" if \
the response recognises that it cannot answer, for example by saying the information is \
missing or was never mentioned. Say "no" if it answers as though it knew.""",
}

_LME_GOLD_LABEL = {
    "single-session-preference": "Rubric",
    "abstention": "Why it is unanswerable",
}


def longmemeval_prompt_kind(question_type: str, abstention: bool = False) -> str:
    """Which prompt applies: ``abstention`` first, then the type's own, else ``standard``."""
    if question_type not in LONGMEMEVAL_TYPES:
        raise InvalidInput(
            f"unknown LongMemEval question type {question_type!r} "
            f"(one of {', '.join(LONGMEMEVAL_TYPES)})"
        )
    if abstention:
        return "abstention"
    return question_type if question_type in _LME_RULES else "standard"


def longmemeval_messages(
    question_type: str, question: str, gold: Any, candidate: str, *, abstention: bool = False
) -> list[dict[str, str]]:
    kind = longmemeval_prompt_kind(question_type, abstention)
    system = _LME_INTRO + _LME_RULES[kind] + "\n" + _LME_REPLY
    gold_label = _LME_GOLD_LABEL.get(kind, "Correct answer")
    user = (
        f"Question: {question.strip()}\n"
        f"{gold_label}: {_as_text(gold)}\n"
        f"Response: {(candidate or '').strip()}"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def judge_longmemeval(
    question_type: str,
    question: str,
    gold: Any,
    candidate: str,
    llm: LLMClient,
    *,
    abstention: bool | None = None,
    question_id: str | None = None,
    max_tokens: int = 256,
) -> LabelJudgement:
    """yes/no verdict with the prompt for ``question_type``. Abstention questions (ids ending
    in ``_abs`` in LongMemEval) get their own prompt; pass ``abstention`` or ``question_id``."""
    if abstention is None:
        abstention = bool(question_id and question_id.endswith("_abs"))
    kind = longmemeval_prompt_kind(question_type, abstention)
    return _judge_label(
        llm,
        longmemeval_messages(question_type, question, gold, candidate, abstention=abstention),
        {"YES": True, "NO": False},
        kind,
        max_tokens,
    )


# ===========================================================================================
# Token F1 and BLEU-1 (pure functions)
# ===========================================================================================
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: Any) -> str:
    """The usual answer normalisation: lowercase, punctuation removed, the articles a/an/the
    removed, whitespace collapsed."""
    lowered = _as_text(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def answer_tokens(text: Any) -> list[str]:
    return normalize_answer(text).split()


def token_f1(prediction: Any, gold: Any) -> float:
    """Harmonic mean of token precision and recall over token multisets (after
    normalisation). If either side normalises to nothing, 1.0 when both do, else 0.0."""
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: Any, gold: Any) -> float:
    """BLEU-1 against one reference: clipped unigram precision times the brevity penalty
    ``1 if |pred| > |gold| else exp(1 - |gold| / |pred|)``, on the same normalised tokens as
    :func:`token_f1`. An empty prediction scores 0."""
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    if not pred:
        return 0.0
    ref_counts = Counter(ref)
    clipped = sum(min(n, ref_counts[w]) for w, n in Counter(pred).items())
    precision = clipped / len(pred)
    penalty = 1.0 if len(pred) > len(ref) else math.exp(1 - len(ref) / len(pred))
    return penalty * precision


# -- helpers --------------------------------------------------------------------------------
def _clamp(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(number):
        return 0.0
    return min(1.0, max(0.0, number))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
