"""Several servers over one PostgreSQL rank alike after every kind of change.

Three real servers (uvicorn on loopback, each with its own store: its own pool and in-RAM
replicas) share one database. After each change made through the first one (add, supersede,
archive, undo, redact) every node's ranking of 30 questions equals the first node's at the very
next search: the bound is zero searches (a node reads the scope's erasure count before using a
replica, and ranks only ids PostgreSQL keeps, so states need no copy).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from engines import pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

WORDS = (
    "launch budget plan friday pricing team seat churn roadmap hiring vendor audit "
    "contract renewal outage deploy incident review quarterly target forecast"
).split()
NODES, DOCS, QUESTIONS, K = 3, 240, 30, 20


@pytest.fixture
def nodes(pg_url: str) -> Iterator[list[tuple[httpx.Client, ServerState]]]:  # noqa: F811
    with ExitStack() as stack:
        served = []
        for _ in range(NODES):
            state = ServerState(pg_url, embedder=KeywordEmbedder(WORDS[:8]))
            url = stack.enter_context(live_server(create_app(state)))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=60))
            served.append((client, state))
        yield served


def rankings(client: httpx.Client, questions: list[str]) -> list[list[int]]:
    out = []
    for question in questions:
        reply = client.post("/v1/search", json={"query": question, "k": K})
        assert reply.status_code == 200, reply.text
        out.append([hit["id"] for hit in reply.json()["hits"]])
    return out


def test_every_node_ranks_as_the_writer_does_at_the_next_search(
    nodes: list[tuple[httpx.Client, ServerState]],
) -> None:
    rng = random.Random(5)
    docs = [
        {
            "text": " ".join(rng.choices(WORDS, k=rng.randint(3, 14))),
            "author": rng.choice(["Ana", "Bo", "Chen"]),
            "date": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        }
        for _ in range(DOCS)
    ]
    writer = nodes[0][0]
    ids = [
        r["id"] for r in writer.post("/v1/records/batch", json={"records": docs}).json()["results"]
    ]
    questions = [" ".join(rng.sample(WORDS, rng.randint(1, 3))) for _ in range(QUESTIONS)]
    for client, _ in nodes:
        rankings(client, questions)  # every node builds its replicas now
    lags: dict[str, float] = {}

    def agree(change: str) -> None:
        started = time.monotonic()
        expected = rankings(writer, questions)
        for client, _ in nodes[1:]:
            assert rankings(client, questions) == expected, change
        lags[change] = time.monotonic() - started

    more = [{"text": "launch budget roadmap outage", "author": "Dee", "date": "2024-06-01"}]
    writer.post("/v1/records/batch", json={"records": more})
    agree("add")
    supersede = writer.post(
        f"/v1/records/{ids[0]}/supersede", json={"by": ids[1], "reason": "newer"}
    ).json()
    agree("supersede")
    writer.post(f"/v1/records/{ids[2]}/archive", json={"reason": "stale"})
    agree("archive")
    writer.post(f"/v1/runs/{supersede['run_id']}/undo")
    agree("undo")
    erased = rng.sample(ids[3:], 10)
    for record_id in erased:
        assert (
            writer.post(f"/v1/records/{record_id}/redact", json={"reason": "gdpr"}).status_code
            == 200
        )
    agree("redact")
    checks = NODES * QUESTIONS
    print({change: f"{checks} searches compared in {lag:.1f} s" for change, lag in lags.items()})
