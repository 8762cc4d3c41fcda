"""The fact-index ablation (``mempp-fact-index``, :mod:`mempp.bench.facts`) over real HTTP
(FakeOpenAI), a real SQLite store and a real SQLite fact index: what is stored, what counts as
a failure, and what the read path retrieves."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mempp import Memory
from mempp.bench import facts, systems
from mempp.errors import InvalidInput
from mempp.llm import LLMClient, LLMError
from mempp.settings import preset
from test_bench_llm import (
    ScriptedModel,
    TopicEmbedder,
    benchmark_store,
    llm_flags,
    rows_of,
    run_cli,
    write_ablation_locomo,
)

from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply

TOPICS = ["launch", "budget", "gamma"]


# -- extraction and the index, one document at a time --------------------------------------------
@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def client(server: FakeOpenAI) -> LLMClient:
    return LLMClient(base_url=server.base_url, model="fact-m", max_retries=0)


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    with Memory(tmp_path / "store.db", embedder=KeywordEmbedder(TOPICS)) as mem:
        yield mem


def test_facts_are_stored_with_their_document_id_date_and_author(
    tmp_path: Path, fake: FakeOpenAI, memory: Memory
) -> None:
    first = memory.add("The launch moved to Friday, says Ana.", author="Ana", date="2023-06-09").id
    memory.add("Gamma is fine.", author="Ben", date="2023-06-10")
    record = memory.get(first)
    assert record is not None
    fake.reply(
        json.dumps(
            {
                "facts": [
                    "The launch moved to Friday.",
                    "  The launch   moved to Friday. ",  # a repeat, once stored
                    "Zorro owns a castle in Peru.",  # no word of the document: dropped
                ]
            }
        )
    )
    with client(fake) as llm, facts.FactIndex(tmp_path / "facts.sqlite", memory.embedder) as index:
        found = facts.extract_facts(llm, record)
        assert found == ["The launch moved to Friday."]
        index.add(record, found, llm.model)
        stored = index.facts(memory.scope)
        assert [(f.record_id, f.text, f.date, f.author) for f in stored] == [
            (first, "The launch moved to Friday.", record.date, "Ana")
        ]
        assert memory.get(stored[0].record_id) is not None  # points to a real document
        assert index.pending(memory.scope, [first, first + 1]) == [first + 1]
    body = fake.requests[0].body
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["facts"]
    assert "Document dated 2023-06-09" in fake.requests[0].text()
    assert "author Ana" in fake.requests[0].text()


@pytest.mark.parametrize(
    "reply",
    [
        # The instructions repeated as a "fact".
        ScriptedReply(content=json.dumps({"facts": ["one short sentence that stands on its own"]})),
        ScriptedReply(content=""),  # empty
        ScriptedReply(content='{"facts": ["The launch'),  # cut-off JSON
        ScriptedReply(content="Sure! The launch is on Friday."),  # no JSON at all
        ScriptedReply(content=json.dumps({"facts": []})),  # no fact listed
        ScriptedReply(content=json.dumps({"facts": ["Zorro owns a castle."]})),  # invented
        ScriptedReply(status=500, body={"error": {"message": "boom"}}),  # server error
        ScriptedReply(status=400, body={"error": {"message": "bad request"}}),
    ],
    ids=["echo", "empty", "cut-json", "prose", "no-fact", "ungrounded", "http-500", "http-400"],
)
def test_an_unusable_reply_is_a_failure(
    fake: FakeOpenAI, memory: Memory, reply: ScriptedReply
) -> None:
    record = memory.get(memory.add("The launch moved to Friday.", date="2023-06-09").id)
    assert record is not None
    fake.push(reply)
    with client(fake) as llm, pytest.raises(LLMError):
        facts.extract_facts(llm, record)
    assert llm.cache is None or len(llm.cache) == 0


def test_the_fact_legs_rank_documents_by_their_best_fact(tmp_path: Path, memory: Memory) -> None:
    ids = [
        memory.add("The launch is on Monday.", date="2023-05-08").id,
        memory.add("Budget news and the launch date.", date="2023-05-09").id,
        memory.add("Gamma looks good.", date="2023-06-01").id,
    ]
    records = memory.store.get(memory.scope, ids)
    settings = preset("paper-locomo")
    with facts.FactIndex(tmp_path / "facts.sqlite", memory.embedder) as index:
        index.add(records[ids[0]], ["The launch is on Monday."], "m")
        index.add(records[ids[1]], ["The budget is approved.", "The launch date is set."], "m")
        index.add(records[ids[2]], ["Gamma looks good."], "m")
        vector = memory.embedder.embed(["launch"])[0]
        nearest = index.nearest(memory.scope, vector, None, settings)
        # Both launch documents (cosine 1; the newer fact first), then the rest, each once.
        assert nearest[:2] == [ids[1], ids[0]] and sorted(nearest) == sorted(ids)
        assert index.lexical(memory.scope, "When is the launch?", None, settings)[0] in ids[:2]
        assert set(index.lexical(memory.scope, "budget approved?", None, settings)) == {ids[1]}
        # The as-of bound applies to a fact through its document's date.
        bound = records[ids[0]].date
        assert bound is not None
        as_of = facts.date_key(bound)
        assert index.nearest(memory.scope, vector, as_of, settings) == [ids[0]]
        # Another encoder's index is refused, not mixed.
    with pytest.raises(facts.FactIndexError, match="another encoder"):
        facts.FactIndex(tmp_path / "facts.sqlite", KeywordEmbedder(["other"]))
    assert np.isfinite(vector).all()


# -- the bench system ----------------------------------------------------------------------------
class FactModel(ScriptedModel):
    """ScriptedModel plus replies to the fact prompt, chosen by the turn's text: good facts for
    the launch turns and the first budget turn; an echo, a cut-off JSON and (optionally) a
    refused key for the others."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse_gamma = False
        self.broken = True

    def __call__(self, request: RecordedRequest) -> ScriptedReply:
        messages = request.messages
        if messages and str(messages[0]["content"]).startswith("You list the facts"):
            with self.lock:
                self.kinds.append("facts")
            return self.facts(str(messages[-1]["content"]))
        return super().__call__(request)

    def facts(self, user: str) -> ScriptedReply:
        text = user.split("\n\n", 1)[1]
        if "Monday" in text:
            return self.reply({"facts": ["Ana says the launch is on Monday."]})
        if "Friday" in text:
            return self.reply({"facts": ["The launch moved to Friday.", "Ben moved it."]})
        if "Budget is approved" in text:
            return self.reply({"facts": ["Ben says the budget is approved."]})
        if "Gamma" in text and self.refuse_gamma:
            return ScriptedReply(status=401, body={"error": {"message": "key revoked"}})
        if self.broken and "Our budget" in text:
            return self.reply({"facts": ["Only what the document states; at most 20 facts."]})
        if self.broken and "Gamma" in text:
            return ScriptedReply(content='{"facts": ["Gamma')
        return self.reply({"facts": [text.split(": ", 1)[-1]]})


