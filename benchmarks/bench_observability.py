"""What the observability middleware costs a request, in process.

A trivial ASGI app answers a request the way the server's routes do (one stage reported, as a
search reports each of its own); it runs bare, then inside ``Observability`` with metrics,
and with metrics and a tracer provider (an in-memory span exporter), the variants taking
turns in one process so a noisy machine moves them alike. Prints p50/p95 per request, in µs.

    python benchmarks/bench_observability.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from mempp.search.stages import stage
from mempp.server.metrics import Metrics
from mempp.server.observability import Observability
from mempp.server.state import ServerState
from mempp.server.tracing import Tracing


async def endpoint(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    with stage("lexical"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def measure(app, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/search",
        "headers": [],
        "scheme": "http",
    }

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message) -> None:  # type: ignore[no-untyped-def]
        return None

    times = []
    for _ in range(n):
        start = time.perf_counter()
        await app(dict(scope), receive, send)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    with tempfile.TemporaryDirectory() as folder:
        state = ServerState(str(Path(folder) / "b.db"))
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        variants = {
            "bare app": endpoint,
            "+ request id, log, metrics": Observability(endpoint, metrics=Metrics(state)),
            "+ traces (in-memory exporter)": Observability(
                endpoint, metrics=Metrics(state), tracing=Tracing(provider)
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        per_round = args.requests // args.rounds
        for _ in range(args.rounds):
            for name, app in variants.items():
                times[name] += asyncio.run(measure(app, per_round))
            exporter.clear()
        state.close()
    print(f"{'variant':32} {'p50 µs':>8} {'p95 µs':>8}")
    for name, samples in times.items():
        cuts = statistics.quantiles(samples, n=20)
        print(f"{name:32} {statistics.median(samples) * 1e6:8.1f} {cuts[18] * 1e6:8.1f}")


if __name__ == "__main__":
    main()
