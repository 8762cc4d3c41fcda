"""Evidence for the answering model: rows in rank order, each headed by date, author and id.

The header lets a model compare versions of a fact by when they were written and who wrote
them, and cite the record id. ``style="paper"`` reproduces the authors' harness instead:
``"{i}. {text}"`` with no header, for runs where date and speaker lead the stored text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mempp.errors import InvalidInput
from mempp.records import Hit

EvidenceStyle = Literal["headers", "paper"]
TRUNCATION_MARK = " [...]"
SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """Where one record's entry sits in the rendered block."""

    id: int
    offset: int
    length: int
    truncated: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "offset": self.offset,
            "length": self.length,
            "truncated": self.truncated,
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

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"text": self.text, "rows": [row.to_dict() for row in self.rows]}
        if self.facts:  # only when a graph was asked for and found something
            out["facts"] = [fact.to_dict() for fact in self.facts]
        return out


def header(hit: Hit, position: int) -> str:
    record = hit.record
    parts = [record.date or "undated"]
    if record.author:
        parts.append(record.author)
    parts.append(f"record {record.id}")
    return f"[{position}] " + " | ".join(parts)


def render_entry(hit: Hit, position: int, style: EvidenceStyle) -> tuple[str, str]:
    """The entry as (head, body); the body is what a budget may cut."""
    if style == "paper":
        return f"{position}. ", hit.record.text
    return header(hit, position) + "\n", hit.record.text


def render_evidence(
    hits: Sequence[Hit], *, budget: int | None = None, style: EvidenceStyle = "headers"
) -> Evidence:
    """Render hits in order. With ``budget``, the block never exceeds that many characters:
    the entry that crosses it is cut (ending with ``[...]``) and no later entry is shown."""
    if style not in ("headers", "paper"):
        raise InvalidInput(f"unknown evidence style {style!r} (choose headers or paper)")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise InvalidInput(f"budget must be a positive number of characters, got {budget!r}")
    pieces: list[str] = []
    rows: list[EvidenceRow] = []
    used = 0
    for position, hit in enumerate(hits, start=1):
        sep = SEPARATOR if pieces else ""
        head, body = render_entry(hit, position, style)
        entry = head + body
        room = None if budget is None else budget - used - len(sep)
        if room is not None and len(entry) > room:
            keep = room - len(head) - len(TRUNCATION_MARK)
            if keep > 0:
                entry = head + body[:keep].rstrip() + TRUNCATION_MARK
                pieces.append(sep + entry)
                rows.append(EvidenceRow(hit.id, used + len(sep), len(entry), True))
            break
        pieces.append(sep + entry)
        rows.append(EvidenceRow(hit.id, used + len(sep), len(entry), False))
        used += len(sep) + len(entry)
    return Evidence("".join(pieces), rows)


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
    used = len(evidence.text)
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
    return Evidence(evidence.text + prefix + "".join(lines), evidence.rows, tuple(kept))
