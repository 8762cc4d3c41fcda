"""The transcript importer: meeting transcripts in WebVTT (Teams, Zoom, Meet), SubRip (SRT)
and IRC logs (``[time] <nick> text``), a file or a folder of them, into one document per
speaker turn: a run of consecutive cues or lines of one speaker, cut at a pause of
:data:`MAX_PAUSE` or at :data:`MAX_RUN_CHARS`.

- author: the cue's voice (``<v Name>``), else (SRT, a WebVTT without voices as Zoom
  writes) a ``Name:`` prefix; an IRC nick with
  ``_`` as spaces; a scribe's relayed line (``Name: words``, after the scribe's
  ``scribe+``, as W3C's transcriber bot writes) is the named speaker's, the scribe in
  metadata;
- date: an IRC line's own ISO timestamp; else the meeting's date (``--date``, else a
  ``YYYY-MM-DD`` in the file's name or a folder above it) plus the cue's offset when the
  start time is known, the day alone when it is not; none found: undated, told;
- thread: the meeting, ``transcript://MEETING`` (a Teams transcript's cue-id prefix, else
  the date and file name); source: ``transcript://MEETING/FIRST_CUE`` (its id, or its
  start offset, or the IRC line's time) with ``#v=`` and a digest of the turn's text, so a
  corrected transcript adds its changed turns as new versions and nothing else;
- tags: the meeting's title (IRC ``Meeting:``, else the file's stem) and the current
  ``Topic:``.

IRC commands (``present+``, ``q+``, ``ack``, bot addresses) and meeting directives are
skipped and counted; join and quit lines too. The formats are small enough that a reader
for each is kept here; none of the parsing libraries handles all three.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

from mempp.errors import InvalidInput, MemppError
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.exports import FOUND, Found, Repeats, held_until_found
from mempp.records import Document

SUFFIXES = (".vtt", ".srt", ".log", ".txt")
MAX_PAUSE = timedelta(seconds=90)
MAX_RUN_CHARS = 2000
MAX_FILE = 64 << 20

_DAY = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_CUE_TIME = re.compile(
    r"^\s*((?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})\s*-->\s*((?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})"
)
_VOICE = re.compile(r"<v(?:\.[^\s>]*)?\s+([^>]+)>")
_TAG = re.compile(r"</?[^>]+>")
# "[time] <nick> text" (a bracketed clock or ISO time), irssi's bare "HH:MM <nick> text", and
# "* nick does" actions.
_IRC = re.compile(
    r"^(?:\[(?P<stamp>[^\]]{4,40})\]|(?P<clock>\d{1,2}:\d{2}(?::\d{2})?))\s*"
    r"(?:<(?P<nick>[^>]{1,120})>\s?(?P<words>.*)|\*\s+(?P<actor>\S+)\s+(?P<action>.*))$"
)
_IRC_EVENT = re.compile(
    r"^(?:\[[^\]]{4,40}\]\s*|\d{1,2}:\d{2}(?::\d{2})?\s+)?(\*\*\*|-!-|--[><]|---\s)"
)
# W3C's meeting bots: their lines are the minutes machinery, not what anyone said.
MEETING_BOTS = frozenset({"rrsagent", "zakim", "trackbot", "agendabot"})
# irssi and its kin write the day into the log: "--- Log opened Tue Mar 12 09:00:00 2024",
# "--- Day changed Wed Mar 13 2024".
_DAY_LINE = re.compile(r"^-{2,3}\s+(?:Day changed|Log opened)\s+(.+?)\s*$", re.I)
_DAY_FORMATS = ("%a %b %d %Y", "%a %b %d %H:%M:%S %Y", "%a, %d %b %Y", "%Y-%m-%d")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?$")
_COMMAND = re.compile(
    r"^(?:(?:present|regrets|scribe|q|queue)\s*[+\-?]|ack\b|(?:zakim|rrsagent|agendabot|"
    r"trackbot)\s*[,:]|[+-]1$|\+q\b|q\?)",
    re.I,
)
_DIRECTIVE = re.compile(
    r"^(meeting|topic|agenda|chair|chairs|scribe|scribenick|date)\s*:\s*(.*)$", re.I
)
_RELAYED = re.compile(r"^([A-Za-z][\w.()@'/-]{0,60}):\s+(.*)$")
_SRT_SPEAKER = re.compile(r"^([A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}):\s+(.+)$")


@dataclass(slots=True)
class _Turn:
    """One cue or line: who, when (an absolute moment, or an offset into the meeting)."""

    key: str
    speaker: str | None
    text: str
    location: str
    at: datetime | None = None
    offset: timedelta | None = None
    raw: str | None = None  # the nick or voice as written
    scribe: str | None = None
    topic: str | None = None
    own_date: bool = False  # the line carried its own full date


@dataclass(slots=True)
class _Meeting:
    key: str
    title: str
    day: date | None
    start: datetime | None
    turns: list[_Turn] = field(default_factory=list)
    opened: date | None = None  # the first day an IRC log's own "--- Day changed" line names


class TranscriptImporter:
    """Reads WebVTT, SRT and IRC-log transcripts. ``date`` (``YYYY-MM-DD``, or an ISO
    datetime: the meeting's start, to which cue offsets are added) dates a transcript whose
    cues carry offsets only."""

    name = "transcript"
    description = "meeting transcripts: WebVTT, SRT, IRC logs ([time] <nick> text)"
    stable_sources = True  # a meeting's key and a cue's id or time name one turn

    def __init__(self, *, date: str | None = None) -> None:
        self.day, self.start = _given_date(date)

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        if not where.is_file() or where.suffix.lower() not in SUFFIXES:
            return False
        try:
            with where.open("rb") as handle:
                head = handle.read(2048)
        except OSError:
            return False
        return _format(_decode(head)[0]) is not None

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        where = Path(path)
        if not where.exists():
            raise InvalidInput(f"{path}: no such file or folder")
        if where.is_file():
            text, error = _load(where)
            if error is None and _format(text[0]) is None:
                raise InvalidInput(
                    f"{path}: not a transcript (WebVTT, SRT or an IRC log of [time] <nick> lines)"
                )
            yield from self._file(where, text, error)
            return
        nothing = f"{path}: no WebVTT, SRT or IRC-log transcript in this folder"
        yield from held_until_found(self._folder(where), nothing)

    def _folder(self, where: Path) -> Iterator[Item | Found]:
        for file in sorted(p for p in where.rglob("*") if p.is_file()):
            if file.suffix.lower() not in SUFFIXES:
                yield Skipped(
                    str(file), "not a transcript file", "not a .vtt, .srt, .log or .txt file"
                )
                continue
            text, error = _load(file)
            if error is None and _format(text[0]) is None:
                yield Skipped(
                    str(file), "not a transcript file", "no WebVTT, SRT or IRC lines in it"
                )
                continue
            yield FOUND
            yield from self._file(file, text, error)

    def _file(self, file: Path, text: tuple[str, str | None], error: str | None) -> Iterator[Item]:
        if error is not None:
            yield ItemError(str(file), error)
            return
        body, charset_note = text
        if charset_note is not None:
            yield Notice(str(file), charset_note)
        kind = _format(body)
        day, start = self.day, self.start
        if day is None and kind == "vtt":
            day = _day_in_notes(body)  # "WEBVTT - 2024-03-12 standup", "NOTE recorded 2024-03-12"
        from_path = day is None
        if day is None:
            day = _day_in_path(file)
        meeting = _Meeting(key="", title=file.stem, day=day, start=start)
        reader = {"vtt": _vtt, "srt": _srt, "irc": _irc}[kind or "irc"]
        yield from reader(file, body, meeting)
        if not meeting.turns:
            return
        if from_path and day is not None and not all(t.own_date for t in meeting.turns):
            yield Notice(str(file), f"meeting date {day} taken from the path")
        day = day or meeting.opened
        if meeting.key == "":
            meeting.key = f"{day.isoformat() if day else 'undated'}/{file.name}"
        if day is None and any(t.at is None for t in meeting.turns):
            yield Notice(
                str(file),
                "no meeting date in the file or its path: stored undated (give --date YYYY-MM-DD)",
            )
        yield from _runs(meeting)


def _given_date(value: str | None) -> tuple[date | None, datetime | None]:
    if value is None:
        return None, None
    text = value.strip()
    try:
        if len(text) == 10:
            return date.fromisoformat(text), None
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"--date must be YYYY-MM-DD or an ISO datetime (the meeting's start), got {value!r}",
            field="date",
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.date(), moment


def _decode(raw: bytes) -> tuple[str, str | None]:
    """Text and, when it was not UTF-8, a note saying how it was read."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16", "replace"), None
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return raw.decode("cp1252", "replace"), (
            f"not UTF-8 (byte {exc.start}): read as Windows-1252, some characters may be wrong"
        )


