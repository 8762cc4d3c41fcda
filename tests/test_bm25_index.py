"""Bm25Index's flat postings: the same scores and rankings however appends are merged."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mempp.index import bm25
from mempp.index.bm25 import Bm25Index


def _batches(rng: np.random.Generator, rows: int, terms: int, parts: int):
    """Random postings for rows 1..rows in ``parts`` appends, as FTS5 hands them over."""
    edges = np.linspace(0, rows, parts + 1).astype(int)
    for low, high in itertools.pairwise(edges):
        postings = {}
        for term in range(terms):
            chosen = np.flatnonzero(rng.random(high - low) < 1.5 / (term + 1) ** 0.8)
            if len(chosen):
                ids = (low + 1 + chosen).astype(np.int64)
                postings[f"t{term}"] = (ids, rng.integers(1, 300, len(ids)).astype(np.float64))
        yield postings, int(high - low), int(high)


def _reference(batches, query: list[str], conjunctive: bool, limit: int) -> list[int]:
    per_term: dict[str, dict[int, float]] = {}
    length: dict[int, float] = {}
    rows = 0
    for postings, new_rows, _ in batches:
        rows += new_rows
        for term, (ids, tf) in postings.items():
            for i, f in zip(ids.tolist(), tf.tolist(), strict=True):
                per_term.setdefault(term, {})[i] = f
                length[i] = length.get(i, 0.0) + f
    avgdl = sum(length.values()) / rows
    score: dict[int, float] = {}
    hits: dict[int, int] = {}
    for term in query:
        found = per_term.get(term, {})
        idf = math.log((rows - len(found) + 0.5) / (len(found) + 0.5))
        idf = 1e-6 if idf <= 0 else idf
        for i, f in found.items():
            part = idf * (f * 2.2) / (f + 1.2 * (0.25 + 0.75 * length[i] / avgdl))
            score[i] = score.get(i, 0.0) + part
            hits[i] = hits.get(i, 0) + 1
    need = len(query) if conjunctive else 1
    chosen = [i for i in score if hits[i] >= need and i % 3]  # eligibility: ids not % 3
    return sorted(chosen, key=lambda i: (-score[i], -i))[:limit]


@pytest.mark.parametrize("merge", ["never", "every append"])
def test_rankings_and_postings_match_a_plain_reference(
    monkeypatch: pytest.MonkeyPatch, merge: str
) -> None:
    if merge == "every append":
        monkeypatch.setattr(bm25, "_MIN_DELTA", 0)
        monkeypatch.setattr(bm25, "_DELTA_SHARE", 10**9)
    rng = np.random.default_rng(3)
    batches = list(_batches(rng, rows=3000, terms=60, parts=5))
    index = Bm25Index()
    for postings, new_rows, max_id in batches:
        index.add_postings(postings, new_rows, max_id)
    if merge == "every append":
        assert index._delta == {} and index._ids.dtype == np.int32
        assert index._tf.dtype == np.uint16  # frequencies up to 299
    for trial in range(40):
        query = [f"t{int(t)}" for t in rng.integers(0, 70, int(rng.integers(1, 5)))]
        conjunctive = trial % 4 == 0
        limit = (5, 50, 500)[trial % 3]
        got = index.search(query, conjunctive, lambda ids: ids % 3 != 0, limit)
        assert got == _reference(batches, query, conjunctive, limit), (trial, query)
    ids, tf = index.postings("t0")
    expected = np.concatenate([p["t0"][0] for p, _, _ in batches])
    assert ids.tolist() == expected.tolist() and tf.dtype == np.float64
    assert index.postings("absent")[0].size == 0
    lengths = np.zeros(3001)
    for postings, _, _ in batches:
        for ids, tf in postings.values():
            lengths[ids] += tf
    assert index.lengths(np.arange(1, 3001)).tolist() == lengths[1:].tolist()


def test_searches_between_appends_score_under_the_statistics_of_the_moment() -> None:
    # The per-row length norms are cached for one state of N and avgdl; an append changes
    # both, so a search after it must not reuse the norms of the search before it.
    rng = np.random.default_rng(11)
    batches = list(_batches(rng, rows=1500, terms=30, parts=6))
    index = Bm25Index()
    for done, (postings, new_rows, max_id) in enumerate(batches, start=1):
        index.add_postings(postings, new_rows, max_id)
        for trial in range(6):
            query = [f"t{int(t)}" for t in rng.integers(0, 30, int(rng.integers(1, 4)))]
            conjunctive = trial % 3 == 0
            got = index.search(query, conjunctive, lambda ids: ids % 3 != 0, 50)
            assert got == _reference(batches[:done], query, conjunctive, 50), (done, query)


def test_phrase_scores_are_added_once_the_words_are_scored() -> None:
    index = Bm25Index()
    ids = np.arange(1, 7, dtype=np.int64)
    index.add_postings({"a": (ids, np.ones(6)), "b": (ids[:3], np.ones(3))}, 6, 6)

    def everyone(rows: np.ndarray) -> np.ndarray:
        return np.ones(len(rows), dtype=bool)

    called = []

    def extra() -> tuple[np.ndarray, np.ndarray]:
        called.append(True)
        return np.array([5, 99]), np.array([10.0, 50.0])  # 99: a row the index has not seen

    assert index.search(["a"], False, everyone, 3, extra) == [5, 6, 4]
    assert called == [True]
    called.clear()
    # As FTS5 reads '"absent" OR "a phrase"': the rows of the phrase match, though no word
    # of the query does (rows the index has not seen are left out).
    assert index.search(["absent"], False, everyone, 3, extra) == [5] and called == [True]
    called.clear()
    # Conjunctive: a word no row holds matches nothing, and the phrases are not read.
    assert index.search(["absent", "a"], True, everyone, 3, extra) == [] and called == []


def test_saved_index_loads_and_catches_up_like_one_built_whole(tmp_path) -> None:
    rng = np.random.default_rng(5)
    batches = list(_batches(rng, rows=2000, terms=40, parts=4))
    whole, resumed = Bm25Index(), Bm25Index()
    for postings, new_rows, max_id in batches:
        whole.add_postings(postings, new_rows, max_id)
    for postings, new_rows, max_id in batches[:2]:
        resumed.add_postings(postings, new_rows, max_id)
    path = tmp_path / "bm25.npz"
    resumed.save(path)
    loaded = Bm25Index.load(path)
    assert not loaded._ids.flags.owndata and not loaded._doclen.flags.owndata  # mapped
    assert (loaded.rows, loaded.tokens, loaded.max_id) == (
        resumed.rows,
        resumed.tokens,
        resumed.max_id,
    )
    for postings, new_rows, max_id in batches[2:]:  # catch up from the last id
        loaded.add_postings(postings, new_rows, max_id)

    def everyone(ids: np.ndarray) -> np.ndarray:
        return np.ones(len(ids), dtype=bool)

    for trial in range(20):
        query = [f"t{int(t)}" for t in rng.integers(0, 45, int(rng.integers(1, 4)))]
        assert loaded.search(query, trial % 3 == 0, everyone, 40) == whole.search(
            query, trial % 3 == 0, everyone, 40
        )
    # Saved again after the catch-up (terms numbered out of sorted order) and loaded back.
    loaded.save(path)
    again = Bm25Index.load(path)
    for term in ("t0", "t7", "t39", "t10", "missing"):
        assert again.postings(term)[0].tolist() == whole.postings(term)[0].tolist()
    assert not list(tmp_path.glob("*.partial"))


def write_format_1(index: Bm25Index, path) -> None:
    """Save ``index`` as an ``.npz`` of format 1, as mempp did before the array file."""
    index._merge()
    np.savez(
        path,
        format=np.array([1, index.rows, index.tokens, index.max_id]),
        terms=np.frombuffer("\0".join(index._terms).encode(), dtype=np.uint8),
        indptr=index._indptr,
        ids=index._ids,
        tf=index._tf,
        doclen=index._doclen[: index.max_id + 1],
        label=np.frombuffer(index.label.encode(), dtype=np.uint8),
    )


def test_a_replica_saved_as_npz_by_an_earlier_mempp_still_loads(tmp_path) -> None:
    rng = np.random.default_rng(9)
    index = Bm25Index()
    for postings, new_rows, max_id in _batches(rng, rows=500, terms=30, parts=2):
        index.add_postings(postings, new_rows, max_id)
    index.label = "fingerprint"
    path = tmp_path / "bm25.npz"
    write_format_1(index, path)
    loaded = Bm25Index.load(path)
    assert (loaded.rows, loaded.tokens, loaded.max_id, loaded.label) == (
        index.rows,
        index.tokens,
        index.max_id,
        "fingerprint",
    )

    def everyone(ids: np.ndarray) -> np.ndarray:
        return np.ones(len(ids), dtype=bool)

    for term in ("t0", "t3", "t29", "t11"):
        expected = index.search([term], False, everyone, 50)
        assert expected and loaded.search([term], False, everyone, 50) == expected


def test_load_names_the_file_it_cannot_read(tmp_path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not numpy")
    with pytest.raises(ValueError, match=r"junk\.npz: not a BM25 index file"):
        Bm25Index.load(junk)
    other = tmp_path / "other.npz"
    arrays = {"terms": np.zeros(0, np.uint8), "indptr": np.array([0, 3]), "ids": np.zeros(3)}
    np.savez(other, format=np.array([1, 1, 1, 5]), tf=np.zeros(3), doclen=np.zeros(6), **arrays)
    with pytest.raises(ValueError, match=r"other\.npz: not a BM25 index file"):
        Bm25Index.load(other)
    saved = tmp_path / "saved.arrays"
    Bm25Index().save(saved)
    assert Bm25Index.load(saved).rows == 0
    saved.write_bytes(saved.read_bytes()[:-1])
    with pytest.raises(ValueError, match=r"saved\.arrays"):
        Bm25Index.load(saved)


def test_postings_from_groups_counts_occurrences() -> None:
    grouped = [("budget", "3,3,5,9,9,9"), ("plan", "7"), ("odd", "8,2,8")]
    postings = bm25.postings_from_groups(grouped)
    assert {t: (i.tolist(), f.tolist()) for t, (i, f) in postings.items()} == {
        "budget": ([3, 5, 9], [2.0, 1.0, 3.0]),
        "plan": ([7], [1.0]),
        "odd": ([2, 8], [1.0, 2.0]),
    }


def _groups(batches) -> list[tuple[str, str]]:
    """The batches as FTS5's fts5vocab rows grouped by term: one id per occurrence."""
    merged: dict[str, list[int]] = {}
    for postings, _, _ in batches:
        for term, (ids, tf) in postings.items():
            merged.setdefault(term, []).extend(np.repeat(ids, tf.astype(int)).tolist())
    return [(term, ",".join(map(str, merged[term]))) for term in sorted(merged)]


