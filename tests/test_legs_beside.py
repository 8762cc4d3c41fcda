"""On SQLite a search encodes the question on the caller's thread while the legs that need
no vector run beside it on a helper thread the Memory keeps alive, then goes from the
encoding into the vector leg; on PostgreSQL the kept thread encodes while the legs run on
the engine's pooled connections. The results are those of the
sequential path on both engines, the helper thread is reused and ends with the Memory, the
caller's context goes with the legs, and an encoder's error reaches the caller only once no
leg is left running."""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pytest

from mempp import Memory
from mempp.search import stages
from mempp.threads.background import HelperThreads
from test_row_facts import KEYWORDS, QUESTIONS, SlowEmbedder, _filled, _snapshot

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

LEGS_THREAD = "mempp-legs"


class RecordingEmbedder(KeywordEmbedder):
    """Notes the thread each encoding ran on; fails on a question holding "explode"."""

    def __init__(self, keywords: Sequence[str]) -> None:
        super().__init__(keywords)
        self.threads: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        if any("explode" in text for text in texts):
            time.sleep(0.02)
            raise RuntimeError("the encoder failed")
        return super().embed(texts)


@contextmanager
def _recorded(location: str) -> Iterator[tuple[Memory, RecordingEmbedder]]:
    """A filled store opened again with a ``RecordingEmbedder`` and no question held."""
    with _filled(location, KeywordEmbedder(KEYWORDS)):
        pass
    embedder = RecordingEmbedder(KEYWORDS)
    with Memory(location, embedder=embedder, recent_questions=0) as memory:
        yield memory, embedder


def _legs_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == LEGS_THREAD and t.is_alive()]


@pytest.mark.parametrize("settings", ["default", "chat"])
@pytest.mark.parametrize("slow", [True, False])
def test_a_search_returns_what_the_sequential_path_returns(
    engine_location: str,  # noqa: F811
    settings: str,
    slow: bool,
) -> None:
    with _filled(engine_location, KeywordEmbedder(KEYWORDS)):
        pass
    # Slow: the legs end first and the look-ahead runs. Fast: the encoding ends first.
    asked = SlowEmbedder(KEYWORDS) if slow else KeywordEmbedder(KEYWORDS)
    with (
        Memory(engine_location, embedder=asked, recent_questions=0, settings=settings) as beside,
        Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS), settings=settings) as control,
    ):
        for question in QUESTIONS:
            for k in (5, 50):
                for as_of, author in ((None, None), ("2024-03-20", None), (None, "ana")):
                    got = beside.search(question, k=k, as_of=as_of, author=author)
                    control.search(question, k=k, as_of=as_of, author=author)
                    # Its vector is held now: no encoding, every leg in one gather.
                    expected = control.search(question, k=k, as_of=as_of, author=author)
                    assert _snapshot(got) == _snapshot(expected), (question, k, as_of, author)
                    assert [h.id for h in got] == [h.id for h in expected]


def test_where_the_question_is_encoded_and_the_legs_run(
    engine_location: str,  # noqa: F811
) -> None:
    with _recorded(engine_location) as (memory, embedder):
        ran: dict[str, set[str]] = {}

        def observe(name: str, start: int, end: int, attributes) -> None:  # type: ignore[no-untyped-def]
            ran.setdefault(name, set()).add(threading.current_thread().name)

        with stages.observing(observe):  # the observer's context goes with the legs
            for question in QUESTIONS:
                memory.search(question)
        caller = threading.current_thread().name
        if memory.store.__class__.__name__.startswith("SQLite"):
            assert set(embedder.threads) == {caller}
            assert ran[stages.ENCODE] == {caller} and ran[stages.VECTOR] == {caller}
            # The legs that need no vector on one kept thread, reused search after search.
            assert ran[stages.LEXICAL] == {LEGS_THREAD} and ran[stages.TAG] == {LEGS_THREAD}
            assert len(_legs_threads()) >= 1
        else:
            # The encoding on the kept thread (or on the pooled one of a vector leg that
            # asked first), the first plain leg on the caller's, the others pooled.
            assert LEGS_THREAD in set(embedder.threads) and caller not in set(embedder.threads)
            assert ran[stages.LEXICAL] == {caller}
            assert caller not in ran[stages.TAG] and caller not in ran[stages.VECTOR]
        kept = list(memory._beside._threads)
    assert all(not thread.is_alive() for thread in kept)  # ended by close()


