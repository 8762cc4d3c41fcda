"""Fanning LLM calls out over threads: results in input order, the first failure stops the rest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from mempp.errors import InvalidInput

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, max_workers: int) -> Iterator[R]:
    """``fn`` over ``items`` on at most ``max_workers`` threads, each result yielded in input
    order as soon as it is ready, so a caller can apply results one by one while later calls
    run. If the caller stops early (an error), calls not yet started are never made."""
    if max_workers == 1:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(max_workers=max_workers)
    try:
        yield from pool.map(fn, items)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def map_concurrent(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    max_workers: int,
    return_exceptions: bool = False,
) -> list[R | BaseException]:
    """``[fn(x) for x in items]`` on at most ``max_workers`` threads, results in input order.

    By default the first exception cancels the calls not yet started and is raised. With
    ``return_exceptions=True`` each failed item yields its exception instead, so one bad
    question does not end a benchmark run.
    """
    if max_workers < 1:
        raise InvalidInput("max_workers must be >= 1")
    work = list(items)
    if not work:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(work))) as pool:
        futures: list[Future[R]] = [pool.submit(fn, item) for item in work]
        if not return_exceptions:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:
                for future in futures:
                    future.cancel()
                raise failed.exception()  # type: ignore[misc]
        results: list[R | BaseException] = []
        for future in futures:
            error = future.exception()
            results.append(error if error is not None else future.result())
        return results
