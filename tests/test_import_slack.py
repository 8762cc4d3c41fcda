"""The Slack importer on exports built here in Slack's published format (folder and zip),
well-formed and malformed, stored on both engines."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.slack import SlackImporter

import engines
from conftest import KeywordEmbedder

# The fixtures this module uses (pytest finds fixtures among module attributes).
pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

USERS = [
    {"id": "U1", "name": "ana", "real_name": "Ana López", "profile": {"real_name": "Ana López"}},
    {"id": "U2", "name": "bo", "profile": {"real_name": "", "display_name": "Bo"}},
    {"id": "U3", "name": "cy"},
    {"id": "B1", "name": "deploybot", "is_bot": True, "profile": {"real_name": "Deploy Bot"}},
]
CHANNELS = [{"id": "C1", "name": "general"}, {"id": "C2", "name": "pricing"}]
GENERAL_0312 = [
    {
        "type": "message",
        "subtype": "channel_join",
        "user": "U3",
        "text": "<@U3> has joined",
        "ts": "1710230000.000100",
    },
    {
        "type": "message",
        "user": "U1",
        "ts": "1710234567.000200",
        "text": "Hi <@U2>, see <#C2|pricing> and <https://example.com/plan|the plan> &amp; "
        "<https://example.com/raw> &lt;3",
        "thread_ts": "1710234567.000200",
        "reply_count": 1,
    },
    {
        "type": "message",
        "user": "U2",
        "ts": "1710234600.000300",
        "text": "Agreed with <@U1>.",
        "thread_ts": "1710234567.000200",
        "parent_user_id": "U1",
    },
    {
        "type": "message",
        "user": "U3",
        "ts": "1710235000.000400",
        "text": "Final wording",
        "edited": {"user": "U3", "ts": "1710235100.000000"},
    },
    {
        "type": "message",
        "subtype": "bot_message",
        "bot_id": "BX",
        "username": "CI",
        "ts": "1710236000.000500",
        "text": "Build 41 passed",
    },
    {
        "type": "message",
        "user": "U1",
        "ts": "1710237000.000600",
        "text": "",
        "files": [{"id": "F1", "name": "q2.pdf", "title": "Q2 pricing deck"}],
        "attachments": [{"title": "Competitor page", "title_link": "https://x.example"}],
    },
]
PRICING_0313 = [
    {
        "type": "message",
        "user": "U9",
        "ts": "1710320000.000100",
        "text": "New hire here",
        "user_profile": {"real_name": "Dee Newman", "display_name": "dee"},
    },
    {"type": "message", "user": "U8", "ts": "1710320100.000200", "text": "Guest note"},
    {"type": "message", "user": "U8", "ts": "1710320200.000300", "text": "Second guest note"},
    {"type": "message", "user": "U1", "text": "no timestamp here"},
    {"type": "message", "user": "U1", "ts": "yesterday", "text": "bad timestamp"},
    "not an object",
    {
        "type": "message",
        "subtype": "channel_topic",
        "user": "U1",
        "ts": "1710320300.000400",
        "text": "set the topic",
    },
    {"type": "message", "user": "U2", "ts": "1710320400.000500", "text": "Team plan is $15"},
]


def build_export(root: Path, extra_days: dict[str, list[object]] | None = None) -> Path:
    """An unpacked export: the lists, one folder per channel, one JSON file per day."""
    root.mkdir(parents=True)
    (root / "users.json").write_text(json.dumps(USERS), encoding="utf-8")
    (root / "channels.json").write_text(json.dumps(CHANNELS), encoding="utf-8")
    days: dict[str, object] = {
        "general/2024-03-12.json": GENERAL_0312,
        "general/2024-03-14.json": {"messages": []},  # not a list
        "pricing/2024-03-13.json": PRICING_0313,
    }
    days.update(extra_days or {})
    for name, content in days.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(json.dumps(content), encoding="utf-8")
    (root / "general" / "notes.txt").write_text("not a day")
    (root / "integration_logs.json").write_text("[]")
    return root


def zip_folder(folder: Path, target: Path, prefix: str = "") -> Path:
    """The folder zipped, its top-level lists first, then the channel folders by name."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        files = sorted(folder.rglob("*"), key=lambda f: (f.parent != folder, f.as_posix()))
        for file in files:
            if file.is_file():
                archive.write(file, prefix + file.relative_to(folder).as_posix())
    return target


def items(path: Path, importer: SlackImporter | None = None) -> list[object]:
    return list((importer or SlackImporter()).read(path))


