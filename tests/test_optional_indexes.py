"""Optional indexes (``mempp.store.indexes``): built only when a store opts in, in one
transaction, kept on every write from then on, dropped on request, checked by ``verify``
only when enabled, carried by ``dump``/``restore``; a search that needs one the store lacks
fails with one line naming the command. On both engines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mempp import Memory, Settings
from mempp.cli.main import main
from mempp.errors import InvalidInput
from mempp.store.indexes import OPTIONAL_INDEXES, IndexMissing, needed

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

KW = Settings(w_lex=0, w_tag=0, w_vec=0, w_kw=1.0, reserve=0)


def open_memory(location: str) -> Memory:
    return Memory(location, embedder=KeywordEmbedder(["alpha"]))


def test_only_settings_with_the_keyword_leg_need_an_index() -> None:
    assert needed(Settings()) == () and needed(KW) == ("keyword",)
    assert needed(Settings(w_kw=0.5)) == ("keyword",)
    assert set(OPTIONAL_INDEXES) == {"keyword", "context"}
    assert needed(Settings(w_ctx=0.5)) == ("context",)


def test_a_new_store_has_no_optional_index_and_a_search_needing_one_says_how(
    engine_location: str,
) -> None:
    with open_memory(engine_location) as memory:
        memory.add("a pottery class")
        assert memory.indexes() == ()
        with pytest.raises(IndexMissing) as caught:
            memory.search("pottery", settings=KW)
        message = str(caught.value)
        assert "\n" not in message and "`mempp index enable keyword`" in message
        assert message.startswith("w_kw: ") and caught.value.field == "w_kw"
        assert memory.search("pottery")  # the default settings need none


def test_enable_indexes_earlier_rows_and_every_later_write(engine_location: str) -> None:
    seen: list[tuple[int, int]] = []
    with open_memory(engine_location) as memory:
        first = memory.add("an earlier pottery class").id
        assert memory.enable_index("keyword", progress=lambda d, t: seen.append((d, t))) is True
        assert seen[0] == (0, 1) and seen[-1] == (1, 1)
        assert memory.enable_index("keyword") is False  # already there: nothing done
        assert memory.indexes() == ("keyword",)
        second = memory.add("a later pottery class").id
    # Another Memory (another connection) writes: the index follows it too.
    with open_memory(engine_location) as other:
        third = other.add_many(["pottery again"])[0].id
        assert other.indexes() == ("keyword",)
        assert [h.id for h in other.search("pottery", settings=KW)] == [third, second, first]
        assert {check.name for check in other.verify()} >= {"keyword index"}
        assert all(check.ok for check in other.verify())


def test_disable_drops_it_and_searches_need_it_again(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("a pottery class")
        memory.enable_index("keyword")
        assert memory.disable_index("keyword") is True
        assert memory.disable_index("keyword") is False
        assert memory.indexes() == ()
        assert "keyword index" not in {check.name for check in memory.verify()}
        with pytest.raises(IndexMissing):
            memory.search("pottery", settings=KW)
        memory.add("more pottery")  # writes go on without it
        memory.enable_index("keyword")
        assert len(memory.search("pottery", settings=KW)) == 2


def test_unknown_names_are_refused_in_one_line(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        for call in (memory.enable_index, memory.disable_index):
            with pytest.raises(InvalidInput, match=r"^index: unknown index 'vectors' \(known: "):
                call("vectors")
        with pytest.raises(InvalidInput, match="NUL"):
            memory.enable_index("key\x00word")


def test_a_failed_build_changes_nothing(engine_location: str) -> None:
    with open_memory(engine_location) as memory:
        memory.add("a pottery class")

        def fail(done: int, total: int) -> None:
            if done == total:
                raise RuntimeError("stopped")

        with pytest.raises(RuntimeError):
            memory.enable_index("keyword", progress=fail)
        assert memory.indexes() == ()
        assert all(check.ok for check in memory.verify())
        assert memory.enable_index("keyword") is True  # nothing half-built is in the way


def test_a_sqlite_store_pays_nothing_until_it_opts_in(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with open_memory(str(path)) as memory:
        memory.add("a pottery class")

    def names() -> set[str]:
        with sqlite3.connect(path) as conn:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}

    assert not {name for name in names() if name.startswith("records_kw")}
    with open_memory(str(path)) as memory:
        memory.enable_index("keyword")
    assert {"records_kw", "records_kw_insert"} <= names()
    with open_memory(str(path)) as memory:
        memory.disable_index("keyword")
    assert not {name for name in names() if name.startswith("records_kw")}


def test_a_postgres_store_pays_nothing_until_it_opts_in(pg_url: str) -> None:
    import psycopg

    def indexes() -> set[str]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'records'")
            return {row[0] for row in rows}

    with open_memory(pg_url) as memory:
        memory.add("a pottery class")
        assert "records_text_trgm" not in indexes()
        memory.enable_index("keyword")
        assert "records_text_trgm" in indexes()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX records_text_trgm")  # an owner drops it behind mempp's back
    with open_memory(pg_url) as memory:
        failing = {check.name: check.detail for check in memory.verify() if not check.ok}
        assert failing == {"keyword index": "enabled, but records_text_trgm is missing"}
        assert memory.disable_index("keyword")  # what is left of it goes
        assert memory.enable_index("keyword") and all(check.ok for check in memory.verify())


def test_dump_carries_the_enabled_indexes_and_restore_builds_them(
    tmp_path: Path, pg_url: str
) -> None:
    source = str(tmp_path / "source.db")
    with open_memory(source) as memory:
        memory.add_many(["pottery one", "pottery two", "a quiet day"])
        plain = tmp_path / "plain.dump"
        memory.dump(plain)
        memory.enable_index("keyword")
        indexed = tmp_path / "indexed.dump"
        memory.dump(indexed)
        expected = [h.id for h in memory.search("pottery", settings=KW)]
    for target in (str(tmp_path / "copy.db"), pg_url):
        with open_memory(target) as memory:
            report = memory.restore(indexed)
            assert report.indexes == ["keyword"] and "rebuilt the keyword index" in report.summary()
            assert memory.indexes() == ("keyword",)
            assert [h.id for h in memory.search("pottery", settings=KW)] == expected
            assert all(check.ok for check in memory.verify())
    with open_memory(str(tmp_path / "plain.db")) as memory:
        assert memory.restore(plain).indexes == [] and memory.indexes() == ()


def test_a_snapshot_naming_an_unknown_index_is_refused_before_writing(tmp_path: Path) -> None:
    from mempp.transfer.dump import ChainWriter

    source = str(tmp_path / "source.db")
    with open_memory(source) as memory:
        memory.add("pottery")
        good = tmp_path / "good.dump"
        memory.dump(good)
    lines = [json.loads(line) for line in good.read_text().splitlines()]
    for line in lines:
        line.pop("c")
    lines[0]["indexes"] = ["keyword", "telepathy"]
    bad = tmp_path / "bad.dump"
    with bad.open("w") as out:
        writer = ChainWriter(out)
        for line in lines:
            writer.write(line)
    target = tmp_path / "target.db"
    with open_memory(str(target)) as memory:
        with pytest.raises(InvalidInput, match=r"bad.dump:1: .*\(telepathy\)"):
            memory.restore(bad)
        assert len(memory) == 0


def test_the_cli_enables_lists_and_disables(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = str(tmp_path / "m.db")
    with open_memory(db) as memory:
        memory.add("a pottery class")
    assert main(["--db", db, "search", "pottery", "--preset", "default-keyword"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`mempp index enable keyword`" in err
    assert main(["--db", db, "index", "list"]) == 0
    assert capsys.readouterr().out.startswith("keyword  disabled  ")
    assert main(["--db", db, "index", "enable", "keyword"]) == 0
    assert "built the keyword index" in capsys.readouterr().out
    assert main(["--db", db, "index", "list", "--json"]) == 0
    assert '"enabled": true' in capsys.readouterr().out
    assert main(["--db", db, "index", "enable", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["--db", db, "index", "disable", "keyword"]) == 0
    assert "dropped the keyword index" in capsys.readouterr().out
    missing = str(tmp_path / "none.db")
    assert main(["--db", missing, "index", "enable", "keyword"]) == 1
    assert not Path(missing).exists()
