"""The LLM layers (consolidation, Mem^g++) on both engines, over real HTTP.

Every test runs through ``engine_location`` (a SQLite file, then a fresh PostgreSQL database)
with a scripted OpenAI-compatible server and the predictable ``KeywordEmbedder``, and reads
states and content straight from the database with each engine's own driver, so what is
asserted is what is stored. ``test_consolidate.py`` and ``test_graph.py`` cover the layers'
logic in depth on SQLite; this module pins that PostgreSQL stores and returns the same.

Engine differences, each pinned by a test here:

* PostgreSQL's partial UNIQUE dedupe index forbids two active rows of one author with one
  text. An undo that would re-activate an original beside such a row, added after the run,
  is refused (``StateConflict``, nothing changed); SQLite restores it and the two coexist.
* PostgreSQL's audit tables also refuse ``TRUNCATE`` and any change to what a run *was*
  (scope, kind, dry run, start, settings, undoes, a second ``undone_by``); SQLite only
  refuses ``DELETE`` of runs and ``UPDATE``/``DELETE`` of groups and changes.
* ``add_triples`` for a row of *another* scope that is already extracted: SQLite looks the
  extraction mark up by row id alone and returns False; PostgreSQL looks it up within the
  scope and raises ``InvalidInput`` (no such row in this scope), as for any other foreign id.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from mempp import InvalidInput, Memory, Settings
from mempp.dates import now_key, parse_event_date
from mempp.llm import LLMClient
from mempp.llm.consolidate import MERGE_MAX_TOKENS, RunReport, consolidate, history, undo
from mempp.llm.graph import MAX_FACTS, GraphOptions, extract, related_facts
from mempp.records import text_hash
from mempp.search.evidence import FACTS_HEADING, RelatedFact
from mempp.store.base import (
    ConsolidationStore,
    GraphStore,
    StateConflict,
    Triple,
    supports,
)

import engines
import fake_openai
from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply, fast_client

# The shared fixture (pytest finds fixtures among module attributes).
server = fake_openai.server

# The fixtures this module uses (pytest finds fixtures among module attributes).
pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location
both_locations = engines.both_locations

KEYWORDS = ["launch", "friday", "budget", "april", "office", "hiring", "helix"]
TAG_ONLY = Settings(w_lex=0, w_vec=0, reserve=0)


# -- fixtures and helpers ----------------------------------------------------------------------
def engine_of(location: str) -> str:
    return "postgres" if location.startswith("postgresql://") else "sqlite"


def make_llm(server: FakeOpenAI, **kwargs: Any) -> LLMClient:
    return fast_client(server, **{"model": "layers-model", **kwargs})


@pytest.fixture
def llm(server: FakeOpenAI) -> Iterator[LLMClient]:
    with make_llm(server) as client:
        yield client


@pytest.fixture
def embedder() -> KeywordEmbedder:
    return KeywordEmbedder(KEYWORDS)


def open_memory(location: str, embedder: KeywordEmbedder, scope: str = "default") -> Memory:
    return Memory(location, embedder=embedder, scope=scope)


@pytest.fixture
def memory(engine_location: str, embedder: KeywordEmbedder) -> Iterator[Memory]:
    with open_memory(engine_location, embedder) as mem:
        yield mem


def query(location: str, statement: str) -> list[tuple[Any, ...]]:
    """Rows of ``statement`` read with the engine's own driver, outside mempp."""
    if engine_of(location) == "sqlite":
        conn = sqlite3.connect(location)
        try:
            return conn.execute(statement).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(location, autocommit=True) as pg:
        return pg.execute(statement).fetchall()


def states(location: str) -> dict[int, tuple[str, int | None]]:
    rows = query(location, "SELECT id, state, superseded_by FROM records ORDER BY id")
    return {row[0]: (row[1], row[2]) for row in rows}


def content(location: str) -> dict[int, tuple[Any, ...]]:
    """Every row's content (all but its state), read straight from the database."""
    embedding = "embedding" if engine_of(location) == "sqlite" else "embedding::text"
    rows = query(
        location,
        f"""SELECT id, scope, text, author, event_date, event_key, tags, source, ingested_key,
                   {embedding} FROM records ORDER BY id""",
    )
    return {row[0]: row[1:] for row in rows}


def assert_nothing_deleted_or_rewritten(before: dict[int, tuple], after: dict[int, tuple]) -> None:
    assert set(before) <= set(after), "a row disappeared"
    for row_id, row in before.items():
        assert after[row_id] == row, f"row {row_id} changed content"


def add(memory: Memory, text: str, author: str | None = None, date: str | None = None, **kw):
    result = memory.add(text, author=author, date=date, **kw)
    assert result.id is not None
    return result.id


def label(server: FakeOpenAI, value: str) -> None:
    server.reply_json({"label": value})


def launch_group(memory: Memory) -> list[int]:
    """Three near-identical launch rows (cosine >= 0.85 to the first), dates out of order."""
    return [
        add(memory, "launch friday", "Ana", "2024-01-10"),
        add(memory, "launch friday launch", "Ben", "2024-03-01"),
        add(memory, "launch launch friday", "Cleo", "2024-02-01"),
    ]


