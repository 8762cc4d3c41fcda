"""Faults of the SQLite file itself: another program's database, a file that is not SQLite,
truncated or damaged, read-only, in a folder mempp cannot write, on a full disk.

Each runs the real command in a child process and expects one clear line on stderr, exit 1
(an operational error), and the file unchanged (or its committed rows intact). Permission
faults run the child without the capability to override file modes when the tests run as
root (root otherwise ignores them), through util-linux's ``setpriv``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mempp import Memory, StoreError

from conftest import KeywordEmbedder


def mempp(*argv: str, cwd: Path, bound_by_modes: bool = False) -> subprocess.CompletedProcess:
    """The real command in a child process; ``bound_by_modes``: as a user whom file modes
    bind (root without CAP_DAC_OVERRIDE)."""
    prefix: list[str] = []
    if bound_by_modes and os.geteuid() == 0:
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "mempp.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mempp: error: "), result.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def siblings(path: Path) -> set[str]:
    return {p.name for p in path.parent.iterdir()}


@pytest.mark.parametrize(
    "schema",
    [
        [
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
            "INSERT INTO users VALUES (1, 'a')",
        ],
        ["CREATE TABLE records (id INTEGER PRIMARY KEY, body TEXT)"],
        ["CREATE VIEW v AS SELECT 1"],
    ],
)
def test_another_programs_database_is_refused_unchanged(tmp_path, schema) -> None:
    db = tmp_path / "theirs.db"
    with sqlite3.connect(db) as conn:
        for statement in schema:
            conn.execute(statement)
    conn.close()
    before, files = digest(db), siblings(db)
    for argv in (["add", "x"], ["search", "x"], ["info"], ["ingest", str(tmp_path)]):
        result = mempp("--db", str(db), *argv, cwd=tmp_path)
        assert result.returncode == 1, (argv, result.stderr)
        assert "is not a mempp database" in error_line(result)
        assert digest(db) == before and siblings(db) == files  # no -wal, no -shm, no change
    with pytest.raises(StoreError, match="not a mempp database"):
        Memory(db)
    assert digest(db) == before


def test_an_empty_sqlite_file_becomes_a_store(tmp_path) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()  # a zero-table database
    with Memory(db, embedder=KeywordEmbedder([])) as memory:
        assert memory.add("fine").added


def _store_with_rows(db: Path, rows: int = 300) -> None:
    with Memory(db, embedder=KeywordEmbedder(["alpha"])) as memory:
        memory.add_many([{"text": f"alpha note {i} " + "filler words " * 40} for i in range(rows)])
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_not_sqlite_and_truncated_files(tmp_path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("just some text, not a database\n" * 100)
    before = digest(text)
    for argv in (["add", "x"], ["search", "x"]):
        result = mempp("--db", str(text), *argv, cwd=tmp_path)
        assert result.returncode == 1
        assert "not a SQLite database" in error_line(result)
    assert digest(text) == before

    db = tmp_path / "cut.db"
    _store_with_rows(db)
    with db.open("r+b") as handle:
        handle.truncate(db.stat().st_size // 3)
    for argv in (["search", "alpha"], ["info"], ["add", "x"], ["get", "1"]):
        result = mempp("--db", str(db), *argv, cwd=tmp_path)
        assert result.returncode in (0, 1), result.stderr
        if result.returncode == 1:
            assert "damaged" in error_line(result)


def test_a_damaged_page_is_a_store_error_not_a_raw_one(tmp_path) -> None:
    db = tmp_path / "damaged.db"
    _store_with_rows(db)
    size, page = db.stat().st_size, 4096
    with db.open("r+b") as handle:  # every page after the first ten: garbage
        for offset in range(10 * page, size - page, page):
            handle.seek(offset)
            handle.write(os.urandom(page))
    failures = 0
    for argv in (["search", "alpha note"], ["info"], ["get", "250"], ["export"]):
        result = mempp("--db", str(db), *argv, cwd=tmp_path)
        assert result.returncode in (0, 1), result.stderr
        if result.returncode == 1:
            failures += 1
            error_line(result)
    assert failures >= 1
    try:
        with Memory(db, embedder=KeywordEmbedder(["alpha"])) as memory:
            memory.search("alpha note", k=300)
            list(memory.records())
    except StoreError as exc:
        assert "damaged" in str(exc) and "\n" not in str(exc)


needs_other_user = pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="as root, file modes bind only through setpriv (util-linux), not installed",
)


@needs_other_user
def test_a_read_only_file(tmp_path) -> None:
    db = tmp_path / "ro.db"
    with Memory(db) as memory:  # the command's own encoder, so that add gets to writing
        memory.add_many([f"note {i}" for i in range(5)])
    db.chmod(0o444)
    before = digest(db)
    result = mempp("--db", str(db), "add", "new row", cwd=tmp_path, bound_by_modes=True)
    assert result.returncode == 1
    assert "the file is read-only" in error_line(result)
    assert digest(db) == before
    result = mempp("--db", str(db), "get", "1", cwd=tmp_path, bound_by_modes=True)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 5
    conn.close()


@needs_other_user
def test_a_folder_without_write_permission_is_blamed(tmp_path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    db = folder / "m.db"
    _store_with_rows(db, rows=5)
    for extra in folder.glob("m.db-*"):
        extra.unlink()
    db.chmod(0o666)
    folder.chmod(0o555)
    try:
        for argv in (["add", "new"], ["search", "alpha"]):
            result = mempp("--db", str(db), *argv, cwd=tmp_path, bound_by_modes=True)
            assert result.returncode == 1, result.stderr
            assert f"folder {folder} is not writable" in error_line(result)
    finally:
        folder.chmod(0o755)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 5
    conn.close()


def test_a_full_disk(tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        db = mount / "m.db"
        _store_with_rows(db, rows=3)
        (tmp_path / "big.jsonl").write_text(
            "\n".join(f'{{"text": "row {i} {"x" * 3000}"}}' for i in range(400))
        )
        result = mempp("--db", str(db), "ingest", str(tmp_path / "big.jsonl"), cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        error_line_text = [line for line in result.stderr.splitlines() if "error" in line]
        assert len(error_line_text) == 1 and "Traceback" not in result.stderr
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        conn.close()
        assert count >= 3 and (count - 3) % 64 == 0  # whole batches only
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
