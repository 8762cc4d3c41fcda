"""RTF (.rtf): text by striprtf (destinations such as font tables and ``{\\info}`` left out,
``\\'xx`` escapes decoded with the document's ``\\ansicpg`` code page), author and dates from
the ``{\\info}`` group: ``\\author`` (else ``\\operator``, the last to edit), ``\\revtim``
(revised) as the date, ``\\creatim`` kept.

RTF dates have no zone; they are the writer's local time and are stored as written, with a
note that the zone is unknown.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from mempp.importers.documents.common import Extracted, Unreadable, clean, need

_CODEPAGE = re.compile(rb"\\ansicpg(\d+)")
_TIME = re.compile(rb"\{\\(creatim|revtim)((?:\\(?:yr|mo|dy|hr|min|sec)\d+\s*)+)\}")
_PART = re.compile(rb"\\(yr|mo|dy|hr|min|sec)(\d+)")
_FIELD = rb"\{\\%s\s+((?:[^{}\\]|\\[^{}]|\\[{}])*)\}"
ZONE_NOTE = "local time of the writer (RTF writes no zone); zone unknown"


def extract(path: Path, max_chars: int) -> Extracted:
    data = path.read_bytes()
    if not data.lstrip().startswith(b"{\\rtf"):
        raise Unreadable("not an RTF file (it does not start with {\\rtf)")
    striprtf = need("striprtf.striprtf", "striprtf")
    match = _CODEPAGE.search(data[:2048])
    codepage = f"cp{match.group(1).decode()}" if match else "cp1252"
    try:
        "".encode(codepage)
    except LookupError:
        codepage = "cp1252"
    try:
        # RTF is 7-bit text; 8-bit bytes a writer left raw are read as the code page's.
        text = striprtf.rtf_to_text(
            data.decode(codepage, "replace"), encoding=codepage, errors="replace"
        )
    except (ValueError, IndexError, RecursionError) as exc:
        raise Unreadable(f"striprtf cannot read it ({exc})") from None
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    if len(text) > max_chars:
        raise Unreadable(f"its text passes {max_chars:,} characters; split it to import it")
    extracted = Extracted(text=text)
    _info(data, codepage, extracted, striprtf)
    return extracted


def _info(data: bytes, codepage: str, extracted: Extracted, striprtf: object) -> None:
    start = data.find(b"{\\info")
    if start < 0:
        return
    group = data[start : start + 65536]

    def field(name: bytes) -> str | None:
        found = re.search(_FIELD % name, group)
        if found is None:
            return None
        raw = b"{\\rtf1 " + found.group(1) + b"}"
        return clean(striprtf.rtf_to_text(raw.decode(codepage, "replace"), encoding=codepage))  # type: ignore[attr-defined]

    author, operator = field(rb"author"), field(rb"operator")
    if author:
        extracted.author, extracted.author_from = author, "rtf info author"
    elif operator:
        extracted.author, extracted.author_from = operator, "rtf info operator"
    if operator:
        extracted.meta["last_modified_by"] = operator
    extracted.title = field(rb"title")
    for kind, parts in _TIME.findall(group):
        moment = _moment(parts)
        if moment is None:
            continue
        if kind == b"revtim":
            extracted.modified, extracted.modified_from = moment, "rtf info revtim"
        else:
            extracted.created, extracted.created_from = moment, "rtf info creatim"
        extracted.meta["date_zone"] = ZONE_NOTE


def _moment(parts: bytes) -> datetime | None:
    values = {key.decode(): int(value) for key, value in _PART.findall(parts)}
    try:
        return datetime(
            values.get("yr", 0),
            values.get("mo", 1),
            values.get("dy", 1),
            values.get("hr", 0),
            values.get("min", 0),
            values.get("sec", 0),
        )
    except ValueError:
        return None
