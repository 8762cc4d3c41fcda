"""The transcript importer on the real samples (a W3C meeting's IRC log, a Teams WebVTT
excerpt; by path, never copied) and on WebVTT, SRT and IRC files built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli.main import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.transcript import TranscriptImporter
from realdata import sample

from conftest import KeywordEmbedder


def items(path: Path, **options: str) -> list[object]:
    return list(TranscriptImporter(**options).read(path))


def docs(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


VTT = """WEBVTT

NOTE exported by a meeting tool

abc/1-0
00:00:01.000 --> 00:00:03.000
<v Ana López>We ship on Friday,</v>

abc/1-1
00:00:03.000 --> 00:00:05.500
<v Ana López>after the &amp; review.</v>

abc/2-0
00:00:04.000 --> 00:00:06.000
<v.loud Bo>Agreed.</v>

abc/3-0
00:03:30.000 --> 00:03:31.000
<v Ana López>One more thing, much later.</v>
"""

SRT = """1
00:00:01,000 --> 00:00:02,500
Ana: Budget is approved.

2
00:00:02,600 --> 00:00:04,000
Ana: Twelve thousand.

3
00:00:05,000 --> 00:00:07,000
Bo: Good, thanks.

4
00:00:08,000 --> 00:00:09,000
(applause)
"""

IRC = """[09:00] <ana_lopez> present+
[09:00] <RRSAgent> I have made the request to generate minutes
[09:01] <bot> scribe+
[09:01] <bot> Topic: Budget
[09:02] <bot> ana_lopez: the budget is approved
[09:02] <bot> ... twelve thousand for Q3
[09:03] <bo> q+
[09:04] <bo> what about travel?
[09:05] <bot> bo: travel is separate
*** carl has joined #meeting
[09:06] * bo waves
"""


def test_webvtt_runs_voices_offsets_and_the_meeting_key(tmp_path) -> None:
    path = tmp_path / "standup.vtt"
    path.write_text(VTT)
    found = items(path, date="2024-03-12T09:00:00+01:00")
    ana, bo, later = docs(found)
    assert ana.text == "We ship on Friday, after the & review." and ana.author == "Ana López"
    assert ana.date.text == "2024-03-12T09:00:01+01:00"
    assert bo.author == "Bo" and bo.date.text == "2024-03-12T09:00:04+01:00"
    assert later.text == "One more thing, much later."  # a pause over 90 s starts a turn
    assert {d.thread for d in (ana, bo, later)} == {"transcript://abc"}
    assert ana.source.startswith("transcript://abc/1-0#v=") and ana.meta["turns"] == 2
    assert ana.tags == ("standup",)
    # A day alone dates every turn by the day.
    assert {d.date.text for d in docs(items(path, date="2024-03-12"))} == {"2024-03-12"}


def test_a_webvtt_note_dates_the_meeting(tmp_path) -> None:
    path = tmp_path / "2020-01-01 standup.vtt"
    path.write_text(VTT.replace("NOTE exported by a meeting tool", "NOTE recorded 2024-03-12"))
    found = items(path)
    assert {d.date.text for d in docs(found)} == {"2024-03-12"}  # the file's word over the path
    assert not [n for n in found if isinstance(n, Notice)]


def test_srt_speakers_by_prefix_and_a_date_from_the_folder(tmp_path) -> None:
    path = tmp_path / "2024-05-02 board" / "call.srt"
    path.parent.mkdir()
    path.write_text(SRT)
    found = items(path)
    budget, thanks, applause = docs(found)
    assert (budget.author, budget.text) == ("Ana", "Budget is approved. Twelve thousand.")
    assert thanks.author == "Bo" and applause.author is None
    assert budget.date.text == "2024-05-02"
    assert budget.source.startswith("transcript://2024-05-02/call.srt/1#v=")  # the cue number
    told = [n.message for n in found if isinstance(n, Notice)]
    assert told == ["meeting date 2024-05-02 taken from the path"]


def test_a_zoom_webvtt_names_speakers_by_prefix(tmp_path) -> None:
    path = tmp_path / "zoom.vtt"
    path.write_text(
        "WEBVTT\n\n1\n00:00:01.000 --> 00:00:02.000\nAna López: Budget is approved.\n\n"
        "2\n00:00:02.500 --> 00:00:04.000\nBo: Thanks.\n"
    )
    ana, bo = docs(items(path, date="2024-03-12"))
    assert (ana.author, ana.text) == ("Ana López", "Budget is approved.")
    assert (bo.author, bo.text) == ("Bo", "Thanks.")
    # With voices present, a "Name:" in the words stays words.
    voiced = tmp_path / "teams.vtt"
    voiced.write_text("WEBVTT\n\n1\n00:00:01.000 --> 00:00:02.000\n<v Cy>Note: ship it</v>\n")
    (only,) = docs(items(voiced, date="2024-03-12"))
    assert (only.author, only.text) == ("Cy", "Note: ship it")


def test_irc_scribe_lines_commands_and_clock_times(tmp_path) -> None:
    path = tmp_path / "meeting.log"
    path.write_text(IRC)
    found = items(path, date="2024-03-12")
    relayed, travel, answer, waves = docs(found)
    assert relayed.author == "ana lopez" and relayed.meta["scribe"] == "bot"
    assert relayed.text == "the budget is approved twelve thousand for Q3"
    assert relayed.meta["speaker"] == "ana_lopez" and relayed.tags == ("meeting", "Budget")
    assert relayed.date.text == "2024-03-12T09:02:00+00:00"
    assert travel.author == "bo" and answer.author == "bo" and answer.meta["scribe"] == "bot"
    assert waves.text == "* waves"
    reasons = sorted(s.reason for s in found if isinstance(s, Skipped))
    assert reasons == [
        "irc command",
        "irc command",
        "irc command",
        "irc event",
        "meeting bot",
        "meeting directive",
    ]
    # Without a date, clock-only lines cannot be placed: undated, and told.
    undated = items(path)
    assert all(d.date is None for d in docs(undated))
    assert any("give --date" in n.message for n in undated if isinstance(n, Notice))


def test_an_irssi_log_dates_itself(tmp_path) -> None:
    path = tmp_path / "channel.log"
    path.write_text(
        "--- Log opened Tue Mar 12 09:00:00 2024\n"
        "09:01 <@ana> budget approved\n"
        "09:02 -!- bo [~bo@host] has joined #ops\n"
        "--- Day changed Wed Mar 13 2024\n"
        "10:00 <+bo> travel is separate\n"
        "--- Day changed Someday\n"
    )
    found = items(path)
    ana, bo = docs(found)
    assert (ana.author, ana.date.text) == ("ana", "2024-03-12T09:01:00+00:00")
    assert (bo.author, bo.date.text) == ("bo", "2024-03-13T10:00:00+00:00")
    assert ana.thread == "transcript://2024-03-12/channel.log"
    assert [e.reason for e in found if isinstance(e, ItemError)] == [
        "a day line whose date cannot be read: --- Day changed Someday"
    ]
    assert not [n for n in found if isinstance(n, Notice)]


def test_the_real_w3c_meeting_log() -> None:
    folder = sample("sources/transcripts/w3c-ccg/2025-03-25")
    found = items(folder)
    documents = docs(found)
    assert not [i for i in found if isinstance(i, ItemError)]
    skipped = [s for s in found if isinstance(s, Skipped)]
    # index.html and email.log are the minutes, not a log: told by name.
    assert sorted(
        Path(s.location).name for s in skipped if s.reason == "not a transcript file"
    ) == [
        "email.log",
        "index.html",
    ]
    # 236 lines: every one is a turn's part, a command or a directive.
    lines = sum(d.meta["turns"] for d in documents)
    commands = sum(1 for s in skipped if s.reason in ("irc command", "meeting directive"))
    assert lines + commands == 236
    assert all(d.date and d.date.text.startswith("2025-03-25T") for d in documents)
    authors = {d.author for d in documents}
    assert {"Harrison Tang", "Lucy Yang", "Manu Sporny", "Kaliya Identity Woman"} <= authors
    assert "Transcriber" not in authors  # the bot relays; the speakers speak
    assert {d.tags for d in documents} == {("weekly",)}
    assert {d.thread for d in documents} == {"transcript://2025-03-25/irc.log"}
    assert all(len(d.text) <= 2100 for d in documents)


def test_the_real_teams_webvtt() -> None:
    path = sample("sources/transcripts/docling/webvtt_example_03.vtt")
    found = items(path, date="2024-06-01")
    documents = docs(found)
    assert [d.author for d in documents] == [
        "Speaker A",
        None,
        "Speaker A",
        "Speaker B",
        "Speaker A",
        "Speaker B",
        "Speaker A",
        "Speaker B",
        "Speaker A",
    ]
    # Cues out of id order are placed by their start; overlapping ones keep their turns.
    assert documents[4].text == "Yeah, I mean I think you went even more than"
    assert documents[6].text == "than me. I just opened the format. give it a try, yeah."
    assert {d.thread for d in documents} == {"transcript://62357a1d-d250-41d5-a1cf-6cc0eeceffcc"}
    assert any("without a voice" in n.message for n in found if isinstance(n, Notice))
    assert sum(d.meta["turns"] for d in documents) == 13


def test_reimport_adds_nothing_and_dry_run_counts(tmp_path) -> None:
    folder = tmp_path / "meetings"
    folder.mkdir()
    (folder / "standup.vtt").write_text(VTT)
    (folder / "call.srt").write_text(SRT)
    (folder / "readme.md").write_text("not a transcript")
    dry = run_import(None, get("transcript", date="2024-03-12"), folder, dry_run=True)
    assert dry.added == 6 and dry.skipped["not a transcript file"] == 1
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["budget"])) as memory:
        first = run_import(memory, get("transcript", date="2024-03-12"), folder)
        assert first.added == 6 and first.undated == 0
        again = run_import(memory, get("transcript", date="2024-03-12"), folder)
        assert again.added == 0 and again.skipped["already imported"] == 6
        assert len(memory) == 6
        hits = memory.search("budget", as_of="2024-03-12")
        assert hits and hits[0].record.author == "Ana"
        # A corrected transcript: its changed turn is a new version, the rest already there.
        (folder / "call.srt").write_text(SRT.replace("Twelve thousand", "Fifteen thousand"))
        corrected = run_import(memory, get("transcript", date="2024-03-12"), folder)
        assert corrected.added == 1 and corrected.skipped["already imported"] == 5
        assert len(memory) == 7


def test_bad_input_is_named_and_the_rest_read(tmp_path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    broken = VTT.replace("00:00:04.000 --> 00:00:06.000", "00:00:04 -> soon")
    (folder / "broken.vtt").write_text(broken)
    repeated = VTT.replace("abc/3-0", "abc/1-0")
    (folder / "repeated.vtt").write_text(repeated)
    (folder / "latin1.srt").write_bytes(SRT.replace("Budget", "Budgét").encode("latin-1"))
    (folder / "binary.vtt").write_bytes(b"WEBVTT\n\x00\x01\x02" * 10)
    (folder / "discord.txt").write_text(json.dumps({"guild": {}, "channel": {}, "messages": []}))
    found = items(folder, date="2024-03-12")
    errors = {
        Path(e.location.split(":")[0]).name: e.reason for e in found if isinstance(e, ItemError)
    }
    assert errors.keys() == {"broken.vtt", "repeated.vtt", "binary.vtt"}
    assert "start --> end" in errors["broken.vtt"] and "came before" in errors["repeated.vtt"]
    assert "binary" in errors["binary.vtt"]
    latin = [n for n in found if isinstance(n, Notice) and "latin1.srt" in n.location]
    assert latin and "not UTF-8" in latin[0].message
    assert any(d.text.startswith("Budgét") for d in docs(found))
    assert [Path(s.location).name for s in found if isinstance(s, Skipped)] == ["discord.txt"]
    single = tmp_path / "other.txt"
    single.write_text("just some notes\nwith lines\n")
    with pytest.raises(InvalidInput, match="not a transcript"):
        items(single)
    with pytest.raises(InvalidInput, match="--date must be"):
        TranscriptImporter(date="March 3")


def test_a_file_over_the_cap_is_one_failure(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("mempp.importers.transcript.MAX_FILE", 1000)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "big.vtt").write_text(VTT * 10)
    (folder / "small.srt").write_text(SRT)
    found = items(folder, date="2024-03-12")
    assert [(Path(e.location).name, e.reason) for e in found if isinstance(e, ItemError)] == [
        ("big.vtt", "larger than the 0.000954 MiB cap for a transcript")
    ]
    assert len(docs(found)) == 3


def test_a_long_log_reads_every_line(tmp_path) -> None:
    lines = [
        f"[2024-03-12T{9 + n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z]\t"
        f"<user{n % 7}>\tline {n}"
        for n in range(20_000)
    ]
    path = tmp_path / "long.log"
    path.write_text("\n".join(lines))
    found = docs(items(path))
    assert sum(d.meta["turns"] for d in found) == 20_000 and len({d.author for d in found}) == 7


def test_cli_passes_the_date(tmp_path, capsys) -> None:
    path = tmp_path / "standup.vtt"
    path.write_text(VTT)
    db = tmp_path / "m.db"
    code = main(
        [
            "--db",
            str(db),
            "import",
            "transcript",
            str(path),
            "--date",
            "2024-03-12",
            "--dry-run",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["added"] == 3 and summary["undated"] == 0
    code = main(["--db", str(db), "import", "transcript", str(path), "--date", "soon", "--dry-run"])
    assert code == 2 and "--date must be" in capsys.readouterr().err
