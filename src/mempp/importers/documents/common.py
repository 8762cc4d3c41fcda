"""The protocol between the document readers and the record builder, and what they share:
the extracted text and metadata, the errors that name why a file is not read, safe XML
parsing and size-capped zip reading (an Office file is a zip; a zip bomb stops at the cap).

A format reader is a module function ``extract(path, max_chars) -> Extracted`` registered in
``read.py`` by suffix. It raises :class:`Unreadable` (the file is reported as failed, with
the reason), :class:`NoText` (skipped with the reason: a scan without a text layer) or
:class:`MissingLibrary` (skipped: the ``documents`` extra is not installed).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mempp.errors import InvalidInput
from mempp.importers.archive import MIB, MemberError, ZipTree

if TYPE_CHECKING:
    from lxml import etree

INSTALL_HINT = "pip install 'mempp[documents]'"
# What one document's zip may unpack to, in all and per XML part parsed whole (a sheet is
# streamed by openpyxl, bounded by the total): above any real Office file's parts (8
# million characters of Word text are ~100 MiB of XML), below what a parse tree of it
# (a few times its size) would take from a shared machine.
MAX_UNPACKED = 512 * MIB
MAX_PART = 128 * MIB


class Unreadable(Exception):
    """The file cannot be read: damaged, encrypted, not what its name says. One line."""


class NoText(Exception):
    """The file was read but holds no text to store (a scan without a text layer)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class MissingLibrary(Exception):
    """The library that reads this format is not installed."""

    def __init__(self, package: str) -> None:
        super().__init__(f"reading it needs {package}: {INSTALL_HINT}")


@dataclass(slots=True)
class Annotation:
    """A comment or tracked change: its own writer and date, and what it says."""

    kind: str  # "comment", "insertion", "deletion", "move"
    text: str
    author: str | None = None
    date: datetime | None = None
    key: str = ""  # its id within the document (a comment's id, a change's position)
    anchor: str = ""  # the text it is attached to, or where it is ("slide 3")
    # The date as the file wrote it, when it cannot be trusted as written (Word's local time
    # marked Z): told in the record's metadata.
    date_note: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # kept in the record's metadata


@dataclass(slots=True)
class Extracted:
    """What a format reader found. ``author_from`` / ``modified_from`` name the metadata
    field used (``"pdf Info Author"``); ``meta`` is kept as the record's metadata."""

    text: str
    author: str | None = None
    author_from: str | None = None
    modified: datetime | None = None
    modified_from: str | None = None
    created: datetime | None = None
    created_from: str | None = None
    title: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    annotations: list[Annotation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def need(module: str, package: str) -> Any:
    """``import module``, or :class:`MissingLibrary` naming the package and the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingLibrary(package) from None


def clean(value: object) -> str | None:
    """Metadata text stripped; ``None`` when blank or not text."""
    if not isinstance(value, str):
        return None
    text = value.replace("\x00", "").strip()
    return text or None


# -- dates ----------------------------------------------------------------------------

_PDF_DATE = re.compile(
    r"^(?:D:)?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?"
    r"\s*(?:(Z)|([+-])(\d{2})'?(\d{2})?'?)?"
)


def pdf_date(value: object) -> datetime | None:
    """A PDF date (``D:20061006163404-04'00'``, any tail of it missing): ``None`` when it is
    not one. Without a zone it is taken as UTC, as the rest of mempp takes naive times."""
    text = clean(value)
    if text is None:
        return None
    match = _PDF_DATE.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) if g else None for g in match.groups()[:6])
    zone: timezone = UTC
    if match.group(8):
        offset = timedelta(hours=int(match.group(9)), minutes=int(match.group(10) or 0))
        if offset >= timedelta(hours=24):
            return None
        zone = timezone(-offset if match.group(8) == "-" else offset)
    try:
        return datetime(
            year or 1, month or 1, day or 1, hour or 0, minute or 0, second or 0, 0, zone
        )
    except ValueError:
        return None


_ISO = re.compile(
    r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2})?)(\.\d+)?)?\s*(Z|[+-]\d{2}:?\d{2})?$"
)


def iso_date(value: object) -> datetime | None:
    """A W3C/ISO date as Office, ODF, EPUB and HTML metadata write it (fractions of any
    length, ``Z`` or an offset or no zone: then UTC); ``None`` when it is not one."""
    text = clean(value)
    if text is None:
        return None
    match = _ISO.match(text)
    if match is None:
        return None
    day, clock, fraction, zone = match.groups()
    stamp = day + "T" + (clock or "00:00")
    if fraction:
        stamp += fraction[:7].ljust(7, "0")[:7]
    if zone:
        stamp += "+00:00" if zone == "Z" else (zone if ":" in zone else zone[:3] + ":" + zone[3:])
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def word_local(value: object) -> tuple[datetime | None, str | None]:
    """A date Word wrote on a comment or revision: local time marked ``Z`` (so the zone is
    unknown). Returns the clock time as written, zone dropped, and the note that says so."""
    moment = iso_date(value)
    if moment is None:
        return None, None
    return moment.replace(tzinfo=None), "local time of the writer (Word marks it Z); zone unknown"


# -- XML --------------------------------------------------------------------------------


def parse_xml(data: bytes, where: str) -> etree._Element:
    """XML without entity expansion, network or DTD loading (a billion-laughs file is
    refused, not expanded); :class:`Unreadable` naming ``where`` when it is not XML."""
    etree = need("lxml.etree", "lxml")
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, recover=False
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise Unreadable(f"{where} is not well-formed XML ({_first(exc)})") from None
    if root is None:
        raise Unreadable(f"{where} is empty")
    return root


def local(tag: object) -> str:
    """An element's name without its namespace (``ns0:`` rewrites keep working)."""
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1]


