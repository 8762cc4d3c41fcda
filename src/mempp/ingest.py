"""Reading documents from files: JSONL, and folders of Markdown / text with YAML front matter.

Every source yields ``(location, Document | error message)`` items, so one bad line or file
is reported as ``file:line: reason`` and never stops the rest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from mempp.errors import InvalidInput
from mempp.records import Document

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
FIELDS = ("text", "author", "date", "tags", "source", "thread")


class _FrontMatterLoader(yaml.SafeLoader):
    """YAML without implicit timestamps: dates stay text, so mempp's own parser judges them."""


_FrontMatterLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True, slots=True)
class Item:
    """One document read from a file, or the reason it could not be read."""

    location: str
    document: Document | None
    error: str | None = None


def read_sources(paths: list[str]) -> Iterator[Item]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
            )
            if not files:
                yield Item(shown_path(raw), None, "no .md or .txt files in this folder")
            for file in files:
                yield read_text_file(file)
        elif path.is_file() and path.suffix.lower() in JSONL_SUFFIXES:
            yield from read_jsonl(path)
        elif path.is_file() and path.suffix.lower() in TEXT_SUFFIXES:
            yield read_text_file(path)
        elif not path.exists():
            yield Item(shown_path(raw), None, "no such file or folder")
        else:
            yield Item(shown_path(raw), None, "not a .jsonl, .md or .txt file, nor a folder")


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
            for number, line in enumerate(handle, start=1):
                location = f"{name}:{number}"
                if not line.strip():
                    continue
                yield _from_json_line(location, line)
        except UnicodeDecodeError as exc:
            yield Item(f"{name}:{number + 1}", None, f"not UTF-8 text ({exc.reason})")
        except OSError as exc:
            yield Item(f"{name}:{number + 1}", None, exc.strerror or str(exc))


def _from_json_line(location: str, line: str) -> Item:
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
    return _document(location, obj)


def read_text_file(path: Path) -> Item:
    location = shown_path(path)
    try:
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
    fields = {k: meta.get(k) for k in FIELDS if k != "text"}
    fields["text"] = body.strip("\n")
    if fields.get("source") is None:
        fields["source"] = location
    return _document(location, fields)


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
