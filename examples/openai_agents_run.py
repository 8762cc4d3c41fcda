"""An OpenAI Agents SDK agent that answers from mempp through its function tools.

    MEMPP_LLM_BASE_URL=http://127.0.0.1:8000/v1 MEMPP_LLM_MODEL=some-model \\
        python examples/openai_agents_run.py org.db "When do we ship?"

Any OpenAI-compatible chat endpoint serves (the agent uses the Chat Completions API, which
local servers speak); the tests run it against tests/fake_openai.py's scripted server.
Tracing is turned off: no run data leaves the machine.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from mempp import Client, Memory
from mempp.integrations.openai_agents import mempp_function_tools

INSTRUCTIONS = (
    "Answer from the organization's memory only. Search it (pass as_of for a question about "
    "a past moment), follow the most recently dated record when records disagree, and cite "
    "the records you use as 'record N'."
)


def build(memory: Any, *, base_url: str, model: str, api_key: str = "unused") -> Agent:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    return Agent(
        name="memory assistant",
        instructions=INSTRUCTIONS,
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        tools=mempp_function_tools(memory),
    )


def ask(memory: Any, question: str, *, base_url: str, model: str) -> str:
    set_tracing_disabled(True)
    result = Runner.run_sync(build(memory, base_url=base_url, model=model), question)
    return str(result.final_output)


def main(location: str, question: str) -> None:
    memory: Any = Client(location) if location.startswith("http") else Memory(location)
    with memory:
        print(
            ask(
                memory,
                question,
                base_url=os.environ["MEMPP_LLM_BASE_URL"],
                model=os.environ["MEMPP_LLM_MODEL"],
            )
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
