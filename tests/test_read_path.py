"""Every rule of the read path, end to end through ``Memory.search`` on a real SQLite file."""

from __future__ import annotations

import multiprocessing

import pytest

from mempp import InvalidDate, InvalidInput, Memory, PackingOptions, Settings
from mempp.index import vectors

from conftest import KeywordEmbedder

NO_RESERVE = Settings(reserve=0)


def ids(hits) -> list[int]:
    return [h.id for h in hits]


def test_as_of_scope_applies_before_ranking_so_all_slots_are_eligible(keyword_memory) -> None:
    old = [keyword_memory.add(f"alpha note {i}", date=f"2024-01-0{i + 1}").id for i in range(5)]
    for i in range(30):  # later and far more similar: would crowd out the old rows if filtered late
        keyword_memory.add(f"alpha alpha alpha {i}", date="2024-06-01")
    hits = keyword_memory.search("alpha", as_of="2024-02-01", k=5, settings=NO_RESERVE)
    assert sorted(ids(hits)) == sorted(old)
    assert all(h.record.date <= "2024-02-01" for h in hits)


def test_as_of_bare_date_includes_that_whole_day(keyword_memory) -> None:
    evening = keyword_memory.add("alpha late", date="2024-03-01T23:30:00").id
    keyword_memory.add("alpha next", date="2024-03-02T00:00:00")
    assert ids(keyword_memory.search("alpha", as_of="2024-03-01")) == [evening]
    assert ids(keyword_memory.search("alpha", as_of="2024-03-01T23:00:00")) == []


def test_undated_rows_are_excluded_only_when_as_of_is_given(keyword_memory) -> None:
    undated = keyword_memory.add("alpha without a date").id
    dated = keyword_memory.add("alpha with a date", date="2024-01-01").id
    assert set(ids(keyword_memory.search("alpha"))) == {undated, dated}
    assert ids(keyword_memory.search("alpha", as_of="2030-01-01")) == [dated]


def test_archived_rows_never_appear_superseded_rows_compete(keyword_memory) -> None:
    a = keyword_memory.add("alpha budget v1", date="2024-01-01").id
    b = keyword_memory.add("alpha budget v2", date="2024-02-01").id
    c = keyword_memory.add("alpha budget v3", date="2024-03-01").id
    store = keyword_memory.store
    store.set_state(keyword_memory.scope, [a], "active", superseded_by=b)
    store.set_state(keyword_memory.scope, [c], "archived", superseded_by=None)
    found = ids(keyword_memory.search("alpha budget"))
    assert a in found and b in found and c not in found
    assert keyword_memory.get(c).state == "archived"  # still stored


def test_scopes_isolate_tenants(db_path) -> None:
    from conftest import KeywordEmbedder

    embedder = KeywordEmbedder(["alpha"])
    with Memory(db_path, scope="acme", embedder=embedder) as acme:
        acme.add("alpha acme secret")
    with Memory(db_path, scope="globex", embedder=embedder) as globex:
        globex.add("alpha globex plan")
        texts = [h.record.text for h in globex.search("alpha secret")]
        assert texts == ["alpha globex plan"]
        assert len(globex) == 1


def test_lexical_conjunctive_vs_disjunctive(keyword_memory) -> None:
    both = keyword_memory.add("zebra quagga").id
    only_z = keyword_memory.add("zebra").id
    only_q = keyword_memory.add("quagga").id
    conj = Settings(lexical_mode="conjunctive", w_vec=0, w_tag=0, reserve=0)
    disj = Settings(lexical_mode="disjunctive", w_vec=0, w_tag=0, reserve=0)
    assert ids(keyword_memory.search("zebra and quagga?", settings=conj)) == [both]
    found = ids(keyword_memory.search("zebra and quagga?", settings=disj))
    assert found[0] == both and set(found) == {both, only_z, only_q}


