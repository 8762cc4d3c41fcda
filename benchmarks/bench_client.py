"""What ``mempp.Client`` costs over ``Memory`` in process: search latency on one store.

Not a test: run it, read the figures. It builds (or reuses, from ``--cache``) the synthetic
store of ``benchmarks/bench_scale.py`` (``--size`` records: Zipf-worded texts, Zipf authors,
dates over three years, random unit vectors named like all-MiniLM-L6-v2), serves a copy of it
with ``mempp serve``'s app on a loopback uvicorn in this process, and times the same
questions both ways, same process, same run:

* ``memory``: ``Memory.search`` on the server's own ``Memory`` for the scope (the object the
  HTTP route calls, so both sides share the store's indexes and the encoder);
* ``client``: ``Client.search`` over HTTP to that server (JSON encoding of every hit whole,
  the socket, httpx, decoding back into ``Hit``s).

With ``--separate`` the server is ``mempp serve`` in a process of its own (as deployed: no
GIL shared with the caller) over the same copy, and ``memory`` is a ``Memory`` of this
process on that file.

Each question is asked once untimed first on both sides, so its vector is held (both keep
recent questions' vectors) and neither side pays the encoder; then the two sides are timed back to
back, alternating which goes first. The figures are p50 / p95 (ms) of each side and of the
per-question difference, at ``k`` 10 and 50.

    python benchmarks/bench_client.py --size 100000 --queries 200 --cache /tmp/client-bench
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import bench_scale  # the store builder, from this folder

from serving import free_port, serve_process, start_server, wait_ready  # tests/serving.py


def quantile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q * 100) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=Path(".mempp-cache/scale"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--k", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--separate", action="store_true", help="serve from another process")
    args = parser.parse_args()

    from mempp import Client
    from mempp.encoders.minilm import MiniLMEmbedder
    from mempp.server.app import create_app
    from mempp.server.state import ServerState

    built = bench_scale.build(args.cache, args.size, args.seed, 500)
    print(f"store: {built['records']:,} records", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="mempp-client-bench-"))
    copy = work / "store.db"
    shutil.copy(bench_scale.store_path(args.cache, args.size, args.seed), copy)
    questions = bench_scale.Corpus(args.seed).questions(args.queries)
    if args.separate:
        measure_separate(copy, questions, args.k)
        shutil.rmtree(work, ignore_errors=True)
        return
    state = ServerState(str(copy), embedder=MiniLMEmbedder())
    running = start_server(create_app(state))
    try:
        deadline = time.monotonic() + 600
        while not state.ready and time.monotonic() < deadline:
            time.sleep(0.2)
        memory = state.memory(state.default_scope)
        with Client(running.url, timeout=120) as client:
            for k in args.k:
                report(k, questions, memory, client)
    finally:
        running.stop()
        shutil.rmtree(work, ignore_errors=True)


def measure_separate(copy: Path, questions: list[str], ks: list[int]) -> None:
    """``mempp serve`` in its own process; ``Memory`` in this one, on the same file."""

    from mempp import Client, Memory

    port = free_port()
    server = serve_process(str(copy), port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server, timeout=600)
        with Memory(copy) as memory, Client(url, timeout=120) as client:
            memory.warm()
            for k in ks:
                report(k, questions, memory, client)
    finally:
        server.terminate()
        server.wait(timeout=60)


def report(k: int, questions: list[str], memory: object, client: object) -> None:
    local: list[float] = []
    remote: list[float] = []
    for number, question in enumerate(questions):
        expected = [h.id for h in memory.search(question, k=k)]  # type: ignore[attr-defined]
        client.search(question, k=k)  # type: ignore[attr-defined] # both sides hold its vector
        sides = [("memory", memory, local), ("client", client, remote)]
        for _, side, samples in sides if number % 2 == 0 else reversed(sides):
            started = time.perf_counter()
            hits = side.search(question, k=k)  # type: ignore[attr-defined]
            samples.append((time.perf_counter() - started) * 1000)
            assert [h.id for h in hits] == expected, "the two sides disagree"
    overhead = [r - m for r, m in zip(remote, local, strict=True)]
    print(
        f"k={k}, {len(questions)} questions: "
        f"memory p50 {quantile(local, 0.5):.1f} / p95 {quantile(local, 0.95):.1f} ms; "
        f"client p50 {quantile(remote, 0.5):.1f} / p95 {quantile(remote, 0.95):.1f} ms; "
        f"overhead p50 {quantile(overhead, 0.5):.1f} / p95 {quantile(overhead, 0.95):.1f} ms"
    )


if __name__ == "__main__":
    main()
