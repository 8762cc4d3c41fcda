"""LoCoMo (``locomo10``) loader: one stored row per dialogue turn, one scope per conversation.

* Input: a folder of one JSON file per conversation (``26.json`` ... as copied here, keys at
  the top level) or the published ``locomo10.json`` (a list of samples with ``sample_id`` and a
  ``conversation`` object). Derived annotations (observations, summaries, events) are ignored.
* Each turn becomes ``[<ISO datetime of its session>] <speaker>: <text>``, the authors' format
  in which date and speaker lead the stored text; a shared photo's ``blip_caption`` is kept as
  `` [shares a photo: <caption>]``. Event date = the session's date (``1:56 pm on 8 May, 2023``
  -> ``2023-05-08T13:56``), author = speaker, id = ``dia_id`` (stored as the record's source).
* Questions: ``qa``; category 5 (adversarial) is dropped by default as in the paper, leaving
  1,540. Gold = the evidence ``dia_id`` list. Some published ids are malformed (``D:11:26``,
  ``D30:05``, several ids in one string, ids of turns that do not exist): well-formed parts are
  repaired (``D11:26``, ``D30:5``, split on ``;``/``,``/spaces), the rest dropped, all counted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from mempp.bench.datasets import Benchmark, DataInvalid, DataMissing, Item, Question, sha256_file

ORIGIN = "LoCoMo, github.com/snap-research/locomo, data/locomo10.json"
CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
ADVERSARIAL = "5"

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_SESSION_DATE = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
_EVIDENCE_ID = re.compile(r"^D:?(\d+):0*(\d+)$")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for name in names
}


def parse_session_date(value: object) -> str | None:
    """``"1:56 pm on 8 May, 2023"`` -> ``"2023-05-08T13:56"``; ``None`` if unreadable."""
    if not isinstance(value, str):
        return None
    match = _SESSION_DATE.match(value)
    if not match:
        return None
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    hour_24 = int(hour) % 12 + (12 if half.lower() == "p" else 0)
    if month is None:
        return None
    try:
        moment = datetime(int(year), month, int(day), hour_24, int(minute))
    except ValueError:
        return None
    return moment.isoformat(timespec="minutes")


def turn_text(when: str | None, speaker: str, text: str, caption: str | None) -> str:
    """The stored form of one turn: date and speaker lead, a shared photo's caption follows."""
    body = text.strip()
    if caption and caption.strip():
        body = f"{body} [shares a photo: {caption.strip()}]".strip()
    return f"[{when or 'undated'}] {speaker}: {body}"


def normalize_evidence(raw: object, known: set[str], counts: Counter[str]) -> tuple[str, ...]:
    """Known, normalised turn ids named by one question's evidence list (counted in ``counts``)."""
    entries = raw if isinstance(raw, list) else [raw] if raw else []
    out: dict[str, None] = {}
    for entry in entries:
        text = str(entry).strip()
        parts = [p for p in _EVIDENCE_SPLIT.split(text) if p]
        if len(parts) > 1:
            counts["split"] += 1
        for part in parts:
            counts["ids"] += 1
            match = _EVIDENCE_ID.match(part)
            if not match:
                counts["unparseable"] += 1
                continue
            canonical = f"D{int(match.group(1))}:{int(match.group(2))}"
            if canonical != part:
                counts["repaired"] += 1
            if canonical not in known:
                counts["unknown"] += 1
                continue
            out[canonical] = None
        if not parts:
            counts["unparseable"] += 1
    return tuple(out)


def _conversations(root: Path) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, str]]:
    """(sample name, sample) pairs from a folder of per-conversation files or locomo10.json."""
    folder = root / "locomo"
    if not folder.exists():
        raise DataMissing(
            f"LoCoMo data not found at {folder} ({ORIGIN}); pass --data DIR or set $MEMPP_DATASETS"
        )
    # Numeric names in numeric order (26, 30, 41, ...), anything else after them by name.
    files = sorted(
        folder.glob("*.json"),
        key=lambda p: (0, int(p.stem), "") if p.stem.isdigit() else (1, 0, p.stem),
    )
    if not files:
        raise DataMissing(f"no LoCoMo JSON files in {folder} ({ORIGIN})")
    hashes: dict[str, str] = {}
    samples: list[tuple[str, dict[str, Any]]] = []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        hashes[str(path.relative_to(root))] = sha256_file(path)
        if isinstance(data, list):  # the published locomo10.json
            for position, sample in enumerate(data):
                if isinstance(sample, dict):
                    samples.append((str(sample.get("sample_id") or position), sample))
        elif isinstance(data, dict):
            samples.append((str(data.get("sample_id") or path.stem), data))
    return samples, hashes


def load(root: Path, *, include_adversarial: bool = False) -> Benchmark:
    """Load every LoCoMo conversation under ``root/locomo``."""
    samples, files = _conversations(root)
    items: list[Item] = []
    questions: list[Question] = []
    evidence_counts: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    undated_sessions: list[str] = []
    no_gold: list[str] = []
    for name, sample in samples:
        conversation = sample.get("conversation", sample)
        scope = f"locomo-{name}"
        sessions = sorted(
            (int(m.group(1)), key)
            for key in conversation
            if (m := _SESSION_KEY.match(key)) and isinstance(conversation[key], list)
        )
        known: set[str] = set()
        for number, key in sessions:
            when = parse_session_date(conversation.get(f"{key}_date_time"))
            if when is None:
                undated_sessions.append(f"{scope}:{key}")
            for turn in conversation[key]:
                if not isinstance(turn, dict) or not turn.get("dia_id"):
                    dropped["malformed_turns"] += 1
                    continue
                dia_id = str(turn["dia_id"]).strip()
                if dia_id in known:
                    dropped["repeated_dia_ids"] += 1
                    continue
                known.add(dia_id)
                speaker = str(turn.get("speaker") or "").strip() or None
                text = turn_text(
                    when,
                    speaker or "unknown",
                    str(turn.get("text") or ""),
                    turn.get("blip_caption"),
                )
                session = f"D{number}"
                items.append(Item(scope, dia_id, text, when, speaker, session, text, session))
        for position, qa in enumerate(sample.get("qa") or []):
            if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                dropped["malformed_questions"] += 1
                continue
            category = str(qa.get("category"))
            if category == ADVERSARIAL and not include_adversarial:
                dropped["adversarial_questions"] += 1
                continue
            qid = f"{scope}-q{position}"
            gold = normalize_evidence(qa.get("evidence"), known, evidence_counts)
            if not gold:
                no_gold.append(qid)
            reference = qa.get("answer", qa.get("adversarial_answer"))
            questions.append(
                Question(qid, scope, category, qa["question"], None, gold, (), reference, qa)
            )
    if not items or not questions:
        raise DataInvalid(f"LoCoMo at {root / 'locomo'}: no usable turns or questions")
    order = [*CATEGORIES, ADVERSARIAL]
    present = {q.category for q in questions}
    categories = {c: CATEGORIES.get(c, "adversarial") for c in order if c in present}
    categories.update({c: c for c in sorted(present - set(categories))})
    notes = {
        "conversations": len(samples),
        "turn_format": "[<ISO datetime of session>] <speaker>: <text> [shares a photo: <caption>]",
        "adversarial": "included" if include_adversarial else "dropped (category 5)",
        "evidence_ids": dict(evidence_counts),
        "questions_without_gold": no_gold,
        "undated_sessions": undated_sessions,
        "dropped": dict(dropped),
    }
    return Benchmark(
        "locomo", "LoCoMo (locomo10)", root, items, questions, categories, files, notes
    )
