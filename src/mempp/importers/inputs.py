"""One way to open what a tool importer is given: a single file, a folder, or a zip of either
(with :mod:`mempp.importers.archive`'s size caps), as a :class:`~mempp.importers.archive.Tree`
of named files; plus the small readers those importers share (text in an unknown charset,
dates as the tools write them, HTML made text).
"""

from __future__ import annotations

import os
import re
import zipfile
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path, PurePosixPath
from typing import Any

from mempp.errors import InvalidInput
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, FolderTree, Tree, open_tree
from mempp.importers.base import Item, ItemError, Skipped
from mempp.records import Document

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""")


class FileTree:
    """A single file as a tree of one name (its own), so importers read a file, a folder and
    a zip alike."""

    def __init__(self, path: Path, max_member: int) -> None:
        self._folder = FolderTree(path.parent, max_member)
        self._name = path.name
        self.label = str(path.parent)

    def names(self) -> list[str]:
        return [self._name]

    def read(self, name: str) -> bytes:
        return self._folder.read(name)

    def close(self) -> None:
        pass


def open_input(
    path: str | os.PathLike[str],
    *,
    max_unpacked: int = MAX_UNPACKED,
    max_member: int = MAX_MEMBER,
) -> tuple[Tree, str | None]:
    """``path`` as a tree: a folder, a zip (capped; a truncated one recovered, with the
    warning returned), or any other single file. Raises ``InvalidInput`` when it does not
    exist or would unpack past the cap."""
    where = Path(path)
    if where.is_dir():
        return FolderTree(where, max_member), None
    if not where.exists():
        raise InvalidInput(f"{path}: no such file or folder")
    if not where.is_file():
        raise InvalidInput(f"{path}: not a file or folder")
    if _is_zip(where):
        return open_tree(where, max_unpacked=max_unpacked, max_member=max_member)
    return FileTree(where, max_member), None


def _is_zip(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            head = handle.read(4)
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}") from None
    return head == b"PK\x03\x04" or (head[:2] == b"PK" and zipfile.is_zipfile(path))


def located(tree: Tree, name: str) -> str:
    """How a location names file ``name`` of ``tree``: the path a user can find."""
    if isinstance(tree, FileTree | FolderTree):
        return os.path.join(tree.label, name)
    return f"{tree.label}:{name}"


def hidden(name: str) -> bool:
    """A dot-file or a file in a dot-folder (``.git``, ``.DS_Store``), or macOS's zip litter."""
    parts = PurePosixPath(name).parts
    return any(p.startswith(".") for p in parts) or (bool(parts) and parts[0] == "__MACOSX")


def decode_text(raw: bytes, declared: str | None = None) -> tuple[str, str | None]:
    """``raw`` as text, and a warning when it had to be guessed. The order: a byte-order mark,
    the charset the file declares (an HTML ``<meta>``, an XML declaration, or ``declared``),
    UTF-8, then Windows-1252 with undecodable bytes replaced."""
    if raw.startswith(b"\xef\xbb\xbf"):
        return raw[3:].decode("utf-8", "replace"), None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16", "replace"), None
    match = _XML_ENCODING.match(raw[:200]) or _META_CHARSET.search(raw[:4096])
    charset = declared or (match.group(1).decode("ascii") if match else None)
    problem = None
    if charset:
        try:
            return raw.decode(charset), None
        except LookupError:
            problem = f"unknown charset {charset!r}"
        except UnicodeDecodeError:
            problem = f"not valid {charset}"
    try:
        text = raw.decode("utf-8")
        return text, (f"{problem}; read as UTF-8" if problem else None)
    except UnicodeDecodeError:
        text = raw.decode("cp1252", "replace")
        return text, f"{problem or 'not UTF-8'}; read as Windows-1252"


def _config() -> Any:
    global _CONFIG
    if _CONFIG is None:
        try:
            from inscriptis.css_profiles import CSS_PROFILES
            from inscriptis.model.config import ParserConfig
        except ImportError:
            raise InvalidInput(
                "reading HTML needs the import extra: pip install 'mempp[import]'"
            ) from None
        _CONFIG = ParserConfig(css=CSS_PROFILES["strict"], display_links=False)
    return _CONFIG


_CONFIG: Any = None


def html_text(markup: str) -> str:
    """HTML as readable text (inscriptis, the ``import`` extra, which drops scripts and
    styles); tables keep their rows."""
    config = _config()
    from inscriptis import get_text

    if not markup.strip():
        return ""
    return _tidy(get_text(markup, config))


def element_text(element: Any) -> str:
    """An lxml element (a page's body) as text, as :func:`html_text` makes it, without
    writing the element out and parsing it again."""
    config = _config()
    from inscriptis.html_engine import Inscriptis

    return _tidy(Inscriptis(element, config).get_text())


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def listed(value: object) -> list[object]:
    """``value`` when it is a list, else no elements (a field an export got wrong)."""
    return value if isinstance(value, list) else []


def iso_moment(value: object) -> datetime | None:
    """An ISO 8601 timestamp as the APIs write it (``2019-11-12T21:00:13Z``,
    ``2024-09-04T13:25:57.113+02:00``), aware; ``None`` when absent or unreadable."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def rfc822_moment(value: object) -> datetime | None:
    """An RFC 822 date (``Fri, 24 Sep 2021 14:22:15 -0700``), with its zone; ``None`` when
    unreadable."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        moment = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Repeats:
    """The items of one import by source, to tell an item given twice (a pull request in the
    issues list and in the pulls list; overlapping pages) from two versions of it (an edit
    between two snapshots, told by its edit time) and from a broken export (one id, two
    contents, nothing saying which is newer)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, str | None, str]] = {}

    def check(self, doc: Document, version: str | None, location: str) -> Item | None:
        """``None`` when ``doc`` is new here (store it); else the item to yield instead."""
        if doc.source is None:
            return None
        digest = hash((doc.text, doc.author, doc.date.key if doc.date else None))
        before = self._seen.get(doc.source)
        if before is None:
            self._seen[doc.source] = (digest, version, location)
            return None
        if before[0] == digest:
            return Skipped(location, "repeated in the export")
        if version is not None and version != before[1]:
            self._seen[doc.source] = (digest, version, location)
            return None
        return ItemError(
            location,
            f"{doc.source} is also at {before[2]} with other content and no newer edit "
            "time to tell which is current; the first is kept",
        )
