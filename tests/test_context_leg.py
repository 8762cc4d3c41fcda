"""The context leg (issue 37): a second vector per record over the record read after its
predecessors in its thread, on both engines.

The leak test comes first. Records of two tenant scopes are written out of date order, in
batches, with late arrivals into threads and an undated record. For every as_of / known_at
bound (and both together), a search of the full store must return exactly what the same
search returns from a store holding only the records visible under that bound, written in
the same order and batches. The lexical leg is off in those searches: its BM25 statistics
are the whole table's by design (docs/architecture.md, "Lexical ranking at scale"); every
other stage (tag, vector and context legs, date leg, thread context, recency slots) is on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mempp import Memory
from mempp.context import context_text
from mempp.errors import InvalidInput
from mempp.settings import preset
from mempp.store.context import CONTEXT_WINDOW, ContextRule, ContextStore
from mempp.store.indexes import IndexMissing

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

KEYWORDS = ["alpha", "beta", "gamma", "delta", "budget", "launch", "hiking", "dog"]
# (scope, thread, date, author, text), written batch by batch in this order.
BATCHES: list[list[tuple[str, str | None, str | None, str, str]]] = [
    [
        ("a", "t1", "2023-05-03", "ann", "the budget review for alpha"),
        ("b", "t1", "2023-05-01", "bob", "hiking with the dog gamma gamma"),
        ("a", "t1", "2023-05-04", "bea", "yes, last tuesday"),
        ("a", "t2", "2023-06-01", "ann", "launch plan delta"),
    ],
    [
        # A late arrival into t1, dated before everything there.
        ("a", "t1", "2023-05-01", "cid", "hiking with the dog"),
        ("b", "t1", "2023-05-02", "bob", "budget budget alpha"),
        ("a", "t2", None, "bea", "sounds good to me"),
        ("a", "t1", "2023-05-05", "ann", "great, noted"),
    ],
    [
        ("a", "t2", "2023-05-20", "cid", "beta launch moved"),
        ("a", "t1", "2023-05-04", "dan", "was it fun"),
        ("a", None, "2023-05-10", "ann", "gamma notes budget"),
        ("b", "t2", "2023-06-02", "bob", "launch launch delta"),
    ],
    [
        ("a", "t3", "2023-05-06", "eve", "dog walk at noon"),
        ("a", "t3", "2023-05-06", "fay", "ok, see you"),
        ("a", "t1", "2023-05-02", "gus", "indeed it was"),
    ],
]
QUESTIONS = [
    "when did they go hiking with the dog",
    "what about the budget for alpha",
    "launch delta",
    "the and of",  # stop words only
    "会议 预算",  # another script
]
AS_OF = [None, "2023-05-01", "2023-05-03", "2023-05-04", "2023-05-20", "2023-06-01"]


def _settings(credit: str) -> Any:
    return preset("default").with_(w_lex=0.0, w_ctx=1.0, ctx_credit=credit)


def _write(memory: Memory, batches: Sequence[Sequence[tuple[Any, ...]]]) -> list[str]:
    """Write each batch's rows of ``memory``'s scope (or marked "x"); the time after each."""
    marks = []
    for batch in batches:
        docs = [
            {"text": text, "author": author, "date": date, "thread": thread}
            for scope, thread, date, author, text in batch
            if scope in (memory.scope, "x")  # "x": a subset store's rows, any scope name
        ]
        if docs:
            memory.add_many(docs)
        time.sleep(0.002)
        marks.append(_now_iso())
        time.sleep(0.002)
    return marks


def _now_iso() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat()


def _key(date: str | None) -> int | None:
    from mempp.dates import parse_as_of

    return None if date is None else parse_as_of(date)


def _visible(as_of: str | None, known: int | None) -> list[list[tuple[Any, ...]]]:
    """The batches as a store that held only the rows visible under the bound would have
    received them."""
    bound = _key(as_of)
    kept = []
    for number, batch in enumerate(BATCHES):
        if known is not None and number > known:
            kept.append([])
            continue
        rows = []
        for row in batch:
            date = row[2]
            if bound is not None and (date is None or _key(date + "T00:00:00") > bound):
                continue
            rows.append(row)
        kept.append(rows)
    return kept


def _shown(memory: Memory, question: str, settings: Any, **bound: Any) -> list[tuple[Any, ...]]:
    hits = memory.search(question, k=10, settings=settings, **bound)
    return [(h.record.text, h.record.date, h.reserved) for h in hits]


def _ctx_leg(memory: Memory, question: str, settings: Any, **bound: Any) -> list[str]:
    from mempp.filters import Filters

    filters = Filters.create(known_at=bound.get("known_at"))
    as_of = _key(bound.get("as_of"))
    legs = memory.legs(question, as_of=as_of, settings=settings, filters=filters)
    records = memory.store.get(memory.scope, legs.ctx)
    return [records[i].text for i in legs.ctx]


@pytest.mark.parametrize("credit", ["self", "members"])
@pytest.mark.parametrize(
    "rule", [ContextRule("text", 2), ContextRule("sum", 2, decay=0.5)], ids=["text", "sum"]
)
def test_no_search_under_a_bound_is_moved_by_a_record_outside_it(
    engine_location: str,  # noqa: F811
    credit: str,
    rule: ContextRule,
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    settings = _settings(credit)
    with (
        Memory(engine_location, scope="a", embedder=embedder) as full,
        Memory(full.store, scope="b", embedder=embedder) as other,
    ):
        full.enable_context(rule=rule)
        marks: list[str] = []
        for batch in BATCHES:  # both tenants' rows interleaved, batch by batch
            marks += _write(full, [batch])
            _write(other, [batch])
        bounds: list[dict[str, Any]] = [{"as_of": a} for a in AS_OF if a is not None]
        bounds += [{"known_at": mark} for mark in marks[:-1]]
        bounds += [{"as_of": "2023-05-04", "known_at": marks[1]}]
        bounds += [{"as_of": "2023-06-01", "known_at": marks[0]}]
        for number, bound in enumerate(bounds):
            known = marks.index(bound["known_at"]) if "known_at" in bound else None
            subset = Memory(full.store, scope=f"subset-{credit}-{number}", embedder=embedder)
            _write(subset, [[("x", *row[1:]) for row in b] for b in _visible_in(bound, known)])
            for question in QUESTIONS:
                assert _shown(full, question, settings, **bound) == _shown(
                    subset, question, settings
                ), (bound, question)
                assert _ctx_leg(full, question, settings, **bound) == _ctx_leg(
                    subset, question, settings
                ), (bound, question)


def _visible_in(bound: dict[str, Any], known: int | None) -> list[list[tuple[Any, ...]]]:
    rows = _visible(bound.get("as_of"), known)
    return [[r for r in batch if r[0] == "a"] for batch in rows]


def _contexts(store: ContextStore, ids: Sequence[int]) -> dict[int, tuple[int, ...]]:
    return store.context_members(ids)


def test_a_late_arrival_leaves_earlier_contexts_alone(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(2)
        first = memory.add_many(
            [
                {"text": "alpha one", "date": "2023-01-02", "thread": "t"},
                {"text": "beta two", "date": "2023-01-03", "thread": "t"},
                {"text": "gamma three", "date": "2023-01-04", "thread": "t"},
            ]
        )
        ids = [r.id for r in first]
        store = memory.store
        assert isinstance(store, ContextStore)
        before = _contexts(store, ids)
        assert before == {ids[0]: (), ids[1]: (ids[0],), ids[2]: (ids[0], ids[1])}
        vectors_before = memory.legs("alpha", as_of=None, settings=_settings("self")).ctx
        late = memory.add("delta late", date="2023-01-03", thread="t").id
        undated = memory.add("undated note", thread="t").id
        assert late is not None and undated is not None
        after = _contexts(store, [*ids, late, undated])
        assert {i: after[i] for i in ids} == before  # nothing stored earlier was rewritten
        # The late row reads the rows stored before it dated no later than it.
        assert after[late] == (ids[0], ids[1])
        # An undated row is placed at its ingest time: after every dated row here, the late
        # one (dated 2023-01-03) before the row dated 2023-01-04 in thread order.
        assert after[undated] == (late, ids[2])
        # Their vectors too: among them the leg's order is what it was.
        now = memory.legs("alpha", as_of=None, settings=_settings("self")).ctx
        assert [i for i in now if i in ids] == vectors_before


def test_dated_records_never_read_undated_or_later_rows(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(3)
        undated = memory.add("an undated wiki page", thread="t").id
        later = memory.add("written first, dated later", date="2024-02-01", thread="t").id
        dated = memory.add("dated earlier", date="2024-01-01", thread="t").id
        store = memory.store
        assert isinstance(store, ContextStore)
        members = store.context_members([undated, later, dated])
        assert members[dated] == ()  # neither the undated row nor the later-dated one
        assert members[later] == ()
        assert members[undated] == ()


def test_one_record_threads_reverse_order_and_long_threads(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(2)
        alone = memory.add("alpha alone", date="2023-01-01", thread="single").id
        # Reverse date order: every row is dated before every row stored before it.
        reverse = memory.add_many(
            [
                {"text": f"beta {i}", "date": f"2023-03-{28 - i:02d}", "thread": "rev"}
                for i in range(20)
            ]
        )
        # A thread longer than the window, in order.
        long = memory.add_many(
            [
                {
                    "text": f"gamma {i}",
                    "date": f"2023-04-01T00:{i // 60:02d}:{i % 60:02d}",
                    "thread": "long",
                }
                for i in range(CONTEXT_WINDOW + 40)
            ],
            batch_size=64,
        )
        store = memory.store
        assert isinstance(store, ContextStore)
        members = store.context_members([alone, *(r.id for r in reverse), long[-1].id])
        assert members[alone] == ()
        assert all(members[r.id] == () for r in reverse)
        assert members[long[-1].id] == (long[-3].id, long[-2].id)
        assert store.context_count()[0] == store.context_count()[1]
        for question in ("the and of", "会议 预算", "gamma"):
            memory.search(question, settings=_settings("members"))


def test_an_erasure_takes_its_text_out_of_every_context(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(2)
        rows = memory.add_many(
            [
                {"text": "budget secret alpha", "date": "2023-01-01", "thread": "t"},
                {"text": "ok", "date": "2023-01-02", "thread": "t"},
                {"text": "fine", "date": "2023-01-03", "thread": "t"},
                {"text": "later", "date": "2023-01-04", "thread": "t"},
            ]
        )
        ids = [r.id for r in rows]
        store = memory.store
        assert isinstance(store, ContextStore)
        assert ids[0] in store.context_members([ids[1]])[ids[1]]
        memory.redact(ids[0], reason="test")
        members = store.context_members(ids)
        assert ids[0] not in members  # its own context went
        assert all(ids[0] not in m for m in members.values())
        # The contexts that read it were encoded again, without it.
        assert members[ids[1]] == ()
        assert members[ids[2]] == (ids[1],)
        hits = memory.legs("budget alpha", as_of=None, settings=_settings("self")).ctx
        records = store.get(memory.scope, hits)
        assert all("budget" not in records[i].text for i in hits)
        sources = store.context_sources([ids[2]])
        assert "secret" not in context_text(sources[0])


def test_a_new_version_in_a_thread_reads_what_came_before(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(2)
        old = memory.add("launch on monday", date="2023-01-01", thread="t").id
        reply = memory.add("ok", date="2023-01-02", thread="t").id
        new = memory.add("launch on tuesday", date="2023-01-03", thread="t").id
        assert old is not None and new is not None and reply is not None
        memory.supersede(old, by=new, reason="moved")
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_members([new])[new] == (old, reply)
        for credit in ("self", "members"):
            hits = memory.search("launch", settings=_settings(credit), k=3)
            assert {h.record.id for h in hits} == {old, reply, new}


def test_the_index_is_opt_in_and_its_depth_is_checked(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.add_many([{"text": "alpha", "thread": "t"}, {"text": "beta", "thread": "t"}])
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_depth() is None
        assert store.context_count()[0] == 0
        # With the index off a search that asks for the leg fails, naming the command.
        with pytest.raises(IndexMissing, match="mempp index enable context"):
            memory.search("alpha", settings=_settings("self"))
        assert memory.search("alpha")  # the default reads no context
        for bad in (0, 9, "2", True):
            with pytest.raises(InvalidInput, match="depth"):
                memory.enable_context(bad)  # type: ignore[arg-type]
        assert memory.enable_context(1) == 2  # the stored rows, encoded now
        assert store.context_count() == (2, 2)
        hits = memory.search("beta", settings=_settings("self"), k=2)
        assert "ctx" in hits[0].leg_ranks
        assert memory.enable_context(2) == 2  # another depth: encoded again
        assert memory.indexes() == ("context",)
        assert {c.name: c.ok for c in memory.verify()}["context index"]
        assert memory.disable_index("context")
        assert store.context_depth() is None
        assert "context index" not in {c.name for c in memory.verify()}
        with pytest.raises(IndexMissing):
            memory.search("alpha", settings=_settings("self"))


def test_both_engines_rank_alike(tmp_path: Any, pg_url: str) -> None:  # noqa: F811
    embedder = KeywordEmbedder(KEYWORDS)
    found = []
    for location in (str(tmp_path / "a.db"), pg_url):
        with Memory(location, scope="a", embedder=embedder) as memory:
            memory.enable_context(2)
            for batch in BATCHES:
                _write(memory, [batch])
            found.append(
                [
                    [
                        (h.record.text, h.leg_ranks.get("ctx"))
                        for h in memory.search(q, settings=_settings(c), k=10)
                    ]
                    for q in QUESTIONS
                    for c in ("self", "members")
                ]
            )
    assert found[0] == found[1]
    assert np.any([any(r for _, r in hits) for hits in found[0]])


@pytest.mark.parametrize("vectors", [True, False])
def test_dump_and_restore_carry_the_index_and_encode_it_again(
    tmp_path: Any,
    pg_url: str,  # noqa: F811
    vectors: bool,
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    source = str(tmp_path / "source.db")
    with Memory(source, scope="a", embedder=embedder) as memory:
        memory.enable_context(3)
        for batch in BATCHES:
            _write(memory, [batch])
        memory.redact(memory.search("secret budget alpha", k=1)[0].record.id, reason="test")
        snapshot = tmp_path / "snap.dump"
        memory.dump(snapshot, vectors=vectors)
        expected = [_shown(memory, q, _settings("members")) for q in QUESTIONS]
        depth = memory.store.context_depth()
    for target in (str(tmp_path / "copy.db"), pg_url):
        with Memory(target, scope="a", embedder=embedder) as copy:
            report = copy.restore(snapshot)
            assert "context" in report.indexes
            store = copy.store
            assert isinstance(store, ContextStore)
            # The snapshot carries the index's rule (its depth too): made again by it.
            assert store.context_depth() == depth
            assert copy.enable_context(depth) == 0
            assert store.context_count()[0] == store.context_count()[1]
            assert [_shown(copy, q, _settings("members")) for q in QUESTIONS] == expected
            assert all(check.ok for check in copy.verify())


def test_reembed_encodes_the_contexts_again(
    engine_location: str,  # noqa: F811
) -> None:
    with Memory(engine_location, scope="a", embedder=KeywordEmbedder(KEYWORDS)) as memory:
        memory.enable_context(2)
        for batch in BATCHES:
            _write(memory, [batch])
        other = KeywordEmbedder([*KEYWORDS, "noon"])
        memory.reembed(other)
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_encoder() == (other.name, other.dim)
        assert store.context_depth() == 2
        assert store.context_count()[0] == store.context_count()[1]
        # "noon" is an axis of the new encoder only: the one context that reads it comes first
        # in the leg (the row holding it has no predecessor, so no context of its own).
        hits = memory.search("noon", settings=_settings("self"), k=3)
        first = [h.record.text for h in hits if h.leg_ranks.get("ctx") == 1]
        assert first == ["ok, see you"]
        assert all(check.ok for check in memory.verify())


def test_a_write_walks_its_thread_by_the_index_not_the_thread(tmp_path: Any) -> None:
    """Bounded work in a thread of any length: the walk a write makes is a backward range on
    records_thread, no sort, stopped after CONTEXT_WINDOW entries (the statement the store
    runs, traced, then explained; the reverse-order test above shows the limit's effect)."""
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(tmp_path / "plan.db", embedder=embedder) as memory:
        memory.enable_context(2)
        memory.add_many([{"text": f"alpha {i}", "thread": "t"} for i in range(50)])
        store = memory.store
        conn = store._conn  # type: ignore[attr-defined]
        ran: list[str] = []
        conn.set_trace_callback(ran.append)
        try:
            assert isinstance(store, ContextStore)
            store.context_sources([50])
        finally:
            conn.set_trace_callback(None)
        walks = [sql for sql in ran if "records_thread" in sql]
        assert len(walks) == 1 and f"LIMIT {CONTEXT_WINDOW}" in walks[0]
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + walks[0]))
    assert "USING INDEX records_thread" in plan and "TEMP B-TREE" not in plan


def test_the_cli_enables_the_context_index_and_encodes_it(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mempp index enable context` on a store of the default encoder: every record's context
    is encoded there and then, and the preset that reads it searches."""
    from mempp.cli.main import main

    db = str(tmp_path / "cli.db")
    for text in ("Did you take the dog hiking?", "Yes, last Tuesday!"):
        assert main(["--db", db, "add", text, "--thread", "s1", "--date", "2024-01-01"]) == 0
    assert main(["--db", db, "search", "hiking", "--preset", "default-keyword-context"]) == 2
    assert "`mempp index enable" in capsys.readouterr().err
    assert main(["--db", db, "index", "enable", "keyword"]) == 0
    assert main(["--db", db, "index", "enable", "context"]) == 0
    assert "context" in capsys.readouterr().out
    with Memory(db) as memory:
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_count() == (2, 2)
    assert main(["--db", db, "search", "hiking", "--preset", "default-keyword-context"]) == 0
    assert "ctx" in capsys.readouterr().out
