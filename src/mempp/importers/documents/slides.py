"""PowerPoint (.pptx): each slide's text in presentation order (shapes, tables), then its
speaker notes; slide comments, legacy (``commentAuthors.xml``) and modern (``authors.xml``),
as annotations with their writer and date.

Read from the package's XML: python-pptx gives shapes' text frames but not comments, and took
5-20x longer on the samples (it builds every shape's object model). A legacy comment's
``dt`` is local time; its ``timeZoneBias`` (minutes, UTC = local + bias), where PowerPoint
wrote one, makes it UTC, else the zone is called unknown.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from mempp.importers.documents.common import (
    Annotation,
    Extracted,
    Package,
    Unreadable,
    attr,
    clean,
    core_properties,
    iso_date,
    local,
)
from mempp.importers.documents.ooxml import R_ID, drawing_text, relationships

if TYPE_CHECKING:
    from lxml import etree


def extract(path: Path, max_chars: int) -> Extracted:
    with Package(path, "PowerPoint presentation") as package:
        package.require("ppt/presentation.xml")
        slides = _slide_parts(package)
        authors = _authors(package)
        blocks: list[str] = []
        annotations: list[Annotation] = []
        size = 0
        for number, part in enumerate(slides, start=1):
            lines = drawing_text(package.xml(part))
            rels = relationships(package, part)
            for kind, target in rels.values():
                if kind == "notesSlide" and package.has(target):
                    notes = drawing_text(package.xml(target))
                    if notes:
                        lines.append("Notes: " + "\n".join(notes))
                elif kind in ("comments", "modernComment") and package.has(target):
                    annotations.extend(_comments(package.xml(target), authors, number))
            block = "\n".join(lines)
            size += len(block)
            if size > max_chars:
                raise Unreadable(f"its text passes {max_chars:,} characters by slide {number}")
            if block:
                blocks.append(block)
        extracted = Extracted(text="\n\n".join(blocks))
        extracted.meta["slides"] = len(slides)
        core_properties(package, extracted, "pptx")
        extracted.annotations.extend(annotations)
    return extracted


def _slide_parts(package: Package) -> list[str]:
    rels = relationships(package, "ppt/presentation.xml")
    order = []
    for node in package.xml("ppt/presentation.xml").iter():
        if local(node.tag) == "sldId":
            target = rels.get(node.get(R_ID) or "")
            if target is not None and package.has(target[1]):
                order.append(target[1])
    return order


def _authors(package: Package) -> dict[str, str]:
    """Comment author id -> name, from the legacy list and the modern one."""
    names: dict[str, str] = {}
    for part in ("ppt/commentAuthors.xml", "ppt/authors.xml"):
        if package.has(part):
            for node in package.xml(part):
                if local(node.tag) in ("cmAuthor", "author"):
                    name = clean(attr(node, "name"))
                    if name:
                        names[attr(node, "id") or ""] = name
    return names


def _comments(root: etree._Element, authors: dict[str, str], slide: int) -> list[Annotation]:
    """A slide's comments; a modern comment's replies (``replyLst``) are comments of their
    own, each by its writer."""
    found: list[Annotation] = []
    for node in root:
        if local(node.tag) != "cm":
            continue
        _comment(node, authors, slide, found)
        for replies in node:
            if local(replies.tag) == "replyLst":
                for reply in replies:
                    if local(reply.tag) == "reply":
                        _comment(reply, authors, slide, found)
    return found


def _comment(
    node: etree._Element, authors: dict[str, str], slide: int, found: list[Annotation]
) -> None:
    # Its own text only: a legacy comment's <p:text>, a modern one's <p188:txBody>.
    text = "\n".join(
        "\n".join(drawing_text(part)) if local(part.tag) == "txBody" else "".join(part.itertext())
        for part in node
        if local(part.tag) in ("text", "txBody")
    ).strip()
    if not text:
        return
    date, note = _date(node)
    key = attr(node, "idx") or attr(node, "id") or str(len(found) + 1)
    found.append(
        Annotation(
            kind="comment",
            text=text,
            author=authors.get(attr(node, "authorId") or ""),
            date=date,
            key=f"slide-{slide}-comment-{attr(node, 'authorId') or ''}-{key}",
            anchor=f"slide {slide}",
            date_note=note,
        )
    )


def _date(node: etree._Element) -> tuple[datetime | None, str | None]:
    modern = iso_date(attr(node, "created"))
    if modern is not None:
        return modern, None
    raw = attr(node, "dt")
    moment = iso_date(raw)
    if moment is None:
        return None, None
    bias = next(
        (attr(n, "timeZoneBias") for n in node.iter() if local(n.tag) == "threadingInfo"),
        None,
    )
    if bias is not None and bias.lstrip("-").isdigit():
        return (moment.replace(tzinfo=None) + timedelta(minutes=int(bias))).replace(
            tzinfo=UTC
        ), None
    return moment.replace(tzinfo=None), "local time of the writer (no zone written)"
