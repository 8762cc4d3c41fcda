"""The keyword leg's prefix match (``kw_match="prefix"``): each content word's token, as the
shared full-text tokenizer reads it, matched as the start of a stored token through the
full-text index every store has (SQLite's lexical FTS5 table, PostgreSQL's ``tsv`` GIN
index), with no optional index; the same ranking on both engines."""

from __future__ import annotations

import sqlite3

from mempp import Memory, Settings
from mempp.dates import parse_as_of
from mempp.errors import InvalidInput
from mempp.filters import Filters
from mempp.search.keyword import MAX_TERM_ROWS, MAX_TERMS, prefix_terms
from test_keyword_leg import _corpus, _questions

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location
both_locations = engines.both_locations

PREFIX = Settings(w_lex=0, w_tag=0, w_vec=0, w_kw=1.0, reserve=0, kw_match="prefix")


def open_memory(location: str, scope: str = "default") -> Memory:
    """A Memory on ``location`` with no optional index: the prefix match needs none."""
    return Memory(location, scope=scope, embedder=KeywordEmbedder(["alpha"]))


def ids(memory: Memory, question: str, **kwargs: object) -> list[int]:
    return [h.id for h in memory.search(question, settings=PREFIX, **kwargs)]  # type: ignore[arg-type]


# -- the terms, engine-free -----------------------------------------------------------------


def test_terms_are_words_of_one_token_a_word_another_token_begins_dropped() -> None:
    assert prefix_terms("When did Caroline go hiking with the kids?") == (
        "caroline",
        "hiking",
        "kids",
    )
    # hiking, hikes, hike are one token ("hike"); "hiker" begins with it, so it goes too.
    assert prefix_terms("hiker hiking hikes hike") == ("hiking",)
    assert prefix_terms("what is it that they did?") == ()
    assert prefix_terms("go to my ox") == ()  # tokens under three characters
    assert prefix_terms("") == () and prefix_terms("\x00\ud800") == ()
    assert len(prefix_terms(" ".join(f"word{i}x" for i in range(50)))) == MAX_TERMS


def test_kw_match_is_validated() -> None:
    try:
        Settings(kw_match="infix")  # type: ignore[arg-type]
    except InvalidInput as exc:
        assert "kw_match" in str(exc)
    else:
        raise AssertionError("kw_match='infix' was accepted")


# -- each engine ---------------------------------------------------------------------------


