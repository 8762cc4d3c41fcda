"""The Teams importer on the real export sample (Zulip's test tenant; transcribed, not
byte-copied, see SOURCES.md; read by path, never copied) and on exports built here in the
same layout: threads, chats, edits, HTML, both key casings, bad input."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.teams import TeamsImporter
from realdata import sample

from conftest import KeywordEmbedder

TEAM = "t-1"
CHANNEL = "19:abc@thread.tacv2"


def msg(mid: str, when: str, html: str, user: tuple[str, str] | None, **extra) -> dict:
    out = {
        "Id": mid,
        "Body": {"ContentType": "html", "Content": html},
        "CreatedDateTime": when,
        "LastEditedDateTime": None,
        "DeletedDateTime": None,
        "Subject": None,
        "ReplyToId": None,
        "WebUrl": f"https://teams.microsoft.com/l/message/{CHANNEL}/{mid}",
        "From": None if user is None else {"User": {"Id": user[0], "DisplayName": user[1]}},
        "Attachments": [],
        "MessageType": "message",
        "ChannelIdentity": {"ChannelId": CHANNEL, "TeamId": TEAM},
        "ChatId": None,
    }
    out.update(extra)
    return out


def export(root: Path, messages: list[object]) -> Path:
    team = root / "teams" / TEAM
    team.mkdir(parents=True, exist_ok=True)
    (root / "teams" / "teamsList.json").write_text(
        json.dumps([{"Name": "Platform", "GroupsId": TEAM}])
    )
    (team / f"channels_{TEAM}.json").write_text(json.dumps([{"Id": CHANNEL, "DisplayName": "ops"}]))
    (team / f"teamMembers_{TEAM}.json").write_text(
        json.dumps([{"Name": "Ana López", "UserId": "u1"}, {"Name": "Bo", "UserId": "u2"}])
    )
    (team / f"messages_{TEAM}.json").write_text(json.dumps(messages))
    return root


def base() -> list[object]:
    return [
        msg(
            "100",
            "2024-03-12T09:00:00Z",
            "<p>Deploy <b>Friday</b></p><script>alert(1)</script>",
            ("u1", "Ana"),
            Subject="Release",
        ),
        msg(
            "101",
            "2024-03-12T09:05:00Z",
            "<p>OK <at id='0'>Ana</at></p>",
            ("u2", ""),
            ReplyToId="100",
        ),
        msg(
            "102",
            "2024-03-12T10:00:00Z",
            "<systemEventMessage/>",
            None,
            MessageType="unknownFutureValue",
        ),
        msg(
            "103",
            "2024-03-12T11:00:00Z",
            "<p>gone</p>",
            ("u1", "Ana"),
            DeletedDateTime="2024-03-12T12:00:00Z",
        ),
        # Graph's own camelCase, in a chat, from an app.
        {
            "id": "200",
            "body": {"contentType": "text", "content": "Build 42 passed"},
            "createdDateTime": "2024-03-13T08:00:00Z",
            "from": {"application": {"id": "app-9", "displayName": "CI"}, "user": None},
            "messageType": "message",
            "chatId": "19:chat@unq.gbl.spaces",
            "attachments": [{"name": "log.txt"}],
        },
    ]


def items(path: Path, importer: TeamsImporter | None = None) -> list[object]:
    return list((importer or TeamsImporter()).read(path))


def docs(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_messages_threads_chats_and_names(tmp_path) -> None:
    found = items(export(tmp_path / "export", base()))
    root, reply, chat = docs(found)
    assert root.text == "Release\n\nDeploy Friday"  # the script is gone
    assert root.author == "Ana López" and root.meta["user_id"] == "u1"  # the member list's name
    assert root.tags == ("Platform", "ops") and root.date.text == "2024-03-12T09:00:00+00:00"
    assert root.thread == reply.thread == f"teams://{TEAM}/{CHANNEL}/100"
    assert reply.author == "Bo" and reply.text == "OK Ana" and reply.meta["reply_to"] == "100"
    assert root.source == f"https://teams.microsoft.com/l/message/{CHANNEL}/100"
    assert chat.author == "CI" and chat.text == "Build 42 passed\n[attachment: log.txt]"
    assert chat.thread == "teams://chat/19:chat@unq.gbl.spaces/2024-03-13"
    assert sorted(s.reason for s in found if isinstance(s, Skipped)) == ["deleted", "system event"]


def test_the_real_export() -> None:
    folder = sample("sources/teams/zulip-TeamsDataExport")
    found = items(folder)
    (message,) = docs(found)
    assert message.author == "Will Begon"  # not among the members: named from the message
    assert message.text == "hello! this is a channel message\n\nasdad"
    assert message.date.text == "2025-09-25T14:30:13.079000+00:00"
    assert message.tags == ("will begon's team", "generakl")
    assert message.meta["user_id"] == "28cc9dbd-07ba-458c-9cf7-c95745618966"
    assert [s.reason for s in found if isinstance(s, Skipped)] == ["system event"] * 2
    told = [n.message for n in found if isinstance(n, Notice)]
    assert len(told) == 1 and "not among the team's members" in told[0]
    assert not [e for e in found if isinstance(e, ItemError)]


def test_reimport_and_an_edit_in_a_later_export(tmp_path) -> None:
    first = export(tmp_path / "a", base())
    changed = base()
    changed[0]["Body"]["Content"] = "<p>Deploy Monday</p>"
    changed[0]["LastEditedDateTime"] = "2024-03-12T15:00:00Z"
    later = export(tmp_path / "b", changed)
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["deploy"])) as memory:
        assert run_import(memory, get("teams"), first).added == 3
        assert run_import(memory, get("teams"), first).added == 0
        again = run_import(memory, get("teams"), later)
        assert again.added == 1 and again.skipped["already imported"] == 2
        texts = sorted(r.text for r in memory.records() if "Deploy" in r.text)
        assert texts == ["Release\n\nDeploy Friday", "Release\n\nDeploy Monday"]
        monday = next(r for r in memory.records() if "Monday" in r.text)
        assert monday.date == "2024-03-12T15:00:00+00:00"
        assert monday.metadata["posted"] == "2024-03-12T09:00:00Z"


def test_bad_input(tmp_path) -> None:
    odd = [
        *base(),
        msg("300", "", "<p>when?</p>", ("u1", "Ana")),
        msg("301", "2024-03-12T09:00:00Z", "<p>who?</p>", ("u9", "")),
        msg("100", "2024-03-12T09:00:00Z", "<p>other words</p>", ("u1", "Ana")),
        ["not", "a message"],
    ]
    root = export(tmp_path / "export", odd)
    second = root / "teams" / "t-2"
    second.mkdir()
    text = json.dumps(base())
    (second / "messages_t-2.json").write_text(text[:50])
    (second / "notes.json").write_text("{}")
    found = items(root)
    errors = [(e.location.rsplit("/", 1)[1], e.reason) for e in found if isinstance(e, ItemError)]
    assert [where for where, _ in errors] == [
        f"messages_{TEAM}.json:6",
        f"messages_{TEAM}.json:8",
        f"messages_{TEAM}.json:9",
        "messages_t-2.json",
    ]
    assert "CreatedDateTime" in errors[0][1] and "came before" in errors[1][1]
    who = [d for d in docs(found) if d.text == "who?"]
    assert who[0].author == "u9"
    assert [s.location.rsplit("/", 1)[1] for s in found if isinstance(s, Skipped) and s.detail] == [
        "notes.json"
    ]
    discord = tmp_path / "general.json"
    discord.write_text(json.dumps({"guild": {}, "channel": {}, "messages": []}))
    with pytest.raises(InvalidInput, match="not a Teams export"):
        items(discord)
    other = tmp_path / "slack"
    other.mkdir()
    (other / "users.json").write_text("[]")
    with pytest.raises(InvalidInput, match="not a Teams export"):
        items(other)


def test_a_zip_and_a_bomb(tmp_path) -> None:
    folder = export(tmp_path / "export", base())
    archive = tmp_path / "teams.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        for file in sorted(folder.rglob("*.json")):
            packed.write(file, file.relative_to(folder).as_posix())
        packed.writestr("teams/t-3/messages_t-3.json", b"[" + b" " * (8 << 20) + b"]")
    found = items(archive, TeamsImporter(max_member=1 << 20))
    assert [(e.location, e.reason) for e in found if isinstance(e, ItemError)] == [
        (
            f"{archive}:teams/t-3/messages_t-3.json",
            "unpacks to 8 MiB, over the 1 MiB limit of one file",
        )
    ]
    assert [d.source for d in docs(found)] == [d.source for d in docs(items(folder))]
