"""Reading documents from files: JSONL, Markdown / text with YAML front matter, the document
formats of :mod:`mempp.importers.documents` (PDF, Office, OpenDocument, EPUB, HTML, RTF), and
folders of them.

Every source yields ``(location, Document | error message)`` items, so one bad line or file
is reported as ``file:line: reason`` and never stops the rest; a document file yields the
importers' own items (:mod:`mempp.importers.base`). A file in a folder that is not read is
yielded as skipped, with why: nothing is left out silently.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TextIO

import yaml

from mempp.errors import InvalidInput
from mempp.importers import base
from mempp.importers.documents.read import SUFFIXES as DOCUMENT_SUFFIXES
from mempp.importers.documents.read import read_document
from mempp.records import Document

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
FIELDS = ("text", "author", "date", "tags", "source", "thread")
# What `mempp export` adds to a line: the store's own, not the document's; not metadata.
EXPORT_FIELDS = ("id", "datetime", "scope", "ingested_at", "state", "superseded_by")
# The largest note read, and the longest JSON Lines line (in characters): one document is
# held whole while parsed, so the bound keeps an import's memory bounded, as a zip member's.
MAX_FILE_BYTES = 32 << 20
# "2024-03-12 standup.txt", "2024-03-12-standup.md", "2024-03-12.md"
_NAME_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?=$|[\s_.-])")


class _FrontMatterLoader(yaml.SafeLoader):
    """YAML without implicit timestamps: dates stay text, so mempp's own parser judges them."""


_FrontMatterLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True, slots=True)
class Item:
    """One document read from a file, the reason it could not be read, or (``skipped``, the
    reason counted, and ``detail``, what to tell) a file of a folder that is not read."""

    location: str
    document: Document | None
    error: str | None = None
    skipped: str | None = None
    detail: str | None = None


# Given a path that is not a document file, says which other source it is (a Slack export,
# a mailbox) and how to import it; ``None`` when it is none of them.
Recognizer = Callable[[Path], str | None]
# Reads a file another importer owns but a folder may hold (an .eml: the mail importer's).
Delegate = Callable[[Path], Iterator[base.Item]]
READ_SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES + DOCUMENT_SUFFIXES
READ_NAMES = ".md, .txt, .jsonl, .pdf, .docx, .pptx, .xlsx, .odt, .ods, .epub, .html, .rtf, .eml"


def read_sources(
    paths: list[str],
    recognize: Recognizer | None = None,
    delegates: dict[str, Delegate] | None = None,
) -> Iterator[Item | base.Item]:
    """``delegates`` maps a suffix (``.eml``) to the reader of another importer."""
    delegates = delegates or {}
    for raw in paths:
        path = Path(raw)
        suffix = path.suffix.lower()
        if path.is_dir():
            yield from _read_folder(path, recognize, delegates)
        elif path.is_file() and suffix in JSONL_SUFFIXES:
            yield from read_jsonl(path)
        elif path.is_file() and suffix in TEXT_SUFFIXES:
            yield read_text_file(path)
        elif path.is_file() and suffix in DOCUMENT_SUFFIXES:
            yield from read_document(path, shown_path(raw))
        elif path.is_file() and suffix in delegates:
            yield from _delegated(delegates[suffix], path)
        elif not path.exists():
            yield Item(shown_path(raw), None, "no such file or folder")
        else:
            hint = recognize(path) if recognize is not None else None
            reason = hint or f"not a file mempp reads ({READ_NAMES}), nor a folder"
            yield Item(shown_path(raw), None, reason)