def budget_pair(memory: Memory, second_author: str = "Ben") -> list[int]:
    return [
        add(memory, "budget april", "Ana", "2024-02-10", tags=["finance", "q2"]),
        add(memory, "budget april april", second_author, "2024-01-20", tags=["q2", "plan"]),
    ]


def run_conflict_and_restatement(memory: Memory, server: FakeOpenAI, llm) -> RunReport:
    label(server, "conflict")
    label(server, "restatement")
    server.reply_json({"text": "Budget: April."})
    return consolidate(memory, llm)


def _change(record_id, old_state, old_by, new_state, new_by) -> dict[str, object]:
    return {
        "record_id": record_id,
        "old_state": old_state,
        "old_superseded_by": old_by,
        "new_state": new_state,
        "new_superseded_by": new_by,
    }


# -- capability and schema ---------------------------------------------------------------------
def test_both_engines_offer_both_layers(memory: Memory, engine_location: str) -> None:
    supports(memory.store, ConsolidationStore, "consolidation")
    supports(memory.store, GraphStore, "the entity graph")
    newest = newest_schema(engine_location)
    assert memory.store.schema_version() == newest
    assert query(engine_location, "SELECT max(version) FROM mempp_migrations") == [(newest,)]


def newest_schema(location: str) -> int:
    import mempp.store.postgres as pg_engine
    import mempp.store.sqlite as sqlite_engine

    engine = pg_engine if engine_of(location) == "postgres" else sqlite_engine
    return engine.MIGRATIONS[-1].version


def write_version_1_rows(
    location: str, embedder: KeywordEmbedder, rows: list[tuple[str, str, str]]
) -> list[int]:
    """Rows as mempp's schema 1 stored them (no thread column), written outside mempp."""
    columns = (
        "scope, text, text_hash, author, event_date, event_key, tags, source, "
        "ingested_at, ingested_key, embedding"
    )
    ids = []
    for text, author, day in rows:
        date = parse_event_date(day)
        assert date is not None
        vector = embedder.embed([text])[0].astype("<f4")
        values = ["default", text, text_hash(text), author, date.text, date.key]
        stamp = (datetime.now(UTC).isoformat(), now_key())
        if engine_of(location) == "sqlite":
            conn = sqlite3.connect(location, isolation_level=None)
            try:
                cursor = conn.execute(
                    f"""INSERT INTO records ({columns})
                        VALUES (?, ?, ?, ?, ?, ?, '[]', NULL, ?, ?, ?)""",
                    (*values, *stamp, vector.tobytes()),
                )
                ids.append(cursor.lastrowid)
            finally:
                conn.close()
        else:
            import psycopg

            literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
            with psycopg.connect(location, autocommit=True) as pg:
                ids.append(
                    pg.execute(
                        f"""INSERT INTO records ({columns})
                            VALUES (%s, %s, %s, %s, %s, %s, '{{}}', NULL, %s, %s, %s::vector)
                            RETURNING id""",
                        (*values, *stamp, literal),
                    ).fetchone()[0]
                )
    return ids


def test_a_version_1_store_is_upgraded_in_place(
    engine_location: str, embedder, server, llm, monkeypatch
) -> None:
    import mempp.store.postgres.schema as pg_engine
    import mempp.store.sqlite.schema as sqlite_engine

    engine = pg_engine if engine_of(engine_location) == "postgres" else sqlite_engine
    with monkeypatch.context() as patch:
        patch.setattr(engine, "MIGRATIONS", engine.MIGRATIONS[:1])
        with open_memory(engine_location, embedder) as old:
            assert old.store.schema_version() == 1
    ids = write_version_1_rows(
        engine_location,
        embedder,
        [
            ("launch friday", "Ana", "2024-01-10"),
            ("launch friday launch", "Ben", "2024-03-01"),
            ("launch launch friday", "Cleo", "2024-02-01"),
        ],
    )
    before = content(engine_location)
    with open_memory(engine_location, embedder) as memory:
        assert memory.store.schema_version() == newest_schema(engine_location)
        assert content(engine_location) == before
        assert {memory.get(i).thread for i in ids} == {None}
        label(server, "conflict")
        assert consolidate(memory, llm).superseded == 2
    assert states(engine_location)[ids[0]] == ("active", ids[1])


# -- the three labels --------------------------------------------------------------------------
def test_conflict_supersedes_every_row_but_the_latest_dated(
    memory, server, llm, engine_location
) -> None:
    ids = launch_group(memory)
    before = content(engine_location)
    label(server, "conflict")
    report = consolidate(memory, llm)
    winner = ids[1]  # dated 2024-03-01, although not the newest id
    assert report.details[0].winner == winner
    assert states(engine_location) == {
        ids[0]: ("active", winner),
        ids[1]: ("active", None),
        ids[2]: ("active", winner),
    }
    assert (report.superseded, report.archived, report.merged) == (2, 0, 0)
    assert_nothing_deleted_or_rewritten(before, content(engine_location))
    # superseded rows stay retrievable, with their own dates
    assert set(ids) <= {hit.id for hit in memory.search("launch friday")}
    assert memory.get(ids[0]).superseded_by == winner
    # only current rows are compared by the next run: the winner is alone now
    assert consolidate(memory, llm).groups == 0
    assert len(server.requests) == 1


