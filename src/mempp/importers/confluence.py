"""The Confluence importer: an HTML export (Space tools → Export → HTML, or one page's
"Export to HTML"), as a single page file, a folder or a zip, into one document per page and
one per page comment.

- author: the page's last editor (``last modified by``), else its creator (``Created by``);
  a comment's poster (``Posted by … at …``); creator and editor in metadata;
- date: the page's last-modified date (``… on Jan 11, 2018`` — a localized month name: English,
  German, French, Spanish, Chinese and Japanese ones are read; no time zone in the export, so
  the day is stored), else its created date; a comment's ``at`` date and time;
- thread: ``confluence://SPACE/PAGE`` (the page id from the file name or its attachments'
  folder, else its title), shared by the page's comments;
- text: the page title, a blank line, the page body made text (inscriptis; the table of
  contents macro, scripts and styles dropped), then ``[attachment: name]`` lines;
- tags: the space name and ``page`` / ``comment``; the breadcrumb path in metadata;
- source: the thread URI; a comment ``…#comment-ID``.

A page edited between two exports has a new last-modified date and text: a new record, the
old kept. A space's ``index.html`` (its list of pages), images, styles and attachments are
skipped by reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import PurePosixPath
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, MemberError, Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.inputs import (
    FileTree,
    Repeats,
    decode_text,
    element_text,
    hidden,
    located,
    open_input,
)
from mempp.records import Document

_MONTHS: dict[str, int] = {}
for _number, _names in enumerate(
    (
        "jan january januar janvier janv enero ene",
        "feb february februar février févr febrero",
        "mar march märz mars marzo",
        "apr april avril abril avr",
        "may mai mayo",
        "jun june juni juin junio",
        "jul july juli juillet juil julio",
        "aug august août agosto ago",
        "sep sept september septembre septiembre",
        "oct october oktober okt octobre octubre",
        "nov november novembre noviembre",
        "dec december dezember dez décembre déc diciembre dic",
    ),
    start=1,
):
    for _name in _names.split():
        _MONTHS[_name] = _number
_CJK_MONTHS = {
    "一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6,
    "七": 7, "八": 8, "九": 9, "十": 10, "十一": 11, "十二": 12,
}  # fmt: skip
_DATE = re.compile(
    r"(?P<month>[^\W\d_]+\.?|[一二三四五六七八九十]{1,2}月|\d{1,2}月)\s*(?P<day>\d{1,2}),?\s*"
    r"(?P<year>\d{4})(?:\s+(?P<hour>\d{1,2}):(?P<minute>\d{2}))?"
)
_PAGE_ID = re.compile(r"(?:^|_)(\d{3,})\.html?$")
_ATTACHMENT_DIR = re.compile(r"attachments/(\d+)/")
_POSTED = re.compile(r"Posted by\s+(?P<who>.+?)\s+at\s+(?P<when>.+?)\s*(?:\||$)", re.S)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
PAGE_SUFFIXES = (".html", ".htm")


class ConfluenceImporter:
    """Reads Confluence HTML exports. ``max_unpacked``/``max_member`` cap a zip, in bytes."""

    name = "confluence"
    description = "a Confluence HTML export: one page's .html, or a space's folder or zip"

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = os.fspath(path)
        if where.lower().endswith(".zip") and os.path.isfile(where):
            return _space_zip(where)
        if os.path.isdir(where):
            where = os.path.join(where, "index.html")
        if not os.path.isfile(where) or not where.lower().endswith(PAGE_SUFFIXES):
            return False
        try:
            with open(where, "rb") as handle:
                return _is_confluence(handle.read(65536).decode("utf-8", "replace"))
        except OSError:
            return False

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_input(path, max_unpacked=self.max_unpacked, max_member=self.max_member)
        try:
            if isinstance(tree, FileTree):
                name = tree.names()[0]
                try:
                    head = tree.read(name)[:65536].decode("utf-8", "replace")
                except MemberError as exc:
                    raise InvalidInput(f"{path}: {exc}") from None
                if not _is_confluence(head):
                    raise InvalidInput(
                        f"{path}: not a Confluence HTML export (no Confluence page markup)"
                    )
            if warning is not None:
                yield Notice(tree.label, warning)
            for name in tree.names():
                yield from _file(tree, name)
        finally:
            tree.close()


def _space_zip(path: str) -> bool:
    """A space export's zip: pages and the export's own stylesheet, ``styles/site.css``."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return any(n.endswith("styles/site.css") for n in names) and any(
        n.lower().endswith(PAGE_SUFFIXES) for n in names
    )


