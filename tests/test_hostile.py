"""Property tests: hostile input at every public entry point, on both engines.

Each test feeds one entry point generated arguments (tests/hostile.py says what and checks the
contract: success or a documented one-line error, and a failed call changes nothing stored).
The profile is bounded for CI: a fixed seed (derandomized), no example database, about 2,500
cases in all. ``MEMPP_HOSTILE_SCALE=10`` runs ten times as many; ``benchmarks/fuzz.py`` runs
10^5 cases and counts every failure instead of stopping at the first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mempp import Memory
from mempp.llm import LLMClient

import hostile
from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, ScriptedReply

SCALE = float(os.environ.get("MEMPP_HOSTILE_SCALE", "1"))


def bounded(examples: int):  # type: ignore[no-untyped-def]
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )


SEED_DOCS = [
    {"text": "We ship the launch on Friday.", "author": "Ana", "date": "2024-03-01"},
    {"text": "The budget for Q2 is 40k.", "author": "Bo", "date": "2024-04-01", "tags": ["plan"]},
    {"text": "Launch moved to Monday.", "author": "Ana", "date": "2024-03-05", "thread": "t1"},
]


@pytest.fixture
def memory(engine_location: str) -> Iterator[Memory]:  # noqa: F811
    embedder = KeywordEmbedder(["launch", "budget", "friday"])
    with Memory(engine_location, embedder=embedder) as memory:
        memory.add_many(SEED_DOCS)
        yield memory
        # Whatever was generated, the seeded rows are still there, unchanged.
        kept = {r.id: r.text for r in memory.records()}
        assert [kept[i] for i in (1, 2, 3)] == [d["text"] for d in SEED_DOCS]


@bounded(250)
@given(body=hostile.text | hostile.anything, fields=hostile.document_fields)
def test_add(memory: Memory, body, fields) -> None:
    hostile.add_case(memory, body, fields)


@bounded(200)
@given(
    documents=st.lists(hostile.items, max_size=6) | hostile.anything,
    batch_size=hostile.counts,
)
def test_add_many(memory: Memory, documents, batch_size) -> None:
    hostile.add_many_case(memory, documents, batch_size)


@bounded(250)
@given(query=hostile.queries, as_of=hostile.dates, k=hostile.counts)
def test_search(memory: Memory, query, as_of, k) -> None:
    hostile.search_case(memory, query, as_of, k)


@bounded(150)
@given(
    query=hostile.queries,
    as_of=hostile.dates,
    k=hostile.counts,
    budget=hostile.counts,
    style=st.sampled_from(["headers", "paper"]) | hostile.anything,
)
def test_evidence(memory: Memory, query, as_of, k, budget, style) -> None:
    hostile.evidence_case(memory, query, as_of, k, budget, style)


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMClient]:
    """An LLM client for a local fake server that always answers from record 1."""
    reply = ScriptedReply(content='{"answer": "Friday", "citations": [1]}')
    with FakeOpenAI(responder=lambda _request: reply) as server:
        client = LLMClient(base_url=server.base_url, model="fake", max_retries=0)
        with client:
            yield client


@bounded(60)
@given(question=hostile.queries, as_of=hostile.dates, k=hostile.counts, budget=hostile.counts)
def test_ask(memory: Memory, llm: LLMClient, question, as_of, k, budget) -> None:
    hostile.ask_case(memory, llm, question, as_of, k, budget)


@bounded(120)
@given(record_id=hostile.counts)
def test_get(memory: Memory, record_id) -> None:
    hostile.get_case(memory, record_id)


@bounded(80)
@given(page=hostile.counts, active_only=st.booleans())
def test_records(memory: Memory, page, active_only) -> None:
    hostile.records_case(memory, page, active_only)


@bounded(100)
@given(scope=hostile.labels, embedder=st.none() | hostile.anything)
def test_open(engine_location: str, scope, embedder) -> None:  # noqa: F811
    hostile.open_case(engine_location, scope, embedder)


@pytest.fixture
def cli_location(engine_location: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    """A store for the command line, which encodes with a small test encoder here."""
    embedder = KeywordEmbedder(["launch", "budget"])
    monkeypatch.setattr("mempp.memory.default_embedder", lambda: embedder)
    with Memory(engine_location, embedder=embedder) as memory:
        memory.add_many(SEED_DOCS)
    return engine_location


@bounded(200)
@given(
    argv=hostile.cli_args(),
    stdin=st.binary(max_size=200) | hostile.text.map(lambda t: t.encode("utf-8", "surrogatepass")),
)
def test_cli(cli_location: str, argv, stdin) -> None:
    hostile.cli_case(cli_location, argv, stdin)


@bounded(100)
@given(
    lines=st.lists(hostile.jsonl_lines(), max_size=5),
    pages=st.lists(hostile.markdown_files(), max_size=3),
)
def test_cli_ingest(cli_location: str, tmp_path: Path, lines, pages) -> None:
    hostile.ingest_case(cli_location, tmp_path / "in", lines, pages)
