"""The keyword leg over HTTP: a search under the ``default-keyword`` preset shows the leg
(``kw``) in each hit's legs and leg ranks, as it shows the other legs. (MCP's hits carry no
leg metadata for any leg.)"""

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


def test_the_preset_is_the_default_with_the_keyword_leg() -> None:
    assert preset("default-keyword") == preset("default").with_(w_kw=0.5)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    state = ServerState(str(tmp_path / "k.db"), embedder=KeywordEmbedder(["plan"]))
    state.memory("default").enable_index("keyword")
    state.memory("default").add("We went hiking on Sunday.", author="Ana", date="2024-01-01")
    with live_server(create_app(state), lifespan="on") as url:
        yield url


def test_http_hits_carry_the_keyword_leg(served: str) -> None:
    body = {"query": "any hiking news?", "preset": "default-keyword"}
    reply = httpx.post(f"{served}/v1/search", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    hits = reply.json()["hits"]
    assert hits and hits[0]["leg_ranks"].get("kw") == 1 and "kw" in hits[0]["legs"]
    plain = httpx.post(f"{served}/v1/search", json={"query": "any hiking news?"}, timeout=30)
    assert all("kw" not in hit["leg_ranks"] for hit in plain.json()["hits"])


def test_http_search_needing_the_missing_index_is_a_422_naming_the_command(
    tmp_path: Path,
) -> None:
    state = ServerState(str(tmp_path / "plain.db"), embedder=KeywordEmbedder(["plan"]))
    state.memory("default").add("We went hiking on Sunday.", author="Ana", date="2024-01-01")
    with live_server(create_app(state), lifespan="on") as url:
        body = {"query": "any hiking news?", "preset": "default-keyword"}
        reply = httpx.post(f"{url}/v1/search", json=body, timeout=30)
    assert reply.status_code == 422, reply.text
    assert "mempp index enable keyword" in reply.text
    assert str(tmp_path) not in reply.text  # the server's file path never reaches a client
