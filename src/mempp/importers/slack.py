"""The Slack importer: a workspace export (``users.json``, ``channels.json`` and one folder of
daily JSON files per channel), as a ``.zip`` or unpacked, into one document per message.

- author: the user's real name from ``users.json`` (else display name, else user name); a bot
  by the name the export gives it: the message's ``username`` or ``bot_profile``, a bot user
  of ``users.json``, else the ``bot_add`` message that added it (and ``integration_logs.json``);
  a file comment by the comment's writer;
- date: the message ``ts``, a UTC datetime to the microsecond;
- thread: a reply and its parent share ``slack://CHANNEL_ID/THREAD_TS``; a message outside a
  thread belongs to its channel-day, ``slack://CHANNEL_ID/YYYY-MM-DD``;
- text: mentions and channel links resolved to names, ``<url|label>`` unescaped; then the
  words of attachments (pretext, text, fields: where bots put commit messages and CI
  results), of blocks the text does not already hold, and the titles of files;
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
    {
        None,
        "bot_message",
        "me_message",
        "file_share",
        "file_comment",
        "thread_broadcast",
        "reply_broadcast",
    }
)
CHANNEL_LISTS = ("channels.json", "groups.json", "mpims.json", "dms.json")
_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.json$")
_TS = re.compile(r"^(\d{1,12})(?:\.(\d{1,6}))?$")
_TOKEN = re.compile(r"<([^<>\n]*)>")
# bot_add's text: "added an integration to this channel: <https://x.slack.com/services/B0…|github>"
_BOT_LINK = re.compile(r"/services/(B[A-Z0-9]+)(?:\|([^<>|]+))?>")


@dataclass(frozen=True, slots=True)
class Channel:
    id: str
    name: str


class SlackImporter:
    """Reads a Slack workspace export. ``max_unpacked`` and ``max_member`` cap, in bytes, what
    a zip may unpack to in all and per file (a zip bomb stops there)."""

    name = "slack"
    description = "a Slack workspace export (.zip or unpacked folder)"
    stable_sources = True  # a message's URI never names another message

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
        self.bots: dict[str, str] = {}  # bot id -> name, from users.json's bot users
        self.added_bots: dict[str, str] | None = None  # from bot_add messages, read on demand
        self.services: dict[str, str] = {}  # bot id -> integration_logs.json's service name
        self.unknown_bots: set[str] = set()

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
            # The file alone as the location: in a day file, FILE:N names the N-th message.
            return None, ItemError(
                self.where(name),
                f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
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
                        profile = user.get("profile")
                        bot_id = profile.get("bot_id") if isinstance(profile, dict) else None
                        if isinstance(bot_id, str) and bot_id:
                            self.bots[bot_id] = name

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
        kind, subtype = message.get("type", "message"), message.get("subtype")
        for field, value in (("type", kind), ("subtype", subtype)):
            if value is not None and not isinstance(value, str):
                yield ItemError(location, f"{field} must be a string, got {_kind(value)}")
                return
        if kind != "message":
            yield Skipped(location, kind)
            return
        if subtype not in KEPT_SUBTYPES:
            yield Skipped(location, subtype)
            return
        ts = message.get("ts")
        when = _moment(ts)
        if when is None:
            yield ItemError(location, "message without a valid ts" if ts else "message without ts")
            return
        comment = message.get("comment") if subtype == "file_comment" else None
        if isinstance(comment, dict):
            # The comment's own writer and moment: the message only announces it.
            message = {**message, "user": comment.get("user") or message.get("user")}
            when = _moment(str(comment.get("timestamp", ""))) or when
        author = yield from self._author(message, location)
        text = self._text(message, comment if isinstance(comment, dict) else None)
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
                metadata=self._metadata(message, channel),
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))

    def _author(self, message: dict[str, Any], location: str) -> Iterator[Item]:
        """The author's name; yields a notice the first time a user or bot id cannot be
        named."""
        user = message.get("user")
        bot_id = message.get("bot_id")
        if message.get("subtype") == "bot_message" or (not user and bot_id):
            named = self._bot_name(message)
            if named:
                return named
            if not isinstance(bot_id, str) or not bot_id:
                return None
            if bot_id not in self.unknown_bots:
                self.unknown_bots.add(bot_id)
                yield Notice(
                    location,
                    f"bot {bot_id} is named nowhere in the export (no username, bot_profile, "
                    "bot user in users.json or bot_add message); kept as the bot id",
                )
            return bot_id
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

    def _bot_name(self, message: dict[str, Any]) -> str | None:
        """A bot's name from the message itself, else from what the export says of its id."""
        profile = message.get("bot_profile")
        user = message.get("user")
        for candidate in (
            message.get("username"),
            profile.get("name") if isinstance(profile, dict) else None,
            self.users.get(user) if isinstance(user, str) else None,
        ):
            if isinstance(candidate, str) and candidate.strip():
                return candidate.strip()
        bot_id = message.get("bot_id")
        if not isinstance(bot_id, str) or not bot_id:
            return None
        if bot_id in self.bots:
            return self.bots[bot_id]
        if self.added_bots is None:
            self.added_bots = self._read_bot_adds()
        return self.added_bots.get(bot_id) or self.services.get(bot_id)

    def _read_bot_adds(self) -> dict[str, str]:
        """Bot id -> name from every ``bot_add`` message of the export (the link it holds
        names the bot) and the matching entry of ``integration_logs.json`` (same channel,
        same second). Read once, and only when a bot is named nowhere else: older exports'
        bot posts carry no name of their own, and the bot may be added in another channel
        than the one it posts in, so the whole export is looked through."""
        logged: dict[tuple[str, int], str] = {}
        if "integration_logs.json" in self.names:
            data, _ = self._json("integration_logs.json")  # a broken log only loses names
            for entry in data if isinstance(data, list) else ():
                if not isinstance(entry, dict):
                    continue
                service = entry.get("service_type") or entry.get("app_type")
                if not isinstance(service, str) or not service.strip():
                    continue
                if isinstance(entry.get("bot_id"), str):
                    self.services[entry["bot_id"]] = service.strip()
                if isinstance(entry.get("channel"), str) and str(entry.get("date", "")).isdigit():
                    logged[(entry["channel"], int(entry["date"]))] = service.strip()
        found: dict[str, str] = {}
        for name in self.names:
            folder, _, file = name.partition("/")
            if not _DAY_FILE.match(file) or folder not in self.channels:
                continue
            try:
                raw = self.tree.read(self.root + name)
            except MemberError:
                continue  # reported when the day itself is read
            if b'"bot_add"' not in raw:
                continue
            try:
                messages = json.loads(raw.decode("utf-8-sig"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                continue
            for message in messages if isinstance(messages, list) else ():
                if not isinstance(message, dict) or message.get("subtype") != "bot_add":
                    continue
                text = message.get("text") if isinstance(message.get("text"), str) else ""
                link = _BOT_LINK.search(text)
                bot_id = message.get("bot_id") or (link.group(1) if link else None)
                if not isinstance(bot_id, str):
                    continue
                moment = _moment(message.get("ts"))
                service = (
                    logged.get((self.channels[folder].id, int(moment.timestamp())))
                    if moment is not None
                    else None
                )
                if service is not None:
                    self.services.setdefault(bot_id, service)
                label = link.group(2).strip() if link and link.group(2) else None
                if label or service:
                    found.setdefault(bot_id, label or service or "")
        return found

    def _text(self, message: dict[str, Any], comment: dict[str, Any] | None = None) -> str:
        if comment is not None and isinstance(comment.get("comment"), str):
            text: object = comment["comment"]
        else:
            text = message.get("text")
        body = self._resolve(text) if isinstance(text, str) else ""
        lines = [body] if body.strip() else []
        said = {" ".join(body.split())}
        blocks = message.get("blocks")
        if isinstance(blocks, list):
            for block in blocks:
                # rich_text is what ``text`` says, formatted: only read when the text is empty.
                if isinstance(block, dict) and (block.get("type") != "rich_text" or not body):
                    self._add(lines, said, _block_text(block, self._resolve, self.users))
        for entry in _entries(message, "files", "file"):
            title = _first(entry, "title", "name")
            if title:
                verb = "comment on file" if comment is not None else "file"
                lines.append(f"[{verb}: {self._resolve(title)}]")
        for entry in _entries(message, "attachments"):
            self._attachment(entry, lines, said)
        return "\n".join(lines)

    def _attachment(self, entry: dict[str, Any], lines: list[str], said: set[str]) -> None:
        """An attachment's words: a header line with its title, then its pretext, text and
        fields (a bot's commit message, a CI result, an unfurled page); its fallback only
        when it has none of them (the fallback is a plain-text summary of the rest)."""
        title = _first(entry, "title") or _first(entry, "author_name", "service_name")
        if title:
            lines.append(f"[attachment: {self._resolve(title)}]")
        own = len(lines)
        for key in ("pretext", "text"):
            if isinstance(entry.get(key), str):
                self._add(lines, said, self._resolve(entry[key]))
        for field in entry.get("fields") if isinstance(entry.get("fields"), list) else ():
            if isinstance(field, dict):
                name, value = _first(field, "title"), _first(field, "value")
                if value:
                    self._add(lines, said, self._resolve(f"{name}: {value}" if name else value))
        if len(lines) == own and not title and isinstance(entry.get("fallback"), str):
            self._add(lines, said, self._resolve(entry["fallback"]))

    @staticmethod
    def _add(lines: list[str], said: set[str], text: str) -> None:
        """Append ``text`` unless it is empty or already said (a fallback equal to the text)."""
        key = " ".join(text.split())
        if key and key not in said:
            said.add(key)
            lines.append(text.strip())

    def _metadata(self, message: dict[str, Any], channel: Channel) -> dict[str, Any]:
        out = _metadata(message, channel)
        bot_id = message.get("bot_id")
        if isinstance(bot_id, str) and bot_id in self.services:
            out["integration"] = self.services[bot_id]
        return out

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


def _entries(message: dict[str, Any], *keys: str) -> Iterator[dict[str, Any]]:
    """The objects of a message's list fields (``files``) or single ones (the old ``file``)."""
    for key in keys:
        value = message.get(key)
        for entry in value if isinstance(value, list) else [value]:
            if isinstance(entry, dict):
                yield entry


def _first(entry: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _block_text(block: dict[str, Any], resolve: Any, users: dict[str, str], depth: int = 0) -> str:
    """The words of a Block Kit block: ``section``/``header``/``context`` text objects and
    fields, ``rich_text`` elements (text, links, mentions, emoji), nested lists."""
    if depth > 8:  # blocks nest a few levels; hostile input may nest thousands
        return ""
    kind = block.get("type")
    if kind in ("text", "mrkdwn", "plain_text"):
        text = block.get("text")
        return resolve(text) if isinstance(text, str) else ""
    if kind == "link":
        url, label = block.get("url"), block.get("text")
        if isinstance(label, str) and label and isinstance(url, str) and label != url:
            return f"{label} ({url})"
        return url if isinstance(url, str) else ""
    if kind == "user":
        user = block.get("user_id")
        return "@" + users.get(user, user) if isinstance(user, str) else ""
    if kind == "emoji" and isinstance(block.get("name"), str):
        return f":{block['name']}:"
    if kind == "broadcast" and isinstance(block.get("range"), str):
        return "@" + block["range"]
    parts: list[str] = []
    for key in ("text", "elements", "fields"):
        value = block.get(key)
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, dict):
                parts.append(_block_text(child, resolve, users, depth + 1))
    joiner = (
        "" if kind in ("rich_text_section", "rich_text_quote", "rich_text_preformatted") else "\n"
    )
    return joiner.join(p for p in parts if p)


def _metadata(message: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """The ids a message's text and fields leave out: who, where, which message, edits."""
    out: dict[str, Any] = {"channel": channel.id, "ts": message["ts"]}
    for key in ("user", "bot_id", "subtype", "thread_ts"):
        if isinstance(message.get(key), str):
            out[key] = message[key]
    edited = message.get("edited")
    if isinstance(edited, dict) and isinstance(edited.get("ts"), str):
        out["edited"] = edited["ts"]
    names = [
        f["name"] for f in _entries(message, "files", "file") if isinstance(f.get("name"), str)
    ]
    if names:
        out["files"] = names
    comment = message.get("comment")
    if isinstance(comment, dict) and isinstance(comment.get("id"), str):
        out["comment"] = comment["id"]
    return out


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
