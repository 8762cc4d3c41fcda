"""Benchmark loaders on tiny datasets the tests write themselves (never the real data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mempp.bench import locomo, longmemeval, orgmembench
from mempp.bench.datasets import DataMissing, default_data_root


# -- OrgMemBench ------------------------------------------------------------------------------
def _artifact(slot: str, body: str, author: str = "P-0001") -> str:
    return (
        "<!-- artefact_metadata\n"
        f"slot_id: {slot}\nevent_id: EV-X\ngenre: email\nrole: primary\n"
        f"author: {author}\ntestimony_type: direct\n-->\n\n{body}\n"
    )


def write_orgmembench(root: Path) -> Path:
    tier = root / "orgmembench" / "helix" / "medium"
    for sub in ("corpus/EV-1", "corpus/EV-9", "source_of_truth", "helix_canon"):
        (tier / sub).mkdir(parents=True, exist_ok=True)
    files = {
        "corpus/EV-1/A-1.md": _artifact("A-1", "We ship on Friday."),
        "corpus/EV-1/A-2.md": _artifact("A-2", "Ship date moved to Monday.", "P-0002"),
        "corpus/EV-9/A-3.md": _artifact("A-3", "Roadmap for 2024-Q2 and beyond."),
        "corpus/EV-9/A-4.md": "Budget 2023-07 review, no header date here.",
        "corpus/EV-9/A-5.md": "No date at all.",
    }
    for rel, text in files.items():
        (tier / rel).write_text(text, encoding="utf-8")
    index = [
        {"slot_id": "A-2", "path": "corpus/EV-1/A-2.md", "event_id": "EV-1"},
        {"slot_id": "A-1", "path": "corpus/EV-1/A-1.md", "event_id": "EV-1"},
        "not json {",
        {"slot_id": "A-3", "path": "corpus/EV-9/A-3.md", "event_id": "EV-9"},
        {"slot_id": "A-4", "path": "corpus/EV-9/A-4.md"},
        {"slot_id": "A-5", "path": "corpus/EV-9/A-5.md"},
        {"slot_id": "A-6", "path": "corpus/EV-9/missing.md", "event_id": "EV-1"},
    ]
    (tier / "corpus_index.jsonl").write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in index) + "\n", "utf-8"
    )
    events = [{"id": "EV-1", "occurred_at": "2023-03-05T10:00:00", "recorded_at": "2023-03-06"}]
    (tier / "source_of_truth" / "events.jsonl").write_text(
        "\n".join(json.dumps(e) for e in events), "utf-8"
    )
    personas = [{"persona_id": "P-0001", "display_name": "Ana Ruiz"}]
    (tier / "helix_canon" / "personas.jsonl").write_text(json.dumps(personas[0]), "utf-8")
    questions = [
        {
            "id": "Q-1",
            "category": "C1",
            "text": "When do we ship?",
            "ground_truth_answer": {"current_value": "Monday"},
            "evidence_artefact_ids": ["A-1", "A-2", "A-404"],
        },
        {
            "id": "Q-2",
            "category": "C4",
            "text": "As of 2023-03-05, when do we ship?",
            "ground_truth_answer": {"as_of_date": "2023-03-05", "asof_facts": []},
            "evidence_artifact_ids": ["A-1"],
        },
        {"id": "Q-3", "category": "C2"},  # malformed: no text
    ]
    (tier / "benchmark_v0.0.jsonl").write_text(
        "\n".join(json.dumps(q) for q in questions) + "\n\n", "utf-8"
    )
    return root


def test_orgmembench_items_follow_index_order_and_strip_the_header(tmp_path: Path) -> None:
    bench = orgmembench.load(write_orgmembench(tmp_path))
    assert [item.id for item in bench.items] == ["A-2", "A-1", "A-3", "A-4", "A-5"]
    first = bench.items[0]
    assert first.text == "Ship date moved to Monday."
    assert "artefact_metadata" not in first.text
    assert first.author is None  # the harness passes no author on this tier
    assert first.scope == "helix-medium" and first.group == "EV-1"
    assert all(item.thread is None for item in bench.items)  # documents, not dialogue
    assert first.history == "[2023-03-05]\nShip date moved to Monday."


def test_orgmembench_dates(tmp_path: Path) -> None:
    bench = orgmembench.load(write_orgmembench(tmp_path))
    dates = {item.id: item.date for item in bench.items}
    # Event occurred_at (first 10 chars); the header's slot id never reads as a date.
    assert dates["A-1"] == "2023-03-05"
    # EV-9 is not in events.jsonl: first date in the file head, quarter -> first month.
    assert dates["A-3"] == "2024-04-01"
    assert dates["A-4"] == "2023-07-01"
    assert dates["A-5"] is None
    assert bench.notes["dates_from_text"] == 2


def test_orgmembench_fallback_date_rules() -> None:
    assert orgmembench.fallback_date("x 2023-Q3 then 2024-01-09") == "2024-01-09"
    assert orgmembench.fallback_date("plan 2023 Q4") == "2023-10-01"
    assert orgmembench.fallback_date("month 2022-11 only") == "2022-11-01"
    assert orgmembench.fallback_date("slot ART-EV-2023-002-001") is None
    assert orgmembench.fallback_date("x" * 300 + " 2023-01-01") is None


def test_orgmembench_questions_gold_and_as_of(tmp_path: Path) -> None:
    bench = orgmembench.load(write_orgmembench(tmp_path))
    assert [q.id for q in bench.questions] == ["Q-1", "Q-2"]
    q1, q2 = bench.questions
    assert q1.gold == ("A-1", "A-2") and q1.as_of is None
    assert bench.notes["unknown_gold_ids"] == ["Q-1:A-404"]
    assert q2.gold == ("A-1",) and q2.as_of == "2023-03-05"
    assert q2.reference["as_of_date"] == "2023-03-05"
    assert bench.notes["missing_files"] == ["corpus/EV-9/missing.md"]
    problems = bench.notes["malformed_lines"]
    assert any("corpus_index.jsonl:3" in p for p in problems)
    assert any("benchmark_v0.0.jsonl:3" in p for p in problems)
    assert list(bench.categories) == ["C1", "C4"]


def test_orgmembench_author_option(tmp_path: Path) -> None:
    bench = orgmembench.load(write_orgmembench(tmp_path), author_from_header=True)
    authors = {item.id: item.author for item in bench.items}
    assert authors["A-1"] == "Ana Ruiz"
    assert authors["A-2"] is None  # P-0002 has no persona row
    assert bench.items[1].history.startswith("[2023-03-05 | Ana Ruiz]\n")
    assert "header" in bench.notes["author"]


def test_missing_data_says_what_and_where(tmp_path: Path) -> None:
    with pytest.raises(DataMissing, match=r"OrgMemBench corpus index not found at .*OrgMemBench"):
        orgmembench.load(tmp_path)
    with pytest.raises(DataMissing, match="LoCoMo data not found"):
        locomo.load(tmp_path)
    with pytest.raises(DataMissing, match="LongMemEval_S not found"):
        longmemeval.load(tmp_path)


def test_default_data_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMPP_DATASETS", str(tmp_path))
    assert default_data_root() == tmp_path
    monkeypatch.delenv("MEMPP_DATASETS")
    monkeypatch.chdir(tmp_path)
    assert default_data_root() == tmp_path / ".." / "shared" / "datasets"


# -- LoCoMo -----------------------------------------------------------------------------------
def locomo_sample() -> dict:
    return {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group."},
            {
                "speaker": "Melanie",
                "dia_id": "D1:2",
                "text": "Look at this!",
                "blip_caption": "a photo of a sunrise",
                "img_url": ["http://example.invalid/x.jpg"],
            },
            {"speaker": "Caroline", "dia_id": "D1:3", "text": "Lovely."},
        ],
        "session_2_date_time": "12:05 am on 1 June, 2023",
        "session_2": [{"speaker": "Melanie", "dia_id": "D2:1", "text": "I paint."}],
        "session_3_date_time": "someday",
        "observation": {"ignored": True},
        "qa": [
            {
                "question": "When did Caroline go?",
                "answer": "7 May",
                "evidence": ["D1:1"],
                "category": 2,
            },
            {
                "question": "What did Mel share?",
                "answer": "sunrise",
                "evidence": ["D1:2; D2:1", "D:1:3", "D1:03", "D9:9", "D"],
                "category": 1,
            },
            {
                "question": "Adversarial?",
                "adversarial_answer": "x",
                "evidence": ["D1:1"],
                "category": 5,
            },
            {"question": "No evidence?", "answer": "y", "evidence": [], "category": 3},
            {"answer": "malformed"},
        ],
    }


def test_locomo_session_dates() -> None:
    assert locomo.parse_session_date("1:56 pm on 8 May, 2023") == "2023-05-08T13:56"
    assert locomo.parse_session_date("12:05 am on 1 June, 2023") == "2023-06-01T00:05"
    assert locomo.parse_session_date("12:30 pm on 2 Jan, 2024") == "2024-01-02T12:30"
    assert locomo.parse_session_date("10:00 am on 31 February, 2023") is None
    assert locomo.parse_session_date(None) is None


def test_locomo_turns(tmp_path: Path) -> None:
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "26.json").write_text(json.dumps(locomo_sample()), "utf-8")
    bench = locomo.load(tmp_path)
    assert [item.id for item in bench.items] == ["D1:1", "D1:2", "D1:3", "D2:1"]
    first, photo = bench.items[0], bench.items[1]
    assert first.text == "[2023-05-08T13:56] Caroline: I went to a support group."
    assert first.date == "2023-05-08T13:56" and first.author == "Caroline"
    assert first.scope == "locomo-26" and first.group == "D1" and first.thread == "D1"
    assert photo.text.endswith("Look at this! [shares a photo: a photo of a sunrise]")
    assert bench.items[3].date == "2023-06-01T00:05"


def test_locomo_questions_and_malformed_evidence(tmp_path: Path) -> None:
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "26.json").write_text(json.dumps(locomo_sample()), "utf-8")
    bench = locomo.load(tmp_path)
    ids = [q.id for q in bench.questions]
    assert ids == ["locomo-26-q0", "locomo-26-q1", "locomo-26-q3"]  # category 5 dropped
    assert bench.questions[0].gold == ("D1:1",) and bench.questions[0].category == "2"
    # "D1:2; D2:1" is split, "D:1:3" and "D1:03" repaired, "D9:9" unknown, "D" unparseable.
    assert bench.questions[1].gold == ("D1:2", "D2:1", "D1:3")
    counts = bench.notes["evidence_ids"]
    assert counts == {"ids": 7, "split": 1, "repaired": 2, "unknown": 1, "unparseable": 1}
    assert bench.notes["questions_without_gold"] == ["locomo-26-q3"]
    assert bench.notes["dropped"] == {"adversarial_questions": 1, "malformed_questions": 1}
    assert list(bench.categories) == ["1", "2", "3"]
    kept = locomo.load(tmp_path, include_adversarial=True)
    assert "5" in kept.categories and len(kept.questions) == 4


def test_locomo_published_single_file_format(tmp_path: Path) -> None:
    sample = locomo_sample()
    published = [{"sample_id": "conv-26", "conversation": sample, "qa": sample.pop("qa")}]
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10.json").write_text(json.dumps(published), "utf-8")
    bench = locomo.load(tmp_path)
    assert bench.scopes == ["locomo-conv-26"]
    assert len(bench.items) == 4 and len(bench.questions) == 3


# -- LongMemEval ------------------------------------------------------------------------------
def longmemeval_rows() -> list[dict]:
    return [
        {
            "question_id": "q1",
            "question_type": "knowledge-update",
            "question": "Where do I work now?",
            "answer": "Acme",
            "question_date": "2023/06/01 (Thu) 09:15",
            "answer_session_ids": ["s2"],
            "haystack_session_ids": ["s1", "s2"],
            "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/28 (Sun) 18:00"],
            "haystack_sessions": [
                [
                    {"role": "user", "content": "I like tea."},
                    {"role": "assistant", "content": "Noted."},
                ],
                [{"role": "user", "content": "I moved to Acme.", "has_answer": True}, "not a turn"],
            ],
        },
        {
            "question_id": "q2_abs",
            "question_type": "single-session-user",
            "question": "What is my cat's name?",
            "answer": "unknown",
            "question_date": "2023/06/02 (Fri) 10:00",
            "answer_session_ids": [],
            "haystack_session_ids": ["s9"],
            "haystack_dates": ["2023/05/01 (Mon) 08:00"],
            "haystack_sessions": [[{"role": "user", "content": "Hello"}]],
        },
        {"question_id": "bad"},
        {
            "question_id": "q3",
            "question_type": "multi-session",
            "question": "Broken haystack",
            "haystack_session_ids": ["a", "b"],
            "haystack_dates": ["2023/05/01 (Mon) 08:00"],
            "haystack_sessions": [[]],
        },
    ]


def test_longmemeval_loader(tmp_path: Path) -> None:
    (tmp_path / "longmemeval").mkdir()
    path = tmp_path / "longmemeval" / "longmemeval_s.json"
    path.write_text(json.dumps(longmemeval_rows()), "utf-8")
    bench = longmemeval.load(tmp_path)
    assert [q.id for q in bench.questions] == ["q1"]
    question = bench.questions[0]
    assert question.scope == "lme-q1" and question.category == "knowledge-update"
    assert question.as_of == "2023-06-01"  # end of the question's day, as a bare date
    assert question.gold == ("s2#0",) and question.gold_groups == ("s2",)
    assert "haystack_sessions" not in question.raw
    assert [item.id for item in bench.items] == ["s1#0", "s1#1", "s2#0"]
    assert bench.items[2].text == "[2023-05-28T18:00] user: I moved to Acme."
    assert bench.items[2].author == "user" and bench.items[2].group == "s2"
    assert bench.items[2].thread == "s2"
    counts = bench.notes["counts"]
    assert counts["abstention_dropped"] == 1
    assert counts["malformed_questions"] == 1
    assert counts["malformed_haystacks"] == 1
    assert counts["malformed_turns"] == 1


def test_longmemeval_abstention_and_explicit_file(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.json"
    path.write_text(json.dumps(longmemeval_rows()), "utf-8")
    bench = longmemeval.load(tmp_path / "nowhere", path=path, include_abstention=True)
    assert [q.id for q in bench.questions] == ["q1", "q2_abs"]
    assert bench.questions[1].gold == ()
    assert bench.scopes == ["lme-q1", "lme-q2_abs"]


def test_longmemeval_dates() -> None:
    assert longmemeval.parse_date("2023/05/20 (Sat) 02:21") == "2023-05-20T02:21"
    assert longmemeval.parse_date("2023-05-20") == "2023-05-20"
    assert longmemeval.parse_date("2023/13/01 (Sat) 02:21") is None
    assert longmemeval.parse_date(7) is None
