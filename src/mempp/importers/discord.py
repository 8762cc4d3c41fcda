"""The Discord importer: DiscordChatExporter JSON (one file per channel or thread, as a file,
a folder of them, or a zip), one document per message.

- author: the member's guild nickname, else the user name (the member list is the authors
  and mentions met in the export: a message whose author carries only an id is named from
  it); the raw id in metadata;
- date: the message ``timestamp``; an edited message's text is dated by its
  ``timestampEdited`` (it did not exist before; the posting time stays in metadata), which
  also goes into its source (a later export with the edit stores a new version, the old
  kept);
- thread: a thread file's messages share ``discord://GUILD/THREAD_ID``; a reply chain is one
  thread, ``discord://GUILD/CHANNEL/ROOT_ID`` (the first message answered, even when the
  export lacks it); any other message belongs to its channel-day,
  ``discord://GUILD/CHANNEL/YYYY-MM-DD``;
- text: the content with spoiler bars removed, then attachments, stickers and embeds by
  name; tags: the channel name (a thread's parent channel); source: the message's URL,
  ``https://discord.com/channels/GUILD/CHANNEL/MESSAGE``.

Joins, pins, "started a thread" and other system messages are skipped, counted by type.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.exports import (
    FOUND,
    Found,
    Repeats,
    held_until_found,
    kind,
    listed,
    load_json,
    moment,
    open_export,
    skipped_file,
    text_field,
    versioned,
    where,
    zip_heads,
)
from mempp.records import Document

KEPT_TYPES = frozenset(
    {"Default", "Reply", "ChatInputCommand", "ContextMenuCommand", "ThreadStarterMessage"}
)
_SPOILER = re.compile(r"\|\|(.+?)\|\|", re.S)
_RAW_MENTION = re.compile(r"<@!?(\d{5,25})>")
_FILE_ID = re.compile(r"\[(\d+)\]\.json$")
_THREAD_TYPES = ("GuildPublicThread", "GuildPrivateThread", "GuildNewsThread")


@dataclass(frozen=True, slots=True)
class _Channel:
    guild: str  # "@me" for direct messages, as Discord's own URLs say
    id: str
    name: str
    tag: str
    thread: str | None  # the thread every message of a thread file belongs to


class DiscordImporter:
    """Reads DiscordChatExporter JSON exports (``--format Json``)."""

    name = "discord"
    description = "DiscordChatExporter JSON: a channel or thread file, a folder or a zip of them"
    stable_sources = True  # a message's URL names one message; an edit names its stamp

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where_ = Path(path)
        if where_.is_file() and where_.suffix.lower() == ".json":
            return _looks_like(where_)
        if where_.is_dir():
            return any(_looks_like(p) for p in sorted(where_.glob("*.json"))[:5])
        heads = zip_heads(where_, ".json") if where_.is_file() else None
        return bool(heads) and b'"guild"' in heads[0][1] and b'"channel"' in heads[0][1]

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_export(
            path,
            file_suffixes=(".json",),
            max_unpacked=self.max_unpacked,
            max_member=self.max_member,
        )
        try:
            names = [n for n in tree.names() if not _is_media(n)]
            if not any(n.lower().endswith(".json") for n in names):
                raise InvalidInput(f"{path}: no DiscordChatExporter .json file in it")
            if warning is not None:
                yield Notice(tree.label, warning)
            for name in tree.names():
                if _is_media(name):  # counted, not read: the export's pictures and files
                    yield Skipped(where(tree, name), "media file")
            walk = _Export(tree, names, single=len(tree.names()) == 1).messages(path)
            yield from held_until_found(walk, f"{path}: no DiscordChatExporter JSON export in it")
        finally:
            tree.close()


def _looks_like(file: Path) -> bool:
    try:
        with file.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return b'"guild"' in head and b'"channel"' in head


def _is_media(name: str) -> bool:
    """DiscordChatExporter's ``….json_Files/`` folders hold the media of a channel's file."""
    return any(part.endswith(".json_Files") for part in name.split("/")[:-1])


class _Export:
    def __init__(self, tree: Tree, names: list[str], *, single: bool) -> None:
        self.tree = tree
        self.names = names
        self.single = single
        self.members: dict[str, str] = {}
        self.thread_of: dict[str, str] = {}  # message id -> its thread
        self.answered: set[str] = set()  # ids of the current file's answered messages
        self.repeats = Repeats()

    def messages(self, path: str | os.PathLike[str]) -> Iterator[Item | Found]:
        # Thread files after channel files: a thread's parent message is then already read.
        ordered = sorted(self.names, key=lambda n: ("_threads/" in n or "/threads/" in n, n))
        for name in ordered:
            location = where(self.tree, name)
            if not name.lower().endswith(".json"):
                yield Skipped(location, "not a .json file", "not a DiscordChatExporter .json file")
                continue
            data, error = load_json(self.tree, name)
            if error is not None:
                yield FOUND  # a file that may be one, broken: its failure is the answer
                yield error
                continue
            if not _is_export(data):
                if self.single:
                    raise InvalidInput(
                        f"{path}: not a DiscordChatExporter JSON export (no guild, channel and "
                        "messages in it)"
                    )
                yield skipped_file(location, "DiscordChatExporter")
                continue
            yield FOUND
            yield from self._file(name, location, data)

    def _file(self, name: str, location: str, data: dict[str, Any]) -> Iterator[Item]:
        guild, channel = data["guild"], data["channel"]
        channel_id = text_field(channel.get("id")) if isinstance(channel, dict) else None
        if channel_id is None:
            yield ItemError(location, "channel.id missing: its messages cannot be given sources")
            return
        guild_id = text_field(guild.get("id")) if isinstance(guild, dict) else None
        guild_key = "@me" if guild_id in (None, "0") else guild_id
        kind_ = text_field(channel.get("type")) or ""
        name_ = text_field(channel.get("name")) or channel_id
        in_thread = kind_ in _THREAD_TYPES
        parent = text_field(channel.get("category")) if in_thread else None
        current = _Channel(
            guild=guild_key,
            id=channel_id,
            name=name_,
            tag=parent or name_,
            thread=f"discord://{guild_key}/{channel_id}" if in_thread else None,
        )
        named = _FILE_ID.search(name)
        if named and named.group(1) != channel_id:
            yield Notice(
                location, f"the file name says channel {named.group(1)}, the file {channel_id}"
            )
        messages = data["messages"]
        declared = data.get("messageCount")
        if isinstance(declared, int) and declared != len(messages):
            yield Notice(
                location,
                f"messageCount says {declared}, the file holds {len(messages)} messages",
            )
        # A message that a reply answers roots a reply chain: the chain is its own thread.
        self.answered = {
            m["reference"]["messageId"]
            for m in messages
            if isinstance(m, dict)
            and isinstance(m.get("reference"), dict)
            and isinstance(m["reference"].get("messageId"), str)
        }
        for number, message in enumerate(messages, start=1):
            yield from self._message(current, f"{location}:{number}", message)

    def _message(self, channel: _Channel, location: str, message: Any) -> Iterator[Item]:
        if not isinstance(message, dict):
            yield ItemError(location, f"a message must be a JSON object, got {kind(message)}")
            return
        message_id = text_field(message.get("id"))
        if message_id is None:
            yield ItemError(location, "message without an id")
            return
        kind_ = message.get("type", "Default")
        if not isinstance(kind_, str):
            yield ItemError(location, f"type must be a string, got {kind(kind_)}")
            return
        if kind_ not in KEPT_TYPES:
            yield Skipped(location, kind_)
            return
        when = moment(message.get("timestamp"))
        if when is None:
            yield ItemError(location, f"message {message_id} without a valid timestamp")
            return
        edited = moment(message.get("timestampEdited"))
        author = yield from self._author(message, location)
        text = _RAW_MENTION.sub(self._mention, _text(message))
        source = versioned(
            f"https://discord.com/channels/{channel.guild}/{channel.id}/{message_id}", edited
        )
        repeated = self.repeats.check(source, text, location)
        if repeated is not None:
            yield repeated
            return
        thread = self._thread(channel, message, message_id, when)
        try:
            yield Document.create(
                text,
                author=author,
                date=edited or when,  # a version is dated when its text came to be
                tags=[channel.tag],
                source=source,
                thread=thread,
                metadata=_metadata(message, channel, message_id, edited),
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))

    def _author(self, message: dict[str, Any], location: str) -> Iterator[Item]:
        author = message.get("author")
        if not isinstance(author, dict):
            yield Notice(location, "message without an author: stored unattributed")
            return None
        for mention in listed(message.get("mentions")):
            if isinstance(mention, dict):
                self._remember(mention)
        named = self._remember(author)
        if named is not None:
            return named
        raw = text_field(author.get("id"))
        if raw is None:
            yield Notice(location, "message without an author: stored unattributed")
            return None
        yield Notice(location, f"author {raw} has no name in the export: kept as the id")
        return raw

    def _mention(self, match: re.Match[str]) -> str:
        """A raw ``<@id>`` (the exporter renders most as ``@name``; not every version does)."""
        return "@" + self.members.get(match.group(1), match.group(1))

    def _remember(self, member: dict[str, Any]) -> str | None:
        raw = text_field(member.get("id"))
        name = text_field(member.get("nickname")) or text_field(member.get("name"))
        if raw is not None and name is not None:
            self.members[raw] = name
        return name or (self.members.get(raw) if raw else None)

    def _thread(
        self, channel: _Channel, message: dict[str, Any], message_id: str, when: datetime
    ) -> str:
        if channel.thread is not None:
            thread = channel.thread
        else:
            here = f"discord://{channel.guild}/{channel.id}"
            reference = message.get("reference")
            answered = reference.get("messageId") if isinstance(reference, dict) else None
            if isinstance(answered, str):
                # A reply to a message not in the export (deleted) names the chain as that
                # message would, so the chain is one thread in any export.
                thread = self.thread_of.get(answered) or f"{here}/{answered}"
            elif message_id in self.answered:
                thread = f"{here}/{message_id}"
            else:
                thread = f"{here}/{when.date().isoformat()}"
        self.thread_of.setdefault(message_id, thread)
        return thread


def _is_export(data: object) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("channel"), dict)
        and "guild" in data
        and isinstance(data.get("messages"), list)
    )


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    lines = [_SPOILER.sub(r"\1", content)] if isinstance(content, str) and content.strip() else []
    for key, label, field in (
        ("attachments", "attachment", "fileName"),
        ("stickers", "sticker", "name"),
    ):
        for entry in listed(message.get(key)):
            if isinstance(entry, dict) and text_field(entry.get(field)):
                lines.append(f"[{label}: {entry[field].strip()}]")
    for embed in listed(message.get("embeds")):
        if not isinstance(embed, dict):
            continue
        title, url = text_field(embed.get("title")), text_field(embed.get("url"))
        description = text_field(embed.get("description"))
        if title or description:
            shown = " — ".join(p for p in (title, description) if p)
            lines.append(f"[embed: {shown}" + (f" ({url})]" if url else "]"))
    return "\n".join(lines)


def _metadata(
    message: dict[str, Any], channel: _Channel, message_id: str, edited: datetime | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"guild": channel.guild, "channel": channel.id, "id": message_id}
    author = message.get("author")
    if isinstance(author, dict):
        for key, label in (("id", "author_id"), ("name", "user_name")):
            if isinstance(author.get(key), str):
                out[label] = author[key]
        if author.get("isBot") is True:
            out["bot"] = True
    reference = message.get("reference")
    if isinstance(reference, dict) and isinstance(reference.get("messageId"), str):
        out["reply_to"] = reference["messageId"]
    if edited is not None:
        out["edited"] = message["timestampEdited"]
        out["posted"] = message["timestamp"]
    if message.get("isPinned") is True:
        out["pinned"] = True
    if message.get("type") not in (None, "Default"):
        out["type"] = message["type"]
    return out
