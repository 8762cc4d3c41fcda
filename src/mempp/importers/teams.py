"""The Microsoft Teams importer: a Teams data export (``teams/teamsList.json`` and, per team,
``teams/TEAM_ID/channels_TEAM_ID.json``, ``teamMembers_TEAM_ID.json`` and
``messages_TEAM_ID.json``: Microsoft Graph ``chatMessage`` objects, in PascalCase as the
export writes them or camelCase as the Graph API does), a folder or a zip, one record per
message.

- author: ``From.User.DisplayName`` (else the name the team's members give the user id,
  else the id, told); an app's messages by the app's name; the raw id in metadata;
- date: ``CreatedDateTime``; an edited message by its ``LastEditedDateTime`` (the posting
  time in metadata), the edit's stamp in its source, so a later export with the edit
  stores a new version;
- thread: a channel conversation, ``teams://TEAM/CHANNEL/ROOT_ID`` (a reply's
  ``ReplyToId``, else its own id); a chat's message its chat-day,
  ``teams://chat/CHAT_ID/YYYY-MM-DD``;
- text: the ``Subject``, a blank line and the body (HTML made text by inscriptis, the
  ``import`` extra; scripts dropped), then attachments by name;
- tags: the team's and the channel's names; source: the message's ``WebUrl`` (else
  ``teams://TEAM/CHANNEL/ID``).

System events (members added, a channel renamed: ``MessageType`` other than ``message``, or
no ``From``) and deleted messages are skipped and counted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.archive import MAX_MEMBER, MAX_UNPACKED, Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.exports import (
    Repeats,
    html_text,
    kind,
    listed,
    load_json,
    moment,
    open_export,
    text_field,
    versioned,
    where,
    zip_names,
)
from mempp.records import Document

_EVENTS = frozenset({"message", "chatevent", "systemeventmessage", "unknownfuturevalue"})
_LISTS = re.compile(r"^(channels|teamMembers|messages)_(.+)\.json$", re.I)


def _lower(value: Any) -> Any:
    """Keys lowercased all the way down: the export's PascalCase and Graph's camelCase read
    alike."""
    if isinstance(value, dict):
        return {str(k).lower(): _lower(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lower(v) for v in value]
    return value


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


class TeamsImporter:
    """Reads a Microsoft Teams data export (a folder or a zip)."""

    name = "teams"
    description = (
        "a Microsoft Teams data export (teamsList.json, messages_TEAM.json; folder or zip)"
    )
    stable_sources = True  # a message's WebUrl names one message; an edit names its stamp

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where_ = Path(path)
        if where_.is_dir():
            return (where_ / "teams" / "teamsList.json").is_file() or (
                where_ / "teamsList.json"
            ).is_file()
        if where_.is_file() and _LISTS.match(where_.name):
            return True
        names = zip_names(where_) if where_.is_file() else None
        return bool(names) and any(
            _LISTS.match(PurePosixPath(name).name) or name.endswith("teamsList.json")
            for name in names or ()
        )

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_export(
            path,
            file_suffixes=(".json",),
            max_unpacked=self.max_unpacked,
            max_member=self.max_member,
        )
        try:
            names = tree.names()
            if not any(_LISTS.match(PurePosixPath(n).name) for n in names):
                raise InvalidInput(
                    f"{path}: not a Teams export (no messages_TEAM.json or teamsList.json in it)"
                )
            if warning is not None:
                yield Notice(tree.label, warning)
            yield from _Export(tree, names).messages()
        finally:
            tree.close()


class _Export:
    def __init__(self, tree: Tree, names: list[str]) -> None:
        self.tree = tree
        self.names = names
        self.teams: dict[str, str] = {}
        self.channels: dict[str, str] = {}
        self.members: dict[str, str] = {}
        self.unknown: set[str] = set()
        self.repeats = Repeats()

    def _list(self, name: str) -> Iterator[Item | list[Any]]:
        data, error = load_json(self.tree, name)
        if error is not None:
            yield error
        elif not isinstance(data, list):
            yield ItemError(where(self.tree, name), f"expected a JSON list, got {kind(data)}")
        else:
            yield _lower(data)

    def messages(self) -> Iterator[Item]:
        by_kind: dict[str, list[str]] = {"channels": [], "teammembers": [], "messages": []}
        for name in self.names:
            base = PurePosixPath(name).name
            match = _LISTS.match(base)
            if base == "teamsList.json":
                for got in self._list(name):
                    if not isinstance(got, list):
                        yield got
                        continue
                    for team in got:
                        team_id = text_field(_get(team, "groupsid")) or text_field(_get(team, "id"))
                        named = text_field(_get(team, "name")) or text_field(
                            _get(team, "displayname")
                        )
                        if team_id and named:
                            self.teams[team_id] = named
            elif match is not None:
                by_kind[match.group(1).lower()].append(name)
            else:
                yield Skipped(
                    where(self.tree, name),
                    "not a Teams export file",
                    "not a list this reader knows",
                )
        for name in by_kind["channels"]:
            for got in self._list(name):
                if not isinstance(got, list):
                    yield got
                    continue
                for channel in got:
                    channel_id = text_field(_get(channel, "id"))
                    named = text_field(_get(channel, "displayname"))
                    if channel_id and named:
                        self.channels[channel_id] = named
        for name in by_kind["teammembers"]:
            for got in self._list(name):
                if not isinstance(got, list):
                    yield got
                    continue
                for member in got:
                    user_id = text_field(_get(member, "userid")) or text_field(_get(member, "id"))
                    named = text_field(_get(member, "name")) or text_field(
                        _get(member, "displayname")
                    )
                    if user_id and named:
                        self.members[user_id] = named
        for name in by_kind["messages"]:
            team_from_name = _LISTS.match(PurePosixPath(name).name)
            for got in self._list(name):
                if not isinstance(got, list):
                    yield got
                    continue
                for number, message in enumerate(got, start=1):
                    yield from self._message(
                        f"{where(self.tree, name)}:{number}",
                        message,
                        team_from_name.group(2) if team_from_name else "",
                    )

    def _message(self, location: str, message: Any, team_hint: str) -> Iterator[Item]:
        if not isinstance(message, dict):
            yield ItemError(location, f"a message must be a JSON object, got {kind(message)}")
            return
        message_id = text_field(_get(message, "id"))
        if message_id is None:
            yield ItemError(location, "message without an id")
            return
        kind_ = (text_field(_get(message, "messagetype")) or "message").lower()
        sender = _get(message, "from")
        if kind_ != "message" or not isinstance(sender, dict):
            # Graph's event types (chatEvent, systemEventMessage, unknownFutureValue for the
            # newer ones) and a message with no sender are the tool's, not anyone's words.
            system = kind_ in _EVENTS or not isinstance(sender, dict)
            yield Skipped(location, "system event" if system else kind_)
            return
        if _get(message, "deleteddatetime"):
            yield Skipped(location, "deleted")
            return
        when = moment(_get(message, "createddatetime"))
        if when is None:
            yield ItemError(location, f"message {message_id} without a valid CreatedDateTime")
            return
        edited = moment(_get(message, "lastediteddatetime"))
        author, raw_id = yield from self._author(sender, location)
        try:
            text = _text(message)
        except MemppError as exc:
            yield ItemError(location, str(exc))
            return
        team = text_field(_get(message, "channelidentity", "teamid")) or team_hint
        channel = text_field(_get(message, "channelidentity", "channelid"))
        chat = text_field(_get(message, "chatid"))
        root = text_field(_get(message, "replytoid")) or message_id
        if channel:
            thread = f"teams://{team}/{channel}/{root}"
            fallback = f"teams://{team}/{channel}/{message_id}"
        else:
            thread = f"teams://chat/{chat or team}/{when.date().isoformat()}"
            fallback = f"teams://chat/{chat or team}/{message_id}"
        source = versioned(text_field(_get(message, "weburl")) or fallback, edited)
        repeated = self.repeats.check(source, text, location)
        if repeated is not None:
            yield repeated
            return
        tags = [t for t in (self.teams.get(team), self.channels.get(channel or "")) if t]
        metadata: dict[str, Any] = {"id": message_id, "team": team}
        for key, value in (("channel", channel), ("chat", chat), ("user_id", raw_id)):
            if value:
                metadata[key] = value
        if root != message_id:
            metadata["reply_to"] = root
        if edited is not None:
            metadata["edited"] = _get(message, "lastediteddatetime")
            metadata["posted"] = _get(message, "createddatetime")
        try:
            yield Document.create(
                text,
                author=author,
                date=edited or when,  # a version is dated when its text came to be
                tags=tags,
                source=source,
                thread=thread,
                metadata=metadata,
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))

    def _author(self, sender: dict[str, Any], location: str) -> Iterator[Item]:
        user = _get(sender, "user")
        app = _get(sender, "application")
        who = user if isinstance(user, dict) else app if isinstance(app, dict) else {}
        raw = text_field(_get(who, "id"))
        named = text_field(_get(who, "displayname"))
        if raw and raw in self.members:
            return self.members[raw], raw
        if raw and self.members and raw not in self.unknown and isinstance(user, dict):
            self.unknown.add(raw)
            yield Notice(
                location,
                f"user {raw} is not among the team's members; "
                + (f"named {named!r} from the message" if named else "kept as the id"),
            )
        if named:
            return named, raw
        if raw:
            return raw, raw
        yield Notice(location, "message without a sender: stored unattributed")
        return None, None


def _text(message: dict[str, Any]) -> str:
    body = _get(message, "body", "content")
    kind_ = (text_field(_get(message, "body", "contenttype")) or "text").lower()
    content = ""
    if isinstance(body, str) and body.strip():
        content = html_text(body) if kind_ == "html" else body.strip()
    subject = text_field(_get(message, "subject"))
    parts = [p for p in (subject, content) if p]
    text = "\n\n".join(parts)
    for attachment in listed(_get(message, "attachments")):
        named = text_field(_get(attachment, "name"))
        if named:
            text += f"\n[attachment: {named}]"
    return text
