"""One suite, three implementations of the ``Memory`` API: ``Memory`` in process, ``Client``
and ``AsyncClient`` over a real uvicorn on loopback, each on both engines.

Every test is written once against ``m`` and must pass for all of them: the same return
types with the same values, the same exceptions naming the same fields. What only the
clients do (keys, retries, idempotency, uploads) is in tests/test_client_http.py.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mempp import AsyncClient, Client, Memory
from mempp.errors import InvalidInput, RecordNotFound
from mempp.filters import Filters
from mempp.llm.answer import Answer
from mempp.llm.consolidate import UndoReport
from mempp.records import AddResult, Document, Hit, Record
from mempp.search.evidence import Evidence
from mempp.search.packing import PackingOptions
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.timeline import Changes, Correction, HistoryEntry

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, fast_client
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]
KINDS = ("memory", "client", "async")


class Synced:
    """An ``AsyncClient`` driven from sync tests: each coroutine runs on one private loop
    (the one its connections belong to); async iterators are read to the end."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._runner = asyncio.Runner()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if inspect.isasyncgenfunction(attr):
            return lambda *a, **k: iter(self._runner.run(_collect(attr(*a, **k))))
        if inspect.iscoroutinefunction(attr):
            return lambda *a, **k: self._runner.run(attr(*a, **k))
        return attr

    def __len__(self) -> int:
        return self._runner.run(self._client.info()).active

    def close(self) -> None:
        self._runner.run(self._client.close())
        self._runner.close()


async def _collect(items: Any) -> list[Any]:
    return [item async for item in items]


@dataclass
class Impl:
    kind: str
    m: Any
    fake: FakeOpenAI
    ask_args: dict[str, Any] = field(default_factory=dict)  # Memory takes the model per call


@pytest.fixture(params=KINDS)
def impl(request: pytest.FixtureRequest, engine_location: str) -> Iterator[Impl]:  # noqa: F811
    kind = request.param
    with FakeOpenAI() as fake:
        if kind == "memory":
            memory = Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS))
            try:
                yield Impl(kind, memory, fake, {"llm": fast_client(fake)})
            finally:
                memory.close()
            return
        state = ServerState(
            engine_location, embedder=KeywordEmbedder(KEYWORDS), llm=fast_client(fake)
        )
        with live_server(create_app(state)) as url:
            client: Any = Client(url, timeout=60) if kind == "client" else Synced(AsyncClient(url))
            try:
                yield Impl(kind, client, fake)
            finally:
                client.close()


@pytest.fixture
def m(impl: Impl) -> Any:
    return impl.m


def seed(m: Any) -> tuple[int, int, int]:
    """Three records: a plan, its later revision in the same thread, an unrelated budget."""
    first = m.add(
        "The launch plan: ship on Friday.",
        author="Ana",
        date="2024-03-01",
        tags=["launch"],
        thread="t1",
        source="slack://c1/1",
    ).id
    second = m.add(
        "The launch moves to Monday.",
        author="Bo",
        date="2024-04-02",
        thread="t1",
        source="slack://c1/2",
        metadata={"channel": "C42"},
    ).id
    third = m.add("The budget is approved.", author="Ana", date="2024-05-10", tags="budget").id
    return first, second, third


# -- write path ------------------------------------------------------------------------------
def test_add_and_get_return_the_library_types(m: Any) -> None:
    first, second, third = seed(m)
    assert (first, second, third) == (1, 2, 3)
    record = m.get(first)
    assert isinstance(record, Record)
    assert (record.text, record.author, record.day, record.tags, record.thread) == (
        "The launch plan: ship on Friday.",
        "Ana",
        "2024-03-01",
        ("launch",),
        "t1",
    )
    assert (record.source, record.scope, record.state, record.superseded_by) == (
        "slack://c1/1",
        "default",
        "active",
        None,
    )
    assert m.get(second).metadata == {"channel": "C42"}
    assert m.get(third).tags == ("budget",)  # one string is one tag
    assert m.add("   ") == AddResult(None, "empty")
    again = m.add("The launch moves to Monday.", author="Bo", date="2024-04-02")
    assert again == AddResult(None, "duplicate", duplicate_of=second)
    assert len(m) == 3


