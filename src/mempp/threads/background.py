"""Work started on a thread of its own while the caller goes on: a search's question encoding
beside the legs that need no vector, FTS5's phrase matching beside the BM25 replica.

A fresh thread per call rather than a pool: a start costs about 0.1 ms, and concurrent
searches never queue behind each other for a worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

__all__ = ["started", "starting"]

_T = TypeVar("_T")


def started(work: Callable[[], _T], name: str = "mempp-background") -> Callable[[], _T]:
    """Run ``work`` on a thread of its own; the returned call waits for its result (or raises
    its error). Worth it for work that spends its time in C with the GIL released."""
    return starting(work, name).result


def starting(work: Callable[[], _T], name: str = "mempp-background") -> Future[_T]:
    """Like :func:`started`, as a future: for a caller that asks whether the work is done
    before it waits (a search does other work while the question is still being encoded)."""
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the caller, which re-raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
