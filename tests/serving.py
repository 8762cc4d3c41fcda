"""A real uvicorn serving a mempp app on a free loopback port, for the server tests.

    with live_server(create_app(state)) as base_url:
        httpx.get(f"{base_url}/healthz")

The socket is bound before uvicorn starts (no race for the port); the server runs in a
thread and is asked to exit, then joined, when the block ends. ``Running.stop()`` asks it
to exit as SIGTERM would: in-flight requests finish first.

For a server that must be killed or run as several nodes, ``serve_process`` starts a real
``mempp serve`` child on a ``free_port()`` and ``wait_ready`` waits for its ``/readyz``
(the tests and ``benchmarks/bench_nodes.py`` use them).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn

START_TIMEOUT_S = 60.0


@dataclass
class Running:
    url: str
    server: uvicorn.Server
    thread: threading.Thread
    sock: socket.socket
    graceful_s: float

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=self.graceful_s + 30)
        self.sock.close()


def start_server(app: object, *, graceful_s: float = 10.0, lifespan: str = "auto") -> Running:
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # with proto 0 every response waited ~40 ms on Nagle and the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=graceful_s,
        lifespan=lifespan,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return Running(f"http://127.0.0.1:{port}", server, thread, sock, graceful_s)


@contextmanager
def live_server(app: object, *, graceful_s: float = 10.0, lifespan: str = "auto") -> Iterator[str]:
    running = start_server(app, graceful_s=graceful_s, lifespan=lifespan)
    try:
        yield running.url
    finally:
        running.stop()


def free_port() -> int:
    """A loopback port free now (a child process binds it later: a small race, unlike
    ``start_server``'s bound socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_process(location: str, port: int, *options: str) -> subprocess.Popen[bytes]:
    """``mempp --db LOCATION serve --port PORT [OPTIONS]`` as a child process, its output
    discarded."""
    return subprocess.Popen(
        [sys.executable, "-m", "mempp", "--db", location, "serve", "--port", str(port), *options],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_ready(base: str, child: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Until ``base/readyz`` answers 200; raises ``RuntimeError`` when ``child`` exits first
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"{base}: the server exited ({child.returncode})")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{base} did not become ready in {timeout:.0f} s")