@pytest.fixture
def fact_model() -> FactModel:
    return FactModel()


@pytest.fixture
def fact_server(fact_model: FactModel) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(responder=fact_model) as server:
        yield server


def index_rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        stored = conn.execute(
            "SELECT scope, record_id, text, date FROM facts ORDER BY id"
        ).fetchall()
        done = conn.execute("SELECT record_id, facts FROM extracted ORDER BY record_id").fetchall()
    finally:
        conn.close()
    return stored, done


def test_mempp_fact_index_end_to_end(
    tmp_path: Path, fact_server: FakeOpenAI, fact_model: FactModel
) -> None:
    data = write_ablation_locomo(tmp_path / "data")
    flags = ("--systems", "mempp-paper,mempp-fact-index", *llm_flags(fact_server))
    code, _ = run_cli(
        tmp_path, data, "locomo", "--systems", "mempp-paper", embedder=TopicEmbedder(TOPICS)
    )
    assert code == 0
    shared = benchmark_store(tmp_path)
    before = hashlib.sha256(shared.read_bytes()).hexdigest()

    code, results = run_cli(tmp_path, data, "locomo", *flags, embedder=TopicEmbedder(TOPICS))
    assert code == 0
    assert hashlib.sha256(shared.read_bytes()).hexdigest() == before  # never written
    info = results["llm"]["fact_index"]
    assert info["pending"] == 5 and info["extracted_now"] == 3 and info["failures"] == 2
    assert info["facts_now"] == 4 and info["documents"] == 3 and info["facts"] == 4
    assert sorted(info["failed"]) == ["locomo-1:3", "locomo-1:5"]
    assert "repeats the instructions" in info["failed"]["locomo-1:3"]
    assert fact_model.kinds.count("facts") == 5

    # Stored: only the grounded facts of the three good turns, each pointing to its row.
    path = Path(info["path"])
    assert path.parent.parent == shared.parent  # beside the benchmark store
    stored, done = index_rows(path)
    assert [record for record, _ in done] == [1, 2, 4]
    assert {text for _, _, text, _ in stored} == {
        "Ana says the launch is on Monday.",
        "The launch moved to Friday.",
        "Ben moved it.",
        "Ben says the budget is approved.",
    }
    conn = sqlite3.connect(shared)
    try:
        texts = dict(conn.execute("SELECT id, text FROM records").fetchall())
        dates = dict(conn.execute("SELECT id, event_date FROM records").fetchall())
    finally:
        conn.close()
    for _, record, _text, date in stored:
        assert record in texts and date is not None and date[:10] == str(dates[record])[:10]
    assert "Friday" in texts[4]

    # The read path: the fact legs found only documents with facts, mapped back to them.
    rows = rows_of(results, "mempp-fact-index")
    launch = rows["locomo-1-q0"]
    assert launch["legs_fired"]["vec"] == 3 and launch["legs_fired"]["lex"] == 2
    assert launch["recall@1"] == 1.0 and launch["top"][0] == "D2:1"
    assert rows["locomo-1-q1"]["top"][0] == "D1:2"
    assert results["systems"][1]["ablation"] == "facts"
    # Answered by default beside the paper preset; the answerer reads the original turns.
    assert results["llm"]["answered_systems"] == ["mempp-paper", "mempp-fact-index"]
    assert results["llm"]["calls_per_question"]["mempp-fact-index"] == 2
    assert not any(
        "Give a direct" in r.text() and "Ben moved it." in r.text() for r in fact_server.requests
    )
    markdown = (tmp_path / "out" / "results.md").read_text("utf-8")
    assert "mempp-fact-index: `answer-m`, 5 document(s) asked this run" in markdown

    # A rerun asks again for the two failed documents only, and ranks the same way.
    fact_model.broken = False
    asked = fact_model.kinds.count("facts")
    code, again = run_cli(tmp_path, data, "locomo", *flags, embedder=TopicEmbedder(TOPICS))
    assert code == 0
    assert fact_model.kinds.count("facts") - asked == 2
    assert again["llm"]["fact_index"]["extracted_now"] == 2
    assert again["llm"]["fact_index"]["documents"] == 5
    # Same facts for the launch question: the same ranking, whatever the rerun added.
    assert rows_of(again, "mempp-fact-index")["locomo-1-q0"]["top"][0] == "D2:1"

    # A third run makes no request at all and gives identical rows.
    asked = len(fact_server.requests)
    code, third = run_cli(tmp_path, data, "locomo", *flags, embedder=TopicEmbedder(TOPICS))
    assert code == 0 and len(fact_server.requests) == asked
    assert third["llm"]["fact_index"]["reused"] is True
    assert [r["top"] for r in rows_of(third, "mempp-fact-index").values()] == [
        r["top"] for r in rows_of(again, "mempp-fact-index").values()
    ]


