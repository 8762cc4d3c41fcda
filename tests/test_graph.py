"""Mem^g++: triple extraction and graph facts after the rows, over real HTTP."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempp import InvalidInput, Memory, Settings, StoreError
from mempp.llm import LLMClient, LLMUnavailable
from mempp.llm.graph import (
    MAX_FACTS,
    GraphOptions,
    entity_key,
    extract,
    related_facts,
)
from mempp.search.evidence import FACTS_HEADING, RelatedFact
from mempp.store.base import GraphStore, supports

import fake_openai
from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, ScriptedReply, fast_client

# The shared fixture (pytest finds fixtures among module attributes).
server = fake_openai.server


def make_llm(server: FakeOpenAI, **kwargs: Any) -> LLMClient:
    return fast_client(server, **{"model": "graph-model", **kwargs})


@pytest.fixture
def llm(server: FakeOpenAI) -> Iterator[LLMClient]:
    with make_llm(server) as client:
        yield client


@pytest.fixture
def memory(db_path: Path) -> Iterator[Memory]:
    with Memory(db_path, embedder=KeywordEmbedder(["helix", "launch", "budget"])) as mem:
        yield mem


def add(memory: Memory, text: str, author: str | None = None, date: str | None = None) -> int:
    result = memory.add(text, author=author, date=date)
    assert result.id is not None
    return result.id


def triples(*items: tuple[str, str, str]) -> dict[str, object]:
    return {"triples": [{"subject": s, "relation": r, "object": o} for s, r, o in items]}


def content(memory: Memory) -> list[tuple]:
    conn = sqlite3.connect(memory.store.location)
    try:
        return conn.execute("SELECT id, text, state, superseded_by FROM records").fetchall()
    finally:
        conn.close()


def extract_each(memory: Memory, server: FakeOpenAI, llm: LLMClient, rows: dict[int, tuple]):
    """Extract ``{record_id: (triple, ...)}`` in id order, one scripted reply per row."""
    for record_id in sorted(rows):
        server.reply_json(triples(*rows[record_id]))
    report = extract(memory, llm, ids=list(rows))
    assert report.failures == 0 and report.extracted == len(rows)
    return report


@pytest.fixture
def launch_graph(memory, server, llm) -> dict[str, int]:
    """Three dated rows and one undated row, each with triples about the Helix launch."""
    ids = {
        "march": add(memory, "Helix launch is in March.", "Ana", "2024-01-10"),
        "april": add(memory, "Helix launch moved to April.", "Ben", "2024-02-20"),
        "june": add(memory, "Helix launch moved to June.", "Cleo", "2024-05-02"),
        "undated": add(memory, "Dan owns the Helix budget."),
    }
    extract_each(
        memory,
        server,
        llm,
        {
            ids["march"]: [("Helix", "launches in", "March")],
            ids["april"]: [("Helix", "launches in", "April"), ("Ben", "announced", "Helix")],
            ids["june"]: [("Helix", "launches in", "June")],
            ids["undated"]: [("Dan", "owns", "Helix budget")],
        },
    )
    server.requests.clear()
    return ids


# -- entity keys -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Helix", "helix"),
        ("  The   Helix-Project's ", "helix project"),
        ("HELIX_project", "helix project"),
        ("Ｈｅｌｉｘ", "helix"),  # full-width letters (NFKC)
        ("Ana’s team", "ana team"),
        ("!!!", ""),
        ("an apple", "apple"),
        ("Theo", "theo"),  # a leading article only as a whole word
    ],
)
def test_entity_key(name: str, key: str) -> None:
    assert entity_key(name) == key


# -- extraction --------------------------------------------------------------------------------
def test_the_write_path_makes_no_llm_call(memory, server) -> None:
    add(memory, "Helix launch is in March.", "Ana", "2024-01-10")
    memory.add_many(["Ben leads Helix.", {"text": "Dan owns the budget.", "author": "Dan"}])
    assert server.requests == []
    assert memory.store.pending_extraction(memory.scope, None) == [1, 2, 3]


def test_extract_stores_triples_keyed_to_their_row_once(memory, server, llm) -> None:
    first = add(memory, "Ana leads Helix. Helix launches in March.", "Ana", "2024-01-10")
    second = add(memory, "Nothing to see.", "Ben", "2024-01-11")
    before = content(memory)
    server.reply_json(
        triples(
            (" Ana ", "leads", "Helix"),
            ("Helix", "launches  in", "March"),
            ("ana", "leads", "the Helix"),  # the same fact again
            ("!!", "is", "Helix"),  # no entity left after normalising
        )
    )
    server.reply_json({"triples": []})
    report = extract(memory, llm)
    assert report.to_dict() == {
        "model": "graph-model",
        "pending": 2,
        "extracted": 2,
        "triples": 2,
        "failures": 0,
        "failed": {},
    }
    stored = memory.store.triples_of(memory.scope, [first, second])
    assert [(t.subject, t.relation, t.object, t.subject_key, t.object_key) for t in stored] == [
        ("Ana", "leads", "Helix", "ana", "helix"),
        ("Helix", "launches in", "March", "helix", "march"),
    ]
    assert {t.record_id for t in stored} == {first}
    # the prompt shows the row with its date and author
    user = server.requests[0].messages[1]["content"]
    assert user.startswith("Document dated 2024-01-10, author Ana:")
    assert "Ana leads Helix." in user
    # a second call finds nothing pending (the empty row is marked done too)
    assert extract(memory, llm).pending == 0
    assert len(server.requests) == 2
    assert content(memory) == before  # rows untouched


def test_the_reply_budget_follows_the_rows_length(memory, server, llm) -> None:
    # A short row cannot hold thousands of tokens of grounded triples; a model that loops is
    # cut off early (a failed, pending row) instead of generating for minutes.
    add(memory, "Ana leads Helix.", "Ana", "2024-01-10")
    add(memory, "Helix notes. " * 2000, "Ben", "2024-01-11")
    server.reply_json({"triples": []})
    server.reply_json({"triples": []})
    extract(memory, llm)
    budgets = [request.body["max_tokens"] for request in server.requests]
    assert budgets == [128 + len("Ana leads Helix.") // 2, 2048]


@pytest.mark.parametrize(
    "reply",
    [
        '{"triples": [{"subject": "Ana", "relation": "leads"}]}',  # missing object
        '{"triples": [{"subject": "Ana", "relation": "", "object": "Helix"}]}',
        '{"triples": ["Ana leads Helix"]}',
        '{"triples": {"subject": "Ana"}}',
        '{"triples": [{"subject": "Ana", "relation": "leads", "object": "Hel',  # cut off
        "Ana leads Helix.",
    ],
)
def test_a_bad_extraction_reply_leaves_the_row_pending(memory, server, llm, reply) -> None:
    row = add(memory, "Ana leads Helix.", "Ana", "2024-01-10")
    server.reply(reply)
    report = extract(memory, llm)
    assert report.failures == 1 and report.extracted == 0 and row in report.failed
    assert "LLMReplyError" in report.failed[row]
    assert memory.store.pending_extraction(memory.scope, None) == [row]
    assert memory.store.triples_of(memory.scope, [row]) == []


def test_extraction_http_failures(memory, server, llm) -> None:
    row = add(memory, "Ana leads Helix.", "Ana", "2024-01-10")
    server.error(500).error(500)
    report = extract(memory, llm)
    assert report.failures == 1 and "HTTP 500" in report.failed[row]
    server.error(429, headers={"Retry-After": "0"})
    server.reply_json(triples(("Ana", "leads", "Helix")))
    assert extract(memory, llm).triples == 1
    assert memory.store.pending_extraction(memory.scope, None) == []


def test_extract_narrows_by_ids_and_limit_and_skips_archived(memory, server, llm) -> None:
    rows = [add(memory, f"Row {n} about Helix.") for n in range(4)]
    memory.store.set_state(memory.scope, [rows[3]], "archived", None)
    assert memory.store.pending_extraction(memory.scope, None) == rows[:3]
    server.reply_json({"triples": []})
    assert extract(memory, llm, ids=[rows[2], rows[3]]).pending == 1
    server.reply_json({"triples": []})
    assert extract(memory, llm, limit=1).pending == 1
    assert memory.store.pending_extraction(memory.scope, None) == [rows[1]]
    with pytest.raises(InvalidInput):
        extract(memory, llm, limit=-1)


def test_concurrent_extraction(memory, server) -> None:
    rows = [add(memory, f"Person{n} leads Helix.") for n in range(5)]

    def echo(request) -> ScriptedReply:
        name = request.messages[1]["content"].split("\n\n", 1)[1].split()[0]
        return ScriptedReply(
            content=f'{{"triples": [{{"subject": "{name}", "relation": "leads", '
            '"object": "Helix"}]}'
        )

    server.responder = echo
    with make_llm(server, max_concurrency=4) as client:
        report = extract(memory, client, max_workers=4)
    assert report.extracted == 5 and report.triples == 5
    stored = memory.store.triples_of(memory.scope, rows)
    assert {(t.record_id, t.subject) for t in stored} == {
        (r, f"Person{n}") for n, r in enumerate(rows)
    }


# -- query -------------------------------------------------------------------------------------
def test_facts_carry_their_row_date_and_obey_as_of(memory, server, llm, launch_graph) -> None:
    ids = launch_graph
    server.reply_json({"entities": ["Helix"]})
    facts = related_facts(memory, "When does Helix launch?", llm=llm, as_of="2024-03-01")
    assert facts == [
        RelatedFact("Ben", "announced", "Helix", ids["april"], "2024-02-20"),
        RelatedFact("Helix", "launches in", "April", ids["april"], "2024-02-20"),
        RelatedFact("Helix", "launches in", "March", ids["march"], "2024-01-10"),
    ]  # June is dated after as_of; the undated row is out under an as-of bound
    server.reply_json({"entities": ["helix", "Dan"]})
    facts = related_facts(memory, "Who owns what on Helix?", llm=llm)
    # an undated row's recency is its ingest time, as in the read path's recency slots
    assert [f.object for f in facts] == ["Helix budget", "June", "Helix", "April", "March"]
    assert facts[0].date is None and facts[0].record_id == ids["undated"]
    assert facts[0].render() == f"- Dan | owns | Helix budget (undated, record {ids['undated']})"
    [request] = server.requests[1:]
    assert request.messages[1]["content"] == "Question: Who owns what on Helix?"


def test_the_paper_switch_ignores_dates_and_as_of(memory, server, llm, launch_graph) -> None:
    server.reply_json({"entities": ["Helix"]})
    facts = related_facts(memory, "When?", llm=llm, as_of="2024-01-31", dated=False)
    assert {f.object for f in facts} == {"March", "April", "June", "Helix"}
    assert all(f.date is None and f.record_id is None for f in facts)
    assert facts[0].render() == "- Helix | launches in | June"  # ingest order, newest first


def test_ranking_by_entities_touched_then_recency_without_repeats(memory, server, llm) -> None:
    old = add(memory, "Ana leads Helix.", "Ana", "2024-01-01")
    new = add(memory, "Ana leads Helix again; Helix uses Postgres.", "Ana", "2024-06-01")
    other = add(memory, "Ana likes tea.", "Ana", "2024-07-01")
    extract_each(
        memory,
        server,
        llm,
        {
            old: [("Ana", "leads", "Helix")],
            new: [("Ana", "leads", "Helix"), ("Helix", "uses", "Postgres")],
            other: [("Ana", "likes", "tea")],
        },
    )
    server.reply_json({"entities": ["Ana", "Helix"]})
    facts = related_facts(memory, "What does Ana do on Helix?", llm=llm)
    assert [(f.subject, f.relation, f.object, f.record_id) for f in facts] == [
        ("Ana", "leads", "Helix", new),  # both entities; the newer copy of the fact
        ("Ana", "likes", "tea", other),  # one entity, newest row
        ("Helix", "uses", "Postgres", new),
    ]


def test_at_most_five_facts_after_the_rows(memory, server, llm) -> None:
    milestones = " ".join(f"M{n}" for n in range(12))
    row = add(memory, f"The Helix launch plan: milestones {milestones}.", "Ana", "2024-01-01")
    server.reply_json(triples(*[("Helix", "has milestone", f"M{n}") for n in range(12)]))
    extract(memory, llm)
    server.reply_json({"entities": ["Helix"]})
    evidence = memory.evidence("Helix launch", graph=GraphOptions(llm))
    assert len(evidence.facts) == MAX_FACTS == 5
    rows_part, facts_part = evidence.text.split("\n\n" + FACTS_HEADING + "\n")
    assert f"record {row}" in rows_part and "Helix launch plan" in rows_part
    lines = facts_part.splitlines()
    assert len(lines) == 5 and all(line.startswith("- Helix | has milestone | M") for line in lines)
    assert lines[0].endswith(f"(2024-01-01, record {row})")
    assert [r.id for r in evidence.rows] == [row]  # facts are not rows
    assert len(evidence.to_dict()["facts"]) == 5


def test_graph_evidence_honours_as_of_and_budget(memory, server, llm, launch_graph) -> None:
    server.reply_json({"entities": ["Helix"]})
    dated = memory.evidence("Helix launch", as_of="2024-03-01", graph=GraphOptions(llm))
    assert "June" not in dated.text and "- Helix | launches in | April" in dated.text
    server.reply_json({"entities": ["Helix"]})
    paper = memory.evidence(
        "Helix launch", as_of="2024-03-01", graph=GraphOptions(llm, dated=False)
    )
    assert "- Helix | launches in | June" in paper.text  # the paper's leak past as_of
    assert "Helix launch moved to June" not in paper.text  # while the rows obey it

    plain = memory.evidence("Helix launch", as_of="2024-03-01")
    server.reply_json({"entities": ["Helix"]})
    budget = len(plain.text) + 80  # room for the heading and one fact line only
    tight = memory.evidence(
        "Helix launch", as_of="2024-03-01", budget=budget, graph=GraphOptions(llm)
    )
    assert len(tight.text) <= budget and len(tight.facts) == 1
    server.reply_json({"entities": ["Helix"]})
    full = memory.evidence("Helix launch", budget=40, graph=GraphOptions(llm))
    assert full.facts == () and FACTS_HEADING not in full.text and len(full.text) <= 40


def test_graph_facts_obey_an_as_of_read_from_the_question(memory, server, llm, launch_graph):
    server.reply_json({"entities": ["Helix"]})
    reading = Settings(as_of_in_question=True)
    evidence = memory.evidence(
        "Helix launch as of March 1, 2024", settings=reading, graph=GraphOptions(llm)
    )
    assert "June" not in evidence.text and "- Helix | launches in | April" in evidence.text


def test_without_graph_nothing_changes_and_no_call_is_made(memory, server, llm, launch_graph):
    hits = memory.search("Helix launch")
    evidence = memory.evidence("Helix launch")
    assert evidence.facts == () and "facts" not in evidence.to_dict()
    assert FACTS_HEADING not in evidence.text
    assert [h.id for h in memory.search("Helix launch")] == [h.id for h in hits]
    assert server.requests == []


def test_no_entities_or_no_match_gives_the_rows_alone(memory, server, llm, launch_graph) -> None:
    plain = memory.evidence("Helix launch")
    server.reply_json({"entities": []})
    assert memory.evidence("Helix launch", graph=GraphOptions(llm)) == plain
    server.reply_json({"entities": ["Zeppelin", "  "]})
    assert memory.evidence("Helix launch", graph=GraphOptions(llm)) == plain
    assert len(server.requests) == 2


def test_a_failed_entity_call_raises_or_is_skipped(memory, server, llm, launch_graph) -> None:
    server.error(500).error(500)
    with pytest.raises(LLMUnavailable):
        memory.evidence("Helix launch", graph=GraphOptions(llm))
    server.reply('{"entities": "Helix"}')  # wrong type
    plain = memory.evidence("Helix launch")
    assert memory.evidence("Helix launch", graph=GraphOptions(llm, on_error="skip")) == plain


def test_limit_is_validated(memory, llm) -> None:
    with pytest.raises(InvalidInput):
        related_facts(memory, "q", llm=llm, limit=0)


def test_engines_without_the_capability_are_refused() -> None:
    with pytest.raises(StoreError, match="does not support the entity graph"):
        supports(object(), GraphStore, "the entity graph")


@pytest.mark.parametrize(
    "reply",
    [
        triples(("...", "...", "...")),
        triples(("<subject>", "<relation>", "<object>")),
        triples(("Orion", "leads", "Vega")),  # names nothing the document names
    ],
)
def test_a_placeholder_or_ungrounded_reply_leaves_the_row_pending(memory, server, llm, reply):
    row = add(memory, "Ana leads the Helix project.", "Ben", "2024-01-01")
    server.reply_json(reply)
    report = extract(memory, llm)
    assert (report.extracted, report.failures) == (0, 1)
    assert memory.store.pending_extraction(memory.scope, None) == [row]
    server.reply_json(triples(("Ana", "leads", "Helix project")))
    assert extract(memory, llm).triples == 1  # tried again, and stored this time


def test_a_triple_naming_something_the_document_lacks_is_dropped(memory, server, llm):
    add(memory, "I lead the Helix project.", "Ana", "2024-01-01")
    server.reply_json(
        triples(("Ana", "leads", "Helix project"), ("Orion", "funds", "Helix project"))
    )
    report = extract(memory, llm)
    assert (report.extracted, report.triples) == (1, 1)  # the author's name counts as named
    [request] = server.requests
    schema = request.body["response_format"]["json_schema"]
    assert schema["name"] == "graph_triples" and schema["strict"] is True
    system = request.messages[0]["content"]
    assert "..." not in system and "<" not in system
