"""What the GitHub and GitLab importers share: telling which of the two saved an export
(:func:`sniff_api`), refusing a single file of another tool before anything is stored, the
hint that names the importer another tool's object needs, and the walk over an export's
pages: every entry of every file read, an entry of no known kind skipped (or, for an API
error response, failed) with its reason, a bad item failed with its location, repeats and
state changes told once.

Each forge's own fields (who the author is, which thread an item is on, what a document
says) stay in :mod:`mempp.importers.github` and :mod:`mempp.importers.gitlab`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.api_pages import Cut, Entry, file_entries, looks_like_pages, read_pages
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, MemberError, Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.inputs import FileTree, Repeats, open_input
from mempp.records import Document

TOOLS = {"github": "GitHub", "gitlab": "GitLab"}


class ForgeImporter:
    """The importer of one forge's saved API responses (a file, a folder or a zip of them).
    ``max_unpacked``/``max_member`` cap a zip, in bytes. A subclass names the forge
    (``name``, a key of ``TOOLS``) and the :class:`ForgeExport` that reads a tree
    (``export``)."""

    name: str
    description: str
    export: type[ForgeExport]

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        return sniff_api(path) == self.name

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_input(path, max_unpacked=self.max_unpacked, max_member=self.max_member)
        try:
            if isinstance(tree, FileTree):
                self._refuse_foreign(path, tree)
            if warning is not None:
                yield Notice(tree.label, warning)
            yield from self.export(tree).items()
        finally:
            tree.close()

    def _refuse_foreign(self, path: str | os.PathLike[str], tree: FileTree) -> None:
        """A single file of another tool is refused whole, before anything is stored."""
        name = tree.names()[0]
        try:
            raw = tree.read(name)
        except MemberError as exc:
            raise InvalidInput(f"{path}: {exc}") from None
        text = raw[:65536].decode("utf-8", "replace").lstrip("\ufeff")
        if not looks_like_pages(text):
            raise InvalidInput(
                f"{path}: not {TOOLS[self.name]} API JSON (neither JSON nor recorded HTTP headers)"
            )
        for entry in read_pages(text):
            if isinstance(entry, Entry):
                hint = foreign_hint(entry.value, self.name)
                if self.export.kind_of(entry.value) is None and hint:
                    raise InvalidInput(f"{path}: {hint}")
                return
            if isinstance(entry, Cut):
                return


class ForgeExport:
    """One forge's export, read a file and an entry at a time. A subclass says what it is
    (``forge``, a key of ``TOOLS``; ``kind_of``) and reads an entry of a known kind
    (``_item``); an error response's ``message`` is of one of ``message_types``."""

    forge: str
    message_types: tuple[type, ...] = (str,)

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.repeats = Repeats()
        self.states: set[tuple[str, str, int]] = set()  # (thread, event, moment)
        self.foreign_told: set[str] = set()

    def items(self) -> Iterator[Item]:
        for name in self.tree.names():
            yield from self._file(name)

    def _file(self, name: str) -> Iterator[Item]:
        for got in file_entries(self.tree, name):
            if isinstance(got, tuple):
                yield from self._entry(name, *got)
            else:
                yield got

    def _entry(self, file: str, location: str, entry: Entry) -> Iterator[Item]:
        value = entry.value
        kind = self.kind_of(value)
        if kind is None:
            tool = TOOLS[self.forge]
            hint = foreign_hint(value, self.forge)
            if hint and file not in self.foreign_told:
                self.foreign_told.add(file)
                yield Skipped(location, f"not a {tool} item", hint)
            elif isinstance(value, dict) and isinstance(value.get("message"), self.message_types):
                yield ItemError(location, f"an API error response: {value['message']}")
            else:
                yield Skipped(location, f"not a {tool} item")
            return
        try:
            yield from self._item(file, location, entry, kind)
        except MemppError as exc:
            yield ItemError(location, str(exc))
        except (TypeError, AttributeError, ValueError) as exc:  # a field of an unexpected type
            yield ItemError(location, f"a {kind} with a field of an unexpected type ({exc})")

    @staticmethod
    def kind_of(value: Any) -> str | None:
        """The kind of an API object of this forge, or ``None``."""
        raise NotImplementedError

    def _item(self, file: str, location: str, entry: Entry, kind: str) -> Iterator[Item]:
        raise NotImplementedError

    def _repeat_or(self, doc: Document, version: Any, location: str) -> Iterator[Item]:
        told = self.repeats.check(doc, version if isinstance(version, str) else None, location)
        yield told if told is not None else doc

    def _first_state(self, thread: str, event: str, moment: datetime) -> bool:
        """Whether this state change of ``thread`` is new to the export (then it is noted)."""
        key = (thread, event, int(moment.timestamp()))
        if key in self.states:
            return False
        self.states.add(key)
        return True


def utc_stamp(moment: datetime) -> str:
    """A state change's moment as its source names it."""
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def foreign_hint(value: Any, wanted: str) -> str | None:
    """When ``value`` is plainly another tool's API object: what it is and which importer
    reads it."""
    if not isinstance(value, dict):
        return None
    if wanted != "gitlab" and "iid" in value and ("web_url" in value or "project_id" in value):
        return "a GitLab API response, not GitHub's: import it with `mempp import gitlab`"
    if wanted != "github" and "node_id" in value and "html_url" in value:
        return "a GitHub API response, not GitLab's: import it with `mempp import github`"
    if "fields" in value and "key" in value and "self" in value:
        return "a Jira REST response: import a Jira XML or CSV export with `mempp import jira`"
    return None


def sniff_api(path: str | os.PathLike[str]) -> str | None:
    """``"github"``, ``"gitlab"`` or ``None`` from the first kilobytes of a ``.json``/``.http``
    file, or of the first few such files of a folder."""
    where = Path(path)
    if where.suffix.lower() == ".zip" and where.is_file():
        return _sniff_zip(where)
    if not where.is_dir():
        return _sniff_file(where)
    try:
        files = sorted(p for p in where.iterdir() if p.suffix.lower() in (".json", ".http"))
    except OSError:
        return None
    return next((kind for kind in map(_sniff_file, files[:5]) if kind is not None), None)


def _sniff_zip(where: Path) -> str | None:
    """The kind of the first ``.json``/``.http`` member of a zip, from its first kilobytes."""
    import zipfile

    try:
        with zipfile.ZipFile(where) as archive:
            members = sorted(
                (
                    info
                    for info in archive.infolist()
                    if info.filename.lower().endswith((".json", ".http"))
                ),
                key=lambda info: info.filename,
            )
            if not members:
                return None
            with archive.open(members[0]) as handle:
                return _sniff_head(handle.read(16384).decode("utf-8", "replace"))
    except (OSError, zipfile.BadZipFile, ValueError, RuntimeError, EOFError):
        return None


def _sniff_file(where: Path) -> str | None:
    if not where.is_file() or where.suffix.lower() not in (".json", ".http"):
        return None
    try:
        with where.open("rb") as handle:
            return _sniff_head(handle.read(16384).decode("utf-8", "replace"))
    except OSError:
        return None


def _sniff_head(head: str) -> str | None:
    if not looks_like_pages(head):
        return None
    if re.search(r'"html_url"\s*:\s*"https?://[^"]+/(issues|pull)/\d+', head) and '"user"' in head:
        return "github"
    if '"iid"' in head and '"web_url"' in head:
        return "gitlab"
    return None
