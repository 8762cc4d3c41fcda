"""A merged row's context is written in the consolidation step's own transaction (issue 37,
session 17), as any write's is: a failure right after the step cannot leave the merged row
without its context, and one inside it leaves neither the row nor a context (both engines,
both context rules)."""

from __future__ import annotations

from typing import Any

import pytest

from mempp import Memory
from mempp.llm.consolidate import consolidate
from mempp.store.context import ContextRule, ContextStore

import fake_openai
from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, fast_client

server = fake_openai.server  # the shared fixture

KEYWORDS = ["launch", "plan", "budget", "april"]
RULES = [ContextRule("sum", 2, decay=0.5), ContextRule("text", 2)]


class _Crash(BaseException):
    """The process stopping right there (nothing catches it)."""


def _thread(memory: Memory) -> list[int]:
    rows = memory.add_many(
        [
            {"text": "launch plan", "date": "2024-01-01", "thread": "t"},
            {"text": "budget april", "date": "2024-02-10", "thread": "t"},
            {"text": "budget april april", "date": "2024-01-20", "thread": "t"},
        ]
    )
    return [r.id for r in rows if r.id is not None]


def _script(server: FakeOpenAI) -> None:
    server.reply_json({"label": "restatement"})
    server.reply_json({"text": "The budget is set in April."})


def _contexts_complete(location: str) -> None:
    with Memory(location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        store = memory.store
        assert isinstance(store, ContextStore)
        stored, records = store.context_count()
        assert stored == records
        assert {c.name: c.ok for c in memory.verify()}["context index"]


@pytest.mark.parametrize("rule", RULES, ids=["sum", "text"])
def test_a_stop_right_after_the_step_leaves_the_merged_row_its_context(
    engine_location: str,  # noqa: F811
    server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    rule: ContextRule,
) -> None:
    with Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        memory.enable_context(rule=rule)
        _thread(memory)
        store_type = type(memory.store)
        real = store_type.record_group
        merged: list[int | None] = []

        def then_stop(self: Any, *args: Any, **kwargs: Any) -> int | None:
            merged.append(real(self, *args, **kwargs))
            raise _Crash

        monkeypatch.setattr(store_type, "record_group", then_stop)
        _script(server)
        with fast_client(server, model="m") as llm, pytest.raises(_Crash):
            consolidate(memory, llm)
        monkeypatch.undo()
        assert merged and merged[0] is not None
        members = memory.store.context_members([merged[0]])  # type: ignore[attr-defined]
        assert members[merged[0]]  # it read its thread's earlier row
    _contexts_complete(engine_location)


def test_a_failure_inside_the_step_leaves_neither_row_nor_context(
    engine_location: str,  # noqa: F811
    server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = "postgres" if engine_location.startswith("postgresql") else "sqlite"
    with Memory(engine_location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        memory.enable_context()
        ids = _thread(memory)
        before = memory.store.count(memory.scope)

        def fail(*args: Any) -> None:
            raise _Crash

        monkeypatch.setattr(f"mempp.store.{engine}.context.write_rows", fail)
        _script(server)
        with fast_client(server, model="m") as llm, pytest.raises(_Crash):
            consolidate(memory, llm)
        monkeypatch.undo()
        assert memory.store.count(memory.scope) == before  # no merged row
        assert all(memory.get(row).state == "active" for row in ids)  # nothing archived
    _contexts_complete(engine_location)
