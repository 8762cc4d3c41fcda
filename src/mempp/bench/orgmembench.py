"""OrgMemBench (Helix, medium tier) loader, following the official harness's normalisation.

* Items: one per ``corpus_index.jsonl`` row, in that order (the harness's ingest order); a row
  whose file is missing is skipped (as the harness does) and counted.
* Text: the file with its leading HTML comment (``<!-- artefact_metadata ... -->``) removed,
  then stripped. That header holds genre, role, author id and testimony type: metadata the
  harness never hands to a memory system.
* Date: the row's event ``occurred_at`` (first 10 characters) from
  ``source_of_truth/events.jsonl``; without an event, the first date in the first 300
  characters of the raw file: ``YYYY-MM-DD``, else ``YYYY-Qn`` (first month of the quarter),
  else ``YYYY-MM`` (first of the month).
* Author: none by default, like the harness on this tier (its index rows carry no author).
  ``author_from_header=True`` takes the header's persona id through ``personas.jsonl`` to a
  display name instead; the report says which was used.
* Questions: ``benchmark_v0.0.jsonl``. The as-of date is looked up as the harness does
  (question ``metadata.as_of``, ``metadata.as_of_date``, then ``ground_truth_answer.as_of_date``,
  ``ground_truth_answer.as_of``); on medium only the 15 C4 (audit replay) questions have one.
  Gold = ``evidence_artefact_ids`` (or ``evidence_artifact_ids``).
* The slot id is kept in ``Item.id`` and stored as the record's ``source``, never as a tag.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mempp.bench.datasets import (
    Benchmark,
    DataInvalid,
    Item,
    JsonlReport,
    Question,
    read_jsonl,
    require,
    sha256_file,
)

ORIGIN = "OrgMemBench, github.com/PandelisZ/OrgMemBench, datasets/helix/medium"
TIER = Path("orgmembench") / "helix" / "medium"
SCOPE = "helix-medium"
HEAD_CHARS = 300  # how much of the raw file the fallback date search reads

CATEGORIES = {
    "C1": "supersession",
    "C2": "decision provenance",
    "C3": "bi-temporal",
    "C4": "audit replay",
    "C5": "justification chain",
    "C6": "contradiction",
}

_LEADING_COMMENT = re.compile(r"^\s*<!--.*?-->\s*", re.DOTALL)
_HEADER_AUTHOR = re.compile(r"^\s*author:\s*(\S+)\s*$", re.MULTILINE)
_FULL_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_YEAR_QUARTER = re.compile(r"(\d{4})[-\s]?Q([1-4])", re.IGNORECASE)
_YEAR_MONTH = re.compile(r"(\d{4})-(\d{2})(?!\d)")


def strip_header(raw: str) -> str:
    """The artifact body: the leading HTML comment removed, surrounding whitespace trimmed."""
    return _LEADING_COMMENT.sub("", raw, count=1).strip()


def header_author(raw: str) -> str | None:
    """The persona id in the leading comment's ``author:`` line, if any."""
    match = _LEADING_COMMENT.match(raw)
    if not match:
        return None
    found = _HEADER_AUTHOR.search(match.group(0))
    return found.group(1) if found else None


def fallback_date(raw: str) -> str | None:
    """First date in the first 300 characters: full date, else year-quarter, else year-month."""
    head = raw[:HEAD_CHARS]
    if found := _FULL_DATE.search(head):
        return "-".join(found.groups())
    if found := _YEAR_QUARTER.search(head):
        month = 3 * (int(found.group(2)) - 1) + 1
        return f"{found.group(1)}-{month:02d}-01"
    if found := _YEAR_MONTH.search(head):
        return f"{found.group(1)}-{found.group(2)}-01"
    return None


def question_as_of(row: dict[str, Any]) -> str | None:
    """The harness's as-of lookup order; the first non-empty value wins."""
    metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    truth = row.get("ground_truth_answer")
    truth = truth if isinstance(truth, dict) else {}
    for source, key in (
        (metadata, "as_of"),
        (metadata, "as_of_date"),
        (truth, "as_of_date"),
        (truth, "as_of"),
    ):
        value = source.get(key)
        if value:
            return str(value)[:10]
    return None


