"""LongMemEval_S loader (its published JSON format): one row per turn, one scope per question.

The file is a list of questions, each with ``question_id``, ``question_type``,
``question_date``, ``question``, ``answer``, ``answer_session_ids``, ``haystack_dates``,
``haystack_session_ids`` and ``haystack_sessions`` (lists of ``{role, content, has_answer?}``).

* Each question's haystack is ingested into its own scope ``lme-<question_id>``; every turn is
  ``[<ISO datetime of its session>] <role>: <content>`` dated with its session, author = role,
  id = ``<session id>#<turn index from 0>`` (stored as the record's source).
* As-of = the end of the question's calendar day (the authors' choice): a bare date, which
  mempp reads as an inclusive end-of-day bound.
* Gold = the turns flagged ``has_answer``; ``answer_session_ids`` give session-level gold.
* Abstention questions (``_abs`` in the id) are dropped by default: they have no evidence.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from mempp.bench.datasets import (
    ENV_VAR,
    Benchmark,
    DataInvalid,
    DataMissing,
    Item,
    Question,
    sha256_file,
)

ORIGIN = "LongMemEval, huggingface.co/datasets/xiaowu0162/longmemeval, longmemeval_s.json"
FILE_NAMES = ("longmemeval_s.json", "longmemeval_s_cleaned.json")
_HAYSTACK_KEYS = ("haystack_dates", "haystack_session_ids", "haystack_sessions")
_DATE = re.compile(
    r"^\s*(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\s*\([A-Za-z]+\))?(?:[ T]+(\d{1,2}):(\d{2}))?"
)


def parse_date(value: object) -> str | None:
    """``"2023/05/20 (Sat) 02:21"`` -> ``"2023-05-20T02:21"`` (a bare date stays a date)."""
    if not isinstance(value, str):
        return None
    match = _DATE.match(value)
    if not match:
        return None
    year, month, day, hour, minute = match.groups()
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
        return None
    text = f"{int(year):04d}-{int(month):02d}-{int(day):02d}"
    if hour is not None:
        text += f"T{int(hour):02d}:{minute}"
    return text


def find_file(root: Path, explicit: Path | None = None) -> Path:
    if explicit is not None:
        if not explicit.is_file():
            raise DataMissing(f"LongMemEval file not found at {explicit} ({ORIGIN})")
        return explicit
    for name in FILE_NAMES:
        for candidate in (root / "longmemeval" / name, root / name):
            if candidate.is_file():
                return candidate
    raise DataMissing(
        f"LongMemEval_S not found at {root / 'longmemeval' / FILE_NAMES[0]} ({ORIGIN}); "
        f"pass --data DIR, --file PATH or set ${ENV_VAR}"
    )


def load(root: Path, *, path: Path | None = None, include_abstention: bool = False) -> Benchmark:
    """Load LongMemEval_S from ``path`` or the default location under ``root``."""
    file = find_file(root, path)
    rows = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(rows, list):
        raise DataInvalid(f"{file}: expected a JSON list of questions")
    try:
        label = str(file.relative_to(root))
    except ValueError:
        label = str(file)
    files = {label: sha256_file(file)}
    items: list[Item] = []
    questions: list[Question] = []
    counts: Counter[str] = Counter()
    for row in rows:
        if not isinstance(row, dict) or not all(
            isinstance(row.get(k), str) for k in ("question_id", "question")
        ):
            counts["malformed_questions"] += 1
            continue
        qid = row["question_id"]
        if "_abs" in qid and not include_abstention:
            counts["abstention_dropped"] += 1
            continue
        scope = f"lme-{qid}"
        dates = row.get("haystack_dates") or []
        session_ids = row.get("haystack_session_ids") or []
        sessions = row.get("haystack_sessions") or []
        if not (len(dates) == len(session_ids) == len(sessions)):
            counts["malformed_haystacks"] += 1
            continue
        gold: list[str] = []
        seen_sessions: set[str] = set()
        for when_raw, session_id, turns in zip(dates, session_ids, sessions, strict=True):
            session = str(session_id)
            if session in seen_sessions or not isinstance(turns, list):
                counts["repeated_or_malformed_sessions"] += 1
                continue
            seen_sessions.add(session)
            when = parse_date(when_raw)
            counts["undated_sessions"] += when is None
            for index, turn in enumerate(turns):
                if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
                    counts["malformed_turns"] += 1
                    continue
                role = str(turn.get("role") or "unknown")
                turn_id = f"{session}#{index}"
                text = f"[{when or 'undated'}] {role}: {turn['content'].strip()}"
                items.append(Item(scope, turn_id, text, when, role, session, text, session))
                if turn.get("has_answer"):
                    gold.append(turn_id)
        question_day = parse_date(row.get("question_date"))
        counts["questions_without_gold_turns"] += not gold
        raw = {k: v for k, v in row.items() if k not in _HAYSTACK_KEYS}
        questions.append(
            Question(
                id=qid,
                scope=scope,
                category=str(row.get("question_type") or "unknown"),
                text=row["question"],
                as_of=question_day[:10] if question_day else None,
                gold=tuple(gold),
                gold_groups=tuple(str(s) for s in row.get("answer_session_ids") or []),
                reference=row.get("answer"),
                raw=raw,
            )
        )
    if not questions:
        raise DataInvalid(f"{file}: no usable questions")
    categories = {c: c for c in sorted({q.category for q in questions})}
    notes = {
        "file": str(file),
        "turn_format": "[<ISO datetime of session>] <role>: <content>",
        "scopes": "one per question",
        "as_of": "end of the question's calendar day",
        "abstention": "included" if include_abstention else "dropped (_abs ids)",
        "counts": dict(counts),
    }
    title = "LongMemEval_S"
    return Benchmark("longmemeval", title, file.parent, items, questions, categories, files, notes)
