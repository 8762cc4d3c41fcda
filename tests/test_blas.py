"""The read path's BLAS limit: one thread inside, the original count back after the last
caller leaves, however their calls overlap."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_info

from mempp.threads import blas
from mempp.threads.blas import one_blas_thread


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


@pytest.fixture
def two_threads() -> Iterator[list[int]]:
    """BLAS on two threads, set the way a library would (no thread keeps control)."""
    assert np.ones(2) @ np.ones(2) == 2  # numpy's BLAS is loaded
    limiter = ThreadpoolController().limit(limits=2, user_api="blas")
    blas._release_control()
    try:
        before = _blas_threads()
        assert before and all(count == 2 for count in before)
        yield before
    finally:
        limiter.restore_original_limits()
        blas._release_control()


def test_limit_is_one_inside_and_restored_after(two_threads: list[int]) -> None:
    before = two_threads
    with one_blas_thread():
        assert all(count == 1 for count in _blas_threads())
        with one_blas_thread():
            assert all(count == 1 for count in _blas_threads())
        assert all(count == 1 for count in _blas_threads())  # the outer caller is inside
    assert _blas_threads() == before


def test_overlapping_callers_in_other_threads_share_one_limit(two_threads: list[int]) -> None:
    before = two_threads
    inside = threading.Barrier(4)
    leave = threading.Event()
    counts: list[list[int]] = []

    def caller() -> None:
        with one_blas_thread():
            inside.wait(timeout=10)
            counts.append(_blas_threads())
            leave.wait(timeout=10)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for thread in threads:
        thread.start()
    inside.wait(timeout=10)
    leave.set()
    for thread in threads:
        thread.join(timeout=10)
    assert len(counts) == 3 and all(c == 1 for got in counts for c in got)
    assert _blas_threads() == before