def test_restatement_writes_one_merged_row_through_the_insert_path(
    memory, server, llm, embedder, engine_location
) -> None:
    first, second = budget_pair(memory)
    third = add(memory, "budget budget april", "Ana", "2024-03-05")
    before = content(engine_location)
    label(server, " Restatement ")
    server.reply_json({"text": "  The budget is set in April.  "})
    calls_before = embedder.calls
    report = consolidate(memory, llm)

    [group] = report.details
    merged = memory.get(group.merged_id)
    assert merged.text == "The budget is set in April."
    assert merged.date == "2024-01-20"  # the earliest date of the group
    assert merged.author == "Ana, Ben"  # every author, once, in ingest order
    assert merged.tags == ("finance", "q2", "plan")  # the union of tags
    assert merged.source == f"mempp:consolidation/run-{report.run_id}/group-1"
    assert (merged.state, merged.superseded_by) == ("active", None)
    assert embedder.calls == calls_before + 1  # embedded with the Memory's encoder
    assert all(states(engine_location)[r] == ("archived", None) for r in (first, second, third))
    assert (report.archived, report.merged, report.superseded) == (3, 1, 0)
    assert_nothing_deleted_or_rewritten(before, content(engine_location))

    # indexed like any row: full text, vector, and each author's own tag label
    assert [h.id for h in memory.search("budget april")] == [merged.id]
    assert {h.id for h in memory.search("Ben", settings=TAG_ONLY)} == {merged.id}
    assert {h.id for h in memory.search("finance", settings=TAG_ONLY)} == {merged.id}
    labels = query(engine_location, f"SELECT label FROM record_tags WHERE record_id = {merged.id}")
    assert {"ana", "ben", "finance", "q2", "plan"} <= {row[0] for row in labels}


def test_distinct_leaves_the_group_untouched(memory, server, llm, engine_location) -> None:
    launch_group(memory)
    before = states(engine_location)
    label(server, "distinct")
    report = consolidate(memory, llm)
    assert states(engine_location) == before
    assert report.labels == {"conflict": 0, "restatement": 0, "distinct": 1}
    assert memory.store.run_changes(memory.scope, report.run_id) == []
    [group] = memory.store.run_groups(memory.scope, report.run_id)
    assert (group.label, group.group, len(group.members), group.detail) == ("distinct", 1, 3, None)


# -- failures ----------------------------------------------------------------------------------
def test_failed_calls_leave_the_group_untouched(memory, server, llm, engine_location) -> None:
    launch_group(memory)
    budget_pair(memory)
    before_states, before_content = states(engine_location), content(engine_location)
    server.reply('{"label": "confl')  # cut off: the launch group fails
    label(server, "restatement")
    server.reply_json({"text": "budget " * (MERGE_MAX_TOKENS + 1)})  # over the cap
    report = consolidate(memory, llm)
    assert report.failures == 2 and sum(report.labels.values()) == 0
    assert "label call" in report.details[0].detail
    assert "over the 220 cap" in report.details[1].detail
    server.error(500).error(500)  # the client retries once, then gives up
    label(server, "distinct")
    report = consolidate(memory, llm)
    assert report.failures == 1 and "HTTP 500" in report.details[0].detail
    assert states(engine_location) == before_states
    assert content(engine_location) == before_content
    for run in history(memory):
        assert memory.store.run_changes(memory.scope, run.id) == []
    assert [g.label for g in memory.store.run_groups(memory.scope, report.run_id)] == [
        "failed",
        "distinct",
    ]


def test_a_row_changed_during_the_run_fails_its_group(memory, server, llm, engine_location):
    ids = launch_group(memory)

    def meddle(request: RecordedRequest) -> ScriptedReply:
        # Another writer archives a member while the model is thinking.
        memory.store.set_state(memory.scope, [ids[2]], "archived", None)
        return ScriptedReply(content='{"label": "conflict"}')

    server.responder = meddle
    report = consolidate(memory, llm)
    assert report.failures == 1 and "changed since" in report.details[0].detail
    # all or nothing: the members that still matched were not superseded either
    assert states(engine_location) == {
        ids[0]: ("active", None),
        ids[1]: ("active", None),
        ids[2]: ("archived", None),
    }
    assert memory.store.run_changes(memory.scope, report.run_id) == []


def test_a_merged_text_repeating_an_active_row_fails_its_group(
    memory, server, llm, engine_location
) -> None:
    pair = budget_pair(memory, second_author="Ana")  # one author: the merged row is "Ana"'s
    # Close enough to the group's words to pass the grounding check, not close enough to join;
    # dated like the merged row, so the dedupe key (author, text, date) sees a repeat.
    other = add(memory, "budget april office", "Ana", "2024-01-20")
    before = states(engine_location)
    label(server, "restatement")
    server.reply_json({"text": "budget april office"})
    report = consolidate(memory, llm)
    assert report.failures == 1 and "repeats an active row" in report.details[0].detail
    assert states(engine_location) == before  # the originals were not archived either
    assert len(memory) == 3 and other in before and set(pair) <= set(before)


