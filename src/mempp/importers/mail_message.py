"""One mail message (RFC 5322 with MIME) read into what a document needs: who wrote it, when,
its ids, its text and the names of its attachments, with a notice for every repair.

Python's ``email`` parser reads the structure (``policy.compat32``: headers stay the strings
they are, an unquoted boundary holding ``=`` is read whole); this module fills in where real
mail breaks the rules the parser relies on:

- header bytes that are not ASCII (RFC 6532 allows UTF-8; older mail has Windows-1252 or
  Latin-1): read from the raw header, as UTF-8 if they are UTF-8, else as Windows-1252, told;
- a display name split over several encoded words: adjacent encoded words are joined without
  the whitespace between them (RFC 2047, section 6.2), and ``addr (Name)`` gives the name;
- a multipart whose boundary, as the parser reads it, does not occur in it (``<<001-...>>``
  is read as ``<001-...>``): the boundary the body uses is found from its delimiter lines
  and the parts are parsed from there;
- a body in ``text/enriched`` (RFC 1896) or HTML is made plain text;
- a Date that cannot be true (see :func:`plausible_problem`) gives way to the Received date.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import policy
from email.header import decode_header, make_header
from email.message import Message
from email.parser import BytesParser
from email.utils import getaddresses, parsedate_to_datetime

from mempp.errors import InvalidInput

# compat32 keeps headers as the strings they are, which this module decodes itself (it must
# read the raw text for 8-bit bytes and adjacent encoded words anyway); policy.default's
# header objects cost two thirds of the parse and read an unquoted boundary holding "=" short.
_PARSER = BytesParser(policy=policy.compat32)
_MESSAGE_ID = re.compile(r"<([^<>\s]+)>")
_SURROGATES = re.compile("[\udc80-\udcff]")
_RAW_NAME = re.compile(r"(?:^|;)\s*(file)?name\s*=\s*(?!\")([^;]+)", re.I)
_BOUNDARY = re.compile(r"boundary\s*=\s*(?:\"([^\"]+)\"|([^;\s]+))", re.I)
_ENRICHED = re.compile(r"<<|<(/?)([A-Za-z0-9-]{1,60})>|\r?\n(?:\r?\n)*|[^<\r\n]+|<")
EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)  # a clock at zero (the epoch), give or take a zone
SLACK = timedelta(days=1)  # how far a Date may run ahead of the last Received header
_BODY_TYPES = ("text/plain", "text/html", "text/enriched", "text/richtext")
_SIGNATURES = frozenset(
    {"application/pgp-signature", "application/pkcs7-signature", "application/x-pkcs7-signature"}
)
MAX_DEPTH = 30  # MIME nesting; hostile mail nests thousands of levels


@dataclass(slots=True)
class Parsed:
    subject: str = ""
    author: str | None = None
    sender: str | None = None  # the From address
    to: list[str] = field(default_factory=list)
    cc: list[str] = field(default_factory=list)
    date: datetime | None = None
    dated_by: str = "Date"  # "Date", "Received" or "none"
    message_id: str | None = None
    references: list[str] = field(default_factory=list)
    in_reply_to: str | None = None
    body: str = ""
    attachments: list[str] = field(default_factory=list)
    signed: bool = False
    encrypted: bool = False
    notices: list[str] = field(default_factory=list)


def parse(raw: bytes, now: datetime | None = None) -> Parsed:
    """The message in ``raw``. Raises ``InvalidInput`` when it has no header at all, or is
    HTML only and the ``import`` extra (inscriptis) is missing."""
    message = _PARSER.parsebytes(raw)
    if not message.keys():
        raise InvalidInput("no mail headers (From, Date, Subject...) in this message")
    out = Parsed()
    notes = out.notices
    out.subject = header_text(message, "Subject", notes)
    addresses = address_list(message, "From", notes)
    if _raw_header(message, "From") is None:
        notes.append("no From header: stored without an author")
    elif addresses:
        name, address = addresses[0]
        out.author = name or address or None
        out.sender = address or None
    else:
        out.author = header_text(message, "From", notes).strip() or None
    out.to = [a for _, a in address_list(message, "To", notes) if a]
    out.cc = [a for _, a in address_list(message, "Cc", notes) if a]
    out.date, out.dated_by = _date(message, notes, now or datetime.now(UTC))
    out.message_id = _first_id(_raw_header(message, "Message-ID") or "")
    out.references = _MESSAGE_ID.findall(_raw_header(message, "References") or "")
    out.in_reply_to = _first_id(_raw_header(message, "In-Reply-To") or "")
    texts: list[str] = []
    _visit(message, texts, out, 0)
    out.body = "\n\n".join(t.strip() for t in texts if t.strip())
    return out


def _raw_header(message: Message, name: str) -> str | None:
    """The header as it stands in the message (8-bit bytes as surrogates), unparsed."""
    wanted = name.lower()
    for key, value in message.raw_items():
        if key.lower() == wanted:
            return str(value)
    return None


def _repaired(value: str, name: str, notes: list[str]) -> str:
    """``value`` with raw 8-bit bytes decoded: UTF-8 (RFC 6532) when they are, else
    Windows-1252, which Latin-1 mail also reads right in all but a few symbols."""
    if not _SURROGATES.search(value):
        return value
    raw = value.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        notes.append(f"{name} header has raw 8-bit bytes that are not UTF-8; read as Windows-1252")
        return raw.decode("cp1252", "replace")


def _words(value: str) -> str:
    """Encoded words decoded; whitespace between two adjacent encoded words dropped."""
    unfolded = " ".join(value.split())
    if "=?" not in unfolded:
        return unfolded
    try:
        return str(make_header(decode_header(unfolded)))
    except (LookupError, UnicodeError, ValueError, AssertionError):
        return unfolded


def header_text(message: Message, name: str, notes: list[str]) -> str:
    """An unstructured header (Subject) as text."""
    raw = _raw_header(message, name)
    if raw is None:
        return ""
    return _words(_repaired(raw, name, notes))


def address_list(message: Message, name: str, notes: list[str]) -> list[tuple[str, str]]:
    """``(display name, address)`` pairs of an address header. Parsed from the raw text, so
    that adjacent encoded words join (the header registry puts spaces between them) and the
    old ``addr (Name)`` form yields its name."""
    raw = _raw_header(message, name)
    if raw is None:
        return []
    text = " ".join(_repaired(raw, name, notes).split())
    pairs = []
    for display, address in getaddresses([text]):
        display = _words(display).strip().strip('"').strip()
        if display or address:
            pairs.append((display, address.strip()))
    return pairs


def _first_id(value: str) -> str | None:
    match = _MESSAGE_ID.search(value)
    return match.group(1) if match else None


def _moment(text: str) -> datetime | None:
    try:
        moment = parsedate_to_datetime(" ".join(text.split()))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)  # "-0000"


def plausible_problem(date: datetime, last_received: datetime | None, now: datetime) -> str | None:
    """Why a Date header cannot be the moment the mail was written, or ``None`` if it can:
    before 1970-01-02 (a clock at zero), more than a day after ``now``, or more than a day
    after the last Received header (a mail is not received before it is written; a day
    allows for wrong zones and slow clocks)."""
    if date < EARLIEST:
        return "is before 1970 (a clock at zero)"
    if date > now + SLACK:
        return "is in the future"
    if last_received is not None and date > last_received + SLACK:
        return f"is more than a day after its last Received header ({last_received.isoformat()})"
    return None


def _date(message: Message, notes: list[str], now: datetime) -> tuple[datetime | None, str]:
    received = []
    for key, value in message.raw_items():
        if key.lower() != "received":
            continue
        moment = _moment(str(value).rpartition(";")[2])
        if moment is not None and EARLIEST <= moment <= now + SLACK:
            received.append(moment)
    # Each hop puts its Received header on top: the last one is the first hop, the sending.
    first_hop = received[-1] if received else None
    raw = _raw_header(message, "Date")
    shown = " ".join(raw.split()) if raw is not None else ""
    if raw is None:
        why = "no Date header"
    else:
        written = _moment(raw)
        if written is None:
            why = f"unreadable Date header {shown!r}"
        else:
            problem = plausible_problem(written, max(received, default=None), now)
            if problem is None:
                return written, "Date"
            why = f"Date header {shown!r} {problem}"
    if first_hop is not None:
        notes.append(f"{why}: dated by its first Received header")
        return first_hop, "Received"
    notes.append(f"{why}: stored undated, so searches with --as-of will not see it")
    return None, "none"


def _visit(part: Message, texts: list[str], out: Parsed, depth: int) -> None:
    """Collect the body texts and attachment names of ``part`` and what it holds."""
    if depth > MAX_DEPTH:
        out.notices.append(f"MIME parts nested deeper than {MAX_DEPTH}: the rest not read")
        return
    kind = part.get_content_type()
    if part.get_content_maintype() == "multipart":
        if kind == "multipart/signed":
            out.signed = True
        if kind == "multipart/encrypted":  # PGP/MIME: no key here to read it with
            out.encrypted = True
            out.notices.append("the body is encrypted: only its headers are read")
            return
        children = _children(part, out.notices)
        if children is None:  # no part delimiter in it at all: its words are the body
            texts.append(_decoded(part, out.notices, "text/plain"))
            return
        if kind == "multipart/alternative":
            chosen = _alternative(children)
            for child in children:
                if child is chosen:
                    _visit(child, texts, out, depth + 1)
                elif child.get_content_maintype() == "multipart":
                    _visit(child, [], out, depth + 1)  # its attachments, not its words
            return
        for child in children:
            _visit(child, texts, out, depth + 1)
        return
    if kind in ("message/rfc822", "message/global"):
        out.attachments.append(_forwarded(part, out.notices))
        return
    name = filename(part, out.notices)
    try:
        disposition = part.get_content_disposition()
    except Exception:
        disposition = None
    if kind in _BODY_TYPES and disposition != "attachment" and not name:
        texts.append(_text(part, out.notices))
    elif kind in _SIGNATURES:
        out.signed = True  # a signature is no content of its own
    else:
        out.attachments.append(name or f"unnamed {kind}")


def _alternative(children: list[Message]) -> Message | None:
    """The alternative to read: plain text, else HTML, else enriched, else the first."""
    for wanted in _BODY_TYPES:
        for child in children:
            if child.get_content_type() == wanted:
                return child
    for child in children:  # e.g. multipart/related holding the HTML
        if child.get_content_maintype() == "multipart":
            return child
    return children[0] if children else None


def _children(part: Message, notes: list[str]) -> list[Message] | None:
    """The parts of a multipart; when the parser found none because the declared boundary
    is not the one the body uses, the parts found by the body's own delimiter lines."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [p for p in payload if isinstance(p, Message)]
    if not isinstance(payload, str):
        return None
    lines = payload.splitlines()
    delimiter = _delimiter(part, lines)
    if delimiter is None:
        notes.append("a multipart without any part delimiter: its body read as plain text")
        return None
    chunks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines:
        stripped = line.rstrip()
        if stripped == delimiter + "--":
            break
        if stripped == delimiter:
            current = []
            chunks.append(current)
        elif current is not None:
            current.append(line)
    notes.append(
        f"multipart boundary {part.get_boundary()!r} (as the parser reads it) is not the one "
        f"its body uses: parts read by {delimiter[2:]!r}"
    )
    return [
        _PARSER.parsebytes("\n".join(chunk).encode("utf-8", "surrogateescape")) for chunk in chunks
    ]


