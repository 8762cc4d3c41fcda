"""The Trello importer: a board's JSON export (Board menu → Print, export and share → Export
as JSON), a file, a folder or a zip of them, into one record per card, per comment and per
card action that changes the card's state (moved between lists, archived, reopened, a member
added or removed, a due date set, a checklist item completed).

- author: the member's full name from the board's ``members`` (else the action's
  ``memberCreator``); a card's author is who created it; the raw id in metadata;
- date: the action's ``date``; a card's is its ``createCard`` action's, else the time in
  its id (Trello ids begin with their creation time in seconds, as MongoDB's do); an edited
  card or comment is dated by its last edit (its text did not exist before);
- thread: the card, ``https://trello.com/c/SHORTLINK`` (its comments and actions follow);
- text: a card's name, description and checklists; a comment's text; an action as a
  sentence (``Ana moved "Launch" from Doing to Done``);
- tags: the board name, the card's list and labels; source: the card's URL, a comment's
  ``URL#comment-ID``, an action's ``trello://action/ID``. A card or comment edited in the
  export carries its edit's stamp in the source (a new version; the old kept).

Board-level actions (``createList``, ``updateBoard``…) and edits of a card's text (already
in the card's version) are skipped, counted by type.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
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
    mapping,
    moment,
    open_export,
    skipped_file,
    text_field,
    versioned,
    where,
)
from mempp.records import Document

ACTIONS_CAP = 1000  # what Trello's JSON export holds at most
# Card actions whose state matters for as-of answers; every other type is counted skipped.
STATE_ACTIONS = frozenset(
    {
        "updateCard",
        "addMemberToCard",
        "removeMemberFromCard",
        "updateCheckItemStateOnCard",
        "addAttachmentToCard",
        "moveCardToBoard",
        "moveCardFromBoard",
        "copyCard",
        "convertToCardFromCheckItem",
        "deleteCard",
    }
)


class TrelloImporter:
    """Reads Trello board JSON exports."""

    name = "trello"
    description = "a Trello board's JSON export (a file, a folder or a zip of them)"
    stable_sources = True  # a card URL, a comment or an action id names one item

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER) -> None:
        self.max_unpacked = max_unpacked
        self.max_member = max_member

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        file = Path(path)
        if not (file.is_file() and file.suffix.lower() == ".json"):
            return False
        try:
            with file.open("rb") as handle:
                head = handle.read(1 << 16)
        except OSError:
            return False
        return b'"idBoard"' in head or (b'"cards"' in head and b'"lists"' in head)

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        tree, warning = open_export(
            path,
            file_suffixes=(".json",),
            max_unpacked=self.max_unpacked,
            max_member=self.max_member,
        )
        try:
            if warning is not None:
                yield Notice(tree.label, warning)
            walk = self._walk(tree, path)
            yield from held_until_found(walk, f"{path}: no Trello board export in it")
        finally:
            tree.close()

    def _walk(self, tree: Tree, path: str | os.PathLike[str]) -> Iterator[Item | Found]:
        names = tree.names()
        single = len(names) == 1
        repeats = Repeats()
        for name in names:
            location = where(tree, name)
            if not name.lower().endswith(".json"):
                yield Skipped(location, "not a .json file", "not a Trello board .json file")
                continue
            data, error = load_json(tree, name)
            if error is not None:
                yield FOUND
                yield error
                continue
            if not _is_board(data):
                if single:
                    raise InvalidInput(
                        f"{path}: not a Trello board export (no cards, lists and actions)"
                    )
                yield skipped_file(location, "Trello board")
                continue
            yield FOUND
            yield from _Board(data, location, repeats).items()


def _is_board(data: object) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("cards"), list)
        and isinstance(data.get("lists"), list)
        and isinstance(data.get("actions", []), list)
    )


def _id_time(value: object) -> datetime | None:
    """The creation time at the start of a 24-hex Trello id."""
    if not isinstance(value, str) or len(value) != 24:
        return None
    try:
        seconds = int(value[:8], 16)
        int(value, 16)
    except ValueError:
        return None
    return datetime.fromtimestamp(seconds, UTC) if seconds else None


class _Board:
    def __init__(self, data: dict[str, Any], location: str, repeats: Repeats) -> None:
        self.data = data
        self.location = location
        self.repeats = repeats
        self.name = text_field(data.get("name")) or "trello"
        self.members: dict[str, str] = {}
        for member in listed(data.get("members")):
            if isinstance(member, dict) and isinstance(member.get("id"), str):
                named = text_field(member.get("fullName")) or text_field(member.get("username"))
                if named:
                    self.members[member["id"]] = named
        self.lists = {
            entry["id"]: text_field(entry.get("name")) or entry["id"]
            for entry in listed(data.get("lists"))
            if isinstance(entry, dict) and isinstance(entry.get("id"), str)
        }
        self.labels = {
            entry["id"]: text_field(entry.get("name")) or text_field(entry.get("color"))
            for entry in listed(data.get("labels"))
            if isinstance(entry, dict) and isinstance(entry.get("id"), str)
        }
        self.checklists: dict[str, list[dict[str, Any]]] = {}
        for checklist in listed(data.get("checklists")):
            if isinstance(checklist, dict) and isinstance(checklist.get("idCard"), str):
                self.checklists.setdefault(checklist["idCard"], []).append(checklist)
        self.cards: dict[str, dict[str, Any]] = {}
        self.unknown: set[str] = set()

    def items(self) -> Iterator[Item]:
        actions = listed(self.data.get("actions"))
        if len(actions) >= ACTIONS_CAP:
            yield Notice(
                self.location,
                f"{len(actions)} actions, the most Trello's JSON export holds: older comments "
                "and moves may be missing (export again, or use the API, for the rest)",
            )
        created: dict[str, dict[str, Any]] = {}
        edited: dict[str, datetime] = {}
        for action in actions:
            if not isinstance(action, dict):
                continue
            card = _card_id(action)
            if card is None:
                continue
            if action.get("type") == "createCard":
                created[card] = action
            old = mapping(action.get("data")).get("old")
            when = moment(action.get("date"))
            text_edit = isinstance(old, dict) and ("name" in old or "desc" in old)
            if action.get("type") == "updateCard" and text_edit and when:
                edited[card] = max(edited.get(card, when), when)
        for number, card in enumerate(self.data["cards"], start=1):
            yield from self._card(f"{self.location}:cards[{number}]", card, created, edited)
        for number, action in enumerate(actions, start=1):
            yield from self._action(f"{self.location}:actions[{number}]", action)

    def _person(self, member_id: object, embedded: object, location: str) -> Iterator[Item]:
        if isinstance(member_id, str) and member_id in self.members:
            return self.members[member_id]
        if isinstance(embedded, dict):
            named = text_field(embedded.get("fullName")) or text_field(embedded.get("username"))
            if named:
                return named
        if isinstance(member_id, str) and member_id:
            if member_id not in self.unknown:
                self.unknown.add(member_id)
                yield Notice(
                    location, f"member {member_id} is not in the board's members: kept as the id"
                )
            return member_id
        yield Notice(location, "no author: stored unattributed")
        return None

    def _card(
        self,
        location: str,
        card: Any,
        created: dict[str, dict[str, Any]],
        edited: dict[str, datetime],
    ) -> Iterator[Item]:
        if not isinstance(card, dict) or not text_field(card.get("id")):
            yield ItemError(location, f"a card must be an object with an id, got {kind(card)}")
            return
        card_id = card["id"].strip()
        url = _card_url(card)
        self.cards[card_id] = card
        creation = created.get(card_id)
        when = moment(creation.get("date")) if creation else None
        if when is None:
            when = _id_time(card_id)
            if when is None:
                yield Notice(location, f"card {card_id}: no creation date: stored undated")
        author = None
        if creation is not None:
            author = yield from self._person(
                creation.get("idMemberCreator"), creation.get("memberCreator"), location
            )
        list_name = (
            self.lists.get(card.get("idList"), None)
            if isinstance(card.get("idList"), str)
            else None
        )
        lines = [text_field(card.get("name")) or "(untitled card)"]
        if text_field(card.get("desc")):
            lines += ["", card["desc"].strip()]
        for checklist in self.checklists.get(card_id, []):
            lines += ["", text_field(checklist.get("name")) or "Checklist"]
            for check in listed(checklist.get("checkItems")):
                if isinstance(check, dict) and text_field(check.get("name")):
                    mark = "x" if check.get("state") == "complete" else " "
                    lines.append(f"[{mark}] {check['name'].strip()}")
        text = "\n".join(lines)
        source = versioned(url, edited.get(card_id))
        repeated = self.repeats.check(source, text, location)
        if repeated is not None:
            yield repeated
            return
        labels = [
            self.labels.get(label)
            for label in listed(card.get("idLabels"))
            if isinstance(label, str)
        ]
        metadata: dict[str, Any] = {"board": self.data.get("id"), "card": card_id}
        if creation is not None and isinstance(creation.get("idMemberCreator"), str):
            metadata["member_id"] = creation["idMemberCreator"]
        if list_name:
            metadata["list"] = list_name
        for key in ("closed", "due", "dueComplete", "idShort"):
            if card.get(key) not in (None, False):
                metadata[key] = card[key]
        if card_id in edited:
            metadata["edited"] = edited[card_id].isoformat()
            if when is not None:
                metadata["created"] = when.isoformat()
        try:
            yield Document.create(
                text,
                author=author,
                date=edited.get(card_id) or when,  # a version is dated by its last text edit
                tags=[self.name, *([list_name] if list_name else []), *[x for x in labels if x]],
                source=source,
                thread=url,
                metadata=metadata,
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))

    def _action(self, location: str, action: Any) -> Iterator[Item]:
        if not isinstance(action, dict):
            yield ItemError(location, f"an action must be an object, got {kind(action)}")
            return
        kind_ = action.get("type")
        action_id = text_field(action.get("id"))
        if not isinstance(kind_, str) or action_id is None:
            yield ItemError(location, "an action without a type or an id")
            return
        if kind_ == "createCard":
            yield Skipped(location, "createCard (the card's own record)")
            return
        if kind_ != "commentCard" and kind_ not in STATE_ACTIONS:
            yield Skipped(location, kind_)
            return
        data = action.get("data") if isinstance(action.get("data"), dict) else {}
        when = moment(action.get("date"))
        if when is None:
            yield ItemError(location, f"action {action_id} without a valid date")
            return
        card_ref = data.get("card") if isinstance(data.get("card"), dict) else {}
        card_id = _card_id(action)
        card = self.cards.get(card_id or "", {})
        url = _card_url(card) if card else _ref_url(card_ref, card_id)
        card_name = text_field(card_ref.get("name")) or text_field(card.get("name")) or "a card"
        actor = yield from self._person(
            action.get("idMemberCreator"), action.get("memberCreator"), location
        )
        metadata: dict[str, Any] = {"type": kind_, "action": action_id}
        if isinstance(action.get("idMemberCreator"), str):
            metadata["member_id"] = action["idMemberCreator"]
        if card_id:
            metadata["card"] = card_id
        if kind_ == "commentCard":
            text = text_field(data.get("text"))
            if text is None:
                yield Skipped(location, "empty comment")
                return
            last_edit = moment(data.get("dateLastEdited"))
            source = versioned(f"{url}#comment-{action_id}", last_edit)
            if last_edit is not None:
                metadata["edited"] = data["dateLastEdited"]
                metadata["posted"] = action.get("date")
                when = last_edit
        else:
            text = self._sentence(kind_, data, actor or "someone", card_name)
            if text is None:
                changed = data.get("old") if isinstance(data.get("old"), dict) else {}
                why = (
                    "a reorder" if set(changed) <= {"pos"} else "a text edit, in the card's version"
                )
                yield Skipped(location, f"{kind_} ({why})")
                return
            source = f"trello://action/{action_id}"
            metadata["state_change"] = True
        repeated = self.repeats.check(source, text, location)
        if repeated is not None:
            yield repeated
            return
        list_name = (
            text_field(mapping(data.get("list")).get("name"))
            if isinstance(data.get("list"), dict)
            else None
        )
        after = data.get("listAfter") if isinstance(data.get("listAfter"), dict) else None
        if after is not None:
            list_name = text_field(after.get("name")) or list_name
        try:
            yield Document.create(
                text,
                author=actor,
                date=when,
                tags=[self.name, *([list_name] if list_name else [])],
                source=source,
                thread=url,
                metadata=metadata,
            )
        except MemppError as exc:
            yield ItemError(location, str(exc))

    def _sentence(self, kind_: str, data: dict[str, Any], actor: str, card: str) -> str | None:
        """A state-changing action as one sentence; ``None`` for an edit of the card's text."""
        quoted = f"“{card}”"
        if kind_ == "updateCard":
            old = data.get("old") if isinstance(data.get("old"), dict) else {}
            now = data.get("card") if isinstance(data.get("card"), dict) else {}
            before, after = data.get("listBefore"), data.get("listAfter")
            if isinstance(before, dict) and isinstance(after, dict):
                return f"{actor} moved {quoted} from {before.get('name')} to {after.get('name')}"
            if "closed" in old:
                return f"{actor} {'archived' if now.get('closed') else 'reopened'} {quoted}"
            if "due" in old:
                due = now.get("due")
                return (
                    f"{actor} set the due date of {quoted} to {due}"
                    if due
                    else (f"{actor} removed the due date of {quoted}")
                )
            if "dueComplete" in old:
                done = "complete" if now.get("dueComplete") else "not complete"
                return f"{actor} marked {quoted} {done}"
            if "idList" in old:
                return f"{actor} moved {quoted} to another list"
            if "pos" in old and len(old) == 1:
                return None  # a reorder within the list changes nothing worth an answer
            return None
        member = data.get("member") if isinstance(data.get("member"), dict) else {}
        who = (
            self.members.get(str(member.get("id"))) or text_field(member.get("name")) or "a member"
        )
        if kind_ == "addMemberToCard":
            return f"{actor} added {who} to {quoted}"
        if kind_ == "removeMemberFromCard":
            return f"{actor} removed {who} from {quoted}"
        if kind_ == "updateCheckItemStateOnCard":
            item = data.get("checkItem") if isinstance(data.get("checkItem"), dict) else {}
            state = "completed" if item.get("state") == "complete" else "unchecked"
            return f"{actor} {state} “{item.get('name')}” on {quoted}"
        if kind_ == "addAttachmentToCard":
            attachment = data.get("attachment") if isinstance(data.get("attachment"), dict) else {}
            return f"{actor} attached {attachment.get('name') or 'a file'} to {quoted}"
        if kind_ == "deleteCard":
            return f"{actor} deleted {quoted}"
        board = data.get("board") if isinstance(data.get("board"), dict) else {}
        return f"{actor}: {kind_} {quoted} ({board.get('name') or 'board'})"


def _card_id(action: dict[str, Any]) -> str | None:
    data = action.get("data")
    card = data.get("card") if isinstance(data, dict) else None
    return text_field(card.get("id")) if isinstance(card, dict) else None


def _card_url(card: dict[str, Any]) -> str:
    short = text_field(card.get("shortLink"))
    if short:
        return f"https://trello.com/c/{short}"
    return text_field(card.get("shortUrl")) or f"trello://card/{card.get('id')}"


def _ref_url(ref: dict[str, Any], card_id: str | None) -> str:
    short = text_field(ref.get("shortLink"))
    return f"https://trello.com/c/{short}" if short else f"trello://card/{card_id or 'unknown'}"
