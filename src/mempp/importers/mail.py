"""The mail importer: ``.mbox`` and ``.eml`` files and Maildir folders (or a folder holding
any of them), one document per message.

- author: the From display name (its address when there is none);
- date: the ``Date`` header with its timezone (else the earliest ``Received`` date, told;
  else undated, told);
- thread: the first Message-ID of ``References`` (else ``In-Reply-To``): the root of the reply
  chain, whose own thread is its Message-ID, so a chain shares one thread; a message with no
  Message-ID and no references: its normalised subject;
- text: the subject, a blank line and the body (``text/plain`` preferred; HTML made text by
  inscriptis, the ``import`` extra), then the attachments by name;
- source: ``mid:`` and the Message-ID (RFC 2392), else ``FILE:N``.

A body in a charset it does not match is decoded anyway (as UTF-8, else with replacement
characters) and a warning says so.
"""

from __future__ import annotations

import mailbox
import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.importers.base import Item, ItemError, Notice
from mempp.importers.files import MAX_FILE_BYTES
from mempp.records import Document

MAIL_SUFFIXES = (".eml", ".mbox")
_MESSAGE_ID = re.compile(r"<([^<>\s]+)>")
_REPLY_PREFIX = re.compile(r"^\s*((re|fwd?|aw|sv|vs|wg|tr|antw)(\[\d+\])?\s*:\s*)+", re.I)
_SURROGATES = re.compile("[\udc80-\udcff]")
_PARSER = BytesParser(policy=policy.default)


class MailImporter:
    """Reads mailboxes: an ``.mbox`` or ``.eml`` file, a Maildir, or a folder of them."""

    name = "mail"
    description = "mail: .mbox and .eml files, Maildir folders, or a folder holding them"
    stable_sources = True  # a Message-ID names one message

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        if where.is_dir():
            return _is_maildir(where)
        return where.is_file() and (
            where.suffix.lower() in MAIL_SUFFIXES or _starts_like_mbox(where)
        )

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        where = Path(path)
        if not where.exists():
            raise InvalidInput(f"{path}: no such file or folder")
        if where.is_dir():
            boxes = [where] if _is_maildir(where) else _mailboxes_under(where)
            if not boxes:
                raise InvalidInput(f"{path}: no .mbox or .eml file and no Maildir in this folder")
            for box in boxes:
                yield from _read_one(box)
        elif where.suffix.lower() in MAIL_SUFFIXES or _starts_like_mbox(where):
            yield from _read_one(where)
        else:
            raise InvalidInput(f"{path}: not a mailbox (.mbox, .eml or a Maildir folder)")


def _is_maildir(folder: Path) -> bool:
    return (folder / "cur").is_dir() and (folder / "new").is_dir()


def _starts_like_mbox(file: Path) -> bool:
    try:
        with file.open("rb") as handle:
            return handle.read(5) == b"From "
    except OSError:
        return False


def _mailboxes_under(folder: Path) -> list[Path]:
    found: list[Path] = []
    for current, dirs, files in os.walk(folder):
        here = Path(current)
        dirs.sort()
        if _is_maildir(here):
            found.append(here)
            dirs[:] = [d for d in dirs if d not in ("cur", "new", "tmp")]
        found.extend(
            here / f
            for f in sorted(files)
            if Path(f).suffix.lower() in MAIL_SUFFIXES or _starts_like_mbox(here / f)
        )
    return found


def _read_one(box: Path) -> Iterator[Item]:
    if box.is_dir():
        maildir = mailbox.Maildir(box, factory=None, create=False)
        for key in sorted(maildir.keys()):
            yield from _message(f"{box}:{key}", lambda k=key: maildir.get_bytes(k))
    elif box.suffix.lower() == ".eml" and not _starts_like_mbox(box):
        size = box.stat().st_size
        if size > MAX_FILE_BYTES:  # refused by its size, never read whole
            yield ItemError(str(box), f"is {size} bytes, over the {MAX_FILE_BYTES} limit")
            return
        yield from _message(str(box), box.read_bytes)
    else:
        mbox = mailbox.mbox(box, factory=None, create=False)
        try:
            for number, key in enumerate(mbox.iterkeys(), start=1):
                yield from _message(f"{box}:{number}", lambda k=key: mbox.get_bytes(k))
        finally:
            mbox.close()


def _message(location: str, load: Callable[[], bytes]) -> Iterator[Item]:
    try:
        raw = load()
    except OSError as exc:
        yield ItemError(location, exc.strerror or str(exc))
        return
    if not raw.strip():
        yield ItemError(location, "empty message")
        return
    notices: list[str] = []
    try:
        message = _PARSER.parsebytes(raw)
        document = _document(message, location, notices)
    except MemppError as exc:
        yield ItemError(location, str(exc))
        return
    except Exception as exc:  # the email package raises many kinds on hostile input
        yield ItemError(location, f"unreadable message ({type(exc).__name__}: {exc})")
        return
    for text in notices:
        yield Notice(location, text)
    if document is not None:
        yield document


