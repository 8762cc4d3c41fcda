"""The consolidation operator over a real SQLite memory and a real local HTTP model."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mempp import InvalidInput, Memory, Settings, StoreError
from mempp.llm import LLMClient
from mempp.llm.consolidate import (
    MERGE_MAX_TOKENS,
    RunReport,
    consolidate,
    count_tokens,
    group_rows,
    history,
    parse_label,
    undo,
)
from mempp.store import sqlite as sqlite_store
from mempp.store.base import ConsolidationStore, StateConflict, supports

import fake_openai
from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply, fast_client

# The shared fixture (pytest finds fixtures among module attributes).
server = fake_openai.server

KEYWORDS = ["launch", "friday", "budget", "april", "office", "hiring"]
TAG_ONLY = Settings(w_lex=0, w_vec=0, reserve=0)


# -- fixtures and helpers ----------------------------------------------------------------------
def make_llm(server: FakeOpenAI, **kwargs: Any) -> LLMClient:
    return fast_client(server, **{"model": "consolidation-model", **kwargs})


@pytest.fixture
def llm(server: FakeOpenAI) -> Iterator[LLMClient]:
    with make_llm(server) as client:
        yield client


@pytest.fixture
def embedder() -> KeywordEmbedder:
    return KeywordEmbedder(KEYWORDS)


@pytest.fixture
def memory(db_path: Path, embedder: KeywordEmbedder) -> Iterator[Memory]:
    with Memory(db_path, embedder=embedder) as mem:
        yield mem


def add(memory: Memory, text: str, author: str | None = None, date: str | None = None, **kw):
    result = memory.add(text, author=author, date=date, **kw)
    assert result.id is not None
    return result.id


def states(memory: Memory) -> dict[int, tuple[str, int | None]]:
    conn = sqlite3.connect(memory.store.location)
    try:
        rows = conn.execute("SELECT id, state, superseded_by FROM records ORDER BY id").fetchall()
    finally:
        conn.close()
    return {row[0]: (row[1], row[2]) for row in rows}


def content(memory: Memory) -> dict[int, tuple]:
    """Every row's content (all but its state), read straight from the file."""
    conn = sqlite3.connect(memory.store.location)
    try:
        rows = conn.execute(
            """SELECT id, scope, text, author, event_date, event_key, tags, source, ingested_key,
                      embedding FROM records ORDER BY id"""
        ).fetchall()
    finally:
        conn.close()
    return {row[0]: row[1:] for row in rows}


def assert_nothing_deleted_or_rewritten(before: dict[int, tuple], after: dict[int, tuple]):
    assert set(before) <= set(after), "a row disappeared"
    for row_id, row in before.items():
        assert after[row_id] == row, f"row {row_id} changed content"


def label(server: FakeOpenAI, value: str) -> None:
    server.reply_json({"label": value})


def launch_group(memory: Memory) -> list[int]:
    """Three near-identical launch rows (cosine >= 0.85 to the first), dates out of order."""
    return [
        add(memory, "launch friday", "Ana", "2024-01-10"),
        add(memory, "launch friday launch", "Ben", "2024-03-01"),
        add(memory, "launch launch friday", "Cleo", "2024-02-01"),
    ]


# -- grouping ----------------------------------------------------------------------------------
def naive_groups(ids: np.ndarray, matrix: np.ndarray, threshold: float) -> list[list[int]]:
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    grouped = [False] * len(ids)
    groups = []
    for i in range(len(ids)):
        if grouped[i]:
            continue
        members = [i] + [
            j for j in range(i + 1, len(ids)) if not grouped[j] and unit[i] @ unit[j] >= threshold
        ]
        for m in members:
            grouped[m] = True
        groups.append([int(ids[m]) for m in members])
    return groups


