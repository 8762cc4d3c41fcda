"""The web pages hardened (issue 36): sessions end on the server at logout and when their
key is revoked, "Go back" stays on this site, no page loads anything from another host or
runs inline script or style, and FastAPI's CDN-loading /docs and /redoc are off.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

import httpx
import pytest

pytest.importorskip("jinja2")
pytest.importorskip("fastapi")

from mempp.errors import InvalidInput
from mempp.server import keys
from mempp.server.state import ServerState
from mempp.server.web.access import same_origin_path
from mempp.server.web.session import COOKIE
from test_web import _csrf, login
from web_support import running_server

TEMPLATES = Path(str(files("mempp.server.web") / "templates"))


@pytest.fixture
def served(tmp_path: Path):
    with running_server(tmp_path) as server:
        yield server


def test_a_cookie_replayed_after_logout_gets_the_login_page(served) -> None:
    client = login(served, "read")
    cookie = client.cookies[COOKIE]
    page = client.get("/search")
    assert page.status_code == 200
    assert client.post("/logout", data={"csrf": _csrf(page.text)}).status_code == 303
    replay = httpx.get(f"{served.url}/search?q=plan", cookies={COOKIE: cookie}, timeout=30)
    assert replay.status_code == 303 and replay.headers["location"].startswith("/login")
    again = httpx.get(f"{served.url}/records/1", cookies={COOKIE: cookie}, timeout=30)
    assert again.status_code == 303


def test_revoking_a_key_ends_its_sessions(served) -> None:
    state = ServerState(str(served.db))
    try:
        key, token = keys.create_key(state.store, scope="default", role="read")
        served.tokens["fresh"] = token
        first, second = login(served, "fresh"), login(served, "fresh")
        assert first.get("/search").status_code == 200
        keys.revoke_key(state.store, key.key_id)
        for client in (first, second):
            assert client.get("/search").status_code == 303
        # The session keys are the server's own: not listed, and no label can pose as one.
        listed = keys.list_keys(state.store, "default")
        assert all(not k.label or not k.label.startswith(keys.SESSION_LABEL) for k in listed)
        assert len(keys.list_keys(state.store, "default", sessions=True)) > len(listed)
        with pytest.raises(InvalidInput, match="session"):
            keys.create_key(state.store, scope="default", role="admin", label="web session of x")
    finally:
        state.close()


def test_a_session_key_dies_with_its_login_age(served, monkeypatch) -> None:
    client = login(served, "read")
    assert client.get("/search").status_code == 200
    monkeypatch.setattr(keys, "SESSION_MAX_S", 0)  # every session is now older than a login
    assert client.get("/search").status_code == 303


@pytest.mark.parametrize(
    "referer",
    [
        "{url}//other.example/x",
        "{url}/\\other.example/x",
        "http://other.example/records/1",
        "{url}@other.example/x",
        "javascript:alert(1)",
    ],
)
def test_go_back_never_leaves_the_site(served, referer: str) -> None:
    client = login(served, "read")
    page = client.get("/records/abc", headers={"referer": referer.format(url=served.url)})
    assert page.status_code == 404
    back = re.search(r'<a class="button" href="([^"]*)">Go back</a>', page.text)
    assert back is not None and back.group(1) == "/", back


def test_go_back_returns_to_the_page_of_this_site(served) -> None:
    client = login(served, "read")
    page = client.get("/records/abc", headers={"referer": f"{served.url}/search?q=plan"})
    back = re.search(r'<a class="button" href="([^"]*)">Go back</a>', page.text)
    assert back is not None and back.group(1) == "/search?q=plan"


def test_same_origin_path() -> None:
    assert same_origin_path("/records/2?x=1") == "/records/2?x=1"
    for bad in ("//evil", "/\\evil", "https://evil", "/\t/evil", "", None, "records"):
        assert same_origin_path(bad) is None


def test_docs_and_redoc_are_off_and_the_schema_stays(served) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert httpx.get(served.url + path, timeout=30).status_code == 404
    assert httpx.get(served.url + "/openapi.json", timeout=30).status_code == 200


def test_no_template_has_inline_script_style_or_another_host() -> None:
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        for tag in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in tag, f"{template.name}: inline script {tag}"
        assert "<style" not in text, template.name
        assert not re.search(r"\sstyle=", text), f"{template.name}: a style attribute"
        assert not re.search(r"\son[a-z]+=", text), f"{template.name}: an event handler"
        assert not re.search(r"(src|href)=\"(https?:)?//", text), f"{template.name}: other host"


def test_every_page_is_served_with_the_policy(served) -> None:
    client = login(served, "write")
    for path in (
        "/search?q=plan",
        "/evidence?q=plan",
        "/records/1",
        "/timeline?q=plan",
        "/changes",
        "/upload",
        "/records/99999",
    ):
        page = client.get(path)
        assert page.headers["content-type"].startswith("text/html"), path
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"], path
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "same-origin"
        assert not re.search(r"(src|href)=\"(https?:)?//", page.text), path
