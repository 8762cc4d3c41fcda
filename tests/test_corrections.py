"""Corrections where agents read: evidence headers, ``search --json``, HTTP and MCP hits and
``ask``'s prompt say "superseded by record N (DATE)" / "archived (DATE)" only when the
question's as_of and known_at can see the change and its successor; a later correction never
leaks into an earlier answer. Both engines; a real uvicorn and MCP client for the doors."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from mempp import Memory
from mempp.cli.main import main
from mempp.dates import parse_as_of
from mempp.records import Hit
from mempp.search.corrections import with_corrections
from mempp.server.app import create_app
from mempp.server.state import ServerState
from test_server_time import mcp_client

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, fast_client
from serving import live_server

WORDS = ["team", "plan", "cost", "price"]
QUESTION = "What does the Team plan cost?"


@pytest.fixture
def memory(engine_location: str) -> Iterator[Memory]:  # noqa: F811
    with Memory(engine_location, embedder=KeywordEmbedder(WORDS)) as memory:
        memory.add("The Team plan costs $10.", author="Priya", date="2024-01-15")
        memory.add("Team plan cost review next week.", author="Marco", date="2024-02-02")
        memory.add("The Team plan now costs $12.", author="Priya", date="2024-03-08")
        time.sleep(0.01)  # the supersession is logged strictly after the rows were ingested
        memory.supersede(1, by=3, reason="price change")
        yield memory


def test_the_header_says_superseded_only_when_the_question_can_see_it(memory: Memory) -> None:
    successor = memory.get(3)
    text = memory.evidence(QUESTION, as_of="2024-06-30").text
    headers = [line for line in text.splitlines() if line.startswith("[")]
    assert any(
        line.endswith("] 2024-01-15 | Priya | record 1 | superseded by record 3 (2024-03-08)")
        for line in headers
    ), headers
    assert sum("superseded" in line for line in headers) == 1
    # Before the successor's date the supersession has not happened: no word of it.
    early = memory.evidence(QUESTION, as_of="2024-02-28").text
    assert "superseded" not in early and "record 1" in early
    # Known time: by the successor's ingest the link was not yet logged; later it was.
    before_link = memory.evidence(QUESTION, known_at=successor.ingested_at).text
    assert "superseded" not in before_link and "record 1" in before_link
    assert "superseded by record 3" in memory.evidence(QUESTION, known_at="2999-01-01").text
    assert "superseded by record 3" in memory.evidence(QUESTION).text


def test_search_hits_carry_the_link_only_when_visible(memory: Memory) -> None:
    successor = memory.get(3)
    by_id = {h.id: h for h in memory.search(QUESTION, as_of="2024-06-30")}
    assert (by_id[1].record.superseded_by, by_id[1].superseded_on) == (3, "2024-03-08")
    assert by_id[1].to_dict()["superseded_on"] == "2024-03-08"
    for when in ({"as_of": "2024-02-28"}, {"known_at": successor.ingested_at}):
        hit = next(h for h in memory.search(QUESTION, **when) if h.id == 1)
        assert hit.record.superseded_by is None and hit.superseded_on is None, when
        assert hit.to_dict()["superseded_by"] is None
    # The stored record keeps its link: only what the question is told changes.
    assert memory.get(1).superseded_by == 3


def test_search_json_does_not_leak_a_later_supersession(
    memory: Memory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = sys.modules["mempp.cli.main"]  # (mempp.cli.main also names the function)
    monkeypatch.setattr(cli, "embedder_named", lambda _name: KeywordEmbedder(WORDS))
    location = str(memory.store.location)
    successor = memory.get(3)
    search = ["--db", location, "--encoder", "keywords", "search", QUESTION, "--json"]
    for option in (["--as-of", "2024-02-28"], ["--known-at", successor.ingested_at]):
        assert main([*search, *option]) == 0
        hits = json.loads(capsys.readouterr().out)
        assert 1 in {h["id"] for h in hits}
        assert all(h["superseded_by"] is None and h["superseded_on"] is None for h in hits)
    assert main(search) == 0
    first = next(h for h in json.loads(capsys.readouterr().out) if h["id"] == 1)
    assert (first["superseded_by"], first["superseded_on"]) == (3, "2024-03-08")


def test_an_undone_supersession_is_gone_from_the_header(memory: Memory) -> None:
    run = memory.corrections()[-1].run_id
    memory.undo(run)
    assert "superseded" not in memory.evidence(QUESTION).text


def test_archived_is_dated_only_when_visible(memory: Memory) -> None:
    memory.archive(2, reason="stale")
    archived_at = memory.corrections()[-1].at
    record = memory.get(2)
    hit = Hit(record, 1, 1.0)
    store, scope = memory.store, memory.scope
    [shown] = with_corrections(store, scope, [hit], None, None)
    assert shown.archived_on == archived_at[:10]
    [later] = with_corrections(store, scope, [hit], None, parse_as_of("2999-01-01"))
    assert later.archived_on == archived_at[:10]
    [before] = with_corrections(store, scope, [hit], None, parse_as_of(record.ingested_at))
    assert before.archived_on is None
    [past] = with_corrections(store, scope, [hit], parse_as_of("2024-06-30"), None)
    assert past.archived_on is None  # archived in 2026: not yet as of 2024
    from mempp.search.evidence import render_evidence

    assert f"| record 2 | archived ({archived_at[:10]})" in render_evidence([shown]).text


# -- the doors: HTTP, MCP, ask -----------------------------------------------------------------
@pytest.fixture
def served(engine_location: str) -> Iterator[tuple[httpx.Client, str, FakeOpenAI]]:  # noqa: F811
    with FakeOpenAI() as fake:
        state = ServerState(engine_location, embedder=KeywordEmbedder(WORDS), llm=fast_client(fake))
        with live_server(create_app(state)) as url, httpx.Client(base_url=url, timeout=60) as c:
            for text, date in (
                ("The Team plan costs $10.", "2024-01-15"),
                ("Team plan cost review next week.", "2024-02-02"),
                ("The Team plan now costs $12.", "2024-03-08"),
            ):
                assert c.post("/v1/records", json={"text": text, "date": date}).status_code == 200
            done = c.post("/v1/records/1/supersede", json={"by": 3, "reason": "price"})
            assert done.status_code == 200, done.text
            yield c, url, fake


def test_http_hits_and_evidence_carry_visible_corrections_only(served) -> None:
    c, _url, _fake = served
    hits = c.post("/v1/search", json={"query": QUESTION, "as_of": "2024-06-30"}).json()["hits"]
    first = next(h for h in hits if h["id"] == 1)
    assert (first["superseded_by"], first["superseded_on"]) == (3, "2024-03-08")
    early = c.post("/v1/search", json={"query": QUESTION, "as_of": "2024-02-28"}).json()["hits"]
    assert all(h["superseded_by"] is None and h["superseded_on"] is None for h in early)
    block = c.post("/v1/evidence", json={"query": QUESTION, "as_of": "2024-06-30"}).json()
    assert "| record 1 | superseded by record 3 (2024-03-08)" in block["text"]
    block = c.post("/v1/evidence", json={"query": QUESTION, "as_of": "2024-02-28"}).json()
    assert "superseded" not in block["text"]


def test_mcp_hits_and_evidence_carry_visible_corrections_only(served) -> None:
    _c, url, _fake = served

    async def run() -> None:
        async with mcp_client(url) as client:
            found = await client.call_tool(
                "search_memory", {"query": QUESTION, "as_of": "2024-06-30"}
            )
            first = next(h for h in found.structured_content["hits"] if h["id"] == 1)
            assert (first["superseded_by"], first["superseded_on"]) == (3, "2024-03-08")
            early = await client.call_tool(
                "search_memory", {"query": QUESTION, "as_of": "2024-02-28"}
            )
            assert all("superseded_by" not in h for h in early.structured_content["hits"])
            block = await client.call_tool(
                "get_evidence", {"query": QUESTION, "as_of": "2024-06-30"}
            )
            assert "| record 1 | superseded by record 3 (2024-03-08)" in block.content[0].text

    anyio.run(run)


def test_asks_prompt_carries_visible_corrections_only(served) -> None:
    c, _url, fake = served
    fake.reply(json.dumps({"answer": "$12", "citations": [3]}))
    assert c.post("/v1/ask", json={"question": QUESTION, "as_of": "2024-06-30"}).status_code == 200
    fake.reply(json.dumps({"answer": "$10", "citations": [1]}))
    assert c.post("/v1/ask", json={"question": QUESTION, "as_of": "2024-02-28"}).status_code == 200
    later, earlier = (r.text() for r in fake.requests)
    assert "| record 1 | superseded by record 3 (2024-03-08)" in later
    assert "superseded" not in earlier and "record 1" in earlier
