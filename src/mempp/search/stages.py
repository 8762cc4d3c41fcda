"""Where a search spends its time, told to whoever asks: the read path's stages (question
encoding, each leg, fusion, the records read, the evidence block) and the write path's
batches, each reported as it ends to the observer of the calling context.

A server installs an observer per request (``observing``) to feed its latency histograms and
trace spans; the library itself keeps no figures. A stage's call is wrapped where it is
built (``timed``), so the observer of the request that built it hears of it even when the
call runs on another thread (the legs on PostgreSQL, the question's encoding). With no
observer a wrap costs one context-variable read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar

__all__ = ["Observer", "observing", "stage", "timed"]

T = TypeVar("T")
log = logging.getLogger(__name__)

# The read path's stage names, as metrics and spans carry them.
ENCODE, LEXICAL, TAG, VECTOR, DATED = "query_encoding", "lexical", "tag", "vector", "date"
KEYWORD = "keyword"
CONTEXT = "context"
FUSION, RECORDS, EVIDENCE, WRITE = "fusion", "records", "evidence", "write"
# The look-up of the rows the legs that need no vector found, while the question is encoded.
LOOK_AHEAD = "look_ahead"


class Observer(Protocol):
    """Hears of each stage once it ends: its name, its start and end (``time.time_ns``),
    and a few numbers about it (``rows`` for a write batch)."""

    def __call__(
        self, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, int]
    ) -> None: ...


_OBSERVER: ContextVar[Observer | None] = ContextVar("mempp_stage_observer", default=None)


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Report the stages run in this context (and the calls it wraps) to ``observer``."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def timed(name: str, call: Callable[[], T]) -> Callable[[], T]:
    """``call``, reporting its run as stage ``name`` to the observer of the context that
    wrapped it (wherever it then runs); ``call`` itself when nobody observes."""
    observer = _OBSERVER.get()
    if observer is None:
        return call

    def run() -> T:
        start = time.time_ns()
        try:
            return call()
        finally:
            _report(observer, name, start, {})

    return run


@contextmanager
def stage(name: str, **attributes: int) -> Iterator[None]:
    """Report the block as stage ``name`` (with ``attributes``) to this context's observer."""
    observer = _OBSERVER.get()
    if observer is None:
        yield
        return
    start = time.time_ns()
    try:
        yield
    finally:
        _report(observer, name, start, attributes)


def _report(observer: Observer, name: str, start: int, attributes: Mapping[str, int]) -> None:
    try:
        observer(name, start, time.time_ns(), attributes)
    except Exception:  # a broken observer is logged; it never fails a search
        log.exception("the stage observer failed on %s", name)
