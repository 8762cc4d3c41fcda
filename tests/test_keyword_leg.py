"""The keyword leg (``mempp.search.keyword``): the question's content words as substrings of
the record text, through each engine's trigram index, ranked alike on SQLite and PostgreSQL,
with the scope, the as-of bound and the filters applied before ranking."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence

import pytest

from mempp import Memory, Settings
from mempp.filters import Filters
from mempp.records import Document
from mempp.search.keyword import MAX_TERM_ROWS, keyword_terms, rank_matches, stem

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location
both_locations = engines.both_locations

KW = Settings(w_lex=0, w_tag=0, w_vec=0, w_kw=1.0, reserve=0)


def open_memory(location: str, scope: str = "default") -> Memory:
    """A Memory on ``location`` with the keyword index enabled (mempp.store.indexes)."""
    memory = Memory(location, scope=scope, embedder=KeywordEmbedder(["alpha"]))
    memory.enable_index("keyword")
    return memory


# -- the question's terms and the ranking, engine-free ---------------------------------------


def test_terms_drop_stop_words_stem_and_keep_the_shorter_of_overlapping_terms() -> None:
    assert keyword_terms("When did Caroline go hiking with the kids?") == ("caroline", "hik", "kid")
    assert stem("stories") == "stor" and stem("adopted") == "adopt" and stem("art") == "art"
    # "paint" is inside "painting"'s stem: only the shorter term stays (it matches more).
    assert keyword_terms("painting paint") == ("paint",)
    assert keyword_terms("paint painting") == ("paint",)


def test_terms_of_stop_words_short_words_or_nothing_are_empty() -> None:
    assert keyword_terms("what is it that they did?") == ()
    assert keyword_terms("go to my ox") == ()
    assert keyword_terms("") == ()
    assert keyword_terms("\x00\ud800") == ()


def test_terms_of_other_scripts_keep_their_case_and_never_raise() -> None:
    assert keyword_terms("東京の会議はいつ？") == ("東京の会議はいつ",)
    # Only A-Z fold, as SQLite's lower() and the PostgreSQL leg's translate do.
    assert keyword_terms("ÉCOLE Zürich") == ("École", "zürich")
    assert len(keyword_terms(" ".join(f"word{i}" for i in range(50)))) == 8


def test_rank_matches_weighs_rare_terms_above_common_ones_and_ties_to_newest() -> None:
    matches = {"rare": [3], "common": [1, 2, 3, 4, 5, 6]}
    # Row 3 holds both; the other rows only the common term, newest first.
    assert rank_matches(matches, 10) == [3, 6, 5, 4, 2, 1]
    assert rank_matches(matches, 2) == [3, 6]
    assert rank_matches({"a": [1], "b": [2]}, 10) == [2, 1]  # equal weights: newer first
    assert rank_matches({}, 10) == [] and rank_matches(matches, 0) == []


def test_rank_matches_puts_rows_holding_more_terms_first() -> None:
    # "enumerat" is held by one row only (the heaviest weight there is), yet row 2 (three of
    # the subject's words) and row 1 (two of them) rank above that row.
    matches = {
        "enumerat": [9],
        "budget": [1, 2, 3, 4, 5, 6],
        "vendor": [1, 2, 7],
        "approv": [2, 8],
    }
    # Among rows of one word, weight decides (the rarer word first), then the newer row.
    assert rank_matches(matches, 10) == [2, 1, 9, 8, 7, 6, 5, 4, 3]
    # Row 1 holds two common words, whose summed weight (2.2) is below the lone word's (3.0):
    # weight alone ranked row 9 first, coordination ranks row 1 first.
    common = {"budget": [1, *range(20, 30)], "vendor": [1, *range(30, 38)]}
    assert rank_matches({"enumerat": [9], **common}, 2) == [1, 9]


def test_a_term_of_too_many_rows_counts_for_nothing() -> None:
    crowded = list(range(1, MAX_TERM_ROWS + 2))
    assert rank_matches({"the": crowded, "rare": [7]}, 5) == [7]
    assert rank_matches({"the": crowded}, 5) == []
    assert rank_matches({"the": crowded[:-1]}, 3) == [
        MAX_TERM_ROWS,
        MAX_TERM_ROWS - 1,
        MAX_TERM_ROWS - 2,
    ]


# -- each engine ---------------------------------------------------------------------------


def test_substrings_match_inside_words_and_across_case(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        hike = memory.add("We went on a HIKE last weekend").id
        hiking = memory.add("hiking with the kids was fun").id
        memory.add("a quiet day at home")
        glued = memory.add("(Hiker's guide)").id
        hits = memory.search("Did they go hiking?", settings=KW)
        assert [h.id for h in hits] == [glued, hiking, hike]
        assert [h.leg_ranks for h in hits] == [{"kw": 1}, {"kw": 2}, {"kw": 3}]
        assert memory.search("what is it?", settings=KW) == []


def test_as_of_scope_and_filters_apply_before_ranking(engine_location: str) -> None:
    with open_memory(engine_location, scope="team-a") as memory:
        old = memory.add("budget review for pottery class", date="2024-01-05", author="Ana").id
        memory.add("pottery pottery budget", date="2024-03-01", author="Bob")
        undated = memory.add("pottery notes, no date").id
        as_of = memory.search("pottery budget", settings=KW, as_of="2024-02-01")
        assert [h.id for h in as_of] == [old]
        by_ana = memory.search("pottery", settings=KW, author="Ana")
        assert [h.id for h in by_ana] == [old]
        everything = memory.search("pottery", settings=KW.with_(candidates=2))
        assert len(everything) == 2 and undated in [h.id for h in everything]
    with open_memory(engine_location, scope="team-b") as other:
        assert other.search("pottery", settings=KW) == []
        mine = other.add("pottery in team b").id
        assert [h.id for h in other.search("pottery", settings=KW)] == [mine]


def test_archived_and_redacted_rows_never_match(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        kept = memory.add("the secretariat met").id
        archived = memory.add("secret plan alpha").id
        redacted = memory.add("secret code 1234").id
        memory.archive(archived, reason="test")
        memory.redact(redacted, reason="test")
        assert [h.id for h in memory.search("secret", settings=KW)] == [kept]
        assert memory.search("1234", settings=KW) == []


def test_redaction_takes_the_text_out_of_the_sqlite_trigram_index(tmp_path) -> None:
    path = tmp_path / "memory.db"
    with open_memory(str(path)) as memory:
        row = memory.add("the password is hunter2xyz").id
        memory.redact(row, reason="leaked")
    with sqlite3.connect(path) as conn:
        found = conn.execute(
            "SELECT rowid FROM records_kw WHERE records_kw MATCH '\"hunter2xyz\"'"
        ).fetchall()
    assert found == []


def test_the_leg_fuses_with_the_others_and_shows_in_the_hits(engine_location: str) -> None:
    both = Settings(w_lex=1, w_tag=0, w_vec=0, w_kw=0.5, reserve=0)
    with open_memory(engine_location) as memory:
        word = memory.add("camping trip").id
        inside = memory.add("campground booked").id
        hits = memory.search("camping", settings=both)
        assert [h.id for h in hits] == [word, inside]
        assert hits[0].leg_ranks == {"lex": 1, "kw": 2}
        assert hits[1].leg_ranks == {"kw": 1}


# -- the same ranking on both engines -------------------------------------------------------

_WORDS = (
    "Hiking hike hiker pottery Potter painting paint painted camp Camping campfire adopt "
    "adoption kids Kid story stories Zürich ZÜRICH école École 東京 会議 budget Budgets "
    "launch relaunch relaunched caroline Caroline melanie gym yoga Yoga dance dancing "
    # FTS5 folds these two into ASCII letters (the Kelvin sign, the long s); not the dotted I.
    "\u212aid \u212aIDS \u017ftory İstanbul istanbul ISTANBUL"
).split()


def _corpus(seed: int) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for i in range(160):
        words = rng.choices(_WORDS, k=rng.randint(1, 9))
        month = rng.randint(1, 12)
        docs.append(
            Document.create(
                " ".join(words) + f" #{i}",
                author=rng.choice(("Ana", "Bob", None)),
                date=None if i % 11 == 0 else f"2023-{month:02d}-{rng.randint(1, 28):02d}",
                thread=rng.choice(("t1", "t2", None)),
            )
        )
    return docs


def _questions(seed: int) -> list[str]:
    rng = random.Random(seed + 1)
    return [" ".join(rng.choices(_WORDS, k=rng.randint(1, 5))) for _ in range(40)]


def _runs(memory: Memory, questions: Sequence[str]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for question in questions:
        for as_of, filters in (
            (None, Filters()),
            ("2023-06-30", Filters()),
            (None, Filters(author="Ana")),
            ("2023-09-30", Filters(thread="t1")),
        ):
            hits = memory.search(
                question, settings=KW.with_(candidates=25), as_of=as_of, filters=filters
            )
            out.append((question, as_of, filters, [(h.id, h.score) for h in hits]))
    return out


def test_both_engines_rank_alike(both_locations: dict[str, str]) -> None:
    results = {}
    for engine, location in both_locations.items():
        with open_memory(location, scope="s1") as memory:
            memory.add_many(_corpus(1))
        with open_memory(location, scope="s2") as memory:
            memory.add_many(_corpus(2))
            results[engine] = _runs(memory, _questions(2))
    assert results["sqlite"] == results["postgres"]
    assert sum(1 for *_, hits in results["sqlite"] if hits) > 100  # the leg found rows


def test_letters_folded_into_ascii_match_alike_on_each_engine(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        kelvin = memory.add("the \u212aIDS came along").id  # KELVIN SIGN, then "IDS"
        long_s = memory.add("a \u017ftory told twice").id  # LATIN SMALL LETTER LONG S
        dotted = memory.add("İstanbul in spring").id
        plain = memory.add("istanbul in autumn").id
        assert [h.id for h in memory.search("kids", settings=KW)] == [kelvin]
        assert [h.id for h in memory.search("\u212aid", settings=KW)] == [kelvin]
        assert [h.id for h in memory.search("Story", settings=KW)] == [long_s]
        # The dotted capital I is not folded: each spelling finds its own row only.
        assert [h.id for h in memory.search("Istanbul", settings=KW)] == [plain]
        assert [h.id for h in memory.search("İstanbul", settings=KW)] == [dotted]


def test_hostile_questions_never_raise(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("100% of the_budget \"quoted\" O'Brien's *star* 東京")
        for question in ('"', "100%", "the_budget", "O'Brien", "*star*", "%%%", "東京", "\\x"):
            memory.search(question, settings=KW)
        assert [h.leg_ranks for h in memory.search("O'Brien 100", settings=KW)] == [{"kw": 1}]


@pytest.mark.parametrize("count", [1, 2])
def test_a_store_of_one_or_two_rows(engine_location: str, count: int) -> None:
    with open_memory(engine_location) as memory:
        for i in range(count):
            memory.add(f"pottery {i}")
        assert len(memory.search("pottery", settings=KW)) == count


def test_verify_finds_a_row_taken_out_of_the_trigram_index(tmp_path) -> None:
    path = tmp_path / "memory.db"
    with open_memory(str(path)) as memory:
        row = memory.add("a row the trigram index loses").id
        assert all(check.ok for check in memory.verify())
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO records_kw (records_kw, rowid, text) VALUES ('delete', ?, ?)",
            (row, "a row the trigram index loses"),
        )
    with open_memory(str(path)) as memory:
        failing = {check.name for check in memory.verify() if not check.ok}
        assert failing == {"keyword index"}


def test_a_term_of_too_many_rows_is_dropped_on_each_engine(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add_many([f"zebra sighting {i}" for i in range(MAX_TERM_ROWS)])
        rare = memory.add("zebra and okapi").id
        anas = [memory.add(f"zebra seen by Ana, {i}", author="Ana").id for i in range(3)]
        # "zebra" holds more than MAX_TERM_ROWS rows: it counts for nothing, "okapi" decides.
        assert [h.id for h in memory.search("zebra okapi", settings=KW)] == [rare]
        assert memory.search("zebra", settings=KW) == []
        # The filters come first: among Ana's rows the word is rare enough to count.
        by_ana = memory.search("zebra", settings=KW, author="Ana")
        assert [h.id for h in by_ana] == anas[::-1]


def test_verify_finds_a_part_of_the_keyword_index_dropped(tmp_path) -> None:
    path = tmp_path / "memory.db"
    with open_memory(str(path)) as memory:
        memory.add("a row")
    for dropped, detail in (
        ("DROP INDEX records_kw_rows", "its index records_kw_rows is missing"),
        ("DROP TRIGGER records_kw_insert", "its trigger records_kw_insert is missing"),
    ):
        with sqlite3.connect(path) as conn:
            conn.execute(dropped)
        with Memory(str(path), embedder=KeywordEmbedder(["alpha"])) as memory:
            failing = {check.name: check.detail for check in memory.verify() if not check.ok}
            assert failing["keyword index"].startswith(detail)
            memory.disable_index("keyword")  # what is left of it goes; enabled again whole
            memory.enable_index("keyword")
            assert all(check.ok for check in memory.verify())