def _is_confluence(head: str) -> bool:
    return (
        "wiki-content" in head
        or "Document generated by Confluence" in head
        or ('id="main-content"' in head and "confluence" in head.lower())
    )


def parse_day(text: str) -> tuple[date | datetime | None, str | None]:
    """The first date in ``text`` as Confluence writes it, and the words it was read from."""
    for match in _DATE.finditer(text):
        word = match.group("month").rstrip(".").lower()
        month = _MONTHS.get(word)
        if month is None and word.endswith("月"):
            number = word[:-1]
            month = int(number) if number.isdigit() else _CJK_MONTHS.get(number)
        if month is None:
            continue
        try:
            day = date(int(match.group("year")), month, int(match.group("day")))
        except ValueError:
            continue
        if match.group("hour"):
            return datetime(
                day.year, day.month, day.day, int(match.group("hour")), int(match.group("minute"))
            ), match.group(0)
        return day, match.group(0)
    return None, None


def _file(tree: Tree, name: str) -> Iterator[Item]:
    where = located(tree, name)
    path = PurePosixPath(name)
    if hidden(name):
        yield Skipped(where, "hidden file")
        return
    if path.suffix.lower() not in PAGE_SUFFIXES:
        kind = "attachment" if "attachments" in path.parts else "not a page file"
        yield Skipped(where, kind)
        return
    try:
        raw = tree.read(name)
    except MemberError as exc:
        yield ItemError(where, str(exc))
        return
    text, warning = decode_text(raw)
    if warning is not None:
        yield Notice(where, warning)
    try:
        yield from _page(where, name, text)
    except MemppError as exc:
        yield ItemError(where, str(exc))


