"""The bench's answer + judge step and LLM ablations, end to end over real HTTP (FakeOpenAI).

The fake server answers by prompt content (a ``responder``): answers name the question, the
rubric judge scores every facet id it finds in the prompt, the label judges compare the answer
with the gold answer, and consolidation and graph prompts get small scripted replies.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import statistics
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mempp.bench import cli, llm_eval, runner, systems
from mempp.bench.chunking import whitespace_spans
from mempp.bench.judge import subpoint_weight
from test_bench_run import KEYWORDS, _conversation, parse, write_tiny_locomo

from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply

LLM_ENV = (
    "MEMPP_LLM_BASE_URL",
    "MEMPP_LLM_MODEL",
    "MEMPP_LLM_API_KEY",
    "MEMPP_LLM_CACHE",
    "MEMPP_LLM_TIMEOUT",
    "MEMPP_LLM_JSON_MODE",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own endpoint settings must not leak into these tests."""
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)


# -- a scripted model ------------------------------------------------------------------------
def _system(request: RecordedRequest) -> str:
    messages = request.messages
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


def _user(request: RecordedRequest) -> str:
    """The first user message: a corrective retry appends another, the prompt stays first."""
    return next((str(m["content"]) for m in request.messages if m["role"] == "user"), "")


def _after(text: str, label: str) -> str:
    """The line following ``label`` on its own line, or after ``label`` on the same line."""
    match = re.search(rf"{re.escape(label)}\s*(.+)", text)
    return match.group(1).strip() if match else ""


