"""One behaviour, two engines: SQLite and PostgreSQL must give the same answers.

Every test here runs through the public ``Memory`` API on both engines (the ``engine_location``
fixture), or on one store of each side by side (``both_locations``). Vectors come from small
deterministic encoders whose cosine values are exact binary fractions, so both engines compute
bit-identical scores and every tie is a real tie, broken by the newer id in both.

What must be identical (and is asserted): ids, ranks, leg ranks, reserved flags and fused
scores of the vector and tag legs and of fusion, the recency reserve, the as-of scope, tenant
scopes, archived rows, dedupe, bulk loads (``bulk_load()``), empty stores and tie-breaks;
which rows the lexical leg matches for plain words in both modes; the as-of and tenant scope
applied before lexical ranking; hostile query text never raising; append-only enforcement;
persistence; concurrent writers.

Where the lexical leg may legitimately differ (each case below is pinned by a test):

Analysis: none. Both engines index FTS5's tokens (``porter unicode61 remove_diacritics 2``,
run for PostgreSQL by ``mempp.index.analysis`` and stored in ``records.terms``, schema 10),
so stems, stop words (none dropped), diacritics (folded) and compound tokens (split at
punctuation) are the same (``test_one_analysis_in_both_engines``), and under BM25 the
rankings and scores are equal (``tests/test_conformance_lexical.py``).

Ranking. SQLite always ranks with FTS5 ``bm25()`` (k1=1.2, b=0.75). PostgreSQL ranks with
BM25 too under ``Settings(lexical_rank="bm25")`` (the default preset), from an in-RAM replica
of its rows' terms (``mempp.store.postgres.bm25``): the same formula and counts, phrases
included, so the orders are equal; only with several scopes do they differ, since FTS5
counts N and the mean length over the whole table and PostgreSQL over the scope. Under
``lexical_rank="cover_density"`` (the paper presets and ``Settings()``), PostgreSQL ranks
with ``ts_rank_cd(tsv, query)`` (cover density, normalisation 0), the paper's function. Both
engines break equal scores by the newer id. Against BM25, cover density agrees when matching
rows have the same length and the same occurrences of the same terms (a tie in both), and
when one row holds more occurrences of a term than another of equal length. It differs when:

* lengths differ: BM25 divides term frequency by document length, ``ts_rank_cd`` (with
  normalisation 0) does not, so a short row beats a long row holding the term as often in
  SQLite, while PostgreSQL calls them equal and puts the newer first;
* terms differ in rarity (disjunctive queries): BM25 weights a rare term above a common
  one (IDF), ``ts_rank_cd`` has no collection statistics and weights every term alike;
* terms are near each other (conjunctive queries): ``ts_rank_cd`` scores a row higher when
  the query terms sit close together (short covers), BM25 ignores positions.

Matching under cover density reads the ``tsvector``, which is built from the terms but holds
at most 1 MB (for a document of more than roughly 100,000 distinct words the terms past
that are left out), positions up to 16,383 and no term over 2,047 bytes; FTS5 (and BM25 on
PostgreSQL, which reads the terms) indexes everything. The text itself is stored whole by
both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import random
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import numpy as np
import pytest

from mempp import EncoderMismatch, InvalidInput, Memory, Settings, StoreError, preset
from mempp.dates import parse_as_of
from mempp.errors import RecordNotFound
from mempp.filters import Filters
from mempp.records import Document, Hit
from mempp.search.query import LexicalQuery, date_spans
from mempp.store import open_store
from mempp.store.postgres import PostgresStore
from mempp.store.sqlite import SQLiteStore

import engines
from conftest import KeywordEmbedder

# The fixtures this module uses (pytest finds fixtures among module attributes).
pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location
both_locations = engines.both_locations

KEYWORDS = ("alpha", "beta", "gamma", "delta", "budget", "launch")
LEX = Settings(w_tag=0, w_vec=0, reserve=0)
TAG = Settings(w_lex=0, w_vec=0, reserve=0)
VEC = Settings(w_lex=0, w_tag=0, reserve=0)


def engine_of(location: str) -> str:
    return "postgres" if location.startswith("postgresql://") else "sqlite"


def open_memory(location: str, scope: str = "default", **kwargs: object) -> Memory:
    return Memory(location, scope=scope, embedder=KeywordEmbedder(KEYWORDS), **kwargs)


def ids(hits: Sequence[Hit]) -> list[int]:
    return [h.id for h in hits]


def signature(hits: Sequence[Hit]) -> list[tuple[object, ...]]:
    """Everything a hit says except the ingest wall-clock time."""
    return [
        (
            h.id,
            h.rank,
            tuple(sorted(h.leg_ranks.items())),
            h.reserved,
            h.score,
            h.record.text,
            h.record.author,
            h.record.date,
            h.record.tags,
            h.record.source,
            h.record.scope,
            h.record.state,
            h.record.superseded_by,
            h.record.thread,
        )
        for h in hits
    ]


class SignEmbedder:
    """Unit vectors with four components of +-0.5 placed by a hash of the text.

    Every norm is exactly 1 and every dot product a multiple of 0.25, so SQLite's float32
    dot product and pgvector's cosine distance compute the same exact values: rankings can be
    compared bit for bit, and ties (there are many) must be broken by the newer id in both.
    """

    name = "sign/16"
    dim = 16

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            rng = random.Random(digest)
            for axis in rng.sample(range(self.dim), 4):
                out[row, axis] = 0.5 if rng.random() < 0.5 else -0.5
        return out


# -- vector and tag legs, fusion, reserve: exact expectations on each engine ---------------


def test_vector_leg_ranks_by_cosine_ties_to_newest(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        ana = memory.add("alpha", author="Ana").id
        mixed = memory.add("alpha alpha beta").id
        bob = memory.add("alpha", author="Bob").id  # same vector as Ana's, newer
        beta = memory.add("beta").id
        other = memory.add("unrelated words").id
        hits = memory.search("alpha", settings=VEC)
        assert ids(hits) == [bob, ana, mixed, other, beta]  # cos 1, 1, .89, 0, 0
        assert [h.leg_ranks for h in hits] == [{"vec": i} for i in range(1, 6)]
        assert [h.score for h in hits] == [2.0 / (60 + i) for i in range(5)]
        assert ids(memory.search("alpha", settings=VEC.with_(candidates=2))) == [bob, ana]


class _WaitingEmbedder(KeywordEmbedder):
    """Encodes a question only once the lexical leg has started (or fails after 10 s), and
    records the thread it ran on."""

    def __init__(self, lexical_started: threading.Event) -> None:
        super().__init__(KEYWORDS)
        self.lexical_started = lexical_started
        self.threads: list[str] = []
        self.armed = False  # the writes before the searches encode at once

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        if self.armed and not self.lexical_started.wait(10):
            raise AssertionError("the question was encoded before the lexical leg started")
        return super().embed(texts)


def test_the_question_is_encoded_beside_the_legs_that_need_no_vector(
    engine_location: str,
) -> None:
    started = threading.Event()
    embedder = _WaitingEmbedder(started)
    with Memory(engine_location, embedder=embedder) as memory:
        for text in ("alpha budget", "beta launch", "alpha gamma"):
            memory.add(text, date="2024-01-02")
        lexical = memory.store.lexical
        lexical_threads: list[str] = []

        def watched(*args: object, **kwargs: object) -> list[int]:
            lexical_threads.append(threading.current_thread().name)
            started.set()
            return lexical(*args, **kwargs)

        memory.store.lexical = watched  # type: ignore[method-assign]
        embedder.armed = True
        embedder.threads.clear()
        hits = memory.search("alpha budget")
        assert [h.record.text for h in hits][:1] == ["alpha budget"]
        # The encoding waited for the lexical leg to start: they ran side by side, on two
        # threads (SQLite: the encoding on the caller's; PostgreSQL: on a kept one).
        assert embedder.threads and embedder.threads[0] != lexical_threads[0]
        # Only the vector leg: nothing to encode beside, so it runs in the caller.
        started.set()
        embedder.threads.clear()
        memory.search("alpha", settings=VEC)
        assert embedder.threads == [threading.current_thread().name]


class _FailingEmbedder(KeywordEmbedder):
    down = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.down:
            raise RuntimeError("the encoder is down")
        return super().embed(texts)


def test_an_encoder_error_reaches_the_caller_of_search(engine_location: str) -> None:
    embedder = _FailingEmbedder(KEYWORDS)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.add_many([{"text": "alpha budget"}, {"text": "beta launch"}])
        embedder.down = True
        with pytest.raises(RuntimeError, match="the encoder is down"):
            memory.search("alpha budget")
        assert ids(memory.search("alpha budget", settings=LEX))  # the store is unharmed


def test_tag_leg_counts_labels_then_newest(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        both = memory.add("x1", author="Ana Lima", tags=["Finance"]).id
        tag_only = memory.add("x2", tags=["finance", "Ops Team"]).id
        author_only = memory.add("x3", author="ana lima").id
        ops = memory.add("x4", author="Bob", tags=["ops"]).id
        hits = memory.search("ana lima finance", settings=TAG.with_(tag_ngrams=2))
        assert ids(hits) == [both, author_only, tag_only]
        # one label each ("ops" vs "ops-team"): a tie, the newer first
        hits = memory.search("ops team", settings=TAG.with_(tag_ngrams=2))
        assert ids(hits) == [ops, tag_only]
        assert ids(memory.search("Ops_Team", settings=TAG)) == [ops, tag_only]  # whole question


def test_fusion_reserve_and_unmatched_fill(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        # Vector and lexical legs agree on these rows (equal lengths, falling counts of the
        # query word), so the fused order is the same in both engines.
        rows = [
            memory.add("budget " * (8 - i) + "other " * i, date=f"2024-01-{10 + i}").id
            for i in range(8)
        ]
        tagged = memory.add("tagged row", author="Budget", date="2023-12-01").id
        plain = [memory.add(f"plain row {i}", date="2024-02-01").id for i in range(3)]
        # candidates=8 keeps the zero-cosine rows out of the vector leg (unmatched).
        settings = Settings(w_lex=1, w_tag=1, w_vec=2, reserve=3, candidates=8)
        hits = memory.search("budget", k=6, settings=settings)
        assert [h.reserved for h in hits] == [False] * 3 + [True] * 3
        assert ids(hits) == [rows[0], rows[1], rows[2], rows[7], rows[6], rows[5]]
        for hit in hits:
            expected = sum(settings.weight(leg) / (60 + r - 1) for leg, r in hit.leg_ranks.items())
            assert hit.score == expected
        # Nothing left to reserve among matches: the most recently ingested unmatched rows.
        only_tag = memory.search("budget", k=4, settings=TAG.with_(reserve=3))
        assert ids(only_tag) == [tagged, plain[2], plain[1], plain[0]]
        assert [h.reserved for h in only_tag] == [False, True, True, True]
        assert [h.score for h in only_tag[1:]] == [0.0, 0.0, 0.0]


def test_as_of_applies_before_ranking_in_every_leg(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        old = [
            memory.add(f"alpha budget note {i}", author="Ana", date=f"2024-01-0{i + 1}").id
            for i in range(3)
        ]
        for i in range(20):  # newer and more similar: would crowd the old rows out if late
            memory.add(f"alpha alpha budget budget {i}", author="Ana", date="2024-06-01")
        memory.add("alpha budget undated", author="Ana")
        for settings in (LEX, TAG, VEC):
            found = ids(memory.search("alpha budget ana", as_of="2024-02-01", settings=settings))
            assert sorted(found) == old, settings
            narrow = settings.with_(candidates=2)
            found = ids(memory.search("alpha budget ana", as_of="2024-02-01", settings=narrow))
            assert len(found) == 2 and set(found) <= set(old)
        everything = memory.search("alpha", as_of="2030-01-01", k=100, settings=VEC)
        assert len(everything) == 23  # the undated row is out once an as-of bound is given


def test_scopes_isolate_tenants_and_dedupe(engine_location: str) -> None:
    with open_memory(engine_location, scope="acme") as acme:
        secret = acme.add("alpha secret", author="Ana", tags=["plan"]).id
    with open_memory(engine_location, scope="globex") as globex:
        mine = globex.add("alpha secret", author="Ana", tags=["plan"]).id  # not a duplicate
        assert mine != secret
        for settings in (LEX, TAG, VEC, Settings()):
            assert ids(globex.search("alpha secret ana plan", settings=settings)) == [mine]
        assert len(globex) == 1
        assert globex.store.get("globex", [secret]) == {}
        assert globex.store.count("acme") == 1
        assert globex.store.scopes() == ["acme", "globex"]


def test_archived_rows_never_appear_superseded_rows_compete(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        a = memory.add("alpha budget v1", date="2024-01-01").id
        b = memory.add("alpha budget v2", date="2024-02-01").id
        c = memory.add("alpha budget v3", date="2024-03-01", author="Budget").id
        d = memory.add("unrelated", date="2024-04-01").id
        memory.store.set_state(memory.scope, [a], "active", superseded_by=b)
        memory.store.set_state(memory.scope, [c, d], "archived", superseded_by=None)
        for settings in (LEX, TAG, VEC, Settings(reserve=3)):
            found = ids(memory.search("alpha budget", k=10, settings=settings))
            assert c not in found and d not in found
        assert set(ids(memory.search("alpha budget", settings=VEC))) == {a, b}
        assert memory.get(a).superseded_by == b and memory.get(c).state == "archived"
        assert len(memory) == 2 and memory.store.count(memory.scope, active_only=False) == 4


def test_dedupe_rules(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        results = memory.add_many(
            [
                {"text": "alpha", "author": "Ana"},
                {"text": "alpha", "author": "Bo"},
                {"text": "alpha"},
                {"text": "alpha"},
                {"text": "alpha", "author": "Ana"},
                {"text": "alpha ", "author": "Ana"},
                {"text": "   "},
            ]
        )
        skipped = [None, None, None, "duplicate", "duplicate", None, "empty"]
        assert [r.skipped for r in results] == skipped
        assert [r.id for r in results if r.added] == [1, 2, 3, 4]  # no gaps for skips
        assert memory.add("alpha", author="Ana").skipped == "duplicate"
        memory.store.set_state(memory.scope, [1], "archived", None)
        again = memory.add("alpha", author="Ana")
        assert again.added and again.id == 5


def test_empty_store_and_empty_matches(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        assert memory.search("alpha") == []
        assert memory.search("the of and", settings=LEX) == []
        memory.add("alpha row", date="2024-05-01")
        assert memory.search("alpha", as_of="2024-01-01") == []
        assert memory.search("zzz", settings=LEX) == []
        assert memory.search("zzz", settings=TAG) == []
        assert memory.store.latest_unmatched(memory.scope, [], None, 0) == []


def test_encoder_identity_is_enforced(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("alpha")
        assert memory.store.encoder() == (KeywordEmbedder(KEYWORDS).name, len(KEYWORDS) + 1)
    with Memory(engine_location, embedder=KeywordEmbedder(["other"])) as other:
        with pytest.raises(EncoderMismatch):
            other.add("beta")
        with pytest.raises(EncoderMismatch):
            other.search("beta")


def test_gather_keeps_order_and_raises_only_when_no_call_runs(engine_location: str) -> None:
    store = open_store(engine_location)
    started: list[str] = []
    finished: list[str] = []

    def slow() -> int:
        started.append("slow")
        time.sleep(0.2)
        finished.append("slow")
        return 0

    def fail() -> int:
        raise StoreError("boom")

    try:
        assert store.gather([]) == []
        assert store.gather([lambda: 1, lambda: "two", lambda: [3]]) == [1, "two", [3]]
        for calls in ([fail, slow], [slow, fail]):
            with pytest.raises(StoreError, match="boom"):
                store.gather(calls)
            assert started == finished
    finally:
        store.close()


def test_records_pages_through_a_scope_in_write_order(engine_location: str) -> None:
    with (
        open_memory(engine_location, scope="acme") as acme,
        open_memory(engine_location, scope="globex") as globex,
    ):
        written = []
        for i in range(7):
            written.append(acme.add(f"alpha note {i}", author="Ana", date=f"2024-01-0{i + 1}").id)
            globex.add(f"beta note {i}")
        acme.store.set_state("acme", [written[2], written[5]], "archived", written[6])
        every = list(acme.records(page=3))
        assert [r.id for r in every] == written  # archived ones too, other scopes not
        assert every[2].state == "archived" and every[2].superseded_by == written[6]
        assert every[0] == acme.get(written[0])
        active = [r.id for r in acme.records(active_only=True, page=2)]
        assert active == [w for w in written if w not in (written[2], written[5])]
        assert [r.text for r in globex.records()] == [f"beta note {i}" for i in range(7)]
        store = acme.store
        assert [r.id for r in store.records_after("acme", written[3], 2)] == written[4:6]
        assert store.records_after("acme", written[-1], 10) == []
        assert store.records_after("nobody", 0, 10) == []
        with pytest.raises(InvalidInput, match="page"):
            list(acme.records(page=0))


def test_a_closed_store_says_so(engine_location: str) -> None:
    memory = open_memory(engine_location)
    memory.add("alpha budget", author="Ana")
    memory.close()
    memory.close()  # closing twice is harmless
    for call in (
        lambda: memory.search("alpha"),
        lambda: memory.add("beta"),
        lambda: memory.get(1),
        lambda: len(memory),
        memory.warm,
    ):
        with pytest.raises(StoreError, match="closed"):
            call()
    with open_memory(engine_location) as reopened:  # nothing lost
        assert [h.record.text for h in reopened.search("alpha")] == ["alpha budget"]


def _loaded_rows(memory: Memory) -> int:
    """How many rows the store's in-RAM BM25 replica holds for the memory's scope."""
    store = memory.store
    if isinstance(store, PostgresStore):
        replica = store._replicas.get(memory.scope)
        return 0 if replica is None else len(replica.ids)
    assert isinstance(store, SQLiteStore)
    return 0 if store._bm25 is None else store._bm25.rows


def test_warm_loads_ahead_catches_up_and_changes_no_result(engine_location: str) -> None:
    questions = ("alpha budget", "beta launch plans", "gamma delta", "nothing at all")
    with open_memory(engine_location) as writer:
        for i in range(40):
            writer.add(f"{KEYWORDS[i % 6]} note {i} {KEYWORDS[(i * 5) % 6]}", author="Ana")
        with open_memory(engine_location) as memory:
            if isinstance(memory.store, SQLiteStore):
                memory.store.bm25_min_rows = 1  # build the replica even for a small file
            assert _loaded_rows(memory) == 0
            memory.warm()
            assert _loaded_rows(memory) == 40
            writer.add("alpha budget moved to launch", author="Ben")
            memory.warm()  # catches up with the other writer's row
            assert _loaded_rows(memory) == 41
            warm = [signature(memory.search(q)) for q in questions]
        with open_memory(engine_location) as cold:
            assert [signature(cold.search(q)) for q in questions] == warm
        assert warm[0][0][6] == "Ben"  # the newest row is found, and ranks first


def test_warm_in_a_thread_beside_searches(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add_many([f"alpha budget {i}" for i in range(30)])
        expected = signature(memory.search("alpha budget 7"))
    with open_memory(engine_location) as memory:
        if isinstance(memory.store, SQLiteStore):
            memory.store.bm25_min_rows = 1
        with ThreadPoolExecutor(1) as pool:
            warming = pool.submit(memory.warm)
            seen = [signature(memory.search("alpha budget 7")) for _ in range(5)]
            warming.result()  # raises what warm() raised
            # Searches alone may leave SQLite's replica built but not yet taken up; warm()
            # takes it up before it returns.
            assert _loaded_rows(memory) == 30
        assert seen == [expected] * 5


def test_persistence_across_reopen(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        first = memory.add("alpha budget", author="Ana", date="2024-01-01", tags=["x"]).id
        before = signature(memory.search("alpha budget ana"))
        record = memory.get(first)
    with open_memory(engine_location) as memory:
        assert signature(memory.search("alpha budget ana")) == before
        assert memory.get(first) == record  # ingested_at included, to the microsecond
        again = memory.add("alpha budget", author="Ana", date="2024-01-01")
        assert again.skipped == "duplicate"
        assert memory.add("beta").id == first + 1
        assert len(memory) == 2


def test_bulk_load_stores_and_finds_what_plain_adds_store(
    engine_location: str, tmp_path, request: pytest.FixtureRequest
) -> None:
    if engine_of(engine_location) == "sqlite":
        plain_location = str(tmp_path / "plain.db")
    else:
        server = request.getfixturevalue("pg_server")
        name = engines.create_database(server)
        request.addfinalizer(lambda: engines.drop_database(server, name))
        plain_location = engines.with_database(server, name)
    # Repeats inside batches and across them; batches large enough for PostgreSQL's COPY.
    items = [
        {
            "text": f"{KEYWORDS[n % 6]} note {n} {KEYWORDS[(n * 5) % 6]}",
            "author": ["Ana", "Bo", None][n % 3],
            "date": None if n % 7 == 0 else f"2024-0{1 + n % 9}-01",
            "tags": ["ops"] if n % 4 == 0 else [],
        }
        for n in (i % 250 for i in range(700))
    ]
    questions = ("alpha budget", "beta launch plans", "gamma delta ops", "Ana")
    outcomes = []
    for location, bulk in ((plain_location, False), (engine_location, True)):
        with open_memory(location) as memory:
            if bulk:
                with memory.bulk_load():
                    with memory.bulk_load():  # re-entrant
                        results = memory.add_many(items, batch_size=300)
                    inside = [signature(memory.search(q, as_of="2024-06-01")) for q in questions]
            else:
                results = memory.add_many(items, batch_size=300)
                inside = [signature(memory.search(q, as_of="2024-06-01")) for q in questions]
            after = [signature(memory.search(q, as_of="2024-06-01")) for q in questions]
            assert after == inside
            stored = [dataclasses.replace(r, ingested_at="") for r in memory.records()]
        outcomes.append((results, after, stored))
    assert outcomes[1] == outcomes[0]
    assert any(r.skipped == "duplicate" for r in outcomes[0][0])


# -- lexical leg: what must agree -----------------------------------------------------------

LEXICAL_DOCS = (
    "alpha vendor contract",  # 1
    "alpha vendor",  # 2
    "vendor roadmap",  # 3
    "roadmap outage invoice",  # 4
    "quarterly hiring roadmap",  # 5
    "nothing relevant here",  # 6
)


@pytest.mark.parametrize(
    ("question", "mode", "expected"),
    [
        ("alpha vendor", "conjunctive", {1, 2}),
        ("alpha vendor", "disjunctive", {1, 2, 3}),
        ("vendor roadmap", "conjunctive", {3}),
        ("vendor roadmap", "disjunctive", {1, 2, 3, 4, 5}),
        ("alpha outage", "conjunctive", set()),
        ("alpha outage", "disjunctive", {1, 2, 4}),
        ("invoices", "conjunctive", {4}),  # stemmed in both
        ("what is the vendor contract?", "conjunctive", {1}),
        ("what is the vendor contract?", "disjunctive", {1, 2, 3}),
    ],
)
@pytest.mark.parametrize("rank", ["cover_density", "bm25"])
def test_lexical_match_sets_agree(
    engine_location: str, question: str, mode: str, expected: set[int], rank: str
) -> None:
    with open_memory(engine_location) as memory:
        memory.add_many(LEXICAL_DOCS)
        settings = LEX.with_(lexical_mode=mode, lexical_rank=rank)
        assert set(ids(memory.search(question, settings=settings))) == expected


@pytest.mark.parametrize("rank", ["cover_density", "bm25"])
def test_lexical_ties_and_term_frequency_agree(engine_location: str, rank: str) -> None:
    with open_memory(engine_location) as memory:
        once_old = memory.add("vendor alpha beta").id
        twice = memory.add("vendor vendor beta").id
        once_new = memory.add("gamma vendor beta").id
        # Same length: more occurrences first, equal evidence newest first, in both engines.
        settings = LEX.with_(lexical_rank=rank)
        assert ids(memory.search("vendor", settings=settings)) == [twice, once_new, once_old]


BM25 = LEX.with_(lexical_rank="bm25", stop_words="english", max_terms=None)
BM25_DOCS = (
    "vendor contract signed for the roadmap",  # no PostgreSQL stop word is needed
    "vendor vendor vendor budget",
    "contract renewal budget outage invoice roadmap launch",
    "outage",
    "invoice contract",
    "launch budget vendor contract roadmap outage invoice renewal",
    "renewal",
)


@pytest.mark.parametrize(
    "question",
    ["vendor contract", "budget outage launch", "invoice renewal roadmap", "vendor"],
)
def test_bm25_ranks_alike_in_both_engines(both_locations: dict[str, str], question: str) -> None:
    # Rows without stop words, in one scope: the engines count the same lengths, rarities and
    # frequencies, so BM25 (lengths and rarity matter, unlike ts_rank_cd) orders them alike.
    rankings = {}
    for engine, location in both_locations.items():
        with open_memory(location) as memory:
            memory.add_many(BM25_DOCS[:-1])
            memory.search(question, settings=BM25)  # PostgreSQL builds its replica here
            memory.add(BM25_DOCS[-1])  # and catches up with this row on the next search
            rankings[engine] = (
                ids(memory.search(question, settings=BM25)),
                ids(memory.search(question, settings=BM25.with_(phrases=True))),
                ids(memory.search(question, settings=BM25.with_(lexical_mode="conjunctive"))),
            )
    assert rankings["postgres"] == rankings["sqlite"]
    plain, _, _ = rankings["sqlite"]
    if question == "vendor":  # length normalisation: three "vendor" in 4 words beat 1 in 6
        assert plain[:2] == [2, 1]


def test_bm25_counts_a_repeated_stem_unless_unique_stems(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add_many([f"filler row {i}" for i in range(6)])
        announced = memory.add("board announced").id
        vendor = memory.add("board vendor").id  # newer, same length
        question = "vendor announced announcement"
        assert ids(memory.search(question, settings=BM25)) == [announced, vendor]
        once = BM25.with_(unique_stems=True)
        assert ids(memory.search(question, settings=once)) == [vendor, announced]


@pytest.mark.parametrize("rank", ["cover_density", "bm25"])
def test_lexical_scope_and_as_of_apply_before_ranking(engine_location: str, rank: str) -> None:
    with open_memory(engine_location, scope="other") as other:
        for i in range(10):
            other.add(f"vendor vendor vendor {i}")
    with open_memory(engine_location) as memory:
        old = memory.add("vendor note", date="2024-01-01").id
        for i in range(10):
            memory.add(f"vendor vendor vendor {i}", date="2024-06-01")
        narrow = LEX.with_(candidates=1, lexical_rank=rank)
        assert ids(memory.search("vendor", as_of="2024-02-01", settings=narrow)) == [old]
        assert len(memory.search("vendor", settings=LEX.with_(lexical_rank=rank))) == 11


HOSTILE = [
    '"',
    '"unbalanced quote',
    "NEAR(alpha beta, 2)",
    "alpha*",
    "*",
    "col:x",
    "text:alpha",
    "alpha OR",
    "AND OR NOT",
    "alpha & | ! <-> beta:*",
    "'; DROP TABLE records; --",
    "alpha\x00beta",
    "\x00",
    "^alpha",
    "{text}: alpha",
    "(((",
    "alpha - beta + gamma",
    "\\",
    "你好 世界 東京タワー",
    "ünïcödé 🚀",
    "a" * 5_000,
    "as of 9999-12-31, December 9999, 0000-00-00 or 0001-01-01?",  # date leg edge cases
    "alpha \ud800 beta \udfff",  # lone surrogates (a bad decode upstream)
]


@pytest.mark.parametrize("mode", ["conjunctive", "disjunctive"])
def test_hostile_queries_never_raise(engine_location: str, mode: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("alpha beta gamma")
        memory.add("col x text alpha near drop table records")
        for query in HOSTILE:
            if not query.replace("\x00", "").strip():
                with pytest.raises(InvalidInput):  # by design: nothing left to search for
                    memory.search(query)
            else:
                found = memory.search(query, settings=Settings(lexical_mode=mode))
                assert isinstance(found, list)
                # the default: phrases, one term per stem, the date leg, thread context
                default = preset("default").with_(lexical_mode=mode)
                assert isinstance(memory.search(query, settings=default), list)
                # the keyword leg's prefix match and the context leg at query time
                chat = preset("chat").with_(lexical_mode=mode)
                assert isinstance(memory.search(query, settings=chat), list)
            # Raw terms and phrases straight to the store, bypassing mempp.search.query's tokeniser.
            raw = LexicalQuery((query, "alpha"), mode, (query, f"alpha {query}"), True)
            assert isinstance(memory.store.lexical(memory.scope, raw, None, 10), list)
        assert len(memory) == 2  # nothing was dropped or changed
        conj = LEX.with_(lexical_mode="conjunctive")
        target = ids(memory.search("NEAR drop:table records*", settings=conj))
        assert target == [2]  # operators are plain words


def test_hostile_queries_never_raise_on_the_optional_indexes(engine_location: str) -> None:
    """The keyword leg's substring match (the trigram index) and the context index's leg."""
    with open_memory(engine_location) as memory:
        memory.add("alpha beta gamma", thread="t")
        memory.add("col x text alpha near drop table records", thread="t")
        memory.enable_index("keyword")
        memory.enable_context()
        both = preset("default-keyword-context")
        for query in HOSTILE:
            if query.replace("\x00", "").strip():
                assert isinstance(memory.search(query, settings=both), list)
        assert len(memory) == 2


# -- lexical leg: where the engines differ (pinned, documented in the module docstring) -----


def _lex(memory: Memory, question: str, mode: str = "disjunctive") -> list[int]:
    return ids(memory.search(question, settings=LEX.with_(lexical_mode=mode)))


def test_length_normalisation_differs(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        short = memory.add("vendor").id
        long = memory.add("vendor " + " ".join(f"filler{i}" for i in range(40))).id
        expected = {"sqlite": [short, long], "postgres": [long, short]}
        assert _lex(memory, "vendor") == expected[engine_of(engine_location)]


def test_term_rarity_differs(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        rare = memory.add("zeppelin notes").id
        common = memory.add("vendor notes").id
        for i in range(10):
            memory.add(f"vendor filler {i}")
        order = [i for i in _lex(memory, "zeppelin vendor") if i in (rare, common)]
        # BM25: the rare term wins. ts_rank_cd: one match each, a tie, the newer first.
        expected = {"sqlite": [rare, common], "postgres": [common, rare]}
        assert order == expected[engine_of(engine_location)]


def test_proximity_differs(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        close = memory.add("vendor invoice one two three four").id
        apart = memory.add("vendor one two three four invoice").id
        # ts_rank_cd: the shorter cover wins. BM25: same terms, same length, tie, newer first.
        expected = {"sqlite": [apart, close], "postgres": [close, apart]}
        assert _lex(memory, "vendor invoice", "conjunctive") == expected[engine_of(engine_location)]


@pytest.mark.parametrize(
    ("document", "question", "matches"),
    [
        ("a generous offer", "general", True),  # porter conflates both
        ("daily news digest", "new", True),
        ("the patient is dying", "die", False),  # porter keeps them apart
        ("clear skies ahead", "sky", False),
        ("meet at the café", "cafe", True),  # diacritics folded
        ("release 2024.10 shipped", "2024.10", True),  # tokens 2024 and 10
        ("mail foo@example.com now", "example", True),
        ("a data-driven plan", "driven", True),
        ("talk about it", "about", True),  # no stop words in the index
        ("see https://example.com/docs/v1.2/setup", "docs setup", True),
    ],
)
@pytest.mark.parametrize("rank", ["cover_density", "bm25"])
def test_one_analysis_in_both_engines(
    engine_location: str, document: str, question: str, matches: bool, rank: str
) -> None:
    # Both engines index FTS5's tokens (mempp.index.analysis): what used to differ between
    # FTS5 porter/unicode61 and PostgreSQL's english configuration matches alike.
    with open_memory(engine_location) as memory:
        rid = memory.add(document).id
        found = ids(memory.search(question, settings=LEX.with_(lexical_rank=rank)))
        assert (found == [rid]) is matches


def test_huge_documents_are_stored_whole(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        body = ("lorem ipsum dolor sit amet " * 80_000)[: 2 * 1024 * 1024] + " xylophonist"
        rid = memory.add(body).id
        assert memory.get(rid).text == body
        assert _lex(memory, "xylophonist") == [rid]
        # ~150k distinct words: past PostgreSQL's 1 MB tsvector limit. The row is stored
        # whole in both; PostgreSQL indexes the longest prefix that fits, FTS5 everything.
        rng = random.Random(3)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = ["".join(rng.choices(letters, k=8)) for _ in range(150_000)]
        text = "aardvark " + " ".join(words) + " zymurgy"
        wide = memory.add(text).id
        assert memory.get(wide).text == text
        assert _lex(memory, "aardvark") == [wide]
        expected = {"sqlite": [wide], "postgres": []}
        assert _lex(memory, "zymurgy") == expected[engine_of(engine_location)]
        # BM25 reads the row's terms, not its tsvector: every word, in both.
        bm25 = LEX.with_(lexical_rank="bm25")
        assert ids(memory.search("zymurgy", settings=bm25)) == [wide]


# -- side by side: a random corpus, every leg and the whole search compared -----------------

VOCABULARY = (
    "alpha budget vendor server contract quarter hiring roadmap pricing outage invoice migration"
).split()
AUTHORS = ("Ana Lima", "Bob", "Chen Wei", "Dara", None)
TAGS = ("finance", "launch-plan", "Ops Team", "legal")


def _random_corpus(seed: int, size: int) -> list[tuple[str, dict[str, object]]]:
    rng = random.Random(seed)
    corpus: list[tuple[str, dict[str, object]]] = []
    for _ in range(size):
        scope = rng.choice(("acme", "globex"))
        if corpus and rng.random() < 0.1:  # exact repeats: dedupe must agree too
            corpus.append(rng.choice(corpus))
            continue
        words = rng.choices(VOCABULARY, k=rng.randint(2, 9))
        doc = {
            "text": " ".join(words),
            "author": rng.choice(AUTHORS),
            "tags": rng.sample(TAGS, rng.randint(0, 2)),
            "date": None
            if rng.random() < 0.2
            else f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "thread": rng.choice((None, "standup", "incident", "plans")),
        }
        corpus.append((scope, doc))
    return corpus


def _random_questions(seed: int, count: int) -> list[tuple[str, str | None]]:
    rng = random.Random(seed)
    questions = []
    for _ in range(count):
        words = rng.sample(VOCABULARY, rng.randint(1, 4))
        if rng.random() < 0.4:
            words.append(rng.choice([a for a in AUTHORS if a]))
        if rng.random() < 0.3:
            words.append(rng.choice(TAGS))
        as_of = None if rng.random() < 0.4 else f"2024-{rng.randint(1, 12):02d}-15"
        questions.append((" ".join(words), as_of))
    return questions


def test_engines_agree_on_a_random_corpus(both_locations: dict[str, str]) -> None:
    corpus = _random_corpus(seed=7, size=240)
    questions = _random_questions(seed=11, count=40)
    no_lex = Settings(w_lex=0, candidates=25, k=12, reserve=3, tag_ngrams=2)
    threaded = no_lex.with_(thread_weight=0.5, thread_depth=2)
    results: dict[str, list[object]] = {}
    for engine, location in both_locations.items():
        out: list[object] = []
        memories = {
            scope: Memory(location, scope=scope, embedder=SignEmbedder())
            for scope in ("acme", "globex")
        }
        try:
            added = []
            for scope, doc in corpus:
                result = memories[scope].add(**doc)  # type: ignore[arg-type]
                out.append(result)
                if result.added:
                    added.append(result.id)
            for scope, memory in memories.items():
                # set_state only touches rows of its own scope
                memory.store.set_state(scope, added[5::17], "archived", None)
                out.append(len(memory))
                for question, as_of in questions:
                    bound = parse_as_of(as_of)
                    for mode in ("conjunctive", "disjunctive"):
                        # Every match, so the lexical sets do not depend on the ranking.
                        lexical = no_lex.with_(w_lex=1, lexical_mode=mode, candidates=1000)
                        legs = memory.legs(question, as_of=bound, settings=lexical)
                        out.append((question, as_of, mode, "lex-set", sorted(legs.lex)))
                        out.append((question, as_of, mode, "tag", legs.tag))
                        out.append((question, as_of, mode, "vec", legs.vec))
                    hits = memory.search(question, as_of=as_of, settings=no_lex)
                    out.append((question, as_of, "search", signature(hits)))
                    hits = memory.search(question, as_of=as_of, settings=threaded)
                    out.append((question, as_of, "threaded", signature(hits)))
        finally:
            for memory in memories.values():
                memory.close()
        results[engine] = out
    sqlite_out, postgres_out = results["sqlite"], results["postgres"]
    assert len(sqlite_out) == len(postgres_out)
    for left, right in zip(sqlite_out, postgres_out, strict=True):
        assert left == right
    assert any(isinstance(x, tuple) and x[3] == "vec" and x[4] for x in sqlite_out)
    lifted = [
        hit
        for x in sqlite_out
        if isinstance(x, tuple) and x[2] == "threaded"
        for hit in x[3]
        if "thread" in dict(hit[2])
    ]
    assert lifted, "thread context never lifted a row: the comparison would prove nothing"


# -- threads: followers in thread order, context lent at read time ---------------------------


def test_thread_followers_follow_thread_order_and_scope(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        # Ingest order differs from thread order: dates decide, undated rows sit at their
        # ingest time (after every dated row here), equal dates go by id.
        late = memory.add("alpha late", date="2024-03-01", thread="t").id
        first = memory.add("alpha first", date="2024-01-01", thread="t").id
        middle = memory.add("alpha middle", date="2024-02-01", thread="t").id
        same_day = memory.add("alpha same day", date="2024-02-01", thread="t").id
        undated = memory.add("alpha undated", thread="t").id
        elsewhere = memory.add("alpha elsewhere", date="2024-01-15", thread="u").id
        loose = memory.add("alpha loose", date="2024-01-20").id
        archived = memory.add("alpha archived", date="2024-02-15", thread="t").id
        memory.store.set_state("default", [archived], "archived", None)
        store = memory.store
        everyone = [late, first, middle, same_day, undated, elsewhere, loose, archived]
        assert store.thread_followers("default", everyone, None, 2) == {
            first: [middle, same_day],
            middle: [same_day, late],
            same_day: [late, undated],
            late: [undated],
            # the archived row is out of scope but still has a place in its thread
            archived: [late, undated],
        }
        assert store.thread_followers("default", [first], None, 5) == {
            first: [middle, same_day, late, undated]
        }
        # the as-of bound applies to followers (undated rows fail every bound)
        bound = parse_as_of("2024-02-20")
        assert store.thread_followers("default", [first, late], bound, 5) == {
            first: [middle, same_day]
        }
        assert store.thread_followers("default", [], None, 2) == {}
    with open_memory(engine_location, scope="other") as other:
        other.add("alpha other tenant", date="2024-01-02", thread="t")
        assert other.store.thread_followers("other", [first], None, 2) == {}
        assert other.store.thread_followers("default", [first], None, 1) == {first: [middle]}


def test_thread_context_lifts_the_reply_to_a_matching_row(engine_location: str) -> None:
    lexical = LEX.with_(thread_weight=0.5, thread_depth=2)
    with open_memory(engine_location) as memory:
        question = memory.add("when is the launch", author="Ana", thread="chat").id
        answer = memory.add("friday at noon", author="Bob", thread="chat").id
        thanks = memory.add("thanks", author="Ana", thread="chat").id
        memory.add("unrelated small talk", thread="other")
        memory.add("lunch menu", date="2024-01-01")
        assert ids(memory.search("launch", settings=LEX)) == [question]
        hits = memory.search("launch", settings=lexical)
        assert ids(hits) == [question, answer, thanks]
        assert [h.leg_ranks for h in hits] == [{"lex": 1}, {"thread": 1}, {"thread": 1}]
        assert hits[1].score == 0.5 * hits[0].score
        assert hits[2].score == 0.25 * hits[0].score
        assert ids(memory.search("launch", settings=lexical.with_(thread_depth=1))) == [
            question,
            answer,
        ]
        assert memory.get(answer).thread == "chat"
        assert memory.get(answer).to_dict()["thread"] == "chat"


# -- phrases, one term per stem, the date leg ----------------------------------------------


def test_phrases_and_unique_stems_in_the_lexical_leg(engine_location: str) -> None:
    plain = LEX.with_(stop_words="english", max_terms=None)
    with open_memory(engine_location) as memory:
        apart = memory.add("uptime is measured against the target").id
        together = memory.add("the uptime target is measured").id
        reversed_ = memory.add("the target uptime is measured").id
        hits = memory.search("uptime target", settings=plain.with_(phrases=True))
        assert set(ids(hits)) == {apart, together, reversed_}
        assert ids(hits).index(together) < ids(hits).index(apart)
        if engine_of(engine_location) == "sqlite":
            # BM25 alone ties the three rows (same words, same lengths): newest first. The
            # FTS5 phrase scores only the row with the words in the question's order.
            assert ids(memory.search("uptime target", settings=plain)) == [
                reversed_,
                together,
                apart,
            ]
            assert ids(hits)[0] == together
        # PostgreSQL: ts_rank_cd already prefers short covers; it ranks a phrase like its
        # words close together, in either order (pinned in the module docstring).

    with open_memory(engine_location, scope="stems") as memory:
        memory.add_many([f"filler row {i}" for i in range(6)])
        announced = memory.add("the board announced it").id
        vendor = memory.add("the board vendor it").id  # newer, same length
        question = "vendor announced announcement"
        # "announced" and "announcement" share a stem in both analysers. Counted once, the
        # two rows tie on the lexical score and the newer comes first.
        once = memory.search(question, settings=plain.with_(unique_stems=True))
        assert ids(once) == [vendor, announced]
        if engine_of(engine_location) == "sqlite":
            # FTS5 scores each query term on its own: the shared stem counts twice and
            # outweighs "vendor". (ts_rank_cd counts a repeated lexeme once either way.)
            assert ids(memory.search(question, settings=plain)) == [announced, vendor]


def test_date_leg_lifts_rows_of_the_named_day(engine_location: str) -> None:
    dated = Settings(w_tag=0, w_vec=0, reserve=0, w_date=1.0, gamma=5)
    with open_memory(engine_location) as memory:
        early = memory.add("budget review", date="2024-03-01").id
        on_day = memory.add("budget review notes", date="2024-03-31T09:00").id
        silent = memory.add("we met and agreed", date="2024-03-31T10:00").id
        later = memory.add("budget review again", date="2024-04-02").id
        memory.add("unrelated", date="2024-05-01")
        base = ids(memory.search("budget review on March 31, 2024", settings=LEX))
        assert on_day in base and silent not in base
        hits = memory.search("budget review on March 31, 2024", settings=dated)
        # the day's matching row first; the rest of the day enters through the date leg
        assert ids(hits)[0] == on_day and hits[0].leg_ranks["date"] == 1
        by_id = {hit.id: hit for hit in hits}
        assert by_id[silent].leg_ranks == {"date": 2}
        assert {early, later} <= set(by_id)
        # the as-of bound applies to the date leg too
        bounded = memory.search(
            "budget review on March 31, 2024", settings=dated, as_of="2024-03-31T09:30"
        )
        assert silent not in ids(bounded)
        store = memory.store
        march = date_spans("in March 2024")
        assert store.dated_within("default", march, None, 10) == [silent, on_day, early]
        assert store.dated_within("default", march, None, 2) == [silent, on_day]
        assert store.dated_within("default", march, None, 10, among=[early, later]) == [early]
        assert store.dated_within("default", march, None, 10, among=[]) == []
        assert store.dated_within("other", march, None, 10) == []


# -- append-only, enforced by each database itself --------------------------------------


def _raw_statements(location: str, rid: int) -> tuple[list[str], list[str]]:
    refused = [
        "DELETE FROM records",
        f"DELETE FROM records WHERE id = {rid}",
        f"UPDATE records SET text = 'rewritten' WHERE id = {rid}",
        f"UPDATE records SET text = text WHERE id = {rid}",  # naming the column is enough
        f"UPDATE records SET author = 'Eve' WHERE id = {rid}",
        f"UPDATE records SET event_key = 0 WHERE id = {rid}",
        f"UPDATE records SET scope = 'other' WHERE id = {rid}",
        f"UPDATE records SET tags = tags WHERE id = {rid}",
        f"UPDATE records SET embedding = embedding WHERE id = {rid}",
        f"UPDATE records SET thread = 'other' WHERE id = {rid}",
        f"UPDATE records SET metadata = NULL WHERE id = {rid}",
        "DELETE FROM record_tags",
        "UPDATE record_tags SET label = 'x'",
    ]
    # Every statement form that can rewrite or remove a row: conflict resolution (REPLACE,
    # INSERT OR REPLACE) deletes the old row without firing DELETE triggers, upserts and
    # MERGE update it.
    copy = "id, scope, text, text_hash, author, ingested_at, ingested_key, embedding"
    rewritten = "id, scope, 'rewritten', text_hash, 'Eve', ingested_at, ingested_key, embedding"
    if engine_of(location) == "postgres":
        copy, rewritten = f"{copy}, terms", f"{rewritten}, 'rewritten'"
        refused += [
            f"UPDATE records SET terms = 'rewritten' WHERE id = {rid}",
            f"UPDATE records SET terms = '' WHERE id = {rid}",  # only a redaction empties them
            "TRUNCATE records CASCADE",
            "TRUNCATE record_tags",
            f"""INSERT INTO records ({copy}) OVERRIDING SYSTEM VALUE SELECT {rewritten}
                FROM records WHERE id = {rid}
                ON CONFLICT (scope, id) DO UPDATE SET text = excluded.text""",
            f"""MERGE INTO records r USING (SELECT {rid} AS id) s ON r.id = s.id
                WHEN MATCHED THEN UPDATE SET text = 'rewritten'""",
            f"""MERGE INTO records r USING (SELECT {rid} AS id) s ON r.id = s.id
                WHEN MATCHED THEN DELETE""",
            """MERGE INTO record_tags t USING (SELECT 1) s ON true WHEN MATCHED THEN DELETE""",
        ]
    else:
        refused += [
            f"REPLACE INTO records ({copy}) SELECT {rewritten} FROM records WHERE id = {rid}",
            f"INSERT OR REPLACE INTO records ({copy}) SELECT {rewritten} FROM records "
            f"WHERE id = {rid}",
            f"""INSERT INTO records ({copy}) SELECT {rewritten} FROM records WHERE id = {rid}
                ON CONFLICT (id) DO UPDATE SET text = excluded.text""",
            "REPLACE INTO record_tags (label, record_id) SELECT label, record_id FROM record_tags",
            "INSERT OR REPLACE INTO record_tags SELECT * FROM record_tags",
        ]
    allowed = [
        f"UPDATE records SET state = 'archived' WHERE id = {rid}",
        f"UPDATE records SET state = 'active', superseded_by = NULL WHERE id = {rid}",
    ]
    return refused, allowed


def test_database_refuses_deletes_and_content_updates(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        rid = memory.add("alpha original", author="Ana", tags=["t"]).id
        before = memory.get(rid)
    refused, allowed = _raw_statements(engine_location, rid)
    if engine_of(engine_location) == "sqlite":
        conn = sqlite3.connect(engine_location, isolation_level=None)
        for statement in refused:
            with pytest.raises(sqlite3.IntegrityError, match="mempp"):
                conn.execute(statement)
        for statement in allowed:
            conn.execute(statement)
        conn.close()
    else:
        import psycopg

        with psycopg.connect(engine_location, autocommit=True) as conn:
            for statement in refused:
                with pytest.raises(psycopg.errors.IntegrityError, match="mempp"):
                    conn.execute(statement)
            for statement in allowed:
                conn.execute(statement)
    with open_memory(engine_location) as memory:
        assert memory.get(rid) == before
        assert len(memory) == 1


# -- metadata and sources (importers) ---------------------------------------------------------


def test_metadata_is_stored_whole_and_read_back(engine_location: str) -> None:
    meta = {"user": "U1", "files": ["q2.pdf"], "nested": {"n": 1, "ok": True, "x": None}}
    with open_memory(engine_location) as memory:
        first = memory.add("alpha with metadata", author="Ana", metadata=meta).id
        second = memory.add("alpha without", author="Ana").id
        assert memory.get(first).metadata == meta and memory.get(second).metadata is None
        assert [r.metadata for r in memory.records()] == [meta, None]


def test_stored_sources_sees_every_state_of_its_scope_only(engine_location: str) -> None:
    long_source = "mid:" + "x" * 5000  # longer than a PostgreSQL btree entry can hold
    with open_memory(engine_location) as memory:
        kept = memory.add("alpha", source="slack://C1/1.000001").id
        memory.add("beta", source=long_source)
        memory.store.set_state(memory.scope, [kept], "archived", None)
        asked = ["slack://C1/1.000001", long_source, "slack://C1/2.000000"]
        assert memory.store.stored_sources(memory.scope, asked) == set(asked[:2])
        assert memory.store.stored_sources(memory.scope, []) == set()
        assert memory.store.stored_sources("other", asked) == set()


# -- several writer processes at once ---------------------------------------------------------


def _writer(
    location: str, docs: list[dict[str, str]], seed: int, start: Barrier, done: Queue[int]
) -> None:
    """Runs in a child process: add the documents in a shuffled order, in small batches."""
    rng = random.Random(seed)
    docs = list(docs)
    rng.shuffle(docs)
    start.wait()
    added = 0
    with Memory(location, embedder=KeywordEmbedder(KEYWORDS)) as memory:
        for i in range(0, len(docs), 5):
            added += sum(r.added for r in memory.add_many(docs[i : i + 5]))
    done.put(added)


def test_concurrent_writer_processes_lose_and_duplicate_nothing(engine_location: str) -> None:
    docs = [
        {"text": f"alpha shared document {i}", "author": ("Ana", "Bob", "")[i % 3]}
        for i in range(60)
    ]
    # Four processes, each with an overlapping window of 36 documents (every document is
    # written by two or three of them), released at the same moment.
    windows = [[docs[(start + j) % 60] for j in range(36)] for start in (0, 15, 30, 45)]
    with open_memory(engine_location) as memory:
        memory.add("created before the writers start")
    context = multiprocessing.get_context("spawn")  # no inherited connections or locks
    start, done = context.Barrier(len(windows)), context.Queue()
    workers = [
        context.Process(target=_writer, args=(engine_location, window, seed, start, done))
        for seed, window in enumerate(windows)
    ]
    for worker in workers:
        worker.start()
    added = [done.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert sum(added) == 60
    with open_memory(engine_location) as memory:
        assert len(memory) == 61
        stored = memory.store.get(memory.scope, range(1, 200))
        keys = [(r.author or "", r.text) for r in stored.values()]
        assert len(keys) == len(set(keys)) == 61
        assert {(d["author"], d["text"]) for d in docs} <= set(keys)


# -- API keys (the server's KeyStore) ---------------------------------------------------------


def test_api_keys_are_hashed_scoped_revoked_and_kept(engine_location: str) -> None:
    from mempp.server import keys

    store = open_store(engine_location)
    try:
        assert not keys.has_keys(store)
        reader, token_a = keys.create_key(store, scope="team-a", role="read", label="bot")
        writer, token_b = keys.create_key(store, scope="team-b", role="write")
        assert keys.authenticate(store, token_a) == keys.Principal(reader.key_id, "team-a", "read")
        assert keys.authenticate(store, token_b).scope == "team-b"  # type: ignore[union-attr]
        tampered = token_a[:-1] + ("A" if token_a[-1] != "A" else "B")
        for wrong in (tampered, "mempp_000000000000_" + "x" * 43, "", "Bearer " + token_a):
            assert keys.authenticate(store, wrong) is None
        assert [k.key_id for k in keys.list_keys(store, "team-a")] == [reader.key_id]
        assert {k.scope for k in keys.list_keys(store)} == {"team-a", "team-b"}
        revoked = keys.revoke_key(store, reader.key_id)
        assert revoked.revoked_at is not None
        assert keys.revoke_key(store, reader.key_id).revoked_at == revoked.revoked_at
        with pytest.raises(InvalidInput, match="no key"):
            keys.revoke_key(store, "000000000000")
        for scope, role in (("", "read"), ("a", "owner")):
            with pytest.raises(InvalidInput):
                keys.create_key(store, scope=scope, role=role)
    finally:
        store.close()
    store = open_store(engine_location)  # persisted; revocation holds; the secret is not stored
    try:
        assert keys.authenticate(store, token_a) is None
        assert keys.authenticate(store, token_b) is not None
        assert keys.has_keys(store)  # revoked keys count: the server stays closed
        found = store.api_key(writer.key_id)  # type: ignore[attr-defined]
        assert found is not None and token_b.split("_", 2)[2].encode() not in found[1]
    finally:
        store.close()
    delete = "DELETE FROM api_keys"
    if engine_of(engine_location) == "sqlite":
        conn = sqlite3.connect(engine_location, isolation_level=None)
        with pytest.raises(sqlite3.IntegrityError, match="mempp"):
            conn.execute(delete)
        conn.close()
    else:
        import psycopg

        with psycopg.connect(engine_location, autocommit=True) as conn:
            for statement in (delete, "TRUNCATE api_keys"):
                with pytest.raises(psycopg.errors.IntegrityError, match="mempp"):
                    conn.execute(statement)


# -- time and truth: known-at, filters, history, changes, corrections (issue 11) -------------


def _moment() -> str:
    """Now, as an ISO datetime, strictly between what was ingested before and after."""
    time.sleep(0.002)
    moment = datetime.now(UTC).isoformat()
    time.sleep(0.002)
    return moment


def test_known_at_and_as_of_bound_together_before_ranking(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        early_old = memory.add("alpha budget early old", date="2024-01-05").id
        early_new = memory.add("alpha budget early new", date="2024-06-05").id
        early_undated = memory.add("alpha budget early undated").id
        then = _moment()
        # ingested after "then": more similar, they would crowd the early rows out if late
        late = [
            memory.add(f"alpha alpha budget budget {i}", date="2024-01-06").id for i in range(6)
        ]
        for settings in (LEX, VEC, preset("default")):
            question = "alpha budget"
            held = ids(memory.search(question, known_at=then, k=10, settings=settings))
            assert sorted(held) == [early_old, early_new, early_undated]
            both = memory.search(question, known_at=then, as_of="2024-03-01", settings=settings)
            assert set(ids(both)) <= {early_old}
            narrow = settings.with_(candidates=1)
            one = ids(memory.search(question, known_at=then, as_of="2024-03-01", settings=narrow))
            assert one in ([early_old], [])
        vec_both = memory.search("alpha budget", known_at=then, as_of="2024-03-01", settings=VEC)
        assert ids(vec_both) == [early_old]
        everything = memory.search("alpha budget", k=20, settings=VEC)
        assert set(ids(everything)) == {early_old, early_new, early_undated, *late}
        # a bare date includes the whole day; a day before any ingest holds nothing
        assert memory.search("alpha", known_at="2000-01-01", settings=VEC) == []
    with open_memory(engine_location, scope="tags") as memory:
        early = memory.add("a memo", author="Ana", tags=["plan"]).id
        then = _moment()
        for i in range(4):  # newer rows carry more of the labels: they rank first if eligible
            memory.add(f"memo {i}", author="Ana", tags=["plan", "ops"])
        narrow = TAG.with_(candidates=1)
        assert ids(memory.search("ana plan ops", known_at=then, settings=narrow)) == [early]
        assert ids(memory.search("ana plan ops", settings=narrow)) != [early]


def test_filters_apply_before_ranking_in_every_leg(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        ana = memory.add(
            "alpha budget plan",
            author="Ana",
            tags=["Finance", "q3"],
            thread="t1",
            source="slack:#fin",
            date="2024-02-01",
        ).id
        bob = memory.add(
            "alpha budget plan too",
            author="Bob",
            tags=["finance"],
            thread="t2",
            source="mail:x",
            date="2024-03-01",
        ).id
        for i in range(8):  # better matches by other authors, threads and sources
            memory.add(
                f"alpha alpha budget budget plan {i}",
                author="Cy",
                tags=["ops"],
                thread="t3",
                source="wiki:/p",
                date="2024-04-01",
            )
        cases = [
            ({"author": "Ana"}, [ana]),
            ({"tags": ["FINANCE"]}, [bob, ana]),
            ({"tags": ["finance", "q3"], "tags_mode": "all"}, [ana]),
            ({"tags": ["q3", "ops"]}, None),  # any: Ana's row and Cy's rows
            ({"thread": "t2"}, [bob]),
            ({"source": "slack:"}, [ana]),
            ({"source": "mail:x"}, [bob]),
            ({"since": "2024-02-15", "as_of": "2024-03-31"}, [bob]),
            ({"since": "2024-04-01", "author": "Ana"}, []),
        ]
        for settings in (LEX, VEC, preset("default")):
            narrow = settings.with_(candidates=1)
            for where, expected in cases:
                found = ids(memory.search("alpha budget plan", k=10, settings=settings, **where))
                if expected is None:
                    assert ana in found and bob not in found and len(found) == 9, where
                    continue
                assert sorted(found) == sorted(expected), (settings, where)
                # one candidate per leg: still an eligible row, never an empty result
                first = ids(memory.search("alpha budget plan", k=1, settings=narrow, **where))
                assert first == expected[:1] or (first and first[0] in expected), where
        # the tag leg and the reserve's unmatched fill respect the filters too
        reserve = TAG.with_(reserve=3)
        found = ids(memory.search("cy", k=4, settings=reserve, author="Ana"))
        assert found == [ana]
        found = ids(memory.search("alpha", k=3, settings=LEX.with_(reserve=3), thread="t1"))
        assert found == [ana]


def test_filtered_searches_follow_rows_added_archived_and_restored(engine_location: str) -> None:
    # The SQLite engine keeps the rows a filter selects between searches; a row added,
    # archived or restored since must change what the same filters find, in every leg and in
    # the reserve's newest-unmatched fill.
    unmatched = Settings(w_lex=0, w_tag=0, w_vec=1, reserve=3)
    with open_memory(engine_location) as memory:
        first = memory.add("alpha budget", author="Ana", tags=["plan"]).id
        memory.add("alpha budget plan", author="Bob", tags=["plan"])

        def found(**where: object) -> dict[str, list[int]]:
            return {
                name: sorted(ids(memory.search("alpha budget ana", k=5, settings=s, **where)))
                for name, s in (("lex", LEX), ("tag", TAG), ("vec", VEC), ("fill", unmatched))
            }

        assert set(map(tuple, found(author="Ana").values())) == {(first,)}
        second = memory.add("alpha budget again", author="Ana", tags=["plan"]).id
        for where in ({"author": "Ana"}, {"author": "Ana", "tags": ["plan"]}):
            assert set(map(tuple, found(**where).values())) == {(first, second)}, where
        run = memory.archive(first, reason="duplicate").run_id
        assert set(map(tuple, found(author="Ana").values())) == {(second,)}
        memory.undo(run)
        assert set(map(tuple, found(author="Ana").values())) == {(first, second)}


def test_filters_refuse_bad_input_and_name_the_field(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("alpha", date="2024-01-01")
        bad = [
            ({"since": "2024-05-01", "as_of": "2024-01-01"}, "since"),
            ({"since": "2024-13-01"}, "since"),
            ({"known_at": "yesterday"}, "known_at"),
            ({"tags": "finance"}, "tags"),
            ({"tags": ["  "]}, "tags"),
            ({"tags_mode": "some"}, "tags_mode"),
            ({"author": ""}, "author"),
            ({"thread": 3}, "thread"),
            ({"source": ""}, "source"),
        ]
        for where, field in bad:
            with pytest.raises(InvalidInput, match=field):
                memory.search("alpha", **where)
        with pytest.raises(InvalidInput, match="not both"):
            memory.search("alpha", author="Ana", filters=Filters.create(thread="t"))


def test_supersede_archive_are_logged_attributed_and_undoable(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        old = memory.add("standup at 9:30", author="Ana", date="2024-01-01").id
        new = memory.add("standup at 10:00", author="Ana", date="2024-02-01").id
        noise = memory.add("alpha", date="2024-02-02").id
        fix = memory.supersede(old, by=new, reason="moved", actor="key-7")
        assert (fix.operation, fix.record_ids, fix.by) == ("supersede", (old,), new)
        assert (fix.reason, fix.actor) == ("moved", "key-7")
        assert memory.get(old).superseded_by == new and memory.get(old).state == "active"
        gone = memory.archive(noise, reason="test row", actor="key-7")
        assert memory.get(noise).state == "archived"
        assert noise not in ids(memory.search("alpha", settings=VEC))
        assert [c.operation for c in memory.corrections()] == ["supersede", "archive"]
        memory.undo(gone.run_id)
        assert memory.get(noise).state == "active"
        memory.undo(fix.run_id)
        assert memory.get(old).superseded_by is None
        with pytest.raises(InvalidInput, match="already undone"):
            memory.undo(fix.run_id)


def _state(memory: Memory) -> tuple[object, ...]:
    rows = tuple((r.id, r.state, r.superseded_by) for r in memory.records())
    return rows, len(memory.store.runs(memory.scope))


def test_bad_corrections_change_nothing(engine_location: str) -> None:
    with open_memory(engine_location, scope="other") as other:
        foreign = other.add("alpha other scope").id
    with open_memory(engine_location) as memory:
        a = memory.add("alpha one", date="2024-01-01").id
        b = memory.add("alpha two", date="2024-02-01").id
        c = memory.add("alpha three", date="2024-03-01").id
        memory.supersede(a, by=b, reason="newer")
        memory.supersede(b, by=c, reason="newer")
        memory.archive(c, reason="wrong")
        before = _state(memory)
        refused = [
            (lambda: memory.supersede(a, by=999, reason="x"), RecordNotFound),
            (lambda: memory.supersede(foreign, by=a, reason="x"), RecordNotFound),
            (lambda: memory.supersede(a, by=a, reason="x"), InvalidInput),
            (lambda: memory.supersede(c, by=a, reason="x"), InvalidInput),  # a cycle
            (lambda: memory.supersede(a, by=b, reason="x"), InvalidInput),  # already so
            (lambda: memory.supersede(a, by=b, reason=" "), InvalidInput),
            (lambda: memory.archive(c, reason="again"), InvalidInput),
            (lambda: memory.archive(999, reason="x"), RecordNotFound),
            (lambda: memory.archive(True, reason="x"), InvalidInput),  # type: ignore[arg-type]
            (lambda: memory.undo(999), InvalidInput),
            (lambda: memory.changes("2024-05-01", "2024-01-01"), InvalidInput),
            (lambda: memory.history(), InvalidInput),
            (lambda: memory.history("alpha", record_id=a), InvalidInput),
        ]
        for call, error in refused:
            with pytest.raises(error):
                call()
            assert _state(memory) == before


def test_history_follows_threads_supersession_and_neighbours(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        v1 = memory.add("launch date is March 1", author="Ana", date="2024-01-10").id
        reply = memory.add("ok noted", author="Bob", date="2024-01-11", thread="launch").id
        v2 = memory.add(
            "launch moved to April", author="Ana", date="2024-02-10", thread="launch"
        ).id
        v3 = memory.add("new launch day: May 5", author="Cy", date="2024-03-10").id
        unrelated = memory.add("beta gamma delta", date="2024-02-20").id
        memory.supersede(v1, by=v2, reason="moved")
        memory.supersede(v2, by=v3, reason="moved again")
        entries = memory.history(record_id=v2)
        found = [e.record.id for e in entries]
        assert found[:4] == [v1, reply, v2, v3] and unrelated not in found
        by_id = {e.record.id: e for e in entries}
        assert "subject" in by_id[v2].reasons and "thread" in by_id[reply].reasons
        assert "superseded" in by_id[v1].reasons and "successor" in by_id[v3].reasons
        assert by_id[v1].superseded_by is not None and by_id[v1].superseded_by.id == v2
        assert by_id[v3].superseded_by is None
        # the chain is followed past one step, and as_of cuts it
        assert v3 in [e.record.id for e in memory.history(record_id=v1)]
        dated = [e.record.id for e in memory.history(record_id=v2, as_of="2024-02-28")]
        assert v3 not in dated and v1 in dated
        by_query = [e.record.id for e in memory.history("launch", limit=10)]
        assert v2 in by_query and v3 in by_query and unrelated not in by_query
        assert len(memory.history(record_id=v2, limit=2)) == 2


def test_changes_between_two_dates(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        old = memory.add("budget is 10k", date="2024-01-05").id
        memory.add("alpha", date="2024-01-20")
        then = _moment()
        new = memory.add("budget is 12k", date="2024-02-05").id
        other = memory.add("alpha beta", date="2024-02-06").id
        memory.add("later", date="2024-04-01")
        memory.supersede(old, by=new, reason="revised")
        fix = memory.archive(other, reason="duplicate")
        window = memory.changes("2024-02-01", "2024-02-28")
        assert [r.id for r in window.entered] == [new, other]
        assert [r.id for r in window.superseded] == [old]
        assert window.archived == []  # logged today, outside a window of February 2024
        today = datetime.now(UTC).date().isoformat()
        recent = memory.changes("2024-01-01", today)
        assert [c.run_id for c in recent.archived] == [fix.run_id]
        known = memory.changes(
            "2024-01-01", "2024-12-31", known_until=then, known_since="2000-01-01"
        )
        assert [r.id for r in known.entered] == [old, old + 1]
        ranked = memory.changes("2024-01-01", "2024-12-31", query="budget")
        assert [r.id for r in ranked.entered][:2] in ([new, old], [old, new])
        assert other not in [r.id for r in ranked.entered]  # archived rows leave searches


SECRET = "qx7zv93k"  # a token no stemmer changes, so the full-text index holds it as is


def test_redaction_erases_content_and_keeps_a_tombstone(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        kept = memory.add("alpha budget stays", author="Ana", date="2024-01-01").id
        gone = memory.add(
            f"alpha budget {SECRET} personal data",
            author="Eve",
            date="2024-01-02",
            tags=["hr"],
            source="mail:eve",
            thread="t-eve",
        ).id
        reply = memory.add("beta follow up", author="Bob", date="2024-01-03", thread="t-eve").id
        memory.supersede(kept, by=gone, reason="newer")
        fix = memory.redact(gone, reason="GDPR art. 17 request 42", actor="key-1")
        assert (fix.operation, fix.record_ids, fix.actor) == ("redact", (gone,), "key-1")
        tomb = memory.get(gone)
        assert tomb.state == "redacted" and tomb.text == "" and tomb.tags == ()
        assert (tomb.author, tomb.source, tomb.thread) == (None, None, None)
        assert tomb.date is not None and tomb.date.startswith("2024-01-02")
        for settings in (LEX, TAG, VEC, preset("default")):
            for question in ("alpha budget", SECRET, "eve hr", "personal data"):
                assert gone not in ids(memory.search(question, k=10, settings=settings))
        assert memory.get(reply).state == "active"
        # the tombstone shows in history and export, the link to it stays
        assert gone in [e.record.id for e in memory.history(record_id=kept)]
        assert [r.state for r in memory.records() if r.id == gone] == ["redacted"]
        assert memory.get(kept).superseded_by == gone
        assert [c.operation for c in memory.corrections()][-1] == "redact"
        # refused, nothing changed: twice, superseding by it, undoing it, unknown ids
        before = _state(memory)
        for call, error in (
            (lambda: memory.redact(gone, reason="again"), InvalidInput),
            (lambda: memory.supersede(reply, by=gone, reason="x"), InvalidInput),
            (lambda: memory.undo(fix.run_id), InvalidInput),
            (lambda: memory.redact(999, reason="x"), RecordNotFound),
            (lambda: memory.redact(kept, reason=""), InvalidInput),
        ):
            with pytest.raises(error):
                call()
            assert _state(memory) == before
        # the dedupe key of the erased text is free again
        again = memory.add(f"alpha budget {SECRET} personal data", author="Eve", date="2024-01-02")
        assert again.added


def test_redaction_erases_merged_rows_made_from_it(engine_location: str) -> None:
    from mempp.store.base import GroupOutcome, MergedRow, StateChange

    with open_memory(engine_location) as memory:
        a = memory.add(f"alpha {SECRET} one", date="2024-01-01").id
        b = memory.add("alpha two", date="2024-01-02").id
        store = memory.store
        run = store.begin_run("default", kind="consolidate", dry_run=False, settings={})
        merged_doc = Document.create(f"alpha {SECRET} one and two", date="2024-01-02")
        vector = KeywordEmbedder(KEYWORDS).embed([merged_doc.text])[0]
        changes = tuple(StateChange(r, "active", None, "archived", None) for r in (a, b))
        merged = store.record_group(
            "default",
            run,
            GroupOutcome(
                0, "restatement", (a, b), changes, MergedRow(merged_doc, vector, frozenset())
            ),
        )
        store.finish_run("default", run, {})
        assert merged is not None
        fix = memory.redact(a, reason="erasure")
        assert sorted(fix.record_ids) == sorted([a, merged])
        assert memory.get(merged).state == "redacted" and memory.get(merged).text == ""
        assert memory.get(b).text == "alpha two"
        # the run's inputs stay listed
        assert {c.change.record_id for c in store.run_changes("default", run)} >= {a, b}


def test_database_refuses_content_updates_outside_a_redaction(engine_location: str) -> None:
    """The redaction path's trigger exception needs its own guarded row: a hand-made UPDATE
    or DELETE is still refused, even for an already redacted row."""
    with open_memory(engine_location) as memory:
        rid = memory.add("alpha original", author="Ana", tags=["t"]).id
        memory.redact(rid, reason="test")
    statements = [
        f"UPDATE records SET text = 'back' WHERE id = {rid}",
        f"DELETE FROM records WHERE id = {rid}",
        "DELETE FROM redactions",
        "UPDATE redactions SET reason = 'other'",
        "UPDATE redactions SET pending = NOT pending",
    ]
    if engine_of(engine_location) == "sqlite":
        conn = sqlite3.connect(engine_location, isolation_level=None)
        for statement in statements:
            with pytest.raises(sqlite3.IntegrityError, match="mempp"):
                conn.execute(statement)
        conn.close()
    else:
        import psycopg

        with psycopg.connect(engine_location, autocommit=True) as conn:
            for statement in statements:
                with pytest.raises(psycopg.errors.IntegrityError, match="mempp"):
                    conn.execute(statement)
    with open_memory(engine_location) as memory:
        assert memory.get(rid).text == "" and memory.get(rid).state == "redacted"


def test_sqlite_files_hold_no_copy_of_redacted_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "erase.db"
    filler = " ".join(f"word{i}" for i in range(400))  # rows past a page: overflow pages too
    with open_memory(str(path)) as memory:
        for i in range(30):
            memory.add(f"alpha row {i} {filler}", date="2024-01-01")
        gone = memory.add(f"alpha {SECRET} secret {filler}", date="2024-01-02").id
        for i in range(30):
            memory.add(f"beta row {i}", date="2024-01-03")
        assert memory.search(SECRET, settings=LEX)
        files = [path, path.with_name("erase.db-wal"), path.with_name("erase.db-shm")]
        assert any(SECRET.encode() in f.read_bytes() for f in files if f.exists())
        memory.redact(gone, reason="erasure")
        for f in files:
            if f.exists():
                assert SECRET.encode() not in f.read_bytes(), f.name
        assert memory.search(SECRET, settings=LEX) == []
        memory.add("gamma after", date="2024-01-04")  # the store goes on working
    for f in files:
        if f.exists():
            assert SECRET.encode() not in f.read_bytes(), f.name


def test_a_repeated_message_on_another_date_is_a_new_record(engine_location: str) -> None:
    stream = [
        {"text": "Standup moved to 10:00.", "author": "Ana", "date": "2024-03-04"},
        {"text": "Standup moved to 10:00.", "author": "Ana", "date": "2024-05-13"},
        {"text": "Standup moved to 10:00.", "author": "Ana", "date": "2024-05-13T09:00"},
        {"text": "Standup moved to 10:00.", "author": "Bo", "date": "2024-03-04"},
        {"text": "Standup moved to 10:00.", "author": "Ana"},
        {"text": "Standup moved to 10:00.", "author": "Ana", "date": "2024-03-04"},  # repeat
    ]
    with open_memory(engine_location) as memory:
        first = memory.add_many(stream)
        assert [r.skipped for r in first] == [None] * 5 + ["duplicate"]
        # re-ingesting the stream adds nothing, in one batch or one by one
        assert all(r.skipped == "duplicate" for r in memory.add_many(stream))
        assert all(memory.add(**doc).skipped == "duplicate" for doc in stream)  # type: ignore[arg-type]
        assert len(memory) == 5
        dated = memory.search("standup", as_of="2024-04-01", settings=LEX, author="Ana")
        assert [h.record.date for h in dated] == ["2024-03-04"]


def test_small_k_keeps_the_best_rows_and_the_reserve_prefers_dated_rows(
    engine_location: str,
) -> None:
    with open_memory(engine_location) as memory:
        best = memory.add("budget budget budget", date="2024-01-01").id
        dated = [memory.add(f"budget note {i}", date=f"2024-06-0{i + 1}").id for i in range(3)]
        undated = [memory.add(f"budget page {i} with many other words in it").id for i in range(2)]
        # the paper's rule: with k <= 3 every row is a recency slot, the newest ingest first
        assert ids(memory.search("budget", k=1, settings="paper")) == [undated[-1]]
        assert ids(memory.search("budget", k=1)) == [best]  # the default's scaled reserve
        lexical = Settings(w_tag=0, w_vec=0, k=4, reserve=2, lexical_rank="bm25")
        head_and_slots = memory.search("budget", k=4, settings=lexical)
        reserved = [h.id for h in head_and_slots if h.reserved]
        assert sorted(reserved) == sorted(undated)  # undated rows at their (late) ingest time
        scaled = memory.search("budget", k=4, settings=lexical.with_(reserve_rule="scaled"))
        head = [h.id for h in scaled if not h.reserved]
        reserved = [h.id for h in scaled if h.reserved]
        assert len(reserved) == 2 and not set(reserved) & set(undated)
        rest_dated = [row for row in [best, *dated] if row not in head]
        assert reserved == sorted(rest_dated, reverse=True)[:2]  # latest event dates first