def attr(element: etree._Element, name: str) -> str | None:
    """An attribute by local name, whatever its namespace."""
    for key, value in element.attrib.items():
        if local(key) == name:
            return str(value)
    return None


def child_text(root: etree._Element, name: str) -> str | None:
    """The text of the first element named ``name`` (any namespace) under ``root``."""
    for element in root.iter():
        if local(element.tag) == name:
            return clean("".join(element.itertext()))
    return None


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- zips -------------------------------------------------------------------------------


class Package:
    """The parts of a zip-based document (OOXML, ODF, EPUB), read within the caps."""

    def __init__(self, path: Path, kind: str) -> None:
        self.kind = kind
        self._label = f"{path}: "
        try:
            self._tree = ZipTree(path, MAX_UNPACKED, MAX_PART)
        except zipfile.BadZipFile:
            raise Unreadable(f"not a zip file, so not a {kind} (damaged, or misnamed)") from None
        except InvalidInput as exc:  # an export's advice (unpack it) does not fit a document
            message = _first(exc).removeprefix(self._label).split("; if it is genuine")[0]
            raise Unreadable(message) from None
        except (OSError, zipfile.LargeZipFile) as exc:
            raise Unreadable(_first(exc)) from None
        self._names = set(self._tree.names())

    def __enter__(self) -> Package:
        return self

    def __exit__(self, *_: object) -> None:
        self._tree.close()

    def has(self, name: str) -> bool:
        return name in self._names

    def names(self) -> list[str]:
        return sorted(self._names)

    def read(self, name: str) -> bytes:
        try:
            return self._tree.read(name)
        except KeyError:
            raise Unreadable(f"{name} is missing from the {self.kind}") from None
        except MemberError as exc:
            raise Unreadable(f"{name}: {exc}") from None
        except InvalidInput as exc:  # the whole document's cap
            raise Unreadable(_first(exc).removeprefix(self._label)) from None

    def xml(self, name: str) -> etree._Element:
        return parse_xml(self.read(name), name)

    def require(self, name: str) -> None:
        if name not in self._names:
            raise Unreadable(f"a zip, but not a {self.kind} (it has no {name})")


def core_properties(package: Package, extracted: Extracted, kind: str) -> None:
    """Office's ``docProps/core.xml`` into ``extracted``: the creator (else the last
    modifier) as author, ``modified`` as the date, ``created`` kept."""
    if not package.has("docProps/core.xml"):
        return
    root = package.xml("docProps/core.xml")
    creator = child_text(root, "creator")
    modifier = child_text(root, "lastModifiedBy")
    if creator:
        extracted.author, extracted.author_from = creator, f"{kind} core creator"
    elif modifier:
        extracted.author, extracted.author_from = modifier, f"{kind} core lastModifiedBy"
    modified = iso_date(child_text(root, "modified"))
    if modified is not None:
        extracted.modified, extracted.modified_from = modified, f"{kind} core modified"
    created = iso_date(child_text(root, "created"))
    if created is not None:
        extracted.created, extracted.created_from = created, f"{kind} core created"
    extracted.title = child_text(root, "title")
    if modifier:
        extracted.meta["last_modified_by"] = modifier
    revision = child_text(root, "revision")
    if revision:
        extracted.meta["revision"] = revision
