"""A real uvicorn serving a mempp app on a free loopback port, for the server tests.

    with live_server(create_app(state)) as base_url:
        httpx.get(f"{base_url}/healthz")

The socket is bound before uvicorn starts (no race for the port); the server runs in a
thread and is asked to exit, then joined, when the block ends. ``Running.stop()`` asks it
to exit as SIGTERM would: in-flight requests finish first.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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
