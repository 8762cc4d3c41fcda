"""The fusion's row look-ups (thread followers, recency keys) may be made early, while the
question is still being encoded, for the rows the other legs found: a search then returns
exactly what the sequential path returns, on both engines, and no row is looked up twice."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from mempp import Memory
from mempp.dates import parse_as_of
from mempp.search import stages
from mempp.search.row_facts import RowFacts
from mempp.settings import preset

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

KEYWORDS = ["alpha", "beta", "gamma", "budget", "launch"]
QUESTIONS = (
    "alpha budget for the launch",
    "what did ana say about gamma",
    "beta launch on 2024-03-07",
    "the budget in March 2024",
    "nothing matches this",
)


class SlowEmbedder(KeywordEmbedder):
    """Encodes like KeywordEmbedder after a pause (the GIL released, as by ONNX Runtime), so
    that the legs that need no vector finish first and the look-ahead runs."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.05)
        return super().embed(texts)


def _filled(location: str, embedder: KeywordEmbedder) -> Memory:
    memory = Memory(location, embedder=embedder)
    words = ["alpha", "beta", "gamma", "budget", "launch", "note", "plan"]
    for i in range(60):
        memory.add(
            f"{words[i % 7]} {words[(i * 3) % 7]} update {i}",
            author=("ana", "bo", "cy")[i % 3],
            date=None if i % 11 == 0 else f"2024-03-{1 + i % 28:02d}",
            tags=[words[(i * 5) % 7]] if i % 4 == 0 else [],
            thread=f"t{i % 6}",
        )
    return memory


def _snapshot(hits) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [(h.id, h.rank, h.score, sorted(h.leg_ranks.items()), h.reserved) for h in hits]


def test_a_search_that_looks_ahead_returns_what_the_sequential_path_returns(
    engine_location: str,  # noqa: F811
) -> None:
    settings = preset("default")
    assert settings.thread_weight > 0 and settings.reserve_slots(settings.k) > 0
    with _filled(engine_location, KeywordEmbedder(KEYWORDS)) as filled:
        store = filled.store
    with (
        Memory(engine_location, embedder=SlowEmbedder(KEYWORDS), recent_questions=0) as slow,
        Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS)) as control,
    ):
        looked_ahead: list[int] = []

        def observe(name: str, start: int, end: int, attributes) -> None:  # type: ignore[no-untyped-def]
            if name == stages.LOOK_AHEAD:
                looked_ahead.append(attributes["rows"])

        for question in QUESTIONS:
            for k in (5, 50):
                for as_of in (None, "2024-03-20"):
                    with stages.observing(observe):
                        got = slow.search(question, k=k, as_of=as_of)
                    control.search(question, k=k, as_of=as_of)  # its vector is held now:
                    expected = control.search(question, k=k, as_of=as_of)  # no thread at all
                    assert _snapshot(got) == _snapshot(expected), (question, k, as_of)
        if store.__class__.__name__.startswith("SQLite"):
            # The legs run in turn on SQLite: every search with rows found looked ahead.
            assert len(looked_ahead) >= 4 * 2 * 2 and min(looked_ahead) > 0


def test_row_facts_ask_each_row_once_and_answer_as_the_store_does(tmp_path) -> None:
    location = str(tmp_path / "m.db")
    settings = preset("default")
    with _filled(location, KeywordEmbedder(KEYWORDS)) as memory:
        store, scope = memory.store, memory.scope
        asked: list[tuple[str, list[int]]] = []
        followers_of, keys_of = store.thread_followers, store.recency_keys

        def thread_followers(scope, ids, as_of, depth, *, filters):  # type: ignore[no-untyped-def]
            asked.append(("followers", list(ids)))
            return followers_of(scope, ids, as_of, depth, filters=filters)

        def recency_keys(scope, ids):  # type: ignore[no-untyped-def]
            asked.append(("keys", list(ids)))
            return keys_of(scope, ids)

        store.thread_followers = thread_followers  # type: ignore[method-assign]
        store.recency_keys = recency_keys  # type: ignore[method-assign]
        bound = parse_as_of("2024-03-20")
        ids = [*range(1, 61), 10_000]  # the last: no such row
        facts = RowFacts(store, scope, bound, settings, settings.k)
        facts.look_ahead(ids[:30], waiting=lambda: True)
        assert [kind for kind, _ in asked] == ["followers", "keys"]
        assert set(asked[0][1]) == set(ids[:30])
        first_keys = asked[1][1]
        # Only the rows asked for, though more are held.
        assert facts.followers(ids[:5]) == followers_of(scope, ids[:5], bound, 2)
        assert facts.recency_keys(ids[:5]) == keys_of(scope, ids[:5])
        assert len(asked) == 2
        # Once the vector is there, the look-ahead stops after the followers.
        asked.clear()
        other = RowFacts(store, scope, bound, settings, settings.k)
        other.look_ahead(ids[:30], waiting=lambda: False)
        assert [kind for kind, _ in asked] == ["followers"]
        asked.clear()
        followers = facts.followers(ids)
        keys = facts.recency_keys(ids)
        assert asked[0] == ("followers", ids[30:])
        assert set(asked[1][1]) == set(ids) - set(first_keys)  # the followers' keys were in
        assert followers == followers_of(scope, ids, bound, settings.thread_depth)
        assert keys == keys_of(scope, ids)
        count = len(asked)
        assert facts.followers(ids) == followers and facts.recency_keys(ids) == keys
        assert len(asked) == count  # nothing asked twice, the missing row included