def test_lexical_stemming_and_stop_words(keyword_memory) -> None:
    row = keyword_memory.add("The decisions were approved by the board").id
    lex_only = Settings(w_vec=0, w_tag=0, reserve=0, lexical_mode="conjunctive")
    assert ids(keyword_memory.search("who approved the decision?", settings=lex_only)) == [row]


def test_tag_leg_matches_authors_and_tags(keyword_memory) -> None:
    jane = keyword_memory.add("status report", author="Jane Doe").id
    tagged = keyword_memory.add("another report", tags=["Launch_Plan"]).id
    keyword_memory.add("unrelated report", author="Someone Else")
    tag_only = Settings(w_lex=0, w_vec=0, reserve=0, tag_ngrams=2)
    assert ids(keyword_memory.search("what did Jane Doe say", settings=tag_only)) == [jane]
    assert ids(keyword_memory.search("the launch plan", settings=tag_only)) == [tagged]
    # The paper's tag leg matches single terms and the whole question only.
    paper_tags = tag_only.with_(tag_ngrams=1)
    assert ids(keyword_memory.search("what did Jane Doe say", settings=paper_tags)) == []
    assert ids(keyword_memory.search("Launch plan", settings=paper_tags)) == [tagged]


def test_tag_leg_ranks_more_labels_first_then_newest(keyword_memory) -> None:
    one = keyword_memory.add("x1", tags=["red"]).id
    two = keyword_memory.add("x2", tags=["red", "blue"]).id
    newer_one = keyword_memory.add("x3", tags=["blue"]).id
    tag_only = Settings(w_lex=0, w_vec=0, reserve=0)
    assert ids(keyword_memory.search("red blue", settings=tag_only)) == [two, newer_one, one]


def test_vector_leg_ranks_by_cosine(keyword_memory) -> None:
    close = keyword_memory.add("budget budget launch").id
    far = keyword_memory.add("launch launch launch budget").id
    keyword_memory.add("delta")
    vec_only = Settings(w_lex=0, w_tag=0, reserve=0, candidates=2)
    assert ids(keyword_memory.search("budget", settings=vec_only)) == [close, far]


def test_fused_scores_follow_the_formula(keyword_memory) -> None:
    for text in ("alpha beta", "alpha", "beta gamma", "gamma delta", "alpha budget"):
        keyword_memory.add(text)
    settings = Settings(w_lex=1.0, w_tag=1.0, w_vec=4.0, gamma=60, reserve=0)
    hits = keyword_memory.search("alpha beta", settings=settings)
    assert hits, "expected hits"
    for hit in hits:
        expected = sum(
            settings.weight(leg) / (60 + rank - 1) for leg, rank in hit.leg_ranks.items()
        )
        assert hit.score == pytest.approx(expected)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))


def test_equal_rows_within_a_leg_go_to_the_newer_record(keyword_memory) -> None:
    first = keyword_memory.add("alpha report", author="A").id
    second = keyword_memory.add("alpha report", author="B").id
    hits = keyword_memory.search("alpha report", settings=NO_RESERVE)
    assert ids(hits) == [second, first]
    assert hits[0].leg_ranks == {"lex": 1, "vec": 1}


def test_equal_fused_scores_go_to_the_newer_record(keyword_memory) -> None:
    lexical = keyword_memory.add("zebra zebra").id
    semantic = keyword_memory.add("quagga").id  # same "other" axis as the query, newer
    settings = Settings(w_lex=1, w_vec=1, w_tag=0, candidates=1, reserve=0)
    hits = keyword_memory.search("zebra", settings=settings)
    assert ids(hits) == [semantic, lexical]
    assert hits[0].score == hits[1].score == pytest.approx(1 / 60)


