"""The keyword leg's length bound (``kw_max_tokens``): a record longer than the bound, in
full-text tokens as FTS5 counts them, is not ranked by the leg (docs/retrieval.md, session
17), on both matches and both engines, after the too-common terms are dropped; both engines
count a row's tokens alike (SQLite's FTS5 ``docsize``, PostgreSQL's ``terms``)."""

from __future__ import annotations

import pytest

from mempp import Memory, Settings
from mempp.errors import InvalidInput
from mempp.filters import Filters
from mempp.search.keyword import MAX_TERM_ROWS, rank_matches
from mempp.store.sqlite.keyword import _varint
from test_keyword_leg import _corpus, _questions

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location
both_locations = engines.both_locations

LEG = Settings(w_lex=0, w_tag=0, w_vec=0, w_kw=1.0, reserve=0)
MATCHES = ("substring", "prefix")


def open_memory(location: str, scope: str = "default") -> Memory:
    memory = Memory(location, scope=scope, embedder=KeywordEmbedder(["alpha"]))
    memory.enable_index("keyword")  # the substring match's index; the prefix needs none
    return memory


def ids(memory: Memory, question: str, match: str, bound: int, **kwargs: object) -> list[int]:
    settings = LEG.with_(kw_match=match, kw_max_tokens=bound)
    return [h.id for h in memory.search(question, settings=settings, **kwargs)]  # type: ignore[arg-type]


def test_kw_max_tokens_is_validated() -> None:
    assert Settings().kw_max_tokens == 0
    for bad in (-1, 1.5, True, "128", None):
        with pytest.raises(InvalidInput, match="kw_max_tokens"):
            Settings(kw_max_tokens=bad)  # type: ignore[arg-type]


def test_varint_reads_fts5_docsize() -> None:
    # SQLite's varint: big-endian 7-bit groups, the high bit on all bytes but the last.
    assert _varint(b"\x00") == 0
    assert _varint(b"\x7f") == 127
    assert _varint(b"\x81\x00") == 128
    assert _varint(b"\xff\x7f") == 16383
    assert _varint(b"\x81\x80\x00") == 16384
    assert _varint(b"\x7f\x05") == 127  # only the first column's count is read


def test_rank_matches_leaves_out_long_rows_after_the_term_cap() -> None:
    lengths = {1: 3, 2: 4, 3: 5}
    matches = {"aaa": [1, 2, 3], "bbb": [3]}
    assert rank_matches(matches, 10) == [3, 2, 1]
    # Row 3 holds both words but is longer than the bound: the leg does not rank it, and
    # "bbb" then matches nothing.
    assert rank_matches(matches, 10, lengths, 4) == [2, 1]
    assert rank_matches(matches, 10, lengths, 2) == []
    # A term over the cap counts for nothing, however few of its rows are short.
    common = {"ccc": list(range(10, 11 + MAX_TERM_ROWS)), "aaa": [1]}
    short = dict.fromkeys(range(10, 11 + MAX_TERM_ROWS), 100) | {10: 1, 1: 1}
    assert rank_matches(common, 10, short, 5) == [1]
    with pytest.raises(ValueError, match="lengths"):
        rank_matches(matches, 10, None, 4)


@pytest.mark.parametrize("match", MATCHES)
def test_a_record_over_the_bound_is_not_ranked(engine_location: str, match: str) -> None:
    with open_memory(engine_location) as memory:
        # "budget" "review" "pottery" "class" "2024": 5 tokens; the long one 5 + 6 = 11.
        short = memory.add("budget review pottery class 2024").id
        long = memory.add("budget review pottery class 2024 " + "filler " * 6).id
        assert ids(memory, "pottery budget", match, 0) == [long, short]
        assert ids(memory, "pottery budget", match, 11) == [long, short]  # at the bound
        assert ids(memory, "pottery budget", match, 10) == [short]
        assert ids(memory, "pottery budget", match, 5) == [short]
        assert ids(memory, "pottery budget", match, 4) == []
        # The bound applies with the scope's other conditions.
        dated = memory.add("pottery", date="2024-01-05").id
        assert ids(memory, "pottery", match, 5, as_of="2024-02-01") == [dated]
        memory.archive(short, reason="test")
        assert ids(memory, "pottery budget", match, 10) == [dated]
        # A question of stop words or of another script: nothing, no error.
        assert ids(memory, "what is it?", match, 5) == []
        assert ids(memory, "東京の会議", match, 5) == []


def test_both_engines_rank_alike_under_the_bound(both_locations: dict[str, str]) -> None:
    results = {}
    for engine, location in both_locations.items():
        with open_memory(location, scope="s2") as memory:
            memory.add_many(_corpus(2))  # 2 to 10 tokens a record
            out = []
            for match in MATCHES:
                for bound in (0, 4, 6):
                    for question in _questions(2):
                        for as_of, filters in ((None, Filters()), ("2023-06-30", Filters())):
                            settings = LEG.with_(kw_match=match, kw_max_tokens=bound)
                            hits = memory.search(
                                question, settings=settings, as_of=as_of, filters=filters
                            )
                            out.append((match, bound, question, as_of, [h.id for h in hits]))
            results[engine] = out
    assert results["sqlite"] == results["postgres"]
    # The bound bit: with it some lists are shorter than without, and not all are empty.
    by_bound = {b: [hits for m, bb, *_, hits in results["sqlite"] if bb == b] for b in (0, 6)}
    assert sum(map(len, by_bound[6])) < sum(map(len, by_bound[0]))
    assert sum(map(len, by_bound[6])) > 0


def test_sqlite_in_ram_and_joined_prefix_paths_bound_alike(tmp_path) -> None:
    from mempp.search.keyword import prefix_terms

    with open_memory(str(tmp_path / "memory.db"), scope="s2") as memory:
        memory.add_many(_corpus(2))
        store = memory.store
        compared = 0
        for question in _questions(4):
            words = prefix_terms(question)
            in_ram = store.keyword_prefix("s2", words, None, 25, max_tokens=6)
            joined = store._keyword_prefix_joined("s2", words, None, 25, Filters(), 6)
            assert in_ram == joined, question
            compared += bool(in_ram)
        assert compared > 10
