"""The validation boundary: untrusted values in, typed values out, or ``InvalidInput``.

Every public entry point (``Memory``, the CLI, file ingest, and the server and importers built
on them) passes what a caller hands it through these functions once, at the edge; code behind
them trusts the types. Each error names the field at fault (``tags[2]``, ``items[3].author``,
``notes.jsonl:12: date``), so a caller can fix the one value.

Limits (documented in README "Input limits"):

* ``author``, ``thread`` and each tag: at most ``MAX_LABEL_BYTES`` bytes of UTF-8, and a scope
  at most ``MAX_SCOPE_BYTES``. Both engines index these values (PostgreSQL's btree refuses an
  index row past 2,704 bytes), so the bound keeps what one engine stores storable in the other.
* a query: at most ``MAX_QUERY_CHARS`` characters and ``MAX_QUERY_WORDS`` words. Each word is
  a lexical term and the seed of tag n-grams; an unbounded query costs time and memory in
  proportion to its words and the postings they touch (300k words: 73 s, 3 GB).
* ``k`` at most ``MAX_K``; a read page at most ``MAX_PAGE``; record ids within SQL's 64-bit
  integers.

Text may hold any Unicode except NUL and lone surrogates (halves of UTF-16 pairs, which is
what Python makes of bytes that are not UTF-8): no engine can store those as text.

A label (author, thread, each tag; a mail's subject is its thread) is one line of plain text:
no control character (C0, DEL, C1: line breaks and tabs included), no Unicode line or
paragraph separator, no bidirectional override. Evidence shows labels in the header line
mempp writes above each record, so a label that could break that line could forge an entry
(see :mod:`mempp.search.evidence`). Every door refuses such a label; an importer reads its
source inside :func:`flattening_labels`, where each run of them becomes one space and the
field is noted, so the import says so (a warning per item) instead of losing the item.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from mempp.errors import InvalidInput

MAX_LABEL_BYTES = 1000
MAX_SCOPE_BYTES = 256
MAX_QUERY_CHARS = 10_000
MAX_QUERY_WORDS = 1_000
MAX_K = 10_000
MAX_PAGE = 100_000
MAX_ID = 2**63 - 1

# Half of a UTF-16 pair on its own (from a bad decode): no database can store it as text.
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_QUERY_WORD = re.compile(r"[^\W_]+")
# What may not sit in a one-line label: C0 and C1 controls, DEL, the Unicode line and
# paragraph separators, and the bidirectional embeddings, overrides and isolates.
_LABEL_BREAK = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
# Set by flattening_labels(): the fields whose label was flattened, instead of refusing.
_FLATTENED: ContextVar[list[str] | None] = ContextVar("mempp_flattened_labels", default=None)
# int -> str is quadratic and Python refuses past 4,300 digits; a label is far shorter.
_MAX_LABEL_INT_BITS = MAX_LABEL_BYTES * 4


def _type_name(value: object) -> str:
    return "None" if value is None else type(value).__name__


def shown(value: object) -> str:
    """A short, safe rendering of a value for an error message (the repr of a huge integer
    fails, and that of a huge list is huge)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
    if is_int(value) and value.bit_length() > 64:  # type: ignore[union-attr]
        return f"an integer of {value.bit_length()} bits"  # type: ignore[union-attr]
    if value is None or isinstance(value, int | float):
        return repr(value)
    return f"a value of type {type(value).__name__}"


def is_int(value: object) -> bool:
    """An integer, and not a bool (``True`` is an ``int`` to Python, not to a caller)."""
    return isinstance(value, int) and not isinstance(value, bool)


def clean_text(value: object, field: str) -> str:
    """A string a database can store: no NUL, no lone surrogate."""
    if not isinstance(value, str):
        raise InvalidInput(f"must be a string, got {_type_name(value)}", field=field)
    if "\x00" in value:
        raise InvalidInput("contains a NUL character", field=field)
    if _SURROGATE.search(value):
        raise InvalidInput("contains a lone surrogate (text that was not valid UTF-8)", field=field)
    return value


def label(value: object, field: str, *, numbers_as_text: bool = False) -> str | None:
    """An author, thread or source: ``None``, or stripped text (``None`` when blank).

    ``numbers_as_text`` (file formats, where ``thread: 42`` is an integer to YAML and JSON)
    takes an integer as its decimal text; a float is refused rather than rounded.
    """
    if value is None:
        return None
    if numbers_as_text and is_int(value):
        if value.bit_length() > _MAX_LABEL_INT_BITS:  # type: ignore[union-attr]
            raise InvalidInput(f"is longer than {MAX_LABEL_BYTES} bytes", field=field)
        value = str(value)
    text = clean_text(value, field)
    if _LABEL_BREAK.search(text):
        flattened = _FLATTENED.get()
        if flattened is None:
            raise InvalidInput(
                "contains a control character (a line break, a tab, a bidirectional "
                "override): a label is one line of text",
                field=field,
            )
        text = _LABEL_BREAK.sub(" ", text)
        flattened.append(field)
    text = text.strip()
    if len(text.encode("utf-8")) > MAX_LABEL_BYTES:
        raise InvalidInput(f"is longer than {MAX_LABEL_BYTES} bytes", field=field)
    return text or None


