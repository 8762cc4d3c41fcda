"""``verify`` passes right after every operation, on both engines: random sequences of add,
add_many, supersede, archive, undo, redact, consolidate (a fake model) and import.

A bounded, derandomized profile runs in CI (``MEMPP_VERIFY_EXAMPLES`` sequences per engine,
default 25, of up to 12 steps each); the long mode is the same test with more sequences:

    MEMPP_VERIFY_EXAMPLES=100000 PYTHONPATH=src python -m pytest tests/test_verify_operations.py
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from itertools import count
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings

from mempp import Memory

import operations
from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures

EXAMPLES = int(os.environ.get("MEMPP_VERIFY_EXAMPLES", "25"))
# A sequence in which every operation does something, run before the generated ones: the
# coverage check below then never rests on what the generator happened to draw.
EVERY_OPERATION = [
    ("add", 8, 0),
    ("add", 15, 0),
    ("supersede", 0, 1),
    ("archive", 1, 0),
    ("add", 22, 0),
    ("add", 29, 0),
    ("consolidate", 0, 0),
    ("undo", 0, 0),
    ("redact", 0, 0),
    ("import", 0, 0),
    ("add_many", 3, 1),
]


def test_verify_passes_after_every_operation(engine_location: str) -> None:  # noqa: F811
    scopes = count()
    outcomes: Counter[str] = Counter()
    embedder = KeywordEmbedder(operations.WORDS)
    with (
        tempfile.TemporaryDirectory() as folder,
        Memory(engine_location, embedder=embedder) as shared,
    ):
        llm_context = operations.fake_llm()
        llm = next(llm_context)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(operations.SEQUENCES)
        @example(EVERY_OPERATION)
        def run(sequence: list[tuple[str, int, int]]) -> None:
            # A scope per sequence: each starts empty, and verify checks them all.
            memory = Memory(shared.store, scope=f"s{next(scopes)}", embedder=embedder)
            for step in sequence:
                outcomes[step[0] + ":" + operations.apply(memory, step, llm, Path(folder))] += 1
                failed = [c for c in memory.verify() if not c.ok]
                assert not failed, f"after {step}: {failed}"

        try:
            run()
        finally:
            llm_context.close()
    # hypothesis ran (nearly) every sequence asked, and every operation did something.
    assert next(scopes) >= EXAMPLES * 0.9
    done = {key.split(":")[0] for key, n in outcomes.items() if key.endswith(":done") and n}
    assert done == set(operations.OPERATIONS), outcomes