def test_add_many_validates_every_item_before_storing(m: Any) -> None:
    seen: list[int] = []
    results = m.add_many(
        [Document.create("alpha one", author="Ana"), {"text": "beta two", "tags": ["x"]}, "gamma"]
        + [f"plan {n}" for n in range(4)],
        batch_size=3,
        progress=seen.append,
    )
    assert [r.id for r in results] == list(range(1, 8))
    assert all(isinstance(r, AddResult) and r.added for r in results)
    assert seen == [3, 3, 1]
    with pytest.raises(InvalidInput) as bad:
        m.add_many(["fine", {"text": "bad", "date": "2024-02-30"}, {"text": "late"}])
    assert bad.value.field == "items[1].date"
    with pytest.raises(InvalidInput) as missing:
        m.add_many([{"author": "Ana"}])
    assert missing.value.field == "items[0].text"
    assert len(m) == 7  # nothing of a bad batch stored
    with pytest.raises(InvalidInput) as size:
        m.add_many(["x"], batch_size=0)
    assert size.value.field == "batch_size"


def test_bad_documents_name_the_field(m: Any) -> None:
    with pytest.raises(InvalidInput) as bad_date:
        m.add("text", date="March first")
    assert bad_date.value.field == "date"
    with pytest.raises(InvalidInput) as bad_meta:
        m.add("text", metadata={"n": float("nan")})
    assert bad_meta.value.field == "metadata.n"
    assert len(m) == 0


# -- read path -------------------------------------------------------------------------------
def test_get_missing_and_bad_ids(m: Any) -> None:
    seed(m)
    with pytest.raises(RecordNotFound, match="no record 99 in scope 'default'"):
        m.get(99)
    for bad in ("1", 0, True):
        with pytest.raises(InvalidInput) as exc:
            m.get(bad)
        assert exc.value.field == "id"


def test_search_hits_honour_as_of_and_filters(m: Any) -> None:
    first, second, third = seed(m)
    hits = m.search("launch plan", k=5)
    assert all(isinstance(h, Hit) for h in hits)
    assert {h.id for h in hits} >= {first, second}
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(h.score > 0 and h.leg_ranks for h in hits)
    assert [h.id for h in m.search("launch plan", as_of="2024-03-31")] == [first]
    assert [h.id for h in m.search("launch", author="Bo")] == [second]
    assert {h.id for h in m.search("launch", thread="t1")} == {first, second}
    assert [h.id for h in m.search("approved", tags=["budget"])] == [third]
    assert [h.id for h in m.search("launch", source="slack://c1/2")] == [second]
    assert [h.id for h in m.search("launch", since="2024-04-01", as_of="2024-04-30")] == [second]
    prebuilt = Filters.create(author="Ana", since="2024-05-01")
    assert [h.id for h in m.search("budget", filters=prebuilt)] == [third]
    assert len(m.search("launch plan budget", k=1)) == 1
    assert [h.id for h in m.search("launch plan", settings="paper", as_of="2024-03-31")] == [first]


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ({"as_of": "2024-02-30"}, "as_of"),
        ({"k": 0}, "k"),
        ({"since": "nope"}, "since"),
        ({"settings": "nonsense"}, "settings"),
        ({"known_at": "yesterday"}, "known_at"),
    ],
)
def test_bad_search_arguments_name_the_field(m: Any, args: dict[str, Any], name: str) -> None:
    seed(m)
    with pytest.raises(InvalidInput) as exc:
        m.search("launch", **args)
    assert str(exc.value).startswith(f"{name}: ")  # Filters names it in the message only


def test_bad_search_arguments_without_a_field(m: Any) -> None:
    seed(m)
    with pytest.raises(InvalidInput, match="not one string"):
        m.search("launch", tags="launch")
    with pytest.raises(InvalidInput, match="not both"):
        m.search("launch", author="Ana", filters=Filters.create(thread="t1"))
    with pytest.raises(InvalidInput) as empty:
        m.search("")
    assert empty.value.field == "query"


