"""Work run on another thread while the caller goes on: a search's legs that need no vector
beside the question's encoding (``HelperThreads``, kept alive between searches), FTS5's
phrase matching beside the BM25 replica (a fresh thread per call).

A fresh thread's start costs 0.1-0.6 ms (``Thread.start`` waits until the new thread runs);
a kept thread is woken instead. Either way the work runs in a copy of the caller's context,
so a PostgreSQL read's standby (``Store.reading``) and the stage observer go with it.

A forked child (a server's worker forked after the parent searched) has none of the
parent's kept threads: every ``HelperThreads`` forgets them in the child, or the child's
first search would hand its legs to a thread that is not there and wait for ever.
"""

from __future__ import annotations

import contextvars
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from queue import SimpleQueue
from typing import Any, TypeVar

__all__ = ["HelperThreads", "started", "starting"]

_T = TypeVar("_T")

# What a kept thread is handed: the future to settle, the caller's context, the work.
_Job = tuple[Future[Any], contextvars.Context, Callable[[], Any]] | None


def started(work: Callable[[], _T], name: str = "mempp-background") -> Callable[[], _T]:
    """Run ``work`` on a thread of its own; the returned call waits for its result (or raises
    its error). Worth it for work that spends its time in C with the GIL released."""
    return starting(work, name).result


def starting(work: Callable[[], _T], name: str = "mempp-background") -> Future[_T]:
    """Like :func:`started`, as a future: for a caller that asks whether the work is done
    before it waits."""
    future: Future[_T] = Future()
    context = contextvars.copy_context()
    threading.Thread(target=_settle, args=(future, context, work), name=name, daemon=True).start()
    return future


def _settle(future: Future[_T], context: contextvars.Context, work: Callable[[], _T]) -> None:
    try:
        future.set_result(context.run(work))
    except BaseException as exc:  # handed to the caller, which re-raises it
        future.set_exception(exc)


class HelperThreads:
    """Threads kept alive between calls, one per call running at once: concurrent searches
    never queue behind each other for one, and up to ``keep`` wait idle for the next call.
    After :meth:`close` none is kept, and work runs on the caller's thread."""

    def __init__(self, name: str, keep: int = 2) -> None:
        self._name, self._keep = name, keep
        self._closed = False
        self._forget_threads()
        _LIVE.add(self)

    def _forget_threads(self) -> None:
        """No kept thread (at the start, and in a forked child, where the parent's threads
        are gone and its lock may have been held by one of them at the fork)."""
        self._lock = threading.Lock()
        self._idle: list[SimpleQueue[_Job]] = []
        self._threads: set[threading.Thread] = set()

    def submit(self, work: Callable[[], _T]) -> Future[_T]:
        """Run ``work`` on a kept thread (a new one when none is idle), in a copy of the
        caller's context."""
        future: Future[_T] = Future()
        context = contextvars.copy_context()
        with self._lock:
            closed = self._closed
            inbox = self._idle.pop() if self._idle and not closed else None
            thread = None
            if inbox is None and not closed:
                inbox = SimpleQueue()
                thread = threading.Thread(
                    target=self._serve, args=(inbox,), name=self._name, daemon=True
                )
                self._threads.add(thread)
        if inbox is None:  # closed: nothing may outlive the closing
            _settle(future, context, work)
            return future
        inbox.put((future, context, work))
        if thread is not None:
            thread.start()
        return future

    def _serve(self, inbox: SimpleQueue[_Job]) -> None:
        while (job := inbox.get()) is not None:
            _settle(*job)
            del job  # the finished work's references go now, not at the next call
            if not self._rest(inbox):
                return

    def _rest(self, inbox: SimpleQueue[_Job]) -> bool:
        """Take the thread of ``inbox`` back as idle; False when it should end instead."""
        with self._lock:
            if self._closed or len(self._idle) >= self._keep:
                self._threads.discard(threading.current_thread())
                return False
            self._idle.append(inbox)
            return True

    def close(self) -> None:
        """End the idle threads now (waiting for them) and the busy ones once their work is
        done. Calls after it run on the caller's thread."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            threads = list(self._threads)
            self._threads.clear()
        for inbox in idle:
            inbox.put(None)
        for thread in threads:
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join()


_LIVE: weakref.WeakSet[HelperThreads] = weakref.WeakSet()


def _forget_in_child() -> None:
    for helpers in list(_LIVE):
        helpers._forget_threads()


os.register_at_fork(after_in_child=_forget_in_child)
