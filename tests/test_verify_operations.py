"""``verify`` passes right after every operation, on both engines: random sequences of add,
add_many, supersede, archive, undo, redact, consolidate (a fake model) and import.

The ``ci`` hypothesis profile (tests/conftest.py) runs 25 sequences per engine, of up to 12
steps each, the same every run; the ``long`` one runs 10^5 random sequences per engine:

    PYTHONPATH=src python -m pytest tests/test_verify_operations.py --hypothesis-profile=long
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from collections.abc import Callable
from itertools import count
from pathlib import Path

from hypothesis import example, given, settings

from mempp import Memory

import operations
from cheap import once_per_process
from conftest import KeywordEmbedder, examples
from engines import engine_locations  # noqa: F401 - fixtures

CI_EXAMPLES = 25
# verify reads the whole store after every step, so its cost grows with the rows earlier
# sequences left: a long run starts a fresh store every so many sequences. At 200 verify was
# over half of the run's time on PostgreSQL (it re-analyses every row's text); at 20 a store
# still holds 20 scopes, so a step that broke another scope's rows or the shared indexes is
# still found, and a fresh PostgreSQL store is a template copy (tests/engines.py).
SEQUENCES_PER_STORE = 20
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


def test_verify_passes_after_every_operation(engine_locations: Callable[[], str]) -> None:  # noqa: F811
    wanted = examples(CI_EXAMPLES)
    ran, outcomes = run_sequences(engine_locations, wanted)
    # hypothesis ran (nearly) every sequence asked, and every operation did something.
    assert ran >= wanted * 0.9
    done = {key.split(":")[0] for key, n in outcomes.items() if key.endswith(":done") and n}
    assert done == set(operations.OPERATIONS), outcomes


def run_sequences(new_store: Callable[[], str], wanted: int) -> tuple[int, Counter[str]]:
    """``wanted`` generated sequences (and ``EVERY_OPERATION``), each in a scope of its own,
    a fresh store from ``new_store`` every ``SEQUENCES_PER_STORE``; ``verify`` after every
    step. Returns how many sequences ran and the count of each step's outcome; a failed
    verify fails (hypothesis shrinks the sequence and prints it)."""
    scopes = count()
    outcomes: Counter[str] = Counter()
    embedder = KeywordEmbedder(operations.WORDS)
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        llm_context = operations.fake_llm()
        stack.callback(llm_context.close)
        llm = next(llm_context)
        shared: list[Memory] = []

        @settings(max_examples=wanted)
        @given(operations.SEQUENCES)
        @example(EVERY_OPERATION)
        def run(sequence: list[tuple[str, int, int]]) -> None:
            number = next(scopes)
            if number % SEQUENCES_PER_STORE == 0:
                if shared:
                    shared.pop().close()
                shared.append(Memory(new_store(), embedder=embedder))
            # A scope per sequence: each starts empty, and verify checks them all.
            memory = Memory(shared[0].store, scope=f"s{number}", embedder=embedder)
            for step in sequence:
                outcomes[step[0] + ":" + operations.apply(memory, step, llm, folder)] += 1
                failed = [c for c in memory.verify() if not c.ok]
                assert not failed, f"after {step}: {failed}"

        try:
            with once_per_process():
                run()
        finally:
            if shared:
                shared.pop().close()
    return next(scopes), outcomes
