"""Reading REST API responses as they are saved to files: one JSON page, pages one after
another (``gh api --paginate`` without ``--slurp``, ``glab api --paginate``), an array of
pages (``--slurp``), one JSON object a line (``--jq '.[]'``), each page optionally preceded by
its HTTP status line and headers (``--include``, or a recorder's ``Header: value`` lines and a
blank line).

A page is read element by element, so a page cut short (a download that stopped) still gives
every element before the cut, and the cut is reported once with its line and column. Nothing
after a cut is read: the rest of the file cannot be told apart from garbage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mempp.importers.archive import MemberError, Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.inputs import hidden, located

_SPACE = re.compile(r"[ \t\r\n]*")
_BLANK_LINE = re.compile(r"\r?\n[ \t]*\r?\n")
_HEADER = re.compile(r"^([A-Za-z0-9!#$%&'*+.^_`|~-]+):[ \t]*(.*?)[ \t]*$")
_STATUS = re.compile(r"^HTTP/[0-9.]+[ \t]+(\d{3})\b")
_DECODER = json.JSONDecoder()


@dataclass(slots=True)
class Response:
    """What preceded a page: its status (when recorded) and headers, names lower-cased."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Entry:
    """One element of a page: ``ordinal`` counts elements through the file from 1."""

    page: int
    ordinal: int
    value: Any
    response: Response


@dataclass(frozen=True, slots=True)
class Cut:
    """Where reading stopped: the file is damaged from here on."""

    page: int
    ordinal: int  # the element that could not be read
    reason: str


def file_entries(tree: Tree, name: str) -> Iterator[Item | tuple[str, Entry]]:
    """The elements of file ``name`` of ``tree``, each with its location (``FILE:N``), and
    the items that account for what is not an element: a hidden or unreadable file, one
    that is no API response, a page recorded with an error status, a cut."""
    where = located(tree, name)
    if hidden(name):
        yield Skipped(where, "hidden file")
        return
    try:
        raw = tree.read(name)
    except MemberError as exc:
        yield ItemError(where, str(exc))
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        yield ItemError(where, f"not UTF-8 text, so not an API response ({exc.reason})")
        return
    if not looks_like_pages(text):
        yield Skipped(where, "not an API response", "neither JSON nor recorded HTTP headers")
        return
    found = 0
    for entry in read_pages(text):
        if isinstance(entry, Response):
            if entry.status is not None and entry.status >= 400:
                yield Notice(where, f"a page recorded with HTTP status {entry.status}")
            continue
        if isinstance(entry, Cut):
            yield ItemError(f"{where}:{entry.ordinal}", entry.reason)
            return
        found += 1
        yield f"{where}:{entry.ordinal}", entry
    if not found:
        yield Skipped(where, "empty page", "an API response without any item")


def looks_like_pages(text: str) -> bool:
    """Does ``text`` start like a saved response (JSON, or a status or header line)?"""
    start = _SPACE.match(text, 0)
    position = start.end() if start else 0
    if text[position : position + 1] in ("[", "{"):
        return True
    first = text[position : position + 200].split("\n", 1)[0].rstrip("\r")
    return bool(_STATUS.match(first) or _HEADER.match(first))


def read_pages(text: str) -> Iterator[Entry | Response | Cut]:
    """The responses (headers) and elements of ``text``, in order; a :class:`Cut` ends it."""
    position, end, page, ordinal = 0, len(text), 0, 0
    response = Response()
    while True:
        position = _skip(text, position)
        if position >= end:
            return
        if text[position] in "[{":
            page += 1
            reader = _Page(text, position, page, ordinal, response)
            yield from reader.entries()
            if reader.cut:
                return
            position, ordinal = reader.position, reader.ordinal
            response = Response()
            continue
        response, position, problem = _headers(text, position)
        if problem is not None:
            yield Cut(page + 1, ordinal + 1, problem)
            return
        yield response


def _skip(text: str, position: int) -> int:
    match = _SPACE.match(text, position)
    return match.end() if match else position


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _headers(text: str, position: int) -> tuple[Response, int, str | None]:
    blank = _BLANK_LINE.search(text, position)
    stop = blank.start() if blank else len(text)
    response = Response()
    for number, line in enumerate(text[position:stop].split("\n")):
        line = line.rstrip("\r")
        status = _STATUS.match(line) if number == 0 else None
        if status is not None:
            response.status = int(status.group(1))
            continue
        header = _HEADER.match(line)
        if header is None:
            where = _line_of(text, position) + number
            return response, stop, f"line {where}: neither JSON nor an HTTP header"
        response.headers[header.group(1).lower()] = header.group(2)
    if blank is None:
        return response, stop, "headers without a body after them (the file is cut short?)"
    return response, blank.end(), None


class _Page:
    """One top-level JSON value: a list read element by element, or an object."""

    def __init__(self, text: str, position: int, page: int, ordinal: int, response: Response):
        self.text, self.position, self.page, self.ordinal = text, position, page, ordinal
        self.response = response
        self.cut = False

    def _fail(self, reason: str) -> Cut:
        self.cut = True
        return Cut(self.page, self.ordinal + 1, reason)

    def _decode(self) -> tuple[Any, Cut | None]:
        try:
            value, self.position = _DECODER.raw_decode(self.text, self.position)
        except json.JSONDecodeError as exc:
            # A file that stops mid-value, without its closing brackets, was cut short.
            cut = not self.text.rstrip().endswith(("]", "}"))
            shown = f"{exc.msg} (the file is cut short)" if cut else exc.msg
            return None, self._fail(
                f"invalid JSON at line {exc.lineno}, column {exc.colno}: {shown}"
            )
        except RecursionError:
            return None, self._fail("JSON nested too deeply")
        return value, None

    def _entry(self, value: Any, depth: int = 0) -> Iterator[Entry]:
        if isinstance(value, list) and depth < 2:  # a page of pages (--slurp); no deeper
            for inner in value:
                yield from self._entry(inner, depth + 1)
            return
        self.ordinal += 1
        yield Entry(self.page, self.ordinal, value, self.response)

    def entries(self) -> Iterator[Entry | Cut]:
        text = self.text
        if text[self.position] == "{":
            value, cut = self._decode()
            if cut is not None:
                yield cut
                return
            # A search result wraps its page: {"total_count": N, "items": [...]}.
            wrapped = isinstance(value, dict) and "total_count" in value
            if wrapped and isinstance(value.get("items"), list):
                yield from self._entry(value["items"])
                return
            yield from self._entry(value)
            return
        self.position += 1
        while True:
            self.position = _skip(text, self.position)
            if self.position >= len(text):
                yield self._fail(
                    f"the page is cut short after element {self.ordinal} "
                    f"(line {_line_of(text, self.position)})"
                )
                return
            if text[self.position] == "]":
                self.position += 1
                return
            value, cut = self._decode()
            if cut is not None:
                yield cut
                return
            yield from self._entry(value)
            self.position = _skip(text, self.position)
            following = text[self.position : self.position + 1]
            if following == ",":
                self.position += 1
            elif following != "]":
                if not following:
                    yield self._fail(
                        f"the page is cut short after element {self.ordinal} "
                        f"(line {_line_of(text, self.position)})"
                    )
                else:
                    line = _line_of(text, self.position)
                    yield self._fail(f"invalid JSON at line {line}: expected ',' or ']'")
                return
