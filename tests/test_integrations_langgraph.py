"""The LangGraph store: a differential test against LangGraph's own ``InMemoryStore`` (the
same batches of Get, Put, Search and ListNamespaces through ``batch`` and ``abatch``, the
same answers), over a ``Memory`` on both engines and a ``Client`` on a real uvicorn; then what
only mempp does (past views, versions kept, deletions archived) and what it refuses."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from mempp import AsyncClient, Client, Memory
from mempp.errors import InvalidInput
from mempp.integrations.langgraph import MemppStore
from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]
NAMESPACES = [("users", "ana"), ("users", "bo"), ("docs",), ("docs", "x", "y"), ("users_ana",)]
KEYS = ["a", "b", "c", "User Prefs"]
WORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]


def open_memory(kind: str, location: str) -> Iterator[Any]:
    if kind == "memory":
        with Memory(location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
            yield memory
        return
    state = ServerState(location, embedder=KeywordEmbedder(KEYWORDS))
    with live_server(create_app(state)) as url, Client(url, timeout=60) as client:
        yield client


@pytest.fixture(params=["memory", "client"])
def memory(request: pytest.FixtureRequest, engine_location: str) -> Iterator[Any]:  # noqa: F811
    if request.param == "client" and not engine_location.endswith(".db"):
        pytest.skip("the client over PostgreSQL is covered by the client's conformance suite")
    yield from open_memory(request.param, engine_location)


def random_op(rng: random.Random, seen: list[tuple[str, ...]]) -> Op:
    """One operation. Gets and deletes name namespaces written to already: the reference
    creates an empty namespace on a read, which orders its later listings (a quirk of its
    dict, not of the store's contract)."""
    kind = rng.choices(["put", "delete", "get", "search", "query", "list"], [5, 1, 3, 3, 1, 2])[0]
    if not seen or kind == "put":
        kind = "put"
        namespace = rng.choice(NAMESPACES)
        if namespace not in seen:
            seen.append(namespace)
    else:
        namespace = rng.choice(seen)
    if kind in ("put", "delete"):
        value = None
        if kind == "put":
            words = " ".join(rng.sample(WORDS, 2))
            value = {"kind": rng.choice(["note", "pref"]), "n": rng.randint(0, 5), "text": words}
            if rng.random() < 0.2:
                value["nested"] = {"level": rng.randint(1, 2), "tags": ["x", "y"]}
        return PutOp(namespace, rng.choice(KEYS), value)
    if kind == "get":
        return GetOp(namespace, rng.choice(KEYS))
    if kind in ("search", "query"):
        prefix = rng.choice([(), ("users",), ("docs",), namespace])
        filters = rng.choice(
            [
                None,
                {"kind": "note"},
                {"n": {"$gte": 3}},
                {"n": {"$ne": 2}, "kind": "pref"},
                {"nested": {"level": 1}},
                {"nested": {"tags": ["x", "y"]}},
            ]
        )
        if kind == "query":  # no index: the reference ignores the query; compared as sets
            return SearchOp(prefix, filters, limit=50, offset=0, query=rng.choice(WORDS))
        return SearchOp(prefix, filters, limit=rng.choice([1, 2, 10]), offset=rng.choice([0, 1]))
    conditions = rng.choice(
        [
            (),
            (MatchCondition("prefix", ("users",)),),
            (MatchCondition("suffix", ("*",)),),
            (MatchCondition("prefix", ("docs", "*")),),
        ]
    )
    return ListNamespacesOp(conditions, max_depth=rng.choice([None, 1, 2]), limit=5, offset=0)


def shown(op: Op, result: Any, reference: InMemoryStore) -> Any:
    """A result as compared: items by (namespace, key, value); namespaces as listed."""
    if isinstance(op, GetOp):
        return None if result is None else (result.namespace, result.key, result.value)
    if isinstance(op, SearchOp):
        found = [(i.namespace, i.key, i.value) for i in result]
        return sorted(found, key=repr) if op.query else found
    if isinstance(op, ListNamespacesOp):
        return result
    return result


def expected_namespaces(op: ListNamespacesOp, reference: InMemoryStore) -> list[tuple[str, ...]]:
    """The reference's answer without the namespaces it keeps once empty: the one place the
    two differ on purpose (a namespace whose items are all deleted is not listed)."""
    full = reference.batch([op._replace(max_depth=None, limit=10**6, offset=0)])[0]
    kept = [ns for ns in full if reference._data.get(ns)]
    if op.max_depth is not None:
        kept = sorted({ns[: op.max_depth] for ns in kept})
    return kept[op.offset : op.offset + op.limit]


@pytest.mark.parametrize("seed", [1, 2])
def test_same_answers_as_langgraphs_in_memory_store(memory: Any, seed: int) -> None:
    rng = random.Random(seed)
    ours, reference = MemppStore(memory=memory), InMemoryStore()
    compared = 0
    seen: list[tuple[str, ...]] = []
    for number in range(30):
        ops = [random_op(rng, seen) for _ in range(rng.randint(1, 4))]
        got = asyncio.run(ours.abatch(ops)) if number % 2 else ours.batch(ops)
        # The reference's batch sees its own state before the batch, as ours must.
        before = {ns: dict(items) for ns, items in reference._data.items()}
        want = reference.batch(ops)
        for op, mine, theirs in zip(ops, got, want, strict=True):
            if isinstance(op, ListNamespacesOp):
                saved, reference._data = reference._data, _restore(before)
                theirs = expected_namespaces(op, reference)
                reference._data = saved
            assert shown(op, mine, reference) == shown(op, theirs, reference), (number, op)
            compared += not isinstance(op, PutOp)
    assert compared > 30


def _restore(data: dict[tuple[str, ...], dict[str, Any]]) -> Any:
    from collections import defaultdict

    restored: defaultdict[tuple[str, ...], dict[str, Any]] = defaultdict(dict)
    restored.update(data)
    return restored


# -- what only mempp does ------------------------------------------------------------------
def test_past_views_versions_and_deletions(memory: Any) -> None:
    store = MemppStore(memory=memory)
    store.put(("users", "ana"), "prefs", {"theme": "dark", "text": "alpha plan"})
    time.sleep(0.01)
    moment = datetime.now(UTC)
    time.sleep(0.01)
    store.put(("users", "ana"), "prefs", {"theme": "light", "text": "beta launch"})
    store.put(("users", "bo"), "prefs", {"theme": "blue"})
    item = store.get(("users", "ana"), "prefs")
    assert item is not None and item.value["theme"] == "light"
    assert item.created_at < item.updated_at  # the key's first put, then its newest
    past = MemppStore(memory=memory, as_of=moment)
    old = past.get(("users", "ana"), "prefs")
    assert old is not None and old.value["theme"] == "dark"
    assert past.get(("users", "bo"), "prefs") is None
    assert [i.value["theme"] for i in past.search(("users",))] == ["dark"]
    assert [i.value["theme"] for i in past.search(("users",), query="plan launch")] == ["dark"]
    assert past.list_namespaces() == [("users", "ana")]
    held = MemppStore(memory=memory, known_at=moment)
    assert held.get(("users", "ana"), "prefs").value["theme"] == "dark"  # type: ignore[union-attr]
    with pytest.raises(InvalidInput, match="view of the past"):
        past.put(("users", "ana"), "prefs", {"theme": "red"})
    # Nothing was rewritten: both versions are records, the first superseded by the second.
    first, second = list(memory.records())[:2]
    assert (first.superseded_by, second.superseded_by) == (second.id, None)
    store.delete(("users", "ana"), "prefs")
    assert store.get(("users", "ana"), "prefs") is None
    assert store.list_namespaces() == [("users", "bo")]  # all its items deleted: not listed
    assert [r.state for r in memory.records()][:2] == ["archived", "archived"]
    assert memory.get(first.id).text  # archived, never erased
    store.put(("users", "ana"), "prefs", {"theme": "green"})
    assert [i.key for i in store.search(("users",))] == ["prefs", "prefs"]
    # As in LangGraph's store, a namespace keeps its place from its first write.
    assert [i.namespace for i in store.search(("users",))] == [("users", "ana"), ("users", "bo")]


def test_index_fields_and_unindexed_items(memory: Any) -> None:
    store = MemppStore(memory=memory)
    store.put(("docs",), "1", {"title": "launch plan", "body": "gamma"}, index=["title"])
    store.put(("docs",), "2", {"title": "budget"}, index=False)
    assert [i.key for i in store.search(("docs",), query="launch")] == ["1"]
    assert [i.key for i in store.search(("docs",), query="budget")] == ["1"]  # 2 is unindexed
    assert [i.key for i in store.search(("docs",))] == ["1", "2"]
    assert memory.get(1).text == "launch plan"


def test_what_it_cannot_honour_is_refused(memory: Any) -> None:
    store = MemppStore(memory=memory)
    cases = [
        (lambda: store.put(("a",), "k", {"v": 1}, ttl=5), "ttl"),
        (lambda: store.search(("a",), filter={"v": {"$in": [1]}}), "filter.v"),
        (lambda: store.put(("a",), "k", {"v": float("nan")}), "value.v"),
        (lambda: store.put(("a",), "k", {"v": 1}, index=["missing"]), "index"),
        (lambda: MemppStore(memory=memory, as_of="last week"), "as_of"),
    ]
    for call, name in cases:
        with pytest.raises((InvalidInput, NotImplementedError)) as exc:
            call()
        if isinstance(exc.value, InvalidInput):
            assert (exc.value.field or str(exc.value).split(":")[0]) == name, name
    assert list(memory.records()) == []


def test_an_async_client_is_refused(tmp_path: Path) -> None:
    async def build() -> None:
        async with AsyncClient("http://127.0.0.1:9") as client:
            with pytest.raises(InvalidInput, match="not an AsyncClient"):
                MemppStore(memory=client)

    asyncio.run(build())


def test_the_example_agent_graph_remembers_and_recalls(memory: Any) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "examples" / "langgraph_agent.py"
    spec = importlib.util.spec_from_file_location("langgraph_agent", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    agent = example.build(MemppStore(memory=memory))
    first = agent.invoke({"user": "ana", "message": "The launch plan is Friday."})
    assert first["reply"] == "What I know about ana: nothing yet."
    agent.invoke({"user": "bo", "message": "Bo likes the budget plan."})
    again = agent.invoke({"user": "ana", "message": "When is the launch?"})
    assert again["reply"] == "What I know about ana: The launch plan is Friday.."
    assert MemppStore(memory=memory).list_namespaces() == [("users", "ana"), ("users", "bo")]