def test_grouping_is_greedy_and_not_transitive() -> None:
    # a~b (0.894) and b~c (0.949) but a!~c (0.707): c does not follow b into a's group.
    a, b, c, d = [1.0, 0.0], [2.0, 1.0], [1.0, 1.0], [1.0, 2.0]
    ids = np.array([10, 11, 12, 13])
    assert group_rows(ids, np.array([a, b, c, d]), 0.85) == [[10, 11], [12, 13]]
    # order matters: seeded by b, both a and c join it
    assert group_rows(ids[:3], np.array([b, a, c]), 0.85) == [[10, 11, 12]]
    assert group_rows(np.array([], dtype=np.int64), np.empty((0, 2)), 0.85) == []


def test_blocked_grouping_matches_the_naive_definition(monkeypatch) -> None:
    import mempp.llm.consolidate as module

    rng = np.random.default_rng(7)
    base = rng.normal(size=(6, 8))
    matrix = np.repeat(base, 7, axis=0) + rng.normal(scale=0.35, size=(42, 8))
    ids = np.arange(100, 142)
    expected = naive_groups(ids, matrix, 0.9)
    assert any(len(g) > 2 for g in expected) and any(len(g) == 1 for g in expected)
    monkeypatch.setattr(module, "BLOCK_CELLS", 50)  # blocks of one row
    assert group_rows(ids, matrix, 0.9) == expected
    monkeypatch.setattr(module, "BLOCK_CELLS", 400)  # blocks of several rows
    assert group_rows(ids, matrix, 0.9) == expected


def test_store_grouping_is_non_transitive_and_in_ingest_order(memory, server, llm) -> None:
    a = add(memory, "launch")
    b = add(memory, "launch launch friday")
    c = add(memory, "launch friday")
    d = add(memory, "launch friday friday")
    e = add(memory, "budget april")  # alone
    label(server, "distinct")
    label(server, "distinct")
    report = consolidate(memory, llm)
    assert [r.members for r in report.details] == [(a, b), (c, d)]
    assert report.rows == 5 and report.groups == 2 and report.labels["distinct"] == 2
    first, second = (req.messages[1]["content"] for req in server.requests)
    assert "[1] undated | unknown author\nlaunch\n" in first and "launch friday\n" not in first
    assert "[2] undated | unknown author\nlaunch friday friday" in second
    assert e not in {m for r in report.details for m in r.members}


def test_threshold_is_validated(memory, llm) -> None:
    for bad in (0, -0.5, 1.5, "0.8", True):
        with pytest.raises(InvalidInput):
            consolidate(memory, llm, threshold=bad)


# -- the three labels --------------------------------------------------------------------------
def test_conflict_supersedes_every_row_but_the_latest_dated(memory, server, llm) -> None:
    ids = launch_group(memory)
    before = content(memory)
    label(server, "conflict")
    report = consolidate(memory, llm)
    winner = ids[1]  # dated 2024-03-01, although not the newest id
    assert report.details[0].winner == winner
    assert states(memory) == {
        ids[0]: ("active", winner),
        ids[1]: ("active", None),
        ids[2]: ("active", winner),
    }
    assert report.superseded == 2 and report.archived == 0 and report.merged == 0
    assert_nothing_deleted_or_rewritten(before, content(memory))
    # superseded rows stay retrievable with their own dates
    found = {hit.id for hit in memory.search("launch friday")}
    assert set(ids) <= found
    [request] = server.requests
    assert request.body["model"] == "consolidation-model" and request.body["temperature"] == 0
    assert '"conflict"' in request.messages[0]["content"]
    assert "[2] 2024-03-01 | Ben\nlaunch friday launch" in request.messages[1]["content"]


def test_conflict_ties_go_to_the_newest_id_and_undated_rows_never_win(memory, server, llm):
    tied = [add(memory, "launch friday", "Ana", "2024-05-01")]
    tied.append(add(memory, "launch friday launch", "Ben", "2024-05-01"))
    undated = add(memory, "launch launch friday", "Cleo")
    label(server, "conflict")
    report = consolidate(memory, llm)
    assert report.details[0].winner == tied[1]
    assert states(memory)[undated] == ("active", tied[1])
    assert states(memory)[tied[0]] == ("active", tied[1])