# -- dry run -----------------------------------------------------------------------------------
def test_dry_run_labels_but_changes_nothing(memory, server, llm, engine_location) -> None:
    launch_group(memory)
    budget_pair(memory)
    before_states, before_content = states(engine_location), content(engine_location)
    label(server, "conflict")
    label(server, "restatement")  # no merge call follows in a dry run
    report = consolidate(memory, llm, dry_run=True)
    assert states(engine_location) == before_states
    assert content(engine_location) == before_content
    assert len(server.requests) == 2
    assert (report.superseded, report.archived, report.merged) == (2, 2, 1)  # would be
    [run] = history(memory)
    assert run.dry_run and run.kind == "consolidate" and run.finished_at is not None
    assert run.counts == {**report.counts(), "completed": True}
    assert memory.store.run_changes(memory.scope, report.run_id) == []
    groups = memory.store.run_groups(memory.scope, report.run_id)
    assert [(g.label, g.detail) for g in groups] == [
        ("conflict", "dry run"),
        ("restatement", "dry run"),
    ]
    with pytest.raises(InvalidInput, match="dry run"):
        undo(memory, report.run_id)


# -- audit trail and undo ----------------------------------------------------------------------
def test_every_change_is_logged(memory, server, llm) -> None:
    ids = launch_group(memory)
    budget = budget_pair(memory)
    report = run_conflict_and_restatement(memory, server, llm)
    merged = report.details[1].merged_id
    changes = memory.store.run_changes(memory.scope, report.run_id)
    logged = [(c.run_id, c.group, c.label, c.change.to_dict(), c.merged_id) for c in changes]
    run = report.run_id
    assert logged == [
        (run, 1, "conflict", _change(ids[0], "active", None, "active", ids[1]), None),
        (run, 1, "conflict", _change(ids[2], "active", None, "active", ids[1]), None),
        (run, 2, "restatement", _change(budget[0], "active", None, "archived", None), merged),
        (run, 2, "restatement", _change(budget[1], "active", None, "archived", None), merged),
        (run, 2, "restatement", _change(merged, None, None, "active", None), merged),
    ]
    groups = memory.store.run_groups(memory.scope, report.run_id)
    assert [(g.run_id, g.group, g.label, g.members) for g in groups] == [
        (run, 1, "conflict", tuple(ids)),
        (run, 2, "restatement", tuple(budget)),
    ]
    [info] = history(memory)
    assert info.kind == "consolidate" and not info.dry_run and info.finished_at
    assert info.started_at <= info.finished_at and info.started_at.endswith("+00:00")
    assert info.settings["threshold"] == 0.85 and info.settings["model"] == "layers-model"
    assert info.settings["merge_max_tokens"] == MERGE_MAX_TOKENS
    assert info.counts == {**report.counts(), "completed": True}
    assert (info.undoes, info.undone_by) == (None, None)


def test_undo_restores_states_and_archives_merged_rows(
    memory, server, llm, engine_location
) -> None:
    launch_group(memory)
    budget_pair(memory)
    original = states(engine_location)
    report = run_conflict_and_restatement(memory, server, llm)
    merged = report.details[1].merged_id
    before_undo = content(engine_location)

    result = undo(memory, report.run_id)
    assert len(result.restored) == 4 and result.archived_merged == [merged]
    assert states(engine_location) == {**original, merged: ("archived", None)}
    assert_nothing_deleted_or_rewritten(before_undo, content(engine_location))
    assert memory.get(merged).text == "Budget: April."
    runs = history(memory)
    assert [(r.kind, r.undoes, r.undone_by) for r in runs] == [
        ("consolidate", None, runs[1].id),
        ("undo", report.run_id, None),
    ]
    assert runs[1].counts == {"restored": 4, "archived_merged": 1}
    undo_changes = memory.store.run_changes(memory.scope, runs[1].id)
    assert [(c.label, c.group, c.merged_id) for c in undo_changes] == [
        ("undo", 1, None),
        ("undo", 1, None),
        ("undo", 2, merged),
        ("undo", 2, merged),
        ("undo", 2, merged),
    ]
    assert undo_changes[-1].change.to_dict() == _change(merged, "active", None, "archived", None)
    with pytest.raises(InvalidInput, match="already undone"):
        undo(memory, report.run_id)
    with pytest.raises(InvalidInput, match="cannot be undone"):
        undo(memory, runs[1].id)
    with pytest.raises(InvalidInput, match="no consolidation run 99"):
        undo(memory, 99)


def test_undo_refuses_when_a_row_changed_since(memory, server, llm, engine_location) -> None:
    ids = launch_group(memory)
    label(server, "conflict")
    report = consolidate(memory, llm)
    memory.store.set_state(memory.scope, [ids[0]], "archived", ids[1])
    snapshot = states(engine_location)
    with pytest.raises(StateConflict, match=rf"records \[{ids[0]}\] were changed again") as info:
        undo(memory, report.run_id)
    assert info.value.ids == [ids[0]]
    assert states(engine_location) == snapshot  # all or nothing: ids[2] was not restored
    assert [r.kind for r in history(memory)] == ["consolidate"]
    assert history(memory)[0].undone_by is None
    memory.store.set_state(memory.scope, [ids[0]], "active", ids[1])  # as the run left it
    undo(memory, report.run_id)
    assert all(states(engine_location)[i] == ("active", None) for i in ids)


