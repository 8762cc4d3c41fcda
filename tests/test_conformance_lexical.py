"""The lexical leg gives the same answers on both engines (issue 30, item 2).

Both engines index the one analysis of ``mempp.index.analysis`` (FTS5's ``porter unicode61
remove_diacritics 2`` tokens; PostgreSQL stores them in ``records.terms``, schema 10) and rank
with the same BM25. So on one store of each with the same rows, the lexical leg's ids come in
the same order with the same scores (SQLite's from FTS5's own ``bm25()``, PostgreSQL's from
its replica, ``bm25_scores``), and the fused search gives the same hits, ranks and scores:
on a corpus of what the analysers used to treat differently (diacritics, stop words, URLs,
version numbers, e-mail addresses, scripts other than Latin, rows longer than a tsvector's
positions with a word more often than its 255), on real mail (skipped when absent), and on
the acme example a new user tries first. A store migrated by dump and restore answers as
its source did.

In a store of several scopes each scope is ranked under its own statistics (N, mean length,
document frequencies) on both engines: the tenants rank alike on both, a tenant's rankings
and scores do not move when another tenant's records are added, and a migrated multi-tenant
store answers as its source did, in either direction. Real SQLite files and a real
PostgreSQL.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from mempp import Document, Memory, Settings, preset
from mempp.records import Hit
from mempp.search.query import lexical_query
from realdata import sample

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
both_locations = engines.both_locations
engine_location = engines.engine_location

ACME = Path(__file__).resolve().parents[1] / "examples" / "acme"
KEYWORDS = ("budget", "release", "plan", "cost", "cafe", "setup")

FILLER = [f"weekly note {i} on the vendor roadmap and hiring" for i in range(12)]
CORPUS = [
    "Meet at the Café Zoë for the naïve résumé review",
    "meet at the cafe zoe, the naive resume review",
    "Crème brûlée and façade: Straße, Ærø, İstanbul",
    "This is about the only thing that matters to them",
    "what about this? only that, and not over there",
    "See https://docs.example.com/v1.2/setup?lang=en#install for the setup",
    "release v1.2.3 shipped; 2024.10 follows, then 3.14 and v2",
    "mail ana@example.com or bob.smith@example.org about the budget",
    "a data-driven plan, well-known and re-used, don't ask O'Brien's team",
    "a generous general offer, generation of news and new things",
    "the patient is dying, clear skies, flies fly, lying lie",
    "東京タワー 予算 の 計画, Αθήνα budget, Москва бюджет",
    "budget " * 400 + "plan cost release",  # a word far past a tsvector's 255 positions
    "filler " * 16_500 + "release date budget plan",  # words past position 16,383
    "release date release date release, the release date moved",
    "the Team plan costs 12 dollars; the plan cost rises to 15",
    "cost of the team plan: unchanged",
    "great great great good, state of the art, art state",
    *FILLER,
]
QUESTIONS = [
    "café zoë résumé",
    "cafe naive",
    "creme brulee facade strasse",
    "what is this about?",
    "only that matters",
    "https://docs.example.com/v1.2/setup",
    "docs setup install",
    "release v1.2.3",
    "v1.2.3",  # no term, only phrases: FTS5's OR matches them, and so does PostgreSQL
    "2024.10 and 3.14",
    "ana@example.com budget",
    "data-driven plan",
    "don't ask O'Brien",
    "generous news",
    "dying skies",
    "東京タワー 予算",
    "Αθήνα бюджет",
    "budget plan cost",
    "release date",
    "When is the release date?",
    "What does the Team plan cost?",
    "state of the art",
    "great great",
    "vendor roadmap hiring",
    "weekly note 7",
]
MODES = {
    "default": preset("default"),
    "plain": Settings(lexical_rank="bm25"),
    "conjunctive": preset("default").with_(lexical_mode="conjunctive"),
    "unique": Settings(lexical_rank="bm25", unique_stems=True, phrases=True),
}


def _memory(location: str, scope: str = "default") -> Memory:
    return Memory(location, scope=scope, embedder=KeywordEmbedder(KEYWORDS))


def _lexical(memory: Memory, question: str, settings: Settings) -> list[tuple[int, float]]:
    """The lexical leg's ids in order, each with its BM25."""
    query = lexical_query(question, settings)
    order = memory.store.lexical(memory.scope, query, None, 50)
    scores = memory.store.bm25_scores(memory.scope, query)  # type: ignore[attr-defined]
    assert set(order) <= set(scores)
    return [(row, scores[row]) for row in order]


def _hits(hits: Sequence[Hit]) -> list[tuple[object, ...]]:
    return [(h.id, h.rank, tuple(sorted(h.leg_ranks.items())), h.reserved, h.score) for h in hits]


def _answers(memory: Memory, questions: Sequence[str]) -> Iterator[tuple[str, str, object]]:
    for name, settings in MODES.items():
        for question in questions:
            yield name, question, _lexical(memory, question, settings)
            yield name, question, _hits(memory.search(question, k=10, settings=settings))