def test_restatement_writes_one_merged_row_and_archives_the_originals(
    memory, server, llm, embedder
) -> None:
    first = add(memory, "budget april", "Ana", "2024-02-10", tags=["finance", "q2"])
    second = add(memory, "budget april april", "Ben", "2024-01-20", tags=["q2", "plan"])
    third = add(memory, "budget budget april", "Ana", "2024-03-05")
    before = content(memory)
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
    assert merged.state == "active" and merged.superseded_by is None
    assert embedder.calls == calls_before + 1  # embedded with the Memory's encoder
    for row in (first, second, third):
        assert memory.get(row).state == "archived"
    assert (report.archived, report.merged, report.superseded) == (3, 1, 0)
    assert_nothing_deleted_or_rewritten(before, content(memory))

    # the merged row is indexed like any row: lexical, vector and each author's tag
    assert [h.id for h in memory.search("budget april")][:1] == [merged.id]
    assert {h.id for h in memory.search("Ben", settings=TAG_ONLY)} == {merged.id}
    assert {h.id for h in memory.search("finance", settings=TAG_ONLY)} == {merged.id}
    merge_request = server.requests[1]
    assert '"text"' in merge_request.messages[0]["content"]
    assert "[3] 2024-03-05 | Ana\nbudget budget april" in merge_request.messages[1]["content"]


def test_merged_text_is_capped_at_220_tokens(memory, server, llm) -> None:
    assert count_tokens("budget " * MERGE_MAX_TOKENS) == MERGE_MAX_TOKENS
    ids = [add(memory, "budget april", "Ana"), add(memory, "budget april april", "Ben")]
    before = states(memory)
    label(server, "restatement")
    server.reply_json({"text": "budget " * (MERGE_MAX_TOKENS + 1)})
    report = consolidate(memory, llm)
    assert report.failures == 1 and report.merged == 0 and report.labels["restatement"] == 0
    assert "221 tokens, over the 220 cap" in report.details[0].detail
    assert states(memory) == before

    label(server, "restatement")
    server.reply_json({"text": " ".join(["budget"] * MERGE_MAX_TOKENS)})
    report = consolidate(memory, llm)
    assert report.merged == 1
    assert all(memory.get(i).state == "archived" for i in ids)


def test_distinct_leaves_the_group_untouched(memory, server, llm) -> None:
    launch_group(memory)
    before = states(memory)
    label(server, "distinct")
    report = consolidate(memory, llm)
    assert states(memory) == before
    assert report.labels == {"conflict": 0, "restatement": 0, "distinct": 1}
    assert memory.store.run_changes(memory.scope, report.run_id) == []
    [group] = memory.store.run_groups(memory.scope, report.run_id)
    assert group.label == "distinct" and len(group.members) == 3


def test_singletons_cost_no_call(memory, server, llm) -> None:
    add(memory, "launch friday")
    add(memory, "budget april")
    add(memory, "office hiring")
    report = consolidate(memory, llm)
    assert server.requests == [] and report.groups == 0 and report.rows == 3


# -- replies and transport failures ------------------------------------------------------------
@pytest.mark.parametrize(
    "reply",
    [
        '{"label": "conflict"}',
        '{"label": "CONFLICT"}',
        '{"label": "  Conflict \\n"}',
        '{"label": "conflict", "reason": "the date moved", "confidence": 0.9}',
        '```json\n{"label": "Conflict"}\n```',
        '<think>dates differ</think>\n{"label": "conflict"}',
        'Here you go: {"label": "conflict"} -- done',
    ],
)
def test_label_variants_are_read(memory, server, llm, reply) -> None:
    ids = launch_group(memory)
    server.reply(reply)
    report = consolidate(memory, llm)
    assert report.labels["conflict"] == 1 and report.failures == 0
    assert states(memory)[ids[0]] == ("active", ids[1])


def test_parse_label() -> None:
    assert parse_label(" Restatement\t") == "restatement"
    for bad in ("merge", "", None, 1, "conflict.", ["conflict"]):
        with pytest.raises(ValueError):
            parse_label(bad)


