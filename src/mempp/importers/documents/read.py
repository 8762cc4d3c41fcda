"""One document file into items: the document as one record, whole; each comment and tracked
change as a record of the document's thread; or why the file is not stored.

- author: the file's own metadata (see each format's module), else none (never invented);
- date: the metadata's last-modified date (the version's: its text is as of then), else its
  creation date, else a ``YYYY-MM-DD`` file name, else the file's modification time; the
  metadata's ``author_from`` and ``date_from`` say which was used, ``created`` keeps the
  creation date;
- source: the path and the version, ``PATH#sha256=`` + 16 hex digits of the file's SHA-256:
  a file ingested again unchanged is already stored (``already imported``), a changed one
  is a new version, a new record, the old kept;
- thread: the path, shared by every version and every comment of the file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.documents import epub, html, odf, pdf, rtf, sheets, slides, word
from mempp.importers.documents.common import (
    Annotation,
    Extracted,
    MissingLibrary,
    NoText,
    Unreadable,
)
from mempp.records import Document
from mempp.validate import MAX_LABEL_BYTES

# suffix -> (format name, reader)
FORMATS = {
    ".pdf": ("pdf", pdf.extract),
    ".docx": ("docx", word.extract),
    ".pptx": ("pptx", slides.extract),
    ".xlsx": ("xlsx", sheets.extract),
    ".odt": ("odt", odf.extract),
    ".ods": ("ods", odf.extract),
    ".epub": ("epub", epub.extract),
    ".html": ("html", html.extract),
    ".htm": ("html", html.extract),
    ".rtf": ("rtf", rtf.extract),
}
SUFFIXES = tuple(FORMATS)
# One file: past this it is refused, not read. PDFium reads a PDF from disk as it needs
# it (a 250 MiB PDF peaks at 62 MiB of memory); a package's XML parts are parsed whole.
MAX_BYTES = 256 << 20
MAX_PDF_BYTES = 2 << 30
MAX_CHARS = 8_000_000  # one record's text (about 4,000 pages)
_VERSION = re.compile(r"#sha256=[0-9a-f]{16}$")
_NAME_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?=$|[\s_.-])")
_FILE_NAME = re.compile(r"\.(?:pdf|docx?|pptx?|xlsx?|od[tsp]|rtf|html?|txt|indd|qxd)$", re.I)
_OFFICE_PREFIX = re.compile(r"^microsoft (?:word|powerpoint|excel) - ", re.I)
_SLIDE = re.compile(r"^(?:slide|folie|diapositive)\s*\d+$", re.I)
_SURROGATE = re.compile("[\ud800-\udfff]")
_VERBS = {"insertion": "Inserted", "deletion": "Deleted", "move": "Moved"}


def is_version(doc: Document) -> bool:
    """Is ``doc`` a document version (its source names the file's content)? The folder
    importer skips those a store already has."""
    return doc.source is not None and _VERSION.search(doc.source) is not None


def version_source(location: str, digest: str) -> str:
    return f"{location}#sha256={digest[:16]}"


def file_digest(path: Path) -> str:
    """The file's SHA-256, read in blocks (a large file is never in memory whole)."""
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def read_document(
    path: Path, location: str, *, max_bytes: int | None = None, max_chars: int = MAX_CHARS
) -> Iterator[Item]:
    """The items of one document file (``location`` names it in them). ``max_bytes`` is
    the size past which it is refused (``MAX_PDF_BYTES`` for a PDF, else ``MAX_BYTES``)."""
    kind, extract = FORMATS[path.suffix.lower()]
    if max_bytes is None:
        max_bytes = MAX_PDF_BYTES if kind == "pdf" else MAX_BYTES
    try:
        stat = path.stat()
        if stat.st_size > max_bytes:
            yield ItemError(
                location,
                f"{_size(stat.st_size)}, over the {_size(max_bytes)} cap for one .{kind} "
                "document: split it to import it",
            )
            return
        digest = file_digest(path)
    except OSError as exc:
        yield ItemError(location, exc.strerror or str(exc))
        return
    try:
        extracted = extract(path, max_chars)
    except Unreadable as exc:
        yield ItemError(location, str(exc))
        return
    except NoText as exc:
        yield Skipped(location, exc.reason, exc.detail)
        return
    except MissingLibrary as exc:
        yield Skipped(location, "needs the documents extra", str(exc))
        return
    except OSError as exc:
        yield ItemError(location, exc.strerror or str(exc))
        return
    except Exception as exc:  # a library's failure on hostile input: this file only
        yield ItemError(location, f"cannot be read ({type(exc).__name__}: {_first(exc)})")
        return
    if not extracted.text.strip():
        yield Skipped(location, "empty document", f"a .{kind} file with no text in it")
        return
    try:
        record = _record(extracted, kind, path, location, digest, stat.st_size, stat.st_mtime)
        notes = [_annotation(a, record, kind, path, location) for a in extracted.annotations]
    except InvalidInput as exc:  # text or metadata the store cannot hold (a NUL in it)
        yield ItemError(location, str(exc))
        return
    yield record
    yield from notes
    for warning in extracted.warnings:
        yield Notice(location, warning)


def _record(
    extracted: Extracted,
    kind: str,
    path: Path,
    location: str,
    digest: str,
    size: int,
    mtime: float,
) -> Document:
    file_time = datetime.fromtimestamp(mtime, UTC).replace(microsecond=0)
    when: date | datetime
    if extracted.modified is not None:
        when, date_from = extracted.modified, extracted.modified_from or "metadata"
    elif extracted.created is not None:
        when, date_from = (
            extracted.created,
            (extracted.created_from or "metadata") + " (no modified date)",
        )
    elif (named := _name_date(path.name)) is not None:
        when, date_from = named, "file name"
    else:
        when, date_from = file_time, "file modification time"
    meta: dict[str, Any] = {
        "format": kind,
        "sha256": digest,
        "bytes": size,
        "file_modified": file_time.isoformat(),
        "date_from": date_from,
        "author_from": extracted.author_from if extracted.author else "none",
    }
    if extracted.created is not None:
        meta["created"] = extracted.created.isoformat()
        meta["created_from"] = extracted.created_from
    text = _tidy(extracted.text)
    if extracted.title:
        meta["title"] = extracted.title
        if _is_title(extracted.title, path) and not text.startswith(extracted.title):
            # The record's title is its first line: a page's "Jump to content" or a
            # magazine's running header is not one, the file's own title is.
            text = f"{extracted.title}\n\n{text}"
            meta["title_line"] = "the file's own title, put first"
    for key, value in extracted.meta.items():
        meta.setdefault(key, value)
    return Document.create(
        text,
        author=_fit(extracted.author, meta),
        date=when,
        tags=[kind],
        source=version_source(location, digest),
        thread=location,
        metadata=meta,
    )


def _annotation(
    note: Annotation, record: Document, kind: str, path: Path, location: str
) -> Document:
    name = path.name
    if note.kind == "comment":
        text = note.text + (
            f"\n\nComment on “{note.anchor}” in {name}" if note.anchor else f"\n\nComment in {name}"
        )
        tags = [kind, "comment"]
    else:
        text = f"{_VERBS.get(note.kind, 'Changed')}: {note.text}\n\nTracked change in {name}" + (
            f", after “{note.anchor}”" if note.anchor else ""
        )
        tags = [kind, "tracked-change"]
    meta: dict[str, Any] = {
        "kind": note.kind,
        "document": record.source,
        "date_from": f"{kind} {note.kind}" if note.date is not None else "the document's date",
    }
    if note.anchor:
        meta["anchor"] = note.anchor
    if note.date_note and note.date is not None:
        meta["date_zone"] = note.date_note
    meta.update(note.meta)
    return Document.create(
        text,
        author=_fit(note.author, meta),
        date=note.date if note.date is not None else (record.date.text if record.date else None),
        tags=tags,
        source=f"{location}#{note.key}",
        thread=location,
        metadata=meta,
    )


def _fit(author: str | None, meta: dict[str, Any]) -> str | None:
    """An author the store can hold (``MAX_LABEL_BYTES``): a longer one (a book's fifty
    creators) is cut at a comma or space, kept whole in ``author_full``."""
    if author is None or len(author.encode("utf-8")) <= MAX_LABEL_BYTES:
        return author
    meta["author_full"] = author
    cut = author.encode("utf-8")[: MAX_LABEL_BYTES - 4].decode("utf-8", "ignore")
    end = cut.rfind(",") if "," in cut else cut.rfind(" ")
    return cut[: max(end, 1)].rstrip(", ") + " …"


def _is_title(title: str, path: Path) -> bool:
    """Is a metadata title a title, not what tools leave there: a file name ("Binder1.pdf",
    "Microsoft Word - plan.docx", the file's own stem), "Slide 1", a lone "."?"""
    words = title.strip()
    if len(words) < 3 or not any(c.isalpha() for c in words) or "\n" in words:
        return False
    if _FILE_NAME.search(words) or _OFFICE_PREFIX.match(words):
        return False
    if _SLIDE.match(words) or words.lower() in ("untitled", "title", "document"):
        return False
    return words.lower() != path.stem.lower()


def _name_date(name: str) -> date | None:
    match = _NAME_DATE.match(name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None


def _tidy(text: str) -> str:
    """Line ends made ``\\n``, trailing spaces and runs of blank lines dropped, NULs gone."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _SURROGATE.sub("\ufffd", text)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _size(size: int) -> str:
    return f"{size / (1 << 30):.3g} GiB" if size >= 1 << 30 else f"{size / (1 << 20):,.0f} MiB"


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no detail"
