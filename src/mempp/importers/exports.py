"""What the JSON-export importers (Discord, Teams, Trello, Keep) share: opening one file, a
folder or a zip as one tree, reading a member as JSON with a one-line error, ISO dates, HTML
made text, and the check that one item id does not come twice with different content.

Sources of these importers are stable identities (the item's URL, or ``tool://…``), so a
re-import skips what is stored (``stable_sources``). An item the tool marks as edited gets
its edit's stamp in the source (:func:`versioned`): a later export with the edit stores the
new text as a new record and keeps the old one; the same export again adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput
from mempp.importers.archive import (
    MAX_MEMBER,
    MAX_UNPACKED,
    FolderTree,
    MemberError,
    Tree,
    open_tree,
)
from mempp.importers.base import Item, ItemError, Skipped

# What a cut can leave of a JSON literal or number at the end of a file ("" included).
_FRAGMENT = re.compile(
    r"-?\d*\.?\d*(?:[eE][-+]?\d*)?|t(?:r(?:ue?)?)?|f(?:a(?:l(?:se?)?)?)?|n(?:u(?:ll?)?)?"
)


class FileTree:
    """One file as a tree of one member, so a single export file reads like a folder."""

    def __init__(self, path: Path, max_member: int) -> None:
        self.label = str(path.parent) if str(path.parent) != "." else ""
        self._name = path.name
        self._folder = FolderTree(path.parent, max_member)

    def names(self) -> list[str]:
        return [self._name]

    def read(self, name: str) -> bytes:
        return self._folder.read(name)

    def close(self) -> None:
        pass


def open_export(
    path: str | os.PathLike[str],
    *,
    file_suffixes: tuple[str, ...],
    max_unpacked: int = MAX_UNPACKED,
    max_member: int = MAX_MEMBER,
) -> tuple[Tree, str | None]:
    """``path`` as a tree: a folder, a zip, or one file whose suffix is in ``file_suffixes``
    (a zip is a zip whatever its name). Raises ``InvalidInput`` for a path that is none."""
    where = Path(path)
    if where.is_file() and where.suffix.lower() in file_suffixes:
        return FileTree(where, max_member), None
    return open_tree(where, max_unpacked=max_unpacked, max_member=max_member)


def zip_names(path: str | os.PathLike[str]) -> list[str] | None:
    """A zip's member names (its table of contents only), or ``None`` for no readable zip."""
    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return None


def zip_heads(
    path: str | os.PathLike[str], suffix: str, count: int = 3
) -> list[tuple[str, bytes]] | None:
    """For ``recognizes``: the names of a zip's first ``count`` members ending in ``suffix``
    with their first 4 KiB, or ``None`` when ``path`` is no readable zip. Cheap: the table
    of contents and a few bytes."""
    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.lower().endswith(suffix)][:count]
            heads = []
            for name in names:
                with archive.open(name) as handle:
                    heads.append((name, handle.read(4096)))
            return heads
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError):
        return None


def where(tree: Tree, name: str) -> str:
    """How a location names member ``name`` of ``tree``: ``export.zip:folder/file.json``, or
    the file's path for a folder or a single file."""
    if isinstance(tree, FileTree | FolderTree):
        return os.path.join(tree.label, name) if tree.label else name
    return f"{tree.label}:{name}"


def load_json(tree: Tree, name: str) -> tuple[Any, ItemError | None]:
    """Member ``name`` parsed as JSON (UTF-8, with or without a BOM; UTF-16/32 as JSON allows),
    or the one-line error that says why it is not."""
    location = where(tree, name)
    try:
        raw = tree.read(name)
    except MemberError as exc:
        return None, ItemError(location, str(exc))
    try:
        text = raw.decode(json.detect_encoding(raw)).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        return None, ItemError(location, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        # A file cut short fails at its end: nothing after the error, a string still open,
        # or a fragment of a literal or number (`nu`, `12.`) with no structure after it.
        if not text.strip():
            return None, ItemError(location, "an empty file")
        tail = text[exc.pos :].rstrip()
        fragment = _FRAGMENT.fullmatch(tail) is not None
        cut = fragment or exc.msg.startswith("Unterminated string")
        problem = "truncated" if cut else "invalid JSON"
        return None, ItemError(
            location, f"{problem} at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        )
    except RecursionError:
        return None, ItemError(location, "JSON nested too deeply")


def moment(value: object) -> datetime | None:
    """An ISO 8601 datetime (``Z`` or an offset; naive is UTC), else ``None``."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def from_micros(value: object) -> datetime | None:
    """Microseconds since 1970 (Keep's ``…TimestampUsec``), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = int(value)
        return datetime.fromtimestamp(number / 1_000_000, UTC) if number > 0 else None
    except (ValueError, OverflowError, OSError):
        return None


def stamp(when: datetime) -> str:
    """A datetime as the compact UTC text used in versioned sources."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def versioned(source: str, edited: datetime | None) -> str:
    """The source of an item's version: the item's own for the text as first written, with
    ``#edited=STAMP`` for the text an edit at ``edited`` left."""
    return source if edited is None else f"{source}#edited={stamp(edited)}"


def html_text(markup: str) -> str:
    """HTML as plain text (scripts and styles dropped) by inscriptis, the ``import`` extra."""
    try:
        from inscriptis import get_text
    except ImportError:
        raise InvalidInput(
            "the item's text is HTML: install the import extra (pip install 'mempp[import]')"
        ) from None
    return get_text(markup).strip()


class Repeats:
    """Item ids already read in this import, with a digest of their content: the same item in
    two overlapping files is fine (the store skips it by source); the same id with other
    content, and no edit to explain it, is reported instead of stored."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[bytes, str]] = {}

    def check(self, key: str, content: str, location: str) -> ItemError | None:
        digest = hashlib.sha256(content.encode("utf-8", "surrogatepass")).digest()
        earlier = self._seen.get(key)
        if earlier is None:
            self._seen[key] = (digest, location)
            return None
        if earlier[0] == digest:
            return None
        return ItemError(
            location,
            f"id {key} came before at {earlier[1]} with other content and no edit date; "
            "this one is not stored",
        )


def skipped_file(location: str, tool: str) -> Skipped:
    return Skipped(location, f"not a {tool} file", f"not a {tool} file; left out")


def kind(value: object) -> str:
    """A JSON value's kind, for error messages."""
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def listed(value: object) -> list[Any]:
    """``value`` if it is a JSON list, else an empty one (an export's optional lists)."""
    return value if isinstance(value, list) else []


def mapping(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def text_field(value: object) -> str | None:
    """A non-blank string, stripped, else ``None``."""
    return value.strip() if isinstance(value, str) and value.strip() else None


class Found:
    """What an importer's walk yields, besides its items, on meeting a file of its kind."""


FOUND = Found()


def held_until_found(stream: Iterable[Item | Found], nothing: str) -> Iterator[Item]:
    """The items of ``stream`` with its ``FOUND`` marks dropped, held back until the first:
    a path holding no file of the importer's kind raises ``InvalidInput(nothing)`` before
    any item is yielded, so ``read_paths`` refuses it before anything is stored."""
    held: list[Item] = []
    found = False
    for item in stream:
        if isinstance(item, Found):
            if not found:
                found = True
                yield from held
                held.clear()
            continue
        if found:
            yield item
        else:
            held.append(item)
    if not found:
        raise InvalidInput(nothing)
