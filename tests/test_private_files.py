"""Files only their owner reads (issue 36): a new store and every side file are 0600 and new
folders 0700 whatever the umask, an existing file keeps its mode (rewrites included), and
``mempp info`` warns when a store is readable by others.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mempp import Memory
from mempp.cli.main import main
from mempp.index import array_file
from mempp.llm.cache import LLMCache
from mempp.private import make_dirs, readable_by_others

from conftest import KeywordEmbedder

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


@pytest.fixture(params=[0o000, 0o022, 0o002], ids=lambda u: f"umask{u:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_and_its_side_files_are_private(tmp_path: Path, umask: int) -> None:
    db = tmp_path / "m.db"
    with Memory(db, embedder=KeywordEmbedder(["plan", "price"])) as memory:
        memory.add_many([{"text": f"plan price {i}", "author": "Ana"} for i in range(50)])
        memory.search("plan price", k=5)
        memory.warm()
        made = sorted(p for p in tmp_path.iterdir() if p.name.startswith("m.db"))
        assert {p.name for p in made} >= {"m.db", "m.db-wal", "m.db-shm"}
        assert {p.name: mode(p) for p in made} == {p.name: 0o600 for p in made}
    after = sorted(p for p in tmp_path.iterdir() if p.name.startswith("m.db"))
    assert any("vectors" in p.name for p in after), [p.name for p in after]  # the scan file
    assert {p.name: mode(p) for p in after} == {p.name: 0o600 for p in after}


def test_an_existing_store_keeps_its_mode(tmp_path: Path, umask: int) -> None:
    db = tmp_path / "m.db"
    Memory(db, embedder=KeywordEmbedder(["plan"])).close()
    os.chmod(db, 0o640)  # the operator's choice: a group may read it
    with Memory(db, embedder=KeywordEmbedder(["plan"])) as memory:
        memory.add("plan one")
    assert mode(db) == 0o640


def test_a_rewritten_side_file_keeps_its_mode(tmp_path: Path, umask: int) -> None:
    import numpy as np

    target = tmp_path / "x.arrays"
    array_file.write(target, {}, {"a": np.arange(3)})
    assert mode(target) == 0o600
    os.chmod(target, 0o644)
    array_file.write(target, {}, {"a": np.arange(4)})
    assert mode(target) == 0o644


def test_new_folders_and_the_llm_cache_are_private(tmp_path: Path, umask: int) -> None:
    cache = LLMCache(tmp_path / "a" / "b" / "replies.db")
    try:
        assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o700
        assert mode(tmp_path / "a" / "b" / "replies.db") == 0o600
    finally:
        cache.close()
    os.chmod(tmp_path / "a", 0o755)
    make_dirs(tmp_path / "a" / "c")
    assert mode(tmp_path / "a") == 0o755  # existing: left alone
    assert mode(tmp_path / "a" / "c") == 0o700


def test_info_warns_when_the_store_is_readable_by_others(tmp_path: Path, capsys) -> None:
    db = tmp_path / "m.db"
    assert main(["--db", str(db), "add", "plan one"]) == 0
    assert main(["--db", str(db), "info"]) == 0
    assert "warning" not in capsys.readouterr().err
    os.chmod(db, 0o644)
    assert readable_by_others(db) == 0o644
    assert main(["--db", str(db), "info"]) == 0
    err = capsys.readouterr().err
    assert f"{db} is readable by other users (mode 0644)" in err and "chmod 600" in err
