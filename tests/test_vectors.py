"""The in-RAM vector index: int8 scan in date order, exact float32 rescoring, exact results.

Every search is checked against a float64 ranking of the same rows (tenant, state and as-of
applied, ties to the newer id), across appends that land in the unsorted tail, reorderings,
state changes and both sources of exact vectors.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from mempp.index import vectors
from mempp.index.vectors import ExactVectorIndex


def _reference(
    matrix: np.ndarray,
    ids: np.ndarray,
    scopes: np.ndarray,
    keys: np.ndarray,
    active: np.ndarray,
    query: np.ndarray,
    scope: str,
    as_of: int | None,
    limit: int,
) -> list[int]:
    eligible = active & (scopes == scope)
    if as_of is not None:
        eligible &= keys <= as_of
    scores = matrix.astype(np.float64) @ query.astype(np.float64)
    order = np.lexsort((-ids, -scores))
    return [int(ids[i]) for i in order if eligible[i]][:limit]


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@pytest.mark.parametrize(("store_rows", "parallel"), [(False, False), (True, False), (True, True)])
def test_search_equals_exact_ranking_across_appends_and_reorders(
    monkeypatch: pytest.MonkeyPatch, store_rows: bool, parallel: bool
) -> None:
    monkeypatch.setattr(vectors, "_MIN_TAIL", 300)  # reorder often
    if parallel:  # the scan split across threads (parts of unequal length)
        monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 500)
        monkeypatch.setattr(vectors, "SCAN_THREADS", 3)
    rng = np.random.default_rng(4)
    dim, count = 48, 6000
    # Clustered rows, so that many scores crowd near the top (the hard case for int8).
    centres = _unit(rng.standard_normal((12, dim)))
    matrix = _unit(centres[rng.integers(0, 12, count)] + 0.15 * rng.standard_normal((count, dim)))
    matrix[10] = matrix[3]  # an exact tie: the newer row must come first
    ids = np.arange(1, count + 1, dtype=np.int64) * 2
    scopes = np.where(rng.random(count) < 0.8, "a", "b")
    keys = rng.integers(0, 1000, count)
    undated = rng.random(count) < 0.05
    event_keys = [None if u else int(k) for u, k in zip(undated, keys, strict=True)]
    ref_keys = np.where(undated, vectors.UNDATED, keys)
    active = np.ones(count, dtype=bool)
    by_id = dict(zip(ids.tolist(), matrix, strict=True))
    fetched: list[int] = []

    def exact_rows(wanted: np.ndarray) -> np.ndarray:
        fetched.append(len(wanted))
        return np.stack([by_id[int(i)] for i in wanted])

    index = ExactVectorIndex(dim, exact_rows if store_rows else None)
    held = 0
    for chunk in (2000, 120, 50, 1500, 2330):
        index.append(
            ids[held : held + chunk],
            matrix[held : held + chunk],
            scopes[held : held + chunk].tolist(),
            event_keys[held : held + chunk],
            [True] * chunk,
        )
        held += chunk
        archived = rng.choice(held, size=held // 20, replace=False)
        active[:held] = True
        active[archived] = False
        index.set_archived(ids[:held][~active[:held]])
        for trial in range(24):
            query = _unit(matrix[int(rng.integers(held))] + 0.1 * rng.standard_normal(dim))
            as_of = (None, int(rng.integers(0, 1000)), int(rng.integers(0, 40)))[trial % 3]
            limit = (1, 10, 50, 200)[trial % 4]
            scope = "ab"[trial % 2]
            expected = _reference(
                matrix[:held], ids[:held], scopes[:held], ref_keys[:held], active[:held],
                query, scope, as_of, limit,
            )  # fmt: skip
            assert index.search(query, scope, as_of, limit) == expected, (held, trial)
    tied = index.search(matrix[3], str(scopes[3]), None, 2)
    if scopes[10] == scopes[3] and active[3] and active[10]:
        assert tied == [int(ids[10]), int(ids[3])]
    assert len(index) == count and index.max_id == int(ids[-1])
    assert bool(fetched) == store_rows
    if store_rows:  # candidates only, never the whole matrix
        assert max(fetched) < count // 2


def test_left_out_rows_that_could_win_are_rescored(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one candidate per slot, the int8 order alone would miss rows: the error bound
    must send them to exact rescoring."""
    monkeypatch.setattr(vectors, "_RESCORE", 1)
    rng = np.random.default_rng(7)
    dim, count = 32, 4000
    base = _unit(rng.standard_normal(dim))
    matrix = _unit(base + 0.02 * rng.standard_normal((count, dim)))  # all nearly equal
    ids = np.arange(1, count + 1, dtype=np.int64)
    index = ExactVectorIndex(dim)
    index.append(ids, matrix, ["s"] * count, [0] * count, [True] * count)
    everyone = np.ones(count, dtype=bool)
    zeros = np.zeros(count, dtype=np.int64)
    for _ in range(10):
        query = _unit(base + 0.05 * rng.standard_normal(dim))
        expected = _reference(matrix, ids, np.full(count, "s"), zeros, everyone, query, "s", 0, 20)
        assert index.search(query, "s", 0, 20) == expected