def _read_folder(
    root: Path, recognize: Recognizer | None, delegates: dict[str, Delegate]
) -> Iterator[Item | base.Item]:
    """Every file under ``root`` in name order: documents read, the rest skipped with why. A
    folder another importer reads (a Slack export, a Maildir) is skipped whole, as are
    hidden ones (``.git``)."""
    hint = recognize(root) if recognize is not None else None
    if hint is not None:
        yield Item(shown_path(root), None, skipped="other source", detail=hint)
        return
    read_any = False
    for current, folders, files in os.walk(root):
        here = Path(current)
        folders.sort()
        for name in list(folders):
            sub = here / name
            hint = recognize(sub) if recognize is not None else None
            if name.startswith("."):
                yield Item(shown_path(sub), None, skipped="hidden", detail="hidden folder")
            elif hint is not None:
                yield Item(shown_path(sub), None, skipped="other source", detail=hint)
            else:
                continue
            folders.remove(name)
        for name in sorted(files):
            file = here / name
            suffix = file.suffix.lower()
            if name.startswith("."):
                yield Item(shown_path(file), None, skipped="hidden", detail="hidden file")
            elif suffix in TEXT_SUFFIXES:
                read_any = True
                yield read_text_file(file)
            elif suffix in JSONL_SUFFIXES:
                read_any = True
                yield from read_jsonl(file)
            elif suffix in DOCUMENT_SUFFIXES:
                read_any = True
                yield from read_document(file, shown_path(file))
            elif suffix in delegates:
                read_any = True
                yield from _delegated(delegates[suffix], file)
            else:
                hint = recognize(file) if recognize is not None else None
                if hint is not None:
                    yield Item(shown_path(file), None, skipped="other source", detail=hint)
                else:
                    yield Item(
                        shown_path(file),
                        None,
                        skipped="not a document file",
                        detail=_not_read(suffix),
                    )
    if not read_any:
        yield Item(shown_path(root), None, f"no file mempp reads in this folder ({READ_NAMES})")


# Formats whose successor is read: the hint says what to save them as.
_LEGACY = {
    ".doc": "a Word 97-2003 file: save it as .docx",
    ".xls": "an Excel 97-2003 file: save it as .xlsx",
    ".ppt": "a PowerPoint 97-2003 file: save it as .pptx",
    ".odp": "an OpenDocument presentation: export it as .pdf or .pptx",
}


def _not_read(suffix: str) -> str:
    legacy = _LEGACY.get(suffix)
    if legacy is not None:
        return f"{legacy} to import it"
    return f"not a file mempp reads ({READ_NAMES})"


def _delegated(read: Delegate, file: Path) -> Iterator[base.Item]:
    """Another importer's items for one file; a file it refuses whole is this file's
    failure, not the folder's."""
    try:
        yield from read(file)
    except InvalidInput as exc:
        yield base.ItemError(shown_path(file), str(exc).removeprefix(f"{file}: "))


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as printable text: bytes of a file name that are not UTF-8 (which Python holds
    as lone surrogates) shown as ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_jsonl(path: Path) -> Iterator[Item]:
    name = shown_path(path)
    try:
        # utf-8-sig: a byte-order mark some editors write is not part of the first line.
        handle = path.open(encoding="utf-8-sig")
    except OSError as exc:
        yield Item(name, None, exc.strerror or str(exc))
        return
    with handle:
        number = 0
        try:
            for number, line in enumerate(_bounded_lines(handle), start=1):
                location = f"{name}:{number}"
                if line is None:
                    yield Item(location, None, f"line longer than {MAX_FILE_BYTES} characters")
                    continue
                if not line.strip():
                    continue
                yield parse_json_line(location, line)
        except UnicodeDecodeError as exc:
            yield Item(f"{name}:{number + 1}", None, f"not UTF-8 text ({exc.reason})")
        except OSError as exc:
            yield Item(f"{name}:{number + 1}", None, exc.strerror or str(exc))


def _bounded_lines(handle: TextIO) -> Iterator[str | None]:
    """The lines of ``handle``, each read at most ``MAX_FILE_BYTES`` characters at a time:
    an overlong line is None (and skipped to its end), never held whole in memory."""
    while line := handle.readline(MAX_FILE_BYTES):
        if len(line) < MAX_FILE_BYTES or line.endswith("\n"):
            yield line
            continue
        while (rest := handle.readline(MAX_FILE_BYTES)) and not rest.endswith("\n"):
            pass
        yield None


