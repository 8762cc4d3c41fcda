"""Evidence for the answering model: rows in rank order, each headed by date, author and id.

The header lets a model compare versions of a fact by when they were written and who wrote
them, see which rows belong to one conversation (thread), and cite the record id.
``style="paper"`` reproduces the authors' harness instead: ``"{i}. {text}"`` with no header,
for runs where date and speaker lead the stored text.

Optional packing (``packing=PackingOptions(), query=...``, see :mod:`mempp.search.packing`) shows a
long record as query-focused excerpts, under a marker line naming the record, so that more
records fit a window; without it every record is shown whole.

Only mempp writes a header. A record cannot forge one: its labels (author, thread) hold no
control characters (:mod:`mempp.validate` refuses them, importers flatten them; a row stored
before that rule has them shown as spaces) and a ``|`` in a label is shown as ``¦``, so a
label never adds a line or a field; and a line of a record's text that would read as an
entry header or an excerpt marker (``[3] ...``, ``[excerpt: ...`` at the start of a line,
after any character a model may count as a line break) gets a backslash before its bracket.
Escaping was chosen over a random boundary around each entry because it changes nothing
else: a record without such a line (every record of the benchmarks) renders byte for byte
as before, so budgets, windows and recall stay the same, while a boundary would lengthen
every entry of every block and still leave the model to compare random strings.

A character budget is spent on the records' text and the headers that name them. The
correction notes a header may end with (`` | superseded by record N (DATE)``, `` | archived
(DATE)``, shown only when the question can see the change, ``mempp.search.corrections``) are
not counted against it, up to ``note_allowance(budget)`` characters in all (a fiftieth of the
budget: 800 of 40,000, 160 of 8,000); notes past that allowance count like any other
character. So telling the model a record was corrected never pushes evidence out of the
window, and a block is never longer than ``budget + note_allowance(budget)``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mempp.errors import InvalidInput
from mempp.records import Hit
from mempp.search.packing import Excerpt, PackingOptions, pack, whole

EvidenceStyle = Literal["headers", "paper"]
TRUNCATION_MARK = " [...]"
SEPARATOR = "\n\n"
ESCAPE = "\\"
# A line start (the text's start, or after any character a reader may take for a line break),
# blanks, then what opens a header ("[12]") or an excerpt marker ("[excerpt:").
_HEADER_LIKE = re.compile(
    r"(?:^|(?<=[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]))[ \t]*(?=\[(?:\d+\]|excerpt:))"
)
_LABEL_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# Correction notes are free of a budget up to budget // NOTE_ALLOWANCE_SHARE characters.
NOTE_ALLOWANCE_SHARE = 50


def note_allowance(budget: int) -> int:
    """How many characters of correction notes a block of ``budget`` characters does not
    count (see the module's docstring)."""
    return budget // NOTE_ALLOWANCE_SHARE


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """Where one record's entry sits in the rendered block.

    ``excerpt``: the entry shows passages of the record, not its whole text (packing).
    ``shown``: how many characters of the record's text the entry holds (all of them for a
    whole entry; fewer for an excerpt or an entry a budget cut). ``spans`` place that text:
    ``(offset in the entry, offset in the record, length)`` per contiguous piece. ``note``:
    the length of the correction note that ends its header (0 without one).
    """

    id: int
    offset: int
    length: int
    truncated: bool
    excerpt: bool = False
    shown: int | None = None
    spans: tuple[tuple[int, int, int], ...] = ()
    note: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "offset": self.offset,
            "length": self.length,
            "truncated": self.truncated,
            "excerpt": self.excerpt,
            "shown": self.shown,
        }