def _page(where: str, name: str, text: str) -> Iterator[Item]:
    import lxml.html

    try:
        root = lxml.html.fromstring(_XML_DECLARATION.sub("", text, count=1) or "<html/>")
    except (ValueError, lxml.etree.ParserError) as exc:
        yield ItemError(where, f"unreadable HTML: {exc}")
        return
    main = root.xpath('//div[@id="main-content"]')
    if not main:
        if not _is_confluence(text[:65536]):
            yield Skipped(where, "not a Confluence page", "no Confluence page markup in it")
        elif root.xpath('//*[contains(text(), "Available Pages")]'):
            yield Skipped(where, "space index")
        else:
            yield Skipped(where, "not a Confluence page", "no page content (main-content)")
        return
    if main[0].xpath('.//*[contains(text(), "Available Pages")]'):
        yield Skipped(where, "space index")
        return
    title_text = (root.findtext(".//title") or "").strip()
    space, _, page_title = title_text.partition(" : ")
    if not page_title:
        space, page_title = "", title_text
    crumbs = [a.text_content().strip() for a in root.xpath('//ol[@id="breadcrumbs"]//a')]
    space = space.strip() or (crumbs[0] if crumbs else "")
    page_title = page_title.strip() or PurePosixPath(name).stem
    meta_div = root.xpath('//div[contains(@class, "page-metadata")]')
    creator = editor = None
    modified = created = None
    said = ""
    if meta_div:
        block = meta_div[0]
        said = " ".join(block.text_content().split())
        creator = _span(block, "author")
        editor = _span(block, "editor")
        before, sep, after = said.partition("last modified")
        created, _ = parse_day(before)
        modified, _ = parse_day(after) if sep else (None, None)
    when = modified or created
    if when is None:
        yield Notice(where, f"no page date in {said!r}: stored undated" if said else "no page date")
    author = editor or creator
    if author is None:
        yield Notice(where, "no author in the page metadata: stored without one")
    page_id = _page_id(name, text)
    uri = f"confluence://{space or 'space'}/{page_id or page_title}"
    attachments = [
        a.text_content().strip()
        for a in root.xpath('//div[contains(@class, "greybox")]//a')
        if a.text_content().strip()
    ]
    comments_section = _comments(root)
    body = _body(main[0])
    parts = [page_title, body, "\n".join(f"[attachment: {a}]" for a in attachments)]
    footer = " ".join(" ".join(root.xpath('//div[@id="footer"]//text()')).split())
    generated, _ = parse_day(footer.partition("generated by Confluence")[2])
    meta: dict[str, Any] = {"kind": "page", "space": space, "title": page_title}
    for key, value in (
        ("page_id", page_id),
        ("creator", creator),
        ("editor", editor),
        ("created", created.isoformat() if created else None),
        ("modified", modified.isoformat() if modified else None),
        ("exported", generated.isoformat() if generated else None),
        ("ancestors", crumbs or None),
        ("attachments", attachments or None),
    ):
        if value:
            meta[key] = value
    yield Document.create(
        "\n\n".join(p for p in parts if p.strip()),
        author=author,
        date=when,
        tags=[t for t in (space, "page") if t],
        source=uri,
        thread=uri,
        metadata=meta,
    )
    repeats = Repeats()
    for number, (cid, who, posted, comment_text) in enumerate(comments_section, start=1):
        location = f"{where}:comment {cid or number}"
        if posted is None:
            yield Notice(location, "no readable 'Posted by … at …' date: stored undated")
        if who is None:
            yield Notice(location, "no poster: stored without an author")
        doc = Document.create(
            comment_text,
            author=who,
            date=posted,
            tags=[t for t in (space, "comment") if t],
            source=f"{uri}#comment-{cid or number}",
            thread=uri,
            metadata={"kind": "comment", "space": space, "page": page_title}
            | ({"comment_id": cid} if cid else {}),
        )
        told = repeats.check(doc, None, location)
        yield told if told is not None else doc


def _span(block: Any, kind: str) -> str | None:
    for span in block.iter("span"):
        if kind in (span.get("class") or "").split():
            text = " ".join(span.text_content().split())
            if text:
                return text
    return None


def _page_id(name: str, text: str) -> str | None:
    match = _PAGE_ID.search(PurePosixPath(name).name)
    if match:
        return match.group(1)
    folders = set(_ATTACHMENT_DIR.findall(text))
    return folders.pop() if len(folders) == 1 else None


def _body(main: Any) -> str:

    for macro in main.xpath('.//*[contains(@class, "toc-macro")]'):
        macro.getparent().remove(macro)
    for section in main.xpath('.//div[contains(@class, "pageSection")]'):
        section.getparent().remove(section)  # comments and attachments, read on their own
    return element_text(main)


def _comments(root: Any) -> list[tuple[str | None, str | None, datetime | date | None, str]]:
    """``(id, poster, date, text)`` of each comment of the page's Comments section."""

    found = []
    for header in root.xpath('//h2[@id="comments"]'):
        section = header.getparent().getparent()
        for cell in section.xpath(".//td"):
            anchor = cell.xpath('.//a[starts-with(@name, "comment-")]')
            cid = anchor[0].get("name").removeprefix("comment-") if anchor else None
            posted_div = [
                d for d in cell.xpath(".//div") if "Posted by" in " ".join(d.text_content().split())
            ]
            who = posted = None
            if posted_div:
                line = " ".join(posted_div[-1].text_content().split())
                match = _POSTED.search(line)
                if match:
                    who = match.group("who").strip() or None
                    posted, _ = parse_day(match.group("when"))
                posted_div[-1].getparent().remove(posted_div[-1])
            text = element_text(cell)
            if text.strip() or who:
                found.append((cid, who, posted, text))
    return found