@pytest.mark.parametrize(
    "reply",
    [
        "conflict",  # prose, no JSON
        '{"label": conflict}',  # malformed
        '{"label": "confl',  # partial (cut off)
        '{"label": "conflict"',  # partial object
        '{"verdict": "conflict"}',  # missing key
        '{"label": 1}',  # wrong type
        '{"label": "merge"}',  # not a label
        '["conflict"]',  # not an object
    ],
)
def test_unusable_label_reply_leaves_the_group_untouched(memory, server, llm, reply) -> None:
    launch_group(memory)
    before = states(memory)
    server.reply(reply)
    report = consolidate(memory, llm)
    assert states(memory) == before
    assert report.failures == 1 and sum(report.labels.values()) == 0
    assert report.details[0].label == "failed" and "label call" in report.details[0].detail
    [group] = memory.store.run_groups(memory.scope, report.run_id)
    assert group.label == "failed" and "LLMReplyError" in group.detail
    assert len(server.requests) == 1  # no corrective retry: a bad reply is a failure


def test_server_error_leaves_the_group_untouched(memory, server, llm) -> None:
    launch_group(memory)
    before = states(memory)
    server.error(500).error(500)  # the client retries once, then gives up
    report = consolidate(memory, llm)
    assert states(memory) == before and report.failures == 1
    assert "LLMUnavailable" in report.details[0].detail and "HTTP 500" in report.details[0].detail
    assert len(server.requests) == 2


def test_rate_limit_then_success_is_applied(memory, server, llm) -> None:
    ids = launch_group(memory)
    server.error(429, headers={"Retry-After": "0"})
    label(server, "conflict")
    report = consolidate(memory, llm)
    assert report.failures == 0 and report.superseded == 2
    assert states(memory)[ids[0]] == ("active", ids[1])
    assert len(server.requests) == 2


def test_timeout_leaves_the_group_untouched(memory, server) -> None:
    launch_group(memory)
    before = states(memory)
    server.push(ScriptedReply(content='{"label": "conflict"}', delay=1.0))
    with make_llm(server, timeout=0.2, max_retries=0) as slow:
        report = consolidate(memory, slow)
    assert states(memory) == before and report.failures == 1
    assert "timed out" in report.details[0].detail


def test_failed_merge_call_leaves_the_group_untouched(memory, server, llm) -> None:
    ids = [add(memory, "budget april", "Ana"), add(memory, "budget april april", "Ben")]
    label(server, "restatement")
    server.reply('{"text": "The budget is')  # cut off
    report = consolidate(memory, llm)
    assert report.failures == 1 and "merge call" in report.details[0].detail
    assert all(memory.get(i).state == "active" for i in ids)
    assert len(memory) == 2


def test_concurrent_calls_apply_in_group_order(memory, server) -> None:
    launch = launch_group(memory)
    budget = [add(memory, "budget april"), add(memory, "budget april april")]
    office = [add(memory, "office hiring"), add(memory, "office office hiring")]

    def by_topic(request: RecordedRequest) -> ScriptedReply:
        rows = request.messages[1]["content"]  # the system prompt mentions a launch too
        value = "conflict" if "launch" in rows else "distinct"
        return ScriptedReply(content=f'{{"label": "{value}"}}')

    server.responder = by_topic
    with make_llm(server, max_concurrency=4) as client:
        report = consolidate(memory, client, max_workers=3)
    assert [d.members for d in report.details] == [tuple(launch), tuple(budget), tuple(office)]
    assert [d.label for d in report.details] == ["conflict", "distinct", "distinct"]
    assert report.superseded == 2