class ScriptedModel:
    """Replies by prompt content. Override the hooks to change one kind of reply."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()  # identical judge prompts: which run is this
        self.kinds: list[str] = []

    def __call__(self, request: RecordedRequest) -> ScriptedReply:
        system, user = _system(request), _user(request)
        if system.startswith("You grade answers"):
            kind = "rubric"
        elif "CORRECT or WRONG" in system:
            kind = "locomo"
        elif system.startswith("You check a chat assistant"):
            kind = "longmemeval"
        elif system.startswith("You turn one document"):
            kind = "triples"
        elif system.startswith("List the entities"):
            kind = "entities"
        elif "Decide how they relate" in system:
            kind = "label"
        elif "Write ONE record" in system:
            kind = "merge"
        elif "Give a direct, specific answer." in user:
            kind = "answer"
        else:
            kind = "unknown"
        with self.lock:
            self.kinds.append(kind)
            self.seen[user] += 1
            count = self.seen[user]
        return getattr(self, kind)(request, user, count)

    def reply(self, value: Any) -> ScriptedReply:
        return ScriptedReply(content=value if isinstance(value, str) else json.dumps(value))

    def answer(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        question = user.split("QUESTION\n", 1)[1].split("\n\nGive a direct", 1)[0]
        return self.reply(f"Answer to: {question}")

    def rubric(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        facets = json.loads(user.split("Rubric facets:\n", 1)[1].split("\n\nCandidate", 1)[0])
        scores = {f["id"]: self.fraction(f["id"], count) for f in facets}
        return self.reply({"subpoint_scores": scores, "semantic_score": 0.5, "faithful": True})

    def fraction(self, facet: str, run: int) -> float:
        # a: always met; b: met in the first run only; c: half; y: rises with the run.
        return {"a": 1.0, "b": 1.0 if run == 1 else 0.0, "c": 0.5, "x": 1.0, "y": run / 3}.get(
            facet, 1.0
        )

    def locomo(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        gold = _after(user, "Gold answer:").lower()
        generated = _after(user, "Generated answer:").lower()
        label = "CORRECT" if gold and gold in generated else "WRONG"
        return self.reply({"reasoning": "compared", "label": label})

    def longmemeval(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        return self.reply({"reasoning": "fine", "label": "yes" if "Lisbon" in user else "no"})

    def triples(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        text = user.split("\n\n", 1)[1]
        found = []
        if "launch" in text.lower():
            day = "Friday" if "Friday" in text else "Monday"
            found.append({"subject": "launch", "relation": "is on", "object": day})
        if "budget" in text.lower():
            found.append({"subject": "budget", "relation": "status", "object": "approved"})
        return self.reply({"triples": found})

    def entities(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        names = [w for w in ("launch", "budget") if w in user.lower()]
        return self.reply({"entities": names})

    def label(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        return self.reply({"label": "conflict" if "launch" in user.lower() else "restatement"})

    def merge(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        return self.reply({"text": "The budget is approved."})

    def unknown(self, request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        return ScriptedReply(status=400, body={"error": {"message": "unexpected prompt"}})


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def server(model: ScriptedModel) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(responder=model) as fake:
        yield fake


# -- tiny benchmarks ---------------------------------------------------------------------------
def _facet(facet_id: str, weight: Any) -> dict[str, Any]:
    return {
        "id": facet_id,
        "max_score": weight,
        "criterion": f"states {facet_id}",
        "fail_criterion": "-",
    }


ORG_QUESTIONS = [
    {
        "id": "Q-1",
        "category": "C1",
        "text": "When do we ship?",
        "ground_truth_answer": {"current_value": "Monday", "prior_value": "Friday"},
        "rubric_subpoints": [_facet("a", 0.5), _facet("b", 0.25), _facet("c", 0.25)],
        "evidence_artefact_ids": ["A-2"],
    },
    {
        "id": "Q-2",
        "category": "C1",
        "text": "What is the budget?",
        "ground_truth_answer": {"current_value": "approved"},
        "rubric_subpoints": [_facet("a", 0.333), _facet("b", 0.333), _facet("c", 0.333)],
        "evidence_artefact_ids": ["A-3"],
    },
    {
        "id": "Q-3",
        "category": "C4",
        "text": "As of 2023-03-10, when do we ship?",
        "ground_truth_answer": {"as_of_date": "2023-03-10", "asof_facts": ["Friday"]},
        # y has weight 0, which the benchmark's scorer counts as 1.
        "rubric_subpoints": [_facet("x", 1), _facet("y", 0)],
        "evidence_artefact_ids": ["A-1"],
    },
]


def write_tiny_orgmembench(root: Path) -> Path:
    tier = root / "orgmembench" / "helix" / "medium"
    (tier / "corpus").mkdir(parents=True)
    (tier / "source_of_truth").mkdir()
    bodies = {
        "A-1": ("EV-1", "We ship on Friday, says the launch plan."),
        "A-2": ("EV-2", "The launch moved: we ship on Monday."),
        "A-3": ("EV-3", "The budget is approved for alpha."),
        "A-4": ("EV-3", "Gamma notes, nothing about shipping."),
    }
    index = []
    for slot, (event, body) in bodies.items():
        (tier / "corpus" / f"{slot}.md").write_text(f"<!-- artefact_metadata\n-->\n{body}", "utf-8")
        index.append({"slot_id": slot, "path": f"corpus/{slot}.md", "event_id": event})
    (tier / "corpus_index.jsonl").write_text("\n".join(map(json.dumps, index)), "utf-8")
    events = [
        {"id": "EV-1", "occurred_at": "2023-03-01"},
        {"id": "EV-2", "occurred_at": "2023-03-20"},
        {"id": "EV-3", "occurred_at": "2023-02-01"},
    ]
    (tier / "source_of_truth" / "events.jsonl").write_text(
        "\n".join(map(json.dumps, events)), "utf-8"
    )
    (tier / "benchmark_v0.0.jsonl").write_text("\n".join(map(json.dumps, ORG_QUESTIONS)), "utf-8")
    return root


def write_ablation_locomo(root: Path) -> Path:
    """Two launch turns that conflict, two budget turns that restate each other."""
    folder = root / "locomo"
    folder.mkdir(parents=True)
    conversation = _conversation(
        [
            ("D1:1", "Ana", "The launch is on Monday."),
            ("D1:2", "Ben", "Budget is approved."),
            ("D1:3", "Ana", "Our budget got approved."),
            ("D2:1", "Ben", "The launch moved to Friday."),
            ("D2:2", "Ana", "Gamma looks good."),
        ],
        [
            {
                "question": "When is the launch?",
                "answer": "Friday",
                "evidence": ["D2:1"],
                "category": 4,
            },
            {
                "question": "Is the budget approved?",
                "answer": "approved",
                "evidence": ["D1:2"],
                "category": 1,
            },
        ],
    )
    (folder / "1.json").write_text(json.dumps(conversation), "utf-8")
    return root


class TopicEmbedder(KeywordEmbedder):
    """Only topic words count (other words are ignored unless a text has none), so rows on one
    topic have cosine 1 and rows on different topics cosine 0: consolidation groups by topic."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[^\W_]+", text.lower()):
                if word in self.keywords:
                    out[row, self.keywords[word]] += 1.0
            norm = np.linalg.norm(out[row])
            if norm == 0:
                out[row, self.dim - 1] = 1.0
            else:
                out[row] /= norm
        return out


# -- running ----------------------------------------------------------------------------------
def run_cli(
    tmp_path: Path,
    data: Path,
    benchmark: str,
    *extra: str,
    embedder: Any = None,
    cache: str = "cache",
) -> tuple[int, dict[str, Any]]:
    argv = [
        benchmark,
        "--data",
        str(data),
        "--out",
        str(tmp_path / "out"),
        "--cache",
        str(tmp_path / cache),
        "--sweep",
        "0",
        "--resamples",
        "20",
        "--rag-sizes",
        "6",
        "--quiet",
        "--no-plots",
        *extra,
    ]
    code = cli.run(
        parse(argv), embedder=embedder or KeywordEmbedder(KEYWORDS), spans=whitespace_spans
    )
    path = tmp_path / "out" / "results.json"
    return code, json.loads(path.read_text("utf-8")) if path.exists() else {}


