"""The guard (mempp.server.guard) against a real uvicorn on loopback, every door and both
modes: DNS rebinding (a foreign Host), cross-origin writes (Origin, Sec-Fetch-Site), the
media types a page may send without a preflight, and the bad inputs of docs/security.md.
Each refused request is also shown to change nothing in the store.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")

from mempp.errors import InvalidInput
from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.guard import ENV_ALLOWED_HOSTS, HostName, split_host
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from serving import live_server

WORDS = ["plan", "price", "team"]
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


@dataclass
class Served:
    url: str
    port: int
    state: ServerState
    auth: dict[str, str]  # the Authorization header of an admin key ({} keyless)

    def count(self) -> int:
        return self.state.store.count("default", active_only=False)

    def active(self) -> int:
        return self.state.store.count("default")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.auth, timeout=30)


def _serve(tmp: Path, *, keyed: bool, **app_options) -> Iterator[Served]:
    state = ServerState(str(tmp / "g.db"), embedder=KeywordEmbedder(WORDS))
    state.memory("default").add_many(
        [
            {"text": "The Team plan price is 12 euros.", "author": "Ana", "date": "2024-01-01"},
            {"text": "The Team plan price is 15 euros.", "author": "Bo", "date": "2024-03-01"},
        ]
    )
    auth: dict[str, str] = {}
    if keyed:
        _, token = keys.create_key(state.store, scope="default", role="admin")
        auth = {"authorization": f"Bearer {token}"}
    with live_server(create_app(state, **app_options), lifespan="on") as url:
        yield Served(url, int(url.rsplit(":", 1)[1]), state, auth)


@pytest.fixture(params=["keyless", "keyed"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    yield from _serve(tmp_path, keyed=request.param == "keyed")


def _remember(text: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"text": text, "author": "Mallory"}},
    }


def _writes(served: Served) -> list[tuple[str, str, dict[str, object]]]:
    """One state-changing request per door: (method, path, httpx keyword arguments)."""
    return [
        ("POST", "/v1/records", {"json": {"text": "planted", "author": "Mallory"}}),
        ("POST", "/v1/records/1/redact", {"json": {"reason": "gone"}}),
        (
            "POST",
            "/v1/ingest",
            {
                "content": b'{"text": "planted by upload"}\n',
                "headers": {"content-type": "application/x-ndjson"},
            },
        ),
        ("POST", "/mcp", {"json": _remember("planted over mcp"), "headers": MCP_HEADERS}),
        ("POST", "/upload", {"files": {"files": ("a.md", b"planted by the page")}}),
        ("POST", "/logout", {"data": {"csrf": "x"}}),
    ]


def _send(served: Served, method: str, path: str, options: dict, headers: dict) -> httpx.Response:
    options = dict(options)
    merged = {**served.auth, **options.pop("headers", {}), **headers}
    with httpx.Client(base_url=served.url, timeout=30) as client:
        return client.request(method, path, headers=merged, **options)


# -- DNS rebinding: a foreign Host ----------------------------------------------------------
@pytest.mark.parametrize("door", ["/v1/export", "/v1/info", "/", "/search?q=plan", "/healthz"])
def test_a_rebound_name_reads_nothing(served: Served, door: str) -> None:
    response = _send(served, "GET", door, {}, {"host": f"attacker.example:{served.port}"})
    assert response.status_code == 421
    assert response.json()["field"] == "Host"
    assert response.json()["title"] == "Misdirected Request"
    assert "Team plan" not in response.text


def test_a_rebound_name_writes_nothing_on_any_door(served: Served) -> None:
    before = served.count(), served.active()
    for method, path, options in _writes(served):
        response = _send(served, method, path, options, {"host": f"attacker.example:{served.port}"})
        assert response.status_code == 421, (path, response.text)
    assert (served.count(), served.active()) == before
    assert served.state.store.get("default", [1])[1].state == "active"  # not redacted


def test_mcp_over_a_rebound_name_lists_no_tools(served: Served) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = _send(
        served, "POST", "/mcp", {"json": listing}, {**MCP_HEADERS, "host": "evil.test"}
    )
    assert response.status_code == 421 and "remember" not in response.text


# -- cross-origin writes ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://127.0.0.1:1"},  # another loopback origin (another port)
        {"origin": "http://attacker.example"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
    ],
    ids=["other-port", "other-site", "null", "fetch-site"],
)
def test_a_cross_origin_write_is_refused_on_every_door(served: Served, headers) -> None:
    before = served.count(), served.active()
    for method, path, options in _writes(served):
        response = _send(served, method, path, options, headers)
        assert response.status_code == 403, (path, response.status_code, response.text)
        assert response.json()["field"] in ("Origin", "Sec-Fetch-Site")
    assert (served.count(), served.active()) == before


def test_the_servers_own_origin_and_no_origin_may_write(served: Served) -> None:
    own = {"origin": served.url, "sec-fetch-site": "same-origin"}
    first = _send(served, "POST", "/v1/records", {"json": {"text": "own page"}}, own)
    assert first.status_code == 200 and first.json()["id"] is not None
    # A client that is not a browser sends no Origin (curl, an SDK): it keeps working.
    second = _send(served, "POST", "/v1/records", {"json": {"text": "from curl"}}, {})
    assert second.status_code == 200 and second.json()["id"] is not None
    tool = _send(served, "POST", "/mcp", {"json": _remember("agent note")}, MCP_HEADERS)
    assert tool.status_code == 200, tool.text
    assert served.count() == 5  # all three stored


def test_a_read_from_another_origin_gets_no_cors_grant(served: Served) -> None:
    response = _send(served, "GET", "/v1/export", {}, {"origin": "http://127.0.0.1:1"})
    assert "access-control-allow-origin" not in response.headers
    assert response.headers["cross-origin-resource-policy"] == "same-origin"


# -- media types a page can send without a preflight -----------------------------------------
@pytest.mark.parametrize(
    "kind",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/octet-stream",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ],
)
def test_api_writes_refuse_simple_media_types(served: Served, kind: str) -> None:
    before = served.count()
    line = b'{"text": "Team plan price is 0 euros", "author": "CEO"}\n'
    for path in ("/v1/ingest", "/v1/records", "/mcp"):
        body = line if path != "/mcp" else json.dumps(_remember("x")).encode()
        response = _send(
            served, "POST", path, {"content": body}, {"content-type": kind, **MCP_HEADERS}
        )
        assert response.status_code == 415, (path, response.text)
        assert response.json()["field"] == "Content-Type"
    assert served.count() == before


def test_ingest_without_a_media_type_is_refused(served: Served) -> None:
    before = served.count()
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        body = b'{"text": "no type"}\n'
        auth = "".join(f"{k}: {v}\r\n" for k, v in served.auth.items())
        sock.sendall(
            f"POST /v1/ingest HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n{auth}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 415"), reply[:200]
    assert served.count() == before


# -- the bad inputs of docs/security.md -------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("localhost.:{port}", 421),  # trailing dot: another name
        ("127.0.0.1:1", 421),  # a loopback name with another port
        ("localhost:{port}", 200),
        ("LOCALHOST:{port}", 200),
        ("127.0.0.1", 200),  # no port: the default one was not asked for by a rebinding page
        ("[::1]:{port}", 200),  # the IPv6 loopback literal
        ("[::2]:{port}", 421),  # another IPv6 literal
        ("[::1", 400),  # not a host
        ("a b", 400),
        ("127.0.0.1:99999", 400),
    ],
)
def test_host_forms(served: Served, host: str, status: int) -> None:
    response = _send(served, "GET", "/v1/info", {}, {"host": host.format(port=served.port)})
    assert response.status_code == status, response.text


def test_a_forged_forwarded_host_changes_nothing(served: Served) -> None:
    foreign = {"host": "attacker.example", "x-forwarded-host": f"127.0.0.1:{served.port}"}
    assert _send(served, "GET", "/v1/export", {}, foreign).status_code == 421
    ours = {"x-forwarded-host": "attacker.example"}  # ignored: the Host decides
    assert _send(served, "GET", "/v1/info", {}, ours).status_code == 200
    own = {"x-forwarded-host": "attacker.example", "origin": "http://attacker.example"}
    refused = _send(served, "POST", "/v1/records", {"json": {"text": "x"}}, own)
    assert refused.status_code == 403 and served.count() == 2


def test_a_request_without_host_is_refused(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(b"GET /v1/export HTTP/1.0\r\n\r\n")
        reply = sock.recv(65536)
    assert reply.split(b"\r\n", 1)[0].endswith(b"400 Bad Request"), reply[:200]
    assert b"Team plan" not in reply


# -- a reverse proxy's name -------------------------------------------------------------------
def test_allowed_hosts_let_a_proxy_name_in(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_ALLOWED_HOSTS, "env.example:8443")
    for served in _serve(tmp_path, keyed=True, allowed_hosts=["mempp.example"]):
        proxied = {"host": "mempp.example", "origin": "https://mempp.example"}
        response = _send(served, "POST", "/v1/records", {"json": {"text": "via proxy"}}, proxied)
        assert response.status_code == 200, response.text
        assert _send(served, "GET", "/v1/info", {}, {"host": "env.example:8443"}).status_code == 200
        assert _send(served, "GET", "/v1/info", {}, {"host": "env.example:1"}).status_code == 421
        other = {"host": "mempp.example", "origin": "https://evil.example"}
        assert (
            _send(served, "POST", "/v1/records", {"json": {"text": "x"}}, other).status_code == 403
        )
        assert served.count() == 3


def test_a_bad_allowed_host_is_refused_before_serving(tmp_path: Path) -> None:
    state = ServerState(str(tmp_path / "b.db"), embedder=KeywordEmbedder(WORDS))
    try:
        with pytest.raises(InvalidInput, match="allowed_host"):
            create_app(state, allowed_hosts=["http://x.example/"])
    finally:
        state.close()


def test_split_host() -> None:
    assert split_host("Example.COM:80") == HostName("example.com", 80)
    assert split_host("[::1]") == HostName("[::1]")
    assert split_host("[zz::1]:80") is None
    assert split_host("x:1:2") is None
    assert split_host("") is None


# -- response headers -------------------------------------------------------------------------
def test_every_response_is_nosniff_and_html_is_locked_down(served: Served) -> None:
    with served.client() as client:
        api = client.get("/v1/info")
        page = client.get("/login" if served.auth else "/search", follow_redirects=False)
        error = client.post("/login", data={"csrf": "forged"})  # the error page
    assert api.headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" not in api.headers
    assert api.headers["x-request-id"]
    for html in (page, error):
        assert html.headers["content-type"].startswith("text/html"), html.status_code
        csp = html.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "'unsafe-inline'" not in csp
        assert html.headers["x-frame-options"] == "DENY"
        assert html.headers["referrer-policy"] == "same-origin"
        assert html.headers["x-content-type-options"] == "nosniff"


def test_a_request_id_given_outside_the_guard_is_used_as_it_is() -> None:
    """Under a request log that gives ids (and sends the header), the guard takes that id
    and sends no second header."""
    import asyncio

    from mempp.server.guard import Guard
    from mempp.server.problems import request_id_of

    seen: dict[str, object] = {}

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        seen["id"] = request_id_of(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent: list[dict] = []

    async def send(message) -> None:  # type: ignore[no-untyped-def]
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    for state, header in (({"request_id": "outer-7"}, None), ({}, True)):
        sent.clear()
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/v1/info",
            "headers": [(b"host", b"127.0.0.1:8765")],
            "server": ("127.0.0.1", 8765),
            "state": state,
        }
        asyncio.run(Guard(app, bind_host="127.0.0.1")(scope, receive, send))
        names = [k for k, _ in sent[0]["headers"]]
        if header is None:
            assert seen["id"] == "outer-7" and b"x-request-id" not in names
        else:
            assert names.count(b"x-request-id") == 1 and seen["id"] != "outer-7"
        assert b"x-content-type-options" in names
