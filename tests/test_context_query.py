"""The context leg at query time (``ctx_source="query"``, ``mempp.search.query_context``): the
sum rule's contexts scored from the stored record vectors, no context index, both engines.

The leak test is ``test_context_leg``'s, run without the index: for every as_of / known_at
bound (and both together) a search of the full store, its context leg included, returns
exactly what the same search returns from a store holding only the records visible under
the bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mempp import Memory
from mempp.errors import InvalidInput
from mempp.settings import Settings, preset
from mempp.store import indexes
from mempp.store.context import CONTEXT_WINDOW, ContextRule, ContextStore
from test_context_leg import AS_OF, BATCHES, KEYWORDS, QUESTIONS, _ctx_leg, _key, _shown, _write

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

# test_context_leg's batches, then a thread where an undated row comes before a row dated
# after it was stored (a date after today): the row's thread walk reaches the undated one,
# which only the date rule keeps out of its context (no as-of bound shows an undated row).
LEAK_BATCHES = [
    *BATCHES,
    [
        ("a", "t4", None, "hal", "hiking with the dog budget"),
        ("a", "t4", "2030-01-02", "ivy", "alpha it was"),
    ],
]
LEAK_AS_OF = [*AS_OF, "2030-06-01"]


def _query(credit: str, **more: Any) -> Settings:
    return preset("default").with_(
        w_lex=0.0, w_ctx=1.0, ctx_credit=credit, ctx_source="query", **more
    )


@pytest.mark.parametrize("credit", ["self", "members"])
def test_no_search_under_a_bound_is_moved_by_a_record_outside_it(
    engine_location: str,  # noqa: F811
    credit: str,
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    settings = _query(credit)
    with (
        Memory(engine_location, scope="a", embedder=embedder) as full,
        Memory(full.store, scope="b", embedder=embedder) as other,
    ):
        assert full.indexes() == ()  # no context index: the leg reads the record vectors
        marks: list[str] = []
        for batch in LEAK_BATCHES:
            marks += _write(full, [batch])
            _write(other, [batch])
        assert _ctx_leg(full, QUESTIONS[0], settings)  # the leg finds something at all
        bounds: list[dict[str, Any]] = [{"as_of": a} for a in LEAK_AS_OF if a is not None]
        bounds += [{"known_at": mark} for mark in marks[:-1]]
        bounds += [{"as_of": "2023-05-04", "known_at": marks[1]}]
        bounds += [{"as_of": "2023-06-01", "known_at": marks[0]}]
        for number, bound in enumerate(bounds):
            known = marks.index(bound["known_at"]) if "known_at" in bound else None
            subset = Memory(full.store, scope=f"subset-{credit}-{number}", embedder=embedder)
            _write(subset, [[("x", *row[1:]) for row in b] for b in _visible(bound, known)])
            for question in QUESTIONS:
                assert _shown(full, question, settings, **bound) == _shown(
                    subset, question, settings
                ), (bound, question)
                assert _ctx_leg(full, question, settings, **bound) == _ctx_leg(
                    subset, question, settings
                ), (bound, question)


def _visible(bound: dict[str, Any], known: int | None) -> list[list[tuple[Any, ...]]]:
    """Scope a's rows of LEAK_BATCHES as a store holding only those visible under ``bound``
    would have received them (batch by batch; an empty batch past ``known``)."""
    limit = _key(bound.get("as_of"))
    kept: list[list[tuple[Any, ...]]] = []
    for number, batch in enumerate(LEAK_BATCHES):
        kept.append(
            [
                row
                for row in batch
                if row[0] == "a"
                and (known is None or number <= known)
                and (limit is None or (row[2] is not None and _key(row[2] + "T00:00:00") <= limit))
            ]
        )
    return kept


@pytest.mark.parametrize("credit", ["self", "members"])
def test_it_equals_the_sum_rule_index_when_every_row_is_a_candidate(
    engine_location: str,  # noqa: F811
    credit: str,
) -> None:
    """With C above the store's size every row is a candidate: the leg is the index's."""
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, scope="a", embedder=embedder) as memory:
        for batch in BATCHES:
            _write(memory, [batch])
        query = _query(credit)
        without = {q: _ctx_leg(memory, q, query) for q in QUESTIONS}
        memory.enable_context(rule=ContextRule("sum", 2, decay=0.5))
        stored = _query(credit).with_(ctx_source="index")
        for question in QUESTIONS:
            assert _ctx_leg(memory, question, query) == _ctx_leg(memory, question, stored)
            assert without[question] == _ctx_leg(memory, question, query)
            # The two legs' scores, not only their order: the fused lists are the same too.
            assert _shown(memory, question, query) == _shown(memory, question, stored)
        assert any(without.values())


def test_it_sees_only_the_vector_legs_candidates_and_their_followers(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        rows = memory.add_many(
            [
                {"text": "alpha", "date": "2023-01-01", "thread": "t"},
                {"text": "beta", "date": "2023-01-02", "thread": "t"},
                {"text": "gamma", "date": "2023-01-03", "thread": "t"},
                {"text": "delta", "date": "2023-01-04", "thread": "t"},
            ]
        )
        ids = [r.id for r in rows]
        # C = 1: the vector leg's one row is "alpha"; its two followers are the candidates
        # beside it ("alpha" itself has no predecessor, so no context), "delta" is not one.
        settings = _query("self", candidates=1)
        legs = memory.legs("alpha", as_of=None, settings=settings)
        assert legs.vec == [ids[0]]
        assert legs.ctx == [ids[1]]  # at most C rows, the best of beta's and gamma's
        assert ids[3] not in legs.ctx
        wider = memory.legs("alpha", as_of=None, settings=_query("self", candidates=4))
        assert sorted(wider.ctx) == ids[1:]  # every threaded row is a candidate now
        hits = memory.search("alpha", settings=_query("members"), k=4)
        assert any("ctx" in h.leg_ranks for h in hits)  # shown like the other legs


def test_it_needs_no_index_and_checks_its_setting(tmp_path: Any) -> None:
    assert "context" not in indexes.needed(_query("members"))
    assert "context" in indexes.needed(_query("members").with_(ctx_source="index"))
    with pytest.raises(InvalidInput, match="ctx_source"):
        preset("default").with_(ctx_source="stored")
    with Memory(str(tmp_path / "m.db"), embedder=KeywordEmbedder(KEYWORDS)) as memory:
        assert memory.search("alpha", settings=_query("members")) == []  # empty store
        memory.add("alpha", thread="t")
        memory.add("beta", thread="t")
        # The vector leg off: the candidates are still the nearest rows.
        settings = _query("self").with_(w_vec=0.0)
        assert memory.legs("alpha", as_of=None, settings=settings).ctx == [2]


def test_both_engines_rank_alike(tmp_path: Any, pg_url: str) -> None:  # noqa: F811
    embedder = KeywordEmbedder(KEYWORDS)
    found = []
    for location in (str(tmp_path / "a.db"), pg_url):
        with Memory(location, scope="a", embedder=embedder) as memory:
            for batch in BATCHES:
                _write(memory, [batch])
            found.append(
                [
                    [
                        (h.record.text, h.leg_ranks.get("ctx"))
                        for h in memory.search(q, settings=_query(c, candidates=c_rows), k=10)
                    ]
                    for q in QUESTIONS
                    for c in ("self", "members")
                    for c_rows in (2, 200)
                ]
            )
    assert found[0] == found[1]
    assert np.any([any(r for _, r in hits) for hits in found[0]])


def test_a_batched_read_picks_what_the_whole_window_picks(
    engine_location: str,  # noqa: F811
) -> None:
    """The batched walk reads a few rows of each thread; a record whose predecessors lie further
    back (late arrivals between them, which it may not read) is read whole, as the index's
    own write reads it."""
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(rule=ContextRule("sum", 2, decay=0.5))
        first = memory.add("alpha first", date="2023-01-01", thread="t").id
        record = memory.add("beta record", date="2023-01-30", thread="t").id
        late = memory.add_many(
            [
                {"text": f"gamma late {i}", "date": f"2023-01-{2 + i:02d}", "thread": "t"}
                for i in range(20)
            ]
        )
        reverse = memory.add_many(
            [
                {"text": f"delta {i}", "date": f"2023-03-{28 - i:02d}", "thread": "r"}
                for i in range(5)
            ]
        )
        memory.add("undated", thread="t")
        # More rows at one place in a thread (one date) than the rule's window holds: the
        # rows stored after a record there fill its window before its predecessors.
        same = memory.add_many(
            [
                {"text": f"beta same {i}", "date": "2023-05-01", "thread": "s"}
                for i in range(CONTEXT_WINDOW + 8)
            ]
        )
        ids = [first, record, *(r.id for r in late), *(r.id for r in reverse)]
        ids += [r.id for r in same[:12]] + [r.id for r in same[-12:]]
        ids = [i for i in ids if i is not None] + [ids[-1] + 1]
        store = memory.store
        assert isinstance(store, ContextStore)
        read = store.sum_sources(ids, 2)
        # The rule applied to the rows as they are now (a rebuild's reading) ...
        rule = {s.record_id: s.members for s in store.context_sources(ids) if s.members}
        assert {row: members for row, (members, _) in read.items()} == rule
        # ... which is what each write read, but where more rows stored later sit at a
        # record's place than its window holds: then it reads fewer (never others).
        written = {row: members for row, members in store.context_members(ids).items() if members}
        crowded = {r.id for r in same}
        assert {r: m for r, m in rule.items() if r not in crowded} == {
            r: m for r, m in written.items() if r not in crowded
        }
        assert rule[same[-1].id] == written[same[-1].id]  # the last: nothing after it
        assert same[1].id not in rule and written[same[1].id] == (same[0].id,)
        assert read[record][0] == (first,)  # found past the 20 late rows
        for row, (members, vectors) in read.items():
            own = store.sum_sources([row], 2)[row]
            assert own[0] == members and np.array_equal(own[1], vectors)


class _ThirdPartyStore:
    """A store of someone else's: every ``Store`` method (the engine's), none of the context
    index's (``ContextStore``)."""

    _CONTEXT_ONLY = frozenset(name for name in vars(ContextStore) if not name.startswith("_"))

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in self._CONTEXT_ONLY:
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_another_store_refuses_the_leg_at_the_boundary_in_one_line(
    engine_location: str,  # noqa: F811
) -> None:
    from mempp.store import Store, open_store

    store = _ThirdPartyStore(open_store(engine_location))
    assert isinstance(store, Store) and not isinstance(store, ContextStore)
    with Memory(store, embedder=KeywordEmbedder(KEYWORDS)) as memory:  # type: ignore[arg-type]
        memory.add("alpha", thread="t")
        memory.add("beta", thread="t")
        for settings in (_query("members"), preset("chat")):
            with pytest.raises(indexes.LegUnsupported, match="ctx_source='query'") as raised:
                memory.search("alpha", settings=settings)
            assert raised.value.field == "ctx_source"
            assert "\n" not in str(raised.value)
        # Without the leg it searches as before; the engine itself runs the leg.
        assert memory.search("alpha", settings=_query("self").with_(w_ctx=0))
    with Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        assert memory.legs("beta", as_of=None, settings=_query("self").with_(w_vec=0.0)).ctx


def test_a_search_asks_the_store_for_its_indexes_once(
    engine_location: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        memory.enable_index("keyword")
        memory.add("alpha", thread="t")
        real = type(memory.store).indexes
        asked: list[int] = []
        monkeypatch.setattr(
            type(memory.store), "indexes", lambda self: asked.append(1) or real(self)
        )
        assert memory.search("alpha", settings=preset("default-keyword"))
        assert len(asked) == 1
