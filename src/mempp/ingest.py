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

from mempp.errors import MemppError
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
                yield Item(raw, None, "no .md or .txt files in this folder")
            for file in files:
                yield read_text_file(file)
        elif path.is_file() and path.suffix.lower() in JSONL_SUFFIXES:
            yield from read_jsonl(path)
        elif path.is_file() and path.suffix.lower() in TEXT_SUFFIXES:
            yield read_text_file(path)
        elif not path.exists():
            yield Item(raw, None, "no such file or folder")
        else:
            yield Item(raw, None, "not a .jsonl, .md or .txt file, nor a folder")


def read_jsonl(path: Path) -> Iterator[Item]:
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        yield Item(str(path), None, exc.strerror or str(exc))
        return
    with handle:
        number = 0
        try:
            for number, line in enumerate(handle, start=1):
                location = f"{path}:{number}"
                if not line.strip():
                    continue
                yield parse_json_line(location, line)
        except UnicodeDecodeError as exc:
            yield Item(f"{path}:{number + 1}", None, f"not UTF-8 text ({exc.reason})")


def parse_json_line(location: str, line: str) -> Item:
    """One line of JSON Lines as a document, or the reason it is not one."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return Item(location, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
    if not isinstance(obj, dict):
        return Item(location, None, "each line must be a JSON object")
    if "text" not in obj:
        return Item(location, None, "missing 'text'")
    return _document(location, {k: obj.get(k) for k in FIELDS})


def read_text_file(path: Path) -> Item:
    location = str(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return Item(location, None, f"not UTF-8 text ({exc.reason})")
    except OSError as exc:
        return Item(location, None, exc.strerror or str(exc))
    meta: dict[str, object] = {}
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
                mark = getattr(exc, "problem_mark", None)
                line = f":{mark.line + 2}" if mark is not None else ":1"
                return Item(f"{location}{line}", None, f"invalid YAML front matter: {exc}")
            if parsed is not None and not isinstance(parsed, dict):
                return Item(f"{location}:1", None, "front matter must be a YAML mapping")
            meta = parsed or {}
            body = "".join(lines[end + 1 :])
    fields = {k: meta.get(k) for k in FIELDS if k != "text"}
    fields["text"] = body.strip("\n")
    if fields.get("source") is None:
        fields["source"] = os.fspath(path)
    return _document(location, fields)


def _document(location: str, fields: dict[str, object]) -> Item:
    tags = fields.get("tags")
    if tags is None:
        tags = ()
    elif isinstance(tags, str):
        tags = [t for t in (part.strip() for part in tags.split(",")) if t]
    author = fields.get("author")
    source = fields.get("source")
    thread = fields.get("thread")
    try:
        doc = Document.create(
            fields.get("text"),  # type: ignore[arg-type]
            author=None if author is None else str(author),
            date=fields.get("date"),  # type: ignore[arg-type]
            tags=[str(t) for t in tags] if isinstance(tags, list | tuple) else tags,  # type: ignore[arg-type]
            source=None if source is None else str(source),
            thread=None if thread is None else str(thread),
        )
    except MemppError as exc:
        return Item(location, None, str(exc))
    return Item(location, doc)