def test_a_word_finds_the_words_its_stem_begins(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        hike = memory.add("We went on a HIKE last weekend").id
        hiking = memory.add("hiking with the kids was fun").id
        memory.add("a quiet day at home")
        glued = memory.add("(Hiker's guide)").id
        inside = memory.add("a long trailhike").id  # inside a word: not a prefix
        assert "keyword" not in memory.indexes()
        hits = memory.search("Did they go hiking?", settings=PREFIX)
        # One term each: equal weights, the newer row first.
        assert [h.id for h in hits] == [glued, hiking, hike]
        assert inside not in [h.id for h in hits]
        assert [h.leg_ranks for h in hits] == [{"kw": 1}, {"kw": 2}, {"kw": 3}]
        assert memory.search("what is it?", settings=PREFIX) == []
        # Diacritics and case go as in the lexical leg (the shared tokenizer).
        ecole = memory.add("École d'été").id
        assert ids(memory, "ecole") == [ecole]


def test_as_of_scope_filters_and_state_apply_before_ranking(engine_location: str) -> None:
    with open_memory(engine_location, scope="team-a") as memory:
        old = memory.add("budget review for pottery class", date="2024-01-05", author="Ana").id
        memory.add("pottery pottery budget", date="2024-03-01", author="Bob")
        memory.add("pottery notes, no date")
        assert ids(memory, "pottery budget", as_of="2024-02-01") == [old]
        assert ids(memory, "pottery", author="Ana") == [old]
        archived = memory.add("secret plan").id
        redacted = memory.add("secret code 1234").id
        kept = memory.add("secrets kept").id
        memory.archive(archived, reason="test")
        memory.redact(redacted, reason="test")
        assert ids(memory, "secret") == [kept]
        assert ids(memory, "1234") == []
    with open_memory(engine_location, scope="team-b") as other:
        assert other.search("pottery", settings=PREFIX) == []


def test_a_word_of_too_many_rows_is_dropped(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add_many([f"zebras sighted {i}" for i in range(MAX_TERM_ROWS)])
        rare = memory.add("zebra and okapi").id
        anas = [memory.add(f"zebra seen by Ana, {i}", author="Ana").id for i in range(3)]
        assert ids(memory, "zebra okapi") == [rare]
        assert ids(memory, "zebra") == []
        assert ids(memory, "zebra", author="Ana") == anas[::-1]


def test_hostile_questions_never_raise(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("100% of the_budget \"quoted\" O'Brien's *star* 東京の会議")
        for question in ('"', "100%", "the_budget", "O'Brien", "*star*", "%%%", "東京", "\\x"):
            memory.search(question, settings=PREFIX)
        assert [h.leg_ranks for h in memory.search("O'Brien budget", settings=PREFIX)] == [
            {"kw": 1}
        ]


def test_a_store_with_the_trigram_index_gives_the_same_prefix_hits(tmp_path) -> None:
    path = str(tmp_path / "memory.db")
    with open_memory(path) as memory:
        memory.add_many(_corpus(3))
        before = [ids(memory, q) for q in _questions(3)]
        memory.enable_index("keyword")
        assert [ids(memory, q) for q in _questions(3)] == before
    with sqlite3.connect(path) as conn:  # the prefix match read FTS5's lexical table only
        assert conn.execute("SELECT count(*) FROM records_fts").fetchone()[0] == 160


def test_both_engines_rank_alike(both_locations: dict[str, str]) -> None:
    results = {}
    for engine, location in both_locations.items():
        with open_memory(location, scope="s1") as memory:
            memory.add_many(_corpus(1))
        with open_memory(location, scope="s2") as memory:
            memory.add_many(_corpus(2))
            out = []
            for question in _questions(2):
                for as_of, filters in (
                    (None, Filters()),
                    ("2023-06-30", Filters()),
                    (None, Filters(author="Ana")),
                    ("2023-09-30", Filters(thread="t1")),
                ):
                    hits = memory.search(
                        question,
                        settings=PREFIX.with_(candidates=25),
                        as_of=as_of,
                        filters=filters,
                    )
                    out.append((question, as_of, [(h.id, h.score) for h in hits]))
            results[engine] = out
    assert results["sqlite"] == results["postgres"]
    assert sum(1 for *_, hits in results["sqlite"] if hits) > 100  # the leg found rows


def test_sqlite_checks_the_scope_in_ram_as_its_sql_join_does(tmp_path) -> None:
    with open_memory(str(tmp_path / "memory.db"), scope="s1") as memory:
        memory.add_many(_corpus(1))
    with open_memory(str(tmp_path / "memory.db"), scope="s2") as memory:
        memory.add_many(_corpus(2))
        memory.archive(memory.store.records_after("s2", 0, 5)[2].id, reason="test")
        store = memory.store
        compared = 0
        for question in _questions(4):
            words = prefix_terms(question)
            for as_of, filters in (
                (None, Filters()),
                (parse_as_of("2023-06-30"), Filters()),
                (None, Filters(author="Ana")),
                (parse_as_of("2023-09-30"), Filters(thread="t1")),
            ):
                in_ram = store.keyword_prefix("s2", words, as_of, 25, filters=filters)
                joined = store._keyword_prefix_joined("s2", words, as_of, 25, filters)
                assert in_ram == joined, (question, as_of, filters)
                compared += bool(in_ram)
        assert compared > 100