@pytest.mark.parametrize("length", [0.2, 1.0, 7.0])
def test_exact_for_rows_of_any_length_restored_or_not(
    monkeypatch: pytest.MonkeyPatch, length: float
) -> None:
    """The query's rounding error is bounded through the longest row held: rows longer than
    unit (an embedder off its contract) must not break exactness, in the index that took
    the float32 rows nor in one restored from its codes alone."""
    monkeypatch.setattr(vectors, "_RESCORE", 1)
    rng = np.random.default_rng(11)
    dim, count = 24, 3000
    base = _unit(rng.standard_normal(dim))
    matrix = length * _unit(base + 0.05 * rng.standard_normal((count, dim)))
    ids = np.arange(1, count + 1, dtype=np.int64)
    index = ExactVectorIndex(dim)
    index.append(ids, matrix, ["s"] * count, [0] * count, [True] * count)
    longest = float(np.linalg.norm(matrix, axis=1).max())
    assert index._max_norm == pytest.approx(longest, rel=1e-6)
    index.erase(ids[:3])  # zero codes, scale 1: restored as zero rows, not as long ones
    matrix[:3] = 0
    restored = ExactVectorIndex.restore(
        dim, index.export(), count, index.scopes, lambda wanted: matrix[wanted - 1]
    )
    left = float(np.linalg.norm(matrix, axis=1).max())
    assert left <= restored._max_norm <= longest * 1.2  # a bound from the codes
    everyone = ids > 3
    zeros = np.zeros(count, dtype=np.int64)
    for _ in range(200):
        # One large component makes the query's steps coarse: its own rounding matters.
        query = 0.05 * rng.standard_normal(dim)
        query[rng.integers(dim)] = 3.0
        query = _unit(base + query)
        expected = _reference(matrix, ids, np.full(count, "s"), zeros, everyone, query, "s", 0, 15)
        assert index.search(query, "s", 0, 15) == expected
        assert restored.search(query, "s", 0, 15) == expected


@pytest.mark.parametrize("store_rows", [False, True])
def test_equal_rows_tie_and_the_newer_wins(store_rows: bool) -> None:
    # The same text under several authors is several rows with one vector. Scored together
    # by one matrix product, equal rows came out a rounding apart by their places in BLAS's
    # blocks, and an older one could win.
    rng = np.random.default_rng(11)
    for copies in range(2, 12):
        rows = _unit(rng.standard_normal((80, 384)))
        equal = sorted(rng.choice(80, copies, replace=False).tolist())
        rows[equal] = rows[equal[0]]
        ids = np.arange(1, 81, dtype=np.int64)
        exact = (lambda wanted, rows=rows: rows[wanted - 1]) if store_rows else None
        index = ExactVectorIndex(384, exact_rows=exact)
        index.append(ids, rows, ["s"] * 80, [None] * 80, [True] * 80)
        expected = [int(ids[i]) for i in equal[::-1]]
        for scale in (1.0, 0.37, 3.0):
            query = (rows[equal[0]] * np.float32(scale)).astype(np.float32)
            assert index.search(query, "s", None, copies) == expected, (copies, scale)


@pytest.mark.parametrize("store_rows", [False, True])
def test_rows_closer_than_float32_sums_rank_as_their_float64_scores(store_rows: bool) -> None:
    # Each row has a twin a few float32 steps away in one component: their scores differ by
    # ~1e-10, far below the error of summing 768 float32 products in float32 (~1e-7), which
    # ordered such pairs at random. The rescoring sums in float64, as the reference does.
    rng = np.random.default_rng(5)
    base = _unit(rng.standard_normal((60, 768)))
    query = _unit(rng.standard_normal(768))
    twins = base.copy()
    for row, steps in enumerate(rng.integers(1, 6, 60)):
        column = int(rng.integers(768))
        toward = np.float32(np.inf if rng.random() < 0.5 else -np.inf)
        for _ in range(steps):
            twins[row, column] = np.nextafter(twins[row, column], toward)
    rows = np.empty((120, 768), dtype=np.float32)
    rows[0::2], rows[1::2] = base, twins
    ids = np.arange(1, 121, dtype=np.int64)
    exact = (lambda wanted: rows[wanted - 1]) if store_rows else None
    index = ExactVectorIndex(768, exact_rows=exact)
    index.append(ids, rows, ["s"] * 120, [None] * 120, [True] * 120)
    everyone = np.ones(120, dtype=bool)
    scopes = np.array(["s"] * 120)
    keys = np.zeros(120, dtype=np.int64)
    expected = _reference(rows, ids, scopes, keys, everyone, query, "s", None, 120)
    assert index.search(query, "s", None, 120) == expected
    assert index.search(query, "s", None, 20) == expected[:20]


