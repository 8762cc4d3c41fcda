"""What only the HTTP clients do, over a real uvicorn on loopback: keys and roles, the
idempotency of retried writes (the server's ``Idempotency-Key``), retries, timeouts, the
export/ingest streams, and the refusal of what HTTP cannot carry. The ``Memory`` API itself
is checked against ``Memory`` in tests/test_client_conformance.py."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mempp import AsyncClient, Client, Forbidden, Unauthorized
from mempp.client.problems import IdempotencyConflict, ServerError, ServerUnavailable, error_from
from mempp.client.transport import RetryPolicy
from mempp.client.wire import add_batch
from mempp.errors import InvalidInput
from mempp.llm import LLMClient
from mempp.llm.graph import GraphOptions
from mempp.records import Document
from mempp.server.app import create_app
from mempp.server.keys import create_key
from mempp.server.state import ServerState
from mempp.settings import Settings
from mempp.store.base import StateConflict

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]


@dataclass
class Served:
    url: str
    state: ServerState

    def stored(self, scope: str = "default") -> int:
        return self.state.store.count(scope, active_only=False)


def serve(location: str) -> Iterator[Served]:
    state = ServerState(location, embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url:
        yield Served(url, state)


@pytest.fixture
def served(engine_location: str) -> Iterator[Served]:  # noqa: F811
    yield from serve(engine_location)


@pytest.fixture
def served_sqlite(tmp_path: Path) -> Iterator[Served]:
    yield from serve(str(tmp_path / "m.db"))


# -- keys --------------------------------------------------------------------------------------
def test_keys_from_the_constructor_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = ServerState(str(tmp_path / "m.db"), embedder=KeywordEmbedder(KEYWORDS))
    _, reader = create_key(state.store, scope="team-a", role="read")
    _, writer = create_key(state.store, scope="team-a", role="write")
    with live_server(create_app(state)) as url:
        with Client(url) as anonymous, pytest.raises(Unauthorized, match="API key is required"):
            anonymous.search("launch")
        unknown = "mempp_000000000000_" + "x" * 43
        with Client(url, api_key=unknown) as wrong, pytest.raises(Unauthorized, match="revoked"):
            wrong.info()
        with Client(url, api_key=writer) as w:
            assert w.add("launch alpha", author="Ana").id == 1
            assert w.scope == "team-a"
            with pytest.raises(Forbidden, match="role is write; this needs admin"):
                w.archive(1, reason="no")
        monkeypatch.setenv("MEMPP_API_KEY", reader)
        with Client(url) as r:
            assert [h.id for h in r.search("launch")] == [1]
            assert r.info().role == "read"
            with pytest.raises(Forbidden):
                r.add("more")
        assert state.store.count("team-a") == 1


# -- idempotency (the server's side) -----------------------------------------------------------
def test_a_repeated_key_replays_the_first_answer(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=60) as c:
        headers = {"Idempotency-Key": "add-1"}
        body = {"text": "The launch is on Friday.", "author": "Ana"}
        first = c.post("/v1/records", json=body, headers=headers)
        again = c.post("/v1/records", json=body, headers=headers)
        assert first.json() == again.json() == {"id": 1, "skipped": None, "duplicate_of": None}
        assert "idempotent-replayed" not in first.headers
        assert again.headers["idempotent-replayed"] == "true"
        assert served.stored() == 1
        other = c.post("/v1/records", json={**body, "text": "Another."}, headers=headers)
        assert other.status_code == 409
        assert other.json()["field"] == "Idempotency-Key"
        elsewhere = c.post("/v1/records/batch", json={"records": [body]}, headers=headers)
        assert elsewhere.status_code == 409  # the same key on another route
        fresh = c.post("/v1/records", json={"text": "Another."}, headers={"Idempotency-Key": "2"})
        assert fresh.json()["id"] == 2
        # A failure is not kept: the retry runs again (and may succeed).
        bad = {"Idempotency-Key": "arch-1"}
        missing = c.post("/v1/records/9/archive", json={"reason": "x"}, headers=bad)
        assert missing.status_code == 404
        c.post("/v1/records", json={"text": "nine"})
        assert c.post("/v1/records/3/archive", json={"reason": "x"}, headers=bad).status_code == 200
        for key in ("", "a b", b"\xe9", "x" * 256):
            refused = c.post("/v1/records", json=body, headers={"Idempotency-Key": key})
            assert refused.status_code == 422, key
        upload = c.post(
            "/v1/ingest",
            content=b'{"text": "x"}\n',
            headers={"Idempotency-Key": "up-1", "Content-Type": "application/x-ndjson"},
        )
        assert upload.status_code == 422 and "not honoured" in upload.json()["detail"]
    assert served.stored() == 3


def test_keys_belong_to_the_caller(tmp_path: Path) -> None:
    state = ServerState(str(tmp_path / "m.db"), embedder=KeywordEmbedder(KEYWORDS))
    _, a = create_key(state.store, scope="a", role="write")
    _, b = create_key(state.store, scope="b", role="write")
    with live_server(create_app(state)) as url, httpx.Client(base_url=url) as c:
        for token in (a, b):
            response = c.post(
                "/v1/records",
                json={"text": "same key, two tenants"},
                headers={"Idempotency-Key": "k", "Authorization": f"Bearer {token}"},
            )
            assert response.json()["id"] is not None
            assert "idempotent-replayed" not in response.headers
        assert (state.store.count("a"), state.store.count("b")) == (1, 1)


def test_concurrent_retries_with_one_key_store_once(served: Served) -> None:
    body = {"records": [{"text": f"launch plan {n}"} for n in range(200)]}
    answers: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(base_url=served.url, timeout=60) as c:
            answers.append(c.post("/v1/records/batch", json=body, headers={"Idempotency-Key": "b"}))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [200] * 4
    assert len({a.text for a in answers}) == 1
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 3
    assert served.stored() == 200


# -- retries -----------------------------------------------------------------------------------
class LoseFirstAnswer(httpx.BaseTransport):
    """Sends each request to the real server, and loses the first ``lose`` answers on the way
    back, as a proxy timing out would: the server did the work, the client saw a timeout."""

    def __init__(self, lose: int = 1, *, status: int | None = None) -> None:
        self.inner = httpx.HTTPTransport()
        self.lose = lose
        self.status = status
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.sent.append(request)
        response = self.inner.handle_request(request)
        if self.lose > 0:
            self.lose -= 1
            response.read()
            response.close()
            if self.status is not None:  # answered with a retryable status instead
                return httpx.Response(self.status, headers={"Retry-After": "0"})
            raise httpx.ReadTimeout("lost on the way back", request=request)
        return response


def test_a_write_whose_answer_was_lost_is_stored_once(served: Served) -> None:
    transport = LoseFirstAnswer()
    sleeps: list[float] = []
    with Client(served.url, transport=transport, sleep=sleeps.append) as client:
        result = client.add("The launch is on Friday.", author="Ana", date="2024-03-01")
        assert result.id == 1 and result.skipped is None  # the first answer, replayed
        many = client.add_many(["alpha", "beta"])
    assert [r.id for r in many] == [2, 3]
    keys = [r.headers["idempotency-key"] for r in transport.sent]
    assert len(keys) == 3 and keys[0] == keys[1] != keys[2]
    assert sleeps == [0.2]
    assert served.stored() == 3


def test_reads_retry_on_503_and_give_up_after_the_policy(served_sqlite: Served) -> None:
    transport = LoseFirstAnswer(2, status=503)
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=3, backoff_s=0.5)
    with Client(served_sqlite.url, transport=transport, retries=policy, sleep=sleeps.append) as c:
        assert c.search("launch") == []
    assert len(transport.sent) == 3 and sleeps == [0.0, 0.0]  # Retry-After: 0 honoured
    gone = Client("http://127.0.0.1:9", retries=2, sleep=sleeps.append, timeout=2)
    with gone, pytest.raises(ServerUnavailable, match=r"GET http://127.0.0.1:9/v1/info .*3 times"):
        gone.info()
    once = Client(served_sqlite.url, transport=LoseFirstAnswer(1), retries=0)
    with once, pytest.raises(ServerUnavailable, match="once"):
        once.search("launch")


def test_an_upload_is_sent_once(served_sqlite: Served) -> None:
    transport = LoseFirstAnswer()
    client = Client(served_sqlite.url, transport=transport)
    with client, pytest.raises(ServerUnavailable):
        client.ingest(b'{"text": "alpha"}\n')
    assert len(transport.sent) == 1


def test_a_timeout_is_a_clear_error(served_sqlite: Served) -> None:
    class Slow(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("timed out", request=request)

    client = Client(served_sqlite.url, transport=Slow(), sleep=lambda s: None)
    with client, pytest.raises(ServerUnavailable, match=r"3 times.*timed out"):
        client.search("launch")
    for bad in (0, -1, "10"):
        with pytest.raises(InvalidInput) as exc:
            Client(served_sqlite.url, timeout=bad)  # type: ignore[arg-type]
        assert exc.value.field == "timeout"


# -- streams -----------------------------------------------------------------------------------
def test_export_then_ingest_round_trip(tmp_path: Path, engine_location: str) -> None:  # noqa: F811
    source = ServerState(engine_location, embedder=KeywordEmbedder(KEYWORDS))
    target = ServerState(str(tmp_path / "target.db"), embedder=KeywordEmbedder(KEYWORDS))
    with (
        live_server(create_app(source)) as a,
        live_server(create_app(target)) as b,
        Client(a) as one,
        Client(b) as two,
    ):
        one.add_many(
            [
                {"text": "alpha plan", "author": "Ana", "date": "2024-03-01T09:30:00+00:00"},
                {"text": "beta launch", "tags": ["x"], "metadata": {"k": 1}},
            ]
        )
        one.archive(2, reason="old")
        out = io.BytesIO()
        assert one.export(out) == 2
        lines = out.getvalue().splitlines()
        assert [json.loads(line)["state"] for line in lines] == ["active", "archived"]
        path = tmp_path / "export.jsonl"
        path.write_bytes(out.getvalue() + b"not json\n")
        report = two.ingest(path)
        assert (report.added, report.failed, report.ids) == (2, 1, [1, 2])
        assert report.failures == [(3, report.failures[0][1])]
        assert "invalid JSON" in report.failures[0][1]
        again = two.ingest(io.BytesIO(out.getvalue()))
        assert (again.added, again.skipped_by_reason) == (0, {"duplicate": 2})
        copied = two.get(1)
        assert (copied.text, copied.date, copied.author) == (
            "alpha plan",
            "2024-03-01T09:30:00+00:00",
            "Ana",
        )
        assert two.get(2).metadata == {"k": 1}


def test_async_client_streams(served_sqlite: Served) -> None:
    async def run() -> None:
        async with AsyncClient(served_sqlite.url) as client:
            report = await client.ingest(iter([b'{"text": "alpha"}\n{"text": ', b'"beta"}\n']))
            assert report.ids == [1, 2]
            assert [r.text async for r in client.records()] == ["alpha", "beta"]
            assert await client.scope() == "default"
            results = await asyncio.gather(*(client.add(f"plan {n}") for n in range(8)))
            assert sorted(r.id for r in results) == list(range(3, 11))

    asyncio.run(run())
    assert served_sqlite.stored() == 10


# -- what HTTP cannot carry is refused, not dropped --------------------------------------------
def test_what_http_cannot_carry_is_refused(served_sqlite: Served) -> None:
    with Client(served_sqlite.url) as client:
        client.add("alpha launch")
        custom = Settings(w_vec=3.0)
        llm = LLMClient(base_url="http://127.0.0.1:9", model="m")
        refusals = [
            (lambda: client.search("launch", settings=custom), "settings"),
            (lambda: client.archive(1, reason="x", actor="someone"), "actor"),
            (lambda: client.ask("when?", llm=llm), "llm"),
            (lambda: client.evidence("launch", graph=GraphOptions(llm=llm)), "graph"),
        ]
        for call, name in refusals:
            with pytest.raises(InvalidInput) as exc:
                call()
            assert exc.value.field == name
        assert client.get(1).state == "active"  # the refused archive did nothing
        for bad in ("ftp://x", ""):
            with pytest.raises(InvalidInput):
                Client(bad or "nonsense")


def test_server_fields_are_named_as_memory_names_them() -> None:
    call = add_batch([Document.create("x")], first=1000)
    assert call.field_of is not None
    assert call.field_of("records.3.date") == "items[1003].date"
    assert call.field_of("records") == "records"
    problem = {"content-type": "application/problem+json"}
    used = {
        "status": 409,
        "detail": "Idempotency-Key: was already used",
        "field": "Idempotency-Key",
    }
    assert isinstance(
        error_from(httpx.Response(409, json=used, headers=problem)), IdempotencyConflict
    )
    changed = {"status": 409, "detail": "row 3 changed"}
    assert type(error_from(httpx.Response(409, json=changed, headers=problem))) is StateConflict
    odd = error_from(httpx.Response(418, text="<html>teapot</html>"))
    assert isinstance(odd, ServerError) and "418: <html>teapot</html>" in str(odd)
