"""End to end: a tiny synthetic benchmark through the CLI, the cache, every system, the report."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mempp import Memory
from mempp.bench import cli, runner, systems
from mempp.bench.chunking import whitespace_spans
from mempp.bench.datasets import Benchmark, Question
from mempp.bench.retrieve import MemppRetriever, clean_question
from mempp.dates import parse_as_of
from mempp.errors import InvalidInput
from mempp.search.packing import PackingOptions
from mempp.store import open_store
from mempp.store.postgres import mask_url

import engines
from conftest import KeywordEmbedder

KEYWORDS = ["alpha", "beta", "gamma", "delta", "budget", "launch"]


@pytest.fixture(autouse=True)
def _no_llm_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own endpoint settings must not turn these into LLM runs."""
    for name in ("MEMPP_LLM_BASE_URL", "MEMPP_LLM_MODEL", "MEMPP_LLM_API_KEY", "MEMPP_LLM_CACHE"):
        monkeypatch.delenv(name, raising=False)


def _conversation(turns: list[tuple[str, str, str]], qa: list[dict[str, Any]]) -> dict[str, Any]:
    sessions: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben", "qa": qa}
    dates = {"1": "1:00 pm on 8 May, 2023", "2": "9:30 am on 9 June, 2023"}
    for dia_id, speaker, text in turns:
        number = dia_id[1:].split(":")[0]
        sessions.setdefault(f"session_{number}", []).append(
            {"speaker": speaker, "dia_id": dia_id, "text": text}
        )
        sessions[f"session_{number}_date_time"] = dates[number]
    return sessions


def write_tiny_locomo(root: Path) -> Path:
    folder = root / "locomo"
    folder.mkdir(parents=True)
    first = _conversation(
        [
            ("D1:1", "Ana", "The alpha project kicked off today."),
            ("D1:2", "Ben", "Great news about the budget for it."),
            ("D1:3", "Ana", "We want beta testers soon."),
            ("D2:1", "Ben", "The gamma release is late again."),
            ("D2:2", "Ana", "The delta team handles the launch."),
            ("D2:3", "Ben", "Thanks!"),
            ("D2:4", "Ben", "Thanks!"),  # an exact repeat: the write path skips it
        ],
        [
            {
                "question": "How is the alpha project?",
                "answer": "started",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Who handles the launch?",
                "answer": "delta team",
                "evidence": ["D2:2"],
                "category": 1,
            },
            {
                "question": "Any budget news and gamma?",
                "answer": "yes",
                "evidence": ["D1:2", "D2:1"],
                "category": 2,
            },
            {"question": "Who said thanks?", "answer": "Ben", "evidence": ["D2:4"], "category": 4},
        ],
    )
    second = _conversation(
        [
            ("D1:1", "Ana", "My alpha dog barked."),
            ("D1:2", "Ben", "Beta fish are pretty."),
        ],
        [
            {"question": "Whose alpha dog?", "answer": "Ana", "evidence": ["D1:1"], "category": 4},
            {"question": "Adversarial", "answer": "x", "evidence": ["D1:2"], "category": 5},
        ],
    )
    (folder / "1.json").write_text(json.dumps(first), "utf-8")
    (folder / "2.json").write_text(json.dumps(second), "utf-8")
    return root


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    cli.add_parser(commands)
    return parser.parse_args(["bench", *argv])


# The fixtures of the PostgreSQL test server (pytest finds fixtures among module attributes).
pg_server = engines.pg_server
pg_url = engines.pg_url


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_locomo(tmp_path / "data")


def _argv(tmp_path: Path, data: Path, *extra: str) -> list[str]:
    return [
        "locomo",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "out"),
        "--cache",
        str(tmp_path / "cache"),
        "--rag-sizes",
        "6,12",
        "--window",
        "300",
        "--sweep",
        "1",
        "3",
        "5",
        "--resamples",
        "50",
        "--quiet",
        *extra,
    ]


