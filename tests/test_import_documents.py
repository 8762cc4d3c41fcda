"""Documents in folders (``mempp ingest`` / ``mempp import folder``): the real documents of
``shared/realdata/docs`` read with their own authors and dates, comments and tracked changes
as records of the document's thread, versions, and bad input reported file by file."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest

from document_files import make_docx, make_epub, make_html, make_odt, make_pdf, make_pptx
from mempp import Document, Memory
from mempp.cli.main import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.documents import common
from mempp.importers.documents.read import read_document

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401

pytest.importorskip("pypdfium2")
pytest.importorskip("openpyxl")
pytest.importorskip("striprtf")
pytest.importorskip("inscriptis")


def _realdata() -> Path | None:
    repo = Path(__file__).resolve().parents[1]
    for candidate in (repo.parent / "shared" / "realdata", Path("/work/shared/realdata")):
        if (candidate / "docs").is_dir():
            return candidate / "docs"
    return None


REAL = _realdata()
needs_real = pytest.mark.skipif(REAL is None, reason="shared/realdata is not here")


def items(path: Path) -> list[object]:
    return list(read_document(path, str(path)))


def docs(found: list[object]) -> list[Document]:
    return [item for item in found if isinstance(item, Document)]


def only(found: list[object]) -> Document:
    [doc] = [d for d in docs(found) if d.meta and "format" in d.meta]
    return doc


# -- the real documents ----------------------------------------------------------------


@needs_real
def test_real_pdfs_author_and_last_modified_date_from_info_and_xmp() -> None:
    aviation = only(items(REAL / "pdf/pdfminer/issue-00352-asw-oct96-p41.pdf"))
    # RC4-encrypted with an empty user password: read; dated by ModDate, not CreationDate.
    assert aviation.author == "Mark Lacagnina"
    assert aviation.date.text == "2007-01-09T15:09:56-05:00"
    assert aviation.meta["created"] == "2006-10-06T16:34:04-04:00"
    assert aviation.meta["date_from"] == "pdf Info ModDate"
    assert "Cabin Depressurization" in aviation.text
    # Its first line was the running header; the Info Title is its title, so it goes first.
    assert aviation.text.startswith("Losing the Cabin\n\nwww.flightsafety.org")
    geobase = only(items(REAL / "pdf/pypdf/GeoBase_NHNC1_Data_Model_UML_EN.pdf"))
    assert geobase.author is None and geobase.meta["author_from"] == "none"  # none invented
    assert geobase.date.text == "2014-12-05T14:20:43-05:00"
    assert geobase.text.startswith("National Hydro Network, Canada, Level 1")
    aes = only(items(REAL / "pdf/pypdf/r6-empty-password.pdf"))  # AES-256, empty password
    assert aes.author == "cheng" and "pdf encryption test" in aes.text
    assert aes.date.text == "2022-04-14T13:24:21+05:24"
    ocr = only(items(REAL / "pdf/pypdf/Seige_of_Vicksburg_Sample_OCR.pdf"))
    assert ocr.author == "DSI" and "dangerous for use" in ocr.text  # a line-end hyphen joined
    assert ocr.text.startswith("THE SIEGE OF VICKSBURG")  # "Binder1.pdf" is no title
    chinese = only(items(REAL / "pdf/pypdf/issue-914-xmp-data.pdf"))
    assert chinese.author == "微软用户" and "华联绿豆" in chinese.text
    assert chinese.source.startswith(str(REAL / "pdf/pypdf/issue-914-xmp-data.pdf") + "#sha256=")
    assert chinese.thread == str(REAL / "pdf/pypdf/issue-914-xmp-data.pdf")


@needs_real
def test_a_scanned_pdf_without_a_text_layer_is_skipped_with_the_reason() -> None:
    found = items(REAL / "pdf/markitdown/MEDRPT-2024-PAT-3847_medical_report_scan.pdf")
    [skip] = found
    assert isinstance(skip, Skipped) and skip.reason == "no text layer"
    assert "3 pages of images" in skip.detail and "OCR" in skip.detail


@needs_real
def test_real_word_comments_are_records_of_the_documents_thread_by_their_writer() -> None:
    path = REAL / "docx/pandoc/comments.docx"
    found = docs(items(path))
    document, comments = found[0], found[1:]
    assert document.author == "Jesse Rosenthal"
    assert document.date.text == "2016-06-23T13:59:00+00:00"  # core modified
    assert document.meta["created"] == "2016-05-09T20:15:00+00:00"
    assert len(comments) == 5
    assert {c.author for c in comments} == {"Jesse Rosenthal"}
    assert {c.thread for c in comments} == {document.thread} == {str(path)}
    first = comments[0]
    assert first.text.startswith("I left a comment.")
    assert "some text to have a comment" in first.text  # the range it is on
    # Word wrote local time marked Z: the clock time kept, the zone not claimed.
    assert first.date.text == "2016-05-09T16:13:00"
    assert "zone unknown" in first.meta["date_zone"]
    assert set(first.tags) == {"docx", "comment"}
    assert comments[2].text.startswith("This one has multiple paragraphs.\nSee?")


@needs_real
def test_real_tracked_changes_keep_their_author_and_the_text_reads_as_it_is_now() -> None:
    moved = docs(items(REAL / "docx/pandoc/track_changes_move.docx"))
    assert moved[0].text.count("Here is the text to be moved.") == 1  # not at its old place
    [move] = moved[1:]
    assert move.author == "Jesse Rosenthal" and move.text.startswith("Moved: Here is the text")
    assert move.date.text == "2016-04-16T08:20:00" and "tracked-change" in move.tags
    scrubbed = docs(items(REAL / "docx/pandoc/track_changes_scrubbed_metadata.docx"))
    assert scrubbed[0].text == "Here is a test document."  # "dummy" deleted, "test" inserted
    assert scrubbed[0].author is None  # empty core creator; Word's "Author" names nobody
    kinds = {d.text.split(":")[0]: d for d in scrubbed[1:]}
    assert set(kinds) == {
        "With a comment!\n\nComment on “document” in track_changes_scrubbed_metadata.docx".split(
            ":"
        )[0],
        "Deleted",
        "Inserted",
    }
    assert all(d.author is None for d in scrubbed[1:])
    # No w:date: each takes the document's date, and says so.
    assert kinds["Deleted"].date == scrubbed[0].date
    assert kinds["Deleted"].meta["date_from"] == "the document's date"
    paper = only(items(REAL / "docx/markitdown/test.docx"))
    assert paper.author == "Adam Fourney"
    assert paper.meta["last_modified_by"] == "Yuzhong Zhang (SSE,123090848)"
    assert paper.date.day == "2025-03-20" and paper.meta["created"].startswith("2024-03-15")
    assert paper.text.startswith("AutoGen: Enabling Next-Gen LLM Applications")


@needs_real
def test_real_slides_sheets_odf_html_rtf() -> None:
    deck = docs(items(REAL / "pptx/docling/powerpoint_comments.pptx"))
    comments = deck[1:]
    assert [c.author for c in comments] == [
        "John Reviewer",
        "Jane Smith",
        "Jane Smith",
        "Jane Smith",
    ]
    # Jane's dt 17:35:35.236 local with timeZoneBias -120: 15:35:35 UTC.
    assert comments[1].date.text == "2026-06-18T15:35:35.236000+00:00"
    assert "zone" in comments[0].meta["date_zone"]  # John's: no bias written
    assert comments[2].meta["anchor"] == "slide 3"
    nasa = only(items(REAL / "pptx/unstructured/science-exploration-1p.pptx"))
    assert nasa.author == "ODIN" and nasa.date.day == "2023-05-24"
    assert nasa.text.startswith("Code 600: Sciences and Exploration Directorate")  # not "Slide 1"
    sheet = only(items(REAL / "xlsx/unstructured/2023-half-year-analyses-by-segment.xlsx"))
    assert sheet.author == "ibays" and sheet.date.day == "2023-07-26"
    assert sheet.meta["last_modified_by"] == "Darbellay,Eric,CH-Vevey"
    assert "Zone NA\t12553" in sheet.text and len(sheet.meta["sheets"]) == 5
    odt = only(items(REAL / "odf/docling/text_document_03.odt"))
    assert (
        odt.author == "Cesar Berrospi Ramis"
        and odt.meta["author_from"] == "odf meta:initial-creator"
    )
    assert odt.text.count("A nested table") == 1  # a nested table read once
    ods = only(items(REAL / "odf/docling/odf_table_with_title_01.ods"))
    assert ods.author is None and ods.date.text.startswith("2026-06-09T15:50:38.041798")
    assert "2019\t120" in ods.text
    article = only(items(REAL / "html/trafilatura/laviedesidees.fr.evaluation.html"))
    assert article.author == "Florence Audier" and article.date.day == "2009-09-15"
    assert "no modified date" in article.meta["date_from"]
    wiki = only(items(REAL / "html/markitdown/test_wikipedia.html"))
    assert wiki.author is None and wiki.meta["date_from"] == "file modification time"
    assert "Microsoft Corporation" in wiki.text and "<div" not in wiki.text
    assert wiki.text.startswith("Microsoft - Wikipedia\n\nJump to content\nMain menu")
    assert "\n " not in wiki.text  # inscriptis's indentation dropped
    rtf = only(items(REAL / "rtf/markitdown/test.rtf"))
    assert rtf.author == "Adam Fourney" and rtf.date.text == "2025-02-09T22:58:00"
    assert rtf.text.startswith("This is a Sample RTF File") and "fonttbl" not in rtf.text


@needs_real
def test_ingesting_the_real_documents_folder_accounts_for_every_file(tmp_path, capsys) -> None:
    db = tmp_path / "org.db"
    with Memory(str(db), embedder=KeywordEmbedder()) as memory:
        report = run_import(memory, get("folder"), REAL)
        assert report.failed == 0 and report.skipped == {"no text layer": 1}
        files = [p for p in REAL.rglob("*") if p.is_file()]
        records = list(memory.records())
        documents = {r.thread for r in records}
        assert len(documents) == len(files) - 1
        again = run_import(memory, get("folder"), REAL)
        assert again.added == 0 and len(list(memory.records())) == len(records)


# -- versions ---------------------------------------------------------------------------


def test_a_changed_file_is_a_new_version_an_unchanged_one_adds_nothing(
    engine_location: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    plan = make_docx(
        folder / "plan.docx",
        ["Plan", "Ship in May."],
        comments=[
            ("Bo", "2024-03-11T10:00:00Z", "May is tight."),
        ],
    )
    page = make_html(folder / "page.html", "Page", "The launch page.")
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        first = run_import(memory, get("folder"), folder)
        assert first.added == 3 and first.failed == 0
        os.utime(page, (1e9, 1e9))  # touched, not changed: dated by mtime, still the same
        again = run_import(memory, get("folder"), folder)
        assert again.added == 0 and again.skipped["already imported"] == 2
        make_docx(
            plan,
            ["Plan", "Ship in June."],
            modified="2024-04-02T09:00:00Z",
            comments=[
                ("Bo", "2024-03-11T10:00:00Z", "May is tight."),
            ],
        )
        third = run_import(memory, get("folder"), folder)
        assert third.added == 1  # the new version; its unchanged comment is a duplicate
        versions = [
            r for r in memory.records() if r.thread == str(plan) and "comment" not in r.tags
        ]
        assert [r.text for r in versions] == ["Plan\nShip in May.", "Plan\nShip in June."]
        assert len({r.source for r in versions}) == 2
        assert versions[1].date == "2024-04-02T09:00:00+00:00"


# -- bad input ----------------------------------------------------------------------------


def _encrypted_pdf(path: Path) -> Path:
    pypdf = pytest.importorskip("pypdf")
    plain = make_pdf(path.with_suffix(".plain"), ["Secret plans"])
    writer = pypdf.PdfWriter(clone_from=str(plain))
    writer.encrypt(user_password="hunter2", owner_password="owner", algorithm="RC4-128")
    with path.open("wb") as handle:
        writer.write(handle)
    plain.unlink()
    return path


def _bomb_docx(path: Path, size: int) -> Path:
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("word/document.xml", "w") as part,
    ):
        part.write(b'<w:document xmlns:w="x"><w:body><w:p><w:r><w:t>')
        block = b" " * (1 << 20)
        for _ in range(size >> 20):
            part.write(block)
        part.write(b"</w:t></w:r></w:p></w:body></w:document>")
    return path


def test_bad_documents_one_line_each_the_rest_imported_nothing_half_written(
    tmp_path, monkeypatch
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _encrypted_pdf(folder / "locked.pdf")
    with zipfile.ZipFile(folder / "notoffice.docx", "w") as archive:
        archive.writestr("readme.txt", "a zip, not a Word file")
    (folder / "truncated.docx").write_bytes(b"PK\x03\x04 not really")
    _bomb_docx(folder / "bomb.docx", 4 << 20)
    monkeypatch.setattr(common, "MAX_UNPACKED", 2 << 20)  # the cap, scaled to the test
    monkeypatch.setattr(common, "MAX_PART", 1 << 20)
    (folder / "klingon.html").write_bytes(
        b'<html><head><meta charset="x-klingon"></head><body>caf\xe9</body></html>'
    )
    (folder / "klingon-utf8.html").write_bytes(
        '<html><head><meta charset="x-klingon"></head><body>café ok</body></html>'.encode()
    )
    with (folder / "huge.pdf").open("wb") as handle:  # sparse: 3 GiB, no disk used
        handle.truncate(3 << 30)
    with (folder / "huge.pptx").open("wb") as handle:
        handle.truncate(300 << 20)
    make_pdf(folder / "good.pdf", ["A good page"], {"Author": "Ana", "ModDate": "D:20240312"})
    (folder / "note.md").write_text("A note.\n")
    with Memory(str(tmp_path / "m.db"), embedder=KeywordEmbedder()) as memory:
        report = run_import(memory, get("folder"), folder)
        reasons = {Path(f.location).name: f.reason for f in report.failures}
        assert set(reasons) == {
            "locked.pdf",
            "notoffice.docx",
            "truncated.docx",
            "bomb.docx",
            "klingon.html",
            "huge.pdf",
            "huge.pptx",
        }
        assert "encrypted with a password" in reasons["locked.pdf"]
        assert "not a Word document (it has no word/document.xml)" in reasons["notoffice.docx"]
        assert "not a zip file" in reasons["truncated.docx"]
        assert "over the 2 MiB cap" in reasons["bomb.docx"]
        assert "'x-klingon', which is unknown" in reasons["klingon.html"]
        assert reasons["huge.pdf"] == (
            "3 GiB, over the 2 GiB cap for one .pdf document: split it to import it"
        )
        assert reasons["huge.pptx"].startswith("300 MiB, over the 256 MiB cap for one .pptx")
        assert all("\n" not in reason for reason in reasons.values())
        [warning] = report.notices
        assert warning.location.endswith("klingon-utf8.html") and "read as UTF-8" in warning.message
        texts = sorted(r.text for r in memory.records())
        assert texts == ["A good page", "A note.", "café ok"]
        good = next(r for r in memory.records() if r.text == "A good page")
        assert good.author == "Ana" and good.date == "2024-03-12T00:00:00+00:00"


def test_a_member_lying_about_its_size_stops_at_the_cap(tmp_path, monkeypatch) -> None:
    bomb = _bomb_docx(tmp_path / "liar.docx", 3 << 20)
    monkeypatch.setattr(common, "MAX_UNPACKED", 64 << 20)
    monkeypatch.setattr(common, "MAX_PART", 1 << 20)
    [failure] = items(bomb)
    assert isinstance(failure, ItemError) and "over the 1 MiB limit of one file" in failure.reason


def test_a_missing_library_names_the_extra(tmp_path, monkeypatch) -> None:
    import importlib

    real = importlib.import_module

    def without_pdfium(name: str, *args: object):
        if name == "pypdfium2":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_pdfium)
    [skip] = items(make_pdf(tmp_path / "a.pdf", ["x"]))
    assert isinstance(skip, Skipped) and skip.reason == "needs the documents extra"
    assert skip.detail == "reading it needs pypdfium2: pip install 'mempp[documents]'"


# -- EPUB, e-mail files, the command line -----------------------------------------------------


def test_an_epub_reads_in_spine_order_with_its_opf_metadata(tmp_path) -> None:
    book = make_epub(
        tmp_path / "b.epub",
        ["Chapter one.", "Chapter two."],
        creator="Rui Costa",
        modified="2021-02-03T04:05:06Z",
    )
    doc = only(items(book))
    assert doc.text == "A Book\n\nChapter one.\n\nChapter two."  # its title first
    assert doc.author == "Rui Costa" and doc.date.text == "2021-02-03T04:05:06+00:00"
    assert doc.meta["created"].startswith("2020-05-01") and doc.meta["title"] == "A Book"


def test_eml_files_in_a_folder_are_read_by_the_mail_importer(tmp_path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "hello.eml").write_bytes(
        b"From: Ana <ana@x.example>\r\nSubject: Hello\r\nDate: Tue, 12 Mar 2024 09:00:00 +0000\r\n"
        b"Message-ID: <h1@x.example>\r\n\r\nBody text.\r\n"
    )
    [doc] = [i for i in get("folder").read(folder) if isinstance(i, Document)]
    assert doc.author == "Ana" and doc.text == "Hello\n\nBody text."


def test_mempp_ingest_prints_each_problem_and_the_summary(tmp_path, capsys) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    make_pdf(folder / "2024-05-06 memo.pdf", ["Memo text"])
    (folder / "broken.pptx").write_bytes(b"nonsense")
    code = main(["--db", str(tmp_path / "m.db"), "ingest", str(folder), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 3
    assert f"{folder / 'broken.pptx'}: not a zip file, so not a PowerPoint presentation" in err
    assert "would add 1, skipped 0, failed 1" in out
    found = [i for i in get("folder").read(folder) if isinstance(i, Document)]
    assert found[0].date.day == "2024-05-06" and found[0].meta["date_from"] == "file name"
    assert not any(isinstance(i, Notice) for i in get("folder").read(folder))
    shutil.rmtree(folder)


def test_pdf_author_and_date_from_xmp_when_info_has_none(tmp_path) -> None:
    pytest.importorskip("pypdf")
    xmp = (
        "<dc:creator><rdf:Seq><rdf:li>Rui Costa</rdf:li></rdf:Seq></dc:creator>"
        "<xmp:ModifyDate>2023-06-01T10:00:00+02:00</xmp:ModifyDate>"
        "<xmp:CreateDate>2023-05-01T09:00:00+02:00</xmp:CreateDate>"
    )
    pdf = make_pdf(tmp_path / "x.pdf", ["From XMP"], {"Producer": "test"}, xmp=xmp)
    doc = only(items(pdf))
    assert doc.author == "Rui Costa" and doc.meta["author_from"] == "pdf XMP dc:creator"
    assert doc.date.text == "2023-06-01T08:00:00+00:00"
    assert doc.meta["date_from"] == "pdf XMP xmp:ModifyDate"
    assert doc.meta["created_from"] == "pdf XMP xmp:CreateDate"


def test_pages_without_text_are_told_and_the_text_cap_refuses(tmp_path) -> None:
    pdf = make_pdf(tmp_path / "half.pdf", ["Page one text", ""], {"ModDate": "D:20240101"})
    found = items(pdf)
    assert only(found).text == "Page one text" and only(found).meta["pages"] == 2
    [notice] = [i for i in found if isinstance(i, Notice)]
    assert notice.message == "1 of 2 pages have no text layer (scanned?)"
    [refused] = list(read_document(pdf, "half.pdf", max_chars=5))
    assert isinstance(refused, ItemError)
    assert refused.reason == "its text passes 5 characters by page 1 of 2; split it to import it"


def test_a_zip_declaring_more_than_the_default_cap_is_refused_unread(tmp_path) -> None:
    """A bomb at mempp's own caps: the central directory declares 600 MiB (patched in, so
    the test writes kilobytes); it is refused before a byte is inflated."""
    bomb = make_docx(tmp_path / "bomb.docx", ["tiny"])
    data = bytearray(bomb.read_bytes())
    central = data.find(b"PK\x01\x02")
    while central >= 0:
        data[central + 24 : central + 28] = (600 << 20).to_bytes(4, "little")
        central = data.find(b"PK\x01\x02", central + 4)
    bomb.write_bytes(bytes(data))
    [failure] = items(bomb)
    assert isinstance(failure, ItemError)
    assert failure.reason == "unpacks to 1.76 GiB, over the 512 MiB cap (a zip bomb?)"


def test_sheet_notes_and_odf_annotations_are_records_by_their_writer(tmp_path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Budget"
    sheet["A1"], sheet["B1"] = "Travel", 1200
    sheet["B1"].comment = openpyxl.comments.Comment("Too high for Q3", "Carla")
    book.save(tmp_path / "b.xlsx")
    found = docs(items(tmp_path / "b.xlsx"))
    assert found[0].text == "Sheet: Budget\nTravel\t1200"
    [note] = found[1:]
    assert note.author == "Carla" and note.text.startswith("Too high for Q3")
    assert note.meta["anchor"] == "Budget!B1" and note.date == found[0].date
    odt = make_odt(
        tmp_path / "m.odt",
        ["Minutes of the board.", "Second point."],
        creator="Dana",
        date="2024-02-02T10:00:00",
        note=("Eli", "2024-02-03T11:00:00Z", "Check the figures."),
    )
    found = docs(items(odt))
    assert found[0].text == "Minutes of the board.\nSecond point."  # the note is not body text
    assert found[0].author == "Dana" and found[0].date.text == "2024-02-02T10:00:00+00:00"
    [comment] = found[1:]
    assert comment.author == "Eli" and comment.date.text == "2024-02-03T11:00:00+00:00"
    assert "Minutes of the board." in comment.text and comment.thread == found[0].thread


def test_modern_slide_comments_and_their_replies_are_each_a_record(tmp_path) -> None:
    deck = make_pptx(
        tmp_path / "d.pptx",
        "Quarterly review",
        ("Fay Ng", "2024-06-01T08:00:00.120Z", "Add the churn figure."),
        ("Gus Ode", "2024-06-02T09:30:00Z", "Added on slide 2."),
    )
    found = docs(items(deck))
    assert found[0].text == "Quarterly review"  # the slide-number field left out
    comment, reply = found[1:]
    assert (comment.author, comment.date.text) == ("Fay Ng", "2024-06-01T08:00:00.120000+00:00")
    assert comment.text.startswith("Add the churn figure.\n\nComment on “slide 1”")
    assert (reply.author, reply.date.text) == ("Gus Ode", "2024-06-02T09:30:00+00:00")
    assert reply.text.startswith("Added on slide 2.") and "churn" not in reply.text
    assert "date_zone" not in comment.meta  # a modern comment's date is UTC


def test_a_word_text_box_is_read_once(tmp_path) -> None:
    """A text box is written twice (DrawingML for new readers, VML for old): read once."""
    from document_files import W

    box = "<w:txbxContent><w:p><w:r><w:t>Boxed figure: 42</w:t></w:r></w:p></w:txbxContent>"
    run = (
        '<w:r><mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-'
        'compatibility/2006"><mc:Choice Requires="wps"><w:drawing><wps:txbx xmlns:wps="x">'
        f"{box}</wps:txbx></w:drawing></mc:Choice><mc:Fallback><w:pict><v:textbox "
        f'xmlns:v="urn:schemas-microsoft-com:vml">{box}</v:textbox></w:pict></mc:Fallback>'
        "</mc:AlternateContent></w:r>"
    )
    path = tmp_path / "box.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "word/document.xml",
            f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>Before</w:t></w:r>{run}</w:p>'
            "<w:p><w:r><w:t>After</w:t></w:r></w:p></w:body></w:document>",
        )
    assert only(items(path)).text == "Before\nBoxed figure: 42\nAfter"


def test_an_author_longer_than_a_label_is_cut_and_kept_whole(tmp_path) -> None:
    many = ", ".join(f"Author Number {i}" for i in range(100))  # 1,790 bytes
    book = make_epub(tmp_path / "b.epub", ["Text."], creator=many, modified="2021-01-01")
    doc = only(items(book))
    assert len(doc.author.encode()) <= 1000 and doc.author.endswith("Number 54 …")
    assert doc.meta["author_full"] == many


LARGE = """
import resource, sys
from pathlib import Path
from mempp.importers.documents import read
import pypdf, pypdfium2, lxml.etree
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
found = list(read.read_document(Path(sys.argv[1]), sys.argv[1]))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(type(found[0]).__name__, (after - before) >> 10)
"""


def test_a_large_pdf_is_read_without_holding_it_in_memory(tmp_path) -> None:
    """A 64 MiB PDF (text pages, large image streams, no Info: the XMP fallback runs too)
    read in a process of its own: its peak memory grows by far less than the file."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_documents import make_large_pdf

    path = make_large_pdf(tmp_path / "large.pdf", 64, pages=50)
    assert path.stat().st_size > 64 << 20
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    run = subprocess.run(
        [sys.executable, "-c", LARGE, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    kind, grown = run.stdout.split()
    assert kind == "Document"
    assert int(grown) < 32, f"peak memory grew by {grown} MiB reading a 64 MiB PDF"


def test_odf_tracked_changes_are_records_by_their_writer(tmp_path) -> None:
    office = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    dc = "http://purl.org/dc/elements/1.1/"

    def info(who: str, when: str) -> str:
        return (
            f"<office:change-info><dc:creator>{who}</dc:creator><dc:date>{when}</dc:date>"
            "</office:change-info>"
        )

    content = (
        f'<office:document-content xmlns:office="{office}" xmlns:text="{text}" '
        f'xmlns:dc="{dc}"><office:body><office:text><text:tracked-changes>'
        f'<text:changed-region text:id="ct1"><text:insertion>{info("Hal", "2024-05-01T10:00:00")}'
        "</text:insertion></text:changed-region>"
        f'<text:changed-region text:id="ct2"><text:deletion>{info("Ivy", "2024-05-02T11:00:00")}'
        "<text:p>the old clause</text:p></text:deletion></text:changed-region>"
        "</text:tracked-changes>"
        '<text:p>Terms: <text:change-start text:change-id="ct1"/>net 30 days'
        '<text:change-end text:change-id="ct1"/>.<text:change text:change-id="ct2"/></text:p>'
        "</office:text></office:body></office:document-content>"
    )
    path = tmp_path / "terms.odt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("content.xml", content)
    found = docs(items(path))
    assert found[0].text == "Terms: net 30 days."  # the deletion's text is not in it
    inserted, deleted = found[1:]
    assert (inserted.author, inserted.date.text) == ("Hal", "2024-05-01T10:00:00+00:00")
    assert inserted.text.startswith("Inserted: net 30 days\n\nTracked change in terms.odt")
    assert (deleted.author, deleted.text.split("\n")[0]) == ("Ivy", "Deleted: the old clause")
    assert deleted.meta["anchor"] == "Terms: net 30 days."


def test_a_legacy_office_file_is_skipped_with_what_to_save_it_as(tmp_path) -> None:
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    (tmp_path / "new.md").write_text("New.\n")
    [skip] = [i for i in get("folder").read(tmp_path) if isinstance(i, Skipped)]
    assert skip.reason == "not a document file"
    assert skip.detail == "a Word 97-2003 file: save it as .docx to import it"


def test_an_import_stopped_between_a_documents_batches_is_finished_by_a_rerun(tmp_path) -> None:
    from mempp.importers.base import read_paths, source_rule, store_items

    folder = tmp_path / "f"
    folder.mkdir()
    notes = [("Bo", f"2024-03-1{i}T10:00:00Z", f"Comment number {i}.") for i in range(5)]
    make_docx(folder / "plan.docx", ["The plan."], comments=notes)
    folder_importer = get("folder")

    def cut_short():  # the process dies after the third item
        for number, item in enumerate(read_paths(folder_importer, folder)):
            if number == 3:
                raise KeyboardInterrupt
            yield item

    with Memory(str(tmp_path / "m.db"), embedder=KeywordEmbedder()) as memory:
        with pytest.raises(KeyboardInterrupt):
            store_items(
                memory,
                cut_short(),
                source="folder",
                by_source=source_rule(folder_importer),
                batch_size=2,
            )
        assert len(list(memory.records())) == 2  # one whole batch: the document, a comment
        again = run_import(memory, folder_importer, folder, batch_size=2)
        assert again.added == 4 and again.skipped == {"already imported": 1, "duplicate": 1}
        assert sorted(r.text.split("\n")[0] for r in memory.records()) == [
            *(f"Comment number {i}." for i in range(5)),
            "The plan.",
        ]


def test_word_comment_replies_and_resolved_comments_are_told(tmp_path) -> None:
    path = make_docx(
        tmp_path / "r.docx",
        ["The plan."],
        comments=[
            ("Bo", "2024-03-11T10:00:00Z", "Is May realistic?"),
            ("Ana", "2024-03-11T12:00:00Z", "Yes, if QA starts now."),
        ],
        replies={1: 0},
        done=(0,),
    )
    question, answer = docs(items(path))[1:]
    assert question.meta["resolved"] is True and "reply_to" not in question.meta
    assert answer.meta["reply_to"] == "comment-0" and "resolved" not in answer.meta
    assert answer.author == "Ana" and answer.thread == question.thread