# -- what a run considers ----------------------------------------------------------------------
def test_superseded_and_archived_rows_are_not_regrouped(memory, server, llm) -> None:
    ids = launch_group(memory)
    budget = [add(memory, "budget april", "Ana"), add(memory, "budget april april", "Ben")]
    label(server, "conflict")
    label(server, "restatement")
    server.reply_json({"text": "Budget: April."})
    first = consolidate(memory, llm)
    assert first.superseded == 2 and first.merged == 1
    merged = first.details[1].merged_id

    second = consolidate(memory, llm)  # winner and merged row are alone now
    assert second.groups == 0 and len(server.requests) == 3
    assert second.rows == 2  # ids[1] and the merged row

    # a new version joins the current winner; the superseded rows stay out
    newer = add(memory, "launch friday launch launch", "Dan", "2024-04-01")
    label(server, "conflict")
    third = consolidate(memory, llm)
    assert [d.members for d in third.details] == [(ids[1], newer)]
    assert states(memory)[ids[1]] == ("active", newer)
    assert states(memory)[ids[0]] == ("active", ids[1])  # earlier link kept
    assert all(states(memory)[b] == ("archived", None) for b in budget)
    assert states(memory)[merged] == ("active", None)


# -- dry run -----------------------------------------------------------------------------------
def test_dry_run_labels_but_changes_nothing(memory, server, llm) -> None:
    launch_group(memory)
    add(memory, "budget april", "Ana")
    add(memory, "budget april april", "Ben")
    before_states, before_content = states(memory), content(memory)
    label(server, "conflict")
    label(server, "restatement")  # no merge call follows in a dry run
    report = consolidate(memory, llm, dry_run=True)
    assert states(memory) == before_states and content(memory) == before_content
    assert len(server.requests) == 2
    assert report.dry_run and report.labels["conflict"] == 1
    assert (report.superseded, report.archived, report.merged) == (2, 2, 1)  # would be
    assert "dry run" in report.summary()
    [run] = history(memory)
    assert run.dry_run and run.counts["superseded"] == 2
    assert memory.store.run_changes(memory.scope, report.run_id) == []
    assert [g.label for g in memory.store.run_groups(memory.scope, report.run_id)] == [
        "conflict",
        "restatement",
    ]
    with pytest.raises(InvalidInput, match="dry run"):
        undo(memory, report.run_id)


# -- audit trail and undo ----------------------------------------------------------------------
def run_conflict_and_restatement(memory: Memory, server: FakeOpenAI, llm) -> RunReport:
    label(server, "conflict")
    label(server, "restatement")
    server.reply_json({"text": "Budget: April."})
    return consolidate(memory, llm)


def test_every_change_is_logged(memory, server, llm) -> None:
    ids = launch_group(memory)
    budget = [add(memory, "budget april", "Ana"), add(memory, "budget april april", "Ben")]
    report = run_conflict_and_restatement(memory, server, llm)
    merged = report.details[1].merged_id
    changes = memory.store.run_changes(memory.scope, report.run_id)
    logged = [(c.group, c.label, c.change.to_dict(), c.merged_id) for c in changes]
    assert logged == [
        (1, "conflict", _change(ids[0], "active", None, "active", ids[1]), None),
        (1, "conflict", _change(ids[2], "active", None, "active", ids[1]), None),
        (2, "restatement", _change(budget[0], "active", None, "archived", None), merged),
        (2, "restatement", _change(budget[1], "active", None, "archived", None), merged),
        (2, "restatement", _change(merged, None, None, "active", None), merged),
    ]
    [run] = history(memory)
    assert run.kind == "consolidate" and not run.dry_run and run.finished_at
    assert run.settings["threshold"] == 0.85 and run.settings["model"] == "consolidation-model"
    assert run.counts == {**report.counts(), "completed": True}
    assert report.to_dict()["labels"] == {"conflict": 1, "restatement": 1, "distinct": 0}


def _change(record_id, old_state, old_by, new_state, new_by) -> dict[str, object]:
    return {
        "record_id": record_id,
        "old_state": old_state,
        "old_superseded_by": old_by,
        "new_state": new_state,
        "new_superseded_by": new_by,
    }