def test_an_endpoint_failure_stops_the_extraction_and_keeps_what_was_stored(
    tmp_path: Path,
    fact_server: FakeOpenAI,
    fact_model: FactModel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fact_model.refuse_gamma = True
    data = write_ablation_locomo(tmp_path / "data")
    flags = ("--systems", "mempp-fact-index", *llm_flags(fact_server))
    code, _ = run_cli(tmp_path, data, "locomo", *flags, embedder=TopicEmbedder(TOPICS))
    assert code == 1
    err = capsys.readouterr().err
    assert "fact extraction in scope locomo-1 failed" in err and "HTTP 401" in err
    (path,) = (tmp_path / "cache").glob(f"*/facts-*/{facts.INDEX_FILE}")
    stored, done = index_rows(path)
    assert [record for record, _ in done] == [1, 2, 4]  # gamma (5) and the echo (3) pending
    assert all(record != 5 for _, record, _, _ in stored)

    fact_model.refuse_gamma = False
    fact_model.broken = False
    code, results = run_cli(tmp_path, data, "locomo", *flags, embedder=TopicEmbedder(TOPICS))
    assert code == 0
    info = results["llm"]["fact_index"]
    assert info["pending"] == 2 and info["failures"] == 0 and info["documents"] == 5


def test_mempp_fact_index_needs_an_endpoint() -> None:
    with pytest.raises(InvalidInput, match="needs an LLM endpoint"):
        systems.select("locomo", ["mempp-fact-index"])
    (system,) = systems.select("locomo", ["mempp-fact-index"], llm=True)
    assert system.ablation == "facts" and system.settings == preset("paper-locomo")
    assert system.to_dict()["fact_legs"] == ["lex", "vec"]


def test_fact_limit_bounds_the_calls_and_says_what_is_left(
    tmp_path: Path, fact_server: FakeOpenAI, fact_model: FactModel
) -> None:
    data = write_ablation_locomo(tmp_path / "data")
    flags = ("--systems", "mempp-fact-index", *llm_flags(fact_server))
    embedder = TopicEmbedder(TOPICS)
    code, results = run_cli(
        tmp_path, data, "locomo", *flags, "--fact-limit", "2", embedder=embedder
    )
    assert code == 0
    info = results["llm"]["fact_index"]
    assert info["pending"] == 2 and info["left_pending"] == 3 and info["documents"] == 2
    assert fact_model.kinds.count("facts") == 2
    markdown = (tmp_path / "out" / "results.md").read_text("utf-8")
    assert "3 more not asked (--fact-limit)" in markdown
    # With 0 nothing is asked: the partial index is searched as it is.
    code, again = run_cli(tmp_path, data, "locomo", *flags, "--fact-limit", "0", embedder=embedder)
    assert code == 0 and fact_model.kinds.count("facts") == 2
    assert again["llm"]["fact_index"]["left_pending"] == 3
    launch = rows_of(again, "mempp-fact-index")["locomo-1-q0"]
    assert launch["legs_fired"]["vec"] == 2  # the two documents indexed so far
    code, _ = run_cli(tmp_path, data, "locomo", *flags, "--fact-limit", "-1", embedder=embedder)
    assert code == 2
