"""The property suites, made cheap per case, still see what they exist to see.

Each test plants one bug in a write path with a monkeypatch and runs the suite's own harness
on a few cases, on both engines, through the same shortcuts a long run takes (the CLI parser
and entry points built once, tests/cheap.py; a PostgreSQL store copied from the schema
template, tests/engines.py; the row counts of the hostile CLI cases read through the
context's open store; several sequences per store): the harness must report the bug. Without
these a faster harness could be a blind one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mempp.store.postgres.bulk
import mempp.store.postgres.records
import mempp.store.sqlite.records
import mempp.transfer.restore
from mempp import InvalidInput, Memory
from mempp.cli import add as add_command
from mempp.records import text_hash

import hostile
from engines import engine_locations, pg_server  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, ScriptedReply
from test_dump import round_trips
from test_verify_operations import run_sequences


@pytest.fixture
def llm() -> Any:
    from mempp.llm import LLMClient

    reply = ScriptedReply(content='{"answer": "Friday", "citations": [1]}')
    with (
        FakeOpenAI(responder=lambda _request: reply) as server,
        LLMClient(base_url=server.base_url, model="fake", max_retries=0) as client,
    ):
        yield client


def test_hostile_cli_sees_a_failed_command_that_wrote(
    engine_locations,  # noqa: F811
    tmp_path: Path,
    llm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: ``mempp add`` stores the document, then reports bad input (exit 2). The CLI
    writes through a connection of its own; the counts before and after are read through
    the context's store, which must see that write."""
    real_run = add_command.run

    def writes_then_refuses(memory: Any, args: Any, document: Any) -> int:
        real_run(memory, args, document)
        raise InvalidInput("planted: refused after writing")

    monkeypatch.setattr(add_command, "run", writes_then_refuses)
    found: list[str] = []
    with hostile.context(engine_locations(), tmp_path, llm) as ctx:
        hostile.explore(
            hostile.ENTRIES["cli"],
            ctx,
            examples=200,
            on_crash=lambda crash, _arguments: found.append(crash.kind),
        )
    # Which complaint a case raises first depends on the generated arguments (the planted
    # message names no field either): the harness must raise one, and only of those kinds.
    assert found, "the harness did not see the planted bug"
    assert all(
        kind == "failed command changed the store" or kind.startswith("bad error message")
        for kind in found
    ), found


def test_hostile_api_sees_a_failed_add_that_wrote(
    engine_locations,  # noqa: F811
    tmp_path: Path,
    llm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: ``Memory.add`` stores the document, then raises ``InvalidInput``. The row
    counts and largest id are read with a walk that starts where the last one ended; it
    must still see the new row, case after case."""
    real_add = Memory.add

    def adds_then_refuses(self: Memory, *args: Any, **kwargs: Any) -> Any:
        result = real_add(self, *args, **kwargs)
        raise InvalidInput(f"planted: refused after writing record {result.id}")

    monkeypatch.setattr(Memory, "add", adds_then_refuses)
    found: list[str] = []
    with hostile.context(engine_locations(), tmp_path, llm) as ctx:
        hostile.explore(
            hostile.ENTRIES["add"],
            ctx,
            examples=100,
            on_crash=lambda crash, _arguments: found.append(crash.kind),
        )
    assert found.count("Memory.add failed but changed the store") >= 5, found


def test_verify_sequences_see_a_wrong_text_hash(
    engine_locations,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: every write path stores a wrong hash for a text with the word "price" (each
    engine's verify recomputes the hash on its own, SQLite in Python, PostgreSQL in SQL)."""

    def wrong_for_price(text: str) -> bytes:
        return text_hash(text + ("!" if "price" in text else ""))

    for module in (mempp.store.sqlite.records, mempp.store.postgres.records):
        monkeypatch.setattr(module, "text_hash", wrong_for_price)
    monkeypatch.setattr(mempp.store.postgres.bulk, "text_hash", wrong_for_price)
    with pytest.raises(AssertionError, match=r"after \("):
        run_sequences(engine_locations, 10)


@pytest.mark.parametrize("source_engine", ["sqlite", "postgres"])
def test_round_trips_see_a_restore_that_drops_metadata(
    source_engine: str,
    tmp_path: Path,
    pg_server: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: the restore writes every record without its metadata."""
    import operations

    real_decoded = mempp.transfer.restore._decoded

    def without_metadata(*args: Any, **kwargs: Any) -> Any:
        for kind, value in real_decoded(*args, **kwargs):
            if kind == "record":
                value["metadata"] = None
            yield kind, value

    monkeypatch.setattr(mempp.transfer.restore, "_decoded", without_metadata)
    context = operations.fake_llm()
    try:
        with pytest.raises(AssertionError):
            round_trips(source_engine, tmp_path, pg_server, next(context), 6)
    finally:
        context.close()
