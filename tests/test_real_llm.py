"""Every LLM path against a real OpenAI-compatible server (opt-in; see scripts/local-llm.sh).

Skipped unless ``MEMPP_TEST_LLM_URL`` (chat, e.g. ``http://127.0.0.1:8080/v1``) and, for the
embeddings paths, ``MEMPP_TEST_EMBED_URL`` are set; ``MEMPP_TEST_LLM_MODEL`` and
``MEMPP_TEST_EMBED_MODEL`` name the models (default ``local``, which llama.cpp ignores).

A small local model gets many answers wrong, so nothing here grades answers. What is asserted
is what must hold whatever the model says: nothing stored is lost, no stored text changes, no
placeholder or echo of a prompt is ever stored, every state change is logged and undoable, and
every call either succeeds or fails as a counted, named failure, never as a crash. With
``MEMPP_TEST_LLM_REPORT`` set, a Markdown table of what each path did is written there.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempp import Memory
from mempp.cli.main import main
from mempp.llm import LLMClient, LLMError, placeholder_problem
from mempp.llm.answer import ask

CHAT_URL = os.environ.get("MEMPP_TEST_LLM_URL")
EMBED_URL = os.environ.get("MEMPP_TEST_EMBED_URL")
CHAT_MODEL = os.environ.get("MEMPP_TEST_LLM_MODEL", "local")
EMBED_MODEL = os.environ.get("MEMPP_TEST_EMBED_MODEL", "local")

pytestmark = pytest.mark.skipif(
    not CHAT_URL, reason="set MEMPP_TEST_LLM_URL to run against a real server"
)
needs_embeddings = pytest.mark.skipif(
    not EMBED_URL, reason="set MEMPP_TEST_EMBED_URL to run the embeddings paths"
)

DOCS = [
    ("The Helix launch is set for Friday 1 March.", "Ana", "2024-01-10"),
    ("Update: the Helix launch moves to Monday 15 April.", "Ben", "2024-02-20"),
    ("The Q2 budget is 40k EUR, approved by Carla.", "Ana", "2024-03-01"),
    ("Q2 budget: 40k EUR, approved by Carla.", "Carla", "2024-03-02"),
    ("The Berlin office closes for renovation in May.", "Dan", "2024-04-05"),
    ("Ana leads the Helix project; Ben owns its pricing.", "Carla", "2024-04-10"),
]
RESULTS: list[dict[str, Any]] = []


def record(path: str, started: float, outcome: str, llm: LLMClient | None = None) -> None:
    """Add a row to the results table, rewritten after every row so that a run stopped part
    way (a slow model) still leaves what it measured."""
    RESULTS.append(
        {
            "path": path,
            "seconds": round(time.monotonic() - started, 1),
            "outcome": outcome,
            "format": llm.format_mode if llm is not None else "–",
        }
    )
    target = os.environ.get("MEMPP_TEST_LLM_REPORT")
    if target:
        lines = ["| path | seconds | response format | outcome |", "|---|---|---|---|"]
        lines += [
            f"| {r['path']} | {r['seconds']} | {r['format']} | {r['outcome']} |" for r in RESULTS
        ]
        Path(target).write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def llm() -> Iterator[LLMClient]:
    # A small model on a shared CPU can take minutes per call: generous, but still bounded.
    with LLMClient(
        base_url=CHAT_URL, model=CHAT_MODEL, timeout=600.0, deadline=900.0, max_retries=1
    ) as client:
        yield client


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    with Memory(tmp_path / "real.db") as mem:
        for text, author, date in DOCS:
            mem.add(text, author=author, date=date)
        yield mem


def rows(memory: Memory) -> dict[int, tuple[Any, ...]]:
    """Every row's content and state, read straight from the file."""
    conn = sqlite3.connect(memory.store.location)
    try:
        found = conn.execute(
            "SELECT id, text, author, event_date, state, superseded_by FROM records ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    return {row[0]: row[1:] for row in found}


def assert_originals_kept(before: dict[int, tuple[Any, ...]], after: dict[int, tuple[Any, ...]]):
    assert set(before) <= set(after), "a row was deleted"
    for row_id, (text, author, date, *_) in before.items():
        assert after[row_id][:3] == (text, author, date), f"row {row_id} was rewritten"


# -- ask ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("as_of", [None, "2024-02-01"])
def test_ask(memory: Memory, llm: LLMClient, as_of: str | None) -> None:
    before = rows(memory)
    started = time.monotonic()
    try:
        answer = ask(
            memory, "When is the Helix launch?", as_of=as_of, llm=llm, k=10, max_tokens=200
        )
    except LLMError as exc:  # an unusable reply is a named failure, not a crash
        record(f"ask{' --as-of' if as_of else ''}", started, f"failed: {exc}"[:120], llm)
    else:
        assert set(answer.citations) <= set(answer.evidence)
        assert answer.answer.strip() and placeholder_problem({"a": answer.answer}) is None
        if as_of:  # rows dated after as_of were never shown
            assert all(memory.get(i).date <= as_of for i in answer.evidence)
        lenient = " (citations from text)" if answer.citations_from_text else ""
        record(
            f"ask{' --as-of' if as_of else ''}",
            started,
            f"answered, {len(answer.citations)} citation(s){lenient}: {answer.answer[:60]!r}",
            llm,
        )
    assert rows(memory) == before


# -- consolidation -----------------------------------------------------------------------------
def test_consolidate_and_undo(memory: Memory, llm: LLMClient) -> None:
    from mempp.llm.consolidate import consolidate, history, undo

    before = rows(memory)
    started = time.monotonic()
    report = consolidate(memory, llm, threshold=0.7)
    after = rows(memory)
    assert_originals_kept(before, after)
    merged = [i for i in after if i not in before]
    for row_id in merged:
        text = after[row_id][0]
        assert placeholder_problem({"text": text}) is None, f"placeholder stored: {text!r}"
    assert len(merged) == report.merged
    assert report.groups == sum(report.labels.values()) + report.failures
    assert any(run.id == report.run_id for run in history(memory))
    outcome = f"{report.groups} groups: {report.labels}, {report.failures} failed"
    if report.superseded or report.archived:
        undone = undo(memory, report.run_id)
        restored = rows(memory)
        for row_id, value in before.items():
            assert restored[row_id] == value, f"undo left row {row_id} changed"
        assert all(restored[i][3] == "archived" for i in merged)
        outcome += f"; undo restored {len(undone.restored)} rows"
    record("consolidate + undo", started, outcome, llm)


# -- the entity graph --------------------------------------------------------------------------
def test_graph_extract_and_facts(memory: Memory, llm: LLMClient) -> None:
    from mempp.llm.graph import extract, related_facts

    before = rows(memory)
    started = time.monotonic()
    report = extract(memory, llm)
    assert report.extracted + report.failures == report.pending == len(DOCS)
    pending = memory.store.pending_extraction(memory.scope, None)
    assert sorted(pending) == sorted(report.failed)  # failures stay pending, nothing else
    conn = sqlite3.connect(memory.store.location)
    try:
        triples = conn.execute("SELECT subject, relation, object FROM graph_triples").fetchall()
    finally:
        conn.close()
    for triple in triples:
        assert placeholder_problem(list(triple)) is None, f"placeholder stored: {triple}"
    try:
        facts = related_facts(memory, "Who leads Helix?", llm=llm, as_of="2024-12-31")
        found = f"{len(facts)} fact(s)"
    except LLMError as exc:
        found = f"entity call failed: {exc}"[:80]
    assert rows(memory) == before
    record(
        "graph extract + facts",
        started,
        f"{report.extracted} rows, {len(triples)} triples, {report.failures} failed"
        + (f" (first: {next(iter(report.failed.values()))[:70]})" if report.failed else "")
        + f"; {found}",
        llm,
    )


# -- judges ------------------------------------------------------------------------------------
def test_judges(llm: LLMClient) -> None:
    from mempp.bench import judge

    started = time.monotonic()
    subpoints = [{"id": "S1", "max_score": 1, "criterion": "says 15 April", "fail_criterion": ""}]
    rubric = judge.judge_rubric(
        "When is the launch?", "update", {"answer": "15 April"}, subpoints, "15 April", llm, 1
    )
    locomo = judge.judge_locomo("When is the launch?", "15 April", "On April 15th.", llm)
    lme = judge.judge_longmemeval(
        "knowledge-update", "When is the launch?", "15 April", "15 April.", llm
    )
    verdicts = []
    for name, score, error in (
        ("rubric", rubric.score, rubric.runs[0].error),
        ("locomo", locomo.correct, locomo.error),
        ("longmemeval", lme.correct, lme.error),
    ):
        assert (score is None) == (error is not None), name  # a verdict, or a named failure
        if isinstance(score, float):
            assert 0.0 <= score <= 1.0
        verdicts.append(f"{name} {score if error is None else 'failed'}")
    record("judges (rubric, LoCoMo, LongMemEval)", started, ", ".join(verdicts), llm)


# -- the embeddings encoder --------------------------------------------------------------------
@needs_embeddings
def test_openai_encoder_ingest_and_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMPP_EMBED_BASE_URL", str(EMBED_URL))
    monkeypatch.setenv("MEMPP_EMBED_MODEL", EMBED_MODEL)
    source = tmp_path / "docs.jsonl"
    long_text = " ".join(
        f"Paragraph {n}: the Helix rollout notes for region {n}." for n in range(400)
    )
    lines = [{"text": t, "author": a, "date": d} for t, a, d in DOCS]
    lines.append({"text": long_text, "author": "Eve", "date": "2024-05-01"})  # ~20k chars
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    db = str(tmp_path / "openai.db")
    started = time.monotonic()
    code = main(["--db", db, "--encoder", "openai", "ingest", str(source), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["added"] == len(lines) and summary["failed"] == 0
    code = main(["--db", db, "--encoder", "openai", "search", "When does Helix launch?", "--json"])
    hits = json.loads(capsys.readouterr().out)
    assert code == 0 and hits
    top = [hit["text"][:40] for hit in hits[:2]]
    code = main(["--db", db, "info", "--json"])
    info = json.loads(capsys.readouterr().out)
    record(
        "--encoder openai ingest + search",
        started,
        f"{summary['added']} stored (one of ~{len(long_text) // 1000}k chars), "
        f"encoder {info.get('encoder')}; top hits {top}",
    )