def test_undo_restores_states_and_archives_merged_rows(memory, server, llm) -> None:
    launch_group(memory)
    add(memory, "budget april", "Ana")
    add(memory, "budget april april", "Ben")
    original_states = states(memory)
    report = run_conflict_and_restatement(memory, server, llm)
    merged = report.details[1].merged_id
    before_undo = content(memory)

    result = undo(memory, report.run_id)
    assert len(result.restored) == 4 and result.archived_merged == [merged]
    after = states(memory)
    assert after == {**original_states, merged: ("archived", None)}
    assert_nothing_deleted_or_rewritten(before_undo, content(memory))  # archived, not deleted
    assert memory.get(merged).text == "Budget: April."
    runs = history(memory)
    assert [(r.kind, r.undoes, r.undone_by) for r in runs] == [
        ("consolidate", None, runs[1].id),
        ("undo", report.run_id, None),
    ]
    assert result.to_dict()["restored"] == 4
    with pytest.raises(InvalidInput, match="already undone"):
        undo(memory, report.run_id)
    with pytest.raises(InvalidInput, match="cannot be undone"):
        undo(memory, runs[1].id)
    with pytest.raises(InvalidInput, match="no consolidation run 99"):
        undo(memory, 99)


def test_undo_refuses_when_a_row_changed_since(memory, server, llm) -> None:
    ids = launch_group(memory)
    label(server, "conflict")
    report = consolidate(memory, llm)
    memory.store.set_state(memory.scope, [ids[0]], "archived", ids[1])
    snapshot = states(memory)
    with pytest.raises(StateConflict, match=rf"records \[{ids[0]}\] were changed again"):
        undo(memory, report.run_id)
    assert states(memory) == snapshot  # all or nothing
    assert [r.kind for r in history(memory)] == ["consolidate"]
    memory.store.set_state(memory.scope, [ids[0]], "active", ids[1])  # back as the run left it
    undo(memory, report.run_id)
    assert all(states(memory)[i] == ("active", None) for i in ids)


def test_undo_order_newest_first_when_runs_build_on_each_other(memory, server, llm) -> None:
    ids = [add(memory, "budget april", "Ana"), add(memory, "budget april april", "Ben")]
    label(server, "restatement")
    server.reply_json({"text": "budget april budget"})
    first = consolidate(memory, llm)
    merged = first.details[0].merged_id
    later = add(memory, "budget budget april", "Cleo", "2030-01-01")
    label(server, "conflict")
    second = consolidate(memory, llm)
    assert states(memory)[merged] == ("active", later)

    with pytest.raises(StateConflict, match=str(merged)):
        undo(memory, first.run_id)
    undo(memory, second.run_id)
    undo(memory, first.run_id)
    assert states(memory)[merged] == ("archived", None)
    assert all(states(memory)[i] == ("active", None) for i in [*ids, later])


def test_no_operation_deletes_a_row_or_changes_its_text(memory, server, llm) -> None:
    launch_group(memory)
    add(memory, "budget april", "Ana", "2024-01-01")
    add(memory, "budget april april", "Ben", "2024-01-02")
    add(memory, "office hiring", "Cleo")
    snapshots = [content(memory)]

    label(server, "conflict")
    label(server, "restatement")
    consolidate(memory, llm, dry_run=True)
    snapshots.append(content(memory))
    report = run_conflict_and_restatement(memory, server, llm)
    snapshots.append(content(memory))
    undo(memory, report.run_id)
    snapshots.append(content(memory))
    label(server, "distinct")  # the originals are current again and regroup
    label(server, "restatement")
    server.reply_json({"text": "Budget in April."})
    consolidate(memory, llm)
    snapshots.append(content(memory))
    for before, after in itertools.pairwise(snapshots):
        assert_nothing_deleted_or_rewritten(before, after)
    assert snapshots[1] == snapshots[0]  # the dry run wrote no row
    assert len(snapshots[-1]) == len(snapshots[0]) + 2  # only merged rows were ever added