def load(root: Path, *, author_from_header: bool = False) -> Benchmark:
    """Load the Helix medium tier from ``root`` (the datasets folder holding ``orgmembench/``)."""
    tier = root / TIER
    index_path = require(tier / "corpus_index.jsonl", "OrgMemBench corpus index", ORIGIN)
    questions_path = require(tier / "benchmark_v0.0.jsonl", "OrgMemBench questions", ORIGIN)
    events_path = tier / "source_of_truth" / "events.jsonl"
    personas_path = tier / "helix_canon" / "personas.jsonl"
    report = JsonlReport()
    files: dict[str, str] = {}

    def record(path: Path) -> None:
        files[str(path.relative_to(root))] = sha256_file(path)

    occurred: dict[str, str] = {}
    if events_path.exists():
        record(events_path)
        for _, row in read_jsonl(events_path, report):
            if row.get("id") and row.get("occurred_at"):
                occurred[str(row["id"])] = str(row["occurred_at"])[:10]
    personas: dict[str, str] = {}
    if author_from_header and personas_path.exists():
        record(personas_path)
        for _, row in read_jsonl(personas_path, report):
            if row.get("persona_id"):
                personas[str(row["persona_id"])] = str(row.get("display_name") or "")

    record(index_path)
    items: list[Item] = []
    missing_files: list[str] = []
    dates_from_text = 0
    seen: set[str] = set()
    for number, row in read_jsonl(index_path, report):
        slot, rel = row.get("slot_id"), row.get("path")
        if not isinstance(slot, str) or not isinstance(rel, str):
            report.problems.append(f"{index_path.name}:{number}: needs slot_id and path")
            continue
        if slot in seen:
            report.problems.append(f"{index_path.name}:{number}: repeated slot_id {slot}")
            continue
        path = tier / rel
        if not path.is_file():
            missing_files.append(rel)
            continue
        raw = path.read_text(encoding="utf-8")
        record(path)
        seen.add(slot)
        event = row.get("event_id")
        date = occurred.get(str(event)) if event else None
        if date is None:
            date = fallback_date(raw)
            dates_from_text += date is not None
        author = None
        if author_from_header:
            persona = row.get("author") or header_author(raw)
            author = (personas.get(str(persona)) or None) if persona else None
        text = strip_header(raw)
        # The answerer sees dates only through the evidence header, so the history baselines
        # get the same date line in front of each document.
        head = date or "undated"
        if author:
            head += f" | {author}"
        items.append(
            Item(
                SCOPE, slot, text, date, author, str(event) if event else None, f"[{head}]\n{text}"
            )
        )

    record(questions_path)
    questions: list[Question] = []
    unknown_gold: list[str] = []
    for number, row in read_jsonl(questions_path, report):
        qid, category, text = row.get("id"), row.get("category"), row.get("text")
        if not (isinstance(qid, str) and isinstance(category, str) and isinstance(text, str)):
            report.problems.append(f"{questions_path.name}:{number}: needs id, category, text")
            continue
        raw_gold = row.get("evidence_artefact_ids") or row.get("evidence_artifact_ids") or []
        gold = tuple(str(g) for g in raw_gold if str(g) in seen)
        unknown_gold += [f"{qid}:{g}" for g in raw_gold if str(g) not in seen]
        questions.append(
            Question(
                id=qid,
                scope=SCOPE,
                category=category,
                text=text,
                as_of=question_as_of(row),
                gold=gold,
                reference=row.get("ground_truth_answer"),
                raw=row,
            )
        )
    if not items or not questions:
        raise DataInvalid(f"OrgMemBench at {tier}: no usable artifacts or questions")
    categories = {c: CATEGORIES.get(c, c) for c in sorted({q.category for q in questions})}
    notes = {
        "tier": "helix/medium",
        "author": "header persona display name" if author_from_header else "none (as harness)",
        "ingest_order": "corpus_index.jsonl order",
        "as_of": "ground_truth_answer.as_of_date (harness lookup order)",
        "questions_with_as_of": sum(q.as_of is not None for q in questions),
        "dates_from_text": dates_from_text,
        "undated_items": sum(item.date is None for item in items),
        "missing_files": missing_files,
        "unknown_gold_ids": unknown_gold,
        "malformed_lines": report.problems,
    }
    title = "OrgMemBench (Helix, medium)"
    return Benchmark("orgmembench", title, root, items, questions, categories, files, notes)