def llm_flags(server: FakeOpenAI, *extra: str) -> list[str]:
    return [
        "--llm-base-url",
        server.base_url,
        "--answer-model",
        "answer-m",
        "--judge-model",
        "judge-m",
        *extra,
    ]


def rows_of(results: dict[str, Any], system: str) -> dict[str, dict[str, Any]]:
    return {r["question"]: r for r in results["questions"] if r["system"] == system}


def store_snapshot(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        snapshot: dict[str, Any] = {
            "records": conn.execute(
                "SELECT id, scope, text, state, superseded_by FROM records ORDER BY id"
            ).fetchall()
        }
        for table in ("consolidation_runs", "graph_triples", "graph_extractions"):
            if table in tables:
                snapshot[table] = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()
    return snapshot


def benchmark_store(tmp_path: Path, cache: str = "cache") -> Path:
    (store,) = [p for p in (tmp_path / cache).glob("*/store.db") if p.parent.name[0] != "."]
    return store


# -- without an endpoint -----------------------------------------------------------------------
def test_without_an_endpoint_the_run_is_retrieval_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_tiny_locomo(tmp_path / "data")
    code, results = run_cli(tmp_path, data, "locomo", "--systems", "mempp-paper,bm25")
    assert code == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "retrieval only" in line]
    assert len(notes) == 1 and "MEMPP_LLM_BASE_URL" in notes[0]
    assert results["llm"] == {"enabled": False}
    assert "answer_score" not in results["metrics"]
    assert all("answer_text" not in row for row in results["questions"])
    assert "Answer and judge" not in (tmp_path / "out" / "results.md").read_text("utf-8")