def test_recency_slots_hold_the_latest_dated_remaining_matches(keyword_memory) -> None:
    # Ten matching rows: vector similarity falls with i, dates rise with i.
    rows = [
        keyword_memory.add("alpha " * (10 - i) + "filler " * i, date=f"2024-01-{i + 10}").id
        for i in range(10)
    ]
    settings = Settings(w_lex=0, w_tag=0, reserve=3)
    hits = keyword_memory.search("alpha", k=6, settings=settings)
    assert [h.reserved for h in hits] == [False] * 3 + [True] * 3
    assert ids(hits)[:3] == rows[:3]
    assert ids(hits)[3:] == [rows[9], rows[8], rows[7]]  # latest event dates of the rest


def test_recency_slots_use_ingest_time_for_undated_rows(keyword_memory) -> None:
    dated_old = keyword_memory.add("alpha one", date="2001-01-01").id
    keyword_memory.add("alpha alpha alpha two", date="2024-01-01")
    undated = keyword_memory.add("alpha three").id  # ingested now: later than any 2024 date
    hits = keyword_memory.search("alpha", k=2, settings=Settings(w_lex=0, w_tag=0, reserve=1))
    assert hits[-1].reserved and hits[-1].id == undated
    assert dated_old not in ids(hits)


def test_recency_fallback_fills_with_latest_unmatched_rows(keyword_memory) -> None:
    match = keyword_memory.add("zebra stripes").id
    unmatched = [keyword_memory.add(f"plain row {i}").id for i in range(5)]
    lex_only = Settings(w_vec=0, w_tag=0, reserve=3)
    hits = keyword_memory.search("zebra", k=10, settings=lex_only)
    assert ids(hits) == [match, unmatched[4], unmatched[3], unmatched[2]]
    assert [h.reserved for h in hits] == [False, True, True, True]
    assert [h.legs for h in hits[1:]] == [[], [], []]
    assert all(h.score == 0.0 for h in hits[1:])


def test_recency_fallback_respects_as_of(keyword_memory) -> None:
    keyword_memory.add("zebra", date="2024-01-01")
    early = keyword_memory.add("plain early", date="2024-01-02").id
    keyword_memory.add("plain late", date="2024-05-01")
    keyword_memory.add("plain undated")
    lex_only = Settings(w_vec=0, w_tag=0, reserve=3)
    hits = keyword_memory.search("zebra", k=10, as_of="2024-02-01", settings=lex_only)
    assert ids(hits)[1:] == [early]


def test_k_and_preset_and_bad_inputs(keyword_memory) -> None:
    for i in range(20):
        keyword_memory.add(f"alpha row {i}")
    assert len(keyword_memory.search("alpha", k=7)) == 7
    assert len(keyword_memory.search("alpha", k=3, settings=NO_RESERVE)) == 3
    assert len(keyword_memory.search("alpha", settings="paper-orgmembench")) == 20
    with pytest.raises(InvalidInput):
        keyword_memory.search("alpha", k=0)
    with pytest.raises(InvalidInput):
        keyword_memory.search("alpha", settings="no-such-preset")
    with pytest.raises(InvalidDate):
        keyword_memory.search("alpha", as_of="last tuesday")
    with pytest.raises(InvalidInput):
        keyword_memory.search("   ")


HOSTILE = [
    '"',
    '"unbalanced',
    "NEAR(alpha beta, 2)",
    "alpha*",
    "*",
    "col:x",
    "text:alpha",
    "alpha OR",
    "AND OR NOT",
    "'; DROP TABLE records; --",
    "alpha\x00beta",
    "^alpha",
    "{text}: alpha",
    "(((",
    "alpha - beta + gamma",
    "你好 世界",
    "ünïcödé",
    "a" * 10_000,
]


@pytest.mark.parametrize("query", HOSTILE)
@pytest.mark.parametrize("mode", ["conjunctive", "disjunctive"])
def test_hostile_queries_are_plain_text(keyword_memory, query: str, mode: str) -> None:
    keyword_memory.add("alpha beta gamma")
    keyword_memory.add("col x text alpha")
    hits = keyword_memory.search(query, settings=Settings(lexical_mode=mode))
    assert isinstance(hits, list)
    assert len(keyword_memory) == 2  # nothing was dropped or changed


