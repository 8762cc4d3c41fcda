"""What a request leaves for the operator, over a real uvicorn on both engines: Prometheus
metrics (requests by route and status, each search stage, records written and held, the
pool), OpenTelemetry spans (one per request, one per stage, real parents), request ids and
JSON log lines that carry them and never a query's text."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.logs import JsonFormatter, RequestIdFilter
from mempp.server.metrics import ENV_TOKEN
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

pytest.importorskip("prometheus_client")
sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

KEYWORDS = ["launch", "budget", "plan", "friday"]
SECRET_QUESTION = "when is the launch planned"


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of a Prometheus text page, or None when absent."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
        if found == labels:
            return float(match.group(4))
    return None


@pytest.fixture
def traced(engine_location: str) -> Iterator[tuple[httpx.Client, InMemorySpanExporter]]:  # noqa: F811
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    state = ServerState(engine_location, embedder=KeywordEmbedder(KEYWORDS))
    app = create_app(state, tracer_provider=provider)
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, exporter


def test_metrics_count_requests_stages_and_records(
    traced: tuple[httpx.Client, InMemorySpanExporter],
    engine_location: str,  # noqa: F811
) -> None:
    client, _ = traced
    docs = [
        {"text": "The launch plan: ship on Friday.", "author": "Ana", "date": "2024-03-01"},
        {"text": "Budget for the launch is set.", "author": "Bo", "date": "2024-03-02"},
    ]
    assert client.post("/v1/records/batch", json={"records": docs}).status_code == 200
    assert client.post("/v1/search", json={"query": SECRET_QUESTION}).status_code == 200
    assert client.post("/v1/evidence", json={"query": SECRET_QUESTION}).status_code == 200
    assert client.get("/v1/records/999").status_code == 404
    page = client.get("/metrics")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    text = page.text
    count = "http_server_request_duration_seconds_count"
    for route, method, status in (
        ("/v1/search", "POST", "200"),
        ("/v1/evidence", "POST", "200"),
        ("/v1/records/batch", "POST", "200"),
        ("/v1/records/{record_id}", "GET", "404"),
    ):
        labels = {"http_request_method": method, "http_route": route}
        assert sample(text, count, **labels, http_response_status_code=status) == 1.0, route
    for stage in ("lexical", "tag", "vector", "fusion", "records"):
        assert sample(text, "mempp_search_stage_duration_seconds_count", stage=stage) == 2.0
    # Evidence asks the search's question again: its vector is held, not encoded twice.
    assert sample(text, "mempp_search_stage_duration_seconds_count", stage="query_encoding") == 1
    assert sample(text, "mempp_search_stage_duration_seconds_count", stage="evidence") == 1.0
    assert sample(text, "mempp_search_stage_duration_seconds_count", stage="write") == 1.0
    assert sample(text, "mempp_records_written_total") == 2.0
    assert sample(text, "mempp_records", scope="default", state="active") == 2.0
    assert sample(text, "mempp_store_reachable") == 1.0
    if "://" in engine_location:
        assert sample(text, "mempp_db_pool_connections", state="max") == 8.0
    assert SECRET_QUESTION not in text and "Friday" not in text


def test_a_span_per_request_and_per_stage_with_real_parents(
    traced: tuple[httpx.Client, InMemorySpanExporter],
) -> None:
    client, exporter = traced
    client.post("/v1/records", json={"text": "The launch plan.", "author": "Ana"})
    exporter.clear()
    assert client.post("/v1/search", json={"query": SECRET_QUESTION}).status_code == 200
    # The request's span ends after its response has gone, so the client may read the reply
    # first: wait (at most 5 s) for the span rather than race it.
    deadline = time.monotonic() + 5
    while True:
        spans = exporter.get_finished_spans()
        found = [s for s in spans if s.name == "POST /v1/search"]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    [request] = found
    assert request.kind.name == "SERVER"
    assert request.attributes["http.route"] == "/v1/search"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["http.request.method"] == "POST"
    children = {
        s.name: s for s in spans if s.parent and s.parent.span_id == request.context.span_id
    }
    assert {"mempp.lexical", "mempp.tag", "mempp.vector", "mempp.fusion"} <= set(children)
    for child in children.values():
        assert request.start_time <= child.start_time <= child.end_time <= request.end_time
    for span in spans:  # no question, no record text in any attribute
        assert all(SECRET_QUESTION not in str(v) for v in span.attributes.values())


def test_request_ids_are_echoed_and_carried_by_json_log_lines(
    traced: tuple[httpx.Client, InMemorySpanExporter],
) -> None:
    client, _ = traced
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("mempp.server.requests")
    level = logger.level  # put back after: a level left at INFO keeps every later request's
    logger.addHandler(handler)  # record in pytest's log capture (the soak test counts them)
    logger.setLevel(logging.INFO)
    try:
        given = client.post(
            "/v1/search", json={"query": SECRET_QUESTION}, headers={"X-Request-Id": "req-42.a"}
        )
        made = client.post(
            "/v1/search", json={"query": SECRET_QUESTION}, headers={"X-Request-Id": "bad id\t!"}
        )
        # The line is written once the response has gone: the client may read it first.
        deadline = time.monotonic() + 5
        while made.headers["x-request-id"] not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert given.headers["x-request-id"] == "req-42.a"
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    ours = {"req-42.a", made.headers["x-request-id"]}
    # The logger is the process's: a line of another test's server may fall in between.
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    lines = [line for line in lines if line.get("request_id") in ours]
    assert [line["request_id"] for line in lines] == ["req-42.a", made.headers["x-request-id"]]
    assert {line["http_route"] for line in lines} == {"/v1/search"}
    assert all(line["status"] == 200 and line["duration_ms"] > 0 for line in lines)
    assert SECRET_QUESTION not in out.getvalue()


def test_a_keyed_servers_metrics_need_the_metrics_token(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "k.db")
    state = ServerState(db, embedder=KeywordEmbedder(KEYWORDS))
    _, tenant = keys.create_key(state.store, scope="a", role="admin")
    monkeypatch.delenv(ENV_TOKEN, raising=False)
    with live_server(create_app(state)) as url:
        refused = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {tenant}"})
        assert refused.status_code == 403 and ENV_TOKEN in refused.json()["detail"]
    monkeypatch.setenv(ENV_TOKEN, "scrape-token-1")
    state = ServerState(db, embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url:
        tenant_try = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {tenant}"})
        assert tenant_try.status_code == 403  # a tenant's key never sees other scopes
        scrape = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer scrape-token-1"})
        assert scrape.status_code == 200 and "http_server_request_duration_seconds" in scrape.text
