"""The Notion importer: a workspace or page export, "Markdown & CSV" or "HTML", as Notion
delivers it (a zip holding ``Export-…-Part-N.zip`` zips), a plain zip, or unpacked, into one
document per page and per database row.

- author: a ``Created by`` property when the page has one (Notion's export names no author
  otherwise);
- date: the row's or page's first date property — ``Date``, ``Created``, ``Created time``, a
  property whose name says date or time, else any property whose value is a date (Notion writes
  ``December 4, 2024 8:45 AM`` in the exporter's wall-clock time, no zone); a page title that
  is a date mention (``@February 5, 2025``) dates its page; every date property in metadata;
- thread: ``notion://PAGE_ID`` (the 32-hex id Notion puts in every file name), one per page;
- text: the page as Markdown (HTML pages made text by inscriptis), title first;
- tags: ``page``, or the database's name for its rows;
- source: the thread URI.

A database is a CSV (``Name.csv``, and ``Name_all.csv`` with every property) and a folder of
row pages: a row with its page is read from the page, which has the properties and the body;
a row without one from the CSV. A ``Last edited time`` and a ``Status`` give a state record
(``Task status: Done``) dated by the edit. Zips inside the zip are opened with the same size
caps; a nested zip that would pass them is reported and the rest is read.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, MemberError, Tree, open_tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.inputs import decode_text, element_text, hidden, located, open_input
from mempp.records import Document

_ID = re.compile(r"\s([0-9a-f]{32})(?:\.[A-Za-z]+)?$")
_PROPERTY = re.compile(r"^([^:\n]{1,80}): (.*)$")
_NOTION_DATE = re.compile(
    r"@?(?P<month>January|February|March|April|May|June|July|August|September|October|"
    r"November|December) (?P<day>\d{1,2}), (?P<year>\d{4})"
    r"(?: (?P<hour>\d{1,2}):(?P<minute>\d{2}) ?(?P<half>AM|PM)?)?"
)
_ISO_DAY = re.compile(r"^(\d{4})[-/](\d{2})[-/](\d{2})")
_MONTHS = {
    name: number
    for number, name in enumerate(
        "January February March April May June July August September October November "
        "December".split(),
        start=1,
    )
}
_DATE_NAMES = ("date", "created", "created time", "created at", "day", "due", "when")
MAX_NESTING = 2


class NotionImporter:
    """Reads Notion exports. ``max_unpacked``/``max_member`` cap every zip, in bytes."""

    name = "notion"
    description = "a Notion export (Markdown & CSV or HTML): the zip, a zip in it, or unpacked"

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        try:
            if where.is_dir():
                names = [p.name for p in where.iterdir()]
            elif where.suffix.lower() == ".zip":
                import zipfile

                with zipfile.ZipFile(where) as archive:
                    names = [PurePosixPath(n).name for n in archive.namelist()[:50]]
            else:
                return False
        except Exception:  # a zip too broken to list is no export this can recognize
            return False
        return any(_ID.search(n) for n in names) or any(
            n.startswith("Export-") and n.endswith(".zip") for n in names
        )

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_input(path, max_unpacked=self.max_unpacked, max_member=self.max_member)
        try:
            names = tree.names()
            if not any(page_id(n) or n.lower().endswith(".zip") for n in names):
                raise InvalidInput(
                    f"{path}: not a Notion export (no page named 'Title <32-hex id>' in it)"
                )
            if warning is not None:
                yield Notice(tree.label, warning)
            yield from _Export(self).tree(tree, 0)
        finally:
            tree.close()


class _Nested:
    """A zip inside the export, named in locations by where it sits."""

    def __init__(self, inner: Tree, label: str) -> None:
        self._inner = inner
        self.label = label

    def names(self) -> list[str]:
        return self._inner.names()

    def read(self, name: str) -> bytes:
        return self._inner.read(name)

    def close(self) -> None:
        self._inner.close()


def page_id(name: str) -> str | None:
    match = _ID.search(PurePosixPath(name).name)
    return match.group(1) if match else None


def _title_of(name: str) -> str:
    """A page's title from its file name: the name without Notion's id and suffix."""
    stem = (
        PurePosixPath(name).stem
        if PurePosixPath(name).suffix in (".md", ".html", ".csv")
        else PurePosixPath(name).name
    )
    match = _ID.search(stem)
    return stem[: match.start()].strip() if match else stem.strip()


def notion_date(value: str) -> date | datetime | None:
    """A date as Notion's export writes it (``December 4, 2024 8:45 AM``, a range's start,
    ``@`` mentions, ``2024/12/04``), ``None`` when the value is no date."""
    text = value.strip()
    match = _NOTION_DATE.search(text)
    if match and match.start() <= 1:
        try:
            day = date(
                int(match.group("year")), _MONTHS[match.group("month")], int(match.group("day"))
            )
        except ValueError:
            return None
        if match.group("hour") is None:
            return day
        hour = int(match.group("hour")) % 12 if match.group("half") else int(match.group("hour"))
        if match.group("half") == "PM":
            hour += 12
        try:
            return datetime(day.year, day.month, day.day, hour, int(match.group("minute")))
        except ValueError:
            return None
    iso = _ISO_DAY.match(text)
    if iso:
        try:
            return date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3)))
        except ValueError:
            return None
    return None


def _date_property(properties: dict[str, str]) -> tuple[str | None, date | datetime | None]:
    named = sorted(
        properties,
        key=lambda k: (
            _DATE_NAMES.index(k.lower()) if k.lower() in _DATE_NAMES else len(_DATE_NAMES),
            0 if ("date" in k.lower() or "time" in k.lower()) else 1,
        ),
    )
    for key in named:
        if key.lower() in ("last edited time", "last edited"):
            continue
        moment = notion_date(properties[key])
        if moment is not None:
            return key, moment
    return None, None


class _Export:
    def __init__(self, importer: NotionImporter) -> None:
        self.importer = importer
        self.budget = importer.max_unpacked

    def tree(self, tree: Tree, depth: int) -> Iterator[Item]:
        names = tree.names()
        databases = self._databases(names)
        # A database's rows: the titles and properties of its row pages, read first, so
        # that a CSV row with its page is not stored twice. The CSV writes a date mention
        # resolved ("@August 6, 2025") where the page's name keeps it relative ("@Today"):
        # the properties then match where the title does not.
        self.rows: dict[str, tuple[set[str], set[frozenset[tuple[str, str]]]]] = {}
        later: list[tuple[str, str]] = []
        for name in names:
            where = located(tree, name)
            lower = name.lower()
            if hidden(name):
                yield Skipped(where, "hidden file")
            elif lower.endswith(".zip"):
                yield from self._nested(tree, name, where, depth)
            elif PurePosixPath(name).name == "index.html":
                yield Skipped(where, "export index")
            elif lower.endswith(".csv"):
                later.append((name, where))
            elif lower.endswith((".md", ".html")):
                folder = str(PurePosixPath(name).parent)
                yield from self._page(tree, name, where, folder, databases.get(folder))
            else:
                yield Skipped(where, "attachment")
        for name, where in later:
            yield from self._csv(tree, name, where, databases)

    @staticmethod
    def _databases(names: list[str]) -> dict[str, str]:
        """Folder of row pages -> the database's name, for every database CSV."""
        found: dict[str, str] = {}
        for name in names:
            if name.lower().endswith(".csv"):
                stem = PurePosixPath(name).stem.removesuffix("_all")
                folder = str(PurePosixPath(name).parent / stem)
                found[folder] = _title_of(stem)
        return found

    def _nested(self, tree: Tree, name: str, where: str, depth: int) -> Iterator[Item]:
        if depth >= MAX_NESTING:
            yield Skipped(where, "zip nested too deep", "a zip in a zip in a zip is not opened")
            return
        try:
            data = tree.read(name)
        except MemberError as exc:
            yield ItemError(where, str(exc))
            return
        self.budget -= len(data)
        with tempfile.TemporaryDirectory(prefix="mempp-notion-") as folder:
            temp = Path(folder) / "inner.zip"
            temp.write_bytes(data)
            del data
            try:
                inner, warning = open_tree(
                    temp, max_unpacked=max(self.budget, 0), max_member=self.importer.max_member
                )
            except InvalidInput as exc:
                yield ItemError(where, str(exc).replace(str(temp), where))
                return
            nested = _Nested(inner, where)
            try:
                if warning is not None:
                    yield Notice(where, warning)
                yield from self.tree(nested, depth + 1)
            except InvalidInput as exc:  # the cap reached while unpacking
                yield ItemError(where, str(exc).replace(str(temp), where))
            finally:
                nested.close()

    def _text(self, tree: Tree, name: str, where: str) -> Iterator[Item]:
        try:
            raw = tree.read(name)
        except MemberError as exc:
            yield ItemError(where, str(exc))
            return None
        text, warning = decode_text(raw)
        if warning is not None:
            yield Notice(where, warning)
        return text

    def _page(
        self, tree: Tree, name: str, where: str, folder: str, database: str | None
    ) -> Iterator[Item]:
        text = yield from self._text(tree, name, where)
        if text is None:
            return
        try:
            if name.lower().endswith(".html"):
                parsed = _html_page(text)
                if parsed is None:
                    yield Skipped(
                        where,
                        "not a Notion page",
                        "an HTML file without Notion's <article class=page>",
                    )
                    return
                title, properties, body = parsed
            else:
                title, properties, body = _markdown_page(text, database is not None)
            if database is not None:
                titles, keys = self.rows.setdefault(folder, (set(), set()))
                titles.add(title or _title_of(name))
                keys.add(frozenset(properties.items()))
            yield from self._document(
                where, name, title or _title_of(name), properties, body, database
            )
        except MemppError as exc:
            yield ItemError(where, str(exc))

    def _document(
        self,
        where: str,
        name: str,
        title: str,
        properties: dict[str, str],
        body: str,
        database: str | None,
    ) -> Iterator[Item]:
        own = page_id(name)
        uri = f"notion://{own}" if own else f"notion://{name}"
        key, moment = _date_property(properties)
        if moment is None and title.startswith("@"):
            key, moment = "title", notion_date(title)
        meta: dict[str, Any] = {"kind": "row" if database else "page", "title": title}
        if own:
            meta["page_id"] = own
        if database:
            meta["database"] = database
        dates = {k: notion_date(v) for k, v in properties.items()}
        iso = {k: v.isoformat() for k, v in dates.items() if v is not None}
        if iso:
            meta["dates"] = iso
        if properties:
            meta["properties"] = properties
        if key:
            meta["dated_by"] = key
        author = properties.get("Created by") or properties.get("Created By") or None
        yield Document.create(
            body if body.strip() else title,
            author=author,
            date=moment,
            tags=[database] if database else ["page"],
            source=uri,
            thread=uri,
            metadata=meta,
        )
        edited = dates.get("Last edited time") or dates.get("Last edited")
        if edited is None:
            return
        # What the page said held from its last edit to the export: the status if it has one.
        status = properties.get("Status")
        event = "status" if status else "edited"
        yield Document.create(
            f"{title} status: {status}" if status else f"{title} last edited",
            author=properties.get("Last edited by") or None,
            date=edited,
            tags=[database or "page", "state"],
            source=f"{uri}#{event}-{edited.isoformat()}",
            thread=uri,
            metadata={"kind": "state", "event": event, "title": title},
        )

    def _csv(self, tree: Tree, name: str, where: str, databases: dict[str, str]) -> Iterator[Item]:
        stem = PurePosixPath(name).stem
        folder = str(PurePosixPath(name).parent / stem.removesuffix("_all"))
        if not stem.endswith("_all") and f"{PurePosixPath(name).parent / stem}_all.csv" in {
            str(PurePosixPath(n)) for n in tree.names()
        }:
            yield Skipped(where, "database view", f"the same rows as {stem}_all.csv, which is read")
            return
        text = yield from self._text(tree, name, where)
        if text is None:
            return
        try:
            rows = list(csv.reader(io.StringIO(text.lstrip("\ufeff"))))
        except csv.Error as exc:
            yield ItemError(where, f"unreadable CSV: {exc}")
            return
        if not rows:
            yield Skipped(where, "empty database")
            return
        header = [h.strip() for h in rows[0]]
        database = databases.get(folder, _title_of(stem.removesuffix("_all")))
        titles, keys = self.rows.get(folder, (set(), set()))
        for number, row in enumerate(rows[1:], start=2):
            location = f"{where}:{number}"
            if not any(cell.strip() for cell in row):
                yield Skipped(location, "empty row")
                continue
            title = row[0].strip()
            properties = {
                h: v.strip() for h, v in zip(header[1:], row[1:], strict=False) if h and v.strip()
            }
            if title in titles or frozenset(properties.items()) in keys:
                yield Skipped(location, "database row read from its page")
                continue
            body = "\n".join([f"# {title}", "", *(f"{k}: {v}" for k, v in properties.items())])
            try:
                # No page, so no id of its own: the database's id and the row's title.
                yield from self._document(
                    location,
                    f"{page_id(folder) or folder}/{title}",
                    title,
                    properties,
                    body,
                    database,
                )
            except MemppError as exc:
                yield ItemError(location, str(exc))


