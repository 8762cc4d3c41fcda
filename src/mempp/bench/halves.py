"""The tuning split: a development half to tune on, a test half only to report.

Fixed once, before any tuning (issue "Retrieval quality beyond the paper"): OrgMemBench
odd-numbered questions and LoCoMo conversations 26, 30, 41, 42, 43 are the development half;
even-numbered questions and conversations 44, 47, 48, 49, 50 the test half. LongMemEval has
no split yet. The split only selects questions; stores and settings are the same for both.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Literal

from mempp.bench.datasets import Benchmark, Question
from mempp.errors import InvalidInput

Half = Literal["dev", "test"]
LOCOMO_DEV = frozenset({"26", "30", "41", "42", "43"})
LOCOMO_TEST = frozenset({"44", "47", "48", "49", "50"})


def half_of(benchmark: str, question: Question) -> Half | None:
    """Which half a question belongs to, or None where the benchmark has no split."""
    if benchmark == "orgmembench":
        number = re.search(r"(\d+)$", question.id)
        return None if number is None else ("dev" if int(number.group(1)) % 2 else "test")
    if benchmark == "locomo":
        conversation = re.search(r"(\d+)$", question.scope)
        key = conversation.group(1) if conversation else ""
        return "dev" if key in LOCOMO_DEV else "test" if key in LOCOMO_TEST else None
    return None


def restrict(benchmark: Benchmark, half: Half) -> Benchmark:
    """The same benchmark (same items, same store) with only the questions of one half."""
    kept = [q for q in benchmark.questions if half_of(benchmark.name, q) == half]
    if not kept:
        raise InvalidInput(f"{benchmark.name} has no {half} half")
    notes = dict(benchmark.notes, half=half, questions_in_half=len(kept))
    return replace(benchmark, questions=kept, notes=notes)
