"""Random sequences of every operation that writes to a store, for property tests.

A sequence is a list of ``(operation, a, b)`` tuples drawn by :data:`SEQUENCES`; ``a`` and
``b`` pick ids, runs or texts modulo what exists, so every drawn sequence is meaningful on
any store. :func:`apply` runs one step; a step the API refuses (archiving a row twice, undoing
a run whose rows moved since) is a legal outcome, counted, never an error of the test.

Used by tests/test_verify_operations.py (verify passes after every step) and
tests/test_dump.py (a snapshot of any such store restores to an identical one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from mempp import InvalidInput, Memory, RecordNotFound
from mempp.importers import get, run_import
from mempp.llm import LLMClient
from mempp.llm.consolidate import consolidate
from mempp.store.base import StateConflict

from fake_openai import FakeOpenAI, RecordedRequest, ScriptedReply

WORDS = ("launch", "friday", "budget", "april", "office", "hiring", "plan", "price")
AUTHORS = (None, "Ana", "Ben")
DATES = (None, "2024-01-15", "2024-03-01", "2024-06-30", "2025-02-10T09:30:00+00:00")
OPERATIONS = (
    "add",
    "add_many",
    "supersede",
    "archive",
    "undo",
    "redact",
    "consolidate",
    "import",
)

_step = st.tuples(st.sampled_from(OPERATIONS), st.integers(0, 1 << 16), st.integers(0, 1 << 16))
SEQUENCES = st.lists(_step, min_size=1, max_size=12)
_files = count()


def text_for(seed: int) -> str:
    """A short text over ``WORDS``: near-duplicates are common, so consolidation groups."""
    words = [WORDS[(seed >> (3 * i)) % len(WORDS)] for i in range(2 + seed % 4)]
    return " ".join(words)


def document(seed: int) -> dict[str, Any]:
    return {
        "text": text_for(seed),
        "author": AUTHORS[seed % len(AUTHORS)],
        "date": DATES[(seed // 7) % len(DATES)],
        "tags": ["t" + str(seed % 3)] if seed % 2 else [],
        "thread": "th" + str(seed % 2) if seed % 5 == 0 else None,
        "metadata": {"seed": seed} if seed % 3 == 0 else None,
    }


def responder(request: RecordedRequest) -> ScriptedReply:
    """The fake model: a label that varies with the group, a merge grounded in its words."""
    prompt = request.text()
    if "consolidation_label" in request.raw.decode("utf-8", "replace") or "ONE label" in prompt:
        labels = ("conflict", "restatement", "distinct")
        return ScriptedReply(content=json.dumps({"label": labels[len(prompt) % 3]}))
    rows = request.messages[-1]["content"] if request.messages else ""
    words = [w for w in re.findall(r"[a-z]+", str(rows)) if w in WORDS] or ["budget"]
    merged = " ".join(dict.fromkeys(words))
    return ScriptedReply(content=json.dumps({"text": merged}))


def fake_llm() -> Iterator[LLMClient]:
    with FakeOpenAI(responder=responder) as server:
        client = LLMClient(base_url=server.base_url, model="fake", max_retries=0)
        with client:
            yield client


def apply(memory: Memory, step: tuple[str, int, int], llm: LLMClient, folder: Path) -> str:
    """Run one step; returns "done" or "refused" (the API said no, nothing changed)."""
    operation, a, b = step
    ids = [r.id for r in memory.records()]
    try:
        if operation == "add":
            memory.add(**document(a))
        elif operation == "add_many":
            memory.add_many([document(a + i * b) for i in range(1 + b % 4)], batch_size=2)
        elif operation == "supersede" and ids:
            memory.supersede(ids[a % len(ids)], by=ids[b % len(ids)], reason="newer")
        elif operation == "archive" and ids:
            memory.archive(ids[a % len(ids)], reason="obsolete", actor="ops")
        elif operation == "redact" and ids:
            memory.redact(ids[a % len(ids)], reason="erasure request")
        elif operation == "undo":
            runs = [
                run
                for run in memory.store.runs(memory.scope)  # type: ignore[attr-defined]
                if run.kind == "consolidate"
                and run.undone_by is None
                and not run.dry_run
                and run.settings.get("operation") != "redact"
            ]
            if not runs:
                return "refused"
            memory.undo(runs[a % len(runs)].id)
        elif operation == "consolidate":
            consolidate(memory, llm, threshold=0.7)
        elif operation == "import":
            target = folder / f"import-{next(_files)}"
            target.mkdir()
            for i in range(1 + a % 3):
                fields = document(a + i * 31)
                head = f"---\nauthor: {fields['author'] or 'Cy'}\n"
                head += f"date: {fields['date'] or '2024-05-05'}\n---\n"
                (target / f"note{i}.md").write_text(head + fields["text"] + "\n")
            run_import(memory, get("folder"), target)
        else:
            return "refused"
    except (InvalidInput, RecordNotFound, StateConflict):
        return "refused"
    return "done"