def test_undo_order_newest_first_when_runs_build_on_each_other(
    memory, server, llm, engine_location
) -> None:
    ids = budget_pair(memory)
    label(server, "restatement")
    server.reply_json({"text": "budget april budget"})
    first = consolidate(memory, llm)
    merged = first.details[0].merged_id
    later = add(memory, "budget budget april", "Cleo", "2030-01-01")
    label(server, "conflict")
    second = consolidate(memory, llm)
    assert states(engine_location)[merged] == ("active", later)

    with pytest.raises(StateConflict, match=str(merged)):
        undo(memory, first.run_id)
    undo(memory, second.run_id)
    undo(memory, first.run_id)
    assert states(engine_location)[merged] == ("archived", None)
    assert all(states(engine_location)[i] == ("active", None) for i in [*ids, later])


def test_undo_of_a_merge_that_repeats_an_original(memory, server, llm, engine_location) -> None:
    # One author, and the merged text is the first original's text: the merged row is the
    # same (scope, author, text) as that original. Undo must archive it before restoring the
    # original (PostgreSQL's dedupe index would refuse the other order).
    ids = budget_pair(memory, second_author="Ana")
    label(server, "restatement")
    server.reply_json({"text": "budget april"})
    report = consolidate(memory, llm)
    merged = report.details[0].merged_id
    assert merged is not None and memory.get(merged).author == "Ana"
    undo(memory, report.run_id)
    assert states(engine_location) == {
        ids[0]: ("active", None),
        ids[1]: ("active", None),
        merged: ("archived", None),
    }


def test_undo_beside_a_newer_duplicate_is_refused_on_both(
    memory, server, llm, engine_location
) -> None:
    """The same author writes an archived row's text again under its date: undoing the run
    would make the two active (PostgreSQL's unique dedupe index forbids it, and SQLite's
    snapshot would not restore there), so both engines refuse, naming the row, nothing
    changed; once the copy is archived the undo goes on. The same text under another date
    is no duplicate: it never blocks the undo."""
    ids = budget_pair(memory)
    label(server, "restatement")
    server.reply_json({"text": "Budget: April."})
    report = consolidate(memory, llm)
    undated = add(memory, "budget april", "Ana")
    again = add(memory, "budget april", "Ana", "2024-02-10")
    snapshot = states(engine_location)
    with pytest.raises(StateConflict, match=rf"records \[{ids[0]}\] would be active") as info:
        undo(memory, report.run_id)
    assert info.value.ids == [ids[0]]
    assert states(engine_location) == snapshot
    assert [r.kind for r in history(memory)] == ["consolidate"]
    memory.store.set_state(memory.scope, [again], "archived", None)
    undo(memory, report.run_id)
    assert states(engine_location)[ids[0]] == ("active", None)
    assert states(engine_location)[undated] == ("active", None)


def test_concurrent_undos_of_one_run_apply_once(engine_location, embedder, server, llm) -> None:
    with open_memory(engine_location, embedder) as memory:
        ids = launch_group(memory)
        label(server, "conflict")
        run_id = consolidate(memory, llm).run_id
    assert run_id is not None
    outcomes: list[object] = []
    barrier = threading.Barrier(4)

    def attempt() -> None:
        with open_memory(engine_location, embedder) as mine:
            barrier.wait()
            try:
                outcomes.append(undo(mine, run_id).undo_run_id)
            except InvalidInput as exc:
                outcomes.append(exc)

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = [o for o in outcomes if isinstance(o, int)]
    refused = [o for o in outcomes if isinstance(o, InvalidInput)]
    assert len(done) == 1 and len(refused) == 3
    assert all("already undone" in str(exc) for exc in refused)
    with open_memory(engine_location, embedder) as memory:
        assert [r.kind for r in history(memory)] == ["consolidate", "undo"]
        assert len(memory.store.run_changes(memory.scope, done[0])) == 2
    assert all(states(engine_location)[i] == ("active", None) for i in ids)