@dataclass(frozen=True, slots=True)
class RelatedFact:
    """An entity-graph triple shown after the rows (Mem^g++). ``record_id`` and ``date`` name
    its source row; both are None in the paper's undated mode, where triples carry neither."""

    subject: str
    relation: str
    object: str
    record_id: int | None = None
    date: str | None = None

    def render(self) -> str:
        line = f"- {self.subject} | {self.relation} | {self.object}"
        if self.record_id is None:
            return line
        return f"{line} ({self.date[:10] if self.date else 'undated'}, record {self.record_id})"

    def to_dict(self) -> dict[str, object]:
        return {
            "subject": self.subject,
            "relation": self.relation,
            "object": self.object,
            "record_id": self.record_id,
            "date": self.date[:10] if self.date else None,
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    text: str
    rows: list[EvidenceRow]
    facts: tuple[RelatedFact, ...] = ()  # graph triples rendered after the rows, if any
    # Characters of ``text`` a budget counted (correction notes within their allowance are
    # not); None: all of them.
    counted: int | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"text": self.text, "rows": [row.to_dict() for row in self.rows]}
        if self.facts:  # only when a graph was asked for and found something
            out["facts"] = [fact.to_dict() for fact in self.facts]
        return out


def header(hit: Hit, position: int) -> str:
    """``[i] date | author | thread T | record N`` (author and thread when the record has
    them): the thread tells the model which rows belong to one conversation. A correction
    the question can see ends it: ``| superseded by record M (DATE)`` or ``| archived (DATE)``
    (mempp.search.corrections decides which)."""
    record = hit.record
    parts = [record.date or "undated"]
    if record.author:
        parts.append(shown_label(record.author))
    if record.thread:
        parts.append(f"thread {shown_label(record.thread)}")
    parts.append(f"record {record.id}")
    return f"[{position}] " + " | ".join(parts) + correction_note(hit)


def correction_note(hit: Hit) -> str:
    """What ends the header of a corrected record: `` | superseded by record M (DATE)``
    and/or `` | archived (DATE)``, or "" (the budget counts it apart, ``note_allowance``)."""
    notes = []
    if hit.superseded_on is not None and hit.record.superseded_by is not None:
        notes.append(f"superseded by record {hit.record.superseded_by} ({hit.superseded_on})")
    if hit.archived_on is not None:
        notes.append(f"archived ({hit.archived_on})")
    return "".join(" | " + note for note in notes)


def shown_label(value: str) -> str:
    """A label as a header shows it: on one line, with no field separator of its own."""
    return _LABEL_BREAKS.sub(" ", value).replace("|", "\u00a6")


def escape_body(
    body: str, spans: tuple[tuple[int, int, int], ...] = ()
) -> tuple[str, tuple[tuple[int, int, int], ...]]:
    """``body`` with every line that would read as a header or a marker escaped (``\\[``),
    and ``spans`` (body offset, record offset, length) moved to match. Unchanged, and the
    same objects, when there is no such line."""
    cuts = [match.end() for match in _HEADER_LIKE.finditer(body)]
    if not cuts:
        return body, spans
    pieces, start = [], 0
    for at in cuts:
        pieces += [body[start:at], ESCAPE]
        start = at
    pieces.append(body[start:])
    moved: list[tuple[int, int, int]] = []
    for inside, source, length in spans:
        # Split the span at each escape inside it; each part moves by the escapes before it.
        edges = [inside] + [at for at in cuts if inside < at < inside + length] + [inside + length]
        for begin, end in itertools.pairwise(edges):
            before = sum(1 for at in cuts if at <= begin)
            moved.append((begin + before * len(ESCAPE), source + begin - inside, end - begin))
    return "".join(pieces), tuple(moved)


def render_entry(
    hit: Hit,
    position: int,
    style: EvidenceStyle,
    shown: Excerpt | None = None,
    *,
    escaped: bool = True,
) -> tuple[str, str]:
    """The entry as (head, body); the body is what a budget may cut. ``shown`` is what packing
    chose to show of the record (whole when ``None``); an excerpt's marker line ends the head.
    In the headers style the body's header-like lines are escaped (``escaped=False`` leaves
    that to the caller, which moves the body's spans with it)."""
    head = f"{position}. " if style == "paper" else header(hit, position) + "\n"
    body = hit.record.text if shown is None else shown.body
    if shown is not None and shown.marker is not None:
        head += shown.marker + "\n"
    if escaped and style == "headers":
        body = escape_body(body)[0]
    return head, body