def _close(a: object, b: object) -> bool:
    """Equal, floats to a relative 1e-9 (the engines add the same terms in another order)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _same(sqlite: list[tuple[str, str, object]], postgres: list[tuple[str, str, object]]) -> int:
    """Assert the engines' answers are equal (scores to float tolerance); how many answers
    held at least one row."""
    assert len(sqlite) == len(postgres)
    found = 0
    for (mode, question, a), (_, _, b) in zip(sqlite, postgres, strict=True):
        assert _close(a, b), (mode, question, a, b)
        found += bool(a)
    return found


def _side_by_side(
    both: dict[str, str], texts: Sequence[str], questions: Sequence[str], **fields: object
) -> dict[str, list[tuple[str, str, object]]]:
    answers = {}
    for engine, location in both.items():
        with _memory(location) as memory:
            memory.add_many(texts[: len(texts) // 2], **fields)  # type: ignore[arg-type]
            memory.search(questions[0], settings=MODES["default"])  # replicas built here
            memory.add_many(texts[len(texts) // 2 :], **fields)  # and caught up next
            answers[engine] = list(_answers(memory, questions))
    return answers


def test_the_engines_rank_a_hard_corpus_alike(both_locations: dict[str, str]) -> None:
    answers = _side_by_side(both_locations, CORPUS, QUESTIONS)
    assert _same(answers["sqlite"], answers["postgres"]) >= 3 * len(QUESTIONS)


def test_the_phrase_past_a_tsvectors_positions_is_found_in_both(
    both_locations: dict[str, str],
) -> None:
    for location in both_locations.values():
        with _memory(location) as memory:
            memory.add_many(CORPUS)
            long_row = CORPUS.index("filler " * 16_500 + "release date budget plan") + 1
            found = dict(_lexical(memory, "release date", MODES["default"]))
            assert long_row in found
            # 400 "budget" in a row of 403 words: the frequency counted whole, so that row
            # is first for "budget" in both.
            assert _lexical(memory, "budget", MODES["plain"])[0][0] == 13


def _mail_texts() -> list[str]:
    from mempp.importers.mail import MailImporter

    root = sample("mail")
    texts = [item.text for item in MailImporter().read(root) if isinstance(item, Document)]
    return list(dict.fromkeys(texts))


def _questions_from(texts: Sequence[str], count: int) -> list[str]:
    """Questions made of runs of a few words of the texts themselves (deterministic)."""
    rng = random.Random(30)
    questions = []
    for text in rng.sample(list(texts), min(count, len(texts))):
        words = re.findall(r"\S+", text)
        if len(words) < 4:
            continue
        start = rng.randrange(len(words) - 3)
        questions.append(" ".join(words[start : start + rng.randint(2, 4)]))
    return questions


def test_the_engines_rank_real_mail_alike(both_locations: dict[str, str]) -> None:
    texts = _mail_texts()
    assert len(texts) > 100
    questions = _questions_from(texts, 30)
    answers = _side_by_side(both_locations, texts, questions)
    assert _same(answers["sqlite"], answers["postgres"]) >= 2 * len(questions)


def _acme(location: str) -> Memory:
    from mempp.importers.files import read_sources

    memory = _memory(location)
    docs = [item.document for item in read_sources([str(ACME)]) if item.document is not None]
    assert len(docs) == 6
    memory.add_many(docs)
    return memory


def test_acme_team_plan_cost_ranks_alike(both_locations: dict[str, str]) -> None:
    # Issue 30: "Team plan cost" ranked records 4, 3 on SQLite and 3, 4 on PostgreSQL.
    answers = {}
    for engine, location in both_locations.items():
        with _acme(location) as memory:
            answers[engine] = list(
                _answers(memory, ["Team plan cost", "What does the Team plan cost?"])
            )
            order = [hit.id for hit in memory.search("Team plan cost", k=2)]
            answers[engine].append(("default", "top two", order))
    assert _same(answers["sqlite"], answers["postgres"]) > 0


def test_history_of_an_archived_record_is_the_same_in_both(
    both_locations: dict[str, str],
) -> None:
    # Issue 30: the history of an archived record listed 2 neighbours on one engine and 3 on
    # the other; the neighbours are the rows the legs rank close to it.
    seen = {}
    for engine, location in both_locations.items():
        with _acme(location) as memory:
            first = memory.search("Team plan cost", k=1)[0].id
            memory.archive(first, reason="test")
            entries = memory.history(record_id=first)
            seen[engine] = [(e.record.id, e.record.state, e.reasons) for e in entries]
    assert seen["postgres"] == seen["sqlite"]
    assert sum("neighbour" in reasons for _, _, reasons in seen["sqlite"]) >= 1


def test_a_restored_copy_answers_as_its_source(tmp_path: Path, pg_url: str) -> None:
    # SQLite -> dump -> PostgreSQL: the migration path must not change what an agent is told.
    source = str(tmp_path / "source.db")
    snapshot = tmp_path / "store.dump"
    with _memory(source) as memory:
        memory.add_many(CORPUS)
        memory.dump(snapshot)
        before = list(_answers(memory, QUESTIONS))
    with _memory(pg_url) as restored:
        restored.restore(snapshot)
        after = list(_answers(restored, QUESTIONS))
        assert all(check.ok for check in restored.verify())
    assert _same(before, after) >= 3 * len(QUESTIONS)


# A second tenant whose rows are full of the first one's question words, and of other
# lengths: under one table's statistics it would lower their weights in the first tenant.
TENANT_B = [
    *(
        f"release date {i} of the budget plan; the plan cost and the release notes"
        for i in range(30)
    ),
    *(
        f"cafe setup {i}: " + "vendor " * (i % 7) + "roadmap, hiring and the team plan"
        for i in range(20)
    ),
    "state of the art, great great good",
    "ana@example.com wrote about the release v1.2.3",
]
B_QUESTIONS = ["release date", "budget plan cost", "cafe setup", "v1.2.3", "great great", "team"]


def _tenants(location: str, *, large: bool = False) -> dict[str, list[tuple[str, str, object]]]:
    """Scope "a" holds CORPUS and scope "b" TENANT_B, written in turns (their ids interleave),
    half before a first search builds the replicas and half after; each tenant's answers.
    ``large``: SQLite's replica is built in its thread, as on a store past its threshold."""
    memories = {name: _memory(location, scope=name) for name in ("a", "b")}
    try:
        if large and "://" not in location:
            memories["a"].store.bm25_min_rows = 0  # type: ignore[attr-defined]
        halves = {"a": len(CORPUS) // 2, "b": len(TENANT_B) // 2}
        texts = {"a": CORPUS, "b": TENANT_B}
        for name in ("a", "b"):
            memories[name].add_many(texts[name][: halves[name]])
        memories["a"].search(QUESTIONS[0], settings=MODES["default"])
        if large and "://" not in location:  # it was built in its thread, and waited for
            assert memories["a"].store._bm25_thread is not None  # type: ignore[attr-defined]
        for name in ("b", "a"):
            memories[name].add_many(texts[name][halves[name] :])
        return {
            "a": list(_answers(memories["a"], QUESTIONS)),
            "b": list(_answers(memories["b"], B_QUESTIONS)),
        }
    finally:
        for memory in memories.values():
            memory.close()


def test_the_engines_rank_each_tenant_alike(both_locations: dict[str, str]) -> None:
    answers = {engine: _tenants(location) for engine, location in both_locations.items()}
    for scope, questions in (("a", QUESTIONS), ("b", B_QUESTIONS)):
        found = _same(answers["sqlite"][scope], answers["postgres"][scope])
        assert found >= 3 * len(questions), scope


def test_a_large_sqlite_store_ranks_each_tenant_as_postgres(tmp_path: Path, pg_url: str) -> None:
    # The replica loaded or built in its thread (a store past bm25_min_rows) is waited for,
    # not served by FTS5's statistics of the whole table meanwhile.
    sqlite = _tenants(str(tmp_path / "large.db"), large=True)
    postgres = _tenants(pg_url)
    for scope in ("a", "b"):
        assert _same(sqlite[scope], postgres[scope]) > 0, scope


def test_a_tenants_rankings_do_not_move_when_another_tenant_grows(
    engine_location: str,
) -> None:
    # One tenant's words must not move another tenant's ranking: scope "a" answers the same,
    # scores to 1e-9, before and after scope "b" gains rows full of its question words.
    with _memory(engine_location, scope="a") as alone:
        alone.add_many(CORPUS)
        before = list(_answers(alone, QUESTIONS))
        with _memory(engine_location, scope="b") as other:
            other.add_many(TENANT_B)
            other.add_many(FILLER * 3)
        after = list(_answers(alone, QUESTIONS))
    assert _same(before, after) >= 3 * len(QUESTIONS)


def _per_scope(location: str) -> dict[str, list[tuple[str, str, object]]]:
    with _memory(location, scope="a") as a, _memory(location, scope="b") as b:
        return {"a": list(_answers(a, QUESTIONS)), "b": list(_answers(b, B_QUESTIONS))}


def test_a_migrated_multi_tenant_store_answers_as_its_source(tmp_path: Path, pg_url: str) -> None:
    # SQLite -> dump -> PostgreSQL, then PostgreSQL -> dump -> SQLite: every tenant's
    # rankings and scores are the source's.
    source = str(tmp_path / "source.db")
    _tenants(source)
    before = _per_scope(source)
    with _memory(source) as memory:
        memory.dump(tmp_path / "sqlite.dump")
    with _memory(pg_url) as restored:
        restored.restore(tmp_path / "sqlite.dump")
        assert all(check.ok for check in restored.verify())
        restored.dump(tmp_path / "postgres.dump")
    on_postgres = _per_scope(pg_url)
    back = str(tmp_path / "back.db")
    with _memory(back) as copy:
        copy.restore(tmp_path / "postgres.dump")
    on_sqlite = _per_scope(back)
    for scope in ("a", "b"):
        assert _same(before[scope], on_postgres[scope]) > 0, scope
        assert _same(before[scope], on_sqlite[scope]) > 0, scope
