"""Issue 11's time features over the server: filters on /v1/search, /v1/evidence and /v1/ask,
/v1/history, /v1/changes, /v1/corrections, supersede/archive/redact/undo, and the MCP
filters and ``memory_history`` tool; over a real uvicorn on both engines, with real keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.store import open_store

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, fast_client
from serving import live_server

WORDS = ["plan", "launch", "budget", "secret"]
DOCS = [
    {
        "text": "The launch plan: ship on Friday.",
        "author": "Ana",
        "date": "2024-03-01",
        "tags": ["launch"],
        "thread": "t1",
        "source": "slack:C1/1",
    },
    {
        "text": "The launch moves to Monday.",
        "author": "Bo",
        "date": "2024-04-02",
        "tags": ["launch", "urgent"],
        "thread": "t1",
        "source": "slack:C1/2",
    },
    {
        "text": "Budget plan approved.",
        "author": "Ana",
        "date": "2024-05-10",
        "tags": ["budget"],
        "source": "mail:7",
    },
    {
        "text": "Launch plan final: Tuesday.",
        "author": "Cy",
        "date": "2024-06-01",
        "tags": ["launch"],
        "source": "wiki:launch",
    },
]


@dataclass
class Served:
    client: httpx.Client
    state: ServerState
    ids: list[int]

    def states(self, scope: str = "default") -> dict[int, tuple[str, int | None, str]]:
        rows = self.state.store.get(scope, self.ids)
        return {i: (r.state, r.superseded_by, r.text) for i, r in rows.items()}


def fill(client: httpx.Client) -> list[int]:
    response = client.post("/v1/records/batch", json={"records": DOCS})
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["results"]]


@pytest.fixture
def served(engine_location: str) -> Iterator[Served]:  # noqa: F811
    state = ServerState(engine_location, embedder=KeywordEmbedder(WORDS))
    with live_server(create_app(state)) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield Served(c, state, fill(c))


def ids(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text
    body = response.json()
    rows = body["hits"] if "hits" in body else body["rows"]
    return [row["id"] for row in rows]


# -- filters ---------------------------------------------------------------------------------
def test_filters_narrow_search_and_evidence_before_ranking(served: Served) -> None:
    c, (first, second, budget, final) = served.client, served.ids

    def search(**filters: object) -> list[int]:
        return ids(c.post("/v1/search", json={"query": "launch plan", "k": 10, **filters}))

    assert set(search()) == {first, second, budget, final}
    assert set(search(author="Ana")) == {first, budget}
    assert search(tags=["urgent"]) == [second]
    assert set(search(tags=["launch", "urgent"], tags_mode="all")) == {second}
    assert set(search(tags=["budget", "urgent"])) == {second, budget}
    assert set(search(thread="t1")) == {first, second}
    assert set(search(source="slack:")) == {first, second}
    assert set(search(since="2024-04-02")) == {second, budget, final}
    assert set(search(since="2024-04-01", as_of="2024-05-31")) == {second, budget}
    # known_at bounds the ingest time: nothing was known in 2000; everything is by 2999.
    assert search(known_at="2000-01-01") == []
    assert set(search(known_at="2999-01-01", author="Cy")) == {final}
    # k slots go to eligible rows only: k=1 under a filter is the filter's best row.
    assert ids(c.post("/v1/search", json={"query": "launch", "k": 1, "author": "Cy"})) == [final]

    block = c.post("/v1/evidence", json={"query": "launch", "author": "Bo", "since": "2024-01-01"})
    assert ids(block) == [second]
    assert "Friday" not in block.json()["text"]


def test_ask_takes_the_filters(tmp_path) -> None:
    with FakeOpenAI() as fake:
        state = ServerState(
            str(tmp_path / "m.db"), embedder=KeywordEmbedder(WORDS), llm=fast_client(fake)
        )
        with live_server(create_app(state)) as url, httpx.Client(base_url=url, timeout=60) as c:
            _first, second, *_ = fill(c)
            fake.reply(json.dumps({"answer": "Monday", "citations": [second]}))
            answer = c.post("/v1/ask", json={"question": "when is the launch?", "author": "Bo"})
            assert answer.json()["evidence"] == [second], answer.text
            shown = fake.requests[0].body["messages"][1]["content"]
            assert "Monday" in shown and "Friday" not in shown


# -- history, changes, corrections -------------------------------------------------------------
def test_corrections_round_trip_attributed_to_the_caller(served: Served) -> None:
    c, (first, second, budget, final) = served.client, served.ids

    done = c.post(f"/v1/records/{first}/supersede", json={"by": second, "reason": "moved"})
    assert done.status_code == 200, done.text
    supersession = done.json()
    assert (supersession["operation"], supersession["record_ids"], supersession["by"]) == (
        "supersede",
        [first],
        second,
    )
    assert (supersession["reason"], supersession["actor"]) == ("moved", "local")
    assert c.get(f"/v1/records/{first}").json()["superseded_by"] == second

    entries = c.post("/v1/history", json={"record_id": second}).json()["entries"]
    by_id = {e["id"]: e for e in entries}
    assert [e["id"] for e in entries][:2] == [first, second]  # oldest event first
    assert "subject" in by_id[second]["reasons"]
    assert by_id[first]["superseded_by_record"]["id"] == second
    past = c.post("/v1/history", json={"record_id": first, "as_of": "2024-03-31"}).json()
    assert [e["id"] for e in past["entries"]] == [first]
    by_query = c.post("/v1/history", json={"query": "launch moves Monday"}).json()["entries"]
    assert second in {e["id"] for e in by_query}

    archived = c.post(f"/v1/records/{budget}/archive", json={"reason": "stale"}).json()
    assert archived["operation"] == "archive"
    assert budget not in ids(c.post("/v1/search", json={"query": "budget plan"}))

    window = c.post("/v1/changes", json={"since": "2024-04-01", "until": "2024-06-30"}).json()
    assert [r["id"] for r in window["entered"]] == [second, budget, final]
    assert [r["id"] for r in window["superseded"]] == [first]
    ranked = c.post(
        "/v1/changes", json={"since": "2024-01-01", "until": "2024-12-31", "query": "Tuesday"}
    ).json()
    assert ranked["entered"][0]["id"] == final

    erased = c.post(f"/v1/records/{final}/redact", json={"reason": "erasure request 42"})
    assert erased.status_code == 200, erased.text
    tombstone = c.get(f"/v1/records/{final}").json()
    assert tombstone["state"] == "redacted" and "Tuesday" not in json.dumps(tombstone)
    assert final not in ids(c.post("/v1/search", json={"query": "launch plan Tuesday"}))

    listed = c.get("/v1/corrections").json()["corrections"]
    assert [x["operation"] for x in listed] == ["supersede", "archive", "redact"]
    assert {x["actor"] for x in listed} == {"local"}

    undone = c.post(f"/v1/runs/{supersession['run_id']}/undo")
    assert undone.status_code == 200, undone.text
    assert undone.json()["restored_ids"] == [first]
    assert c.get(f"/v1/records/{first}").json()["superseded_by"] is None
    again = c.post(f"/v1/runs/{supersession['run_id']}/undo")
    assert again.status_code == 422 and "already undone" in again.json()["detail"]
    redaction = listed[2]["run_id"]
    refused = c.post(f"/v1/runs/{redaction}/undo")
    assert refused.status_code == 422 and "cannot be undone" in refused.json()["detail"]
    assert c.post("/v1/runs/9999/undo").status_code == 404


def test_refused_corrections_change_nothing(served: Served) -> None:
    c, (first, second, budget, _final) = served.client, served.ids
    c.post(f"/v1/records/{first}/supersede", json={"by": second, "reason": "moved"})
    c.post(f"/v1/records/{budget}/redact", json={"reason": "erasure"})
    before, corrections = served.states(), c.get("/v1/corrections").json()
    for path, body, status in [
        (f"/v1/records/{second}/supersede", {"by": first, "reason": "loop"}, 422),  # a cycle
        (f"/v1/records/{first}/supersede", {"by": second, "reason": "again"}, 422),
        (f"/v1/records/{first}/supersede", {"by": budget, "reason": "x"}, 422),  # redacted
        (f"/v1/records/{first}/supersede", {"by": 9999, "reason": "x"}, 404),
        ("/v1/records/9999/archive", {"reason": "x"}, 404),
        (f"/v1/records/{budget}/redact", {"reason": "twice"}, 422),
        (f"/v1/records/{budget}/archive", {"reason": "redacted"}, 422),
    ]:
        response = c.post(path, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    assert served.states() == before
    assert c.get("/v1/corrections").json() == corrections


BAD = [
    # (name, path, body, field)
    ("known_at not a date", "/v1/search", {"query": "a", "known_at": "soon"}, "known_at"),
    ("known_at a number", "/v1/evidence", {"query": "a", "known_at": 2024}, "known_at"),
    ("since not a date", "/v1/search", {"query": "a", "since": "2024-02-30"}, "since"),
    (
        "since after as_of",
        "/v1/search",
        {"query": "a", "as_of": "2024-01-01", "since": "2024-02-01"},
        "since",
    ),
    ("tags one string", "/v1/search", {"query": "a", "tags": "launch"}, "tags"),
    ("tag blank", "/v1/evidence", {"query": "a", "tags": ["  "]}, "tags"),
    ("tags_mode unknown", "/v1/search", {"query": "a", "tags_mode": "some"}, "tags_mode"),
    ("author blank", "/v1/search", {"query": "a", "author": " "}, "author"),
    ("thread with NUL", "/v1/search", {"query": "a", "thread": "t\u0000"}, "thread"),
    ("source empty", "/v1/ask", {"question": "a", "source": ""}, "source"),
    ("history without subject", "/v1/history", {}, "record_id"),
    ("history with both", "/v1/history", {"query": "a", "record_id": 1}, "record_id"),
    ("history id zero", "/v1/history", {"record_id": 0}, "record_id"),
    ("history limit zero", "/v1/history", {"query": "a", "limit": 0}, "limit"),
    ("history as_of bad", "/v1/history", {"query": "a", "as_of": "May"}, "as_of"),
    ("changes without until", "/v1/changes", {"since": "2024-01-01"}, "until"),
    ("changes backwards", "/v1/changes", {"since": "2024-02-01", "until": "2024-01-01"}, "until"),
    (
        "changes known_since alone",
        "/v1/changes",
        {"since": "2024-01-01", "until": "2024-02-01", "known_since": "2024-01-01"},
        "known_until",
    ),
    ("supersede by itself", "/v1/records/1/supersede", {"by": 1, "reason": "x"}, "by"),
    ("supersede by a string", "/v1/records/1/supersede", {"by": "2", "reason": "x"}, "by"),
    ("supersede without reason", "/v1/records/1/supersede", {"by": 2}, "reason"),
    ("reason blank", "/v1/records/1/archive", {"reason": "   "}, "reason"),
    ("reason with NUL", "/v1/records/1/redact", {"reason": "a\u0000"}, "reason"),
    ("actor from the body", "/v1/records/1/archive", {"reason": "x", "actor": "ceo"}, "actor"),
    ("record id zero", "/v1/records/0/archive", {"reason": "x"}, "record_id"),
    ("run id not a number", "/v1/runs/abc/undo", None, "run_id"),
]


@pytest.fixture
def served_sqlite(tmp_path) -> Iterator[Served]:
    state = ServerState(str(tmp_path / "m.db"), embedder=KeywordEmbedder(WORDS))
    with live_server(create_app(state)) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield Served(c, state, fill(c))


@pytest.mark.parametrize(("path", "body", "field"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_a_422_naming_the_field(
    served_sqlite: Served, path: str, body: dict[str, Any] | None, field: str
) -> None:
    served = served_sqlite
    before = served.states()
    response = served.client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == field, response.json()
    assert served.states() == before
    assert served.client.get("/v1/corrections").json() == {"corrections": []}


# -- keys: roles and scopes ------------------------------------------------------------------
@dataclass
class Tenants:
    url: str
    state: ServerState
    tokens: dict[str, str]
    a_ids: list[int]

    def client(self, name: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def key_id(self, name: str) -> str:
        return self.tokens[name].split("_")[1]

    def a_states(self) -> dict[int, tuple[str, int | None]]:
        rows = self.state.store.get("team-a", self.a_ids)
        return {i: (r.state, r.superseded_by) for i, r in rows.items()}


@pytest.fixture
def tenants(engine_location: str) -> Iterator[Tenants]:  # noqa: F811
    store = open_store(engine_location)
    tokens = {
        name: keys.create_key(store, scope=scope, role=role)[1]
        for name, scope, role in [
            ("a_read", "team-a", "read"),
            ("a_write", "team-a", "write"),
            ("a_admin", "team-a", "admin"),
            ("b_admin", "team-b", "admin"),
        ]
    }
    state = ServerState(store, embedder=KeywordEmbedder(WORDS))
    with live_server(create_app(state)) as url:
        tenants = Tenants(url, state, tokens, [])
        with tenants.client("a_write") as a:
            tenants.a_ids = fill(a)
        yield tenants


def test_corrections_need_an_admin_key(tenants: Tenants) -> None:
    first, second, *_ = tenants.a_ids
    before = tenants.a_states()
    for name in ("a_read", "a_write"):
        with tenants.client(name) as c:
            for path, body in [
                (f"/v1/records/{first}/supersede", {"by": second, "reason": "x"}),
                (f"/v1/records/{first}/archive", {"reason": "x"}),
                (f"/v1/records/{first}/redact", {"reason": "x"}),
                ("/v1/runs/1/undo", None),
            ]:
                refused = c.post(path, json=body)
                assert refused.status_code == 403, (name, path, refused.text)
                assert "admin" in refused.json()["detail"]
            # Reading the timeline is for every key of the scope.
            assert c.post("/v1/history", json={"record_id": first}).status_code == 200
            assert c.get("/v1/corrections").json() == {"corrections": []}
    assert tenants.a_states() == before
    with tenants.client("a_admin") as admin:
        done = admin.post(f"/v1/records/{first}/supersede", json={"by": second, "reason": "x"})
        assert done.status_code == 200, done.text
        assert done.json()["actor"] == tenants.key_id("a_admin")  # the key, not the body
    assert tenants.a_states()[first] == ("active", second)


def test_a_key_for_one_scope_cannot_touch_another_scopes_records(tenants: Tenants) -> None:
    first, second, budget, _final = tenants.a_ids
    with tenants.client("a_admin") as a:
        run = a.post(f"/v1/records/{budget}/archive", json={"reason": "a's own"}).json()["run_id"]
    before = tenants.a_states()
    with tenants.client("b_admin") as b:
        mine = b.post("/v1/records", json={"text": "team b plan", "date": "2024-05-01"})
        b_id = mine.json()["id"]
        for path, body in [
            (f"/v1/records/{first}/supersede", {"by": second, "reason": "x"}),
            (f"/v1/records/{b_id}/supersede", {"by": first, "reason": "x"}),
            (f"/v1/records/{first}/archive", {"reason": "x"}),
            (f"/v1/records/{first}/redact", {"reason": "x"}),
            ("/v1/history", {"record_id": first}),
            (f"/v1/runs/{run}/undo", None),
        ]:
            response = b.post(path, json=body)
            assert response.status_code == 404, (path, response.text)
            assert "team-a" not in response.text
        assert b.get("/v1/corrections").json() == {"corrections": []}
        window = b.post("/v1/changes", json={"since": "2024-01-01", "until": "2024-12-31"})
        assert [r["id"] for r in window.json()["entered"]] == [b_id]
        assert window.json()["archived"] == []
        history = b.post("/v1/history", json={"query": "launch plan budget"}).json()["entries"]
        assert {e["id"] for e in history} <= {b_id}
    assert tenants.a_states() == before
    with tenants.client("a_read") as a:
        listed = a.get("/v1/corrections").json()["corrections"]
        assert [x["run_id"] for x in listed] == [run]


# -- MCP -----------------------------------------------------------------------------------
def mcp_client(url: str, token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(
        streamable_http_client(
            f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)
        )
    )


def test_mcp_filters_and_memory_history(served: Served) -> None:
    first, second, _budget, final = served.ids
    served.client.post(f"/v1/records/{first}/supersede", json={"by": second, "reason": "moved"})
    url = str(served.client.base_url).rstrip("/")

    async def main() -> None:
        async with mcp_client(url) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"supersede", "archive", "redact", "undo"}.isdisjoint(
                name.split("_")[0] for name in tools
            )
            schema = tools["search_memory"].input_schema["properties"]
            wanted = {"known_at", "since", "author", "tags", "tags_mode", "thread", "source"}
            assert wanted <= set(schema)
            assert "changed" in tools["memory_history"].description
            assert tools["memory_history"].annotations.read_only_hint

            found = await client.call_tool(
                "search_memory", {"query": "launch plan", "author": "Cy", "since": "2024-01-01"}
            )
            assert [h["id"] for h in found.structured_content["hits"]] == [final]
            none = await client.call_tool(
                "search_memory", {"query": "launch", "known_at": "2000-01-01"}
            )
            assert none.structured_content == {"hits": []}
            block = await client.call_tool(
                "get_evidence", {"query": "launch", "thread": "t1", "tags": ["urgent"]}
            )
            assert f"record {second}" in block.content[0].text
            assert f"record {first}" not in block.content[0].text

            for mode, expected in (("all", [second]), ("any", sorted([first, second, final]))):
                tagged = await client.call_tool(
                    "search_memory",
                    {"query": "launch", "tags": ["launch", "urgent"], "tags_mode": mode},
                )
                assert sorted(h["id"] for h in tagged.structured_content["hits"]) == expected
            both = {"query": "launch", "tags": ["launch", "urgent"], "tags_mode": "all"}
            block = await client.call_tool("get_evidence", both)
            assert f"record {second}" in block.content[0].text
            assert f"record {final}" not in block.content[0].text

            timeline = await client.call_tool("memory_history", {"record_id": second})
            assert not timeline.is_error, timeline.content
            entries = timeline.structured_content["entries"]
            assert [e["id"] for e in entries][:2] == [first, second]
            assert entries[0]["superseded_by"] == second and "reasons" in entries[0]

            for name, arguments, words in (
                ("memory_history", {}, "query or a record_id"),
                ("memory_history", {"record_id": 9999}, "9999"),
                ("search_memory", {"query": "a", "since": "2024-02-30"}, "since"),
                ("get_evidence", {"query": "a", "tags": "launch"}, "tags"),
                ("search_memory", {"query": "a", "tags": ["x"], "tags_mode": "some"}, "tags_mode"),
            ):
                failed = await client.call_tool(name, arguments)
                assert failed.is_error, (name, arguments)
                assert words in failed.content[0].text, failed.content[0].text

    anyio.run(main)


def test_mcp_history_stays_in_the_keys_scope(tenants: Tenants) -> None:
    first = tenants.a_ids[0]

    async def main() -> None:
        async with mcp_client(tenants.url, tenants.tokens["b_admin"]) as b:
            guessed = await b.call_tool("memory_history", {"record_id": first})
            assert guessed.is_error and "team-b" in guessed.content[0].text
            found = await b.call_tool("memory_history", {"query": "launch plan"})
            assert found.structured_content == {"entries": []}

    anyio.run(main)


def test_undo_after_a_later_change_is_a_409_and_changes_nothing(served: Served) -> None:
    c, (first, second, *_rest) = served.client, served.ids
    run = c.post(f"/v1/records/{first}/supersede", json={"by": second, "reason": "moved"})
    c.post(f"/v1/records/{first}/archive", json={"reason": "later"})
    before = served.states()
    conflict = c.post(f"/v1/runs/{run.json()['run_id']}/undo")
    assert conflict.status_code == 409, conflict.text
    assert "changed again" in conflict.json()["detail"]
    assert served.states() == before