def _delimiter(part: Message, lines: list[str]) -> str | None:
    """``--boundary`` as it stands in ``lines``: the declared one as written in the raw
    header, else the first ``--X`` line that is closed later by ``--X--``."""
    present = {line.rstrip() for line in lines if line.startswith("--")}
    raw = _raw_header(part, "Content-Type") or ""
    match = _BOUNDARY.search(" ".join(raw.split()))
    candidates = [match.group(1) or match.group(2)] if match else []
    declared = part.get_param("boundary")
    if isinstance(declared, str):
        candidates.append(declared)
    for candidate in candidates:
        if "--" + candidate in present:
            return "--" + candidate
    for line in lines:
        stripped = line.rstrip()
        if stripped.startswith("--") and len(stripped) > 2 and stripped + "--" in present:
            return stripped
    return None


def filename(part: Message, notes: list[str]) -> str | None:
    """A part's file name: RFC 2231 and quoted encoded words by the parser; an unquoted name
    holding spaces or an encoded word, raw 8-bit bytes, or only a Content-Location, here."""
    try:
        name = part.get_filename()
    except Exception:
        name = None
    for header in ("Content-Disposition", "Content-Type"):
        raw = _raw_header(part, header)
        match = _RAW_NAME.search(" ".join(raw.split())) if raw else None
        if match is not None:
            whole = match.group(2).strip()
            if not name or (whole.startswith(name) and len(whole) > len(name)):
                name = whole  # the parser stops an unquoted value at a space or "="
            break
    if not name:
        location = _raw_header(part, "Content-Location")
        name = location.strip().rsplit("/", 1)[-1] if location else None
    if not name:
        return None
    name = _repaired(name, "file name", notes)
    return _words(name).strip() or None


