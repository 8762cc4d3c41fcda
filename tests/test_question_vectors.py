"""A question asked again is not encoded again: its vector is held per Memory (per scope),
bounded, read-only, and the search it serves is the one a fresh encoding gives, on both
engines."""

from __future__ import annotations

import numpy as np
import pytest

from mempp import InvalidInput, Memory
from mempp.search.question_vectors import RECENT_QUESTIONS, QuestionVectors
from mempp.store import open_store

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures


def _filled(location: str, embedder: KeywordEmbedder, scope: str = "default") -> Memory:
    memory = Memory(location, scope=scope, embedder=embedder)
    for day in range(1, 21):
        word = ("alpha", "beta")[day % 2]
        memory.add(f"{word} note {day}", author="ana", date=f"2024-03-{day:02d}")
    return memory


def test_asked_again_the_question_is_not_encoded_and_the_results_are_the_same(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(["alpha", "beta"])
    with _filled(engine_location, embedder) as memory:
        fresh = KeywordEmbedder(["alpha", "beta"])  # same name and geometry, never cached
        with Memory(memory.store, embedder=fresh) as control:
            calls = embedder.calls
            for as_of in (None, "2024-03-15", "2024-03-05", None):
                hits = memory.search("alpha note", as_of=as_of, k=5)
                expected = control.search("alpha note", as_of=as_of, k=5)
                assert [h.id for h in hits] == [h.id for h in expected]
            assert embedder.calls == calls + 1  # the first search only
            calls = embedder.calls
            memory.evidence("alpha note", as_of="2024-03-10")  # the same question: no call
            memory.search("beta note")  # a new one: one call
            assert embedder.calls == calls + 1


def test_a_held_vector_skips_the_encoding(tmp_path) -> None:
    embedder = KeywordEmbedder(["alpha", "beta"])
    with _filled(str(tmp_path / "m.db"), embedder) as memory:
        memory.search("alpha")
        calls = embedder.calls
        memory.search("alpha", as_of="2024-03-09")  # held: the encoder is not asked again
        assert embedder.calls == calls
        memory.search("beta")
        assert embedder.calls == calls + 1


def test_each_scope_holds_its_own_and_the_oldest_question_leaves_first(tmp_path) -> None:
    embedder = KeywordEmbedder(["alpha", "beta"])
    store = open_store(str(tmp_path / "m.db"))
    with _filled(store, embedder, scope="a") as a:  # type: ignore[arg-type]
        b = _filled(store, embedder, scope="b")  # type: ignore[arg-type]
        a.search("alpha")
        calls = embedder.calls
        b.search("alpha")  # another tenant's question: encoded for this one
        assert embedder.calls == calls + 1
        for i in range(RECENT_QUESTIONS):
            a.search(f"beta {i}")
        calls = embedder.calls
        a.search(f"beta {RECENT_QUESTIONS - 1}")  # held
        a.search("alpha")  # pushed out by the 64 since
        assert embedder.calls == calls + 1


def test_held_vectors_are_read_only_copies_bounded_by_size() -> None:
    held = QuestionVectors(size=2)
    given = np.ones(3, dtype=np.float32)
    kept = held.put("enc", "q1", given)
    given[0] = 5  # the encoder's array changing afterwards changes nothing held
    got = held.get("enc", "q1")
    assert got is kept and got is not None and got[0] == 1
    with pytest.raises(ValueError):
        got[0] = 2
    assert held.get("other encoder", "q1") is None
    held.put("enc", "q2", given)
    held.get("enc", "q1")  # used: q2 is now the least recent
    held.put("enc", "q3", given)
    assert len(held) == 2
    assert held.get("enc", "q2") is None and held.get("enc", "q1") is not None


def test_zero_holds_none_and_a_bad_size_is_refused_by_name(tmp_path) -> None:
    embedder = KeywordEmbedder(["alpha", "beta"])
    filled = _filled(str(tmp_path / "m.db"), embedder)
    with Memory(filled.store, embedder=embedder, recent_questions=0) as memory:
        calls = embedder.calls
        memory.search("alpha")
        memory.search("alpha", as_of="2024-03-09")
        assert embedder.calls == calls + 2
    for bad in (-1, 1.5, "64", True, None, 1 << 21):
        with pytest.raises(InvalidInput, match="recent_questions"):
            Memory(str(tmp_path / "m.db"), recent_questions=bad)  # type: ignore[arg-type]