def test_the_audit_log_is_append_only(memory, server, llm, db_path) -> None:
    launch_group(memory)
    label(server, "conflict")
    consolidate(memory, llm)
    conn = sqlite3.connect(db_path, isolation_level=None)
    for statement in (
        "DELETE FROM consolidation_changes",
        "UPDATE consolidation_changes SET new_state = 'archived'",
        "DELETE FROM consolidation_groups",
        "UPDATE consolidation_groups SET label = 'distinct'",
        "DELETE FROM consolidation_runs",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    newest_version = sqlite_store.MIGRATIONS[-1].version
    assert conn.execute("SELECT max(version) FROM mempp_migrations").fetchone()[0] == newest_version
    conn.close()


def test_runs_are_per_scope(db_path, server, llm, embedder) -> None:
    with Memory(db_path, embedder=embedder, scope="team-a") as team_a:
        launch_group(team_a)
        label(server, "conflict")
        report = consolidate(team_a, llm)
    with Memory(db_path, embedder=embedder, scope="team-b") as team_b:
        launch_group(team_b)
        assert history(team_b) == []
        with pytest.raises(InvalidInput, match="no consolidation run"):
            undo(team_b, report.run_id)
        label(server, "distinct")
        assert consolidate(team_b, llm).labels["distinct"] == 1  # team A's rows stay out
        assert [r.scope for r in history(team_b)] == ["team-b"]


def test_engines_without_the_capability_are_refused() -> None:
    class Bare:
        pass

    with pytest.raises(StoreError, match="Bare engine does not support consolidation"):
        supports(Bare(), ConsolidationStore, "consolidation")


@pytest.mark.parametrize(
    ("merged", "why"),
    [
        ("<the merged record>", "placeholder"),
        ("...", "placeholder"),
        ("the record you wrote", "repeats the instructions"),
        ("Quarterly hiring freeze announced for the Berlin office.", "not grounded"),
        ("", "text is empty"),
    ],
)
def test_a_placeholder_echo_or_ungrounded_merge_archives_nothing(
    memory, server, llm, merged, why
) -> None:
    add(memory, "budget april", "Ana", "2024-02-10")
    add(memory, "budget april april", "Ben", "2024-01-20")
    before, rows = states(memory), content(memory)
    label(server, "restatement")
    server.reply_json({"text": merged})
    report = consolidate(memory, llm)
    assert report.failures == 1 and report.merged == 0 and report.archived == 0
    assert why in report.details[0].detail
    assert states(memory) == before and content(memory) == rows  # no row added, none moved


def test_prompts_show_the_reply_shape_without_a_fillable_example(memory, server, llm) -> None:
    add(memory, "budget april", "Ana")
    add(memory, "budget april april", "Ben")
    label(server, "restatement")
    server.reply_json({"text": "Budget: April."})
    consolidate(memory, llm)
    label_request, merge_request = server.requests
    for request in (label_request, merge_request):
        system = request.messages[0]["content"]
        assert "<" not in system and "..." not in system
        assert request.body["response_format"]["type"] == "json_schema"
    merge_format = merge_request.body["response_format"]["json_schema"]
    assert merge_format["name"] == "consolidation_merge" and merge_format["strict"] is True
    label_schema = label_request.body["response_format"]["json_schema"]["schema"]
    assert label_schema["properties"]["label"]["enum"] == ["conflict", "restatement", "distinct"]


def test_a_merged_row_gets_its_context_when_the_index_is_on(memory, server, llm) -> None:
    memory.enable_context(2)
    add(memory, "launch plan", "Ana", "2024-01-01", thread="t")
    add(memory, "budget april", "Ana", "2024-02-10", thread="t")
    add(memory, "budget april april", "Ben", "2024-01-20", thread="t")
    label(server, " Restatement ")
    server.reply_json({"text": "The budget is set in April."})
    report = consolidate(memory, llm)
    merged = report.details[0].merged_id
    assert merged is not None
    stored, records = memory.store.context_count()
    assert stored == records  # every row, the merged one included, has its context row
    assert {c.name: c.ok for c in memory.verify()}["context index"]