def test_the_scan_scores_rows_by_exact_integer_dot_products() -> None:
    rng = np.random.default_rng(3)
    rows = rng.integers(-127, 128, size=(5000, 384), dtype=np.int8)
    codes = rng.integers(-127, 128, size=384, dtype=np.int8)
    out = np.empty(5000, dtype=np.float32)
    vectors._score(rows, codes, np.ones(5000, dtype=np.float32), out)
    assert np.array_equal(out, rows.astype(np.int64) @ codes.astype(np.int64))
    query = rng.standard_normal(384).astype(np.float32)
    quantized, step, codes_l1, rounding = vectors._quantized(query)
    residue = query / np.float32(step) - quantized
    assert np.abs(quantized).max() == 127 and np.abs(residue).max() <= 0.5 + 1e-5
    assert codes_l1 == np.abs(quantized.astype(np.int64)).sum()
    assert rounding == pytest.approx(float(np.linalg.norm(residue)), rel=1e-5)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="None is immortal from Python 3.12")
def test_searches_leave_nones_reference_count_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A native call that returns None one reference short takes one off None's count each
    time, and the process aborts once it reaches zero (SimSIMD 6.5's ``cdist(out=...)`` did:
    a server died after some thousands of searches)."""
    monkeypatch.setattr(vectors, "_PARALLEL_ROWS", 64)  # the scan split across the pool
    monkeypatch.setattr(vectors, "SCAN_THREADS", 2)
    rng = np.random.default_rng(11)
    rows = _unit(rng.standard_normal((600, 32)))
    index = ExactVectorIndex(32)
    index.append(np.arange(1, 601), rows, ["s"] * 600, (np.arange(600) % 50).tolist(), [True] * 600)
    queries = _unit(rng.standard_normal((40, 32)))
    index.search(queries[0], "s", 30, 5)  # pool threads, lazily made objects
    gc.collect()
    before = sys.getrefcount(None)
    for _ in range(25):
        for query in queries:
            index.search(query, "s", None, 5)
            index.search(query, "s", 30, 5)
    gc.collect()
    assert abs(sys.getrefcount(None) - before) < 100  # 2,000 scans, 4,000 scored parts


def test_empty_unknown_and_edge_cases() -> None:
    index = ExactVectorIndex(4)
    query = np.array([1, 0, 0, 0], dtype=np.float32)
    assert index.search(query, "s", None, 5) == []
    index.append(
        np.array([1, 2, 3]),
        np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=np.float32),  # a zero row
        ["s", "s", "s"],
        [5, None, 7],
        [True, True, False],
    )
    assert index.search(query, "other", None, 5) == []
    assert index.search(query, "s", None, 0) == []
    assert index.search(query, "s", None, 5) == [1, 2]  # 3 is archived; 2 is undated
    assert index.search(query, "s", 6, 5) == [1]
    assert index.search(query, "s", 4, 5) == []
    assert index.eligible(np.array([1, 2, 3, 9]), "s", 6).tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="ids must increase"):
        index.append(np.array([2]), np.ones((1, 4), np.float32), ["s"], [1], [True])


# -- the scan copy saved and restored (ExactVectorIndex.export / restore) -----------------
def _random_index(rng: np.random.Generator, count: int, dim: int, exact_rows=None):
    matrix = _unit(rng.standard_normal((count, dim)))
    ids = np.arange(1, count + 1, dtype=np.int64) * 3
    scopes = np.where(rng.random(count) < 0.7, "a", "b")
    keys = rng.integers(0, 500, count)
    index = ExactVectorIndex(dim, exact_rows)
    index.append(ids, matrix, scopes.tolist(), keys.tolist(), [True] * count)
    return index, matrix, ids, scopes, keys


def test_restored_index_searches_like_the_one_exported_across_appends_and_states() -> None:
    rng = np.random.default_rng(12)
    dim = 24
    by_id: dict[int, np.ndarray] = {}

    def exact_rows(wanted: np.ndarray) -> np.ndarray:
        return np.stack([by_id[int(i)] for i in wanted])

    index, matrix, ids, scopes, keys = _random_index(rng, 3000, dim, exact_rows)
    by_id.update(zip(ids.tolist(), matrix, strict=True))
    arrays = index.export()
    assert len(arrays["codes"]) == 3000 and sorted(arrays["order"].tolist()) == list(range(3000))
    spare = 500  # room to append, as the file reader leaves it
    padded = {
        name: np.concatenate([a, np.zeros((spare, *a.shape[1:]), a.dtype)])
        for name, a in arrays.items()
    }
    restored = ExactVectorIndex.restore(dim, padded, 3000, index.scopes, exact_rows)
    codes_buffer = padded["codes"]
    more = _unit(rng.standard_normal((200, dim)))
    more_ids = np.arange(10_000, 10_200, dtype=np.int64)
    by_id.update(zip(more_ids.tolist(), more, strict=True))
    for target in (index, restored):
        target.append(more_ids, more, ["a"] * 200, [7] * 200, [True] * 200)
    assert restored._codes is codes_buffer  # the appends fit the spare rows: no copy
    archived = ids[rng.choice(3000, 300, replace=False)]
    for target in (index, restored):
        target.set_archived(archived)
    all_ids = np.concatenate([ids, more_ids])
    active = ~np.isin(all_ids, archived)
    all_matrix = np.concatenate([matrix, more])
    all_scopes = np.concatenate([scopes, np.full(200, "a")])
    all_keys = np.concatenate([keys, np.full(200, 7)])
    for trial in range(30):
        query = _unit(rng.standard_normal(dim))
        as_of = (None, int(rng.integers(0, 500)), 20)[trial % 3]
        scope = "ab"[trial % 2]
        expected = _reference(
            all_matrix, all_ids, all_scopes, all_keys, active, query, scope, as_of, 40
        )
        assert restored.search(query, scope, as_of, 40) == expected
        assert index.search(query, scope, as_of, 40) == expected


def test_restore_refuses_arrays_that_are_not_an_index() -> None:
    rng = np.random.default_rng(3)
    index, *_ = _random_index(rng, 200, 8)
    good = index.export()

    def broken(**changes: np.ndarray) -> dict[str, np.ndarray]:
        return {**{k: a.copy() for k, a in good.items()}, **changes}

    order = good["order"].copy()
    order[5] = order[6]  # not a permutation
    ids = good["ids"].copy()
    ids[10] = ids[9]  # ids must increase
    for arrays, scopes in [
        (broken(order=order), index.scopes),
        (broken(ids=ids), index.scopes),
        (broken(scope=np.full(200, 7, dtype=np.int32)), index.scopes),  # unknown scope code
        (broken(order=good["order"][::-1].copy()), index.scopes),  # not in date order
        (broken(codes=good["codes"][:, :4].copy()), index.scopes),  # another dimension
        (broken(scales=good["scales"].astype(np.float64)), index.scopes),
        (good, ["a"]),
    ]:
        with pytest.raises(ValueError, match="do not describe an index"):
            ExactVectorIndex.restore(8, arrays, 200, scopes, lambda w: np.zeros((len(w), 8)))


def test_erase_zeroes_the_rows_codes_and_takes_them_out_of_search() -> None:
    rng = np.random.default_rng(8)
    index, matrix, ids, scopes, _ = _random_index(rng, 500, 16)
    gone = int(ids[42])
    assert index.search(matrix[42], str(scopes[42]), None, 1) == [gone]
    index.erase(np.array([gone, 999_999]))  # an id it does not hold is ignored
    arrays = index.export()
    at = int(np.flatnonzero(arrays["ids"][arrays["order"]] == gone)[0])
    assert not arrays["codes"][at].any() and arrays["scales"][at] == 1
    assert int(np.count_nonzero(arrays["codes"].any(axis=1))) == 499
    assert gone not in index.search(matrix[42], str(scopes[42]), None, 50)
    assert not arrays["active"][42]


# -- the scan copy saved beside a real SQLite file (store/sqlite/vector_file.py) ------------
class _HashEmbedder:
    """Random unit vectors seeded by each text: the same text, the same vector."""

    name = "hash-vectors/16"
    dim = 16

    def embed(self, texts) -> np.ndarray:
        rows = [
            np.random.default_rng(list(text.encode())).standard_normal(self.dim) for text in texts
        ]
        return _unit(np.array(rows)) if rows else np.empty((0, self.dim), np.float32)


def _memory(path, scope: str = "default"):
    from mempp import Memory

    memory = Memory(path, embedder=_HashEmbedder(), scope=scope)
    memory.store.vector_file_min_rows = 0  # save from the first row on
    return memory


def _fill(memory, count: int, start: int = 0) -> None:
    rng = np.random.default_rng(start)
    memory.add_many(
        {"text": f"note {i} {rng.integers(1000)}", "date": f"2024-{1 + i % 12:02d}-01"}
        if i % 17
        else {"text": f"undated note {i}"}
        for i in range(start, start + count)
    )


def _exact(path, scope: str, query: np.ndarray, as_of: int | None, limit: int) -> list[int]:
    """The exact ranking straight from the file's float32 blobs (ties to the newer id)."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            """SELECT id, embedding FROM records WHERE scope = ? AND state = 'active'
               AND (? IS NULL OR event_key <= ?)""",
            (scope, as_of, as_of),
        ).fetchall()
    conn.close()
    if not rows:
        return []
    ids = np.array([r[0] for r in rows])
    matrix = np.stack([np.frombuffer(r[1], "<f4") for r in rows]).astype(np.float64)
    order = np.lexsort((-ids, -(matrix @ query.astype(np.float64))))
    return ids[order][:limit].tolist()


def _check_exact(memory, path, trials: int = 12) -> None:
    rng = np.random.default_rng(99)
    for trial in range(trials):
        query = _unit(rng.standard_normal(16))
        as_of = (None, 1717200000000000, 1704067200000000)[trial % 3]  # 2024-06-01, 2024-01-01
        got = memory.store.nearest(memory.scope, query, as_of, 25)
        assert got == _exact(path, memory.scope, query, as_of, 25), trial


@pytest.fixture
def rows_from_sqlite(monkeypatch):
    """How many rows each call of ``ExactVectorIndex.append`` got (what SQLite supplied)."""
    counts: list[int] = []
    real = ExactVectorIndex.append

    def counting(self, ids, *args, **kwargs):
        counts.append(len(ids))
        return real(self, ids, *args, **kwargs)

    monkeypatch.setattr(ExactVectorIndex, "append", counting)
    return counts


def _file(path):
    from mempp.store.sqlite.vector_file import VECTOR_FILE_SUFFIX

    return type(path)(f"{path}{VECTOR_FILE_SUFFIX}")


def test_vector_file_is_loaded_caught_up_and_follows_state_changes(
    db_path, rows_from_sqlite
) -> None:
    with _memory(db_path) as memory, _memory(db_path, scope="other") as other:
        _fill(memory, 300)
        _fill(other, 50, start=1000)
        _check_exact(memory, db_path)  # the first search loads from SQLite and saves
    assert _file(db_path).exists() and sum(rows_from_sqlite) == 350
    rows_from_sqlite.clear()
    with _memory(db_path) as memory:
        _check_exact(memory, db_path)
        assert rows_from_sqlite == []  # every row came from the file
        _fill(memory, 10, start=300)  # the catch-up reads only these
        _check_exact(memory, db_path)
        assert rows_from_sqlite == [10]
        ranked = memory.store.nearest(memory.scope, _HashEmbedder().embed(["note 3"])[0], None, 300)
    rows_from_sqlite.clear()
    # States changed by another process after the file was saved: an archived row leaves
    # the ranking, a superseded one stays (its state is unchanged), an undone archive
    # brings its row back.
    with _memory(db_path) as writer:
        writer.archive(ranked[0], reason="test")
        writer.supersede(ranked[1], by=ranked[2], reason="test")
        undone = writer.archive(ranked[3], reason="test")
        writer.undo(undone.run_id)
    with _memory(db_path) as memory:
        _check_exact(memory, db_path)
        query = _HashEmbedder().embed(["note 3"])[0]
        found = memory.store.nearest(memory.scope, query, None, 300)
        assert ranked[0] not in found and ranked[1] in found and ranked[3] in found
        assert rows_from_sqlite == [10]  # only the rows added after the save
    # Another tenant's rows come from the same file.
    rows_from_sqlite.clear()
    with _memory(db_path, scope="other") as other:
        _check_exact(other, db_path)


def _mapped(array: np.ndarray) -> bool:
    import mmap

    while isinstance(array, np.ndarray):
        array = array.base
    return isinstance(array, memoryview) and isinstance(array.obj, mmap.mmap)


def test_the_vector_file_is_mapped_and_the_catch_up_appends_into_its_zero_rows(
    db_path, rows_from_sqlite
) -> None:
    with _memory(db_path) as memory:
        _fill(memory, 300)
        _check_exact(memory, db_path)  # loaded from SQLite, saved
    rows_from_sqlite.clear()
    with _memory(db_path) as memory:
        _check_exact(memory, db_path)
        index = memory.store._index
        codes = index._codes
        assert rows_from_sqlite == [] and _mapped(codes) and _mapped(index._ids)
        assert len(codes) > len(index)  # the zero rows saved after the file's own
        _fill(memory, 10, start=300)
        _check_exact(memory, db_path)
        assert rows_from_sqlite == [10] and index._codes is codes  # appended in place
        saved = _file(db_path).read_bytes()
    assert _file(db_path).read_bytes() == saved  # copy-on-write: the file is untouched


def test_a_vector_file_that_is_stale_truncated_or_damaged_is_ignored_and_rewritten(
    db_path, tmp_path, rows_from_sqlite, caplog
) -> None:
    with _memory(db_path) as memory:
        _fill(memory, 200)
        _check_exact(memory, db_path)
    saved = _file(db_path).read_bytes()
    # A database that is not this one, same size and ids, other texts: the fingerprint differs.
    stranger = tmp_path / "stranger.db"
    with _memory(stranger) as memory:
        _fill(memory, 200, start=5000)
        _check_exact(memory, stranger)
    foreign = _file(stranger).read_bytes()
    # This database's rows and fingerprint, saved for another encoder of the same dimension.
    import sqlite3

    from mempp.store.sqlite import vector_file

    with _memory(db_path) as memory:
        memory.store.nearest(memory.scope, np.ones(16, np.float32) / 4, None, 1)
        index = memory.store._index
        conn = sqlite3.connect(db_path)
        label = vector_file.fingerprint(conn, index.max_id)
        conn.close()
        other_encoder = tmp_path / "other-encoder.arrays"
        vector_file.save(other_encoder, index, ("another-encoder", 16), label, "0")
        # The same rows at twice the width (what a file of a 768-d store would be here).
        wider = ExactVectorIndex(32, exact_rows=lambda ids: np.zeros((len(ids), 32), np.float32))
        arrays = index.export()
        wider.append(
            arrays["ids"],
            _unit(np.random.default_rng(3).standard_normal((len(arrays["ids"]), 32))),
            ["default"] * len(arrays["ids"]),
            arrays["event"],
            arrays["active"],
        )
        other_width = tmp_path / "other-width.arrays"
        vector_file.save(other_width, wider, (memory.embedder.name, 32), label, "0")
    damaged = bytearray(saved)
    damaged[len(saved) // 2] ^= 0x55  # a code
    padding = bytearray(saved)
    padding[-100] ^= 0x55  # in the zero rows after the last array: checked as well
    for label, content, reason in [
        ("truncated", saved[: len(saved) // 2], "truncated"),
        ("damaged", bytes(damaged), "fails its checksum"),
        ("damaged padding", bytes(padding), "fails its checksum"),
        ("empty", b"", "not an array file"),
        ("junk", b"not a vector file at all" * 100, "not an array file"),
        ("another database's", foreign, "stale"),
        ("another encoder's", other_encoder.read_bytes(), "encoder another-encoder (16-d)"),
        ("another width's", other_width.read_bytes(), "(32-d), the store's are"),
    ]:
        _file(db_path).write_bytes(content)
        rows_from_sqlite.clear()
        caplog.clear()
        with caplog.at_level("WARNING", logger="mempp.store"), _memory(db_path) as memory:
            _check_exact(memory, db_path)
        # Refused in one line naming the file and why, then read from SQLite and saved again.
        (record,) = [r for r in caplog.records if r.name == "mempp.store"]
        line = record.getMessage()
        assert "\n" not in line and line.startswith(str(_file(db_path))), label
        assert reason in line and "saving the file again" in line, (label, line)
        assert sum(rows_from_sqlite) == 200, label  # ignored: everything read from SQLite
        assert _file(db_path).read_bytes() != content, label  # saved again, valid
        rows_from_sqlite.clear()
        with _memory(db_path) as memory:
            _check_exact(memory, db_path)
        assert rows_from_sqlite == [], label


def test_redact_rewrites_the_vector_file_without_the_erased_vector(
    db_path, rows_from_sqlite
) -> None:
    from mempp.index import array_file

    def code_in_file(record_id: int) -> np.ndarray:
        _, arrays = array_file.read(_file(db_path))
        ids = arrays["ids"][arrays["order"]]
        return arrays["codes"][int(np.flatnonzero(ids == record_id)[0])]

    with _memory(db_path) as memory:
        _fill(memory, 120)
        secret = memory.add("the secret note", date="2024-03-03").id
        _check_exact(memory, db_path)
        assert code_in_file(secret).any()
        memory.redact(secret, reason="erasure request")
        assert not code_in_file(secret).any()  # rewritten from the index, code zeroed
        query = _HashEmbedder().embed(["the secret note"])[0]
        assert secret not in memory.store.nearest(memory.scope, query, None, 200)
        _check_exact(memory, db_path)
        # Redacting before anything is loaded in RAM: the file just goes.
    rows_from_sqlite.clear()
    with _memory(db_path) as memory:
        assert secret not in memory.store.nearest(memory.scope, query, None, 200)
        assert rows_from_sqlite == []  # the rewritten file matches the database
        other = memory.add("another secret", date="2024-03-04").id
    with _memory(db_path) as memory:
        memory.redact(other, reason="erasure request")
        assert not _file(db_path).exists()
        _check_exact(memory, db_path)
    assert not code_in_file(other).any()


def test_a_folder_that_refuses_the_vector_file(db_path, monkeypatch, rows_from_sqlite) -> None:
    from mempp.index import array_file

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(array_file, "_create", refused)
    with _memory(db_path) as memory:
        _fill(memory, 80)
        _check_exact(memory, db_path)
        _fill(memory, 80, start=80)
        _check_exact(memory, db_path)
        memory.redact(3, reason="erasure request")
        _check_exact(memory, db_path)
    assert not _file(db_path).exists()
    assert not list(db_path.parent.glob("*.partial"))


# -- the float32 rows saved beside a real SQLite file (store/sqlite/exact_file.py) -----------
def test_quick_rows_are_used_only_where_they_quantize_to_the_held_codes() -> None:
    """A faster copy of the float32 rows may lack rows or hold wrong ones: every row it gives
    that does not quantize to the held codes comes from ``exact_rows`` instead, so results
    stay exact."""
    rng = np.random.default_rng(21)
    dim, count = 32, 3000
    matrix = _unit(rng.standard_normal((count, dim)))
    ids = np.arange(1, count + 1, dtype=np.int64)
    by_id = dict(zip(ids.tolist(), matrix, strict=True))
    from_store: list[int] = []

    def exact_rows(wanted: np.ndarray) -> np.ndarray:
        from_store.extend(wanted.tolist())
        return np.stack([by_id[int(i)] for i in wanted])

    damaged = matrix.copy()
    damaged[::3] = _unit(rng.standard_normal((len(damaged[::3]), dim)))  # another row
    damaged[1::3] = 0  # missing (past the end of a file, or a hole in it)
    damaged[2::6] *= np.float32(1.001)  # rescaled: codes may agree, the scale cannot
    copies = {"right": matrix, "damaged": damaged}
    for label, copy in copies.items():
        index = ExactVectorIndex(
            dim, exact_rows, quick_rows=lambda wanted, copy=copy: copy[wanted - 1].copy()
        )
        index.append(ids, matrix, ["s"] * count, [0] * count, [True] * count)
        everyone = np.ones(count, dtype=bool)
        zeros = np.zeros(count, dtype=np.int64)
        from_store.clear()
        for _ in range(12):
            query = _unit(rng.standard_normal(dim))
            expected = _reference(
                matrix, ids, np.full(count, "s"), zeros, everyone, query, "s", None, 30
            )
            assert index.search(query, "s", None, 30) == expected, label
        if label == "right":
            assert from_store == []
        else:  # every damaged row that was a candidate came from the store; no intact one
            assert from_store and all((int(i) - 1) % 6 != 5 for i in from_store)


def _f32(path):
    from mempp.store.sqlite.exact_file import EXACT_FILE_SUFFIX

    return type(path)(f"{path}{EXACT_FILE_SUFFIX}")


@pytest.fixture
def exact_from_sqlite(monkeypatch):
    """Ids whose float32 row the SQLite store read from the database for rescoring."""
    from mempp.store.sqlite.replicas import _ReplicasMixin

    fetched: list[int] = []
    real = _ReplicasMixin._stored_vectors

    def counting(self, ids):
        fetched.extend(ids.tolist())
        return real(self, ids)

    monkeypatch.setattr(_ReplicasMixin, "_stored_vectors", counting)
    return fetched


def _slot(path, record_id: int, dim: int = 16) -> bytes:
    data = _f32(path).read_bytes()
    return data[(record_id - 1) * dim * 4 : record_id * dim * 4]


def test_float32_file_serves_the_rescoring_and_a_bad_one_is_read_around(
    db_path, tmp_path, exact_from_sqlite
) -> None:
    with _memory(db_path) as memory:
        _fill(memory, 300)
        _check_exact(memory, db_path)  # the load from SQLite writes every row
    assert _f32(db_path).stat().st_size == 300 * 16 * 4
    assert exact_from_sqlite == []
    with _memory(db_path) as memory:
        _check_exact(memory, db_path)  # loaded from the int8 file, rescored from this one
        assert exact_from_sqlite == []
        _fill(memory, 20, start=300)  # the catch-up writes the new rows too
        _check_exact(memory, db_path)
    assert exact_from_sqlite == [] and _f32(db_path).stat().st_size == 320 * 16 * 4
    good = _f32(db_path).read_bytes()
    stranger = tmp_path / "stranger.db"
    with _memory(stranger) as memory:
        _fill(memory, 320, start=7000)
        _check_exact(memory, stranger)
    damaged = bytearray(good)
    damaged[100 * 64 : 200 * 64] = np.random.default_rng(5).bytes(100 * 64)
    for label, content in [
        ("missing", None),
        ("truncated", good[: len(good) // 3]),
        ("damaged", bytes(damaged)),
        ("empty", b""),
        ("another database's", _f32(stranger).read_bytes()),
    ]:
        if content is None:
            _f32(db_path).unlink()
        else:
            _f32(db_path).write_bytes(content)
        exact_from_sqlite.clear()
        with _memory(db_path) as memory:
            _check_exact(memory, db_path)
        assert exact_from_sqlite, label  # read around: the rows came from SQLite
        exact_from_sqlite.clear()
        with _memory(db_path) as memory:
            _check_exact(memory, db_path)  # and were written back
        assert exact_from_sqlite == [], label


def test_redact_zeroes_the_erased_rows_of_the_float32_file(db_path, exact_from_sqlite) -> None:
    with _memory(db_path) as memory:
        _fill(memory, 120)
        secret = memory.add("the secret note", date="2024-03-03").id
        _check_exact(memory, db_path)
        vector = _slot(db_path, secret)
        assert any(vector)
        memory.redact(secret, reason="erasure request")
        assert not any(_slot(db_path, secret))
        _check_exact(memory, db_path)
        other = memory.add("another secret", date="2024-03-04").id
        _check_exact(memory, db_path)
    assert any(_slot(db_path, other))
    # Redacting in a process that never loaded the index: the file is zeroed all the same.
    with _memory(db_path) as memory:
        memory.redact(other, reason="erasure request")
    assert not any(_slot(db_path, other))
    # An erasure whose process stopped between its commit and the zeroing: the next store
    # to open the file zeroes the row.
    with open(_f32(db_path), "r+b") as file:
        file.seek((secret - 1) * 64)
        file.write(vector)
    with _memory(db_path) as memory:
        _check_exact(memory, db_path)
    assert not any(_slot(db_path, secret))


def test_redact_removes_a_float32_file_it_cannot_zero(db_path, monkeypatch) -> None:
    from mempp.store.sqlite.exact_file import ExactFile

    with _memory(db_path) as memory:
        _fill(memory, 60)
        _check_exact(memory, db_path)

        def refused(self, ids):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(ExactFile, "zero", refused)
        memory.redact(5, reason="erasure request")
        assert not _f32(db_path).exists()
        _check_exact(memory, db_path)


def test_a_float32_file_that_cannot_be_opened_or_written(
    db_path, monkeypatch, exact_from_sqlite
) -> None:
    from mempp.store.sqlite import exact_file

    with _memory(db_path) as memory:
        _fill(memory, 80)
    real_open = exact_file.os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith(exact_file.EXACT_FILE_SUFFIX):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(exact_file.os, "open", refused)
        with _memory(db_path) as memory:
            _check_exact(memory, db_path)
            memory.redact(3, reason="erasure request")
            _check_exact(memory, db_path)
    assert exact_from_sqlite  # every rescoring went to SQLite

    def full(self, ids, rows):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(exact_file.ExactFile, "write", full)
    _f32(db_path).unlink(missing_ok=True)
    with _memory(db_path) as memory:
        _check_exact(memory, db_path)
        assert memory.store._exact_file is None  # dropped at the first refused write
        _fill(memory, 10, start=80)
        _check_exact(memory, db_path)


def test_redact_names_a_float32_file_it_can_neither_zero_nor_remove(db_path, monkeypatch) -> None:
    from pathlib import Path

    from mempp import StoreError
    from mempp.store.sqlite.exact_file import ExactFile

    with _memory(db_path) as memory:
        _fill(memory, 60)
        _check_exact(memory, db_path)

        def refused(self, *args, **kwargs):
            raise PermissionError(13, "Permission denied")

        real_unlink = Path.unlink

        def unlink(self, missing_ok=False):
            if str(self) == str(_f32(db_path)):
                raise PermissionError(13, "Permission denied", str(self))
            return real_unlink(self, missing_ok=missing_ok)

        monkeypatch.setattr(ExactFile, "zero", refused)
        monkeypatch.setattr(Path, "unlink", unlink)
        with pytest.raises(StoreError, match=r"vectors\.f32: holds a copy of the erased vectors"):
            memory.redact(5, reason="erasure request")
        assert memory.get(5).text == ""  # the erasure itself stands
    from mempp.index import array_file

    _, arrays = array_file.read(_file(db_path))  # the int8 file was still rewritten without it
    ids = arrays["ids"][arrays["order"]]
    assert not arrays["codes"][int(np.flatnonzero(ids == 5)[0])].any()
