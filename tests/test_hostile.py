"""Property tests: hostile input at every public entry point, on both engines.

Each test feeds one entry point generated arguments (tests/hostile.py says what, and checks
the contract: success or a documented one-line error, and a failed call changes nothing
stored). Under the ``ci`` hypothesis profile (tests/conftest.py) about 1,500 cases per engine,
the same every run; under ``long`` (``--hypothesis-profile=long``) 10^5 random cases per
engine, shared among the entry points in the ci proportions, on a fresh store every
``CASES_PER_STORE`` cases so that generated documents do not pile up into one huge store.
``benchmarks/fuzz.py`` runs the same cases and counts every failure instead of stopping at the
first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from mempp.llm import LLMClient

import hostile
from conftest import examples
from engines import engine_locations  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, ScriptedReply

CASES_PER_STORE = 5_000
TOTAL = sum(entry.examples for entry in hostile.ENTRIES.values())


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMClient]:
    """An LLM client for a local fake server that always answers from record 1."""
    reply = ScriptedReply(content='{"answer": "Friday", "citations": [1]}')
    with FakeOpenAI(responder=lambda _request: reply) as server:
        client = LLMClient(base_url=server.base_url, model="fake", max_retries=0)
        with client:
            yield client


@pytest.mark.parametrize("name", list(hostile.ENTRIES))
def test_hostile_input(name: str, engine_locations, tmp_path: Path, llm) -> None:  # noqa: F811
    entry = hostile.ENTRIES[name]
    wanted = examples(entry.examples, share=entry.examples / TOTAL)
    rounds = math.ceil(wanted / CASES_PER_STORE)
    ran = 0
    for number in range(rounds):
        folder = tmp_path / f"round{number}"
        folder.mkdir()
        size = min(CASES_PER_STORE, wanted - ran)
        with hostile.context(engine_locations(), folder, llm) as ctx:
            ran += hostile.explore(entry, ctx, examples=size)
    assert ran >= wanted * 0.9  # hypothesis ran (nearly) every case asked