def test_end_to_end_run_writes_every_report(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    argv = _argv(tmp_path, tiny, "--no-plots")
    assert cli.run(parse(argv), embedder=embedder, spans=whitespace_spans) == 0
    out = tmp_path / "out"
    for name in ("results.json", "results.md"):
        assert (out / name).stat().st_size > 0
    assert not (out / "categories.png").exists()
    results = json.loads((out / "results.json").read_text("utf-8"))
    names = [s["name"] for s in results["systems"]]
    assert names == [
        "mempp-paper",
        "mempp-default",
        "mempp-default-packed",
        "no-lex",
        "no-tag",
        "no-vec",
        "no-recency",
        "bm25",
        "vector",
        "rag-6",
        "rag-12",
        "full-context",
    ]
    assert results["systems"][0]["settings"]["w_vec"] == 2.0  # paper-locomo
    assert results["systems"][5]["settings"]["w_vec"] == 0
    assert results["systems"][2]["packing"] == PackingOptions().to_dict()
    assert "packing" not in results["systems"][1]
    assert results["run"]["questions_run"] == 5  # category 5 dropped
    assert len(results["questions"]) == 5 * len(names)
    assert results["run"]["cache"]["reused"] is False
    assert results["run"]["cache"]["duplicate"] == 1
    assert results["benchmark"]["notes"]["adversarial"].startswith("dropped")

    rows = {(r["system"], r["question"]): r for r in results["questions"]}
    alpha = rows[("vector", "locomo-1-q0")]
    assert alpha["recall@1"] == 1.0 and alpha["mrr"] == 1.0 and alpha["window"] == 1.0
    # Scopes are isolated: conversation 2's alpha question finds its own turn.
    assert rows[("vector", "locomo-2-q0")]["top"][0] == "D1:1"
    assert rows[("bm25", "locomo-1-q1")]["recall@1"] == 1.0
    # The skipped repeat "Thanks!" is credited through the row it duplicates.
    assert rows[("bm25", "locomo-1-q3")]["recall@50"] == 1.0
    assert rows[("full-context", "locomo-1-q0")]["recall@1"] is None  # no ranking
    assert rows[("full-context", "locomo-1-q0")]["window"] == 1.0
    assert rows[("rag-6", "locomo-1-q0")]["recall@50"] == 1.0
    assert "sweep_window@3" in rows[("mempp-paper", "locomo-1-q0")]
    assert "sweep_window@3" not in rows[("rag-6", "locomo-1-q0")]

    aggregates = results["aggregates"]["mempp-paper"]
    assert set(aggregates["by_category"]) == {"1", "2", "4"}
    assert aggregates["overall"]["recall@10"]["n"] == 5
    assert "no-lex" in results["deltas_vs_reference"]["systems"]
    markdown = (out / "results.md").read_text("utf-8")
    assert "### Window recall by category" in markdown and "| rag-12 |" in markdown
    assert "### Recall@10 by category" in markdown
    assert "## LoCoMo" in capsys.readouterr().out
    # Gold text visible: records only (mempp and full context), never chunks.
    assert rows[("vector", "locomo-1-q0")]["gold_visible"] == 1.0
    assert rows[("full-context", "locomo-1-q0")]["gold_visible"] == 1.0
    assert "gold_visible" not in rows[("rag-6", "locomo-1-q0")]
    assert "gold_visible" in results["metrics"]
    assert "gold_visible" not in results["aggregates"]["rag-6"]["overall"]
    assert "| gold text |" in markdown and "### Gold text visible by category" in markdown
    assert "### Evidence packing (option)" in markdown
    assert "The headline is whole documents (`mempp-default`)" in markdown


def test_plots_are_written_when_matplotlib_is_installed(tmp_path: Path, tiny: Path) -> None:
    pytest.importorskip("matplotlib")
    argv = _argv(tmp_path, tiny, "--systems", "mempp-paper,bm25,rag-6,full-context")
    assert cli.run(parse(argv), embedder=KeywordEmbedder(KEYWORDS), spans=whitespace_spans) == 0
    for name in ("categories.png", "recall_vs_k.png"):
        assert (tmp_path / "out" / name).read_bytes().startswith(b"\x89PNG")


def test_second_run_reuses_the_ingested_store(tmp_path: Path, tiny: Path) -> None:
    first = KeywordEmbedder(KEYWORDS)
    assert (
        cli.run(parse(_argv(tmp_path, tiny, "--no-plots")), embedder=first, spans=whitespace_spans)
        == 0
    )
    again = KeywordEmbedder(KEYWORDS)
    assert (
        cli.run(parse(_argv(tmp_path, tiny, "--no-plots")), embedder=again, spans=whitespace_spans)
        == 0
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    assert results["run"]["cache"]["reused"] is True
    # Nothing was encoded again: no turn, no chunk, and no question (their vectors are cached
    # beside the store, each encoded alone as Memory.search encodes a query).
    assert again.calls == 0
    assert first.calls > 5
    assert results["timings"]["query_embedding"] == {}
    # Another encoder gets its own store.
    other = KeywordEmbedder(["alpha"])
    assert (
        cli.run(parse(_argv(tmp_path, tiny, "--no-plots")), embedder=other, spans=whitespace_spans)
        == 0
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    assert results["run"]["cache"]["reused"] is False


def test_encoder_option_chooses_the_embedder_and_its_store(
    tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mempp.encoders

    asked: list[str | None] = []

    def named(name: str | None = None) -> KeywordEmbedder:
        asked.append(name)
        return KeywordEmbedder(KEYWORDS if name == "minilm" else ["alpha"])

    monkeypatch.setattr(mempp.encoders, "embedder_named", named)
    argv = _argv(tmp_path, tiny, "--no-plots", "--systems", "mempp-default")
    for name in ("minilm", "mpnet", "minilm"):
        assert cli.run(parse([*argv, "--encoder", name]), spans=whitespace_spans) == 0
        results = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
        assert results["run"]["options"]["encoder"] == name
        assert results["run"]["cache"]["reused"] is (len(asked) == 3)
    assert asked == ["minilm", "mpnet", "minilm"]
    # Without the option the encoder is left to $MEMPP_ENCODER (embedder_named(None)).
    assert cli.run(parse(argv), spans=whitespace_spans) == 0
    assert asked[-1] is None


def test_bench_retrieval_equals_memory_search(tmp_path: Path, tiny: Path) -> None:
    """The benchmark's read path (explicit scope) returns what Memory.search returns."""
    embedder = KeywordEmbedder(KEYWORDS)
    bench = runner.load_benchmark("locomo", tiny)
    from mempp.bench import cache

    ingested = cache.ingest(bench, embedder, tmp_path / "cache", progress=False)
    store = open_store(ingested.path)
    retriever = MemppRetriever(store, ingested.record_items)
    try:
        for system in systems.catalogue("locomo"):
            if system.kind != "mempp":
                continue
            assert system.settings is not None
            for question in bench.questions:
                with Memory(ingested.path, scope=question.scope, embedder=embedder) as memory:
                    ks = [50, 3] if system.settings.reserve else [50]
                    for k in ks:
                        expected = memory.search(question.text, k=k, settings=system.settings)
                        vector = embedder.embed([clean_question(question.text)])[0]
                        legs = retriever.legs(
                            question.scope,
                            question.text,
                            vector,
                            parse_as_of(None),
                            system.settings,
                        )
                        got = retriever.hits(question.scope, legs, None, system.settings, k)
                        assert [h.id for h in got] == [h.id for h in expected], system.name
                        assert [h.reserved for h in got] == [h.reserved for h in expected]
    finally:
        store.close()


def test_mempp_systems_run_on_a_postgres_copy_of_the_store(
    tmp_path: Path, tiny: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    names = ["mempp-default", "vector", "bm25"]
    argv = [*_argv(tmp_path, tiny, "--no-plots"), "--systems", *names]
    assert cli.run(parse(argv), embedder=embedder, spans=whitespace_spans) == 0
    on_file = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    argv = [*argv, "--engine-url", pg_url]
    assert cli.run(parse(argv), embedder=embedder, spans=whitespace_spans) == 0
    on_pg = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    assert on_pg["timings"]["engine_copy_s"] >= 0
    assert "engine_copy_s" not in on_file["timings"]
    assert on_pg["run"]["options"]["engine_url"] == mask_url(pg_url)

    def rows(results: dict[str, Any], system: str) -> list[Any]:
        return [r["top"] for r in results["questions"] if r["system"] == system]

    # The copy keeps every record id: the exact vector leg ranks the same items.
    assert rows(on_pg, "vector") == rows(on_file, "vector")
    assert all(rows(on_pg, "mempp-default"))
    # The database now holds the copy; a second copy into it is refused in one line.
    capsys.readouterr()
    assert cli.run(parse(argv), embedder=embedder, spans=whitespace_spans) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("mempp bench: ") and last.endswith(
        "is not empty: the copy needs a fresh store"
    )


def _run_answering(
    bench: Benchmark,
    chosen: list[systems.System],
    tmp_path: Path,
    hook: Callable[[Question, str], dict[str, Any]],
    answering: str,
    **options: Any,
) -> dict[str, Any]:
    """A run on the tiny data whose ``answering`` system passes its evidence to ``hook``."""
    run_options = runner.RunOptions(
        resamples=20,
        progress=False,
        answer_hook=hook,
        answer_systems=(answering,),
        **options,
    )
    return runner.run(
        bench,
        chosen,
        embedder=KeywordEmbedder(KEYWORDS),
        cache_dir=tmp_path / "c",
        options=run_options,
        spans=whitespace_spans,
    )


def test_answer_hook_receives_question_and_evidence(tmp_path: Path, tiny: Path) -> None:
    seen: list[tuple[str, str]] = []

    def hook(question: Question, evidence: str) -> dict[str, Any]:
        seen.append((question.id, evidence))
        if question.id.endswith("q1"):
            raise RuntimeError("judge unavailable")
        return {"answer": "...", "score": 1.0 if "alpha" in evidence else 0.0}

    bench = runner.load_benchmark("locomo", tiny)
    chosen = systems.select("locomo", ["vector", "bm25"])
    results = _run_answering(bench, chosen, tmp_path, hook, "vector", sweep=(), window=500)
    assert len(seen) == 5  # only for the vector system
    assert seen[0][0] == "locomo-1-q0" and "alpha" in seen[0][1]
    rows = [r for r in results["questions"] if r["system"] == "vector"]
    failed = next(r for r in rows if r["question"] == "locomo-1-q1")
    assert failed["answer"]["error"].startswith("RuntimeError")
    assert failed["answer_score"] is None
    assert results["aggregates"]["vector"]["overall"]["answer_score"]["n"] == 4
    assert "answer_score" not in results["aggregates"]["bm25"]["overall"]


def test_longmemeval_end_to_end_reports_session_recall(tmp_path: Path) -> None:
    rows = [
        {
            "question_id": "q1",
            "question_type": "knowledge-update",
            "question": "Where is the launch?",
            "answer": "Lisbon",
            "question_date": "2023/06/01 (Thu) 09:15",
            "answer_session_ids": ["s2"],
            "haystack_session_ids": ["s1", "s2", "s3"],
            "haystack_dates": [
                "2023/05/20 (Sat) 02:21",
                "2023/05/28 (Sun) 18:00",
                "2023/06/02 (Fri) 08:00",
            ],
            "haystack_sessions": [
                [{"role": "user", "content": "The budget is fine."}],
                [{"role": "user", "content": "The launch is in Lisbon.", "has_answer": True}],
                [{"role": "user", "content": "The launch moved, after the question date."}],
            ],
        }
    ]
    (tmp_path / "longmemeval").mkdir()
    (tmp_path / "longmemeval" / "longmemeval_s.json").write_text(json.dumps(rows), "utf-8")
    argv = [
        "longmemeval",
        "--data",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
        "--cache",
        str(tmp_path / "cache"),
        "--systems",
        "vector,full-context",
        "--quiet",
        "--no-plots",
        "--resamples",
        "10",
    ]
    assert cli.run(parse(argv), embedder=KeywordEmbedder(KEYWORDS)) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    vector = next(r for r in results["questions"] if r["system"] == "vector")
    assert vector["session_recall@1"] == 1.0 and vector["recall@1"] == 1.0
    # The session dated after the question's day is out of scope.
    assert vector["top"] == ["s2#0", "s1#0"]
    assert "### Session recall" in (tmp_path / "out" / "results.md").read_text("utf-8")


def test_cli_reports_missing_data_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.run(parse(["orgmembench", "--data", str(tmp_path / "none"), "--quiet"]))
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "not found at" in err and "OrgMemBench" in err and "MEMPP_DATASETS" in err


def test_cli_rejects_unknown_systems_and_bad_numbers(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run(parse(["locomo", "--data", str(tiny), "--systems", "nope"])) == 2
    assert "unknown system 'nope'" in capsys.readouterr().err
    assert cli.run(parse(["locomo", "--data", str(tiny), "--k", "x"])) == 2
    assert cli.run(parse(["locomo", "--data", str(tiny), "--answer-hook", "nomodule"])) == 2


def test_system_selection() -> None:
    chosen = systems.select("orgmembench", ["bm25", "rag-300", "mempp:paper", "bm25"])
    assert [s.name for s in chosen] == ["bm25", "rag-300", "mempp:paper"]
    assert chosen[1].chunk_tokens == 300
    paper = systems.select("orgmembench", ["mempp-paper"])[0]
    assert paper.settings is not None and paper.settings.lexical_mode == "conjunctive"
    no_recency = systems.select("longmemeval", ["no-recency"])[0]
    assert no_recency.settings is not None and no_recency.settings.reserve == 0
    assert no_recency.settings.w_vec == 4.0
    assert len(systems.select("locomo", None)) == 13
    packed = systems.select("orgmembench", ["mempp-default-packed"])[0]
    assert packed.packing == PackingOptions() and packed.settings == systems.preset("default")
    # A preset with settings changed: typed values, validated, and the unchanged ones kept.
    name = "mempp:default+w_vec=1.5+gamma=10+phrases=false+max_terms=none+stop_words=short"
    (variant,) = systems.select("orgmembench", [name])
    assert variant.name == name and variant.settings == systems.preset("default").with_(
        w_vec=1.5, gamma=10, phrases=False, max_terms=None, stop_words="short"
    )
    for bad, message in (
        ("mempp:default+bogus=1", "unknown setting(s): bogus"),
        ("mempp:default+gamma=-1", "gamma must be a number > 0"),
        ("mempp:default+gamma", "'gamma' is not <setting>=<value>"),
        ("mempp:nope+gamma=1", "unknown preset"),
    ):
        with pytest.raises(InvalidInput, match=re.escape(message)):
            systems.select("orgmembench", [bad])


def test_packed_system_trades_text_for_records(tmp_path: Path, tiny: Path) -> None:
    """A packed system shows the same records, as excerpts: same window recall, less gold text
    visible, and its evidence (what an answerer gets) carries the excerpt markers."""
    seen: dict[str, str] = {}

    def hook(question: Question, evidence: str) -> dict[str, Any]:
        seen[question.id] = evidence
        return {}

    bench = runner.load_benchmark("locomo", tiny)
    small = PackingOptions(threshold=20, cap=20, passage=10, whole_first=0)
    chosen = [
        *systems.select("locomo", ["mempp-default"]),
        systems.System("tiny-packed", "mempp", "", systems.preset("default"), packing=small),
    ]
    results = _run_answering(
        bench, chosen, tmp_path, hook, "tiny-packed", sweep=(3,), window=10_000
    )
    rows = {(r["system"], r["question"]): r for r in results["questions"]}
    fewer = 0
    for question in bench.questions:
        whole = rows[("mempp-default", question.id)]
        packed = rows[("tiny-packed", question.id)]
        assert packed["window"] == whole["window"]
        assert packed["sweep_window@3"] == whole["sweep_window@3"]
        assert packed["gold_visible"] <= whole["gold_visible"] == whole["window"]
        fewer += packed["gold_visible"] < whole["gold_visible"]
    assert fewer >= 3
    assert "full text: record" in seen["locomo-1-q0"] and "[excerpt: " in seen["locomo-1-q0"]
    assert results["systems"][1]["packing"] == small.to_dict()


def test_missing_matplotlib_skips_plots_only(
    tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    argv = _argv(tmp_path, tiny, "--systems", "bm25")
    assert cli.run(parse(argv), embedder=KeywordEmbedder(KEYWORDS), spans=whitespace_spans) == 0
    assert (tmp_path / "out" / "results.md").exists()
    assert not (tmp_path / "out" / "categories.png").exists()
    assert "plots skipped" in capsys.readouterr().err


def test_a_system_needing_an_optional_index_gets_it_on_file_and_on_postgres(
    tmp_path: Path, tiny: Path, pg_url: str
) -> None:
    """The bench enables the indexes its systems' settings read (mempp.store.indexes) on its
    own store, once: the keyword leg runs, on both engines, with the same rankings."""
    embedder = KeywordEmbedder(KEYWORDS)
    argv = [*_argv(tmp_path, tiny, "--no-plots"), "--systems", "mempp:default-keyword"]
    found = []
    for extra in ([], ["--engine-url", pg_url]):
        assert cli.run(parse([*argv, *extra]), embedder=embedder, spans=whitespace_spans) == 0
        found.append(json.loads((tmp_path / "out" / "results.json").read_text("utf-8")))
    on_file, on_pg = found
    assert on_file["timings"]["index_keyword_s"] >= 0 and on_pg["timings"]["index_keyword_s"] >= 0
    top = [[r["top"] for r in results["questions"]] for results in found]
    assert top[0] == top[1] and any(top[0])
    # The second run on file finds the index already built with the cached store.
    assert cli.run(parse(argv), embedder=embedder, spans=whitespace_spans) == 0
    again = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    assert "index_keyword_s" not in again["timings"]