def test_hostile_query_terms_match_literally(keyword_memory) -> None:
    target = keyword_memory.add("please meet me near the station").id
    keyword_memory.add("something else entirely")
    lex_only = Settings(w_vec=0, w_tag=0, reserve=0, lexical_mode="conjunctive")
    assert ids(keyword_memory.search("NEAR station", settings=lex_only)) == [target]


def test_evidence_packing_shows_long_records_as_marked_excerpts(keyword_memory) -> None:
    filler = " ".join(f"Routine note {i} about nothing in particular." for i in range(40))
    long_id = keyword_memory.add(filler + " The budget review moved to Friday. " + filler).id
    short_id = keyword_memory.add("budget approved").id
    packing = PackingOptions(threshold=400, cap=200, passage=100, whole_first=0)
    whole = keyword_memory.evidence("budget review", k=5)
    packed = keyword_memory.evidence("budget review", k=5, packing=packing)
    rows = {row.id: row for row in packed.rows}
    assert rows[short_id].excerpt is False and rows[short_id].shown == len("budget approved")
    assert rows[long_id].excerpt is True and 0 < rows[long_id].shown <= 200
    assert f"full text: record {long_id}" in packed.text
    assert "The budget review moved to Friday." in packed.text  # the passage naming the query
    assert len(packed.text) < len(whole.text)
    assert keyword_memory.get(long_id).text.startswith(filler)  # the record itself is whole


def test_as_of_stated_in_the_question_bounds_the_scope_when_asked_to(keyword_memory) -> None:
    old = keyword_memory.add("budget is 10k", date="2024-01-10").id
    new = keyword_memory.add("budget is 20k", date="2024-03-10").id
    question = "What was the budget as of February 1, 2024?"
    assert {h.id for h in keyword_memory.search(question)} == {old, new}  # off by default
    reading = Settings(as_of_in_question=True, reserve=0)
    assert [h.id for h in keyword_memory.search(question, settings=reading)] == [old]
    # an explicit bound wins over the question's
    explicit = keyword_memory.search(question, settings=reading, as_of="2024-12-31")
    assert {h.id for h in explicit} == {old, new}
    assert {h.id for h in keyword_memory.search("the budget", settings=reading)} == {old, new}


# -- the question's encoding and the threads of the scan -----------------------------------
class _FailingQuestions:
    """Embeds documents like the keyword encoder and refuses any one-text call (a question)."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim

    def embed(self, texts):
        if len(texts) == 1 and texts[0].startswith("?"):
            raise RuntimeError("encoder down")
        return self.inner.embed(texts)


def test_an_encoding_error_reaches_the_caller_of_search(keyword_memory, db_path) -> None:
    keyword_memory.add_many(["alpha one", "beta two"])
    with Memory(db_path, embedder=_FailingQuestions(keyword_memory.embedder)) as memory:
        with pytest.raises(RuntimeError, match="encoder down"):
            memory.search("? alpha")
        assert ids(memory.search("alpha"))  # and the next search still works


def _search_in_child(path, keywords, queue) -> None:
    with Memory(path, embedder=KeywordEmbedder(keywords)) as memory:
        queue.put([h.id for h in memory.search("alpha beta", settings=NO_RESERVE)])


def test_a_forked_child_searches_with_pools_of_its_own(
    keyword_memory, db_path, monkeypatch
) -> None:
    """The scan's pool holds threads, which a forked child does not inherit: the child must
    start its own instead of queueing work for threads that are not there."""
    monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 8)  # the scan split across threads too
    keyword_memory.add_many([f"alpha note {i}" for i in range(40)] + ["alpha beta"])
    expected = ids(keyword_memory.search("alpha beta", settings=NO_RESERVE))
    keywords = list(keyword_memory.embedder.keywords)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_search_in_child, args=(db_path, keywords, queue))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child's search never finished")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == expected
