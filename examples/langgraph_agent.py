"""A LangGraph agent whose long-term memory is mempp: it recalls what it knows about a user
before answering and writes back what the user told it, through ``MemppStore``.

    python examples/langgraph_agent.py org.db               # a Memory in process
    python examples/langgraph_agent.py http://127.0.0.1:8765  # a mempp server (admin key
                                                              # in $MEMPP_API_KEY)

The graph has three nodes: ``recall`` searches the user's namespace for the message,
``respond`` answers from what was recalled (a template here; a chat model in a real agent),
``remember`` puts the message as a new version of the user's notes. Every version stays in
mempp, so ``MemppStore(memory=..., as_of=...)`` shows what the agent knew on any past day.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from mempp import Client, Memory
from mempp.integrations.langgraph import MemppStore


class Turn(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]
    reply: str


def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    found = store.search(("users", state["user"]), query=state["message"], limit=3)
    return {"recalled": [item.value["note"] for item in found]}


def respond(state: Turn) -> dict[str, Any]:
    known = "; ".join(state.get("recalled") or []) or "nothing yet"
    return {"reply": f"What I know about {state['user']}: {known}."}


def remember(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    key = "note-" + hashlib.sha256(state["message"].encode()).hexdigest()[:12]
    store.put(("users", state["user"]), key, {"note": state["message"]})
    return {}


def build(store: BaseStore) -> Any:
    graph = StateGraph(Turn)
    graph.add_node("recall", recall)
    graph.add_node("respond", respond)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "respond")
    graph.add_edge("respond", "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=store)


def main(location: str) -> None:
    memory: Any = Client(location) if location.startswith("http") else Memory(location)
    with memory:
        agent = build(MemppStore(memory=memory))
        for message in ("I prefer dark mode.", "My team ships the launch on Friday."):
            print(agent.invoke({"user": "ana", "message": message})["reply"])
        print(agent.invoke({"user": "ana", "message": "When is the launch?"})["reply"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mempp.db")
