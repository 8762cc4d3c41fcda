"""The mail importer: ``.mbox`` and ``.eml`` files, bare message files, Maildir folders (or a
folder holding any of them), one document per message (read by :mod:`.mail_message`).

- author: the From display name (its address when there is none; ``addr (Name)`` gives Name);
- date: the ``Date`` header with its timezone, unless it cannot be true (before 1970, in the
  future, or more than a day after the last ``Received`` header): then the first hop's
  ``Received`` date, told; no usable date at all: undated, told;
- thread: the first Message-ID of ``References`` (else ``In-Reply-To``): the root of the reply
  chain, whose own thread is its Message-ID, so a chain shares one thread; a reply with
  neither whose subject is ``Re: S`` joins the thread of the archive's earlier mail with
  subject ``S``; a message with no Message-ID and no references: its normalised subject;
- text: the subject, a blank line and the body (``text/plain`` preferred; HTML made text by
  inscriptis, the ``import`` extra; ``text/enriched`` made plain), then the attachments by
  name;
- source: ``mid:`` and the Message-ID (RFC 2392), else ``FILE:N``; a second, different
  message with a Message-ID already read gets ``mid:ID#HASH`` and a notice naming both files.

Every file under a folder is accounted for: read, or skipped with why (a Maildir's ``tmp/``,
dot files, files that are no mail).
"""

from __future__ import annotations

import hashlib
import mailbox
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.files import MAX_FILE_BYTES
from mempp.importers.mail_message import Parsed, parse
from mempp.records import Document

MAIL_SUFFIXES = (".eml", ".mbox")
_PREFIXES = re.compile(r"^\s*((re|fwd?|aw|sv|vs|wg|tr|antw|odp|ynt)(\[\d+\])?\s*:\s*)+", re.I)
_REPLY = re.compile(r"^\s*(re|aw|sv|vs|antw|odp|ynt)(\[\d+\])?\s*:", re.I)
_HEADER_LINE = re.compile(rb"^[!-9;-~]{1,76}:")
_KNOWN_HEADERS = re.compile(
    rb"^(from|date|subject|received|message-id|return-path|to|delivered-to|mime-version):",
    re.I | re.M,
)
_FROM_QUOTED = re.compile(r"(?m)^>+From ")
# Files a Maildir holds beside its messages (mu's markers, Dovecot's and Courier's indexes).
_MAILDIR_EXTRAS = ("dovecot", "courier", "maildirfolder", "subscriptions")
_HEAD = 4096


@dataclass(frozen=True, slots=True)
class _Entry:
    """One thing found under the path: a mailbox, a message file, or a file not read."""

    kind: str  # "mbox", "message", "maildir-message", "skip"
    path: Path
    reason: str = ""
    detail: str | None = None


@dataclass(slots=True)
class _Archive:
    """What one read has seen: Message-IDs (with each variant's content hash and file) and
    the thread of each subject, for replies that name no parent."""

    variants: dict[str, dict[str, str]] = field(default_factory=dict)
    subjects: dict[str, str] = field(default_factory=dict)