def test_an_index_assembled_in_bulk_is_the_one_built_by_appends() -> None:
    rng = np.random.default_rng(5)
    batches = list(_batches(rng, rows=2000, terms=50, parts=1))
    grouped = _groups(batches)
    names, indptr, ids, tf = bm25.flat_postings(grouped)
    chunked = bm25.flat_postings(grouped, chunk=50)  # a chunk every few terms
    assert chunked[0] == names
    assert all(
        a.tolist() == b.tolist() for a, b in zip(chunked[1:], (indptr, ids, tf), strict=True)
    )
    one_by_one = bm25.postings_from_groups(grouped)
    assert names == [term for term, _ in grouped]
    for number, term in enumerate(names):
        begin, end = indptr[number], indptr[number + 1]
        assert ids[begin:end].tolist() == one_by_one[term][0].tolist()
        assert tf[begin:end].tolist() == one_by_one[term][1].tolist()
    bulk = Bm25Index.from_flat((names, indptr, ids, tf), 2000, 2000)
    appended = Bm25Index()
    appended.add_postings(one_by_one, 2000, 2000)
    assert (bulk.rows, bulk.tokens, bulk.max_id) == (appended.rows, appended.tokens, 2000)
    for trial in range(30):
        query = [f"t{int(t)}" for t in rng.integers(0, 55, int(rng.integers(1, 4)))]
        conjunctive = trial % 3 == 0
        a_ids, a_score = bulk.scored(query, conjunctive)
        b_ids, b_score = appended.scored(query, conjunctive)
        assert a_ids.tolist() == b_ids.tolist()
        assert a_score[a_ids].tolist() == b_score[b_ids].tolist()  # bit for bit
    assert bm25.flat_postings([])[0] == [] and Bm25Index.from_flat(bm25.flat_postings([]), 0, 0)


