"""OpenDocument text and spreadsheets (.odt, .ods): ``content.xml`` read in document order
(headings and paragraphs to lines, tables to ``cell | cell`` or tab-separated rows), tracked
deletions left out; ``meta.xml`` for author and dates; annotations (comments) with their own
``dc:creator`` and ``dc:date``.

Plain zip + XML (lxml): odfpy builds a full object tree and has no better text view; the
format's text model is small. Repeated cells and rows (``number-columns-repeated``, which
LibreOffice writes for a sheet's empty tail, often 16,000 times) are expanded only where
they hold text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mempp.importers.documents.common import (
    Annotation,
    Extracted,
    Package,
    Unreadable,
    attr,
    child_text,
    iso_date,
    local,
)

if TYPE_CHECKING:
    from lxml import etree

_MAX_REPEAT = 100  # a cell repeated with text in it: at most this many copies


def extract(path: Path, max_chars: int) -> Extracted:
    kind = "OpenDocument spreadsheet" if path.suffix.lower() == ".ods" else "OpenDocument text"
    with Package(path, kind) as package:
        package.require("content.xml")
        walker = _Walker()
        walker.block(package.xml("content.xml"))
        text = "\n".join(walker.lines).strip()
        if len(text) > max_chars:
            raise Unreadable(f"its text passes {max_chars:,} characters; split it to import it")
        extracted = Extracted(text=text, annotations=walker.notes)
        if package.has("meta.xml"):
            _meta(package.xml("meta.xml"), extracted)
    return extracted


def _meta(root: etree._Element, extracted: Extracted) -> None:
    creator = child_text(root, "creator")
    initial = child_text(root, "initial-creator")
    if initial:
        extracted.author, extracted.author_from = initial, "odf meta:initial-creator"
    elif creator:
        extracted.author, extracted.author_from = creator, "odf dc:creator"
    if creator:
        extracted.meta["last_modified_by"] = creator
    modified = iso_date(child_text(root, "date"))
    if modified is not None:
        extracted.modified, extracted.modified_from = modified, "odf dc:date"
    created = iso_date(child_text(root, "creation-date"))
    if created is not None:
        extracted.created, extracted.created_from = created, "odf meta:creation-date"
    extracted.title = child_text(root, "title")
    cycles = child_text(root, "editing-cycles")
    if cycles:
        extracted.meta["revision"] = cycles


def _rows(element: etree._Element) -> list[etree._Element]:
    """A table's own rows (in header and row groups too), not those of a table nested in a
    cell, which its cell reads."""
    found = []
    for node in element:
        name = local(node.tag)
        if name == "table-row":
            found.append(node)
        elif name in ("table-header-rows", "table-rows", "table-row-group"):
            found.extend(_rows(node))
    return found


class _Walker:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.notes: list[Annotation] = []

    def block(self, element: etree._Element) -> None:
        for node in element:
            name = local(node.tag)
            if name in ("h", "p"):
                self.lines.append(self.inline(node))
            elif name == "table":
                self.table(node)
            elif name in ("tracked-changes", "annotation", "meta", "styles", "font-face-decls"):
                if name == "annotation":
                    self.note(node)
                continue
            else:
                self.block(node)

    def table(self, table: etree._Element) -> None:
        sheet = attr(table, "name") if self._is_sheet(table) else None
        if sheet is not None:
            self.lines.append(f"Sheet: {sheet}")
        for row in _rows(table):
            cells: list[str] = []
            for cell in row:
                if local(cell.tag) not in ("table-cell", "covered-table-cell"):
                    continue
                inner = _Walker()
                inner.notes = self.notes
                inner.block(cell)
                value = " ".join(line for line in inner.lines if line.strip())
                repeat = attr(cell, "number-columns-repeated")
                times = int(repeat) if repeat and repeat.isdigit() else 1
                cells.extend([value] * (min(times, _MAX_REPEAT) if value else min(times, 1)))
            while cells and not cells[-1]:
                cells.pop()
            if cells:
                self.lines.append(("\t" if sheet is not None else " | ").join(cells))

    @staticmethod
    def _is_sheet(table: etree._Element) -> bool:
        parent = table.getparent()
        return parent is not None and local(parent.tag) == "spreadsheet"

    def inline(self, element: etree._Element) -> str:
        out: list[str] = []
        self._inline(element, out)
        return "".join(out).strip()

    def _inline(self, element: etree._Element, out: list[str]) -> None:
        if element.text:
            out.append(element.text)
        for node in element:
            name = local(node.tag)
            if name == "s":
                count = attr(node, "c")
                out.append(" " * (int(count) if count and count.isdigit() else 1))
            elif name == "tab":
                out.append("\t")
            elif name == "line-break":
                out.append("\n")
            elif name == "annotation":
                self.note(node, anchor="".join(out).strip()[-80:])
            elif name in ("annotation-end", "note-citation", "change", "change-start"):
                pass
            elif name in (
                "note",
                "span",
                "a",
                "note-body",
                "ruby",
                "ruby-base",
                "bookmark-ref",
            ) or name in ("p", "h", "list", "list-item"):
                self._inline(node, out)
            if node.tail:
                out.append(node.tail)

    def note(self, node: etree._Element, anchor: str = "") -> None:
        lines = [self.inline(p) for p in node if local(p.tag) in ("p", "h", "list")]
        text = "\n".join(line for line in lines if line).strip()
        if not text:
            return
        self.notes.append(
            Annotation(
                kind="comment",
                text=text,
                author=child_text(node, "creator"),
                date=iso_date(child_text(node, "date")),
                key=f"annotation-{attr(node, 'name') or len(self.notes) + 1}",
                anchor=anchor,
            )
        )
