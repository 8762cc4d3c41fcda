"""Server benchmark: the memory served over HTTP against the same searches in-process.

Not a test: run on demand, read the figures, compare ratios within one run (shared machines
are noisy). Bounded: loopback only, a fixed number of seconds per phase, stops by itself.

1. Builds (or reuses, with ``--db``) a SQLite store of ``--size`` synthetic records
   (bench_core's generator: Zipf vocabulary, 50 authors, three years of dates, threads).
   Document vectors are random unit vectors under MiniLM's name (``--encoder random`` of
   bench_core) so a large store builds in minutes; every query, and every document added
   through the server, is encoded by the real all-MiniLM-L6-v2.
2. In-process: ``Memory.search`` (k=10, an as-of date, query encoding included) from C
   threads for ``--seconds`` each.
3. Served: ``mempp serve`` in its own process on 127.0.0.1; C concurrent HTTP clients (one
   asyncio loop, keep-alive connections) send the same searches as ``POST /v1/search``, then
   ``POST /v1/records`` adds of new documents, ``--seconds`` each.

Prints requests/s, p50/p95/p99 latency and errors per phase, and the ratio of served to
in-process search throughput at each C.

    nice -n 10 python benchmarks/bench_server.py --size 100000 --db /tmp/bench-100k.db
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

# The script's folder is on sys.path when it runs: bench_core is its neighbour.
from bench_core import RandomThenMiniLM, queries, synthetic_records
from mempp import Memory

K = 10
WARMUP_S = 2.0


@dataclass
class Phase:
    name: str
    clients: int
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        lat = np.array(self.latencies_ms) if self.latencies_ms else np.array([float("nan")])
        p50, p95, p99 = np.percentile(lat, [50, 95, 99])
        error = f" (first: {self.first_error})" if self.first_error else ""
        return (
            f"{self.name:<22} C={self.clients:<3} {self.rate:8.1f} req/s   "
            f"p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  p99 {p99:7.1f} ms   "
            f"n={len(self.latencies_ms):<6} errors={self.errors}{error}"
        )


def build(path: Path, size: int) -> None:
    if path.exists():
        with Memory(path) as memory:
            if len(memory) >= size:
                print(f"reusing {path} ({len(memory):,} records)")
                return
        raise SystemExit(f"{path} exists with fewer than {size} records; pass another --db")
    print(f"building {path}: {size:,} records (random document vectors) ...", flush=True)
    start = time.perf_counter()
    with Memory(path, embedder=RandomThenMiniLM()) as memory:
        memory.add_many(synthetic_records(size), batch_size=512)
    print(f"built in {time.perf_counter() - start:.0f} s", flush=True)


def in_process(path: Path, questions: list[tuple[str, str]], clients: int, seconds: float) -> Phase:
    """C threads calling Memory.search on one shared Memory, as the server's pool does."""
    phase = Phase("in-process search", clients)
    with Memory(path) as memory:
        memory.warm()
        memory.search(questions[0][0], as_of=questions[0][1], k=K)
        lock = threading.Lock()
        stop_at = time.perf_counter() + WARMUP_S + seconds
        measure_from = time.perf_counter() + WARMUP_S

        def loop(offset: int) -> None:
            i = offset
            while True:
                question, as_of = questions[i % len(questions)]
                i += clients
                t0 = time.perf_counter()
                if t0 >= stop_at:
                    return
                try:
                    memory.search(question, as_of=as_of, k=K)
                except Exception as exc:
                    with lock:
                        phase.errors += 1
                        phase.first_error = phase.first_error or repr(exc)
                    continue
                t1 = time.perf_counter()
                if t0 >= measure_from:
                    with lock:
                        phase.latencies_ms.append((t1 - t0) * 1000)

        threads = [threading.Thread(target=loop, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    phase.seconds = seconds
    return phase


async def served(
    url: str, kind: str, questions: list[tuple[str, str]], clients: int, seconds: float
) -> Phase:
    """C concurrent clients, closed loop: each sends its next request when the last returns."""
    phase = Phase(f"served {kind}", clients)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    counter = iter(range(10**9))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        stop_at = time.perf_counter() + WARMUP_S + seconds
        measure_from = time.perf_counter() + WARMUP_S

        async def loop(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop_at:
                if kind == "search":
                    question, as_of = questions[i % len(questions)]
                    request = ("/v1/search", {"query": question, "as_of": as_of, "k": K})
                else:
                    n = next(counter)
                    question = questions[n % len(questions)][0]
                    request = (
                        "/v1/records",
                        {
                            "text": f"bench note {n}: {question}",
                            "author": f"client {offset}",
                            "date": "2025-01-01",
                        },
                    )
                i += clients
                t0 = time.perf_counter()
                try:
                    response = await client.post(request[0], json=request[1])
                    ok = response.status_code == 200
                    detail = None if ok else f"{response.status_code} {response.text[:120]}"
                except httpx.HTTPError as exc:
                    ok, detail = False, repr(exc)
                t1 = time.perf_counter()
                if not ok:
                    phase.errors += 1
                    phase.first_error = phase.first_error or detail
                elif t0 >= measure_from:
                    phase.latencies_ms.append((t1 - t0) * 1000)

        await asyncio.gather(*(loop(n) for n in range(clients)))
    phase.seconds = seconds
    return phase


def start_server(path: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mempp = str(Path(sys.executable).with_name("mempp"))
    process = subprocess.Popen(
        [mempp, "serve", "--db", str(path), "--port", str(port), "--log-level", "warning"],
        env={**os.environ, "MEMPP_ENCODER": "minilm"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("mempp serve exited")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("mempp serve did not become ready in 600 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=30.0, help="per phase")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--db", type=Path, default=None, help="store to build or reuse")
    args = parser.parse_args()
    path = args.db or Path(tempfile.mkdtemp(prefix="mempp-bench-server-")) / "bench.db"
    build(path, args.size)
    records = synthetic_records(min(args.size, 5000))  # the generator of the store: same words
    questions = queries(records, args.queries)

    print(
        f"\nstore {path}: {args.size:,} records; k={K}; encoder: random document vectors, "
        "MiniLM for queries and added documents; "
        f"{args.seconds:.0f} s per phase after {WARMUP_S:.0f} s warm-up\n",
        flush=True,
    )
    local = {c: in_process(path, questions, c, args.seconds) for c in args.clients}
    for phase in local.values():
        print(phase.line(), flush=True)
    process, url = start_server(path)
    try:
        remote = {
            c: asyncio.run(served(url, "search", questions, c, args.seconds)) for c in args.clients
        }
        for phase in remote.values():
            print(phase.line(), flush=True)
        adds = {
            c: asyncio.run(served(url, "add", questions, c, args.seconds)) for c in args.clients
        }
        for phase in adds.values():
            print(phase.line(), flush=True)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    print("\nserved / in-process search throughput at the same concurrency:")
    for c in args.clients:
        ratio = remote[c].rate / local[c].rate if local[c].rate else float("nan")
        print(f"  C={c:<3} {remote[c].rate:7.1f} / {local[c].rate:7.1f} = {ratio:.2f}")


if __name__ == "__main__":
    main()