def test_a_subsets_statistics_score_as_an_index_of_its_rows_alone() -> None:
    # A tenant's rows in a shared index (``among``) score bit for bit as an index holding
    # only them, which is how PostgreSQL's per-scope replica scores them.
    rng = np.random.default_rng(8)
    batches = list(_batches(rng, rows=2500, terms=40, parts=3))
    members = np.zeros(2501, dtype=bool)
    members[1:] = rng.random(2500) < 0.3
    shared, alone = Bm25Index(), Bm25Index()
    for postings, _, max_id in batches:
        shared.add_postings(postings, 0, max_id)  # rows counted below
        mine = {}
        for term, (ids, tf) in postings.items():
            keep = members[ids]
            if keep.any():
                mine[term] = (ids[keep], tf[keep])
        alone.add_postings(mine, 0, max_id)
    shared.rows, alone.rows = 2500, int(members.sum())  # rows without tokens count too
    among = shared.among(members)
    assert (among.rows, among.tokens) == (alone.rows, alone.tokens)
    for trial in range(30):
        query = [f"t{int(t)}" for t in rng.integers(0, 45, int(rng.integers(1, 4)))]
        conjunctive = trial % 4 == 0
        got_ids, got = shared.scored(query, conjunctive, among=among)
        want_ids, want = alone.scored(query, conjunctive)
        got_ids = got_ids[members[got_ids]]
        assert got_ids.tolist() == want_ids.tolist()
        assert got[got_ids].tolist() == want[want_ids].tolist()  # bit for bit
        eligible = lambda ids: ids % 3 != 0  # noqa: E731
        assert shared.search(query, conjunctive, eligible, 20, among=among) == alone.search(
            query, conjunctive, eligible, 20
        )


def test_a_phrases_frequencies_are_recovered_from_its_score() -> None:
    rng = np.random.default_rng(2)
    batches = list(_batches(rng, rows=1200, terms=30, parts=2))
    index = Bm25Index()
    for postings, new_rows, max_id in batches:
        index.add_postings(postings, new_rows, max_id)
    for matches in (3, 400, 1100):  # the last past half the rows: idf is 1e-6
        ids = np.sort(rng.choice(np.arange(1, 1201), matches, replace=False))
        tf = rng.integers(1, 500, matches).astype(np.float64)
        scores = index.phrase_scores(ids, tf, matches)
        found = bm25.frequencies_from_scores(
            scores, index.lengths(ids), index.rows, index.tokens, matches
        )
        assert found.tolist() == tf.tolist()