def test_evidence_is_the_same_block(m: Any) -> None:
    first, _second, _third = seed(m)
    block = m.evidence("launch", as_of="2024-03-31")
    assert isinstance(block, Evidence)
    assert block.text == f"[1] 2024-03-01 | Ana | thread t1 | record {first}\n" + (
        "The launch plan: ship on Friday."
    )
    assert [(r.id, r.truncated, r.excerpt) for r in block.rows] == [(first, False, False)]
    assert block.rows[0].spans == ((block.text.index("The"), 0, 32),)
    cut = m.evidence("launch", budget=40, packing=PackingOptions())
    assert len(cut.text) <= 40
    paper = m.evidence("approved budget", style="paper", k=1)
    assert paper.text == "1. The budget is approved."
    with pytest.raises(InvalidInput) as bad:
        m.evidence("launch", style="fancy")
    assert bad.value.field == "style"


def test_ask_answers_from_the_evidence(impl: Impl) -> None:
    m = impl.m
    first, _second, _third = seed(m)
    impl.fake.reply(json.dumps({"answer": "Friday", "citations": [first, 777]}))
    answer = m.ask("when is the launch?", as_of="2024-03-31", **impl.ask_args)
    assert isinstance(answer, Answer)
    assert (answer.answer, answer.citations, answer.evidence) == ("Friday", [first], [first])
    assert answer.dropped_citations == [777]
    assert answer.as_of == "2024-03-31"
    assert "ship on Friday" in impl.fake.requests[0].body["messages"][1]["content"]


def test_records_in_the_order_written(m: Any) -> None:
    first, second, third = seed(m)
    m.archive(second, reason="moved")
    every = list(m.records())
    assert all(isinstance(r, Record) for r in every)
    assert [r.id for r in every] == [first, second, third]
    assert [r.state for r in every] == ["active", "archived", "active"]
    assert every[0] == m.get(first)  # the export line reads back as the same record
    assert [r.id for r in m.records(active_only=True)] == [first, third]


# -- time and truth --------------------------------------------------------------------------
def test_corrections_and_undo(m: Any) -> None:
    first, second, third = seed(m)
    done = m.supersede(first, by=second, reason="moved to Monday")
    assert isinstance(done, Correction)
    assert (done.operation, done.record_ids, done.by) == ("supersede", (first,), second)
    assert m.get(first).superseded_by == second
    archived = m.archive(third, reason="stale")
    assert (archived.operation, archived.record_ids, archived.reason) == (
        "archive",
        (third,),
        "stale",
    )
    assert third not in {h.id for h in m.search("budget approved")}
    with pytest.raises(InvalidInput):
        m.archive(third, reason="again")
    with pytest.raises(RecordNotFound):
        m.archive(99, reason="nothing there")
    undone = m.undo(archived.run_id)
    assert isinstance(undone, UndoReport)
    assert undone.restored == [third]
    assert third in {h.id for h in m.search("budget approved")}
    erased = m.redact(third, reason="erasure request")
    tombstone = m.get(third)
    assert (erased.operation, tombstone.state, tombstone.text) == ("redact", "redacted", "")
    listed = m.corrections()
    assert [c.operation for c in listed] == ["supersede", "archive", "redact"]
    assert all(isinstance(c, Correction) for c in listed)


def test_history_and_changes(m: Any) -> None:
    first, second, third = seed(m)
    m.supersede(first, by=second, reason="moved")
    entries = m.history(record_id=first)
    assert all(isinstance(e, HistoryEntry) for e in entries)
    assert [e.record.id for e in entries][:2] == [first, second]
    assert "subject" in entries[0].reasons
    assert entries[0].superseded_by is not None and entries[0].superseded_by.id == second
    by_query = m.history("launch plan Friday", as_of="2024-03-31")
    assert [e.record.id for e in by_query] == [first]
    with pytest.raises(InvalidInput):
        m.history()
    with pytest.raises(RecordNotFound):
        m.history(record_id=99)
    window = m.changes("2024-04-01", "2024-05-31")
    assert isinstance(window, Changes)
    assert [r.id for r in window.entered] == [second, third]
    assert [r.id for r in window.superseded] == [first]
    assert m.changes("2024-04-01", "2024-05-31", query="budget").entered[0].id == third
