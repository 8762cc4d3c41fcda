"""The answer + judge step of ``mempp bench``, active only when an LLM endpoint is configured.

For each question and each answered system, the system's rendered evidence, cut to the answer
window (the OrgMemBench harness keeps the first 40,000 characters), goes to
:func:`mempp.llm.answer.answer_from_context` (the harness's basic answerer). The answer is then
graded by the benchmark's judge (:mod:`mempp.bench.judge`):

* OrgMemBench: the rubric judge, ``judge_runs`` runs at temperature 0; a question's score is the
  weighted facet sum computed in code; the benchmark score is 0-100 with the standard deviation
  over runs, overall and per category.
* LoCoMo: the CORRECT/WRONG judge, plus token F1 and BLEU-1 against the gold answer.
* LongMemEval: the yes/no judge with the prompt of the question type (abstention apart).

Every call goes through :class:`mempp.llm.LLMClient` (its retries, its concurrency bound) with
an on-disk reply cache under the bench cache folder, so rerunning the same evidence asks
nothing. Questions run ``concurrency`` at a time. A failed answer or judgement is recorded on the
question's row as a failure (``answer_score`` stays ``None``) and counted, never scored as 0. If
the endpoint keeps failing (unreachable after the client's retries, or refusing the key, model or
URL) the remaining questions are not attempted, and the run says so.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mempp.bench.ablations import ScopeView
from mempp.bench.datasets import Benchmark, Question
from mempp.bench.systems import PACKED, System
from mempp.errors import InvalidInput, MemppError

if TYPE_CHECKING:  # the LLM modules load only when an endpoint is configured
    from mempp.bench.judge import LabelJudgement, RubricJudgement
    from mempp.llm import LLMClient, LLMConfig
    from mempp.store import Store

CACHE_FILE = "llm-cache.sqlite"
DEFAULT_JUDGE_RUNS = 3
DEFAULT_CONCURRENCY = 4
# A local server (llama.cpp, Ollama, vLLM on this machine) usually has one slot, or several that
# split one context: four questions at once overflowed a 16k-context llama-server. Start at one.
LOCAL_CONCURRENCY = 1
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
# The packed variant is answered too: whether excerpts help the answer is what decides it.
DEFAULT_ANSWER_SYSTEMS = ("mempp-paper", "mempp-default", PACKED)
# Consecutive "endpoint unavailable" failures (each already retried by the client) after which
# the remaining questions are not attempted: the endpoint is down, not one prompt unlucky.
UNAVAILABLE_LIMIT = 5
# Statuses that fail every call alike (wrong key, no access, wrong URL or model): stop at once.
FATAL_STATUSES = (401, 403, 404)
# The public category names the OrgMemBench judge is shown (the harness's schemas.py).
ORGMEMBENCH_PUBLIC = {
    "C1": "supersession",
    "C2": "decision_provenance",
    "C3": "bitemporal",
    "C4": "audit_replay",
    "C5": "justification_chain",
    "C6": "contradiction",
}
ENV_BASE_URL, ENV_MODEL, ENV_API_KEY = "MEMPP_LLM_BASE_URL", "MEMPP_LLM_MODEL", "MEMPP_LLM_API_KEY"

T = TypeVar("T")
R = TypeVar("R")


# -- configuration ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LLMOptions:
    """Where the LLM is and how the bench uses it. No open resources: the runner opens the
    clients and closes them at the end.

    ``memory_model`` serves the LLM ablations (consolidation, graph extraction and the graph's
    entity call); it defaults to the answer model. ``judge_model`` defaults to the answer model.
    ``client`` holds extra :class:`mempp.llm.LLMConfig` fields (``timeout``, ``max_retries``,
    ``json_mode``, ...).
    """

    base_url: str
    answer_model: str
    judge_model: str | None = None
    memory_model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never printed nor recorded
    judge_runs: int = DEFAULT_JUDGE_RUNS
    concurrency: int = DEFAULT_CONCURRENCY
    client: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.judge_runs, int) or self.judge_runs < 1:
            raise InvalidInput("--judge-runs must be >= 1")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise InvalidInput("--llm-concurrency must be >= 1")
        if not self.answer_model:
            raise InvalidInput("an answer model is needed (--answer-model or MEMPP_LLM_MODEL)")
        from mempp.llm import LLMConfig

        LLMConfig(base_url=self.base_url).endpoint()  # a malformed URL fails here, clearly

    @property
    def judge(self) -> str:
        return self.judge_model or self.answer_model

    @property
    def memory(self) -> str:
        return self.memory_model or self.answer_model

    @classmethod
    def resolve(
        cls,
        *,
        base_url: str | None = None,
        answer_model: str | None = None,
        judge_model: str | None = None,
        memory_model: str | None = None,
        judge_runs: int = DEFAULT_JUDGE_RUNS,
        concurrency: int | None = None,
        env: Mapping[str, str] | None = None,
        client: Mapping[str, Any] | None = None,
    ) -> LLMOptions | None:
        """Options from flags, falling back to ``MEMPP_LLM_BASE_URL``, ``MEMPP_LLM_MODEL`` and
        ``MEMPP_LLM_API_KEY``; ``None`` when no endpoint is configured (retrieval only).
        ``concurrency`` ``None`` means :func:`default_concurrency` for the URL."""
        env = os.environ if env is None else env
        url = (base_url or env.get(ENV_BASE_URL) or "").strip()
        if not url:
            return None
        model = answer_model or env.get(ENV_MODEL) or ""
        if not model:
            raise InvalidInput(
                f"an LLM endpoint is configured ({url}) but no model: pass --answer-model "
                f"or set {ENV_MODEL}"
            )
        return cls(
            url,
            model,
            judge_model,
            memory_model,
            env.get(ENV_API_KEY) or None,
            judge_runs,
            default_concurrency(url) if concurrency is None else concurrency,
            dict(client or {}),
        )

    def config(self, model: str, cache_path: Path) -> LLMConfig:
        from mempp.llm import LLMConfig

        return LLMConfig.from_env(
            base_url=self.base_url,
            model=model,
            api_key=self.api_key,
            max_concurrency=self.concurrency,
            cache_path=str(cache_path),
            **self.client,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "answer_model": self.answer_model,
            "judge_model": self.judge,
            "memory_model": self.memory,
            "api_key_set": bool(self.api_key),
            "judge_runs": self.judge_runs,
            "judge_temperature": 0.0,
            "answer_temperature": 0.0,
            "concurrency": self.concurrency,
            "client": dict(self.client),
        }


def default_concurrency(base_url: str) -> int:
    """Questions in flight by default: :data:`LOCAL_CONCURRENCY` for a loopback endpoint,
    :data:`DEFAULT_CONCURRENCY` for any other."""
    from urllib.parse import urlsplit

    host = (urlsplit(base_url.strip()).hostname or "").lower()
    local = host in LOOPBACK_HOSTS or host.startswith("127.")
    return LOCAL_CONCURRENCY if local else DEFAULT_CONCURRENCY


class BenchClients:
    """The run's clients (answer, judge, memory-side), opened on first use on one reply cache
    file under the bench cache folder, and closed together."""

    def __init__(self, options: LLMOptions, cache_dir: Path) -> None:
        self.options = options
        self.cache_path = cache_dir / CACHE_FILE
        self._clients: dict[str, LLMClient] = {}
        self._lock = threading.Lock()

    def _client(self, role: str, model: str) -> LLMClient:
        from mempp.llm import LLMClient

        with self._lock:
            if role not in self._clients:
                self._clients[role] = LLMClient(self.options.config(model, self.cache_path))
            return self._clients[role]

    @property
    def answer(self) -> LLMClient:
        return self._client("answer", self.options.answer_model)

    @property
    def judge(self) -> LLMClient:
        return self._client("judge", self.options.judge)

    @property
    def memory(self) -> LLMClient:
        return self._client("memory", self.options.memory)

    def usage(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {role: client.usage.to_dict() for role, client in self._clients.items()}

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


def answered_systems(requested: Sequence[str] | None, systems: Sequence[System]) -> tuple[str, ...]:
    """The systems to answer for: those requested, else the paper preset, ``mempp-default`` and
    any LLM ablation that runs; when none of those runs, every system of the run."""
    names = [s.name for s in systems]
    if requested is not None:
        return tuple(dict.fromkeys(requested))
    wanted = [*DEFAULT_ANSWER_SYSTEMS, *(s.name for s in systems if s.ablation)]
    chosen = [name for name in names if name in wanted]
    return tuple(chosen or names)


def calls_per_question(benchmark: str, system: System, judge_runs: int) -> int:
    """LLM calls one question costs one answered system, when nothing is cached (a malformed
    judge reply costs one more, retried once)."""
    judge = judge_runs if benchmark == "orgmembench" else 1
    return 1 + judge + (1 if system.ablation == "graph" else 0)


# -- answering and judging --------------------------------------------------------------------
@dataclass(slots=True)
class AnswerTask:
    """One question for one system. ``context`` is the system's evidence with leading space
    removed and cut to the answer window: exactly what the answerer would keep."""

    row: int
    question: Question
    system: System
    context: str


@dataclass(slots=True)
class Outcome:
    """What answering and judging one task produced. ``status``: ``judged``,
    ``answer_failed``, ``judge_failed`` or ``not_attempted``."""

    task: AnswerTask
    status: str
    update: dict[str, Any]
    rubric: RubricJudgement | None = None
    label: LabelJudgement | None = None


def answer_text_for(benchmark: str, question: Question) -> str:
    """The question as the answerer sees it. LongMemEval's own answer prompt gives the
    question's date (its temporal questions count days from it); the others ask the text only,
    as the OrgMemBench harness does (its dated questions carry the date in the text)."""
    date = question.raw.get("question_date") if benchmark == "longmemeval" else None
    return f"Current date: {date}\n{question.text}" if date else question.text


class AnswerJudge:
    """Answers and judges tasks of one benchmark run; thread-safe across questions."""

    def __init__(
        self,
        benchmark: Benchmark,
        clients: BenchClients,
        *,
        window: int,
        graph_store: Store | None = None,
    ) -> None:
        if benchmark.name not in ("orgmembench", "locomo", "longmemeval"):
            raise InvalidInput(f"no judge for benchmark {benchmark.name!r}")
        self.benchmark = benchmark
        self.clients = clients
        self.window = window
        self.graph_store = graph_store
        self.runs = clients.options.judge_runs
        self.abort_reason: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._unavailable = 0

    # -- the whole run ------------------------------------------------------------------------
    def run(self, tasks: Sequence[AnswerTask], *, progress: bool = True) -> list[Outcome]:
        """Every task, questions ``concurrency`` at a time; outcomes in task order."""
        from tqdm import tqdm

        by_question: dict[tuple[str, str], list[AnswerTask]] = {}
        for task in tasks:
            by_question.setdefault((task.question.scope, task.question.id), []).append(task)
        jobs = list(by_question.values())
        # Open both clients before the threads start, so an invalid setting fails once, here.
        _ = self.clients.answer, self.clients.judge
        bar = tqdm(
            total=len(jobs),
            desc=f"{self.benchmark.name} answer+judge",
            unit="q",
            file=sys.stderr,
            disable=not progress,
        )

        def job(group: list[AnswerTask]) -> list[Outcome]:
            try:
                return [self._guarded(task) for task in group]
            finally:
                bar.update(1)

        with bar:
            results = interruptible_map(job, jobs, self.clients.options.concurrency, self._stop)
        by_task = {id(o.task): o for group in results for o in group}
        return [by_task[id(task)] for task in tasks]

    def _guarded(self, task: AnswerTask) -> Outcome:
        if self._stop.is_set():
            reason = self.abort_reason or "stopped"
            return Outcome(task, "not_attempted", _empty(f"not attempted: {reason}"))
        try:
            return self.one(task)
        except Exception as exc:  # a bug must not lose the other questions; it is recorded
            detail = f"internal error: {type(exc).__name__}: {exc}"
            return Outcome(task, "answer_failed", _empty(detail))

    # -- one task -----------------------------------------------------------------------------
    def one(self, task: AnswerTask) -> Outcome:
        """Answer one question for one system, then judge the answer."""
        from mempp.llm.answer import answer_from_context

        question = task.question
        update = _empty(None)
        context = task.context
        try:
            if task.system.ablation == "graph":
                context, facts = self._with_graph_facts(task)
                update["graph_facts"] = facts
            answer = answer_from_context(
                answer_text_for(self.benchmark.name, question),
                context,
                self.clients.answer,
                max_chars=self.window,
            )
        except MemppError as exc:
            self._failed(exc)
            update["answer_error"] = _describe(exc)
            update["context_overflow"] = _overflowed(exc)
            return Outcome(task, "answer_failed", update)
        self._succeeded()
        update["answer_text"] = answer
        if self.benchmark.name == "locomo":
            from mempp.bench.judge import bleu1, token_f1

            # Pure functions of the answer: they stand even if the judge fails.
            update["answer_f1"] = token_f1(answer, question.reference)
            update["answer_bleu1"] = bleu1(answer, question.reference)
        try:
            judged = self._judge(question, answer)
        except MemppError as exc:
            self._failed(exc)
            update["judge_error"] = _describe(exc)
            update["context_overflow"] = _overflowed(exc)
            return Outcome(task, "judge_failed", update)
        self._succeeded()
        rubric, label, fields = judged
        update.update(fields)
        status = "judged" if update["answer_score"] is not None else "judge_failed"
        return Outcome(task, status, update, rubric, label)

    def _with_graph_facts(self, task: AnswerTask) -> tuple[str, list[dict[str, Any]]]:
        """Mem^g++: at most 5 graph facts after the rows, under the same character budget
        (whole lines only, none when the rows fill the window), as ``Memory.evidence`` does."""
        from mempp.llm.graph import related_facts
        from mempp.search.evidence import Evidence, append_facts

        if self.graph_store is None:
            raise InvalidInput("mempp-graph needs the graph store")
        question = task.question
        view = ScopeView(self.graph_store, question.scope).as_memory()
        facts = related_facts(
            view,
            question.text,
            llm=self.clients.memory,
            as_of=question.as_of,
            dated=task.system.graph_dated,
        )
        evidence = append_facts(Evidence(task.context, []), facts, budget=self.window)
        return evidence.text, [fact.to_dict() for fact in evidence.facts]

    def _judge(
        self, question: Question, answer: str
    ) -> tuple[RubricJudgement | None, LabelJudgement | None, dict[str, Any]]:
        from mempp.bench import judge

        llm = self.clients.judge
        if self.benchmark.name == "orgmembench":
            subpoints = question.raw.get("rubric_subpoints")
            public = ORGMEMBENCH_PUBLIC.get(
                question.category, self.benchmark.categories.get(question.category, "")
            )
            rubric = judge.judge_rubric(
                question.text,
                public,
                question.reference,
                subpoints if isinstance(subpoints, list) else [],
                answer,
                llm,
                self.runs,
                question_id=question.id,
            )
            # Summaries group by the benchmark's category codes, like every other table.
            rubric = replace(rubric, category=question.category)
            fields: dict[str, Any] = {
                "judge": rubric.to_dict(),
                "answer_score": rubric.score,
                "judge_sd": rubric.sd,
                "judge_failed_runs": rubric.failed_runs,
            }
            if rubric.score is None:
                errors = [run.error for run in rubric.runs if run.error]
                fields["judge_error"] = "every judge run failed: " + (errors[0] if errors else "")
            return rubric, None, fields
        if self.benchmark.name == "locomo":
            label = judge.judge_locomo(question.text, question.reference, answer, llm)
        else:
            label = judge.judge_longmemeval(
                question.category,
                question.text,
                question.reference,
                answer,
                llm,
                question_id=question.id,
            )
        fields = {
            "judge": label.to_dict(),
            "answer_score": None if label.correct is None else float(label.correct),
        }
        if label.error:
            fields["judge_error"] = label.error
        return None, label, fields

    # -- endpoint health ----------------------------------------------------------------------
    def _failed(self, exc: MemppError) -> None:
        from mempp.llm import LLMError, LLMUnavailable

        with self._lock:
            if isinstance(exc, LLMUnavailable):
                self._unavailable += 1
                if self._unavailable >= UNAVAILABLE_LIMIT:
                    self._abort(f"the endpoint failed {self._unavailable} times in a row: {exc}")
            elif isinstance(exc, LLMError) and exc.status in FATAL_STATUSES:
                self._abort(_describe(exc))

    def _abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        self._stop.set()

    def _succeeded(self) -> None:
        with self._lock:
            self._unavailable = 0


def _overflowed(exc: MemppError) -> bool:
    from mempp.llm import LLMContextOverflow

    return isinstance(exc, LLMContextOverflow)


def _empty(error: str | None) -> dict[str, Any]:
    return {
        "answer_text": None,
        "answer_error": error,
        "judge": None,
        "judge_error": None,
        "answer_score": None,
    }


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def interruptible_map(
    fn: Callable[[T], R], items: Sequence[T], width: int, stop: threading.Event
) -> list[R]:
    """:func:`mempp.llm.map_concurrent` over ``items``, interruptible with Ctrl-C.

    ``map_concurrent`` runs on a helper thread while this one waits in short, interruptible
    joins: on Ctrl-C, ``stop`` is set (``fn`` must then return at once), the calls in flight
    finish (their replies are cached) and ``KeyboardInterrupt`` is raised. Without this, the
    thread pool would run every queued item before the interrupt surfaced. ``fn`` must not
    raise.
    """
    from mempp.llm import map_concurrent

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["results"] = map_concurrent(fn, items, max_workers=width)
        except BaseException as exc:  # re-raised on the calling thread below
            box["error"] = exc

    helper = threading.Thread(target=target, name="mempp-bench-llm", daemon=True)
    helper.start()
    try:
        while helper.is_alive():
            helper.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        helper.join()
        raise
    if "error" in box:
        raise box["error"]
    return list(box["results"])


# -- summaries --------------------------------------------------------------------------------
def summarize(
    benchmark: str, categories: Iterable[str], outcomes: Sequence[Outcome]
) -> dict[str, Any]:
    """One system's answer figures on 0-100, overall and per category, with failures counted.

    Figures are over the questions that got a score: a failure is counted, not averaged in.
    """
    from mempp.bench.judge import label_summary, summarize_rubric

    status = Counter(o.status for o in outcomes)
    out: dict[str, Any] = {
        "questions": len(outcomes),
        "answered": sum(o.update.get("answer_text") is not None for o in outcomes),
        "scored": sum(o.update.get("answer_score") is not None for o in outcomes),
        "answer_failures": status["answer_failed"],
        "judge_failures": status["judge_failed"],
        "not_attempted": status["not_attempted"],
        "failures": status["answer_failed"] + status["judge_failed"] + status["not_attempted"],
        # Failed because the prompt did not fit the model's context: a setting to fix (context
        # size, --window, --llm-concurrency on a server whose slots share one context), not a
        # wrong answer; counted among the failures above and never scored.
        "context_overflows": sum(bool(o.update.get("context_overflow")) for o in outcomes),
    }
    codes = list(categories)
    by_category: dict[str, dict[str, Any]] = {}
    if benchmark == "orgmembench":
        rubrics = [o.rubric for o in outcomes if o.rubric is not None]
        total = summarize_rubric(rubrics)
        out.update(
            kind="rubric",
            score=total.overall,
            sd=total.sd,
            per_run=total.per_run,
            failed_runs=total.failed_runs,
        )
        for code in codes:
            part = summarize_rubric([r for r in rubrics if r.category == code])
            by_category[code] = {
                "score": part.overall,
                "sd": part.sd,
                "n": part.questions - part.unscored,
            }
    else:
        labels = [o.label for o in outcomes if o.label is not None]
        total_labels = label_summary(labels)
        out.update(
            kind="label",
            score=total_labels.score,
            sd=None,
            correct=total_labels.correct,
        )
        by_label = {id(o.label): o.task.question.category for o in outcomes if o.label}
        for code in codes:
            part = label_summary([j for j in labels if by_label[id(j)] == code])
            by_category[code] = {"score": part.score, "n": part.judged}
        if benchmark == "locomo":
            for metric, name in (("answer_f1", "f1"), ("answer_bleu1", "bleu1")):
                out[name] = _mean100(o.update.get(metric) for o in outcomes)
                for code in codes:
                    by_category[code][name] = _mean100(
                        o.update.get(metric) for o in outcomes if o.task.question.category == code
                    )
    out["by_category"] = by_category
    return out


def _mean100(values: Iterable[float | None]) -> float | None:
    data = [float(v) for v in values if v is not None]
    return 100 * statistics.fmean(data) if data else None
