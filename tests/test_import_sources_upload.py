"""The web upload hands a Discord channel file, a Trello board, a Keep Takeout zip, a Teams
export zip and a WebVTT transcript to their importers (``ingest_files``, on a real SQLite
store), and refuses a zip that none of them reads."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from mempp import Memory

from conftest import KeywordEmbedder

pytest.importorskip("fastapi")

from mempp.server.web.access import WebError
from mempp.server.web.upload import ingest_files


def _discord() -> bytes:
    message = {
        "id": "1",
        "type": "Default",
        "timestamp": "2024-03-12T09:00:00+00:00",
        "content": "Deploy on Friday",
        "author": {"id": "7", "name": "ana", "nickname": "Ana"},
    }
    export = {"guild": {"id": "9"}, "channel": {"id": "2", "name": "ops"}, "messages": [message]}
    return json.dumps(export).encode()


def _trello() -> bytes:
    board = {
        "id": "b",
        "name": "Board",
        "members": [],
        "lists": [],
        "cards": [{"id": "5f5e1000aaaaaaaaaaaaaaaa", "name": "Card", "shortLink": "x1"}],
        "actions": [],
    }
    return json.dumps(board).encode()


def _zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


KEEP_NOTE = json.dumps(
    {
        "title": "Plan",
        "textContent": "Ship it",
        "createdTimestampUsec": 1710234000000000,
        "userEditedTimestampUsec": 1710234000000000,
    }
)
TEAMS_MESSAGE = json.dumps(
    [
        {
            "Id": "1",
            "Body": {"ContentType": "text", "Content": "Standup at 10"},
            "CreatedDateTime": "2024-03-12T09:00:00Z",
            "MessageType": "message",
            "From": {"User": {"Id": "u1", "DisplayName": "Bo"}},
            "ChannelIdentity": {"ChannelId": "c", "TeamId": "t"},
        }
    ]
)
VTT = "WEBVTT\n\n1\n00:00:01.000 --> 00:00:02.000\n<v Cy>Budget approved</v>\n"


def test_each_source_goes_to_its_importer(tmp_path: Path) -> None:
    uploads = [
        ("general.json", _discord()),
        ("board.json", _trello()),
        ("takeout.zip", _zip({"Takeout/Keep/Plan.json": KEEP_NOTE, "Takeout/Keep/Plan.html": "x"})),
        ("teams.zip", _zip({"teams/t/messages_t.json": TEAMS_MESSAGE})),
        ("call.vtt", VTT.encode()),
    ]
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        reports = ingest_files(memory, [(name, io.BytesIO(data)) for name, data in uploads])
        assert [r["source"] for r in reports] == [
            "discord",
            "trello",
            "keep",
            "teams",
            "transcript",
        ]
        assert [r["added"] for r in reports] == [1, 1, 1, 1, 1]
        authors = sorted(str(r.author) for r in memory.records())
        assert authors == ["Ana", "Bo", "Cy", "None", "None"]


def test_a_zip_none_reads_is_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        with pytest.raises(WebError):
            ingest_files(memory, [("photos.zip", io.BytesIO(_zip({"a/b.json": "{}"})))])
        assert len(memory) == 0
