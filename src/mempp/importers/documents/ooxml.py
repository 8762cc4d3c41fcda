"""What Word, PowerPoint and Excel packages share beyond core properties: relationships
(which part a part points to) and DrawingML paragraphs (the text of shapes and tables)."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from mempp.importers.documents.common import Package, attr, local

if TYPE_CHECKING:
    from lxml import etree


R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def relationships(package: Package, part: str) -> dict[str, tuple[str, str]]:
    """``part``'s relationships: id -> (type's last word, target part's name)."""
    folder, name = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", name + ".rels")
    if not package.has(rels):
        return {}
    found = {}
    for rel in package.xml(rels):
        if local(rel.tag) != "Relationship" or attr(rel, "TargetMode") == "External":
            continue
        target = attr(rel, "Target") or ""
        kind = (attr(rel, "Type") or "").rsplit("/", 1)[-1]
        if target.startswith("/"):
            resolved = target.lstrip("/")
        else:
            resolved = posixpath.normpath(posixpath.join(folder, target))
        found[attr(rel, "Id") or ""] = (kind, resolved)
    return found


def drawing_text(root: etree._Element) -> list[str]:
    """The lines of DrawingML text under ``root`` in document order: one per paragraph, a
    table's row as ``cell | cell``; slide-number fields left out (they repeat on every
    slide)."""
    lines: list[str] = []
    _walk(root, lines)
    return [line for line in lines if line.strip()]


def _walk(element: etree._Element, lines: list[str]) -> None:
    for node in element:
        name = local(node.tag)
        if name == "tbl":
            for row in node:
                if local(row.tag) == "tr":
                    cells = [
                        " ".join(_paragraph(p) for p in cell.iter() if local(p.tag) == "p")
                        for cell in row
                        if local(cell.tag) == "tc"
                    ]
                    lines.append(" | ".join(c.strip() for c in cells))
        elif name == "p" and _is_drawing(node):
            lines.append(_paragraph(node))
        elif name == "AlternateContent":
            choice = next((c for c in node if local(c.tag) == "Choice"), None)
            if choice is not None:
                _walk(choice, lines)
        else:
            _walk(node, lines)


def _is_drawing(node: etree._Element) -> bool:
    return isinstance(node.tag, str) and node.tag.startswith(
        "{http://schemas.openxmlformats.org/drawingml/"
    )


def _paragraph(paragraph: etree._Element) -> str:
    out = []
    for node in paragraph.iter():
        name = local(node.tag)
        if name == "fld" and attr(node, "type") == "slidenum":
            continue
        if name == "t" and not _in_slide_number(node):
            out.append(node.text or "")
        elif name == "br":
            out.append("\n")
    return "".join(out).strip()


def _in_slide_number(node: etree._Element) -> bool:
    parent = node.getparent()
    return parent is not None and local(parent.tag) == "fld" and attr(parent, "type") == "slidenum"
