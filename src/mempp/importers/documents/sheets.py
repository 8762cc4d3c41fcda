"""Excel (.xlsx): every sheet's rows as tab-separated lines under the sheet's name, by
openpyxl (read-only, cached values: what the sheet showed when saved), after the zip's sizes
are checked against the caps (openpyxl unpacks it itself, never past a part's declared
size, so that check bounds it); cell notes as annotations.

openpyxl is the maintained reader of the format and turns number formats into dates, which
reading the XML by hand would get wrong.
"""

from __future__ import annotations

import zipfile
from datetime import date, datetime, time
from pathlib import Path
from typing import TYPE_CHECKING

from mempp.importers.documents.common import (
    Annotation,
    Extracted,
    Package,
    Unreadable,
    attr,
    core_properties,
    local,
    need,
)
from mempp.importers.documents.ooxml import R_ID, relationships

if TYPE_CHECKING:
    from lxml import etree


def extract(path: Path, max_chars: int) -> Extracted:
    with Package(path, "Excel workbook") as package:  # the caps, before openpyxl unpacks
        package.require("xl/workbook.xml")
        extracted = Extracted(text="")
        core_properties(package, extracted, "xlsx")
        notes = _comments(package)
    openpyxl = need("openpyxl", "openpyxl")
    try:
        book = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError) as exc:
        raise Unreadable(f"openpyxl cannot read it ({_first(exc)})") from None
    blocks, size = [], 0
    try:
        for sheet in book.worksheets:
            lines = [f"Sheet: {sheet.title}"]
            for row in sheet.iter_rows(values_only=True):
                cells = [_cell(v) for v in row]
                while cells and not cells[-1]:
                    cells.pop()
                if cells:
                    line = "\t".join(cells)
                    size += len(line) + 1
                    if size > max_chars:
                        raise Unreadable(
                            f"its cells pass {max_chars:,} characters in sheet {sheet.title!r}"
                        )
                    lines.append(line)
            if len(lines) > 1:
                blocks.append("\n".join(lines))
        extracted.meta["sheets"] = [sheet.title for sheet in book.worksheets]
    finally:
        book.close()
    extracted.text = "\n\n".join(blocks)
    extracted.annotations.extend(notes)
    return extracted


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat(sep=" ") if value.time() != time.min else value.date().isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).replace("\t", " ").replace("\n", " ").strip()


def _comments(package: Package) -> list[Annotation]:
    """Cell notes (legacy comments: an author, no date in the format), from each sheet's
    comments part."""
    book_rels = relationships(package, "xl/workbook.xml")
    found = []
    for node in package.xml("xl/workbook.xml").iter():
        if local(node.tag) != "sheet":
            continue
        target = book_rels.get(node.get(R_ID) or "")
        if target is None or not package.has(target[1]):
            continue
        for kind, part in relationships(package, target[1]).values():
            if kind == "comments" and package.has(part):
                found.extend(_notes(package.xml(part), attr(node, "name") or target[1]))
    return found


def _notes(root: etree._Element, sheet: str) -> list[Annotation]:
    authors = ["".join(a.itertext()).strip() for a in root.iter() if local(a.tag) == "author"]
    found = []
    for comment in root.iter():
        if local(comment.tag) != "comment":
            continue
        text = "".join(t.text or "" for t in comment.iter() if local(t.tag) == "t").strip()
        index = attr(comment, "authorId") or ""
        author = authors[int(index)] if index.isdigit() and int(index) < len(authors) else None
        if text:
            where = f"{sheet}!{attr(comment, 'ref') or ''}"
            found.append(
                Annotation(
                    kind="comment", text=text, author=author or None, key=where, anchor=where
                )
            )
    return found


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
