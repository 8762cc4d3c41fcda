"""Smoke tests on the real benchmark data, read by path; skipped when the data is absent."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from mempp.bench import runner, systems
from mempp.bench.chunking import whitespace_spans

from conftest import KeywordEmbedder

ROOT = Path(
    os.environ.get("MEMPP_DATASETS")
    or Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets"
)
HAS_ORGMEMBENCH = (ROOT / "orgmembench" / "helix" / "medium" / "corpus_index.jsonl").is_file()
HAS_LOCOMO = (ROOT / "locomo").is_dir()


@pytest.mark.skipif(not HAS_ORGMEMBENCH, reason="OrgMemBench data not available")
def test_orgmembench_real_counts() -> None:
    bench = runner.load_benchmark("orgmembench", ROOT)
    assert len(bench.items) == 443
    assert len(bench.questions) == 73
    assert Counter(q.category for q in bench.questions) == {
        "C1": 15,
        "C2": 15,
        "C3": 7,
        "C4": 15,
        "C5": 15,
        "C6": 6,
    }
    as_of = [q for q in bench.questions if q.as_of]
    assert len(as_of) == 15 and {q.category for q in as_of} == {"C4"}
    assert all(item.date and item.author is None for item in bench.items)
    assert not any("artefact_metadata" in item.text for item in bench.items)
    assert all(q.gold for q in bench.questions)
    assert not bench.notes["missing_files"] and not bench.notes["unknown_gold_ids"]


@pytest.mark.skipif(not HAS_ORGMEMBENCH, reason="OrgMemBench data not available")
def test_orgmembench_real_smoke_run(tmp_path: Path) -> None:
    bench = runner.load_benchmark("orgmembench", ROOT)
    options = runner.RunOptions(limit=4, sweep=(10,), resamples=20, progress=False)
    results = runner.run(
        bench,
        systems.select("orgmembench", ["mempp-paper", "bm25", "rag-2048", "full-context"]),
        embedder=KeywordEmbedder(["helix", "launch", "pricing"]),
        cache_dir=tmp_path,
        options=options,
        spans=whitespace_spans,
    )
    assert results["run"]["cache"]["added"] == 443
    assert len(results["questions"]) == 16
    for row in results["questions"]:
        assert 0.0 <= row["window"] <= 1.0 and row["window_full"] <= row["window"]


@pytest.mark.skipif(not HAS_LOCOMO, reason="LoCoMo data not available")
def test_locomo_real_counts() -> None:
    bench = runner.load_benchmark("locomo", ROOT)
    assert len(bench.questions) == 1540
    assert Counter(q.category for q in bench.questions) == {
        "1": 282,
        "2": 321,
        "3": 96,
        "4": 841,
    }
    assert len(bench.scopes) == 10
    assert len(bench.items) > 5800
    assert all(item.date for item in bench.items)
    assert (
        sum(not q.gold for q in bench.questions) == bench.notes["questions_without_gold"].__len__()
    )
    assert len(runner.load_benchmark("locomo", ROOT, include_adversarial=True).questions) == 1986