def docs_of(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_messages_become_documents_with_names_dates_threads_and_sources(tmp_path) -> None:
    found = items(build_export(tmp_path / "export"))
    docs = {d.source: d for d in docs_of(found)}
    parent = docs["slack://C1/1710234567.000200"]
    assert parent.author == "Ana López"
    assert parent.text == (
        "Hi @Bo, see #pricing and the plan (https://example.com/plan) & https://example.com/raw <3"
    )
    assert parent.date is not None and parent.date.text == "2024-03-12T09:09:27.000200+00:00"
    assert parent.tags == ("general",)
    reply = docs["slack://C1/1710234600.000300"]
    assert reply.text == "Agreed with @Ana López." and reply.author == "Bo"
    assert reply.thread == parent.thread == "slack://C1/1710234567.000200"
    edited = docs["slack://C1/1710235000.000400"]
    assert edited.text == "Final wording" and edited.author == "cy"  # user name: no real name
    assert edited.thread == "slack://C1/2024-03-12"  # outside a thread: its channel-day
    assert docs["slack://C1/1710236000.000500"].author == "CI"  # a bot by its name
    files = docs["slack://C1/1710237000.000600"]
    assert files.text == "[file: Q2 pricing deck]\n[attachment: Competitor page]"
    assert docs["slack://C2/1710320000.000100"].author == "Dee Newman"  # from user_profile
    assert docs["slack://C2/1710320100.000200"].author == "U8"  # nothing to name them by
    assert docs["slack://C2/1710320400.000500"].tags == ("pricing",)
    assert len(docs) == 9


def test_every_problem_is_reported_with_its_place_and_the_rest_read(tmp_path) -> None:
    export = build_export(tmp_path / "export")
    found = items(export)
    errors = {
        i.location.removeprefix(f"{export}:"): i.reason for i in found if isinstance(i, ItemError)
    }
    assert errors == {
        "general/2024-03-14.json": "expected a JSON list, got an object",
        "pricing/2024-03-13.json:4": "message without ts",
        "pricing/2024-03-13.json:5": "message without a valid ts",
        "pricing/2024-03-13.json:6": "a message must be a JSON object, got a string",
    }
    skipped = [
        (i.location.removeprefix(f"{export}:"), i.reason) for i in found if isinstance(i, Skipped)
    ]
    assert skipped == [
        ("general/2024-03-12.json:1", "channel_join"),
        ("general/notes.txt", "not a day file"),
        ("pricing/2024-03-13.json:7", "channel_topic"),
    ]
    notices = [i.message for i in found if isinstance(i, Notice)]
    # One notice per unknown user id, not one per message.
    assert notices == [
        "user U9 is not in users.json; named 'Dee Newman' from the message",
        "user U8 is not in users.json; kept as the user id",
    ]


def test_zip_reads_as_the_folder_does(tmp_path) -> None:
    folder = build_export(tmp_path / "export")
    from_folder = docs_of(items(folder))
    for prefix in ("", "Acme Slack export Mar 2024/"):  # some zips wrap it in a folder
        archive = zip_folder(folder, tmp_path / f"export{len(prefix)}.zip", prefix)
        assert docs_of(items(archive)) == from_folder
    assert SlackImporter().recognizes(archive) and SlackImporter().recognizes(folder)
    assert not SlackImporter().recognizes(tmp_path)


def test_import_stores_counts_and_reimport_adds_nothing(tmp_path, engine_location) -> None:
    export = zip_folder(build_export(tmp_path / "export"), tmp_path / "export.zip")
    with Memory(engine_location, embedder=KeywordEmbedder(["plan"])) as memory:
        report = run_import(memory, get("slack"), export, batch_size=3)
        assert report.added == 9 and len(memory) == 9
        assert dict(report.skipped) == {"channel_join": 1, "channel_topic": 1, "not a day file": 1}
        assert report.failed == 4 and len(report.notices) == 2 and report.undated == 0
        stored = {r.source: r for r in memory.records()}
        reply = stored["slack://C1/1710234600.000300"]
        assert (reply.author, reply.thread, reply.tags) == (
            "Bo",
            "slack://C1/1710234567.000200",
            ("general",),
        )
        assert reply.date == "2024-03-12T09:10:00.000300+00:00"
        hits = memory.search("plan", as_of="2024-03-12")
        assert hits and all(h.record.day == "2024-03-12" for h in hits)

        again = run_import(memory, get("slack"), export)
        assert again.added == 0 and again.skipped["already imported"] == 9 and len(memory) == 9

        # A later export holds the old days and a new one: only the new messages are added.
        later = build_export(
            tmp_path / "later",
            {
                "general/2024-03-15.json": [
                    {"type": "message", "user": "U1", "ts": "1710500000.000100", "text": "Plan v2"},
                    {"type": "message", "user": "U3", "ts": "1710500100.000200", "text": "Ship it"},
                ]
            },
        )
        larger = run_import(memory, get("slack"), later)
        assert larger.added == 2 and larger.skipped["already imported"] == 9 and len(memory) == 11


def test_dry_run_writes_nothing(tmp_path) -> None:
    export = build_export(tmp_path / "export")
    report = run_import(None, get("slack"), export, dry_run=True)
    assert report.dry_run and report.added == 9 and report.failed == 4
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        # the same author, text and moment as the export's message: the write path's dedupe key
        memory.add("Team plan is $15", author="Bo", date="2024-03-13T09:00:00.000500+00:00")
        report = run_import(memory, get("slack"), export, dry_run=True)
        assert report.added == 8 and report.skipped["duplicate"] == 1 and len(memory) == 1
    with pytest.raises(InvalidInput, match="unless dry_run"):
        run_import(None, get("slack"), export)


def test_a_truncated_zip_yields_what_precedes_the_cut(tmp_path) -> None:
    folder = build_export(tmp_path / "export")
    archive = zip_folder(folder, tmp_path / "export.zip")
    with zipfile.ZipFile(archive) as whole:
        last = whole.infolist()[-1]  # pricing/2024-03-13.json, by name order
        assert last.filename == "pricing/2024-03-13.json"
        cut = last.header_offset + 30 + len(last.filename) + last.compress_size // 2
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(archive.read_bytes()[:cut])
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(truncated)
    found = items(truncated)
    assert isinstance(found[0], Notice) and "no table of contents" in found[0].message
    errors = [i for i in found if isinstance(i, ItemError)]
    assert [e.reason for e in errors if "pricing" in e.location] == ["cut off by the truncation"]
    assert {d.source for d in docs_of(found)} == {
        d.source for d in docs_of(items(folder)) if d.source.startswith("slack://C1/")
    }


def test_a_zip_bomb_stops_at_the_cap(tmp_path) -> None:
    folder = build_export(tmp_path / "export")
    archive = zip_folder(folder, tmp_path / "bomb.zip")
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("general/2024-03-20.json", b"[" + b" " * (8 << 20) + b"]")
    assert archive.stat().st_size < 200_000
    # Per file: that file is reported, the rest imported.
    found = items(archive, SlackImporter(max_member=1 << 20))
    assert [e.reason for e in found if isinstance(e, ItemError) and "03-20" in e.location] == [
        "unpacks to 8 MiB, over the 1 MiB limit of one file"  # its size, before reading it
    ]
    assert len(docs_of(found)) == 9
    # In all: refused before anything is read.
    with pytest.raises(InvalidInput, match="unpacks to 8 MiB, over the 4 MiB cap"):
        items(archive, SlackImporter(max_unpacked=4 << 20))


def test_a_lying_size_is_caught_while_unpacking(tmp_path) -> None:
    """A member whose header claims a small size is still stopped by the bytes it yields."""
    folder = build_export(tmp_path / "export")
    archive = zip_folder(folder, tmp_path / "liar.zip")
    payload = b"[" + b" " * (4 << 20) + b"]"
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_STORED) as liar:
        liar.writestr("general/2024-03-21.json", payload)
    # The central directory records the size at its end: shrink it there and in the header.
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("general/2024-03-21.json")
    true_size = len(payload).to_bytes(4, "little")
    small = (100).to_bytes(4, "little")
    for at in range(len(data) - 4):
        if data[at : at + 4] == true_size:
            data[at : at + 4] = small
    archive.write_bytes(bytes(data))
    found = items(archive, SlackImporter(max_member=1 << 20))
    bad = [e for e in found if isinstance(e, ItemError) and "03-21" in e.location]
    assert len(bad) == 1 and info.file_size == len(payload)
    assert len(docs_of(found)) == 9


