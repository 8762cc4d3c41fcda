"""The /v1 API over a real uvicorn on a loopback port, driven by httpx, on both engines."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, fast_client
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]


@dataclass
class Served:
    client: httpx.Client
    state: ServerState

    def stored(self, scope: str = "default") -> int:
        return self.state.store.count(scope, active_only=False)


def serve(location: str) -> Iterator[Served]:
    state = ServerState(location, embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield Served(client, state)


@pytest.fixture
def served(engine_location: str) -> Iterator[Served]:  # noqa: F811
    yield from serve(engine_location)


@pytest.fixture
def served_sqlite(tmp_path) -> Iterator[Served]:
    """For what the edge decides before any store is touched (validation, limits)."""
    yield from serve(str(tmp_path / "m.db"))


def add(client: httpx.Client, text: str, **fields: object) -> int:
    response = client.post("/v1/records", json={"text": text, **fields})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def test_health_and_readiness(served: Served) -> None:
    assert served.client.get("/healthz").json() == {"status": "ok"}
    deadline = time.monotonic() + 60
    while (ready := served.client.get("/readyz")).status_code == 503:
        assert ready.headers["content-type"] == "application/problem+json"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert ready.json() == {"status": "ready"}


def test_add_get_search_evidence_round_trip(served: Served) -> None:
    c = served.client
    first = add(
        c,
        "The launch plan: ship on Friday.",
        author="Ana",
        date="2024-03-01",
        tags=["launch"],
        thread="t1",
        source="slack://1",
    )
    second = add(
        c,
        "The launch moves to Monday.",
        author="Bo",
        date="2024-04-02",
        thread="t1",
        metadata={"channel": "C42", "ts": "1712000000.1"},
    )
    assert c.post("/v1/records", json={"text": "   "}).json() == {
        "id": None,
        "skipped": "empty",
        "duplicate_of": None,
    }
    again = c.post(  # a repeat is the same author, text and date
        "/v1/records",
        json={"text": "The launch moves to Monday.", "author": "Bo", "date": "2024-04-02"},
    )
    assert again.json() == {"id": None, "skipped": "duplicate", "duplicate_of": second}

    record = c.get(f"/v1/records/{first}").json()
    assert record["text"] == "The launch plan: ship on Friday."
    assert (record["author"], record["date"], record["tags"], record["thread"]) == (
        "Ana",
        "2024-03-01",
        ["launch"],
        "t1",
    )
    both = c.get("/v1/records", params={"id": [second, first, second]}).json()
    assert [r["id"] for r in both] == [second, first]
    assert both[0]["metadata"] == {"channel": "C42", "ts": "1712000000.1"}

    hits = c.post("/v1/search", json={"query": "launch plan", "k": 5}).json()["hits"]
    assert {h["id"] for h in hits} == {first, second}
    assert all({"rank", "score", "legs", "reserved", "date", "author"} <= set(h) for h in hits)
    past = c.post("/v1/search", json={"query": "launch plan", "as_of": "2024-03-31"}).json()
    assert [h["id"] for h in past["hits"]] == [first]  # the later revision stays out

    block = c.post("/v1/evidence", json={"query": "launch", "as_of": "2024-03-31"}).json()
    assert block["text"].startswith(f"[1] 2024-03-01 | Ana | thread t1 | record {first}")
    assert [row["id"] for row in block["rows"]] == [first]
    cut = c.post("/v1/evidence", json={"query": "launch", "budget": 40, "pack": True}).json()
    assert len(cut["text"]) <= 40


def test_batch_add_reports_each_item(served: Served) -> None:
    bad = served.client.post(
        "/v1/records/batch", json={"records": [{"text": "alpha"}, {"text": "b", "date": "x"}]}
    )
    assert bad.status_code == 422 and bad.json()["field"] == "records.1.date"
    assert served.stored() == 0
    response = served.client.post(
        "/v1/records/batch",
        json={
            "records": [
                {"text": "alpha one"},
                {"text": ""},
                {"text": "alpha one"},
                {"text": "beta two", "date": "2024-01-01T10:00:00Z"},
            ]
        },
    )
    results = response.json()["results"]
    assert [r["skipped"] for r in results] == [None, "empty", "duplicate", None]
    assert served.stored() == 2


def test_missing_record_is_404_and_names_it(served: Served) -> None:
    add(served.client, "alpha")
    response = served.client.get("/v1/records/999")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert "999" in response.json()["detail"]
    assert served.client.get("/v1/records", params={"id": [1, 999]}).status_code == 404


def test_info_counts_this_scope(served: Served) -> None:
    add(served.client, "alpha")
    info = served.client.get("/v1/info").json()
    assert (info["scope"], info["records"], info["active"], info["role"]) == (
        "default",
        1,
        1,
        "admin",
    )
    assert info["encoder"]["dim"] == len(KEYWORDS) + 1


def test_export_streams_jsonl_that_ingest_reads_back(served: Served) -> None:
    c = served.client
    for i in range(25):
        add(c, f"alpha record {i}", author="Ana", date=f"2024-01-{i + 1:02d}", tags=["x"])
    with c.stream("GET", "/v1/export") as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert [line["text"] for line in lines] == [f"alpha record {i}" for i in range(25)]

    # Read back into the same scope, every line is a duplicate of an active record.
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    summary = c.post(
        "/v1/ingest", content=body, headers={"content-type": "application/x-ndjson"}
    ).json()
    assert (summary["added"], summary["skipped"], summary["failed"]) == (0, 25, 0)


def test_ingest_keeps_good_lines_and_reports_bad_ones(served: Served) -> None:
    body = (
        b'{"text": "alpha good", "date": "2024-01-01"}\n'
        b"not json\n"
        b"\n"
        b'{"text": "beta", "date": "2024-02-30"}\n'
        b'["a list"]\n'
        b"\xff\xfe not utf-8\n"
        b'{"text": "gamma good"}'  # no final newline
    )
    response = served.client.post(
        "/v1/ingest", content=body, headers={"content-type": "application/x-ndjson"}
    )
    summary = response.json()
    assert response.status_code == 200
    assert summary["added"] == 2 and summary["failed"] == 4
    assert [f["line"] for f in summary["failures"]] == [2, 4, 5, 6]
    assert "2024-02-30" in summary["failures"][1]["reason"]
    assert served.stored() == 2


def test_ingest_streams_many_batches(served: Served) -> None:
    lines = [json.dumps({"text": f"alpha {i}", "author": "A"}) for i in range(300)]

    def chunks() -> Iterator[bytes]:  # sent chunked, lines split across chunks
        data = ("\n".join(lines) + "\n").encode()
        for start in range(0, len(data), 777):
            yield data[start : start + 777]

    summary = served.client.post(
        "/v1/ingest", content=chunks(), headers={"content-type": "application/x-ndjson"}
    ).json()
    assert summary["added"] == 300 and summary["ids"] == sorted(summary["ids"])
    assert served.stored() == 300


def test_ask_without_llm_is_a_clear_503(served_sqlite: Served) -> None:
    served = served_sqlite
    response = served.client.post("/v1/ask", json={"question": "when is the launch?"})
    assert response.status_code == 503
    assert "--llm-base-url" in response.json()["detail"]


def test_ask_with_an_llm_cites_records(tmp_path) -> None:
    with FakeOpenAI() as fake:
        llm = fast_client(fake)  # one retry, no waiting
        state = ServerState(str(tmp_path / "m.db"), embedder=KeywordEmbedder(KEYWORDS), llm=llm)
        with live_server(create_app(state)) as url, httpx.Client(base_url=url) as c:
            first = add(c, "The launch is on Friday.", author="Ana", date="2024-03-01")
            fake.reply(json.dumps({"answer": "Friday", "citations": [first, 777]}))
            answer = c.post("/v1/ask", json={"question": "when is the launch?"}).json()
            assert answer == {
                "answer": "Friday",
                "citations": [first],
                "evidence": [first],
                "citations_from_text": False,
                "dropped_citations": [777],
                "as_of": None,
            }
            assert "The launch is on Friday." in fake.requests[0].body["messages"][1]["content"]
            fake.error(500)
            fake.error(500)
            failed = c.post("/v1/ask", json={"question": "when is the launch?"})
            assert failed.status_code == 502
            assert failed.headers["content-type"] == "application/problem+json"


# -- bad input: a 4xx problem naming the field, nothing stored ------------------------------

JSON = {"content-type": "application/json"}
BAD_INPUT = [
    # (name, method, path, json body or raw bytes, status, field)
    ("malformed JSON", "POST", "/v1/records", b'{"text": "a",', 400, "body"),
    ("body not an object", "POST", "/v1/records", b'["text"]', 422, "body"),
    ("empty body", "POST", "/v1/records", b"", 422, "body"),
    ("text of the wrong type", "POST", "/v1/records", {"text": 5}, 422, "text"),
    ("text missing", "POST", "/v1/records", {"author": "Ana"}, 422, "text"),
    ("author of the wrong type", "POST", "/v1/records", {"text": "a", "author": 1}, 422, "author"),
    ("tags not a list", "POST", "/v1/records", {"text": "a", "tags": "x"}, 422, "tags"),
    ("tag not a string", "POST", "/v1/records", {"text": "a", "tags": ["x", 2]}, 422, "tags.1"),
    ("unknown field", "POST", "/v1/records", {"text": "a", "colour": "red"}, 422, "colour"),
    (
        "date that does not exist",
        "POST",
        "/v1/records",
        {"text": "a", "date": "2024-02-30"},
        422,
        "date",
    ),
    (
        "date that does not parse",
        "POST",
        "/v1/records",
        {"text": "a", "date": "next friday"},
        422,
        "date",
    ),
    ("date of the wrong type", "POST", "/v1/records", {"text": "a", "date": 20240101}, 422, "date"),
    (
        "one bad item of a batch",
        "POST",
        "/v1/records/batch",
        {"records": [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d", "date": "x"}]},
        422,
        "records.3.date",
    ),
    ("empty batch", "POST", "/v1/records/batch", {"records": []}, 422, "records"),
    ("k zero", "POST", "/v1/search", {"query": "alpha", "k": 0}, 422, "k"),
    ("k too large", "POST", "/v1/search", {"query": "alpha", "k": 100_000}, 422, "k"),
    ("k a string", "POST", "/v1/search", {"query": "alpha", "k": "5"}, 422, "k"),
    ("k a float", "POST", "/v1/search", {"query": "alpha", "k": 2.5}, 422, "k"),
    (
        "as_of that does not parse",
        "POST",
        "/v1/search",
        {"query": "a", "as_of": "yesterday"},
        422,
        "as_of",
    ),
    ("as_of month 13", "POST", "/v1/evidence", {"query": "a", "as_of": "2024-13-01"}, 422, "as_of"),
    ("query missing", "POST", "/v1/search", {"k": 3}, 422, "query"),
    ("query empty", "POST", "/v1/search", {"query": ""}, 422, "query"),
    ("query too long", "POST", "/v1/search", {"query": "a" * 10_001}, 422, "query"),
    ("unknown preset", "POST", "/v1/search", {"query": "a", "preset": "fast"}, 422, "preset"),
    ("budget zero", "POST", "/v1/evidence", {"query": "a", "budget": 0}, 422, "budget"),
    ("unknown style", "POST", "/v1/evidence", {"query": "a", "style": "fancy"}, 422, "style"),
    (
        "pack cap above threshold",
        "POST",
        "/v1/evidence",
        {"query": "a", "pack": {"cap": 5000, "threshold": 100}},
        422,
        None,
    ),
    ("record id not a number", "GET", "/v1/records/abc", None, 422, "record_id"),
    ("record id zero", "GET", "/v1/records/0", None, 422, "record_id"),
    ("record id too large", "GET", f"/v1/records/{2**64}", None, 422, "record_id"),
    ("no ids", "GET", "/v1/records", None, 422, "id"),
    ("text with NUL", "POST", "/v1/records", {"text": "a\u0000b"}, 422, None),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_is_a_problem_naming_the_field(
    served_sqlite: Served, method: str, path: str, body: object, status: int, field: str | None
) -> None:
    served = served_sqlite
    add(served.client, "alpha before")
    before = served.stored()
    if isinstance(body, bytes):
        response = served.client.request(method, path, content=body, headers=JSON)
    else:
        response = served.client.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]
    if field is not None:
        assert problem["field"] == field, problem
    assert "Traceback" not in response.text
    assert served.stored() == before


def test_oversized_bodies_are_413_and_store_nothing(served_sqlite: Served) -> None:
    served = served_sqlite
    before = served.stored()
    big = json.dumps({"text": "a" * (2 << 20)}).encode()
    declared = served.client.post("/v1/records", content=big, headers=JSON)
    assert declared.status_code == 413 and declared.json()["field"] == "body"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"text": "'
        for _ in range(40):
            yield b"a" * 65536
        yield b'"}'

    streamed = served.client.post("/v1/records", content=chunked(), headers=JSON)
    assert streamed.status_code == 413
    assert served.stored() == before


def test_ingest_refuses_other_media_types(served_sqlite: Served) -> None:
    served = served_sqlite
    response = served.client.post(
        "/v1/ingest", content=b'{"text": "a"}\n', headers={"content-type": "image/png"}
    )
    assert response.status_code == 415 and response.json()["field"] == "Content-Type"
    assert served.stored() == 0


def test_unknown_route_and_method_are_problems(served_sqlite: Served) -> None:
    served = served_sqlite
    missing = served.client.get("/v1/nothing")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    wrong = served.client.delete("/v1/records/1")
    assert wrong.status_code == 405
    assert wrong.headers["content-type"] == "application/problem+json"


def test_non_loopback_host_without_keys_is_refused(tmp_path) -> None:
    from mempp.errors import InvalidInput

    with pytest.raises(InvalidInput, match="non-loopback"):
        ServerState(str(tmp_path / "m.db"), host="0.0.0.0")
    state = ServerState(str(tmp_path / "m.db"), host="::1")
    assert not state.keys_required
    state.close()