def test_the_audit_log_is_append_only(memory, server, llm, engine_location) -> None:
    launch_group(memory)
    label(server, "conflict")
    run_id = consolidate(memory, llm).run_id
    refused = [
        "DELETE FROM consolidation_changes",
        "UPDATE consolidation_changes SET new_state = 'archived'",
        "DELETE FROM consolidation_groups",
        "UPDATE consolidation_groups SET label = 'distinct'",
        "DELETE FROM consolidation_runs",
    ]
    if engine_of(engine_location) == "sqlite":
        conn = sqlite3.connect(engine_location, isolation_level=None)
        try:
            for statement in refused:
                with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                    conn.execute(statement)
        finally:
            conn.close()
    else:
        import psycopg

        refused += [
            "TRUNCATE consolidation_changes",
            "TRUNCATE consolidation_groups",
            "TRUNCATE consolidation_runs CASCADE",
            "UPDATE consolidation_runs SET kind = 'undo'",
            "UPDATE consolidation_runs SET settings = '{}'",
            "UPDATE consolidation_runs SET scope = 'elsewhere'",
        ]
        with psycopg.connect(engine_location, autocommit=True) as pg:
            for statement in refused:
                with pytest.raises(psycopg.errors.IntegrityError, match="append-only"):
                    pg.execute(statement)
            # a run is undone at most once, even by hand
            undo(memory, run_id)
            with pytest.raises(psycopg.errors.IntegrityError, match="append-only"):
                pg.execute(f"UPDATE consolidation_runs SET undone_by = NULL WHERE id = {run_id}")
    assert len(history(memory)) in (1, 2)
    assert len(memory.store.run_changes(memory.scope, run_id)) == 2
    assert [g.label for g in memory.store.run_groups(memory.scope, run_id)] == ["conflict"]


def test_runs_are_per_scope(engine_location, server, llm, embedder) -> None:
    with open_memory(engine_location, embedder, scope="team-a") as team_a:
        launch_group(team_a)
        label(server, "conflict")
        report = consolidate(team_a, llm)
    with open_memory(engine_location, embedder, scope="team-b") as team_b:
        launch_group(team_b)
        assert history(team_b) == []
        assert team_b.store.run_changes(team_b.scope, report.run_id) == []
        assert team_b.store.run_groups(team_b.scope, report.run_id) == []
        with pytest.raises(InvalidInput, match="no consolidation run"):
            undo(team_b, report.run_id)
        label(server, "distinct")
        assert consolidate(team_b, llm).labels["distinct"] == 1  # team A's rows stay out
        assert [r.scope for r in history(team_b)] == ["team-b"]


def test_current_vectors_are_the_stored_embeddings(memory, embedder, server, llm) -> None:
    ids = launch_group(memory)
    other = add(memory, "office hiring")
    label(server, "conflict")
    consolidate(memory, llm)
    found_ids, matrix = memory.store.current_vectors(memory.scope)
    assert found_ids.dtype == np.int64 and matrix.dtype == np.float32
    assert found_ids.tolist() == [ids[1], other]  # superseded rows are not current
    expected = embedder.embed(["launch friday launch", "office hiring"])
    np.testing.assert_array_equal(matrix, expected)
    empty_ids, empty = memory.store.current_vectors("nobody")
    assert empty_ids.shape == (0,) and empty.shape == (0, len(KEYWORDS) + 1)


# -- the entity graph --------------------------------------------------------------------------
def triples(*items: tuple[str, str, str]) -> dict[str, object]:
    return {"triples": [{"subject": s, "relation": r, "object": o} for s, r, o in items]}


def extract_each(memory: Memory, server: FakeOpenAI, llm: LLMClient, rows: dict[int, list]):
    """Extract ``{record_id: [triple, ...]}`` in id order, one scripted reply per row."""
    for record_id in sorted(rows):
        server.reply_json(triples(*rows[record_id]))
    report = extract(memory, llm, ids=list(rows))
    assert report.failures == 0 and report.extracted == len(rows)
    return report


@pytest.fixture
def launch_graph(memory, server, llm) -> dict[str, int]:
    """Three dated rows and one undated row, each with triples about the Helix launch."""
    ids = {
        "march": add(memory, "Helix launch is in March.", "Ana", "2024-01-10"),
        "april": add(memory, "Helix launch moved to April.", "Ben", "2024-02-20"),
        "june": add(memory, "Helix launch moved to June.", "Cleo", "2024-05-02"),
        "undated": add(memory, "Dan owns the Helix budget."),
    }
    extract_each(
        memory,
        server,
        llm,
        {
            ids["march"]: [("Helix", "launches in", "March")],
            ids["april"]: [("Helix", "launches in", "April"), ("Ben", "announced", "Helix")],
            ids["june"]: [("Helix", "launches in", "June")],
            ids["undated"]: [("Dan", "owns", "Helix budget")],
        },
    )
    server.requests.clear()
    return ids


def test_extraction_stores_triples_once_and_marks_empty_rows(
    memory, server, llm, engine_location
) -> None:
    first = add(memory, "Ana leads Helix. Helix launches in March.", "Ana", "2024-01-10")
    second = add(memory, "Nothing to see.", "Ben", "2024-01-11")
    archived = add(memory, "Old Helix note.")
    memory.store.set_state(memory.scope, [archived], "archived", None)
    before = content(engine_location)
    assert memory.store.pending_extraction(memory.scope, None) == [first, second]
    assert memory.store.pending_extraction(memory.scope, [second, archived, 999]) == [second]
    server.reply_json(
        triples(
            (" Ana ", "leads", "Helix"),
            ("Helix", "launches  in", "March"),
            ("ana", "leads", "the Helix"),  # the same fact again
        )
    )
    server.reply_json({"triples": []})
    report = extract(memory, llm)
    assert (report.pending, report.extracted, report.triples, report.failures) == (2, 2, 2, 0)
    stored = memory.store.triples_of(memory.scope, [first, second])
    assert [(t.subject, t.relation, t.object, t.subject_key, t.object_key) for t in stored] == [
        ("Ana", "leads", "Helix", "ana", "helix"),
        ("Helix", "launches in", "March", "helix", "march"),
    ]
    assert {(t.record_id, t.date, t.touched) for t in stored} == {(first, "2024-01-10", 0)}
    assert memory.store.pending_extraction(memory.scope, None) == []
    assert extract(memory, llm).pending == 0 and len(server.requests) == 2
    marks = query(
        engine_location, "SELECT record_id, model, triples FROM graph_extractions ORDER BY 1"
    )
    assert marks == [(first, "layers-model", 2), (second, "layers-model", 0)]
    assert content(engine_location) == before  # rows untouched


