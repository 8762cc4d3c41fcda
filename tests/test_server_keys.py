"""Keys and scopes: ``mempp keys``, Bearer authentication, roles, and tenant isolation over
HTTP and MCP (a key for scope A sees nothing of scope B), on both engines."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mempp.cli.main import main
from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.store import open_store

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

MEMPP = str(Path(sys.executable).with_name("mempp"))


@dataclass
class Tenants:
    url: str
    state: ServerState
    tokens: dict[str, str]  # name -> token: a_write, a_read, b_write, b_admin

    def client(self, name: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"} if name else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


@pytest.fixture
def tenants(engine_location: str) -> Iterator[Tenants]:  # noqa: F811
    store = open_store(engine_location)
    tokens = {
        "a_write": keys.create_key(store, scope="team-a", role="write")[1],
        "a_read": keys.create_key(store, scope="team-a", role="read")[1],
        "b_write": keys.create_key(store, scope="team-b", role="write")[1],
        "b_admin": keys.create_key(store, scope="team-b", role="admin")[1],
    }
    state = ServerState(store, embedder=KeywordEmbedder(["plan", "secret"]))
    with live_server(create_app(state)) as url:
        yield Tenants(url, state, tokens)


def test_keys_cli_creates_lists_and_revokes(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "m.db")
    assert (
        main(
            ["--db", db, "keys", "create", "--scope", "ops", "--role", "write", "--label", "ci bot"]
        )
        == 0
    )
    token = capsys.readouterr().out.strip()
    assert token.startswith("mempp_")
    key_id = token.split("_")[1]
    assert main(["keys", "--db", db, "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["key_id"], k["scope"], k["role"], k["label"], k["revoked_at"]) for k in listed] == [
        (key_id, "ops", "write", "ci bot", None)
    ]
    assert token not in json.dumps(listed)  # never the secret
    assert main(["--db", db, "keys", "revoke", key_id]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["--db", db, "keys", "list"]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["--db", db, "keys", "revoke", "nosuchkey"]) == 2
    assert "no key" in capsys.readouterr().err
    assert main(["--db", str(tmp_path / "none.db"), "keys", "list"]) == 2
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(SystemExit):  # argparse: the role is one of three
        main(["--db", db, "keys", "create", "--scope", "ops", "--role", "owner"])


def test_requests_need_a_valid_unrevoked_key(tenants: Tenants) -> None:
    with tenants.client(None) as anonymous:
        response = anonymous.post("/v1/search", json={"query": "plan"})
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["field"] == "Authorization"
        assert anonymous.get("/healthz").status_code == 200  # health needs no key
        for header in ("Basic abc", "Bearer", "Bearer mempp_nope", "mempp_x"):
            refused = anonymous.get("/v1/info", headers={"Authorization": header})
            assert refused.status_code == 401
    with tenants.client("a_write") as a:
        assert a.get("/v1/info").json()["scope"] == "team-a"
        store = tenants.state.store
        keys.revoke_key(store, tenants.tokens["a_write"].split("_")[1])
        revoked = a.get("/v1/info")  # at once: no cache, no restart
        assert revoked.status_code == 401 and "revoked" in revoked.json()["detail"]


def test_roles(tenants: Tenants) -> None:
    with tenants.client("a_read") as reader:
        refused = reader.post("/v1/records", json={"text": "secret plan"})
        assert refused.status_code == 403 and "write" in refused.json()["detail"]
        upload = reader.post(
            "/v1/ingest",
            content=b'{"text": "x"}\n',
            headers={"content-type": "application/x-ndjson"},
        )
        assert upload.status_code == 403
        assert reader.post("/v1/search", json={"query": "plan"}).status_code == 200
    assert tenants.state.store.count("team-a", active_only=False) == 0
    with tenants.client("b_admin") as admin:
        assert admin.post("/v1/records", json={"text": "plan"}).json()["id"] is not None
        assert admin.get("/v1/info").json()["role"] == "admin"


def test_a_key_for_one_scope_sees_nothing_of_another_over_http(tenants: Tenants) -> None:
    with tenants.client("a_write") as a, tenants.client("b_write") as b:
        a_ids = [
            a.post(
                "/v1/records",
                json={
                    "text": f"team a secret plan {i}",
                    "author": "Ana",
                    "date": "2024-01-0" + str(i + 1),
                    "tags": ["plan"],
                },
            ).json()["id"]
            for i in range(5)
        ]
        upload = b"".join(
            json.dumps({"text": f"team a uploaded secret {i}"}).encode() + b"\n" for i in range(3)
        )
        a.post("/v1/ingest", content=upload, headers={"content-type": "application/x-ndjson"})
        # The same text by the same author in another scope is not a duplicate there.
        mine = b.post("/v1/records", json={"text": "team a secret plan 0", "author": "Ana"})
        b_id = mine.json()["id"]
        assert b_id is not None and b_id not in a_ids

        for query in ("team a secret plan", "secret", "plan", "Ana"):
            hits = b.post("/v1/search", json={"query": query, "k": 50}).json()["hits"]
            assert [h["id"] for h in hits] == [b_id], query
            assert all(h["scope"] == "team-b" for h in hits)
            block = b.post("/v1/evidence", json={"query": query}).json()
            assert [row["id"] for row in block["rows"]] == [b_id]
            assert "team a uploaded" not in block["text"]
        for guessed in [*a_ids, max(a_ids) + 1, 10_000]:
            assert b.get(f"/v1/records/{guessed}").status_code == 404
        assert b.get("/v1/records", params={"id": [b_id, a_ids[0]]}).status_code == 404
        exported = [json.loads(line) for line in b.get("/v1/export").text.splitlines()]
        assert [(r["id"], r["scope"]) for r in exported] == [(b_id, "team-b")]
        info = b.get("/v1/info").json()
        assert (info["scope"], info["records"]) == ("team-b", 1)
        assert "team-a" not in json.dumps(info)

        # And the other way round.
        hits = a.post("/v1/search", json={"query": "secret plan", "k": 50}).json()["hits"]
        assert b_id not in {h["id"] for h in hits} and len(hits) == 8
        assert a.get(f"/v1/records/{b_id}").status_code == 404


def mcp_client(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(
        streamable_http_client(
            f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)
        )
    )


def test_a_key_for_one_scope_sees_nothing_of_another_over_mcp(tenants: Tenants) -> None:
    async def main() -> None:
        async with mcp_client(tenants.url, tenants.tokens["a_write"]) as a:
            stored = await a.call_tool("remember", {"text": "team a secret plan"})
            a_id = stored.structured_content["id"]
        async with mcp_client(tenants.url, tenants.tokens["b_write"]) as b:
            found = await b.call_tool("search_memory", {"query": "team a secret plan"})
            assert found.structured_content == {"hits": []}
            block = await b.call_tool("get_evidence", {"query": "secret plan"})
            assert "team a" not in block.content[0].text
            guessed = await b.call_tool("get_record", {"id": a_id})
            assert guessed.is_error and "team-b" in guessed.content[0].text
        async with mcp_client(tenants.url, tenants.tokens["a_read"]) as reader:
            refused = await reader.call_tool("remember", {"text": "more"})
            assert refused.is_error and "write" in refused.content[0].text
            hits = await reader.call_tool("search_memory", {"query": "secret plan"})
            assert [h["id"] for h in hits.structured_content["hits"]] == [a_id]

    anyio.run(main)
    assert tenants.state.store.count("team-b", active_only=False) == 0


def test_mcp_over_http_without_a_key_is_401(tenants: Tenants) -> None:
    for headers in ({}, {"Authorization": "Bearer mempp_wrong"}):
        response = httpx.post(
            f"{tenants.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/problem+json"


def test_serve_refuses_a_public_address_without_keys(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    result = subprocess.run(
        [MEMPP, "serve", "--db", db, "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "non-loopback" in result.stderr and "mempp keys create" in result.stderr
    assert "Traceback" not in result.stderr
