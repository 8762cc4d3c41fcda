"""The Slack importer: a workspace export (``users.json``, ``channels.json`` and one folder of
daily JSON files per channel), as a ``.zip`` or unpacked, into one document per message.

- author: the user's real name from ``users.json`` (else display name, else user name; bots by
  their bot name);
- date: the message ``ts``, a UTC datetime to the microsecond;
- thread: a reply and its parent share ``slack://CHANNEL_ID/THREAD_TS``; a message outside a
  thread belongs to its channel-day, ``slack://CHANNEL_ID/YYYY-MM-DD``;
- text: mentions and channel links resolved to names, ``<url|label>`` unescaped, titles of
  files and attachments appended;
- tags: the channel name; source: ``slack://CHANNEL_ID/TS``, stable across exports.

Join/leave and other system messages are skipped and counted by subtype. An export holds each
edited message once, with its final text, which is what is stored.
"""

from __future__ import annotations

import html
import json
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.archive import (
    MAX_MEMBER,
    MAX_UNPACKED,
    MemberError,
    Tree,
    open_tree,
)
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.records import Document

# Subtypes that carry what someone wrote; every other subtype is a system event.
KEPT_SUBTYPES = frozenset(
    {None, "bot_message", "me_message", "file_share", "thread_broadcast", "reply_broadcast"}
)
CHANNEL_LISTS = ("channels.json", "groups.json", "mpims.json", "dms.json")
_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.json$")
_TS = re.compile(r"^(\d{1,12})(?:\.(\d{1,6}))?$")
_TOKEN = re.compile(r"<([^<>\n]*)>")


@dataclass(frozen=True, slots=True)
class Channel:
    id: str
    name: str


class SlackImporter:
    """Reads a Slack workspace export. ``max_unpacked`` and ``max_member`` cap, in bytes, what
    a zip may unpack to in all and per file (a zip bomb stops there)."""

    name = "slack"
    description = "a Slack workspace export (.zip or unpacked folder)"

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        if where.is_dir():
            return any((where / name).is_file() for name in ("users.json", "channels.json"))
        try:
            if not zipfile.is_zipfile(where):
                return False
            with zipfile.ZipFile(where) as archive:
                return _root(archive.namelist()) is not None
        except (OSError, zipfile.BadZipFile):
            return False

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_tree(path, max_unpacked=self.max_unpacked, max_member=self.max_member)
        try:
            names = tree.names()
            root = _root(names)
            if root is None:
                raise InvalidInput(
                    f"{path}: not a Slack export (no users.json or channels.json in it)"
                )
            if warning is not None:
                yield Notice(tree.label, warning)
            yield from _Export(tree, root, names).messages()
        finally:
            tree.close()


def _root(names: list[str]) -> str | None:
    """The folder of the export inside the tree ("" at its top): where its lists are."""
    roots = [
        str(PurePosixPath(name).parent)
        for name in names
        if PurePosixPath(name).name in ("users.json", "channels.json")
    ]
    if not roots:
        return None
    top = min(roots, key=lambda r: (r.count("/"), r))
    return "" if top == "." else top + "/"


