"""A long-running process: writes, searches and reads of the record on each engine leave the
reference counts of None, True and False where they were.

A native call that returns one of them a reference short takes one off its count each time,
and the process aborts once the count reaches zero (``Fatal Python error: none_dealloc``):
SimSIMD 6.5's ``cdist(..., out=...)`` did that once per scored part of the vector scan, so a
server died after some thousands of searches. The first calls of a process free objects that
hold such references (caches filling, code specializing), so counting starts after a warm-up.
Counts, not times: bounded by the number of calls.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from mempp import Memory
from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.store import open_store

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

WARM_UP = 150
COUNTED = 400  # each round leaks at least once wherever a call leaks: >= 400 references
DAY0 = datetime(2025, 3, 1)


def _counts() -> dict[str, int]:
    gc.collect()
    return {repr(o): sys.getrefcount(o) for o in (None, True, False)}


def _assert_counts_stay(round_: Callable[[int], None]) -> None:
    """Run ``round_`` WARM_UP times, then COUNTED times between two counts."""
    for k in range(WARM_UP):
        round_(k)
    before = _counts()
    for k in range(WARM_UP, WARM_UP + COUNTED):
        round_(k)
    after = _counts()
    drift = {name: after[name] - before[name] for name in before}
    assert all(abs(d) < 100 for d in drift.values()), drift


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None, True, False immortal from 3.12")
def test_a_long_run_of_calls_leaves_singletons_reference_counts_alone(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(["launch", "budget", "hiring"])
    words = ("launch", "budget", "hiring")
    with Memory(engine_location, embedder=embedder) as memory:

        def round_(k: int) -> None:
            word = words[k % 3]
            record = memory.add(
                f"note {k}: the {word} moves to week {k % 52} #{word}",
                author=f"u{k % 4}",
                date=DAY0 + timedelta(hours=k),
            )
            memory.search(f"when is the {word}")
            memory.search(word, as_of=DAY0 + timedelta(hours=k // 2), author="u1")
            if k % 10 == 0:
                memory.evidence(f"{word} week", as_of=DAY0 + timedelta(hours=k))
                memory.history(record_id=record.id)
                memory.get(record.id)

        _assert_counts_stay(round_)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None, True, False immortal from 3.12")
def test_a_long_run_of_http_requests_leaves_singletons_reference_counts_alone(
    tmp_path: Path,
) -> None:
    """The same through the HTTP door: a real uvicorn in this process, requests from httpx
    on the loopback (the ASGI stack's native parts: pydantic-core, the JSON codecs)."""
    store = open_store(str(tmp_path / "memory.db"))
    token = keys.create_key(store, scope="team", role="write")[1]
    state = ServerState(store, embedder=KeywordEmbedder(["launch", "budget"]))
    with (
        live_server(create_app(state)) as url,
        httpx.Client(
            base_url=f"{url}/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client,
    ):

        def round_(k: int) -> None:
            word = ("launch", "budget")[k % 2]
            date = (DAY0 + timedelta(hours=k)).isoformat()
            stored = client.post("/records", json={"text": f"{word} {k}", "date": date})
            assert stored.status_code == 200, stored.text
            found = client.post("/search", json={"query": word, "k": 5, "as_of": date})
            assert found.status_code == 200, found.text
            assert client.get(f"/records/{stored.json()['id']}").status_code == 200
            bad = client.post("/search", json={"query": 5, "k": "many"})
            assert bad.status_code == 422

        _assert_counts_stay(round_)