def _load(file: Path) -> tuple[tuple[str, str | None], str | None]:
    try:
        size = file.stat().st_size
        if size > MAX_FILE:
            return (
                "",
                None,
            ), f"larger than the {MAX_FILE / (1 << 20):.3g} MiB cap for a transcript"
        raw = file.read_bytes()
    except OSError as exc:
        return ("", None), exc.strerror or str(exc)
    if b"\x00" in raw[:4096] and not raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return ("", None), "binary data, not a text transcript"
    return _decode(raw), None


def _format(text: str) -> str | None:
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("WEBVTT"):
        return "vtt"
    lines = [line for line in stripped.splitlines()[:40] if line.strip()]
    if len(lines) >= 2 and lines[0].strip().isdigit() and _CUE_TIME.match(lines[1]):
        return "srt"
    said = sum(1 for line in lines if _IRC.match(line))
    logged = sum(1 for line in lines if _IRC_EVENT.match(line) or _DAY_LINE.match(line))
    return "irc" if said and (said + logged) * 2 >= len(lines) else None


def _day_in_notes(body: str) -> date | None:
    """A day a WebVTT's header or NOTE blocks name, before its first cue."""
    for _, lines in _blocks(body):
        if not lines[0].startswith(("WEBVTT", "NOTE")):
            if any("-->" in line for line in lines):
                return None
            continue
        for match in _DAY.finditer(" ".join(lines)):
            try:
                return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
            except ValueError:
                continue
    return None