class _Export:
    def __init__(self, tree: Tree, root: str, names: list[str]) -> None:
        self.tree = tree
        self.root = root
        self.names = [n[len(root) :] for n in names if n.startswith(root)]
        self.users: dict[str, str] = {}
        self.channels: dict[str, Channel] = {}  # by folder name
        self.channel_names: dict[str, str] = {}  # by id, for <#C…> links
        self.channels_listed = False
        self.unknown_users: set[str] = set()

    def where(self, name: str) -> str:
        return f"{self.tree.label}:{self.root}{name}"

    def messages(self) -> Iterator[Item]:
        yield from self._load_users()
        yield from self._load_channels()
        folders: dict[str, list[str]] = {}
        for name in self.names:
            parts = name.split("/")
            if len(parts) == 1:
                continue  # the lists, integration logs, canvases
            folders.setdefault(parts[0], []).append("/".join(parts[1:]))
        listed = [f for f in self.channels if f in folders]
        for folder in listed + sorted(set(folders) - set(self.channels)):
            if folder not in self.channels:
                self.channels[folder] = Channel(folder, folder)
                if self.channels_listed:
                    yield Notice(self.where(folder), "folder not in the channel lists; named by it")
            for file in sorted(folders[folder]):
                match = _DAY_FILE.match(file)
                if match is None:
                    yield Skipped(
                        self.where(f"{folder}/{file}"),
                        "not a day file",
                        "not a channel's YYYY-MM-DD.json",
                    )
                    continue
                yield from self._day(self.channels[folder], folder, file, match.group(1))

    def _json(self, name: str) -> tuple[Any, ItemError | None]:
        try:
            raw = self.tree.read(self.root + name)
        except MemberError as exc:
            return None, ItemError(self.where(name), str(exc))
        try:
            return json.loads(raw.decode("utf-8-sig")), None
        except UnicodeDecodeError as exc:
            return None, ItemError(self.where(name), f"not UTF-8 text ({exc.reason})")
        except json.JSONDecodeError as exc:
            return None, ItemError(
                f"{self.where(name)}:{exc.lineno}", f"invalid JSON: {exc.msg} (column {exc.colno})"
            )
        except RecursionError:
            return None, ItemError(self.where(name), "JSON nested too deeply")

    def _list(self, name: str) -> Iterator[Item | list[Any]]:
        data, error = self._json(name)
        if error is not None:
            yield error
        elif not isinstance(data, list):
            yield ItemError(self.where(name), f"expected a JSON list, got {_kind(data)}")
        else:
            yield data

    def _load_users(self) -> Iterator[Item]:
        if "users.json" not in self.names:
            yield Notice(self.where("users.json"), "missing: authors are named by user id")
            return
        for got in self._list("users.json"):
            if not isinstance(got, list):
                yield got
                continue
            for user in got:
                if isinstance(user, dict) and isinstance(user.get("id"), str):
                    name = _person(user)
                    if name:
                        self.users[user["id"]] = name

    def _load_channels(self) -> Iterator[Item]:
        for list_name in CHANNEL_LISTS:
            if list_name not in self.names:
                continue
            self.channels_listed = True
            for got in self._list(list_name):
                if not isinstance(got, list):
                    yield got
                    continue
                for entry in got:
                    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                        continue
                    # Channels, groups and group DMs have folders by name; DMs by id.
                    folder = entry.get("name") if list_name != "dms.json" else entry["id"]
                    if isinstance(folder, str) and folder:
                        name = folder if list_name != "dms.json" else "dm"
                        self.channels.setdefault(folder, Channel(entry["id"], name))
                        self.channel_names.setdefault(entry["id"], name)

    def _day(self, channel: Channel, folder: str, file: str, day: str) -> Iterator[Item]:
        name = f"{folder}/{file}"
        for got in self._list(name):
            if not isinstance(got, list):
                yield got
                continue
            for number, message in enumerate(got, start=1):
                location = f"{self.where(name)}:{number}"
                yield from self._message(channel, day, location, message)

    def _message(self, channel: Channel, day: str, location: str, message: Any) -> Iterator[Item]:
        if not isinstance(message, dict):
            yield ItemError(location, f"a message must be a JSON object, got {_kind(message)}")
            return
        if message.get("type", "message") != "message":
            yield Skipped(location, str(message.get("type")))
            return
        subtype = message.get("subtype")
        if subtype not in KEPT_SUBTYPES:
            yield Skipped(location, str(subtype))
            return
        ts = message.get("ts")
        when = _moment(ts)
        if when is None:
            yield ItemError(location, "message without a valid ts" if ts else "message without ts")
            return
        author = yield from self._author(message, location)
        text = self._text(message)
        thread_ts = message.get("thread_ts")
        thread_key = thread_ts if isinstance(thread_ts, str) and _moment(thread_ts) else day
        try:
            yield Document.create(
                text,
                author=author,
                date=when,
                tags=[channel.name],
                source=f"slack://{channel.id}/{ts}",
                thread=f"slack://{channel.id}/{thread_key}",
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))

    def _author(self, message: dict[str, Any], location: str) -> Iterator[Item]:
        """The author's name; yields a notice the first time a user id cannot be named."""
        user = message.get("user")
        if message.get("subtype") == "bot_message" or (not user and message.get("bot_id")):
            profile = message.get("bot_profile")
            for candidate in (
                message.get("username"),
                profile.get("name") if isinstance(profile, dict) else None,
                self.users.get(user) if isinstance(user, str) else None,
                message.get("bot_id"),
            ):
                if isinstance(candidate, str) and candidate.strip():
                    return candidate.strip()
            return None
        if not isinstance(user, str) or not user:
            return None
        if user in self.users:
            return self.users[user]
        profile = message.get("user_profile")
        named = _person({"profile": profile}) if isinstance(profile, dict) else None
        if user not in self.unknown_users:
            self.unknown_users.add(user)
            yield Notice(
                location,
                f"user {user} is not in users.json; "
                + (f"named {named!r} from the message" if named else "kept as the user id"),
            )
        if named:
            self.users[user] = named
        return named or user

    def _text(self, message: dict[str, Any]) -> str:
        text = message.get("text")
        body = self._resolve(text) if isinstance(text, str) else ""
        lines = [body] if body.strip() else []
        for kind, key in (("file", "files"), ("attachment", "attachments")):
            entries = message.get(key)
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if not isinstance(entry, dict):
                    continue
                title = next(
                    (
                        entry[k].strip()
                        for k in ("title", "name", "fallback")
                        if isinstance(entry.get(k), str) and entry[k].strip()
                    ),
                    None,
                )
                if title:
                    lines.append(f"[{kind}: {self._resolve(title)}]")
        return "\n".join(lines)

    def _resolve(self, text: str) -> str:
        return html.unescape(_TOKEN.sub(self._token, text))

    def _token(self, match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            return "@" + (self.users.get(target[1:]) or label or target[1:])
        if target.startswith("#"):
            return "#" + (label or self.channel_names.get(target[1:]) or target[1:])
        if target.startswith("!"):
            if label:
                return label
            word = target[1:].split("^")[0]
            return "@" + word if word in ("here", "channel", "everyone") else word
        url = target
        shown = url.removeprefix("mailto:")
        if not label or label in (url, shown) or _bare(url) == label:
            return shown
        return f"{label} ({url})"


def _bare(url: str) -> str:
    return re.sub(r"^[a-z]+://", "", url).rstrip("/")


def _person(user: dict[str, Any]) -> str | None:
    profile = user.get("profile") if isinstance(user.get("profile"), dict) else {}
    for candidate in (
        profile.get("real_name"),
        user.get("real_name"),
        profile.get("display_name"),
        user.get("name"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return None


def _moment(ts: object) -> datetime | None:
    if not isinstance(ts, str):
        return None
    match = _TS.match(ts)
    if match is None:
        return None
    micros = int((match.group(2) or "0").ljust(6, "0"))
    try:
        return datetime.fromtimestamp(int(match.group(1)), UTC).replace(microsecond=micros)
    except (OverflowError, OSError, ValueError):
        return None


_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def _kind(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)
