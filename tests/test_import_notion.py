"""The Notion importer on the two real exports (Markdown & CSV with a zip in the zip and a
270-row database; HTML) and on exports built here in Notion's layout: databases with and
without row pages, date and status properties, HTML pages, nested zips, a bomb, edits."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.notion import NotionImporter, notion_date
from tool_samples import sample

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

DB = "Tasks 0123456789abcdef0123456789abcdef"
HOME = "Home 11111111111111111111111111111111"


def build_markdown(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / f"{HOME}.md").write_text(
        "# Home\n\nNote: our plans live in [Tasks](Tasks.csv).\n\nWe ship on Fridays.\n"
    )
    header = "Name,Status,Due,Last edited time,Created by\n"
    rows = (
        'Write the launch post,Done,"March 4, 2024","March 6, 2024 5:30 PM",Ana López\n'
        'Book the venue,In progress,"March 20, 2024 → March 22, 2024",'
        '"March 8, 2024 9:00 AM",Bo Berg\n'
        "Order badges,Not started,,,\n"
    )
    (root / f"{DB}.csv").write_text("\ufeffName,Status\nWrite the launch post,Done\n")
    (root / f"{DB}_all.csv").write_text("\ufeff" + header + rows)
    (root / DB).mkdir()
    (root / DB / "Write the launch post 22222222222222222222222222222222.md").write_text(
        "# Write the launch post\n\nStatus: Done\nDue: March 4, 2024\n"
        "Last edited time: March 6, 2024 5:30 PM\nCreated by: Ana López\n\n"
        "Draft in the shared doc; publish at 9:00.\n"
    )
    (root / DB / "Book the venue 33333333333333333333333333333333.md").write_text(
        "# Book the venue\n\nStatus: In progress\nDue: March 20, 2024 → March 22, 2024\n"
        "Last edited time: March 8, 2024 9:00 AM\nCreated by: Bo Berg\n"
    )
    (root / DB / "photo.png").write_bytes(b"\x89PNG")
    return root


HTML_PAGE = """<html><head><meta http-equiv="Content-Type" content="text/html; charset=utf-8"/>
<title>Retro</title><style>body {color: red}</style></head><body>
<article id="44444444-4444-4444-4444-444444444444" class="page sans"><header>
<h1 class="page-title">Retro</h1><table class="properties"><tbody>
<tr class="property-row property-row-created_time"><th>Created</th>
<td><time>@April 2, 2024 3:37 PM</time></td></tr>
<tr class="property-row property-row-person"><th>Created by</th><td>Cy Chen</td></tr>
<tr class="property-row property-row-last_edited_time"><th>Last edited time</th>
<td><time>@April 9, 2024 10:02 AM</time></td></tr>
<tr class="property-row property-row-last_edited_by"><th>Last edited by</th><td>Bo Berg</td></tr>
</tbody></table></header><div class="page-body"><p>Fewer meetings, more demos.</p>
<script>alert('x')</script></div></article></body></html>"""


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def as_notion_delivers(folder: Path, target: Path, extra: dict[str, bytes] | None = None) -> Path:
    """The export's files in Export-…-Part-1.zip, inside the zip Notion mails."""
    inner = {
        f"Export-abc/{p.relative_to(folder)}": p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    target.write_bytes(zipped({"Export-abc-Part-1.zip": zipped(inner)} | (extra or {})))
    return target


def read(path: Path, importer: NotionImporter | None = None) -> list[object]:
    return list((importer or NotionImporter()).read(path))


def docs_of(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_notion_dates() -> None:
    assert notion_date("December 4, 2024 8:45 AM").isoformat() == "2024-12-04T08:45:00"
    assert notion_date("@February 5, 2025").isoformat() == "2025-02-05"
    assert notion_date("March 20, 2024 → March 22, 2024").isoformat() == "2024-03-20"
    assert notion_date("March 1, 2024 12:05 AM").isoformat() == "2024-03-01T00:05:00"
    assert notion_date("2024/12/04").isoformat() == "2024-12-04"
    assert notion_date("No") is None and notion_date("February 30, 2024") is None


def test_the_real_markdown_and_csv_export_with_a_zip_inside() -> None:
    path = sample("notion", "obsidian-importer", "Notion.Test.Export.zip")
    found = read(path)
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    skipped = {}
    for item in found:
        if isinstance(item, Skipped):
            skipped[item.reason] = skipped.get(item.reason, 0) + 1
    assert skipped == {
        "export index": 1,
        "database view": 1,  # Habit Tracker.csv: the same rows as its _all.csv
        "database row read from its page": 269,
    }
    docs = docs_of(found)
    rows = [d for d in docs if d.meta["kind"] == "row"]
    assert len(rows) == 270 and {d.tags for d in rows} == {("Habit Tracker",)}
    assert all(d.date is not None for d in rows)
    feb5 = next(d for d in rows if d.meta["title"] == "@February 5, 2025")
    assert feb5.date.text == "2025-02-05T06:16:00" and feb5.meta["dated_by"] == "Full date"
    assert feb5.source == feb5.thread == "notion://191bb52ee2b5819aaaf3fcef734a6208"
    # A row page named by a relative mention is still dated by its property.
    today = next(d for d in rows if d.meta["title"] == "@Today")
    assert today.date is not None
    pages = [d for d in docs if d.meta["kind"] == "page"]
    assert len(pages) == 8 and all(d.date is None for d in pages)
    where = next(i.location for i in found if isinstance(i, Skipped))
    assert where.startswith(f"{path}:Export-d2b14fbf-86de-4508-a1b2-6515ff8d7aab-Part-1.zip:")


def test_the_real_html_export() -> None:
    found = read(sample("notion", "obsidian-importer", "notion-testspace.zip"))
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    docs = docs_of(found)
    assert sorted(d.meta["title"] for d in docs) == [
        "Attachment Tests",
        "Block Reference",
        "Formatting Tests",
        "Notion-Testspace",
    ]
    assert all("<style" not in d.text and "{" not in d.text[:200] for d in docs)
    assert sum(isinstance(i, Skipped) and i.reason == "attachment" for i in found) == 5


def test_a_markdown_export_unpacked_zipped_and_nested_read_alike(tmp_path) -> None:
    folder = build_markdown(tmp_path / "export")
    found = read(folder)
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    assert sorted((Path(s.location).name, s.reason) for s in found if isinstance(s, Skipped)) == [
        (f"{DB}.csv", "database view"),
        (f"{DB}_all.csv:2", "database row read from its page"),
        (f"{DB}_all.csv:3", "database row read from its page"),
        ("photo.png", "attachment"),
    ]
    docs = {d.meta["title"]: d for d in docs_of(found) if d.meta["kind"] != "state"}
    post = docs["Write the launch post"]
    assert (post.author, post.date.text, post.tags) == ("Ana López", "2024-03-04", ("Tasks",))
    assert post.meta["dates"]["Last edited time"] == "2024-03-06T17:30:00"
    assert "publish at 9:00" in post.text
    assert docs["Book the venue"].date.text == "2024-03-20"  # a range's start
    badges = docs["Order badges"]  # a row without a page: from the CSV
    assert (
        badges.date is None
        and badges.source == "notion://0123456789abcdef0123456789abcdef/Order badges"
    )
    assert "Note" not in docs["Home"].meta.get("properties", {})  # body lines are no properties
    states = sorted((d.date.text, d.text) for d in docs_of(found) if d.meta["kind"] == "state")
    assert states == [
        ("2024-03-06T17:30:00", "Write the launch post status: Done"),
        ("2024-03-08T09:00:00", "Book the venue status: In progress"),
    ]
    nested = as_notion_delivers(folder, tmp_path / "notion.zip")
    assert [(d.source, d.text) for d in docs_of(read(nested))] == [
        (d.source, d.text) for d in docs_of(found)
    ]


def test_html_pages_with_properties(tmp_path) -> None:
    folder = tmp_path / "html"
    folder.mkdir()
    (folder / "Retro 44444444444444444444444444444444.html").write_text(HTML_PAGE)
    (folder / "index.html").write_text("<html><body><ul><li>Retro</li></ul></body></html>")
    (folder / "other.html").write_text("<html><body><p>not Notion's</p></body></html>")
    found = read(folder)
    docs = docs_of(found)
    assert len(docs) == 2
    retro, edited = docs
    assert (edited.text, edited.author, edited.date.text) == (
        "Retro last edited",
        "Bo Berg",
        "2024-04-09T10:02:00",
    )
    assert (retro.author, retro.date.text) == ("Cy Chen", "2024-04-02T15:37:00")
    assert "Fewer meetings, more demos." in retro.text
    assert "alert" not in retro.text and "color" not in retro.text
    assert sorted((Path(s.location).name, s.reason) for s in found if isinstance(s, Skipped)) == [
        ("index.html", "export index"),
        ("other.html", "not a Notion page"),
    ]


def test_a_zip_bomb_inside_the_zip_is_named_and_the_rest_read(tmp_path) -> None:
    folder = build_markdown(tmp_path / "export")
    bomb = zipped({"huge.md": b"# x\n" + b" " * 3_000_000})
    path = as_notion_delivers(folder, tmp_path / "notion.zip", {"Export-abc-Part-2.zip": bomb})
    found = read(path, NotionImporter(max_unpacked=1_000_000))
    failures = [i for i in found if isinstance(i, ItemError)]
    assert len(failures) == 1
    assert failures[0].location == f"{path}:Export-abc-Part-2.zip"
    assert "over the" in failures[0].reason and str(tmp_path / "inner") not in failures[0].reason
    assert len(docs_of(found)) == 6


def test_not_a_notion_export(tmp_path) -> None:
    slack = tmp_path / "slack.zip"
    slack.write_bytes(zipped({"users.json": b"[]", "general/2024-01-01.json": b"[]"}))
    with pytest.raises(InvalidInput, match="not a Notion export"):
        read(slack)
    assert not NotionImporter().recognizes(slack)
    assert NotionImporter().recognizes(build_markdown(tmp_path / "export"))


def test_reimport_and_an_edited_page(tmp_path, engine_location, capsys) -> None:
    folder = build_markdown(tmp_path / "export")
    with Memory(engine_location, embedder=KeywordEmbedder(["venue"])) as memory:
        assert run_import(memory, get("notion"), folder).added == 6
        assert run_import(memory, get("notion"), folder).added == 0
        page = folder / f"{HOME}.md"
        page.write_text(page.read_text().replace("Fridays", "Thursdays"))
        again = run_import(memory, get("notion"), folder)
        assert again.added == 1 and again.skipped["duplicate"] == 5
        homes = [r.text for r in memory.records() if r.source == "notion://" + HOME.split()[1]]
        assert len(homes) == 2
    code = main(["--db", str(tmp_path / "x.db"), "import", "notion", str(folder), "--dry-run"])
    assert code == 0
    assert capsys.readouterr().out.startswith(
        "would add 6, skipped 4 (1 attachment, 2 database row read from its page, 1 database view)"
    )
