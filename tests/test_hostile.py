"""Property tests: hostile input at every public entry point, on both engines.

Each test feeds one entry point generated arguments (tests/hostile.py says what, and checks
the contract: success or a documented one-line error, and a failed call changes nothing
stored). The profile is bounded for CI: a fixed sequence (derandomized), no example database,
about 1,500 cases per engine. ``MEMPP_HOSTILE_SCALE=10`` runs ten times as many;
``benchmarks/fuzz.py`` runs 10^5 random cases and counts every failure instead of stopping at
the first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mempp.llm import LLMClient

import hostile
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, ScriptedReply

SCALE = float(os.environ.get("MEMPP_HOSTILE_SCALE", "1"))


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMClient]:
    """An LLM client for a local fake server that always answers from record 1."""
    reply = ScriptedReply(content='{"answer": "Friday", "citations": [1]}')
    with FakeOpenAI(responder=lambda _request: reply) as server:
        client = LLMClient(base_url=server.base_url, model="fake", max_retries=0)
        with client:
            yield client


@pytest.mark.parametrize("name", list(hostile.ENTRIES))
def test_hostile_input(name: str, engine_location: str, tmp_path: Path, llm) -> None:  # noqa: F811
    entry = hostile.ENTRIES[name]
    with hostile.context(engine_location, tmp_path, llm) as ctx:
        ran = hostile.explore(entry, ctx, examples=max(1, int(entry.examples * SCALE)))
    assert ran >= entry.examples * SCALE * 0.9  # hypothesis ran (nearly) every case asked