def _day_in_path(file: Path) -> date | None:
    for part in [file.name, *(p.name for p in file.parents)]:
        for match in _DAY.finditer(part):
            try:
                return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
            except ValueError:
                continue
    return None


def _offset(text: str) -> timedelta:
    parts = text.replace(",", ".").split(":")
    seconds = float(parts[-1])
    minutes = int(parts[-2])
    hours = int(parts[-3]) if len(parts) == 3 else 0
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def _blocks(body: str) -> Iterator[tuple[int, list[str]]]:
    """Blank-line separated blocks with the line number each starts on."""
    current: list[str] = []
    first = 0
    for number, line in enumerate(body.splitlines(), start=1):
        if line.strip():
            if not current:
                first = number
            current.append(line.rstrip())
        elif current:
            yield first, current
            current = []
    if current:
        yield first, current


def _cues(
    file: Path, body: str, meeting: _Meeting, *, srt: bool, repeats: Repeats
) -> Iterator[Item]:
    # SRT has no voices, and a WebVTT without any (Zoom's) names the speaker "Name: words".
    prefixed = srt or "<v" not in body
    for line_number, lines in _blocks(body):
        location = f"{file}:{line_number}"
        if not srt and (lines[0].startswith(("WEBVTT", "NOTE", "STYLE", "REGION"))):
            continue
        timing = next((i for i, line in enumerate(lines[:3]) if "-->" in line), None)
        match = _CUE_TIME.match(lines[timing]) if timing is not None else None
        if timing is None or match is None:
            yield ItemError(location, "a cue without a valid 'start --> end' time line")
            continue
        cue_id = lines[timing - 1].strip() if timing > 0 else None
        payload = "\n".join(lines[timing + 1 :])
        voice = _VOICE.search(payload)
        speaker = voice.group(1).strip() if voice else None
        words = " ".join(html.unescape(_TAG.sub("", payload)).split())
        if speaker is None and prefixed:
            named = _SRT_SPEAKER.match(words)
            if named:
                speaker, words = named.group(1), named.group(2)
        if not words:
            yield Skipped(location, "empty cue")
            continue
        start = _offset(match.group(1))
        key = cue_id or match.group(1).replace(",", ".")
        repeated = repeats.check(key, f"{speaker}\x00{words}", location)
        if repeated is not None:
            yield repeated
            continue
        meeting.turns.append(_Turn(key, speaker, words, location, offset=start, raw=speaker))


