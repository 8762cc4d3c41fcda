"""A server over a PostgreSQL that stops and starts again (a real stop, a real start).

While the database is down every request is answered within a bounded time (the pool's wait,
``MEMPP_PG_WAIT_S``, set to 2 s here) with 503 and ``Retry-After``, reads and writes alike;
``/readyz`` is 503 and ``/healthz`` 200. Once the database is back the first request succeeds
within a second or two, and no record was lost or written twice. Bounded: one stop of about
six seconds.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from mempp.server.app import create_app
from mempp.server.state import ServerState
from test_pg_server_stop import own_server, pg_ctl_stop, restart  # noqa: F401 - fixture

from conftest import KeywordEmbedder
from serving import live_server

pytest.importorskip("psycopg")

WAIT_S = 2.0
DOWN_S = 6.0


def test_requests_fail_fast_while_postgresql_is_down_and_succeed_once_it_is_back(
    own_server: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMPP_PG_WAIT_S", str(WAIT_S))
    url = own_server.get_uri()
    state = ServerState(url, embedder=KeywordEmbedder(["launch", "budget"]))
    with live_server(create_app(state)) as base, httpx.Client(base_url=base, timeout=60) as http:
        for i in range(3):
            assert http.post("/v1/records", json={"text": f"launch note {i}"}).status_code == 200
        assert http.post("/v1/search", json={"query": "launch"}).status_code == 200
        pg_ctl_stop(own_server, "fast")
        slowest = 0.0
        answers = []
        until = time.monotonic() + DOWN_S
        while time.monotonic() < until:
            for method, path, body in (
                ("POST", "/v1/search", {"query": "launch"}),
                ("POST", "/v1/records", {"text": "written while down"}),
                ("GET", "/v1/records/1", None),
            ):
                start = time.monotonic()
                reply = http.request(method, path, json=body)
                slowest = max(slowest, time.monotonic() - start)
                answers.append((reply.status_code, reply.headers.get("retry-after")))
            assert http.get("/healthz").status_code == 200
            ready = http.get("/readyz")
            assert ready.status_code == 503 and ready.headers.get("retry-after") == "1"
        assert {status for status, _ in answers} == {503}
        assert all(after is not None and int(after) >= 1 for _, after in answers)
        assert slowest <= WAIT_S + 3.0, slowest  # never a long hang
        restart(own_server)
        back = time.monotonic()
        while True:
            reply = http.post("/v1/search", json={"query": "launch"})
            if reply.status_code == 200:
                break
            assert time.monotonic() - back < 10, reply.text
            time.sleep(0.05)
        first_success = time.monotonic() - back
        print(f"first success {first_success:.2f} s after the restart; slowest {slowest:.2f} s")
        assert first_success <= 2.0, first_success
        assert http.get("/readyz").status_code == 200
        assert state.store.count("default", active_only=False) == 3  # nothing half-written
