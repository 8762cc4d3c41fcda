"""schemathesis against the served ``/openapi.json``: generated requests for every operation,
on a server over each engine, and not one 5xx.

The ``ci`` hypothesis profile (tests/conftest.py) runs a fixed number of derandomized examples
per operation and mode (``CI_EXAMPLES``, per engine); the ``long`` one 10^5 random requests per
engine, shared among the operations and the two modes.

Each response must also match the schema: status documented, content type documented, body
valid against its schema (problem documents included).
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import schemathesis
from hypothesis import given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder, examples
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from fake_openai import FakeOpenAI, ScriptedReply, fast_client
from serving import live_server

# Per operation and mode. PostgreSQL gets fewer in CI: the same server code runs over either
# engine, so its share is the store's answers (errors, dates, ids), not the request parsing.
CI_EXAMPLES = {"sqlite": 25, "postgres": 8}
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
# A schema-valid request may still be refused, with a 422 naming the field: a date of the
# documented form that the calendar lacks (2024-02-30), packing sizes that contradict each
# other. JSON Schema cannot say so; every other check runs.
EXCLUDED = [schemathesis.checks.positive_data_acceptance]
# An ingest upload is raw bytes (JSON Lines): sent as they are generated.
schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")
ANSWER = '{"answer": "the plan changed", "citations": [2]}'


@pytest.mark.parametrize("mode", MODES)
def test_every_operation_conforms_and_never_5xx(
    engine_location: str,  # noqa: F811
    mode: GenerationMode,
) -> None:
    engine = "postgres" if engine_location.startswith(("postgresql:", "postgres:")) else "sqlite"
    with ExitStack() as stack:
        # With a model, so that /v1/ask answers (without one it is a documented 503).
        fake = stack.enter_context(FakeOpenAI(responder=lambda _: ScriptedReply(content=ANSWER)))
        state = ServerState(
            engine_location,
            embedder=KeywordEmbedder(["alpha", "plan"]),
            llm=fast_client(fake),
        )
        state.memory("default").add_many(
            [
                {"text": "alpha plan one", "author": "Ana", "date": "2024-01-01"},
                {
                    "text": "the plan changed",
                    "author": "Bo",
                    "date": "2024-02-01",
                    "tags": ["plan"],
                },
            ]
        )
        url = stack.enter_context(live_server(create_app(state)))
        # The schema is built on its first request; on a loaded machine that may take longer
        # than the client's default 10 s, which a long run met once.
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=60)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        wanted = examples(CI_EXAMPLES[engine], share=1 / (len(MODES) * len(operations)))
        without_input = set()
        for operation in operations:
            try:
                check_operation(operation, mode, wanted)
            except Unsatisfiable:
                if mode is not GenerationMode.NEGATIVE:
                    raise
                without_input.add(operation.label)  # nothing to make invalid
        # Any bytes are an upload (bad lines are reported one by one), so ingest is here too.
        assert without_input <= {
            "GET /healthz",
            "GET /readyz",
            "GET /.well-known/oauth-protected-resource",
            "GET /v1/info",
            "GET /v1/corrections",
            "POST /v1/ingest",
        }


def check_operation(operation, mode: GenerationMode, wanted: int) -> None:  # type: ignore[no-untyped-def]
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=wanted)
    def conforms(case) -> None:  # type: ignore[no-untyped-def]
        response = case.call_and_validate(timeout=60, excluded_checks=EXCLUDED)
        assert response.status_code < 500, response.text

    conforms()
