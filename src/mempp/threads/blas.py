"""BLAS threading for the read path, chosen by the library rather than the environment.

A search does small matrix products (one question through the encoder, block-wise scans of
the vector matrix). Handed to a multi-threaded BLAS on a busy machine, each of them waits for
a descheduled helper thread: measured in issue 16 as p95 ten times p50 at every store size.
Inside :func:`one_blas_thread` BLAS runs on the calling thread only.

The limit is process-wide (BLAS libraries keep one thread count), so it is counted: concurrent
callers share one limit, which is lifted when the last of them leaves. Meanwhile other BLAS
work in the process (say, an ingest encoding batches) also runs on one thread.

threadpoolctl (3.6+) lets only one "controlling" Python thread change a process-wide OpenBLAS
pool and silently ignores the others; here the first caller may be any thread (a server's
worker) and the last one to leave, which restores the count, another. So control is handed
back after each change. (A thread inside ``with threadpool_limits(...)`` of its own keeps
control, and its choice wins.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import threadpoolctl
from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_users = 0
_limit: Any = None
_controller: ThreadpoolController | None = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread while any caller is inside, restored when the last one leaves."""
    global _users, _limit, _controller
    with _lock:
        if _users == 0:
            if _controller is None:  # scans the loaded libraries once (~ms), not per call
                _controller = ThreadpoolController()
            _limit = _controller.limit(limits=1, user_api="blas")
            _release_control()
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _limit is not None:
                _limit.restore_original_limits()
                _release_control()
                _limit = None


def _release_control() -> None:
    openblas = getattr(threadpoolctl, "OpenBLASController", None)
    release = getattr(openblas, "clear_controlling_thread", None)
    if release is not None:
        release()
