"""A hostile page in a real browser (Debian's Chromium, driven by Playwright) on another
loopback origin tries to read and write a keyless mempp server, the documented local default:
reads are blocked by the browser (no CORS grant), writes by the guard (Origin, media type),
framing by the page's CSP; and a name rebound to 127.0.0.1 gets a 421. The store is counted
before and after: nothing the page sent was stored or erased.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("fastapi")

from mempp.server.app import create_app  # noqa: E402
from mempp.server.state import ServerState  # noqa: E402

from conftest import KeywordEmbedder  # noqa: E402
from serving import live_server  # noqa: E402

CHROMIUM = os.environ.get("MEMPP_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # What a DNS rebinding attack achieves: the attacker's name resolving to this machine.
    "--host-resolver-rules=MAP rebound.test 127.0.0.1",
]

pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)",
)

ATTACKER_PAGE = b"""<!doctype html><html><head><title>cute cats</title></head>
<body><p>Nothing to see here.</p></body></html>"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(ATTACKER_PAGE)))
        self.end_headers()
        self.wfile.write(ATTACKER_PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def attacker() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def mempp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerState]]:
    db = tmp_path_factory.mktemp("guard-browser") / "m.db"
    state = ServerState(str(db), embedder=KeywordEmbedder(["plan", "price", "team"]))
    state.memory("default").add(
        "The Team plan price is 15 euros.", author="Priya Nair", date="2024-03-01"
    )
    with live_server(create_app(state), lifespan="on") as url:
        yield url, state


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


ATTACKS = """async (mempp) => {
  const out = {};
  const line = JSON.stringify({text: "Team plan price is 0 euros", author: "CEO"}) + "\\n";
  try { const r = await fetch(mempp + "/v1/export"); out.read = await r.text(); }
  catch (e) { out.read = "blocked: " + e.name; }
  try { const r = await fetch(mempp + "/v1/info", {credentials: "include"});
        out.info = await r.text(); }
  catch (e) { out.info = "blocked: " + e.name; }
  const writes = [
    ["/v1/ingest", {headers: {"content-type": "text/plain"}, body: line}],
    ["/v1/ingest", {body: new Blob([line])}],
    ["/v1/records", {body: new Blob([JSON.stringify({text: "planted", author: "CEO"})])}],
    ["/v1/records", {headers: {"content-type": "text/plain"},
                     body: JSON.stringify({text: "planted", author: "CEO"})}],
    ["/v1/records/1/redact", {headers: {"content-type": "text/plain"},
                              body: JSON.stringify({reason: "gone"})}],
    ["/mcp", {headers: {"content-type": "text/plain"}, body: JSON.stringify({jsonrpc: "2.0",
      id: 1, method: "tools/call", params: {name: "remember", arguments: {text: "planted"}}})}],
    ["/upload", {body: (() => { const f = new FormData();
      f.append("files", new Blob(["planted"]), "a.md"); f.append("csrf", "x"); return f; })()}],
  ];
  out.writes = [];
  for (const [path, init] of writes) {
    try { await fetch(mempp + path, {method: "POST", mode: "no-cors", credentials: "include",
                                     ...init});
          out.writes.push(path + ": sent"); }
    catch (e) { out.writes.push(path + ": " + e.name); }
  }
  // A cross-origin fetch that asks to read the answer is preflighted, and refused.
  try { const r = await fetch(mempp + "/v1/records", {method: "POST",
          headers: {"content-type": "application/json"}, body: "{\\"text\\": \\"x\\"}"});
        out.cors_write = r.status; }
  catch (e) { out.cors_write = "blocked: " + e.name; }
  return out;
}"""


def test_a_page_on_another_loopback_origin_can_neither_read_nor_write(
    browser, attacker: str, mempp: tuple[str, ServerState]
) -> None:
    url, state = mempp
    before = state.store.count("default", active_only=False)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(attacker)
        out = page.evaluate(ATTACKS, url)
        assert out["read"].startswith("blocked"), out["read"]
        assert out["info"].startswith("blocked"), out["info"]
        assert str(out["cors_write"]).startswith("blocked"), out
        assert len(out["writes"]) == 7
    finally:
        context.close()
    assert state.store.count("default", active_only=False) == before
    record = state.store.get("default", [1])[1]
    assert record.state == "active" and "15 euros" in record.text
    hits = state.memory("default").search("Team plan price", k=5)
    assert [hit.record.author for hit in hits] == ["Priya Nair"]


