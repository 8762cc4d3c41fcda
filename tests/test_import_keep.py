"""The Google Keep importer on the real samples (obsidian-importer's notes and a German
Takeout zip; by path, never copied) and on Takeouts built here: trashed notes named, edits as
versions, re-imports, bad input, a zip bomb."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli.main import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.keep import KeepImporter
from realdata import sample

from conftest import KeywordEmbedder

US = 1_000_000


def note(title: str, text: str = "", *, created: int, edited: int, **extra) -> dict:
    return {
        "color": "DEFAULT",
        "isTrashed": False,
        "isPinned": False,
        "isArchived": False,
        "textContent": text,
        "title": title,
        "createdTimestampUsec": created * US,
        "userEditedTimestampUsec": edited * US,
        **extra,
    }


# 1710234000 = 2024-03-12T09:00:00Z
NOTES = {
    "Groceries": note(
        "Groceries",
        created=1710234000,
        edited=1710234600,
        listContent=[{"text": "Milk", "isChecked": True}, {"text": "Eggs", "isChecked": False}],
        labels=[{"name": "home"}],
    ),
    "Plan": note("Plan", "Ship v2 on Friday", created=1710237600, edited=1710237600, isPinned=True),
    "Old idea": note(
        "Old idea", "never mind", created=1710230000, edited=1710231000, isTrashed=True
    ),
}


def takeout(root: Path, notes: dict[str, dict]) -> Path:
    folder = root / "Takeout" / "Keep"
    folder.mkdir(parents=True, exist_ok=True)
    for stem, data in notes.items():
        (folder / f"{stem}.json").write_text(json.dumps(data))
        (folder / f"{stem}.html").write_text(f"<html><body>{stem}</body></html>")
    (folder / "Labels.txt").write_text("home\n")
    (folder / "photo.png").write_bytes(b"\x89PNG")
    return root


def items(path: Path, importer: KeepImporter | None = None) -> list[object]:
    return list((importer or KeepImporter()).read(path))


def docs(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_notes_checklists_labels_and_trash(tmp_path) -> None:
    found = items(takeout(tmp_path, NOTES))
    groceries, plan = docs(found)
    assert groceries.text == "Groceries\n\n[x] Milk\n[ ] Eggs" and groceries.tags == ("home",)
    # Dated by the last edit (the text as it stands), created in metadata.
    assert groceries.date.text == "2024-03-12T09:10:00+00:00" and groceries.author is None
    assert groceries.meta["created"] == "2024-03-12T09:00:00+00:00"
    digest = hashlib.sha256(groceries.text.encode()).hexdigest()[:12]
    assert groceries.source == f"keep://Groceries#v={digest}"
    assert groceries.thread == "keep://Groceries"
    assert plan.meta["pinned"] is True
    trashed = [s for s in found if isinstance(s, Skipped) and s.reason == "trashed"]
    assert [s.detail for s in trashed] == ["trashed note 'Old idea': left out"]
    reasons = sorted(s.reason for s in found if isinstance(s, Skipped))
    assert reasons == ["attachment", *["html copy of a note"] * 3, "label list", "trashed"]
    named = docs(items(takeout(tmp_path / "b", NOTES), KeepImporter(author="Ana")))
    assert {d.author for d in named} == {"Ana"}


def test_the_real_notes_and_takeout() -> None:
    notes = sample("sources/google-takeout/keep-obsidian-importer")
    found = items(notes)
    documents = docs(found)
    assert len(documents) == 5 and all(d.date for d in documents)
    assert [s.detail for s in found if isinstance(s, Skipped)] == [
        "trashed note 'Deleted note': left out"
    ]
    checklist = next(d for d in documents if d.text.startswith("Checklist note"))
    assert checklist.tags == ("labelWith!'@:$\"Symbols",)
    assert "[ ] Second sub-item and #labelWith!'@:$\"Symbols" in checklist.text
    untitled = next(d for d in documents if "drawing" in d.text)
    assert untitled.source.startswith("keep://2023-08-01T14_29_43.842%2B10_00#v=")
    archive = sample("sources/google-takeout/jimmy-test-data/keep-takeout-20240920T140112Z-001.zip")
    found = items(archive)
    documents = docs(found)
    assert sorted(d.text.split("\n")[0] for d in documents) == [
        "another test note",
        "no title",
        "pinned note, title only",
        "test note with date",
        "title",
    ]
    skipped = [s for s in found if isinstance(s, Skipped)]
    assert [s.detail for s in skipped if s.reason == "trashed"] == [
        "trashed note 'title only': left out"
    ]
    # 15 files: 5 notes, 1 trashed, 6 html twins, Labels.txt, an image, the overview page.
    assert len(documents) + len(skipped) == 15
    assert not [i for i in found if isinstance(i, ItemError | Notice)]


def test_reimport_and_an_edit_in_a_later_takeout(tmp_path) -> None:
    first = takeout(tmp_path / "a", NOTES)
    edited = dict(NOTES)
    edited["Plan"] = note("Plan", "Ship v2 on Monday", created=1710237600, edited=1710300000)
    later = takeout(tmp_path / "b", edited)
    # Pinned since: the edit time moves, the text does not.
    moved = dict(NOTES)
    moved["Groceries"] = {
        **NOTES["Groceries"],
        "isPinned": True,
        "userEditedTimestampUsec": 1710400000 * US,
    }
    pinned = takeout(tmp_path / "c", moved)
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["ship"])) as memory:
        assert run_import(memory, get("keep"), first).added == 2
        assert run_import(memory, get("keep"), first).added == 0
        again = run_import(memory, get("keep"), later)
        assert again.added == 1 and again.skipped["already imported"] == 1
        assert sorted(r.text for r in memory.records() if r.thread == "keep://Plan") == [
            "Plan\n\nShip v2 on Friday",
            "Plan\n\nShip v2 on Monday",
        ]
        assert again.told and again.told[0].reason == "trashed"
        assert run_import(memory, get("keep"), pinned).added == 0


def test_bad_input_and_a_bomb(tmp_path) -> None:
    odd = dict(NOTES)
    odd["No dates"] = {"title": "No dates", "textContent": "x", "userEditedTimestampUsec": 0}
    odd["Broken list"] = note("Broken list", created=1, edited=2, listContent=["oops"])
    root = takeout(tmp_path / "t", odd)
    keep = root / "Takeout" / "Keep"
    (keep / "cut.json").write_text(json.dumps(NOTES["Plan"])[:40])
    (keep / "discord.json").write_text(json.dumps({"guild": {}, "channel": {}, "messages": []}))
    found = items(root)
    errors = {Path(e.location).name: e.reason for e in found if isinstance(e, ItemError)}
    assert errors.keys() == {"Broken list.json", "cut.json"}
    assert "checklist item" in errors["Broken list.json"]
    told = {Path(n.location).name: n.message for n in found if isinstance(n, Notice)}
    assert told == {"No dates.json": "a note without timestamps: stored undated"}
    assert any(d.date is None and d.text == "No dates\n\nx" for d in docs(found))
    assert [Path(s.location).name for s in found if isinstance(s, Skipped) and s.detail][-1] == (
        "discord.json"
    )
    archive = tmp_path / "takeout.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.writestr("Takeout/Keep/Plan.json", json.dumps(NOTES["Plan"]))
        packed.writestr("Takeout/Keep/Huge.json", b"{" + b" " * (8 << 20) + b"}")
    found = items(archive, KeepImporter(max_member=1 << 20))
    assert [(e.location, e.reason) for e in found if isinstance(e, ItemError)] == [
        (f"{archive}:Takeout/Keep/Huge.json", "unpacks to 8 MiB, over the 1 MiB limit of one file")
    ]
    assert len(docs(found)) == 1
    for other in ({"guild": {}}, [1]):
        path = tmp_path / "other.json"
        path.write_text(json.dumps(other))
        with pytest.raises(InvalidInput, match="not a Google Keep note"):
            items(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInput, match="no Google Keep note"):
        items(empty)


def test_cli_names_the_owner_through_an_option(tmp_path, capsys) -> None:
    root = takeout(tmp_path / "t", NOTES)
    db = tmp_path / "m.db"
    argv = ["--db", str(db), "import", "keep", str(root), "--dry-run", "--json"]
    assert main([*argv, "--option", "author=Ana López"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 2 and summary["skipped_by_reason"]["trashed"] == 1
    assert main([*argv, "--option", "owner=Ana"]) == 2
    assert "takes no option owner" in capsys.readouterr().err
    assert main([*argv, "--option", "no-equals"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
