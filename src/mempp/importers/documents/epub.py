"""EPUB (.epub): the chapters in spine (reading) order, each XHTML file made text as HTML
is; author and dates from the OPF package metadata: ``dc:creator`` (all of them), the
EPUB 3 ``dcterms:modified`` (or an EPUB 2 ``dc:date`` of event ``modification``) as the
date, the publication ``dc:date`` kept as created.

Plain zip + OPF rather than EbookLib: EbookLib is AGPL-licensed (mempp is not) and loads
every item of the book into memory; the container and package files are two small XML
documents.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from urllib.parse import unquote

from mempp.importers.documents import html
from mempp.importers.documents.common import (
    Extracted,
    Package,
    Unreadable,
    attr,
    clean,
    iso_date,
    local,
)


def extract(path: Path, max_chars: int) -> Extracted:
    with Package(path, "EPUB book") as package:
        package.require("META-INF/container.xml")
        opf = next(
            (
                attr(node, "full-path")
                for node in package.xml("META-INF/container.xml").iter()
                if local(node.tag) == "rootfile" and attr(node, "full-path")
            ),
            None,
        )
        if opf is None or not package.has(opf):
            raise Unreadable("an EPUB whose container names no package (.opf) file it holds")
        root = package.xml(opf)
        extracted = Extracted(text="")
        _metadata(root, extracted)
        folder = posixpath.dirname(opf)
        manifest = {
            attr(item, "id"): posixpath.normpath(
                posixpath.join(folder, unquote(attr(item, "href") or ""))
            )
            for item in root.iter()
            if local(item.tag) == "item"
        }
        chapters, size = [], 0
        for ref in root.iter():
            if local(ref.tag) != "itemref" or attr(ref, "linear") == "no":
                continue
            part = manifest.get(attr(ref, "idref"))
            if part is None or not package.has(part):
                extracted.warnings.append(
                    f"the spine names {attr(ref, 'idref')!r}, not in the book"
                )
                continue
            markup, _ = html.decode(package.read(part))
            chapter = html.page(markup, max_chars).text
            size += len(chapter)
            if size > max_chars:
                raise Unreadable(f"its text passes {max_chars:,} characters; split it to import it")
            if chapter:
                chapters.append(chapter)
        extracted.text = "\n\n".join(chapters)
        extracted.meta["chapters"] = len(chapters)
    return extracted


def _metadata(root: object, extracted: Extracted) -> None:
    creators, published, modified = [], None, None
    for node in root.iter():  # type: ignore[attr-defined]
        name = local(node.tag)
        value = clean("".join(node.itertext()))
        if value is None:
            continue
        if name == "creator":
            creators.append(value)
        elif name == "title" and extracted.title is None:
            extracted.title = value
        elif name == "date":
            event = (attr(node, "event") or "").lower()
            if event == "modification":
                modified = modified or iso_date(_full(value))
            elif published is None:
                published = iso_date(_full(value))
        elif name == "meta" and attr(node, "property") == "dcterms:modified":
            modified = iso_date(_full(value)) or modified
        elif name == "language":
            extracted.meta.setdefault("language", value)
    if creators:
        extracted.author, extracted.author_from = ", ".join(creators), "epub opf dc:creator"
    if modified is not None:
        extracted.modified, extracted.modified_from = modified, "epub opf dcterms:modified"
    if published is not None:
        extracted.created, extracted.created_from = published, "epub opf dc:date"


def _full(value: str) -> str:
    """An OPF date may be a year or a month: the first day of it."""
    if len(value) == 4 and value.isdigit():
        return value + "-01-01"
    if len(value) == 7 and value[4] == "-":
        return value + "-01"
    return value
