"""OAuth 2.1 bearer tokens on /v1 and /mcp, against a local authorization server started in
the test (its metadata and JWKS over real HTTP on loopback; tokens signed by joserfc): good
tokens act on their one scope with their role; expired, wrong-audience, wrong-issuer,
unsigned, HMAC-forged, wrong-key and scope-less tokens, and any token while the issuer's keys
cannot be fetched, are 401s with a reason and a challenge pointing to the metadata."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("joserfc")

from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from mempp import Client, Forbidden, Unauthorized
from mempp.server.app import create_app
from mempp.server.keys import create_key
from mempp.server.oauth import OAuthVerifier
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from serving import live_server

KEYWORDS = ["alpha", "beta", "gamma", "plan", "launch", "budget"]
AUDIENCE = "https://memory.example/mcp"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@dataclass
class AuthServer:
    """The issuer: RFC 8414 metadata and a JWKS, over HTTP on loopback; ``down`` makes it
    answer 503 to everything."""

    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, parameters={"kid": "k1"}))
    down: bool = False
    url: str = ""
    fetches: int = 0

    def __enter__(self) -> AuthServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.fetches += 1
                if owner.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                if self.path == "/.well-known/oauth-authorization-server":
                    body: Any = {"issuer": owner.url, "jwks_uri": owner.url + "/jwks"}
                elif self.path == "/jwks":
                    body = {"keys": [owner.key.as_dict(private=False)]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def token(self, scope: str, *, key: Any = None, alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "agent-7", "iat": now, "exp": now + 300}
        body.update(scope=scope, **claims)
        body = {name: value for name, value in body.items() if value is not None}
        header = {"alg": alg, "kid": "k1"}
        return jwt.encode(header, body, key or self.key, algorithms=[alg])


@dataclass
class Served:
    url: str
    auth: AuthServer
    state: ServerState


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with AuthServer() as auth:
        state = ServerState(
            str(tmp_path / "m.db"),
            embedder=KeywordEmbedder(KEYWORDS),
            oauth=OAuthVerifier(auth.url, AUDIENCE),
        )
        with live_server(create_app(state)) as url:
            yield Served(url, auth, state)


def test_a_token_acts_on_its_scope_with_its_role(served: Served) -> None:
    writer = served.auth.token("openid mempp:team-a:read mempp:team-a:write")
    with Client(served.url, api_key=writer) as a:
        assert a.add("The alpha launch is on Friday.", author="Ana").id == 1
        assert a.info().scope == "team-a" and a.info().role == "write"
        with pytest.raises(Forbidden):
            a.archive(1, reason="not an admin")
    with Client(served.url, api_key=served.auth.token("mempp:team-b:admin")) as b:
        assert b.search("alpha launch") == []  # another scope: nothing of team-a's
        b.add("Team b's own note about the launch.")
    with Client(served.url, api_key=served.auth.token("mempp:team-a:read")) as reader:
        assert [h.id for h in reader.search("alpha launch")] == [1]
        with pytest.raises(Forbidden):
            reader.add("read only")
    corrections_by = served.state.store.count("team-a"), served.state.store.count("team-b")
    assert corrections_by == (1, 1)


def test_api_keys_still_work_beside_oauth(served: Served) -> None:
    _, key = create_key(served.state.store, scope="team-a", role="read")
    with Client(served.url, api_key=key) as client:
        assert client.info().scope == "team-a"
    wrong = Client(served.url, api_key="mempp_000000000000_" + "x" * 43)
    with wrong, pytest.raises(Unauthorized, match="unknown or revoked"):
        wrong.info()


def test_the_metadata_and_the_challenge(served: Served) -> None:
    with httpx.Client(base_url=served.url) as c:
        meta = c.get("/.well-known/oauth-protected-resource").json()
        assert meta["authorization_servers"] == [served.auth.url]
        assert meta["resource"] == AUDIENCE
        assert c.get("/.well-known/oauth-protected-resource/mcp").json() == meta
        for path, call in (
            ("/v1/info", lambda: c.get("/v1/info")),
            ("/mcp", lambda: c.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)),
        ):
            refused = call()
            assert refused.status_code == 401, path
            challenge = refused.headers["www-authenticate"]
            assert f'resource_metadata="{served.url}/.well-known/oauth-protected-resource"' in (
                challenge
            )
        token = served.auth.token("mempp:team-a:read")
        ok = c.post(
            "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        )
        assert ok.status_code == 200
        assert "serverInfo" in ok.text


def _unsigned(auth: AuthServer) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"iss": auth.url, "aud": AUDIENCE, "exp": now + 300, "scope": "mempp:team-a:admin"}
    return part({"alg": "none", "kid": "k1"}) + "." + part(claims) + "."


def test_bad_tokens_are_refused_with_a_reason(served: Served) -> None:
    auth = served.auth
    now = int(time.time())
    other_key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    forged_secret = OctKey.import_key(json.dumps(auth.key.as_dict(private=False)).encode())
    cases = {
        "expired": (auth.token("mempp:team-a:read", exp=now - 10), "expired"),
        "no expiry": (auth.token("mempp:team-a:read", exp=None), "expiry"),
        "audience": (auth.token("mempp:team-a:read", aud="https://other.example"), "audience"),
        "issuer": (auth.token("mempp:team-a:read", iss="http://evil.example"), "issuer"),
        "unsigned": (_unsigned(auth), "'none' is not accepted"),
        "hmac": (auth.token("mempp:team-a:read", key=forged_secret, alg="HS256"), "HS256"),
        "wrong key": (auth.token("mempp:team-a:read", key=other_key), "signature"),
        "no scope": (auth.token("openid profile"), "no memory scope"),
        "two scopes": (auth.token("mempp:team-a:read mempp:team-b:read"), "several"),
        "garbage": ("aaaa.bbbb.cccc", "readable"),
    }
    with httpx.Client(base_url=served.url) as c:
        for name, (token, reason) in cases.items():
            for path in ("/v1/info", "/mcp"):
                if path == "/v1/info":
                    refused = c.get(path, headers={"Authorization": f"Bearer {token}"})
                else:
                    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
                    refused = c.post(path, json=INITIALIZE, headers=headers)
                assert refused.status_code == 401, (name, path, refused.text)
                assert reason in refused.json()["detail"], (name, refused.json()["detail"])
                assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    assert served.state.store.count("team-a") == 0


def test_keys_that_cannot_be_fetched_refuse_every_token(tmp_path: Path) -> None:
    with AuthServer() as auth:
        auth.down = True
        state = ServerState(
            str(tmp_path / "m.db"),
            embedder=KeywordEmbedder(KEYWORDS),
            oauth=OAuthVerifier(auth.url, AUDIENCE, timeout_s=2),
        )
        with live_server(create_app(state)) as url, httpx.Client(base_url=url) as c:
            token = auth.token("mempp:team-a:admin")
            refused = c.get("/v1/info", headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 401
            assert "cannot be fetched" in refused.json()["detail"]
            auth.down = False  # back: the next token is checked against the fetched keys
            assert (
                c.get("/v1/info", headers={"Authorization": f"Bearer {token}"}).json()["scope"]
                == "team-a"
            )


def test_the_options_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mempp.errors import InvalidInput
    from mempp.server.app import open_state
    from mempp.server.config import ServeConfig
    from mempp.server.oauth import from_environment

    monkeypatch.delenv("MEMPP_OAUTH_ISSUER", raising=False)
    monkeypatch.delenv("MEMPP_OAUTH_AUDIENCE", raising=False)
    assert from_environment(None, None) is None
    with pytest.raises(InvalidInput, match="give --oauth-audience too"):
        from_environment("https://auth.example", None)
    monkeypatch.setenv("MEMPP_OAUTH_ISSUER", "https://auth.example/")
    monkeypatch.setenv("MEMPP_OAUTH_AUDIENCE", AUDIENCE)
    config = ServeConfig(str(tmp_path / "m.db"), host="0.0.0.0")
    state = open_state(config)  # a public address without keys: OAuth guards it
    try:
        assert state.oauth is not None and state.oauth.issuer == "https://auth.example"
        assert state.keys_required
    finally:
        state.close()
