"""What the guard (mempp.server.guard) costs a request, in-process.

Not a test: run on demand. Drives one ASGI request at a time through ``Guard`` wrapped
around an app that answers at once, and through that app alone, with the headers a browser
sends (a dozen, Host, Origin, Sec-Fetch-Site, a JSON body type); prints the p50 and p95 of
each, and the difference: the time the checks and the response headers add. Bounded by
``--requests`` (default 20,000 per arm, a few seconds).

    python benchmarks/bench_guard.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from mempp.server.guard import Guard

HEADERS = [
    (b"host", b"127.0.0.1:8765"),
    (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0 Safari/537.36"),
    (b"accept", b"application/json"),
    (b"accept-language", b"en-GB,en;q=0.9"),
    (b"accept-encoding", b"gzip, deflate, br"),
    (b"content-type", b"application/json"),
    (b"content-length", b"40"),
    (b"origin", b"http://127.0.0.1:8765"),
    (b"sec-fetch-site", b"same-origin"),
    (b"sec-fetch-mode", b"cors"),
    (b"sec-fetch-dest", b"empty"),
    (b"referer", b"http://127.0.0.1:8765/search"),
    (b"cookie", b"mempp_session=" + b"x" * 200),
]
SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/search",
    "headers": HEADERS,
    "server": ("127.0.0.1", 8765),
}


async def answer(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")],
        }
    )
    await send({"type": "http.response.body", "body": b"{}"})


async def timings(app, requests: int) -> list[float]:  # type: ignore[no-untyped-def]
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_: dict[str, object]) -> None:
        pass

    out = []
    for _ in range(requests):
        start = time.perf_counter_ns()
        await app(dict(SCOPE), receive, send)
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    guarded = Guard(answer, bind_host="127.0.0.1")
    asyncio.run(timings(guarded, 1000))  # warm up
    bare = asyncio.run(timings(answer, args.requests))
    with_guard = asyncio.run(timings(guarded, args.requests))
    for name, values in (("app alone", bare), ("guard + app", with_guard)):
        cuts = statistics.quantiles(values, n=20)
        print(f"{name:12} p50 {statistics.median(values):6.2f} us   p95 {cuts[18]:6.2f} us")
    print(f"guard cost   p50 {statistics.median(with_guard) - statistics.median(bare):6.2f} us")


if __name__ == "__main__":
    main()