def test_a_failed_extraction_leaves_the_row_pending(memory, server, llm) -> None:
    row = add(memory, "Ana leads Helix.", "Ana", "2024-01-10")
    server.reply('{"triples": [{"subject": "Ana", "relation": "leads"}]}')  # no object
    report = extract(memory, llm)
    assert report.failures == 1 and "LLMReplyError" in report.failed[row]
    assert memory.store.pending_extraction(memory.scope, None) == [row]
    assert memory.store.triples_of(memory.scope, [row]) == []


def test_add_triples_marks_a_row_exactly_once(engine_location, embedder) -> None:
    with open_memory(engine_location, embedder) as memory:
        row = add(memory, "Ana leads Helix.")
    results: list[bool] = []
    barrier = threading.Barrier(4)
    triple = Triple("Ana", "leads", "Helix", "ana", "helix")

    def attempt() -> None:
        with open_memory(engine_location, embedder) as mine:
            store = mine.store
            assert isinstance(store, GraphStore)
            barrier.wait()
            results.append(store.add_triples(mine.scope, row, [triple], "m"))

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, False, False, True]
    with open_memory(engine_location, embedder) as memory:
        assert len(memory.store.triples_of(memory.scope, [row])) == 1
        with pytest.raises(InvalidInput, match="no record 999"):
            memory.store.add_triples(memory.scope, 999, [triple], "m")
        fresh = add(memory, "Ben joins Helix.")
    with open_memory(engine_location, embedder, scope="other") as other:
        with pytest.raises(InvalidInput, match=f"no record {fresh} in scope 'other'"):
            other.store.add_triples(other.scope, fresh, [triple], None)
        assert other.store.triples_of(other.scope, [row, fresh]) == []
        # A row of another scope that is already extracted: SQLite looks the mark up by id
        # alone and answers "already done"; PostgreSQL looks it up in the scope and refuses.
        if engine_of(engine_location) == "sqlite":
            assert other.store.add_triples(other.scope, row, [triple], None) is False
        else:
            with pytest.raises(InvalidInput, match=f"no record {row} in scope 'other'"):
                other.store.add_triples(other.scope, row, [triple], None)
    with open_memory(engine_location, embedder) as memory:
        assert memory.store.pending_extraction(memory.scope, None) == [fresh]


def test_facts_carry_their_row_date_and_obey_as_of(memory, server, llm, launch_graph) -> None:
    ids = launch_graph
    server.reply_json({"entities": ["Helix"]})
    facts = related_facts(memory, "When does Helix launch?", llm=llm, as_of="2024-03-01")
    assert facts == [
        RelatedFact("Ben", "announced", "Helix", ids["april"], "2024-02-20"),
        RelatedFact("Helix", "launches in", "April", ids["april"], "2024-02-20"),
        RelatedFact("Helix", "launches in", "March", ids["march"], "2024-01-10"),
    ]  # June is dated after as_of; the undated row is out under an as-of bound
    server.reply_json({"entities": ["helix", "Dan"]})
    facts = related_facts(memory, "Who owns what on Helix?", llm=llm)
    # an undated row's recency is its ingest time
    assert [f.object for f in facts] == ["Helix budget", "June", "Helix", "April", "March"]
    assert facts[0].date is None and facts[0].record_id == ids["undated"]


def test_the_paper_switch_ignores_dates_and_as_of(memory, server, llm, launch_graph) -> None:
    server.reply_json({"entities": ["Helix"]})
    facts = related_facts(memory, "When?", llm=llm, as_of="2024-01-31", dated=False)
    assert [f.object for f in facts] == ["June", "Helix", "April", "March"]  # ingest order
    assert all(f.date is None and f.record_id is None for f in facts)
    server.reply_json({"entities": ["Helix"]})
    paper = memory.evidence(
        "Helix launch", as_of="2024-03-01", graph=GraphOptions(llm, dated=False)
    )
    assert "- Helix | launches in | June" in paper.text  # the paper's leak past as_of
    assert "Helix launch moved to June" not in paper.text  # while the rows obey it
    server.reply_json({"entities": ["Helix"]})
    dated = memory.evidence("Helix launch", as_of="2024-03-01", graph=GraphOptions(llm))
    assert "June" not in dated.text and "- Helix | launches in | April" in dated.text


