"""OpenDocument text and spreadsheets (.odt, .ods): ``content.xml`` read in document order
(headings and paragraphs to lines, tables to ``cell | cell`` or tab-separated rows), tracked
deletions left out; ``meta.xml`` for author and dates; annotations (comments) and tracked
insertions and deletions with their own ``dc:creator`` and ``dc:date``.

Plain zip + XML (lxml): odfpy builds a full object tree and has no better text view; the
format's text model is small. Repeated cells and rows (``number-columns-repeated``, which
LibreOffice writes for a sheet's empty tail, often 16,000 times) are expanded only where
they hold text.
"""

from __future__ import annotations

from datetime import datetime
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
_KINDS = {"insertion": "insertion", "deletion": "deletion", "format-change": "format"}


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


class _Changes:
    """Tracked changes: the regions ``text:tracked-changes`` describes (kind, writer, date,
    a deletion's text) and the insertions open across paragraphs."""

    def __init__(self) -> None:
        self.regions: dict[str, tuple[str, str | None, datetime | None, str]] = {}
        self.open: dict[str, list[str]] = {}

    def read(self, tracked: etree._Element) -> None:
        for region in tracked:
            if local(region.tag) != "changed-region":
                continue
            change = next((c for c in region if local(c.tag) in _KINDS), None)
            if change is None:
                continue
            deleted = _Walker()
            deleted.block(change)
            self.regions[attr(region, "id") or ""] = (
                _KINDS[local(change.tag)],
                child_text(change, "creator"),
                iso_date(child_text(change, "date")),
                "\n".join(line for line in deleted.lines if line),
            )


class _Walker:
    def __init__(self, changes: _Changes | None = None) -> None:
        self.lines: list[str] = []
        self.notes: list[Annotation] = []
        self.changes = changes or _Changes()

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
                elif name == "tracked-changes":
                    self.changes.read(node)
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
                inner = _Walker(self.changes)
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
        starts = dict.fromkeys(self.changes.open, 0)  # insertions open from before
        self._inline(element, out, starts)
        for key, start in starts.items():  # still open: goes on in the next paragraph
            self.changes.open[key].append("".join(out[start:]) + "\n")
        return "".join(out).strip()

    def _inline(self, element: etree._Element, out: list[str], starts: dict[str, int]) -> None:
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
            elif name == "change-start":
                key = attr(node, "change-id") or ""
                starts[key] = len(out)
                self.changes.open.setdefault(key, [])
            elif name == "change-end":
                key = attr(node, "change-id") or ""
                if key in starts:
                    pieces = self.changes.open.pop(key, []) + out[starts.pop(key) :]
                    self._change(key, "".join(pieces), out)
            elif name == "change":  # a point: a deletion's place
                self._change(attr(node, "change-id") or "", None, out)
            elif name in ("annotation-end", "note-citation"):
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
                self._inline(node, out, starts)
            if node.tail:
                out.append(node.tail)

    def _change(self, key: str, inserted: str | None, out: list[str]) -> None:
        region = self.changes.regions.get(key)
        if region is None:
            return
        kind, author, date, deleted = region
        text = (inserted if kind == "insertion" else deleted) or ""
        if kind == "format" or not text.strip():
            return
        self.notes.append(
            Annotation(
                kind=kind,
                text=text.strip(),
                author=author,
                date=date,
                key=f"change-{key}",
                anchor="".join(out).strip()[-80:],
            )
        )

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