@pytest.mark.parametrize("name", ["mempp-consolidated", "mempp-graph"])
def test_llm_ablations_need_an_endpoint(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_tiny_locomo(tmp_path / "data")
    code, _ = run_cli(tmp_path, data, "locomo", "--systems", f"mempp-paper,{name}")
    assert code == 2
    err = capsys.readouterr().err
    assert f"system {name!r} needs an LLM endpoint" in err and "MEMPP_LLM_BASE_URL" in err
    # With an endpoint they are available, but only when named.
    assert name in [s.name for s in systems.select("locomo", [name], llm=True)]
    assert name not in [s.name for s in systems.select("locomo", None, llm=True)]


def test_an_endpoint_without_a_model_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_tiny_locomo(tmp_path / "data")
    code, _ = run_cli(tmp_path, data, "locomo", "--llm-base-url", "http://127.0.0.1:9/v1")
    assert code == 2
    assert "--answer-model" in capsys.readouterr().err


# -- LoCoMo -------------------------------------------------------------------------------------
def test_locomo_answers_the_configured_systems_and_judges_them(
    tmp_path: Path,
    server: FakeOpenAI,
    model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MEMPP_LLM_API_KEY", "sk-test-key")
    data = write_tiny_locomo(tmp_path / "data")
    code, results = run_cli(
        tmp_path, data, "locomo", "--systems", "mempp-paper,mempp-default,bm25", *llm_flags(server)
    )
    assert code == 0
    status = [line for line in capsys.readouterr().err.splitlines() if "answer + judge" in line]
    assert len(status) == 1 and "mempp-paper, mempp-default" in status[0]
    assert "sk-test-key" not in json.dumps(results)

    # Only the paper preset and mempp-default are answered (the default), never bm25.
    assert results["llm"]["answered_systems"] == ["mempp-paper", "mempp-default"]
    assert all(r.get("answer_text") is None for r in rows_of(results, "bm25").values())
    assert set(model.kinds) == {"answer", "locomo"}
    # 5 questions x 2 systems, one answer and one judge call each. Where both systems put
    # the same evidence in the prompt, the second answer comes from the cache: every distinct
    # prompt reaches the endpoint exactly once.
    answers = [r for r in server.requests if "Give a direct" in r.text()]
    assert 5 <= len(answers) < 10  # the tiny corpus gives some questions identical evidence
    assert len({r.text() for r in answers}) == len(answers)
    usage = results["llm"]["usage"]
    assert usage["answer"]["requests"] == len(answers)
    assert usage["answer"]["requests"] + usage["answer"]["cache_hits"] == 10
    assert {r.body["model"] for r in answers} == {"answer-m"}
    judges = [r for r in server.requests if "CORRECT or WRONG" in r.text()]
    assert {r.body["model"] for r in judges} == {"judge-m"}
    assert all(r.body["temperature"] == 0 for r in server.requests)
    assert all(r.headers["authorization"] == "Bearer sk-test-key" for r in server.requests)
    # The answerer sees the system's evidence (the turn text) and the question.
    first = next(r for r in answers if "How is the alpha project?" in r.text())
    assert "The alpha project kicked off today." in first.text()

    paper = rows_of(results, "mempp-paper")
    alpha = paper["locomo-1-q0"]
    assert alpha["answer_text"] == "Answer to: How is the alpha project?"
    assert alpha["judge"]["label"] == "WRONG" and alpha["answer_score"] == 0.0
    thanks = paper["locomo-1-q3"]  # gold "Ben" is not in the answer; "Who said thanks?" is
    assert thanks["answer_score"] == 0.0
    launch = paper["locomo-1-q1"]  # gold "delta team": not in "Answer to: Who handles..."
    assert launch["answer_f1"] == 0.0
    dog = paper["locomo-2-q0"]  # gold "Ana": not in the answer either
    assert dog["answer_bleu1"] == 0.0

    summary = results["llm"]["answers"]["mempp-paper"]
    correct = [r["answer_score"] for r in paper.values()]
    assert summary["score"] == pytest.approx(100 * sum(correct) / len(correct))
    assert summary["questions"] == 5 and summary["failures"] == 0
    f1 = [r["answer_f1"] for r in paper.values()]
    assert summary["f1"] == pytest.approx(100 * statistics.fmean(f1))
    for code_, part in summary["by_category"].items():
        subset = [r for r in paper.values() if r["category"] == code_]
        assert part["n"] == len(subset)
        assert part["f1"] == pytest.approx(100 * statistics.fmean(r["answer_f1"] for r in subset))
    aggregate = results["aggregates"]["mempp-paper"]
    assert aggregate["overall"]["answer_score"]["n"] == 5
    assert "answer_f1" in aggregate["by_category"]["4"]
    markdown = (tmp_path / "out" / "results.md").read_text("utf-8")
    assert "### Answer and judge" in markdown and "### Answer score by category" in markdown
    assert "| mempp-default |" in markdown.split("### Answer and judge")[1]


def test_answer_systems_can_be_chosen(tmp_path: Path, server: FakeOpenAI) -> None:
    data = write_tiny_locomo(tmp_path / "data")
    flags = llm_flags(server, "--answer-systems", "bm25")
    code, results = run_cli(tmp_path, data, "locomo", "--systems", "mempp-paper,bm25", *flags)
    assert code == 0
    assert results["llm"]["answered_systems"] == ["bm25"]
    assert all(r["answer_text"] for r in rows_of(results, "bm25").values())
    assert all("answer_text" not in r for r in rows_of(results, "mempp-paper").values())
    code, _ = run_cli(
        tmp_path, data, "locomo", "--systems", "bm25", *llm_flags(server, "--answer-systems", "x")
    )
    assert code == 2


def test_failures_are_recorded_never_scored_zero(
    tmp_path: Path, server: FakeOpenAI, model: ScriptedModel
) -> None:
    def locomo(request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        if "Any budget news" in user:  # an unusable verdict, twice (the retry too)
            return model.reply({"label": "MAYBE"})
        return ScriptedModel.locomo(model, request, user, count)

    def answer(request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        if "Whose alpha dog?" in user:  # the endpoint rejects this prompt
            return ScriptedReply(status=400, body={"error": {"message": "context too long"}})
        return ScriptedModel.answer(model, request, user, count)

    model.locomo = locomo  # type: ignore[method-assign]
    model.answer = answer  # type: ignore[method-assign]
    data = write_tiny_locomo(tmp_path / "data")
    code, results = run_cli(tmp_path, data, "locomo", "--systems", "vector", *llm_flags(server))
    assert code == 0  # per-question failures do not stop the run
    rows = rows_of(results, "vector")
    judged = rows["locomo-1-q2"]
    assert judged["answer_text"] and judged["answer_score"] is None
    assert "should be one of 'CORRECT', 'WRONG'" in judged["judge_error"]
    assert judged["answer_f1"] is not None  # F1 and BLEU-1 need no judge
    failed = rows["locomo-2-q0"]
    assert failed["answer_text"] is None and failed["answer_score"] is None
    assert "HTTP 400" in failed["answer_error"] and "context too long" in failed["answer_error"]
    summary = results["llm"]["answers"]["vector"]
    assert summary["judge_failures"] == 1 and summary["answer_failures"] == 1
    assert summary["failures"] == 2 and summary["scored"] == 3
    # "context too long" is a context overflow: reported as such, counted, never scored
    assert failed["context_overflow"] is True and summary["context_overflows"] == 1
    assert "too large for the model" in failed["answer_error"]
    assert results["llm"]["settings"]["concurrency"] == 1  # a loopback endpoint starts at one
    assert results["aggregates"]["vector"]["overall"]["answer_score"]["n"] == 3
    assert results["llm"]["aborted"] is None


def test_a_refused_key_stops_the_answers_but_keeps_retrieval(
    tmp_path: Path, model: ScriptedModel, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(request: RecordedRequest) -> ScriptedReply:
        return ScriptedReply(status=401, body={"error": {"message": "invalid api key"}})

    data = write_tiny_locomo(tmp_path / "data")
    with FakeOpenAI(responder=refuse) as fake:
        flags = llm_flags(fake, "--llm-concurrency", "1")
        code, results = run_cli(tmp_path, data, "locomo", "--systems", "vector", *flags)
        assert len(fake.requests) == 1  # no point asking again with the same key
    assert code == 1
    assert "stopped early" in capsys.readouterr().err
    assert "HTTP 401" in results["llm"]["aborted"]
    summary = results["llm"]["answers"]["vector"]
    assert summary["answer_failures"] == 1 and summary["not_attempted"] == 4
    assert results["aggregates"]["vector"]["overall"]["window"]["n"] == 5  # retrieval intact


def test_an_unreachable_endpoint_stops_after_a_few_failures(tmp_path: Path) -> None:
    bench = runner.load_benchmark("locomo", write_tiny_locomo(tmp_path / "data"))
    options = runner.RunOptions(
        sweep=(),
        resamples=10,
        progress=False,
        llm=llm_eval.LLMOptions(
            "http://127.0.0.1:9/v1",  # nothing listens on the discard port
            "answer-m",
            concurrency=1,
            client={"max_retries": 0, "timeout": 2.0},
        ),
    )
    results = runner.run(
        bench,
        systems.select("locomo", ["mempp-paper"]),
        embedder=KeywordEmbedder(KEYWORDS),
        cache_dir=tmp_path / "cache",
        options=options,
        spans=whitespace_spans,
    )
    summary = results["llm"]["answers"]["mempp-paper"]
    assert "in a row" in results["llm"]["aborted"]
    assert summary["answer_failures"] == 5 and summary["scored"] == 0


def test_a_rerun_is_answered_from_the_cache(tmp_path: Path, server: FakeOpenAI) -> None:
    data = write_tiny_locomo(tmp_path / "data")
    code, first = run_cli(
        tmp_path, data, "locomo", "--systems", "mempp-paper,mempp-default", *llm_flags(server)
    )
    assert code == 0
    asked = len(server.requests)
    assert asked > 0
    code, again = run_cli(
        tmp_path, data, "locomo", "--systems", "mempp-paper,mempp-default", *llm_flags(server)
    )
    assert code == 0
    assert len(server.requests) == asked  # not one HTTP request
    usage = again["llm"]["usage"]
    assert usage["answer"]["requests"] == 0 and usage["answer"]["cache_hits"] == 10
    assert usage["judge"]["requests"] == 0
    assert [r.get("answer_text") for r in again["questions"]] == [
        r.get("answer_text") for r in first["questions"]
    ]
    assert again["llm"]["answers"] == first["llm"]["answers"]


# -- OrgMemBench rubric ------------------------------------------------------------------------
def _expected_scores(run: int) -> dict[str, float]:
    """Per question, the weighted facet sum the scripted judge earns in judge run ``run``."""
    scripted = ScriptedModel()
    out = {}
    for question in ORG_QUESTIONS:
        facets = question["rubric_subpoints"]
        weights = [subpoint_weight(f) for f in facets]
        earned = sum(
            w * scripted.fraction(f["id"], run) for w, f in zip(weights, facets, strict=True)
        )
        out[question["id"]] = earned / sum(weights)
    return out


def test_orgmembench_rubric_scores_mean_and_sd_over_runs(
    tmp_path: Path, server: FakeOpenAI, model: ScriptedModel
) -> None:
    data = write_tiny_orgmembench(tmp_path / "data")
    code, results = run_cli(
        tmp_path,
        data,
        "orgmembench",
        "--systems",
        "mempp-paper,mempp-default,vector",
        *llm_flags(server, "--judge-runs", "3"),
    )
    assert code == 0
    assert set(model.kinds) == {"answer", "rubric"}
    rubric_requests = [r for r in server.requests if "Rubric facets" in r.text()]
    # The judge sees facet ids and criteria, never the weights, and the public category name.
    assert all("max_score" not in r.text() and "0.25" not in r.text() for r in rubric_requests)
    assert any("Category: audit_replay" in r.text() for r in rubric_requests)
    runs = {run: _expected_scores(run) for run in (1, 2, 3)}
    expected = {q: statistics.fmean(runs[r][q] for r in runs) for q in runs[1]}
    paper = rows_of(results, "mempp-paper")
    for qid, row in paper.items():
        assert [run["score"] for run in row["judge"]["runs"]] == pytest.approx(
            [runs[r][qid] for r in (1, 2, 3)]
        )
        assert row["answer_score"] == pytest.approx(expected[qid])
        assert row["judge_sd"] == pytest.approx(statistics.stdev(runs[r][qid] for r in runs))
    assert expected["Q-1"] == pytest.approx((0.875 + 0.625 + 0.625) / 3)

    summary = results["llm"]["answers"]["mempp-paper"]
    per_run = [100 * statistics.fmean(runs[r].values()) for r in (1, 2, 3)]
    assert summary["per_run"] == pytest.approx(per_run)
    assert summary["score"] == pytest.approx(statistics.fmean(per_run))
    assert summary["sd"] == pytest.approx(statistics.stdev(per_run))
    c1 = summary["by_category"]["C1"]
    assert c1["n"] == 2
    assert c1["score"] == pytest.approx(100 * (expected["Q-1"] + expected["Q-2"]) / 2)
    assert summary["by_category"]["C4"]["score"] == pytest.approx(100 * expected["Q-3"])
    # The bootstrap aggregate agrees with the judge summary (same question means).
    overall = results["aggregates"]["mempp-paper"]["overall"]["answer_score"]
    assert 100 * overall["mean"] == pytest.approx(summary["score"])
    assert "vector" not in results["llm"]["answers"]
    markdown = (tmp_path / "out" / "results.md").read_text("utf-8")
    assert "± sd over judge runs" in markdown and "3 run(s) at temperature 0" in markdown


def test_orgmembench_judge_failure_is_a_failure(
    tmp_path: Path, server: FakeOpenAI, model: ScriptedModel
) -> None:
    def rubric(request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        if "What is the budget?" in user:
            return model.reply("I would rather not say.")
        return ScriptedModel.rubric(model, request, user, count)

    model.rubric = rubric  # type: ignore[method-assign]
    data = write_tiny_orgmembench(tmp_path / "data")
    code, results = run_cli(
        tmp_path,
        data,
        "orgmembench",
        "--systems",
        "mempp-paper",
        *llm_flags(server, "--judge-runs", "2"),
    )
    assert code == 0
    row = rows_of(results, "mempp-paper")["Q-2"]
    assert row["answer_score"] is None and row["judge_failed_runs"] == 2
    assert row["judge_error"].startswith("every judge run failed")
    summary = results["llm"]["answers"]["mempp-paper"]
    assert summary["judge_failures"] == 1 and summary["scored"] == 2
    assert summary["by_category"]["C1"]["n"] == 1
    runs = {run: _expected_scores(run) for run in (1, 2)}
    scored = ("Q-1", "Q-3")
    per_run = [100 * statistics.fmean(runs[r][q] for q in scored) for r in (1, 2)]
    assert summary["score"] == pytest.approx(statistics.fmean(per_run))


# -- LongMemEval ---------------------------------------------------------------------------------
def test_longmemeval_judges_by_question_type(tmp_path: Path, server: FakeOpenAI) -> None:
    haystack = {
        "haystack_session_ids": ["s1", "s2"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/28 (Sun) 18:00"],
        "haystack_sessions": [
            [{"role": "user", "content": "The budget is fine."}],
            [{"role": "user", "content": "The launch is in Lisbon.", "has_answer": True}],
        ],
    }
    rows = [
        {
            "question_id": "q1",
            "question_type": "knowledge-update",
            "question": "Where is the launch?",
            "answer": "Lisbon",
            "question_date": "2023/06/01 (Thu) 09:15",
            "answer_session_ids": ["s2"],
            **haystack,
        },
        {
            "question_id": "q2",
            "question_type": "temporal-reasoning",
            "question": "How is the budget?",
            "answer": "fine",
            "question_date": "2023/06/02 (Fri) 10:00",
            "answer_session_ids": ["s1"],
            **haystack,
        },
    ]
    (tmp_path / "data" / "longmemeval").mkdir(parents=True)
    (tmp_path / "data" / "longmemeval" / "longmemeval_s.json").write_text(json.dumps(rows))
    code, results = run_cli(
        tmp_path, tmp_path / "data", "longmemeval", "--systems", "vector", *llm_flags(server)
    )
    assert code == 0
    answers = [r for r in server.requests if "Give a direct" in r.text()]
    assert any(
        "Current date: 2023/06/01 (Thu) 09:15\nWhere is the launch?" in r.text() for r in answers
    )
    judges = [r for r in server.requests if "You check a chat assistant" in r.text()]
    assert any("off-by-one" in r.text() for r in judges)  # the temporal-reasoning prompt
    by_id = rows_of(results, "vector")
    assert by_id["q1"]["judge"]["kind"] == "knowledge-update"
    assert by_id["q1"]["answer_score"] == 1.0 and by_id["q2"]["answer_score"] == 0.0
    summary = results["llm"]["answers"]["vector"]
    assert summary["score"] == 50.0
    assert summary["by_category"]["knowledge-update"] == {"score": 100.0, "n": 1}
    assert summary["by_category"]["temporal-reasoning"] == {"score": 0.0, "n": 1}


# -- LLM ablations -------------------------------------------------------------------------------
def test_llm_ablations_run_on_copies_and_leave_the_shared_store_untouched(
    tmp_path: Path, server: FakeOpenAI, model: ScriptedModel
) -> None:
    data = write_ablation_locomo(tmp_path / "data")
    embedder = lambda: TopicEmbedder(["launch", "budget", "gamma"])  # noqa: E731
    # A retrieval-only run first builds the cached store the other systems read.
    code, _ = run_cli(tmp_path, data, "locomo", "--systems", "mempp-paper", embedder=embedder())
    assert code == 0
    shared = benchmark_store(tmp_path)
    before_bytes = hashlib.sha256(shared.read_bytes()).hexdigest()
    before = store_snapshot(shared)

    systems_flag = ("--systems", "mempp-paper,vector,mempp-consolidated,mempp-graph")
    code, results = run_cli(
        tmp_path, data, "locomo", *systems_flag, *llm_flags(server), embedder=embedder()
    )
    assert code == 0
    assert store_snapshot(shared) == before
    assert hashlib.sha256(shared.read_bytes()).hexdigest() == before_bytes

    # Consolidation ran once, on a copy: the launch pair conflicts, the budget pair is merged.
    info = results["llm"]["consolidation"]
    assert info["labels"] == {"conflict": 1, "restatement": 1, "distinct": 0}
    assert info["superseded"] == 1 and info["archived"] == 2 and info["merged"] == 1
    assert info["reused"] is False and info["model"] == "answer-m"
    copy = Path(info["path"])
    assert copy != shared and copy.parent.parent == shared.parent  # beside the store
    states = {text: state for _, _, text, state, _ in store_snapshot(copy)["records"]}
    assert states["The budget is approved."] == "active"  # the merged row
    assert sum(state == "archived" for state in states.values()) == 2
    # The merged row stands for both budget turns, so gold evidence still counts.
    consolidated = rows_of(results, "mempp-consolidated")
    budget = consolidated["locomo-1-q1"]
    assert budget["recall@1"] == 1.0 and budget["top"][0] in ("D1:2", "D1:3")
    # The answerer of mempp-consolidated is shown the merged row.
    assert any(
        "Give a direct" in r.text() and "The budget is approved." in r.text()
        for r in server.requests
    )

    # Graph: one extraction per row (5 turns), dated facts after the rows in the answer prompt.
    graph = results["llm"]["graph"]
    assert graph["pending"] == 5 and graph["failures"] == 0 and graph["triples_now"] == 4
    assert model.kinds.count("triples") == 5
    graph_rows = rows_of(results, "mempp-graph")
    facts = graph_rows["locomo-1-q0"]["graph_facts"]
    assert facts[0]["subject"] == "launch" and facts[0]["date"] is not None
    prompts = [
        r.text()
        for r in server.requests
        if "Related facts (entity graph):" in r.text() and "When is the launch?" in r.text()
    ]
    assert len(prompts) == 1
    facts_block = prompts[0].split("Related facts (entity graph):", 1)[1]
    # The most recent fact first, each with its row's date and id.
    friday = re.search(r"- launch \| is on \| Friday \(2023-06-09, record \d+\)", facts_block)
    monday = re.search(r"- launch \| is on \| Monday \(2023-05-08, record \d+\)", facts_block)
    assert friday and monday and friday.start() < monday.start()
    # Retrieval of mempp-graph is the paper preset's, on the same store.
    paper = rows_of(results, "mempp-paper")
    assert [r["top"] for r in graph_rows.values()] == [r["top"] for r in paper.values()]
    # Both ablations are answered by default, with the paper preset; vector is not.
    assert results["llm"]["answered_systems"] == [
        "mempp-paper",
        "mempp-consolidated",
        "mempp-graph",
    ]
    assert results["llm"]["calls_per_question"]["mempp-graph"] == 3
    markdown = (tmp_path / "out" / "results.md").read_text("utf-8")
    assert "mempp-consolidated: `answer-m`, threshold 0.85" in markdown
    assert "mempp-graph: `answer-m`, 5 row(s) extracted this run" in markdown

    # A rerun reuses both copies and every reply: no HTTP request at all.
    asked = len(server.requests)
    code, again = run_cli(
        tmp_path, data, "locomo", *systems_flag, *llm_flags(server), embedder=embedder()
    )
    assert code == 0
    assert len(server.requests) == asked
    assert again["llm"]["consolidation"]["reused"] is True
    assert again["llm"]["graph"]["reused"] is True and again["llm"]["graph"]["pending"] == 0
    assert again["llm"]["answers"] == results["llm"]["answers"]
    assert store_snapshot(shared) == before

    # The paper's Mem^g++: the same triples, shown without date or record, no as-of filter.
    code, paper_mode = run_cli(
        tmp_path,
        data,
        "locomo",
        "--systems",
        "mempp-graph",
        "--graph-paper",
        *llm_flags(server),
        embedder=embedder(),
    )
    assert code == 0
    facts = rows_of(paper_mode, "mempp-graph")["locomo-1-q0"]["graph_facts"]
    assert facts and all(f["date"] is None and f["record_id"] is None for f in facts)
    assert paper_mode["systems"][0]["graph_dated"] is False


def test_a_consolidation_the_endpoint_broke_is_undone_not_cached(
    tmp_path: Path, server: FakeOpenAI, model: ScriptedModel, capsys: pytest.CaptureFixture[str]
) -> None:
    refuse = {"on": True}

    def label(request: RecordedRequest, user: str, count: int) -> ScriptedReply:
        if refuse["on"] and "budget" in user.lower():
            return ScriptedReply(status=401, body={"error": {"message": "key revoked"}})
        return ScriptedModel.label(model, request, user, count)

    model.label = label  # type: ignore[method-assign]
    data = write_ablation_locomo(tmp_path / "data")
    flags = ("--systems", "mempp-consolidated", *llm_flags(server))
    embedder = TopicEmbedder(["launch", "budget", "gamma"])
    code, _ = run_cli(tmp_path, data, "locomo", *flags, embedder=embedder)
    assert code == 1
    err = capsys.readouterr().err
    assert "consolidation of scope locomo-1 failed" in err and "HTTP 401" in err
    (copy,) = (tmp_path / "cache").glob("*/consolidated-*/store.db")
    # The launch conflict had been applied; it was undone with the rest of the run.
    snapshot = store_snapshot(copy)
    assert all(state == "active" and by is None for *_, state, by in snapshot["records"])
    conn = sqlite3.connect(copy)
    try:
        kinds = [row[0] for row in conn.execute("SELECT kind FROM consolidation_runs ORDER BY id")]
        changes = conn.execute(
            "SELECT COUNT(*) FROM consolidation_changes"
            " WHERE run_id = (SELECT min(id) FROM consolidation_runs)"
        ).fetchone()[0]
    finally:
        conn.close()
    assert kinds == ["consolidate", "undo"] and changes == 1
    manifest = json.loads((copy.parent / "manifest.json").read_text("utf-8"))
    assert manifest["scopes"] == {}

    refuse["on"] = False
    code, results = run_cli(tmp_path, data, "locomo", *flags, embedder=embedder)
    assert code == 0
    info = results["llm"]["consolidation"]
    assert info["labels"] == {"conflict": 1, "restatement": 1, "distinct": 0}
    assert info["failures"] == 0 and info["reused"] is False


def test_ablation_needs_llm_options_in_the_runner(tmp_path: Path) -> None:
    bench = runner.load_benchmark("locomo", write_tiny_locomo(tmp_path / "data"))
    chosen = systems.select("locomo", ["mempp-graph"], llm=True)
    with pytest.raises(Exception, match=r"need RunOptions\.llm"):
        runner.run(
            bench,
            chosen,
            embedder=KeywordEmbedder(KEYWORDS),
            cache_dir=tmp_path / "cache",
            options=runner.RunOptions(progress=False),
        )


def test_llm_options_come_from_flags_then_the_environment() -> None:
    assert llm_eval.LLMOptions.resolve(env={}) is None
    env = {
        "MEMPP_LLM_BASE_URL": "http://localhost:11434/v1",
        "MEMPP_LLM_MODEL": "llama3.1",
        "MEMPP_LLM_API_KEY": "secret",
    }
    options = llm_eval.LLMOptions.resolve(env=env)
    assert options is not None
    assert (options.base_url, options.answer_model, options.judge, options.memory) == (
        "http://localhost:11434/v1",
        "llama3.1",
        "llama3.1",
        "llama3.1",
    )
    assert options.api_key == "secret" and "secret" not in repr(options)
    assert "secret" not in json.dumps(options.to_dict())
    flagged = llm_eval.LLMOptions.resolve(
        base_url="http://vllm:8000/v1", answer_model="a", judge_model="j", env=env
    )
    assert flagged is not None and (flagged.base_url, flagged.judge) == ("http://vllm:8000/v1", "j")
    with pytest.raises(Exception, match="must start with http"):
        llm_eval.LLMOptions.resolve(base_url="localhost:8000", answer_model="a", env={})


def test_default_concurrency_is_one_for_a_loopback_endpoint() -> None:
    from mempp.bench.llm_eval import DEFAULT_CONCURRENCY, LLMOptions, default_concurrency

    for url in ("http://127.0.0.1:8080/v1", "http://localhost:11434/v1", "http://[::1]:8000/v1"):
        assert default_concurrency(url) == 1
    assert default_concurrency("https://api.openai.com/v1") == DEFAULT_CONCURRENCY == 4
    options = LLMOptions.resolve(base_url="http://localhost:8080/v1", answer_model="m", env={})
    assert options is not None and options.concurrency == 1
    options = LLMOptions.resolve(
        base_url="http://localhost:8080/v1", answer_model="m", concurrency=3, env={}
    )
    assert options is not None and options.concurrency == 3