def test_archived_rows_contribute_no_facts(memory, server, llm, launch_graph) -> None:
    memory.store.set_state(memory.scope, [launch_graph["june"]], "archived", None)
    for dated in (True, False):
        server.reply_json({"entities": ["Helix"]})
        facts = related_facts(memory, "When?", llm=llm, dated=dated)
        assert "June" not in {f.object for f in facts}


def test_ranking_by_entities_touched_then_recency(memory, server, llm) -> None:
    old = add(memory, "Ana leads Helix.", "Ana", "2024-01-01")
    new = add(memory, "Ana leads Helix again; Helix uses Postgres.", "Ana", "2024-06-01")
    other = add(memory, "Ana likes tea.", "Ana", "2024-07-01")
    loop = add(memory, "Helix depends on Helix.", "Ana", "2024-08-01")
    extract_each(
        memory,
        server,
        llm,
        {
            old: [("Ana", "leads", "Helix")],
            new: [("Ana", "leads", "Helix"), ("Helix", "uses", "Postgres")],
            other: [("Ana", "likes", "tea")],
            loop: [("Helix", "depends on", "Helix")],
        },
    )
    hits = memory.store.search_triples(memory.scope, ["ana", "helix"], None, dated=True, limit=9)
    assert [(h.record_id, h.relation, h.touched) for h in hits] == [
        (new, "leads", 2),
        (old, "leads", 2),
        (loop, "depends on", 1),  # subject and object are one entity: touched once
        (other, "likes", 1),
        (new, "uses", 1),
    ]
    assert memory.store.search_triples(memory.scope, [], None, dated=True, limit=5) == []
    assert memory.store.search_triples(memory.scope, ["ana"], None, dated=True, limit=0) == []
    server.reply_json({"entities": ["Ana", "Helix"]})
    facts = related_facts(memory, "What does Ana do on Helix?", llm=llm)
    assert [(f.relation, f.record_id) for f in facts][:2] == [("leads", new), ("depends on", loop)]


def test_at_most_five_facts_after_the_rows(memory, server, llm) -> None:
    milestones = " ".join(f"M{n}" for n in range(12))
    row = add(memory, f"The Helix launch plan: milestones {milestones}.", "Ana", "2024-01-01")
    server.reply_json(triples(*[("Helix", "has milestone", f"M{n}") for n in range(12)]))
    assert extract(memory, llm).triples == 12
    server.reply_json({"entities": ["Helix"]})
    evidence = memory.evidence("Helix launch", graph=GraphOptions(llm))
    assert len(evidence.facts) == MAX_FACTS == 5
    rows_part, facts_part = evidence.text.split("\n\n" + FACTS_HEADING + "\n")
    assert f"record {row}" in rows_part and "Helix launch plan" in rows_part
    lines = facts_part.splitlines()
    assert [line.split(" | ")[2].split(" ")[0] for line in lines] == [
        "M11",
        "M10",
        "M9",
        "M8",
        "M7",
    ]  # one row: the newest triples first
    assert lines[0].endswith(f"(2024-01-01, record {row})")


# -- the same history, side by side ------------------------------------------------------------
def _scenario(location: str, embedder: KeywordEmbedder, server: FakeOpenAI, llm) -> dict:
    """One full session on a store; everything it returns must match across engines."""
    with open_memory(location, embedder) as memory:
        launch_group(memory)
        budget_pair(memory)
        add(memory, "office hiring", "Dan")
        label(server, "conflict")
        label(server, "distinct")
        dry = consolidate(memory, llm, dry_run=True)
        first = run_conflict_and_restatement(memory, server, llm)
        undone = undo(memory, first.run_id)
        label(server, "conflict")
        label(server, "restatement")
        server.reply_json({"text": "Budget in April."})
        last = consolidate(memory, llm)
        pending = memory.store.pending_extraction(memory.scope, None)
        for record_id in pending:  # triples of the row's own words: grounded in it
            words = memory.get(record_id).text.lower().rstrip(".").split()
            server.reply_json(triples((words[0], "row", words[-1])))
        extracted = extract(memory, llm)
        server.reply_json({"entities": ["launch"]})
        facts = related_facts(memory, "launch?", llm=llm, as_of="2024-02-15")
        runs = [{**r.to_dict(), "started_at": None, "finished_at": None} for r in history(memory)]
        log = {
            r["id"]: (
                memory.store.run_groups(memory.scope, r["id"]),
                memory.store.run_changes(memory.scope, r["id"]),
            )
            for r in runs
        }
        return {
            "reports": [dry.to_dict(), first.to_dict(), undone.to_dict(), last.to_dict()],
            "runs": runs,
            "log": log,
            "states": states(location),
            "rows": {
                i: (r.text, r.author, r.date, r.tags, r.source, r.state, r.superseded_by)
                for i, r in memory.store.get(memory.scope, list(states(location))).items()
            },
            "pending": pending,
            "extracted": extracted.to_dict(),
            "facts": facts,
        }


def test_both_engines_record_the_same_history(both_locations, embedder, server, llm) -> None:
    results = {
        engine: _scenario(location, embedder, server, llm)
        for engine, location in both_locations.items()
    }
    assert results["postgres"] == results["sqlite"]
    assert len(results["sqlite"]["runs"]) == 4 and results["sqlite"]["facts"]
