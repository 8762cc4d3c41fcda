"""The in-RAM bm25 replica ranks exactly as SQLite FTS5's ``bm25()`` does."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

import pytest

from mempp import Memory, Settings, preset
from mempp.filters import NO_FILTERS, Filters
from mempp.search.query import lexical_query

from conftest import KeywordEmbedder

WORDS = (
    "budget plan launch pricing team decision meeting ticket release customer churn renewal "
    "contract annual monthly seat invoice webhook retry outage incident review approve reject "
    "quarter roadmap hiring vendor security audit policy the and of to running runs ran café "
    "naïve résumé 2024 v2 BILL-142 Q3"
).split()


def _wait_for_replica(memory: Memory) -> None:
    store = memory.store
    deadline = time.time() + 30
    while store._bm25 is None:  # the first call starts the build; later calls adopt it
        store._lexical_in_ram("default", lexical_query("budget", memory.settings), None, 5)
        if store._bm25 is not None:
            return
        assert time.time() < deadline, "bm25 replica was never built"
        time.sleep(0.05)


def _sql_ranking(memory: Memory, query, as_of, limit, filters=NO_FILTERS) -> list[int]:
    store = memory.store
    saved, store._bm25 = store._bm25, None
    saved_min, store.bm25_min_rows = store.bm25_min_rows, 10**9
    try:
        return store.lexical(memory.scope, query, as_of, limit, filters=filters)
    finally:
        store._bm25, store.bm25_min_rows = saved, saved_min


@pytest.mark.parametrize(
    "settings",
    [
        Settings(lexical_mode="disjunctive"),
        Settings(lexical_mode="conjunctive"),
        preset("default"),  # two-word phrases (FTS5 scores added), one term per stem
    ],
    ids=["disjunctive", "conjunctive", "default"],
)
def test_replica_equals_fts5_on_random_corpus(db_path, settings) -> None:
    rng = random.Random(7)
    with Memory(db_path, embedder=KeywordEmbedder(["budget", "plan"])) as memory:
        docs = []
        for i in range(600):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
            if i % 50 == 0:
                text = "!!! ..."  # a row with no tokens still counts in N
            date = None if i % 7 == 0 else f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
            docs.append({"text": text, "date": date, "author": f"a{i % 5}"})
        memory.add_many(docs)
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        memory.add_many([{"text": f"budget plan late addition {i}"} for i in range(20)])
        archived = [3, 4, 5]
        memory.store.set_state(memory.scope, archived, "archived", None)
        checked = 0
        for trial in range(60):
            question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
            query = lexical_query(question, settings)
            if not query.terms:
                continue
            as_of = None if trial % 3 else 1717200000 * 1_000_000
            limit = rng.choice([1, 5, 50, 200])
            if query.unique_stems:
                query = memory.store._one_term_per_stem(query)
            fast = memory.store._lexical_in_ram(memory.scope, query, as_of, limit)
            assert fast is not None, query
            assert fast == _sql_ranking(memory, query, as_of, limit), (question, as_of, limit)
            assert not set(fast) & set(archived)
            # with filters the replica masks the ranking by the eligible ids: same as FTS5
            where = Filters.create(author=f"a{trial % 5}", since="2024-03-01")
            fast = memory.store._lexical_in_ram(memory.scope, query, as_of, limit, where)
            assert fast == _sql_ranking(memory, query, as_of, limit, where), (question, where)
            checked += 1
        assert checked > 40
        newest = memory.store._conn.execute("SELECT max(id) FROM records").fetchone()[0]
        assert memory.store._bm25.max_id == newest  # caught up with the late additions


def test_an_error_in_the_phrase_query_reaches_the_caller(db_path, monkeypatch) -> None:
    # FTS5 matches the phrases on a thread of its own; what fails there fails the leg.
    settings = preset("default")
    with Memory(db_path, embedder=KeywordEmbedder(["budget"]), settings=settings) as memory:
        memory.add_many([{"text": f"budget review for the {w} plan"} for w in WORDS[:30]])
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        query = lexical_query("budget review", settings)
        assert query.phrases and query.mode == "disjunctive"
        assert memory.store._lexical_in_ram(memory.scope, query, None, 5)

        def broken(phrases: object) -> None:
            raise sqlite3.OperationalError("database disk image is malformed")

        monkeypatch.setattr(memory.store, "_phrase_scores", broken)
        with pytest.raises(sqlite3.OperationalError, match="malformed"):
            memory.store._lexical_in_ram(memory.scope, query, None, 5)


def test_replica_is_not_used_for_multi_token_terms(db_path) -> None:
    with Memory(db_path, embedder=KeywordEmbedder([])) as memory:
        memory.add_many([f"row {i} budget" for i in range(30)])
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        from mempp.search.query import LexicalQuery

        assert (
            memory.store._lexical_in_ram(
                "default", LexicalQuery(("budget",), "disjunctive"), None, 5
            )
            is not None
        )
        # "don't" is one term to the caller but two tokens to FTS5: only FTS5 can rank it.
        assert (
            memory.store._lexical_in_ram(
                "default", LexicalQuery(("don't",), "disjunctive"), None, 5
            )
            is None
        )


def _ranked(memory: Memory, question: str) -> list[int] | None:
    query = lexical_query(question, Settings(lexical_mode="disjunctive"))
    return memory.store._lexical_in_ram(memory.scope, query, None, 50)


def test_replica_is_saved_beside_the_file_and_reused_while_it_matches(db_path, monkeypatch) -> None:
    from mempp.store.sqlite import replicas

    rng = random.Random(11)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(300)]
    saved = Path(f"{db_path}{replicas.BM25_FILE_SUFFIX}")
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.add_many(docs)
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        expected = _ranked(memory, "budget plan review")
    assert saved.exists()
    built = []
    real_build = replicas._bm25_from_fts5
    monkeypatch.setattr(
        replicas, "_bm25_from_fts5", lambda conn: built.append(1) or real_build(conn)
    )
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        assert built == [] and _ranked(memory, "budget plan review") == expected
        memory.add_many([f"budget plan review {i}" for i in range(10)])  # caught up, not rebuilt
        fresh = _ranked(memory, "budget plan review")
        assert fresh == _sql_ranking(
            memory, lexical_query("budget plan review", Settings()), None, 50
        )
    # Another database at the same path does not match the saved replica: rebuilt.
    db_path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.add_many(docs[:150])
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        assert built == [1]
        assert memory.store._bm25.rows == 150
    # An unreadable file is rebuilt too.
    saved.write_bytes(b"junk")
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        assert built == [1, 1] and memory.store._bm25.rows == 150


def test_a_replica_saved_as_npz_by_an_earlier_mempp_is_loaded_and_replaced(
    db_path, monkeypatch
) -> None:
    from mempp.index.bm25 import Bm25Index
    from mempp.store.sqlite import replicas
    from test_bm25_index import write_format_1

    rng = random.Random(13)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(300)]
    saved = Path(f"{db_path}{replicas.BM25_FILE_SUFFIX}")
    legacy = Path(f"{db_path}{replicas.BM25_LEGACY_SUFFIX}")
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.add_many(docs)
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        expected = _ranked(memory, "budget plan review")
    write_format_1(Bm25Index.load(saved), legacy)
    saved.unlink()
    built = []
    real_build = replicas._bm25_from_fts5
    monkeypatch.setattr(
        replicas, "_bm25_from_fts5", lambda conn: built.append(1) or real_build(conn)
    )
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.warm()  # finds the .npz beside the file
        assert memory.store._bm25 is not None and built == []
        assert _ranked(memory, "budget plan review") == expected
    assert saved.exists() and not legacy.exists()


def test_an_erasure_drops_the_saved_replica_and_the_rebuilt_one_ranks_like_fts5(db_path) -> None:
    from mempp.store.sqlite import replicas

    rng = random.Random(5)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(200)]
    saved = Path(f"{db_path}{replicas.BM25_FILE_SUFFIX}")
    secret = "zq9xkv7w"  # no stemmer changes it, so the replica's terms would hold it as is
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.add_many(docs)
        gone = memory.add(f"budget plan {secret}").id
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
        assert saved.exists() and secret.encode() in saved.read_bytes()
        memory.redact(gone, reason="erasure")
        assert not saved.exists()
        _wait_for_replica(memory)  # rebuilt from FTS5, which no longer holds the row
        query = lexical_query("budget plan review", Settings(lexical_mode="disjunctive"))
        assert _ranked(memory, "budget plan review") == _sql_ranking(memory, query, None, 50)
        assert gone not in (_ranked(memory, f"budget {secret}") or [])
    assert saved.exists() and secret.encode() not in saved.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "other rows"])
def test_a_damaged_or_foreign_saved_replica_is_refused_in_one_warning_and_rebuilt(
    db_path, monkeypatch, caplog, damage
) -> None:
    import logging

    from mempp.index.bm25 import Bm25Index
    from mempp.store.sqlite import replicas

    rng = random.Random(17)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(300)]
    saved = Path(f"{db_path}{replicas.BM25_FILE_SUFFIX}")
    with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
        memory.add_many(docs)
        memory.store.bm25_min_rows = 0
        _wait_for_replica(memory)
    whole = saved.read_bytes()
    if damage == "truncated":
        saved.write_bytes(whole[:-100])
    elif damage == "flipped":
        flipped = bytearray(whole)
        flipped[len(whole) * 2 // 3] ^= 0x20
        saved.write_bytes(bytes(flipped))
    else:  # another database at the same path, the old replica left beside it
        for end in ("", "-wal", "-shm", "-vectors.arrays"):
            Path(f"{db_path}{end}").unlink(missing_ok=True)
        with Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory:
            memory.add_many(docs[::-1])
        saved.write_bytes(whole)
    built = []
    real_build = replicas._bm25_from_fts5
    monkeypatch.setattr(
        replicas, "_bm25_from_fts5", lambda conn: built.append(1) or real_build(conn)
    )
    with (
        caplog.at_level(logging.WARNING, logger="mempp.store"),
        Memory(db_path, embedder=KeywordEmbedder(["budget"])) as memory,
    ):
        memory.warm()
        assert built == [1] and memory.store._bm25 is not None
        query = lexical_query("budget plan review", Settings(lexical_mode="disjunctive"))
        assert _ranked(memory, "budget plan review") == _sql_ranking(memory, query, None, 50)
    (record,) = [r for r in caplog.records if "BM25" in r.getMessage()]
    message = record.getMessage()
    assert str(saved) in message and "building the BM25 replica again" in message
    assert "\n" not in message
    assert Bm25Index.load(saved).rows == 300  # saved again