@contextmanager
def flattening_labels() -> Iterator[list[str]]:
    """Within the block, a label with control characters has each run of them replaced by
    one space instead of being refused; the yielded list collects the fields flattened.
    For importers, whose sources (a mail's folded Subject, a chat name) are not the caller's
    to fix; every other door refuses."""
    found: list[str] = []
    token = _FLATTENED.set(found)
    try:
        yield found
    finally:
        _FLATTENED.reset(token)


def source(value: object, field: str = "source", *, numbers_as_text: bool = False) -> str | None:
    """Where a document came from: free text of any length (it is not indexed)."""
    if value is None:
        return None
    if numbers_as_text and is_int(value):
        value = label(value, field, numbers_as_text=True)
    return clean_text(value, field) or None


def tags(value: object, field: str = "tags") -> tuple[str, ...]:
    """Tags: a list of strings, or one string as one tag; stripped, blank and repeated ones
    dropped (case is kept; the tag index compares them normalised)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise InvalidInput(
            f"must be a list of strings (or one string), got {_type_name(value)}", field=field
        )
    clean: list[str] = []
    for position, tag in enumerate(value):
        where = f"{field}[{position}]"
        text = label(clean_text(tag, where), where)
        if text is not None and text not in clean:
            clean.append(text)
    return tuple(clean)


def scope(value: object, field: str = "scope") -> str:
    text = clean_text(value, field)
    if not text.strip():
        raise InvalidInput("must not be empty", field=field)
    if len(text.encode("utf-8")) > MAX_SCOPE_BYTES:
        raise InvalidInput(f"is longer than {MAX_SCOPE_BYTES} bytes", field=field)
    return text


def location(value: object, field: str = "location") -> str:
    """A SQLite path or a PostgreSQL URL, as text a database driver can take."""
    if not isinstance(value, str | os.PathLike):
        raise InvalidInput(f"must be a path or a URL, got {_type_name(value)}", field=field)
    text = os.fspath(value)
    if not isinstance(text, str):
        raise InvalidInput("must be a text path, not bytes", field=field)
    text = clean_text(text, field)
    if not text.strip():
        raise InvalidInput("must not be empty", field=field)
    return text


def query(value: object, field: str = "query") -> str:
    """A question: text within the query limits. NUL and lone surrogates become spaces (a
    search for them finds nothing anyway); an empty query is refused."""
    if not isinstance(value, str):
        raise InvalidInput(f"must be a string, got {_type_name(value)}", field=field)
    if len(value) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"is {len(value)} characters long; the limit is {MAX_QUERY_CHARS}", field=field
        )
    cleaned = _UNSTORABLE.sub(" ", value).strip()
    if not cleaned:
        raise InvalidInput("is empty", field=field)
    words = sum(1 for _ in _QUERY_WORD.finditer(cleaned))
    if words > MAX_QUERY_WORDS:
        raise InvalidInput(f"has {words} words; the limit is {MAX_QUERY_WORDS}", field=field)
    return cleaned


def count(value: object, field: str, *, maximum: int | None = None) -> int:
    """A positive integer (k, a budget, a batch or page size), at most ``maximum``."""
    if not is_int(value) or value < 1:  # type: ignore[operator]
        raise InvalidInput(f"must be an integer >= 1, got {shown(value)}", field=field)
    if maximum is not None and value > maximum:  # type: ignore[operator]
        raise InvalidInput(f"must be at most {maximum}, got {shown(value)}", field=field)
    return value  # type: ignore[return-value]


def record_id(value: object, field: str = "id") -> int:
    if not is_int(value):
        raise InvalidInput(f"record ids are integers, got {shown(value)}", field=field)
    if not 1 <= value <= MAX_ID:  # type: ignore[operator]
        raise InvalidInput(f"record ids run from 1 to {MAX_ID}, got {shown(value)}", field=field)
    return value  # type: ignore[return-value]


def decode_utf8(data: bytes, field: str) -> str:
    """Bytes from stdin or a file as text, or an error naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"is not UTF-8 text (byte {exc.start}: {exc.reason})", field=field
        ) from None