def _cut(
    spans: tuple[tuple[int, int, int], ...], at: int, shift: int
) -> tuple[tuple[int, int, int], ...]:
    """Body spans kept by a cut at body offset ``at``, moved ``shift`` characters (the head)."""
    kept = []
    for body_offset, record_offset, length in spans:
        length = min(length, at - body_offset)
        if length > 0:
            kept.append((body_offset + shift, record_offset, length))
    return tuple(kept)


def render_evidence(
    hits: Sequence[Hit],
    *,
    budget: int | None = None,
    style: EvidenceStyle = "headers",
    packing: PackingOptions | None = None,
    query: str | None = None,
) -> Evidence:
    """Render hits in order. With ``budget``, the block holds at most that many characters
    besides correction notes (which it does not count up to ``note_allowance(budget)``): the
    entry that crosses it is cut (ending with ``[...]``) and no later entry is shown.

    With ``packing``, records longer than its threshold are shown as excerpts chosen for
    ``query`` (the question's text, required then; see :mod:`mempp.search.packing`); without it the
    output is the same as it has always been.
    """
    if style not in ("headers", "paper"):
        raise InvalidInput(f"unknown evidence style {style!r} (choose headers or paper)")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise InvalidInput(f"budget must be a positive number of characters, got {budget!r}")
    if packing is not None and not isinstance(packing, PackingOptions):
        raise InvalidInput(f"packing must be PackingOptions or None, got {packing!r}")
    if packing is not None and not isinstance(query, str):
        raise InvalidInput("packing chooses passages for a query: pass query= (the question text)")
    if packing is None:
        shown: list[Excerpt | None] = [None] * len(hits)
    else:
        assert query is not None
        shown = list(pack([(hit.id, hit.record.text) for hit in hits], query, packing))
    pieces: list[str] = []
    rows: list[EvidenceRow] = []
    at = used = 0  # characters written; of them, characters the budget counts
    free = 0 if budget is None else note_allowance(budget)  # note characters still uncounted
    for position, (hit, part) in enumerate(zip(hits, shown, strict=True), start=1):
        sep = SEPARATOR if pieces else ""
        head, body = render_entry(hit, position, style, part, escaped=False)
        note = len(correction_note(hit)) if style == "headers" else 0
        uncounted = min(note, free)
        spans = (part or whole(hit.record.text)).spans
        if style == "headers":
            body, spans = escape_body(body, spans)
        entry = head + body
        excerpt = part is not None and part.excerpt
        room = None if budget is None else budget - used - len(sep)
        cut = room is not None and len(entry) - uncounted > room
        if cut:
            assert room is not None
            keep = room - (len(head) - uncounted) - len(TRUNCATION_MARK)
            if keep <= 0:
                break
            body = body[:keep].rstrip()
            entry = head + body + TRUNCATION_MARK
        spans = _cut(spans, len(body), len(head))
        shown_chars = sum(length for _, _, length in spans)
        pieces.append(sep + entry)
        rows.append(
            EvidenceRow(hit.id, at + len(sep), len(entry), cut, excerpt, shown_chars, spans, note)
        )
        at += len(sep) + len(entry)
        used += len(sep) + len(entry) - uncounted
        free -= uncounted
        if cut:
            break
    return Evidence("".join(pieces), rows, counted=used)


FACTS_HEADING = "Related facts (entity graph):"


def append_facts(
    evidence: Evidence, facts: Sequence[RelatedFact], *, budget: int | None = None
) -> Evidence:
    """The evidence with a "Related facts" section after its rows.

    Facts come after every row, as in the paper. Under a ``budget`` only whole fact lines that
    still fit are added (none if the heading and first line do not), so a budget the rows use
    up leaves no facts, like the paper's answer window.
    """
    lines: list[str] = []
    used = len(evidence.text) if evidence.counted is None else evidence.counted
    prefix = (SEPARATOR if evidence.text else "") + FACTS_HEADING
    kept: list[RelatedFact] = []
    for fact in facts:
        line = "\n" + fact.render()
        extra = len(line) + (0 if lines else len(prefix))
        if budget is not None and used + extra > budget:
            break
        lines.append(line)
        kept.append(fact)
        used += extra
    if not kept:
        return evidence
    return Evidence(evidence.text + prefix + "".join(lines), evidence.rows, tuple(kept), used)
