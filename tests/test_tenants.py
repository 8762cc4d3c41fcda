"""Tenant isolation: a scope never sees another scope's rows, through any read path, on both
engines.

Two tenants share one store. Tenant B's rows carry a secret word, its own authors, tags,
threads and dates, and a graph triple and a consolidation run of its own. Every read path of
tenant A (the legs one by one, fused search, evidence, get by guessed ids, records, export,
info counts, the graph, the change log) is asked for B's data, and must return none of it.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from mempp import Memory, RecordNotFound, Settings
from mempp.errors import InvalidInput
from mempp.search.query import LexicalQuery
from mempp.store.base import GroupOutcome, StateChange, Triple

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

SECRET = "zanzibar"
B_DOCS = [
    {
        "text": f"{SECRET} launch budget plan",
        "author": "Mallory",
        "date": "2024-03-02",
        "tags": ["launch", SECRET],
        "thread": "shared-thread",
    },
    {
        "text": f"launch {SECRET} follows",
        "author": "Ana",
        "date": "2024-03-03",
        "thread": "shared-thread",
    },
    {"text": f"newest {SECRET} row", "date": "2030-01-01"},
]
A_DOCS = [
    {
        "text": "launch budget plan",
        "author": "Ana",
        "date": "2024-03-01",
        "tags": ["launch"],
        "thread": "shared-thread",
    },
    {"text": "quiet note", "date": "2024-01-01"},
]


@pytest.fixture
def tenants(engine_location: str):  # noqa: F811
    embedder = KeywordEmbedder(["launch", "budget", SECRET])
    with (
        Memory(engine_location, scope="tenant-a", embedder=embedder) as a,
        Memory(engine_location, scope="tenant-b", embedder=embedder) as b,
    ):
        a_ids = [r.id for r in a.add_many(A_DOCS)]
        b_ids = [r.id for r in b.add_many(B_DOCS)]
        yield a, b, set(a_ids), set(b_ids)


def test_legs_never_return_another_scopes_rows(tenants) -> None:
    a, _b, a_ids, b_ids = tenants
    store, vector = a.store, a.embedder.embed([f"{SECRET} launch"])[0]
    every = set(range(1, max(a_ids | b_ids) + 5))
    for rank in ("bm25", "cover_density"):
        query = LexicalQuery((SECRET, "launch"), "disjunctive", ranking=rank)
        assert set(store.lexical("tenant-a", query, None, 50)) <= a_ids
    assert set(store.tagged("tenant-a", ["launch", SECRET, "mallory"], None, 50)) <= a_ids
    assert set(store.nearest("tenant-a", vector, None, 50)) <= a_ids
    spans = [(0, 2**62)]
    assert set(store.dated_within("tenant-a", spans, None, 50)) <= a_ids
    assert set(store.dated_within("tenant-a", spans, None, 50, among=every)) <= a_ids
    followers = store.thread_followers("tenant-a", every, None, 5)
    assert set(followers) <= a_ids and {f for fs in followers.values() for f in fs} <= a_ids
    assert set(store.recency_keys("tenant-a", every)) <= a_ids
    assert set(store.latest_unmatched("tenant-a", set(), None, 50)) <= a_ids
    ids, matrix = store.current_vectors("tenant-a")
    assert set(ids.tolist()) == a_ids and matrix.shape[0] == len(a_ids)


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_search_and_evidence_stay_in_scope(tenants, preset) -> None:
    a, _b, a_ids, _b_ids = tenants
    settings = Settings(thread_weight=0.5, reserve=3) if preset == "default" else preset
    hits = a.search(f"{SECRET} launch Mallory 2024-03-02", k=50, settings=settings)
    assert {h.id for h in hits} <= a_ids and all(h.record.scope == "tenant-a" for h in hits)
    evidence = a.evidence(f"{SECRET} launch", k=50, settings=settings)
    assert SECRET not in evidence.text and "Mallory" not in evidence.text


def test_guessed_ids_records_and_counts(tenants) -> None:
    a, b, a_ids, b_ids = tenants
    for rid in b_ids:
        with pytest.raises(RecordNotFound):
            a.get(rid)
    assert a.store.get("tenant-a", b_ids) == {}
    assert {r.id for r in a.records()} == a_ids
    assert a.store.records_after("tenant-a", 0, 100) == list(a.records())
    assert len(a) == len(a_ids) and a.store.count("tenant-a", active_only=False) == len(a_ids)
    assert len(b) == len(b_ids)


def test_state_changes_cannot_reach_another_scope(tenants) -> None:
    a, b, _a_ids, b_ids = tenants
    with contextlib.suppress(Exception):  # refusing is as good as ignoring
        a.store.set_state("tenant-a", b_ids, "archived", None)
    assert all(r.state == "active" for r in b.records())


def test_graph_and_change_log_stay_in_scope(tenants) -> None:
    a, b, a_ids, b_ids = tenants
    store = a.store
    b_row = min(b_ids)
    store.add_triples(
        "tenant-b", b_row, [Triple("Mallory", "owns", SECRET, "mallory", SECRET)], "m"
    )
    assert store.search_triples("tenant-a", {"mallory", SECRET}, None, dated=False, limit=10) == []
    assert store.triples_of("tenant-a", b_ids) == []
    assert set(store.pending_extraction("tenant-a", None)) <= a_ids
    assert store.pending_extraction("tenant-a", b_ids) == []
    assert store.triples_of("tenant-b", [b_row])[0].object == SECRET

    run = store.begin_run("tenant-b", kind="consolidate", dry_run=False, settings={})
    second = max(b_ids)
    change = StateChange(second, "active", None, "archived", b_row)
    store.record_group("tenant-b", run, GroupOutcome(0, "supersede", (b_row, second), (change,)))
    store.finish_run("tenant-b", run, {"groups": 1})
    assert store.runs("tenant-a") == []
    assert store.run_groups("tenant-a", run) == [] and store.run_changes("tenant-a", run) == []
    with pytest.raises(InvalidInput):
        store.undo_run("tenant-a", run)
    assert b.get(second).state == "archived"  # B's run stands


def test_graph_writes_cannot_name_another_scopes_row(tenants) -> None:
    a, b, _a_ids, b_ids = tenants
    extracted, fresh = min(b_ids), max(b_ids)
    b.store.add_triples("tenant-b", extracted, [Triple("M", "owns", "z", "m", "z")], "m")
    for row in (extracted, fresh):
        try:
            stored = a.store.add_triples("tenant-a", row, [Triple("x", "y", "z", "x", "z")], "m")
        except Exception:  # refused: the engines word it differently
            stored = False
        assert stored is False
        assert a.store.triples_of("tenant-a", [row]) == []
    assert [t.subject for t in b.store.triples_of("tenant-b", [extracted])] == ["M"]
    assert b.store.triples_of("tenant-b", [fresh]) == []


def test_export_and_info_on_the_command_line(tenants, capsys, monkeypatch) -> None:
    from mempp.cli.main import main

    a, _b, a_ids, _b_ids = tenants
    monkeypatch.setattr("mempp.memory.default_embedder", lambda: a.embedder)
    location = a.store.location if "://" in a.store.location else str(a.store.location)
    assert main(["--db", location, "--scope", "tenant-a", "export"]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["id"] for r in rows} == a_ids and SECRET not in out
    assert main(["--db", location, "--scope", "tenant-a", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == len(a_ids)
    # Scope names are not secret: info lists them (scopes are namespaces, not access control).
    assert set(info["scopes"]) == {"tenant-a", "tenant-b"}
    assert np.isfinite(len(rows))
