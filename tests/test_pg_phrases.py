"""Phrases on PostgreSQL from the positions held in the BM25 replica
(``store/postgres/bm25.py``): the rows, and how often the tokens stand in turn in each, are
those SQL finds in the rows' ``terms`` (``_phrase_rows_sql``), across catch-ups (that they
score as FTS5 scores them is tests/test_conformance_lexical.py's). Real PostgreSQL."""

from __future__ import annotations

import numpy as np

from mempp.index.analysis import analyze
from mempp.records import Document
from mempp.store.postgres import PostgresStore

import engines

pg_server = engines.pg_server
pg_url = engines.pg_url

SCOPE = "t"
DIM = 8
TEXTS = [
    "the release date moved; release date is Friday, release date again",
    "date release, in the wrong order",
    "release the date: a word between",
    "releasing dates: other forms of both words",
    "great great great good",
    "good great",
    "state of the art",
    "state art",
    "the word release at the end, date",
    # Past a tsvector's last position (16,383): the terms hold every position.
    " ".join(["filler"] * 16_400) + " release date",
    # Past a tsvector's 255 positions of a word in a row.
    " ".join(["release date"] * 300),
    "the state of the art of release-date art",
]
PHRASES = [
    "release date",
    "date release",
    "great great",
    "good great",
    "state art",
    "art state",
    "state of the art",  # longer phrases, and stop words, count as FTS5 counts them
    "release date art",
    "art",
]


def _store(url: str) -> PostgresStore:
    store = PostgresStore(url)
    store.bind_encoder("phrase-test", DIM)
    return store


def _add(store: PostgresStore, texts: list[str]) -> None:
    docs = [Document.create(text) for text in texts]
    vectors = np.random.default_rng(len(texts)).standard_normal((len(docs), DIM))
    store.insert(SCOPE, docs, vectors.astype(np.float32))


def _phrases() -> list[tuple[str, ...]]:
    return [tuple(tokens) for tokens in analyze(PHRASES)]


def _as_lists(found: list[tuple[np.ndarray, np.ndarray]]) -> list[list[tuple[int, float]]]:
    """Per phrase, its (id, occurrences) by id (the SQL gives them in no order)."""
    return [sorted(zip(ids.tolist(), tf.tolist(), strict=True)) for ids, tf in found]


def _check(store: PostgresStore) -> int:
    replica = store._caught_up(SCOPE)
    matched = 0
    for phrase in _phrases():
        expected = store._phrase_rows_sql(SCOPE, [phrase], replica.newest)
        found = replica.phrase_rows([phrase])
        assert _as_lists(found) == _as_lists(expected), phrase
        matched += sum(len(ids) for ids, _ in found)
    return matched


def test_phrase_rows_are_postgresqls_across_catch_ups(pg_url: str) -> None:
    store = _store(pg_url)
    try:
        _add(store, TEXTS)
        first = _check(store)
        assert first >= 6  # the phrases occur: the comparison is not between empty lists
        # Rows added one at a time (a chunk of positions each), then many at once.
        for text in TEXTS[:3]:
            _add(store, [text + " once more"])
            _check(store)
        _add(store, [f"{text} {i}" for i in range(20) for text in TEXTS[:9]])
        assert _check(store) > first
        several = _phrases()
        replica = store._caught_up(SCOPE)
        one_by_one = [found for pair in several for found in replica.phrase_rows([pair])]
        assert _as_lists(replica.phrase_rows(several)) == _as_lists(one_by_one)
    finally:
        store.close()


def test_a_phrase_ranks_rows_where_its_words_stand_together(pg_url: str) -> None:
    from mempp.search.query import lexical_query
    from mempp.settings import preset

    store = _store(pg_url)
    try:
        # Without the phrase the shorter, newer row would come first.
        others = [f"another row, number {i}" for i in range(20)]
        _add(store, ["the release date itself", "date release", *others])
        query = lexical_query("When is the release date?", preset("default"))
        assert "release date" in query.phrases and query.mode == "disjunctive"
        ids = store.lexical(SCOPE, query, None, 10)
        records = store.get(SCOPE, ids)
        assert records[ids[0]].text == "the release date itself"
    finally:
        store.close()
