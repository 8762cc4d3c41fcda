"""The Discord importer on the real DiscordChatExporter sample (by path, never copied) and on
exports built here in its JSON format: edits, overlaps, bad input, zips, the CLI."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli.main import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.discord import DiscordImporter
from realdata import sample

import engines
from conftest import KeywordEmbedder

# The fixtures this module uses (pytest finds fixtures among module attributes).
pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

GUILD = "748545324524575035"


def items(path: Path, importer: DiscordImporter | None = None) -> list[object]:
    return list((importer or DiscordImporter()).read(path))


def docs(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def author(uid: str, name: str, nickname: str | None = None) -> dict[str, object]:
    return {"id": uid, "name": name, "nickname": nickname or name, "isBot": False}


def message(mid: str, when: str, text: str, who: dict[str, object] | None, **extra) -> dict:
    out: dict[str, object] = {
        "id": mid,
        "type": "Default",
        "timestamp": when,
        "timestampEdited": None,
        "content": text,
        "attachments": [],
        "embeds": [],
        "stickers": [],
        "mentions": [],
    }
    if who is not None:
        out["author"] = who
    out.update(extra)
    return out


ANA, BO = author("1", "ana", "Ana"), author("2", "bo_the_user", "Bo")


def export(channel_id: str, messages: list[dict], *, name: str = "ops", **channel) -> dict:
    return {
        "guild": {"id": "900", "name": "Org"},
        "channel": {"id": channel_id, "type": "GuildTextChat", "name": name, **channel},
        "messages": messages,
        "messageCount": len(messages),
    }


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def base_messages() -> list[dict]:
    return [
        message("10", "2024-03-12T09:00:00+00:00", "Ship the ||beta|| on Friday?", ANA),
        message(
            "11",
            "2024-03-12T09:05:00+00:00",
            "Yes, after the review",
            BO,
            type="Reply",
            reference={"messageId": "10", "channelId": "500"},
        ),
        message(
            "12", "2024-03-12T10:00:00+00:00", "Joined the server.", BO, type="GuildMemberJoin"
        ),
        message("13", "2024-03-13T08:00:00+00:00", "Standup moved to 10", ANA),
    ]


def test_the_real_example_guild_reads_with_its_quirks_told() -> None:
    folder = sample("sources/discord/dcef-example-guild")
    found = items(folder)
    documents = docs(found)
    skipped = [i for i in found if isinstance(i, Skipped)]
    told = [i.message for i in found if isinstance(i, Notice)]
    assert not [i for i in found if isinstance(i, ItemError)]
    # general: 35 messages, 3 joins and one "Started a thread" skipped; the thread file 5;
    # chill talk twice (5 and 6, one edited in the later copy).
    assert sorted(s.reason for s in skipped) == ["GuildMemberJoin"] * 3 + ["ThreadCreated"]
    assert len(documents) == 31 + 5 + 5 + 6
    assert all(d.author and d.date for d in documents)
    assert {d.author for d in documents} == {"Adam", "Thomas", "Patrick", "RICK NITRO"}
    assert sum("messageCount says 35" in t for t in told) == 2
    assert any("file name says channel 1012224565567125544" in t for t in told)
    by_source = {d.source: d for d in documents}
    url = f"https://discord.com/channels/{GUILD}"
    thread_msg = by_source[f"{url}/1060927310439657577/1060927555093413928"]
    assert thread_msg.thread == f"discord://{GUILD}/1060927310439657577"
    assert thread_msg.tags == ("general",)  # a thread is tagged by its parent channel
    assert thread_msg.meta["reply_to"] == "1060927520008065176"
    # A reply chain whose root (the spam message) one copy lacks is one thread in both copies.
    chill = f"{url}/1012224565567875236"
    reply, spam = (
        by_source[f"{chill}/1060954094627463198"],
        by_source[f"{chill}/1060954094627463098"],
    )
    assert (
        reply.thread == spam.thread == f"discord://{GUILD}/1012224565567875236/1060954094627463098"
    )
    # The edit makes a version of its own; the first text is kept under the plain URL.
    plain = by_source[f"{chill}/1060954419862188072"]
    edited = by_source[f"{chill}/1060954419862188072#edited=2023-01-12T16:14:05.275Z"]
    assert (plain.text, edited.text) == (":pepeheart:", ":pepeheart: :pepeheart: :pepeheart:")
    # The edited text is dated by its edit, the posting time kept.
    assert edited.date.text.startswith("2023-01-12T16:14:05") and plain.date.text.startswith(
        "2023-01-06T16:14:05"
    )
    assert edited.meta["posted"] == "2023-01-06T16:14:05.275+00:00"
    assert by_source[f"{url}/1012224565567721552/1060928071600975873"].text == (
        "EZ, thanks :pepeheart:"
    )
    assert by_source[f"{url}/1012224565567721552/1045179638760091709"].text == (
        "[sticker: pepecute]"
    )
    # Attachments by their file name, not the exporter's Windows media paths (absent here).
    shot = by_source[f"{url}/1012224565567721552/1060926845832409158"]
    assert shot.text == "[attachment: dce-export-more.png]" and "json_Files" not in shot.text
    # Custom emoji stay as their :name:; reactions are not text.
    assert by_source[f"{url}/1012224565567721552/1060926346089476176"].text == (
        "You will understand it later :kekw:"
    )
    assert by_source[f"{chill}/1060954094627463098"].meta["user_name"] == "aLittleSpammyBot"
    assert by_source[f"{chill}/1060954094627463098"].meta["author_id"] == "521486476985321458"


def test_the_real_sample_imports_once(tmp_path) -> None:
    folder = sample("sources/discord/dcef-example-guild")
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["thread"])) as memory:
        first = run_import(memory, get("discord"), folder)
        # The two chill-talk copies share 4 messages (a fifth is edited in one): stored once.
        assert first.added == 43 and first.skipped["already imported"] == 4
        assert first.failed == 0 and first.undated == 0
        again = run_import(memory, get("discord"), folder)
        assert again.added == 0 and again.skipped["already imported"] == 47
        assert len(memory) == 43


def test_reply_chains_threads_and_days(tmp_path) -> None:
    path = write(tmp_path / "ops [500].json", export("500", base_messages()))
    found = items(path)
    first, reply, later = docs(found)
    assert first.text == "Ship the beta on Friday?"  # spoiler bars gone
    assert first.thread == reply.thread == "discord://900/500/10"
    assert later.thread == "discord://900/500/2024-03-13"
    assert reply.author == "Bo" and reply.meta["user_name"] == "bo_the_user"
    assert (
        reply.meta["author_id"] == "2" and reply.source == "https://discord.com/channels/900/500/11"
    )
    assert [s.reason for s in found if isinstance(s, Skipped)] == ["GuildMemberJoin"]


def test_an_author_given_by_id_alone_is_named_from_the_export(tmp_path) -> None:
    messages = [
        *base_messages(),
        message("15", "2024-03-13T09:00:00Z", "by id", {"id": "2"}),
        message("16", "2024-03-13T09:01:00Z", "stranger", {"id": "77"}),
        message(
            "17",
            "2024-03-13T09:02:00Z",
            "thanks <@!123456> and <@99999>",
            ANA,
            mentions=[{"id": "123456", "name": "cy", "nickname": "Cy"}],
        ),
    ]
    found = items(write(tmp_path / "ops.json", export("500", messages)))
    by_id, stranger, mentioning = docs(found)[-3:]
    assert mentioning.text == "thanks @Cy and @99999"
    assert by_id.author == "Bo" and by_id.meta["author_id"] == "2"
    assert stranger.author == "77"
    told = [n.message for n in found if isinstance(n, Notice)]
    assert told == ["author 77 has no name in the export: kept as the id"]


def test_an_edit_in_a_later_export_is_a_new_version_and_the_old_is_kept(
    tmp_path, engine_location
) -> None:
    first = write(tmp_path / "a" / "ops.json", export("500", base_messages()))
    changed = base_messages()
    changed[3]["content"] = "Standup moved to 11"
    changed[3]["timestampEdited"] = "2024-03-13T08:30:00+00:00"
    changed.append(message("14", "2024-03-14T08:00:00+00:00", "New one", BO))
    second = write(tmp_path / "b" / "ops.json", export("500", changed))
    with Memory(engine_location, embedder=KeywordEmbedder(["standup"])) as memory:
        assert run_import(memory, get("discord"), first).added == 3
        later = run_import(memory, get("discord"), second)
        assert later.added == 2 and later.skipped["already imported"] == 2
        texts = sorted(r.text for r in memory.records() if "Standup" in r.text)
        assert texts == ["Standup moved to 10", "Standup moved to 11"]

        # Before the edit only the first text answers; after it, the edit is there too.
        def standups(as_of: str) -> set[str]:
            hits = memory.search("standup", as_of=as_of)
            return {h.record.text for h in hits if "Standup" in h.record.text}

        assert standups("2024-03-13T08:10:00+00:00") == {"Standup moved to 10"}
        assert standups("2024-03-13") == {"Standup moved to 10", "Standup moved to 11"}
        assert run_import(memory, get("discord"), second).added == 0
        assert run_import(memory, get("discord"), first).added == 0
        assert len(memory) == 5


def test_bad_input_is_one_line_per_item_and_the_rest_is_imported(tmp_path) -> None:
    folder = tmp_path / "export"
    write(folder / "good.json", export("500", base_messages()))
    text = json.dumps(export("501", base_messages()))
    (folder / "truncated.json").write_text(text[: len(text) // 2])
    latin = json.dumps(
        export("502", [message("30", "2024-03-12T09:00:00Z", "café", ANA)]), ensure_ascii=False
    )
    (folder / "latin1.json").write_bytes(latin.encode("utf-8").replace("é".encode(), b"\xe9"))
    write(folder / "slack-day.json", [{"type": "message", "user": "U1", "ts": "1.0"}])
    odd = [
        message("40", "2024-03-12T09:00:00Z", "no date below", ANA),
        message("41", "", "undated", ANA),
        message("42", "2024-03-12T09:01:00Z", "nobody wrote this", None),
        message("40", "2024-03-12T09:00:00Z", "same id, other words", ANA),
        message("40", "2024-03-12T09:00:00Z", "no date below", ANA),  # a plain repeat
        "not an object",
    ]
    write(folder / "odd.json", export("503", odd))
    found = items(folder)
    errors = {
        e.location.removeprefix(str(folder) + "/"): e.reason
        for e in found
        if isinstance(e, ItemError)
    }
    assert errors.keys() == {
        "truncated.json",
        "latin1.json",
        "odd.json:2",
        "odd.json:4",
        "odd.json:6",
    }
    assert errors["truncated.json"].startswith("truncated at line 1")
    assert "not UTF-8" in errors["latin1.json"]
    assert "without a valid timestamp" in errors["odd.json:2"]
    assert "came before at" in errors["odd.json:4"] and "odd.json:1" in errors["odd.json:4"]
    told = [
        s for s in found if isinstance(s, Skipped) and s.reason == "not a DiscordChatExporter file"
    ]
    assert [s.location for s in told] == [str(folder / "slack-day.json")]
    unattributed = [d for d in docs(found) if d.text == "nobody wrote this"]
    assert unattributed and unattributed[0].author is None
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        report = run_import(memory, get("discord"), folder)
        assert report.failed == 5 and report.added == 3 + 2
        assert report.skipped["already imported"] == 1  # the plain repeat of id 40
        assert len(memory) == 5


def test_a_folder_of_other_json_is_refused_before_anything_is_stored(tmp_path) -> None:
    folder = tmp_path / "mixed"
    write(folder / "a.json", [{"type": "message"}])
    write(folder / "b.json", {"name": "Board", "cards": []})
    (folder / "notes.txt").write_text("hi")
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        with pytest.raises(InvalidInput, match="no DiscordChatExporter JSON export in it"):
            run_import(memory, get("discord"), [folder])
        assert len(memory) == 0


@pytest.mark.parametrize("what", ["slack list", "trello board", "empty folder"])
def test_another_tools_export_is_refused_whole(tmp_path, what) -> None:
    if what == "empty folder":
        path = tmp_path / "empty"
        path.mkdir()
    else:
        data = [{"type": "message"}] if what == "slack list" else {"name": "Board", "cards": []}
        path = write(tmp_path / "other.json", data)
    with pytest.raises(InvalidInput, match=str(path)):
        items(path)


def test_a_file_cut_anywhere_is_told_as_truncated(tmp_path) -> None:
    text = json.dumps(export("500", base_messages()))
    for cut in range(10, len(text) - 1, 41):
        path = tmp_path / f"cut{cut}.json"
        path.write_text(text[:cut])
        (error,) = items(path)
        assert isinstance(error, ItemError) and error.reason.startswith("truncated"), cut


def test_a_single_file_that_is_not_json_is_one_failure(tmp_path) -> None:
    path = tmp_path / "notes.json"
    path.write_text("hello")
    found = items(path)
    assert len(found) == 1 and isinstance(found[0], ItemError)
    assert found[0].location == str(path) and "invalid JSON at line 1" in found[0].reason


def test_a_zip_reads_like_the_folder_and_a_bomb_is_one_line(tmp_path) -> None:
    folder = tmp_path / "export"
    write(folder / "ops.json", export("500", base_messages()))
    write(folder / "ops.json_Files" / "x.json", {"not": "an export"})  # media folder: ignored
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.write(folder / "ops.json", "ops.json")
        packed.writestr("bomb.json", b"[" + b" " * (8 << 20) + b"]")
    assert [d.source for d in docs(items(folder))] == [d.source for d in docs(items(archive))]
    media = [s for s in items(folder) if isinstance(s, Skipped) and s.reason == "media file"]
    assert [Path(s.location).name for s in media] == ["x.json"]
    found = items(archive, DiscordImporter(max_member=1 << 20))
    bombs = [e for e in found if isinstance(e, ItemError)]
    assert [(e.location, e.reason) for e in bombs] == [
        (f"{archive}:bomb.json", "unpacks to 8 MiB, over the 1 MiB limit of one file")
    ]
    assert len(docs(found)) == 3
    with pytest.raises(InvalidInput, match="over the 4 MiB cap"):
        items(archive, DiscordImporter(max_unpacked=4 << 20))


def test_a_large_export_reads_every_message(tmp_path) -> None:
    people = [author(str(n), f"user{n}", f"Person {n}") for n in range(50)]
    messages = [
        message(
            str(1000 + n), f"2024-03-{1 + n % 28:02d}T09:{n % 60:02d}:00Z", f"m {n}", people[n % 50]
        )
        for n in range(20_000)
    ]
    path = write(tmp_path / "big.json", export("500", messages))
    found = docs(items(path))
    assert len(found) == 20_000 and len({d.author for d in found}) == 50


def test_cli_dry_run_lists_added_skipped_and_failed(tmp_path, capsys) -> None:
    folder = tmp_path / "export"
    write(folder / "ops.json", export("500", base_messages()))
    (folder / "broken.json").write_text('{"guild": {')
    db = tmp_path / "m.db"
    code = main(["--db", str(db), "import", "discord", str(folder), "--dry-run", "--json"])
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert code == 3 and not db.exists()
    assert summary["added"] == 3 and summary["skipped_by_reason"] == {"GuildMemberJoin": 1}
    assert [f["location"] for f in summary["failures"]] == [str(folder / "broken.json")]
    assert "broken.json" in err
    assert "discord" in get("discord").name
    code = main(["--db", str(db), "import", "discord", str(folder), "--date", "2024-01-01"])
    assert code == 2 and "takes no option date" in capsys.readouterr().err