def _markdown_page(text: str, in_database: bool) -> tuple[str, dict[str, str], str]:
    """Title, properties (for a database row: the ``Key: value`` lines after the title) and
    the whole page as its text."""
    lines = text.lstrip("\ufeff").splitlines()
    title = lines[0][2:].strip() if lines and lines[0].startswith("# ") else ""
    properties: dict[str, str] = {}
    if in_database:
        position = 1
        while position < len(lines) and not lines[position].strip():
            position += 1
        while position < len(lines) and (match := _PROPERTY.match(lines[position])):
            properties[match.group(1).strip()] = match.group(2).strip()
            position += 1
    return title, properties, text.strip()


def _html_page(text: str) -> tuple[str, dict[str, str], str] | None:
    import lxml.html

    try:
        root = lxml.html.fromstring(text)
    except (ValueError, lxml.etree.ParserError):
        return None
    article = root.xpath('//article[contains(concat(" ", @class, " "), " page ")]')
    if not article:
        return None
    heading = article[0].xpath('.//h1[contains(@class, "page-title")]')
    title = " ".join(heading[0].text_content().split()) if heading else ""
    properties: dict[str, str] = {}
    for row in article[0].xpath('.//table[contains(@class, "properties")]//tr'):
        header, cells = row.xpath("./th"), row.xpath("./td")
        if header and cells:
            key = " ".join(header[0].text_content().split())
            value = " ".join(cells[0].text_content().split())
            if key and value:
                properties[key] = value
    body = article[0].xpath('.//div[contains(@class, "page-body")]')
    text_body = element_text(body[0]) if body else ""
    lines = [title, *(f"{k}: {v}" for k, v in properties.items()), "", text_body]
    return title, properties, "\n".join(lines).strip()