def _forwarded(part: Message, notes: list[str]) -> str:
    """A line naming an attached message: its file name, subject and sender."""
    name = filename(part, notes)
    payload = part.get_payload()
    inner = payload[0] if isinstance(payload, list) and payload else None
    described = []
    if isinstance(inner, Message):
        subject = header_text(inner, "Subject", [])
        sender = address_list(inner, "From", [])
        if subject:
            described.append(f"{subject!r}")
        if sender:
            described.append("from " + (sender[0][0] or sender[0][1]))
    what = "message " + " ".join(described) if described else "message"
    return f"{name} ({what})" if name else f"forwarded {what}"


def _text(part: Message, notes: list[str]) -> str:
    kind = part.get_content_type()
    text = _decoded(part, notes, kind)
    if kind == "text/html":
        try:
            from inscriptis import get_text
        except ImportError:
            raise InvalidInput(
                "the message is HTML only: install the import extra "
                "(pip install 'mempp[import]') to read it"
            ) from None
        return str(get_text(text))
    if kind in ("text/enriched", "text/richtext"):
        return enriched_text(text)
    return text


def _decoded(part: Message, notes: list[str], kind: str) -> str:
    try:
        payload = part.get_payload(decode=True)
    except Exception:  # a broken transfer encoding: the bytes as they are
        payload = None
    if payload is None:
        raw = part.get_payload()
        payload = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else b""
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
        notes.append(f"{problem}; read as UTF-8")
    except UnicodeDecodeError:
        text = payload.decode(declared, "replace")
        notes.append(f"{problem}; undecodable bytes replaced with U+FFFD")
    return text


def enriched_text(text: str) -> str:
    """RFC 1896 ``text/enriched`` as plain text: formatting commands dropped, ``<<`` read as
    ``<``, ``<param>`` contents left out, and outside ``<nofill>`` a run of n line breaks
    read as n-1 (a single one is a space)."""
    out: list[str] = []
    nofill = 0
    in_param = 0
    for match in _ENRICHED.finditer(text):
        token = match.group(0)
        if match.group(2) is not None:
            name = match.group(2).lower()
            closing = match.group(1) == "/"
            if name == "param":
                in_param += -1 if closing else 1
                in_param = max(in_param, 0)
            elif name == "nofill":
                nofill = max(nofill + (-1 if closing else 1), 0)
            continue
        if in_param:
            continue
        if token == "<<":
            out.append("<")
        elif token[0] in "\r\n":
            breaks = token.count("\n")
            out.append("\n" * breaks if nofill else ("\n" * (breaks - 1) if breaks > 1 else " "))
        else:
            out.append(token)
    return "".join(out)