def _document(message: EmailMessage, location: str, notices: list[str]) -> Document | None:
    if not message.keys():
        raise InvalidInput("no mail headers (From, Date, Subject...) in this message")
    subject = _header(message, "Subject", notices)
    author = _author(message, notices)
    when = _date(message, notices)
    own_id = _first_id(_header(message, "Message-ID", notices))
    root = _first_id(_header(message, "References", notices)) or _first_id(
        _header(message, "In-Reply-To", notices)
    )
    if root or own_id:
        thread = f"mid:{root or own_id}"
    else:
        thread = "subject:" + " ".join(_REPLY_PREFIX.sub("", subject).lower().split())
    body = _body(message, notices)
    attachments = [f"[attachment: {name}]" for name in _attachments(message, notices)]
    parts = [p for p in (subject.strip(), body.strip(), "\n".join(attachments)) if p]
    return Document.create(
        "\n\n".join(parts),
        author=author,
        date=when,
        source=f"mid:{own_id}" if own_id else location,
        thread=thread if thread != "subject:" else None,
        metadata=_metadata(message, own_id, notices),
    )


def _metadata(message: EmailMessage, own_id: str | None, notices: list[str]) -> dict[str, Any]:
    """The addresses (the author is the display name) and the ids of the reply chain."""
    out: dict[str, Any] = {}
    for name in ("From", "To", "Cc"):
        addresses = [
            _header_text(a.addr_spec)
            for a in getattr(message.get(name), "addresses", ())
            if a.addr_spec
        ]
        if addresses:
            out[name.lower()] = addresses[0] if name == "From" else addresses
    if own_id:
        out["message_id"] = own_id
    replied = _first_id(_header(message, "In-Reply-To", notices))
    if replied:
        out["in_reply_to"] = replied
    return out


def _header(message: Message, name: str, notices: list[str]) -> str:
    value = message.get(name)
    if value is None:
        return ""
    text = str(value)
    if _SURROGATES.search(text):  # raw 8-bit bytes the parser could not decode
        raw = text.encode("utf-8", "surrogateescape")
        try:
            text = raw.decode("utf-8")
            notices.append(f"{name} header has raw 8-bit bytes; read as UTF-8")
        except UnicodeDecodeError:
            text = raw.decode("cp1252", "replace")
            notices.append(f"{name} header has raw 8-bit bytes; read as Windows-1252")
    return text


def _author(message: EmailMessage, notices: list[str]) -> str | None:
    header = message.get("From")
    if header is None:
        notices.append("no From header: stored without an author")
        return None
    addresses = getattr(header, "addresses", ())
    if addresses:
        first = addresses[0]
        return _header_text(first.display_name) or _header_text(first.addr_spec) or None
    return _header(message, "From", notices).strip() or None


def _header_text(value: str) -> str:
    if _SURROGATES.search(value):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value.strip()


def _date(message: EmailMessage, notices: list[str]) -> datetime | None:
    header = message.get("Date")
    parsed = getattr(header, "datetime", None) if header is not None else None
    if parsed is not None:
        return parsed
    raw = next((value for name, value in message.raw_items() if name.lower() == "date"), "")
    why = "no Date header" if header is None else f"unreadable Date header {raw.strip()!r}"
    for received in reversed(message.get_all("Received") or []):
        stamp = str(received).rpartition(";")[2].strip()
        try:
            moment = parsedate_to_datetime(stamp)
        except (TypeError, ValueError):
            continue
        notices.append(f"{why}: dated by its first Received header")
        return moment
    notices.append(f"{why}: stored undated, so searches with --as-of will not see it")
    return None


def _first_id(value: str) -> str | None:
    match = _MESSAGE_ID.search(value)
    return match.group(1) if match else None


def _body(message: EmailMessage, notices: list[str]) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    text = _decoded(part, notices)
    if part.get_content_subtype() == "html":
        try:
            from inscriptis import get_text
        except ImportError:
            raise InvalidInput(
                "the message is HTML only: install the import extra "
                "(pip install 'mempp[import]') to read it"
            ) from None
        text = get_text(text)
    return text


def _decoded(part: Message, notices: list[str]) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    declared = part.get_content_charset() or "us-ascii"
    try:
        return payload.decode(declared)
    except LookupError:
        problem = f"unknown charset {declared!r}"
        declared = "cp1252"
    except UnicodeDecodeError:
        problem = f"body is not valid {declared}"
    try:
        text = payload.decode("utf-8")
        notices.append(f"{problem}; read as UTF-8")
    except UnicodeDecodeError:
        text = payload.decode(declared, "replace")
        notices.append(f"{problem}; undecodable bytes replaced with U+FFFD")
    return text


def _attachments(message: EmailMessage, notices: list[str]) -> list[str]:
    names: list[str] = []
    for part in message.iter_attachments():
        name = part.get_filename()
        if name:
            names.append(_header_text(name))
        elif part.get_content_type() == "message/rfc822":
            inner = part.get_payload()
            inner_message = inner[0] if isinstance(inner, list) and inner else None
            subject = _header(inner_message, "Subject", notices) if inner_message else ""
            names.append(f"forwarded message {subject!r}" if subject else "forwarded message")
    return names