def _vtt(file: Path, body: str, meeting: _Meeting) -> Iterator[Item]:
    yield from _cues(file, body, meeting, srt=False, repeats=Repeats())
    # A Teams transcript's cue ids are MEETING-GUID/N-M: the GUID names the meeting.
    prefixes = {t.key.split("/")[0] for t in meeting.turns if "/" in t.key}
    if len(prefixes) == 1 and all("/" in t.key for t in meeting.turns):
        meeting.key = prefixes.pop()
        for turn in meeting.turns:
            turn.key = turn.key.split("/", 1)[1]
    meeting.turns.sort(key=lambda t: t.offset or timedelta())
    unvoiced = sum(1 for t in meeting.turns if t.speaker is None)
    if unvoiced:
        yield Notice(
            str(file), f"{unvoiced} cue(s) without a voice (<v Name>): stored unattributed"
        )


def _srt(file: Path, body: str, meeting: _Meeting) -> Iterator[Item]:
    yield from _cues(file, body, meeting, srt=True, repeats=Repeats())
    meeting.turns.sort(key=lambda t: t.offset or timedelta())


def _irc(file: Path, body: str, meeting: _Meeting) -> Iterator[Item]:
    scribes: set[str] = set()
    topic: str | None = None
    last_relayed: str | None = None
    for number, line in enumerate(body.splitlines(), start=1):
        location = f"{file}:{number}"
        if not line.strip():
            continue
        day_line = _DAY_LINE.match(line)
        if day_line is not None:
            named = _day_named(day_line.group(1))
            if named is None:
                yield ItemError(location, f"a day line whose date cannot be read: {line.strip()}")
                continue
            meeting.day = named
            meeting.opened = meeting.opened or named
            yield Skipped(location, "irc event")
            continue
        if _IRC_EVENT.match(line):
            yield Skipped(location, "irc event")
            continue
        match = _IRC.match(line)
        if match is None:
            yield ItemError(location, "not an IRC line ([time] <nick> text)")
            continue
        stamp = match.group("stamp") or match.group("clock")
        nick, words = match.group("nick"), match.group("words")
        if nick is None:  # "* nick does something"
            nick, words = match.group("actor"), f"* {match.group('action')}"
        nick = nick.strip().lstrip("@+%~&") or nick  # channel modes some clients show
        words = words.strip()
        at = _irc_time(stamp, meeting.day, meeting.start)
        if at is None and not _CLOCK.match(stamp.strip()):
            yield ItemError(location, f"unreadable time [{stamp}]")
            continue
        if not words:
            yield Skipped(location, "empty line")
            continue
        lowered = words.lower()
        if lowered.startswith("scribe+") or lowered.startswith("scribenick+"):
            scribes.add(nick)
        directive = _DIRECTIVE.match(words)
        if directive is not None:
            name, value = directive.group(1).lower(), directive.group(2).strip()
            if name == "meeting" and value:
                meeting.title = value
            elif name == "topic":
                topic = value or None
            elif name in ("scribe", "scribenick") and value:
                scribes.add(value.split()[0])
            yield Skipped(location, "meeting directive")
            continue
        if _COMMAND.match(words):
            yield Skipped(location, "irc command")
            continue
        if nick.lower() in MEETING_BOTS:
            yield Skipped(location, "meeting bot")
            continue
        speaker, scribe = nick, None
        if nick in scribes:
            relayed = _RELAYED.match(words)
            if relayed is not None:
                speaker, words, scribe = relayed.group(1), relayed.group(2).strip(), nick
                last_relayed = speaker
            elif last_relayed is not None and words.startswith("..."):
                speaker, words, scribe = last_relayed, words.lstrip(". "), nick
        if not words:
            yield Skipped(location, "empty line")
            continue
        offset = None if at is not None else _clock(stamp)
        meeting.turns.append(
            _Turn(
                f"{stamp.strip()}/{nick}",
                _display(speaker),
                words,
                location,
                at=at,
                offset=offset,
                raw=speaker,
                scribe=scribe,
                topic=topic,
                own_date=_CLOCK.match(stamp.strip()) is None or meeting.opened is not None,
            )
        )