class MailImporter:
    """Reads mail: an ``.mbox``, an ``.eml`` or a bare message file, a Maildir, or a folder
    of them."""

    name = "mail"
    description = "mail: .mbox and .eml files, Maildir folders, or a folder holding them"
    stable_sources = True  # a Message-ID names one message (variants get their own source)

    def __init__(self, *, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        if where.is_dir():
            return is_maildir(where)
        return where.is_file() and _classify(where).kind in ("mbox", "message")

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        where = Path(path)
        if not where.exists():
            raise InvalidInput(f"{path}: no such file or folder")
        if where.is_dir():
            plan = _plan(where)
            if not any(entry.kind != "skip" for entry in plan):
                raise InvalidInput(
                    f"{path}: no .mbox or .eml file and no Maildir in this folder, and no file "
                    "in it is a message"
                )
        else:
            entry = _classify(where)
            if entry.kind == "skip":
                raise InvalidInput(f"{path}: not a mailbox (.mbox, .eml, a message or a Maildir)")
            plan = [entry]
        return self._items(plan)

    def _items(self, plan: list[_Entry]) -> Iterator[Item]:
        archive = _Archive()
        now = self._now()
        for entry in plan:
            if entry.kind == "skip":
                yield Skipped(str(entry.path), entry.reason, entry.detail)
            elif entry.kind == "mbox":
                yield from _read_mbox(entry.path, archive, now)
            else:
                size = entry.path.stat().st_size
                if size > MAX_FILE_BYTES:  # refused by its size, never read whole
                    yield ItemError(
                        str(entry.path), f"is {size} bytes, over the {MAX_FILE_BYTES} limit"
                    )
                    continue
                yield from _message(str(entry.path), entry.path.read_bytes, archive, now)


def is_maildir(folder: Path) -> bool:
    """A folder with ``cur/`` or ``new/`` (git keeps no empty folder, so a copied Maildir
    may lack one) and nothing beside them but ``tmp/``, dot entries and the index files
    mail servers keep there."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    names = {e.name for e in entries if e.is_dir()}
    if not names & {"cur", "new"}:
        return False
    return all(
        e.name in ("cur", "new", "tmp")
        or e.name.startswith(".")
        or e.name.startswith(_MAILDIR_EXTRAS)
        for e in entries
    )


def _looks_like_message(head: bytes) -> bool:
    """Starts with a header field and holds one of the headers every mail has."""
    return bool(_HEADER_LINE.match(head)) and bool(_KNOWN_HEADERS.search(head))


def _classify(file: Path) -> _Entry:
    if file.name.startswith("."):
        return _Entry("skip", file, "hidden file")
    try:
        with file.open("rb") as handle:
            head = handle.read(_HEAD)
    except OSError as exc:
        return _Entry("skip", file, "unreadable", exc.strerror or str(exc))
    if not head.strip():
        return _Entry("skip", file, "empty file")
    if head.lstrip().startswith(b"From "):
        return _Entry("mbox", file)
    # An .mbox without a "From " line would read as no message at all: it is one message,
    # or no mail.
    if file.suffix.lower() == ".eml" or _looks_like_message(head.lstrip()):
        return _Entry("message", file)
    return _Entry("skip", file, "not a mail file")


def _plan(root: Path) -> list[_Entry]:
    """Every file under ``root`` in name order, each a mailbox, a message, or skipped."""
    plan: list[_Entry] = []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        dirs.sort()
        maildir = is_maildir(here)
        if maildir:
            for sub in ("cur", "new"):
                for name in sorted(_files(here / sub)):
                    if name.startswith("."):  # mu's .noindex and the like: markers, no mail
                        plan.append(_Entry("skip", here / sub / name, "Maildir dot file"))
                    else:
                        plan.append(_Entry("maildir-message", here / sub / name))
            for name in sorted(_files(here / "tmp")):
                if not name.startswith("."):
                    plan.append(
                        _Entry(
                            "skip",
                            here / "tmp" / name,
                            "in a Maildir's tmp/",
                            "a message still being delivered: not read",
                        )
                    )
                else:
                    plan.append(_Entry("skip", here / "tmp" / name, "Maildir dot file"))
            dirs[:] = [d for d in dirs if d not in ("cur", "new", "tmp")]
        hidden = [d for d in dirs if d.startswith(".") and not is_maildir(here / d)]
        for name in hidden:  # .git and the like; Maildir++ folders (.Sent) are read
            plan.append(_Entry("skip", here / name, "hidden folder"))
        dirs[:] = [d for d in dirs if d not in hidden]
        for name in sorted(files):
            if maildir and name.startswith("."):  # .noupdate, .uidvalidity: the box's own
                plan.append(_Entry("skip", here / name, "Maildir dot file"))
            else:
                plan.append(_classify(here / name))
    return plan


def _files(folder: Path) -> list[str]:
    try:
        return [e.name for e in os.scandir(folder) if e.is_file()]
    except OSError:
        return []


def _read_mbox(box: Path, archive: _Archive, now: datetime) -> Iterator[Item]:
    try:
        mbox = mailbox.mbox(box, factory=None, create=False)
        keys = list(mbox.iterkeys())
    except (OSError, mailbox.Error) as exc:
        yield ItemError(str(box), f"unreadable mailbox ({exc})")
        return
    try:
        if not keys:
            yield Skipped(str(box), "empty mailbox", "no message in it")
        for number, key in enumerate(keys, start=1):
            yield from _message(f"{box}:{number}", lambda k=key: mbox.get_bytes(k), archive, now)
    finally:
        mbox.close()


def _message(
    location: str, load: Callable[[], bytes], archive: _Archive, now: datetime
) -> Iterator[Item]:
    try:
        raw = load()
    except OSError as exc:
        yield ItemError(location, exc.strerror or str(exc))
        return
    if not raw.strip():
        yield ItemError(location, "empty message")
        return
    try:
        parsed = parse(raw, now)
    except MemppError as exc:
        yield ItemError(location, str(exc))
        return
    except Exception as exc:  # the email package raises many kinds on hostile input
        yield ItemError(location, f"unreadable message ({type(exc).__name__}: {exc})")
        return
    for text in parsed.notices:
        yield Notice(location, text)
    try:
        yield from _document(parsed, location, archive)
    except MemppError as exc:
        yield ItemError(location, str(exc))


def subject_key(subject: str) -> str:
    """A subject without reply and forward prefixes, case and spacing."""
    return " ".join(_PREFIXES.sub("", subject).lower().split())


def _fingerprint(parsed: Parsed) -> str:
    """What makes two copies of a message the same message: sender, subject, body (``>From``
    quoting aside: mboxo and mboxrd archives quote differently), attachments, and the Date
    when it has one (a Received date differs between the archives that received it)."""
    body = " ".join(_FROM_QUOTED.sub("From ", parsed.body).split())
    parts = [
        parsed.sender or "",
        " ".join(parsed.subject.split()),
        body,
        "\n".join(parsed.attachments),
        parsed.date.isoformat() if parsed.date and parsed.dated_by == "Date" else "",
    ]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _document(parsed: Parsed, location: str, archive: _Archive) -> Iterator[Item]:
    own = parsed.message_id
    source = f"mid:{own}" if own else location
    fingerprint = _fingerprint(parsed)
    # Messages without a Message-ID share one bucket: the same one in two archives is
    # known by its content alone.
    seen = archive.variants.setdefault(own or "", {})
    if fingerprint in seen:
        yield Skipped(
            location,
            "duplicate (same Message-ID and content)"
            if own
            else "duplicate (same content, no Message-ID)",
        )
        return
    if own and seen:
        source = f"mid:{own}#{fingerprint[:12]}"
        first = next(iter(seen.values()))
        yield Notice(
            location,
            f"Message-ID <{own}> is also that of {first}, a different message: stored as {source}",
        )
    seen[fingerprint] = location
    root = (parsed.references[0] if parsed.references else None) or parsed.in_reply_to
    key = subject_key(parsed.subject)
    by_subject = None
    if root is None and key and _REPLY.match(parsed.subject):
        by_subject = archive.subjects.get(key)
    if by_subject is not None:
        thread: str | None = by_subject
    elif root or own:
        thread = f"mid:{root or own}"
    else:
        thread = f"subject:{key}" if key else None
    if key and thread is not None:
        archive.subjects.setdefault(key, thread)
    lines = [f"[attachment: {name}]" for name in parsed.attachments]
    parts = [p for p in (parsed.subject.strip(), parsed.body.strip(), "\n".join(lines)) if p]
    yield Document.create(
        "\n\n".join(parts),
        author=parsed.author,
        date=parsed.date,
        source=source,
        thread=thread,
        metadata=_metadata(parsed, by_subject is not None),
    )


def _metadata(parsed: Parsed, by_subject: bool) -> dict[str, Any]:
    """The addresses (the author is the display name), the reply chain's ids, its
    attachments, and how its date and thread were found."""
    out: dict[str, Any] = {}
    if parsed.sender:
        out["from"] = parsed.sender
    if parsed.to:
        out["to"] = parsed.to
    if parsed.cc:
        out["cc"] = parsed.cc
    if parsed.message_id:
        out["message_id"] = parsed.message_id
    if parsed.in_reply_to:
        out["in_reply_to"] = parsed.in_reply_to
    if parsed.attachments:
        out["attachments"] = parsed.attachments
    if parsed.signed:
        out["signed"] = True
    if parsed.encrypted:
        out["encrypted"] = True
    if parsed.dated_by != "Date":
        out["dated_by"] = parsed.dated_by
    if by_subject:
        out["thread_by"] = "subject"
    return out
