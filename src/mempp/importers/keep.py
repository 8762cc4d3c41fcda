"""The Google Keep importer: a Google Takeout of Keep (the zip, the unpacked folder, or a
folder of Keep's note ``.json`` files), one record per note.

- author: none (Keep notes carry no author; ``KeepImporter(author=...)`` names the owner);
- date: the last edit, ``userEditedTimestampUsec`` (the text as it stands dates from it;
  ``createdTimestampUsec`` in metadata, and the date when there is no edit time);
- thread and source: ``keep://NOTE`` (the note's file name without ``.json``, which
  Takeout derives from its title or, untitled, its edit time; percent-encoded) is the
  thread; the source adds ``#v=`` and 12 hex digits of the text's SHA-256, so a Takeout in
  which a note's text changed stores a new version (the old kept) and one in which it did
  not adds nothing, whatever its edit time says;
- text: the title, a blank line, the text (``textContent``, else ``textContentHtml`` made
  text), checklist items as ``[x] item``, attachments by file name;
- tags: the note's labels.

Trashed notes are skipped and named one by one; each note's ``.html`` twin, ``Labels.txt``,
attachments (images, recordings) and Takeout's overview page are counted as skipped.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from mempp.errors import InvalidInput, MemppError
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.exports import (
    FOUND,
    Found,
    Repeats,
    from_micros,
    held_until_found,
    html_text,
    kind,
    listed,
    load_json,
    open_export,
    text_field,
    where,
    zip_heads,
)
from mempp.records import Document

_KEEP_KEYS = ("createdTimestampUsec", "userEditedTimestampUsec")
_MEDIA = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".3gp", ".m4a", ".amr", ".mp3", ".awb")


class KeepImporter:
    """Reads a Google Keep Takeout. ``author`` names the notes' owner (Keep records none)."""

    name = "keep"
    description = "a Google Keep Takeout (zip or folder) or a folder of Keep note .json files"
    stable_sources = True  # a note's file name and last edit name one version of it

    def __init__(
        self,
        *,
        author: str | None = None,
        max_unpacked: int = MAX_UNPACKED,
        max_member: int = MAX_MEMBER,
    ) -> None:
        self.author = author
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where_ = Path(path)
        if where_.is_file() and where_.suffix.lower() != ".json":
            heads = zip_heads(where_, ".json")
            return bool(heads) and all(k.encode() in heads[0][1] for k in _KEEP_KEYS)
        files = [where_] if where_.is_file() else sorted(where_.glob("*.json"))[:5]
        for file in files:
            if file.suffix.lower() != ".json":
                continue
            try:
                with file.open("rb") as handle:
                    head = handle.read(4096)
            except OSError:
                continue
            if all(key.encode() in head for key in _KEEP_KEYS):
                return True
        return False

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_export(
            path,
            file_suffixes=(".json",),
            max_unpacked=self.max_unpacked,
            max_member=self.max_member,
        )
        try:
            names = tree.names()
            if warning is not None:
                yield Notice(tree.label, warning)
            walk = self._walk(tree, names, path)
            yield from held_until_found(walk, f"{path}: no Google Keep note (.json) in it")
        finally:
            tree.close()

    def _walk(
        self, tree: Tree, names: list[str], path: str | os.PathLike[str]
    ) -> Iterator[Item | Found]:
        stems = {n[: -len(".json")] for n in names if n.lower().endswith(".json")}
        repeats = Repeats()
        for name in names:
            location = where(tree, name)
            lowered = name.lower()
            if lowered.endswith(".html") and name[: -len(".html")] in stems:
                yield Skipped(location, "html copy of a note")
                continue
            if not lowered.endswith(".json"):
                yield _other(location, PurePosixPath(name).name)
                continue
            data, error = load_json(tree, name)
            if error is not None:
                yield FOUND
                yield error
                continue
            if not _is_note(data):
                if len(names) == 1:
                    raise InvalidInput(
                        f"{path}: not a Google Keep note (no createdTimestampUsec or "
                        "userEditedTimestampUsec in it)"
                    )
                yield Skipped(location, "not a Keep note", "a .json file that is not a note")
                continue
            yield FOUND
            yield from self._note(location, name, data, repeats)

    def _note(
        self, location: str, name: str, note: dict[str, Any], repeats: Repeats
    ) -> Iterator[Item]:
        stem = PurePosixPath(name).name[: -len(".json")]
        title = text_field(note.get("title"))
        if note.get("isTrashed") is True:
            yield Skipped(location, "trashed", f"trashed note {title or stem!r}: left out")
            return
        created = from_micros(note.get("createdTimestampUsec"))
        edited = from_micros(note.get("userEditedTimestampUsec"))
        if created is None and edited is None:
            yield Notice(location, "a note without timestamps: stored undated")
        try:
            text = _text(note, title)
        except MemppError as exc:
            yield ItemError(location, str(exc))
            return
        if not text:
            yield Skipped(location, "empty note")
            return
        base = f"keep://{quote(stem, safe='')}"
        # userEditedTimestampUsec is not a text version (it may move when only a pin or a
        # colour changed), so a version is named by its content: same text, nothing added.
        source = (
            f"{base}#v={hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
        )
        repeated = repeats.check(source, text, location)
        if repeated is not None:
            yield repeated
            return
        labels = [
            label["name"].strip()
            for label in listed(note.get("labels"))
            if isinstance(label, dict) and text_field(label.get("name"))
        ]
        metadata: dict[str, Any] = {"note": stem}
        for key in ("isPinned", "isArchived"):
            if note.get(key) is True:
                metadata[key.removeprefix("is").lower()] = True
        if text_field(note.get("color")) and note["color"] != "DEFAULT":
            metadata["color"] = note["color"]
        if edited is not None:
            metadata["edited"] = edited.isoformat()
        if created is not None:
            metadata["created"] = created.isoformat()
        try:
            yield Document.create(
                text,
                author=self.author,
                date=edited or created,  # the text as it stands dates from the last edit
                tags=labels,
                source=source,
                thread=base,
                metadata=metadata,
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))


def _is_note(data: object) -> bool:
    return isinstance(data, dict) and any(key in data for key in _KEEP_KEYS)


def _other(location: str, base: str) -> Skipped:
    lowered = base.lower()
    if lowered == "labels.txt":
        return Skipped(location, "label list")
    if lowered.endswith(_MEDIA):
        return Skipped(location, "attachment")
    if lowered.endswith(".html"):
        return Skipped(location, "not a note", "an HTML page without a note's .json (not read)")
    return Skipped(location, "not a note", "not a Keep note file")


def _text(note: dict[str, Any], title: str | None) -> str:
    body = note.get("textContent")
    if not isinstance(body, str) or not body.strip():
        markup = note.get("textContentHtml")
        body = html_text(markup) if isinstance(markup, str) and markup.strip() else ""
    lines = [title] if title else []
    if body.strip():
        lines += ([""] if lines else []) + [body.strip()]
    checklist = note.get("listContent")
    if isinstance(checklist, list) and checklist:
        if lines:
            lines.append("")
        for entry in checklist:
            if isinstance(entry, dict) and text_field(entry.get("text")):
                mark = "x" if entry.get("isChecked") is True else " "
                lines.append(f"[{mark}] {entry['text'].strip()}")
            elif not isinstance(entry, dict):
                raise InvalidInput(f"a checklist item must be an object, got {kind(entry)}")
    for attachment in listed(note.get("attachments")):
        if isinstance(attachment, dict) and text_field(attachment.get("filePath")):
            lines.append(f"[attachment: {attachment['filePath'].strip()}]")
    return "\n".join(lines)