def test_a_page_on_another_origin_cannot_frame_the_pages(
    browser, attacker: str, mempp: tuple[str, ServerState]
) -> None:
    url, _ = mempp
    context = browser.new_context()
    try:
        page = context.new_page()
        violations: list[str] = []
        page.on("console", lambda m: violations.append(m.text))
        page.goto(attacker)
        page.evaluate(
            """(u) => new Promise((done) => { const f = document.createElement("iframe");
                 f.src = u + "/search?q=plan"; f.onload = () => done(); f.onerror = done;
                 document.body.appendChild(f); setTimeout(done, 3000); })""",
            url,
        )
        framed = [frame for frame in page.frames if frame is not page.main_frame]
        assert framed, "no frame was made"
        assert all("Team plan" not in (frame.content() or "") for frame in framed)
        assert any("frame-ancestors" in text for text in violations), violations
    finally:
        context.close()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerState, str]]:
    from mempp.server import keys

    db = tmp_path_factory.mktemp("guard-browser-keyed") / "m.db"
    state = ServerState(str(db), embedder=KeywordEmbedder(["plan", "price", "team"]))
    state.memory("default").add(
        "The Team plan price is 15 euros.", author="Priya Nair", date="2024-03-01"
    )
    _, token = keys.create_key(state.store, scope="default", role="admin")
    with live_server(create_app(state), lifespan="on") as url:
        yield url, state, token


def test_a_logged_in_browser_is_safe_from_a_page_on_another_loopback_port(
    browser, attacker: str, keyed: tuple[str, ServerState, str]
) -> None:
    """Another port of 127.0.0.1 is the same site: the SameSite=Strict cookie goes along with
    the page's requests. The guard (Origin) and the CSP (frame-ancestors) still hold."""
    url, state, token = keyed
    before = state.store.count("default", active_only=False)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(url + "/login")
        page.fill("#key", token)
        page.press("#key", "Enter")
        page.wait_for_url(url + "/")
        assert "/login" not in page.url  # logged in
        messages: list[str] = []
        page.on("console", lambda m: messages.append(m.text))
        page.goto(attacker)
        out = page.evaluate(ATTACKS, url)
        assert out["read"].startswith("blocked") and out["info"].startswith("blocked"), out
        page.evaluate(
            """(u) => new Promise((done) => { const f = document.createElement("iframe");
                 f.src = u + "/records/1"; f.onload = () => done(); document.body.appendChild(f);
                 setTimeout(done, 3000); })""",
            url,
        )
        framed = [frame for frame in page.frames if frame is not page.main_frame]
        assert framed and all("15 euros" not in (frame.content() or "") for frame in framed)
        assert any("frame-ancestors" in text for text in messages), messages
        # The session still works on mempp's own page: nothing was logged out or changed.
        page.goto(url + "/records/1")
        assert "15 euros" in page.content()
    finally:
        context.close()
    assert state.store.count("default", active_only=False) == before
    assert state.store.get("default", [1])[1].state == "active"


def test_a_rebound_name_gets_a_421_in_the_browser(browser, mempp: tuple[str, ServerState]) -> None:
    url, state = mempp
    port = url.rsplit(":", 1)[1]
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(f"http://rebound.test:{port}/v1/export")
        assert response is not None and response.status == 421
        assert "Team plan" not in page.content()
        # The rebound page is same-origin with itself: its writes reach the server, by Host.
        status = page.evaluate(
            """async () => (await fetch("/v1/records/1/redact", {method: "POST",
                 headers: {"content-type": "application/json"},
                 body: JSON.stringify({reason: "gone"})})).status"""
        )
        assert status == 421
    finally:
        context.close()
    assert state.store.get("default", [1])[1].state == "active"