def test_an_encoders_error_reaches_the_caller_after_the_legs(
    engine_location: str,  # noqa: F811
) -> None:
    with _recorded(engine_location) as (memory, embedder):
        for _ in range(3):
            embedder.threads.clear()
            with pytest.raises(RuntimeError, match="the encoder failed"):
                memory.search("explode the alpha budget")
            assert len(embedder.threads) == 1  # however many legs asked for the vector
        assert memory.search("alpha budget")  # the helper thread is free again
        assert memory._beside._idle or not memory.store.__class__.__name__.startswith("SQLite")


def test_a_closed_memory_keeps_no_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    before = set(_legs_threads())
    memory = _filled(str(tmp_path / "m.db"), SlowEmbedder(KEYWORDS))
    memory._questions = type(memory._questions)(0)  # every search encodes
    for question in QUESTIONS:
        memory.search(question)
    kept = set(_legs_threads()) - before
    assert len(kept) == 1  # one thread for every search in turn
    memory.close()
    for thread in kept:
        assert not thread.is_alive()


def test_helper_threads_run_at_once_carry_the_context_and_end_on_close() -> None:
    helpers = HelperThreads("mempp-test-helpers", keep=2)
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("v", default="unset")
    variable.set("the caller's")
    gate = threading.Event()
    started: list[str] = []

    def work() -> str:
        started.append(threading.current_thread().name)
        gate.wait(5)
        return variable.get()

    futures = [helpers.submit(work) for _ in range(3)]  # three at once: three threads
    deadline = time.monotonic() + 5
    while len(started) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(started) == 3
    gate.set()
    assert [f.result(5) for f in futures] == ["the caller's"] * 3
    assert len(helpers._threads) == 2  # two kept, the third ended
    idents = {t.ident for t in helpers._threads}
    again = helpers.submit(lambda: threading.get_ident()).result(5)
    assert again in idents  # a kept thread, not a new one

    failing = helpers.submit(lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(5)
    threads = list(helpers._threads)
    helpers.close()
    assert all(not t.is_alive() for t in threads)
    # After close the work runs on the caller's thread.
    assert helpers.submit(threading.get_ident).result(0) == threading.get_ident()


def test_a_legs_error_reaches_the_caller_and_the_next_search_runs(
    engine_location: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _filled(engine_location, KeywordEmbedder(KEYWORDS)):
        pass
    embedder = SlowEmbedder(KEYWORDS)  # the encoding still runs when the lexical leg fails
    with Memory(engine_location, embedder=embedder, recent_questions=0) as memory:
        lexical = memory.store.lexical

        def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise ValueError("the lexical leg failed")

        monkeypatch.setattr(memory.store, "lexical", failing)
        for _ in range(2):
            with pytest.raises(ValueError, match="the lexical leg failed"):
                memory.search("alpha budget")
        monkeypatch.setattr(memory.store, "lexical", lexical)
        assert memory.search("alpha budget")


def test_a_search_nested_in_a_leg_gets_a_thread_of_its_own() -> None:
    # A leg on the kept thread that waits on more work of the same helpers (a nested search)
    # is given another thread: it never waits on the thread it runs on.
    helpers = HelperThreads("mempp-test-nested", keep=1)
    try:
        outer = helpers.submit(lambda: helpers.submit(threading.get_ident).result(5))
        assert outer.result(5) != threading.get_ident()
        again = helpers.submit(lambda: helpers.submit(lambda: 7).result(5))
        assert again.result(5) == 7
    finally:
        helpers.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_searches_without_the_parents_threads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    memory = _filled(str(tmp_path / "m.db"), SlowEmbedder(KEYWORDS))
    memory._questions = type(memory._questions)(0)
    expected = _snapshot(memory.search("alpha budget"))  # a kept thread waits idle now
    assert memory._beside._idle
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome goes through the pipe
        code = 1
        try:
            done = threading.Event()
            got: list[object] = []
            threading.Thread(
                target=lambda: (got.append(_snapshot(memory.search("alpha budget"))), done.set()),
                daemon=True,
            ).start()
            code = 0 if done.wait(10) and got == [expected] else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    try:
        answer = os.read(read, 1)
        os.waitpid(child, 0)
    finally:
        os.close(read)
        memory.close()
    assert answer == b"\x00", "the child's search hung or differed" if answer else "no answer"
