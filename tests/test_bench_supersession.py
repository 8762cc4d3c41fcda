"""The OrgMemBench supersession layer (mempp.bench.supersession): chains from the data's own
version pairs, links written on a copy only, headers shown only when the question's as-of can
see the successor, and the paired comparison in the results."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mempp import Memory
from mempp.bench import orgmembench, runner, supersession, systems
from mempp.bench.datasets import Question

from conftest import KeywordEmbedder


def _artifact(slot: str, event: str, role: str, body: str) -> str:
    return (
        f"<!-- artefact_metadata\nslot_id: {slot}\nevent_id: {event}\nrole: {role}\n-->\n\n{body}\n"
    )


def write_tier(root: Path) -> Path:
    """Three versions of one plan (E1 -> E2 by a question's prior_value, E2 -> E3 by
    corrects_event_id) and a contradiction (E1 vs E4) that is no version chain."""
    tier = root / orgmembench.TIER
    artifacts = [
        ("B-1", "E1", "primary", "The plan price is ten."),
        ("B-2", "E1", "secondary", "Plan price ten, as agreed."),
        ("B-3", "E2", "secondary", "The plan price went up to twelve."),
        ("B-4", "E2", "primary", "New plan price: twelve."),
        ("B-5", "E3", "primary", "Correction: the plan price is eleven."),
        ("B-6", "E4", "primary", "Someone says the plan price was nine."),
    ]
    for slot, event, role, body in artifacts:
        (tier / "corpus" / event).mkdir(parents=True, exist_ok=True)
        (tier / "corpus" / event / f"{slot}.md").write_text(
            _artifact(slot, event, role, body), "utf-8"
        )
    index = [
        {"slot_id": slot, "path": f"corpus/{event}/{slot}.md", "event_id": event}
        for slot, event, _, _ in artifacts
    ]
    (tier / "corpus_index.jsonl").write_text("\n".join(map(json.dumps, index)), "utf-8")
    events = [
        {"id": "E1", "occurred_at": "2023-01-10"},
        {"id": "E2", "occurred_at": "2023-03-01"},
        {"id": "E3", "occurred_at": "2023-06-01", "corrects_event_id": "E2"},
        {"id": "E4", "occurred_at": "2023-02-01"},
    ]
    (tier / "source_of_truth").mkdir()
    (tier / "source_of_truth" / "events.jsonl").write_text(
        "\n".join(map(json.dumps, events)), "utf-8"
    )
    questions = [
        {
            "id": "Q-1",
            "category": "C1",
            "text": "What is the plan price now, and what was it before?",
            "ground_truth_answer": {"current_value": "twelve", "prior_value": "ten"},
            "evidence_artefact_ids": ["B-1", "B-4"],
        },
        {
            "id": "Q-2",
            "category": "C4",
            "text": "What was the plan price as of 2023-02-15?",
            "ground_truth_answer": {"as_of_date": "2023-02-15", "replacements": []},
            "evidence_artefact_ids": ["B-1"],
        },
        {
            "id": "Q-3",
            "category": "C6",
            "text": "Which accounts of the plan price contradict each other?",
            "ground_truth_answer": {"conflicting_claims": ["ten", "nine"]},
            "evidence_artefact_ids": ["B-1", "B-6"],
        },
    ]
    (tier / "benchmark_v0.0.jsonl").write_text("\n".join(map(json.dumps, questions)), "utf-8")
    return root


def test_chains_come_from_corrections_and_declared_versions(tmp_path: Path) -> None:
    bench = orgmembench.load(write_tier(tmp_path))
    pairs, sources = supersession.version_pairs(bench)
    assert pairs == {("E1", "E2"), ("E2", "E3")}  # E1 / E4 contradict; they are no versions
    assert sources == {"corrects_event_id": 1, "ground_truth_versions": 1}
    assert supersession.chains(bench, pairs) == [["E1", "E2", "E3"]]


def test_the_layer_is_written_on_a_copy_and_paired_in_the_results(tmp_path: Path) -> None:
    bench = orgmembench.load(write_tier(tmp_path / "data"))
    evidence: dict[tuple[str, str], str] = {}

    def hook(question: Question, text: str) -> dict[str, Any]:
        evidence[(question.id, "layered" if "superseded" in text else "any")] = text
        return {}

    chosen = systems.select("orgmembench", ["mempp-default"])
    options = runner.RunOptions(
        sweep=(),
        resamples=20,
        progress=False,
        supersession=True,
        answer_hook=hook,
        answer_systems=("mempp-default", "mempp-default+supersession"),
    )
    embedder = KeywordEmbedder(["plan", "price", "ten", "twelve", "eleven"])
    results = runner.run(bench, chosen, embedder=embedder, cache_dir=tmp_path, options=options)

    layer = results["supersession"]["layer"]
    # Every artifact of a version by the next version's primary artifact (B-4, not B-3).
    assert layer["links"] == 4 and layer["chains"] == [["E1", "E2", "E3"]]
    rows = {(r["question"], r["system"]): r for r in results["questions"]}
    for question in ("Q-1", "Q-2", "Q-3"):  # the layer changes no ranking
        assert (
            rows[(question, "mempp-default")]["top"]
            == rows[(question, "mempp-default+supersession")]["top"]
        )
    # The benchmark store itself was never written.
    with Memory(results["run"]["cache"]["path"], scope="helix-medium") as plain:
        assert [r.superseded_by for r in plain.records()] == [None] * 6
    # Shown where the question can see the successor; never before its date (Q-2, as of
    # 2023-02-15, precedes E2's 2023-03-01).
    assert ("Q-1", "layered") in evidence and ("Q-2", "layered") not in evidence
    assert "superseded by record" in evidence[("Q-1", "layered")]
    deltas = results["supersession"]["deltas"]["mempp-default"]
    assert set(deltas["by_category"]) == {"C1", "C4", "C6"}
    assert deltas["overall"]["recall@10"]["mean"] == 0.0


def test_the_layer_is_refused_off_orgmembench(tmp_path: Path) -> None:
    bench = orgmembench.load(write_tier(tmp_path / "data"))
    renamed = dataclasses.replace(bench, name="locomo")
    with pytest.raises(Exception, match="supersession-layer"):
        runner.run(
            renamed,
            systems.select("orgmembench", ["mempp-default"]),
            embedder=KeywordEmbedder(),
            cache_dir=tmp_path,
            options=runner.RunOptions(progress=False, supersession=True),
        )


def _real_data() -> Path:
    """The datasets folder: $MEMPP_DATASETS, else <repo>/../shared/datasets, else
    /work/shared/datasets (a worktree's parent is not the project's)."""
    if os.environ.get("MEMPP_DATASETS"):
        return Path(os.environ["MEMPP_DATASETS"])
    beside = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    return beside if beside.is_dir() else Path("/work/shared/datasets")


REAL = _real_data()


@pytest.mark.skipif(
    not (REAL / orgmembench.TIER / "corpus_index.jsonl").is_file(),
    reason="OrgMemBench data not available",
)
def test_the_real_version_chains() -> None:
    bench = orgmembench.load(REAL)
    pairs, sources = supersession.version_pairs(bench)
    assert sources == {"corrects_event_id": 3, "ground_truth_versions": 14}
    found = supersession.chains(bench, pairs)
    assert len(found) == 11 and sum(len(c) for c in found) == 25
    assert ["EV-2023-008", "EV-2023-046", "EV-2023-128"] in found  # the commission policy
