"""The context leg over HTTP: a search under the ``default-keyword-context`` preset shows the
leg (``ctx``) in each hit's legs and leg ranks, as it shows the other legs, and a store
without the context index answers such a search with one line naming the command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
import httpx

from mempp import preset
from mempp.server.app import create_app
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from serving import live_server


def test_the_preset_is_default_keyword_with_the_context_leg() -> None:
    assert preset("default-keyword-context") == preset("default-keyword").with_(
        w_ctx=0.5, ctx_credit="members"
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, ServerState]]:
    state = ServerState(str(tmp_path / "c.db"), embedder=KeywordEmbedder(["hiking", "dog"]))
    memory = state.memory("default")
    memory.add("Did you take the dog hiking?", author="Ana", date="2024-01-01", thread="s1")
    memory.add("Yes, last Tuesday!", author="Ben", date="2024-01-01", thread="s1")
    with live_server(create_app(state), lifespan="on") as url:
        yield url, state


def test_http_hits_carry_the_context_leg(served: tuple[str, ServerState]) -> None:
    url, state = served
    body = {"query": "hiking with the dog", "preset": "default-keyword-context"}
    missing = httpx.post(f"{url}/v1/search", json=body, timeout=30)
    assert missing.status_code == 422 and "mempp index enable" in missing.text
    memory = state.memory("default")
    memory.enable_index("keyword")
    memory.enable_index("context")
    reply = httpx.post(f"{url}/v1/search", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    hits = {hit["text"]: hit for hit in reply.json()["hits"]}
    reply_hit = hits["Yes, last Tuesday!"]
    assert reply_hit["leg_ranks"].get("ctx") == 1 and "ctx" in reply_hit["legs"]


def test_the_chat_preset_needs_no_index(tmp_path: Path) -> None:
    """`chat` is the pair of legs with nothing to enable: over HTTP a store with no optional
    index answers it, and the reply turn is found through its context."""
    assert preset("chat") == preset("default-keyword-context").with_(
        kw_match="prefix", ctx_source="query", kw_max_tokens=128
    )
    state = ServerState(str(tmp_path / "chat.db"), embedder=KeywordEmbedder(["hiking", "dog"]))
    memory = state.memory("default")
    memory.add("Did you take the dog hiking?", author="Ana", date="2024-01-01", thread="s1")
    memory.add("Yes, last Tuesday!", author="Ben", date="2024-01-01", thread="s1")
    assert memory.indexes() == ()
    with live_server(create_app(state), lifespan="on") as url:
        body = {"query": "hiking with the dog", "preset": "chat"}
        reply = httpx.post(f"{url}/v1/search", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    hits = {hit["text"]: hit for hit in reply.json()["hits"]}
    assert hits["Yes, last Tuesday!"]["leg_ranks"].get("ctx") == 1