def _day_named(text: str) -> date | None:
    for form in _DAY_FORMATS:
        try:
            return datetime.strptime(text, form).date()
        except ValueError:
            continue
    return None


def _irc_time(stamp: str, day: date | None, start: datetime | None) -> datetime | None:
    text = stamp.strip()
    clock = _CLOCK.match(text)
    if clock is None:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if day is None:
        return None
    zone = start.tzinfo if start is not None else UTC
    return datetime.combine(day, time(), tzinfo=zone) + (_clock(text) or timedelta())


def _clock(text: str) -> timedelta | None:
    clock = _CLOCK.match(text.strip())
    if clock is None:
        return None
    hours, minutes, seconds, fraction = clock.groups()
    micros = int((fraction or "0").ljust(6, "0"))
    return timedelta(
        hours=int(hours), minutes=int(minutes), seconds=int(seconds or 0), microseconds=micros
    )


def _display(name: str | None) -> str | None:
    """An IRC nick as a name: ``Harrison_Tang`` -> ``Harrison Tang``."""
    if name is None:
        return None
    shown = " ".join(name.replace("_", " ").split())
    return shown or name


def _when(meeting: _Meeting, turn: _Turn) -> datetime | date | None:
    if turn.at is not None:
        return turn.at
    if meeting.start is not None and turn.offset is not None:
        return meeting.start + turn.offset
    return meeting.day


def _runs(meeting: _Meeting) -> Iterator[Item]:
    run: list[_Turn] = []

    def flush() -> Iterator[Item]:
        if not run:
            return
        first = run[0]
        text = " ".join(t.text for t in run)
        tags = [meeting.title] + ([first.topic] if first.topic else [])
        metadata: dict[str, object] = {
            "meeting": meeting.key,
            "turns": len(run),
            "first": first.location,
        }
        if first.raw is not None and first.raw != first.speaker:
            metadata["speaker"] = first.raw
        if first.scribe is not None:
            metadata["scribe"] = first.scribe
        if first.offset is not None:
            metadata["offset"] = _shown_offset(first.offset)
        try:
            yield Document.create(
                text,
                author=first.speaker,
                date=_when(meeting, first),
                tags=tags,
                source=f"transcript://{meeting.key}/{first.key}#v={_digest(text)}",
                thread=f"transcript://{meeting.key}",
                metadata=metadata,
            )
        except MemppError as exc:
            yield ItemError(first.location, str(exc))
        run.clear()

    for turn in meeting.turns:
        if run and not _continues(run, turn):
            yield from flush()
        run.append(turn)
    yield from flush()


def _continues(run: list[_Turn], turn: _Turn) -> bool:
    last = run[-1]
    if turn.speaker is None or (turn.speaker, turn.topic, turn.scribe) != (
        last.speaker,
        last.topic,
        last.scribe,
    ):
        return False
    if sum(len(t.text) + 1 for t in run) + len(turn.text) > MAX_RUN_CHARS:
        return False
    if turn.at is not None and last.at is not None:
        return turn.at - last.at <= MAX_PAUSE
    if turn.offset is not None and last.offset is not None:
        return turn.offset - last.offset <= MAX_PAUSE
    return True


def _digest(text: str) -> str:
    """12 hex digits of the turn's SHA-256: a corrected transcript's changed turns are new
    versions (the old kept); its unchanged ones are already imported."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _shown_offset(offset: timedelta) -> str:
    total = offset.total_seconds()
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{int(hours):02d}:{int(minutes):02d}:{seconds:06.3f}"