def parse_json_line(location: str, line: str) -> Item:
    """One line of JSON Lines as a document, or the reason it is not one."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return Item(location, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return Item(location, None, "invalid JSON: nested too deeply")
    except ValueError as exc:  # an integer of more than 4,300 digits
        return Item(location, None, f"invalid JSON: {_first_line(exc)}")
    if not isinstance(obj, dict):
        return Item(location, None, "each line must be a JSON object")
    if "source" not in obj:  # an explicit null (as `mempp export` writes) stays no source
        obj = {**obj, "source": location}
    return _document(location, _with_unknown_as_metadata(obj, FIELDS + EXPORT_FIELDS))


def read_text_file(path: Path) -> Item:
    location = shown_path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:  # refused by its size, before it is read
            return Item(location, None, f"is {size} bytes, over the {MAX_FILE_BYTES} limit")
        raw = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        return Item(location, None, f"not UTF-8 text ({exc.reason})")
    except OSError as exc:
        return Item(location, None, exc.strerror or str(exc))
    meta: dict[object, object] = {}
    body = raw
    if raw.startswith("---"):
        lines = raw.splitlines(keepends=True)
        if lines and lines[0].rstrip() == "---":
            end = next(
                (i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None
            )
            if end is None:
                return Item(f"{location}:1", None, "front matter opened with --- is never closed")
            try:
                parsed = yaml.load("".join(lines[1:end]), Loader=_FrontMatterLoader)
            except yaml.YAMLError as exc:
                return _yaml_error(location, exc)
            except RecursionError:
                return Item(f"{location}:1", None, "invalid YAML front matter: nested too deeply")
            except ValueError as exc:  # an integer of more than 4,300 digits
                return Item(f"{location}:1", None, f"invalid YAML front matter: {_first_line(exc)}")
            if parsed is not None and not isinstance(parsed, dict):
                return Item(f"{location}:1", None, "front matter must be a YAML mapping")
            meta = parsed or {}
            body = "".join(lines[end + 1 :])
    fields = _with_unknown_as_metadata(meta, FIELDS)
    fields["text"] = body.strip("\n")
    if fields.get("date") is None:
        fields["date"] = _date_in_name(path.name)
    if fields.get("source") is None:
        fields["source"] = location
    return _document(location, fields)


def _with_unknown_as_metadata(
    fields: dict[object, object], known: tuple[str, ...]
) -> dict[object, object]:
    """``fields`` with every key that is not a document's field moved into ``metadata``
    (merged with a ``metadata`` mapping given), so nothing the file says is dropped."""
    unknown = {k: v for k, v in fields.items() if k not in known and k != "metadata"}
    out = {k: v for k, v in fields.items() if k in known}
    given = fields.get("metadata")
    if unknown and (given is None or isinstance(given, dict)):
        out["metadata"] = {**(given or {}), **unknown}
    else:
        out["metadata"] = given  # not a mapping: Document.from_fields says so
    return out


def _date_in_name(name: str) -> str | None:
    """The ``YYYY-MM-DD`` a file name starts with, if it is a real day."""
    match = _NAME_DATE.match(name)
    if match is None:
        return None
    try:
        date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return match.group(1)


def _yaml_error(location: str, exc: yaml.YAMLError) -> Item:
    """One line: where (the file's line, counting the opening ---) and the parser's problem."""
    mark = getattr(exc, "problem_mark", None)
    line = f":{mark.line + 2}" if mark is not None else ":1"
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    return Item(f"{location}{line}", None, f"invalid YAML front matter: {_first_line(problem)}")


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else "unreadable"


def _document(location: str, fields: dict[object, object]) -> Item:
    try:
        doc = Document.from_fields(fields, numbers_as_text=True)  # type: ignore[arg-type]
    except InvalidInput as exc:
        return Item(location, None, str(exc))
    return Item(location, doc)