@pytest.mark.parametrize("what", ["missing", "empty folder", "random bytes", "other zip"])
def test_a_path_that_is_not_an_export_is_refused_before_anything_is_read(tmp_path, what) -> None:
    path = tmp_path / "x"
    if what == "empty folder":
        path.mkdir()
    elif what == "random bytes":
        path.write_bytes(zlib.compress(b"hello") * 50)
    elif what == "other zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("readme.md", "hi")
    with pytest.raises(InvalidInput, match=str(path)):
        items(path)


def test_users_json_broken_or_missing_still_imports_every_message(tmp_path) -> None:
    export = build_export(tmp_path / "export")
    (export / "users.json").write_text('[{"id": "U1",')
    found = items(export)
    broken = [i for i in found if isinstance(i, ItemError) and i.location.endswith("users.json")]
    assert broken[0].reason == (
        "invalid JSON at line 1, column 14: Expecting property name enclosed in double quotes"
    )
    assert len(docs_of(found)) == 9
    (export / "users.json").unlink()
    found = items(export)
    assert any(isinstance(i, Notice) and "authors are named by user id" in i.message for i in found)
    assert {d.author for d in docs_of(found)} >= {"U1", "U2", "U3"}


class _Unseekable(io.RawIOBase):
    """A write-only stream zipfile cannot seek back in: it writes sizes after each member
    (data descriptors), as streaming zip writers do."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[no-untyped-def, override]
        self.data += b
        return len(b)


def test_a_truncated_streamed_zip_is_read_through_its_data_descriptors(tmp_path) -> None:
    folder = build_export(tmp_path / "export")
    sink = _Unseekable()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(folder.rglob("*"), key=lambda f: (f.parent != folder, f.as_posix())):
            if file.is_file():
                archive.write(file, file.relative_to(folder).as_posix())
    whole = bytes(sink.data)
    assert whole[6] & 0x08  # the first member's flags: sizes in a data descriptor
    at = whole.rindex(b"PK\x03\x04")  # the last member's local header
    truncated = tmp_path / "streamed.zip"
    truncated.write_bytes(whole[: at + 60])
    found = items(truncated)
    assert "no table of contents" in found[0].message
    assert [e.reason for e in found if isinstance(e, ItemError) and "pricing" in e.location] == [
        "cut off by the truncation"
    ]
    assert {d.source for d in docs_of(found)} == {
        d.source for d in docs_of(items(folder)) if d.source.startswith("slack://C1/")
    }


def test_the_example_export_reads_cleanly() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "acme-slack"
    found = items(example)
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    docs = docs_of(found)
    assert len(docs) == 7 and {d.tags for d in docs} == {("pricing",), ("general",)}
    answer = next(d for d in docs if d.text.startswith("No, @Marco Rossi"))
    assert answer.thread == "slack://C01PRICING/1709906531.000100"


LEGACY_BOT_DAYS: dict[str, list[object]] = {
    # Channels are read in channels.json order: the bot posts in #general (C1), read first,
    # and was added in #pricing (C2), so its name must be looked up ahead.
    "general/2024-03-16.json": [
        {
            "type": "message",
            "subtype": "bot_message",
            "bot_id": "BLEGACY",
            "text": "",
            "ts": "1710590000.000100",
            "attachments": [
                {
                    "fallback": "[api:main] 1 new commit by ana",
                    "pretext": "[api:main] 1 new commit by ana:",
                    "text": "<https://git.example/c/ab12|ab12>: Fix the rounding of invoice totals",
                    "fields": [{"title": "Build", "value": "passed", "short": True}],
                },
                {"fallback": "CI run 812 passed in 4m"},  # nothing but a fallback
                {"fallback": "same", "text": "same"},  # a fallback repeating the text: once
            ],
        },
        {
            "type": "message",
            "subtype": "bot_message",
            "bot_id": "BNONAME",
            "text": "deploy finished",
            "ts": "1710590100.000200",
        },
        {
            "type": "message",
            "subtype": "bot_message",
            "bot_id": "BNONAME",
            "text": "deploy finished again",
            "ts": "1710590200.000300",
        },
        {
            "type": "message",
            "bot_id": "BAPPUSER",
            "text": "",
            "ts": "1710590300.000400",
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": "Nightly report"}},
                {
                    "type": "section",
                    "text": {"type": "mrkdwn", "text": "3 failures in <#C2|pricing>"},
                    "fields": [{"type": "mrkdwn", "text": "*Owner:* <@U1>"}],
                },
            ],
        },
        {
            "type": "message",
            "user": "U2",
            "text": "",
            "ts": "1710590400.000500",
            "blocks": [
                {
                    "type": "rich_text",
                    "elements": [
                        {
                            "type": "rich_text_section",
                            "elements": [
                                {"type": "text", "text": "ask "},
                                {"type": "user", "user_id": "U1"},
                                {"type": "text", "text": " about "},
                                {"type": "link", "url": "https://x.example", "text": "this"},
                            ],
                        }
                    ],
                }
            ],
        },
    ],
    "pricing/2024-03-15.json": [
        {
            "type": "message",
            "subtype": "bot_add",
            "user": "U1",
            "bot_id": "BLEGACY",
            "text": "added an integration to this channel: "
            "<https://acme.slack.com/services/BLEGACY|github>",
            "ts": "1710500000.000001",
        },
        {
            "type": "message",
            "subtype": "file_share",
            "user": "U2",
            "text": "<@U2> uploaded a file: <https://acme.slack.com/files/U2/F9/plan.txt|Plan>",
            "ts": "1710500100.000002",
            "file": {"id": "F9", "name": "plan.txt", "title": "Plan"},
        },
        {
            "type": "message",
            "subtype": "file_comment",
            "text": "<@U3> commented on <@U2>'s file <https://acme.slack.com/files/U2/F9|Plan>: "
            "Move the launch",
            "ts": "1710500200.000003",
            "file": {"id": "F9", "name": "plan.txt", "title": "Plan"},
            "comment": {
                "id": "Fc1",
                "created": 1710500190,
                "timestamp": 1710500190,
                "user": "U3",
                "comment": "Move the launch to the 22nd",
            },
        },
    ],
}


def test_bots_are_named_by_what_the_export_says_and_their_words_kept(tmp_path) -> None:
    export = build_export(tmp_path / "export", LEGACY_BOT_DAYS)
    users = json.loads((export / "users.json").read_text())
    users.append(
        {
            "id": "U77",
            "name": "nightly",
            "is_bot": True,
            "profile": {"bot_id": "BAPPUSER", "real_name": "Nightly"},
        }
    )
    (export / "users.json").write_text(json.dumps(users))
    (export / "integration_logs.json").write_text(
        json.dumps(
            [
                {
                    "user_id": "U1",
                    "date": "1710500000",
                    "change_type": "added",
                    "service_type": "GitHub Notifications",
                    "channel": "C2",
                }
            ]
        )
    )
    found = items(export)
    docs = {d.source: d for d in docs_of(found)}
    commit = docs["slack://C1/1710590000.000100"]
    assert commit.author == "github"  # named by the bot_add, read ahead of its channel
    assert json.loads(commit.metadata)["integration"] == "GitHub Notifications"
    assert commit.text == (
        "[api:main] 1 new commit by ana:\n"
        "ab12 (https://git.example/c/ab12): Fix the rounding of invoice totals\n"
        "Build: passed\n"
        "CI run 812 passed in 4m\n"
        "same"
    )
    assert docs["slack://C1/1710590100.000200"].author == "BNONAME"
    bot_notices = [i for i in found if isinstance(i, Notice) and "BNONAME" in i.message]
    assert len(bot_notices) == 1 and "named nowhere" in bot_notices[0].message
    report = docs["slack://C1/1710590300.000400"]
    assert report.author == "Nightly"  # a bot user of users.json, by its profile's bot_id
    assert report.text == "Nightly report\n3 failures in #pricing\n*Owner:* @Ana López"
    rich = docs["slack://C1/1710590400.000500"]
    assert rich.text == "ask @Ana López about this (https://x.example)"
    shared = docs["slack://C2/1710500100.000002"]
    assert shared.text.endswith("[file: Plan]") and json.loads(shared.metadata)["files"] == [
        "plan.txt"
    ]
    comment = docs["slack://C2/1710500200.000003"]
    assert (comment.author, comment.date.text) == ("cy", "2024-03-15T10:56:30+00:00")
    assert comment.text == "Move the launch to the 22nd\n[comment on file: Plan]"
    assert json.loads(comment.metadata)["comment"] == "Fc1"
    assert json.loads(comment.metadata)["user"] == "U3"
    skipped = [i.reason for i in found if isinstance(i, Skipped)]
    assert skipped.count("bot_add") == 1 and "file_comment" not in skipped


def test_a_bot_post_is_found_by_its_commit_message(tmp_path) -> None:
    export = build_export(tmp_path / "export", LEGACY_BOT_DAYS)
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["rounding"])) as memory:
        run_import(memory, get("slack"), export)
        hits = memory.search("rounding of invoice totals")
        assert hits[0].record.source == "slack://C1/1710590000.000100"
        assert hits[0].record.author == "github"
