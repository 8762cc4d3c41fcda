"""Web page benchmark: what a page costs over the library call it shows.

Not a test: run on demand and compare ratios within one run (shared machines are noisy).
Builds a SQLite store of N synthetic records (bench_core's generator, random document
vectors, MiniLM for queries), serves ``create_app`` with uvicorn on a loopback port (keyless,
loopback only), and times, one client at a time:

- ``Memory.search`` in process, and ``GET /search`` for the same queries and bounds (the
  page adds HTML rendering, HTTP and the session cookie);
- the first search page of the scope (it reads the scope's date range for the as-of slider,
  then caches it until the row count changes) against the pages after it;
- ``GET /records/ID`` and ``GET /timeline?record=ID``.

    python benchmarks/bench_web.py --size 20000 --queries 100
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import uvicorn

from bench_core import RandomThenMiniLM, percentile, queries, synthetic_records
from mempp import Memory
from mempp.server.app import create_app
from mempp.server.state import ServerState


def serve(state: ServerState) -> tuple[str, uvicorn.Server, threading.Thread]:
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # with proto 0 every response waited ~40 ms on Nagle and the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(state, mcp=False), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def timed(call, repeat: list) -> list[float]:  # type: ignore[no-untyped-def, type-arg]
    out = []
    for args in repeat:
        start = time.perf_counter()
        call(*args)
        out.append((time.perf_counter() - start) * 1000)
    return out


def line(name: str, values: list[float]) -> str:
    return f"{name}: p50 {percentile(values, 50):.1f} ms, p95 {percentile(values, 95):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    records = synthetic_records(args.size)
    asked = queries(records, args.queries)
    embedder = RandomThenMiniLM()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "web.db"
        with Memory(db, embedder=embedder) as memory:
            memory.add_many(records, batch_size=256)
        state = ServerState(str(db), embedder=embedder)
        url, server, thread = serve(state)
        try:
            memory = state.memory(state.default_scope)
            memory.warm()
            with httpx.Client(base_url=url, timeout=60) as client:
                start = time.perf_counter()
                first = client.get("/search", params={"q": "warm up", "as_of": "2023-01-01"})
                first_ms = (time.perf_counter() - start) * 1000
                assert first.status_code == 200, first.text[:500]
                again = timed(
                    lambda: client.get("/search", params={"q": "warm up", "as_of": "2023-01-01"}),
                    [()] * 20,
                )
                library = timed(lambda q, d: memory.search(q, as_of=d, k=10), asked)
                page = timed(
                    lambda q, d: client.get("/search", params={"q": q, "as_of": d, "k": "10"}),
                    asked,
                )
                ids = [(int(i),) for i in np.random.default_rng(4).integers(1, args.size, 50)]
                record = timed(lambda i: client.get(f"/records/{i}"), ids)
                timeline = timed(lambda i: client.get("/timeline", params={"record": i}), ids)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    print(f"\n== {args.size:,} records, {args.queries} queries, k=10, one client")
    print(line("Memory.search in process", library))
    print(line("GET /search (same queries)", page))
    print(
        f"page / library: {percentile(page, 50) / percentile(library, 50):.2f} at p50, "
        f"+{percentile(page, 50) - percentile(library, 50):.1f} ms"
    )
    print(
        f"first search page of the scope (reads its date range): {first_ms:.0f} ms; "
        + line("the same page after it", again)
    )
    print(line("GET /records/ID", record))
    print(line("GET /timeline?record=ID", timeline))


if __name__ == "__main__":
    main()
