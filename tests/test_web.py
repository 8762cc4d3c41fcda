"""The web page over HTTP (a real uvicorn on a loopback port): login, sessions, CSRF, the
pages' content, and readable error pages for bad input. The browser tests are in
test_web_browser.py."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import httpx
import pytest

pytest.importorskip("jinja2")
pytest.importorskip("fastapi")

from fastapi import FastAPI

from mempp import Memory
from mempp.records import Hit, Record
from mempp.server.web import mount
from mempp.server.web.session import COOKIE, SessionCodec
from web_support import WORDS, running_server

from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, fast_client


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    with running_server(tmp_path_factory.mktemp("web")) as server:
        yield server


@pytest.fixture
def uploads(tmp_path: Path):
    """A server of its own for each upload test, so uploads change no other test's store."""
    with running_server(tmp_path) as server:
        yield server


def _csrf(html: str) -> str:
    found = re.search(r'name="(?:mempp-)?csrf" (?:value|content)="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def login(served, name: str) -> httpx.Client:
    client = httpx.Client(base_url=served.url, follow_redirects=False, timeout=30)
    form = client.get("/login")
    response = client.post(
        "/login", data={"key": served.tokens[name], "csrf": _csrf(form.text), "next": "/search"}
    )
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/search"
    return client


def assert_error_page(response: httpx.Response, status: int, *phrases: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert "Traceback" not in response.text and 'File "' not in response.text
    assert "Go back" in response.text
    for phrase in phrases:
        assert phrase in response.text


# -- login and sessions --------------------------------------------------------------------
def test_pages_ask_for_a_login_and_come_back_after_it(served) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        first = client.get("/search?q=plan", follow_redirects=False)
        assert first.status_code == 303
        assert first.headers["location"] == "/login?next=%2Fsearch%3Fq%3Dplan"
        form = client.get(first.headers["location"])
        assert 'value="/search?q=plan"' in form.text
        done = client.post(
            "/login",
            data={"key": served.tokens["read"], "csrf": _csrf(form.text), "next": "/search?q=plan"},
            follow_redirects=False,
        )
        assert done.headers["location"] == "/search?q=plan"
        page = client.get("/search?q=plan")
        assert page.status_code == 200 and "scope <b>default</b> · read" in page.text


def test_session_cookie_is_httponly_strict_and_hides_the_key(served) -> None:
    client = httpx.Client(base_url=served.url, timeout=30)
    form = client.get("/login")
    response = client.post("/login", data={"key": served.tokens["write"], "csrf": _csrf(form.text)})
    header = response.headers["set-cookie"]
    assert header.startswith(f"{COOKIE}=")
    assert "HttpOnly" in header and "SameSite=strict" in header.replace("Strict", "strict")
    value = header.split(";", 1)[0].split("=", 1)[1]
    secret = served.tokens["write"].rsplit("_", 1)[1]
    assert secret not in value and served.tokens["write"] not in value


@pytest.mark.parametrize("name", ["revoked", None])
def test_an_unknown_or_revoked_key_does_not_log_in(served, name) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        form = client.get("/login")
        key = served.tokens[name] if name else "mempp_000000000000_" + "x" * 43
        response = client.post("/login", data={"key": key, "csrf": _csrf(form.text)})
        assert response.status_code == 401
        assert "Unknown or revoked key" in response.text
        assert client.get("/search", follow_redirects=False).status_code == 303


def test_a_forged_or_foreign_cookie_is_no_session(served) -> None:
    foreign = SessionCodec("another server's secret")
    cookie = foreign.dump(foreign.new(served.tokens["write"]))
    with httpx.Client(base_url=served.url, cookies={COOKIE: cookie}, timeout=30) as client:
        assert client.get("/search", follow_redirects=False).status_code == 303
    with httpx.Client(base_url=served.url, cookies={COOKIE: "garbage"}, timeout=30) as client:
        assert client.get("/search", follow_redirects=False).status_code == 303


def test_login_and_writes_refuse_a_missing_csrf_token(served) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        client.get("/login")
        response = client.post("/login", data={"key": served.tokens["write"], "csrf": "nope"})
        assert_error_page(response, 403, "Form expired")
    client = login(served, "uploads")
    before = len(Memory(served.db, scope="uploads", embedder=KeywordEmbedder(WORDS)))
    response = client.post("/upload", files={"files": ("a.md", b"hello")}, data={"csrf": "forged"})
    assert_error_page(response, 403, "Form expired")
    assert len(Memory(served.db, scope="uploads", embedder=KeywordEmbedder(WORDS))) == before


def test_logout_ends_the_session(served) -> None:
    client = login(served, "read")
    page = client.get("/search")
    response = client.post("/logout", data={"csrf": _csrf(page.text)})
    assert response.status_code == 303
    assert client.get("/search", follow_redirects=False).status_code == 303


def test_login_never_redirects_off_the_site(served) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        form = client.get("/login?next=//evil.example/x")
        response = client.post(
            "/login",
            data={"key": served.tokens["read"], "csrf": _csrf(form.text), "next": "//evil.example"},
            follow_redirects=False,
        )
        assert response.headers["location"] == "/"


# -- pages ---------------------------------------------------------------------------------
def test_search_shows_rank_date_author_legs_and_links(served) -> None:
    client = login(served, "read")
    page = client.get("/search", params={"q": "Team plan pricing", "k": "5"})
    assert page.status_code == 200
    expected = Memory(served.db, embedder=KeywordEmbedder(WORDS)).search("Team plan pricing", k=5)
    shown = re.findall(
        r'<li class="hit( reserved)?" data-date="[^"]*">\s*<div class="hit-head">'
        r'\s*<span class="rank" title="rank">(\d+)</span>\s*<a class="hit-link" '
        r'href="/records/(\d+)">',
        page.text,
    )
    assert [(int(rank), int(rid), bool(slot)) for slot, rank, rid in shown] == [
        (hit.rank, hit.id, hit.reserved) for hit in expected
    ]
    for hit in expected:
        for leg, leg_rank in hit.leg_ranks.items():
            assert f"{leg} #{leg_rank}" in page.text
    assert page.text.count("recency slot</span>") == sum(hit.reserved for hit in expected)
    assert "Dana Whitfield" in page.text and "2024-09-30" in page.text
    # The slider spans the scope's dates.
    assert 'data-first="2024-01-15"' in page.text


def test_a_recency_slot_is_marked_as_one() -> None:
    # How many slots a search reserves depends on k and the preset; the mark must not.
    app = FastAPI()
    mount(app, secret="test")
    record = Record(7, "Newest note.", "Ana", "2024-05-01", (), None, "default", "", "active", None)
    hit = Hit(record, 3, 0.01, {"vec": 5}, reserved=True)
    template = app.state.mempp_web_templates.get_template("_hit.html")
    html = template.render(hit=hit, excerpt=280, successors={})
    assert '<li class="hit reserved"' in html and "recency slot</span>" in html
    assert "vec #5" in html and 'href="/records/7"' in html


def test_search_as_of_leaves_later_records_out(served) -> None:
    client = login(served, "read")
    ids = served.ids
    page = client.get("/search", params={"q": "Team plan pricing", "as_of": "2024-06-30"})
    days = re.findall(r'<time class="date" datetime="([\d-]+)"', page.text)
    assert days and max(days) <= "2024-06-30"
    # Not even as the replacement of the raise: on 2024-06-30 the reversal was not written.
    assert f'href="/records/{ids["reversal"]}"' not in page.text
    assert f'superseded by <a href="/records/{ids["raise"]}">' in page.text
    later = client.get("/search", params={"q": "Team plan pricing"})
    assert f'superseded by <a href="/records/{ids["reversal"]}">' in later.text


def test_search_filters_narrow_before_ranking(served) -> None:
    client = login(served, "read")
    page = client.get("/search", params={"q": "Team plan pricing", "author": "Priya Nair"})
    authors = re.findall(r'<span class="author">([^<]+)</span>', page.text)
    assert authors and set(authors) == {"Priya Nair"}
    assert 'id="author" name="author" type="text" value="Priya Nair"' in page.text
    before = client.get("/search", params={"q": "Team plan pricing", "known_at": "2000-01-01"})
    assert "0 hits" in before.text and "known at 2000-01-01" in before.text
    tagged = client.get("/search", params={"q": "plan", "tags": "decision", "tags_mode": "all"})
    ids = {int(i) for i in re.findall(r'class="hit-link" href="/records/(\d+)"', tagged.text)}
    assert ids == {served.ids["raise"], served.ids["reversal"]}


def test_evidence_shows_the_block_with_budget_and_record_links(served) -> None:
    client = login(served, "read")
    memory = Memory(served.db, embedder=KeywordEmbedder(WORDS))
    expected = memory.evidence("Team plan", k=4, budget=500)
    page = client.get("/evidence", params={"q": "Team plan", "k": "4", "budget": "500"})
    assert page.status_code == 200
    assert f"{len(expected.text)} of 500 characters" in page.text
    for row in expected.rows:
        assert f'<a href="/records/{row.id}">' in page.text
    assert "Ask the model" not in page.text  # no LLM configured


def test_record_page_shows_both_supersession_directions_and_the_log(served) -> None:
    client = login(served, "read")
    ids = served.ids
    page = client.get(f"/records/{ids['raise']}")
    assert page.status_code == 200
    replaced = page.text.split("It replaced", 1)[1].split("Replaced by", 1)
    assert f'href="/records/{ids["kickoff"]}"' in replaced[0]
    assert f'href="/records/{ids["reversal"]}"' in replaced[1]
    assert "consolidate #" in page.text and "conflict" in page.text
    first = client.get(f"/records/{ids['kickoff']}")
    # The chain goes on: the kickoff was replaced by the raise, which the reversal replaced.
    newer = first.text.split("Replaced by", 1)[1]
    assert newer.index(f"record {ids['raise']}") < newer.index(f"record {ids['reversal']}")


def test_timeline_draws_versions_arrows_and_the_as_of_line(served) -> None:
    client = login(served, "read")
    ids = served.ids
    page = client.get("/timeline", params={"record": ids["kickoff"], "as_of": "2024-06-30"})
    assert page.status_code == 200
    svg = page.text.split("<svg", 1)[1].split("</svg>", 1)[0]
    points = re.findall(
        r'class="version (\w+)( after)?[^"]*" data-date="([\d-]+)" data-id="(\d+)"', svg
    )
    # The chain, and whatever the legs rank close to the kickoff (history's neighbours).
    assert {int(p[3]) for p in points} >= {ids["kickoff"], ids["raise"], ids["reversal"]}
    assert all(bool(p[1]) == (p[2] > "2024-06-30") for p in points)
    assert svg.count('class="arrow"') == 2
    assert f"record {ids['kickoff']} superseded by record {ids['raise']}" in svg
    assert 'class="as-of-line"' in svg and 'visibility="hidden"' not in svg
    assert "Priya Nair" in svg and "Dana Whitfield" in svg  # a lane per author


def test_timeline_of_a_query_draws_its_history(served) -> None:
    client = login(served, "read")
    page = client.get("/timeline", params={"q": "Team plan price raise"})
    assert page.status_code == 200
    memory = Memory(served.db, embedder=KeywordEmbedder(WORDS))
    entries = memory.history("Team plan price raise")
    svg = page.text.split("<svg", 1)[1].split("</svg>", 1)[0]
    drawn = {int(i) for i in re.findall(r'data-id="(\d+)"', svg)}
    assert drawn == {e.record.id for e in entries if e.record.day}
    assert "subject" in page.text
    empty = client.get("/timeline")
    assert empty.status_code == 200 and "<svg" not in empty.text


def test_changes_between_two_dates(served) -> None:
    client = login(served, "read")
    ids = served.ids
    page = client.get("/changes", params={"since": "2024-09-01", "until": "2024-09-30"})
    assert page.status_code == 200
    entered = page.text.split('id="entered"', 1)[1].split("</ol>", 1)[0]
    superseded = page.text.split('id="superseded"', 1)[1].split("</ol>", 1)[0]
    assert f'href="/records/{ids["reversal"]}"' in entered
    assert f'href="/records/{ids["raise"]}"' in superseded
    assert f'href="/records/{ids["kickoff"]}"' not in page.text
    blank = client.get("/changes")
    assert 'value="2024-01-15"' in blank.text and 'value="2024-09-30"' in blank.text


def test_another_scopes_record_has_no_timeline(served) -> None:
    client = login(served, "read")
    response = client.get("/timeline", params={"record": served.ids["other"]})
    assert_error_page(response, 404, "No such record")
    assert "secret" not in response.text


def test_record_page_shows_its_thread_before_and_after(served) -> None:
    client = login(served, "read")
    first = client.get(f"/records/{served.ids['thread_first']}")
    assert "Thread launch-2024" in first.text and "It opens this thread." in first.text
    after = first.text.split("After it", 1)[1]
    assert f'href="/records/{served.ids["thread_last"]}"' in after
    last = client.get(f"/records/{served.ids['thread_last']}")
    before = last.text.split("Before it", 1)[1].split("After it", 1)[0]
    assert f'href="/records/{served.ids["thread_first"]}"' in before
    assert "Nothing later in this thread." in last.text


def test_ask_answers_with_links_to_the_cited_records(tmp_path: Path) -> None:
    with (
        FakeOpenAI() as llm_server,
        running_server(tmp_path, llm=fast_client(llm_server)) as served,
    ):
        reversal = served.ids["reversal"]
        llm_server.reply_json({"answer": "$12 on annual contracts.", "citations": [reversal]})
        client = login(served, "read")
        page = client.get("/evidence", params={"q": "Team plan price", "as_of": "2024-12-31"})
        assert "Ask the model" in page.text
        answer = client.post(
            "/ask",
            data={"q": "Team plan price", "as_of": "2024-12-31", "csrf": _csrf(page.text)},
        )
        assert answer.status_code == 200
        section = answer.text.split('aria-label="answer"', 1)[1].split("</section>", 1)[0]
        assert "$12 on annual contracts." in section
        assert f'href="/records/{reversal}"' in section
        prompt = llm_server.requests[0].body["messages"][-1]["content"]
        assert f"record {reversal}" in prompt and "2024-12-31" in prompt
        refused = client.post("/ask", data={"q": "Team plan price", "csrf": "forged"})
        assert_error_page(refused, 403, "Form expired")
        assert len(llm_server.requests) == 1


def test_ask_without_a_language_model_is_a_readable_refusal(served) -> None:
    client = login(served, "read")
    token = _csrf(client.get("/evidence").text)
    response = client.post("/ask", data={"q": "Team plan", "csrf": token})
    assert_error_page(response, 503, "no LLM endpoint")


# -- bad input -----------------------------------------------------------------------------
def test_another_scopes_record_is_not_found(served) -> None:
    client = login(served, "read")
    response = client.get(f"/records/{served.ids['other']}")
    assert_error_page(response, 404, "No such record")
    assert "secret" not in response.text


@pytest.mark.parametrize(
    ("path", "status", "phrase"),
    [
        ("/records/abc", 404, "not a record id"),
        ("/records/0", 404, "no record"),
        ("/records/99999", 404, "no record 99999"),
        ("/search?q=plan&as_of=2024-13-45", 400, "as_of"),
        ("/search?q=plan&as_of=yesterday", 400, "as_of"),
        ("/search?q=plan&k=lots", 400, "k:"),
        ("/search?q=plan&k=0", 400, "k:"),
        ("/evidence?q=plan&budget=-3", 400, "budget"),
        ("/timeline?record=x1", 404, "not a record id"),
        ("/timeline?record=1&as_of=2024-02-30", 400, "as_of"),
        ("/search?q=plan&known_at=soon", 400, "known_at"),
        ("/search?q=plan&tags=x&tags_mode=most", 400, "tags_mode"),
        ("/changes?since=2024-01-01", 400, "until"),
        ("/changes?since=2024-05-01&until=2024-01-01", 400, "since"),
        ("/changes?since=2024-01-01&until=later", 400, "until"),
    ],
)
def test_bad_input_gets_a_readable_page(served, path, status, phrase) -> None:
    client = login(served, "read")
    assert_error_page(client.get(path), status, phrase)


def test_read_keys_cannot_upload(served) -> None:
    client = login(served, "read")
    assert_error_page(client.get("/upload"), 403, "write role")
    assert "/upload" not in client.get("/search").text.split("</nav>")[0]


# -- upload --------------------------------------------------------------------------------
def _upload(client: httpx.Client, files, fragment: bool = False) -> httpx.Response:
    token = _csrf(client.get("/upload").text)
    headers = {"X-Mempp-Fragment": "1"} if fragment else {}
    return client.post("/upload", files=files, data={"csrf": token}, headers=headers)


def test_upload_stores_files_and_reports_per_item(uploads) -> None:
    client = login(uploads, "uploads")
    note = b"---\nauthor: Ana\ndate: 2024-10-01\n---\nThe launch moved to Tuesday.\n"
    lines = b'{"text": "Seat count is 40.", "date": "2024-10-02"}\nnot json\n{"author": "x"}\n'
    response = _upload(
        client, [("files", ("note.md", note)), ("files", ("batch.jsonl", lines))], fragment=True
    )
    assert response.status_code == 200
    assert "added 2, skipped 0, failed 2" in response.text
    assert "batch.jsonl:2" in response.text and "invalid JSON" in response.text
    assert "batch.jsonl:3" in response.text and "text" in response.text.split("batch.jsonl:3")[1]
    again = _upload(client, [("files", ("note.md", note))])
    assert "added 0, skipped 1 (1 duplicate)" in again.text
    memory = Memory(uploads.db, scope="uploads", embedder=KeywordEmbedder(WORDS))
    stored = {r.text: r for r in memory.records()}
    assert stored["The launch moved to Tuesday."].source == "note.md"
    assert stored["The launch moved to Tuesday."].author == "Ana"


def _slack_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("users.json", json.dumps([{"id": "U1", "real_name": "Ana Ruiz"}]))
        archive.writestr("channels.json", json.dumps([{"id": "C1", "name": "pricing"}]))
        archive.writestr(
            "pricing/2024-03-12.json",
            json.dumps(
                [
                    {
                        "type": "message",
                        "user": "U1",
                        "ts": "1710234567.0002",
                        "text": "Seat is $15.",
                    },
                    {
                        "type": "message",
                        "subtype": "channel_join",
                        "user": "U1",
                        "ts": "1710230000.1",
                    },
                ]
            ),
        )
    return buffer.getvalue()


def _mbox() -> bytes:
    return (
        b"From ana@example.com Tue Mar 12 09:00:00 2024\n"
        b"From: Ana Ruiz <ana@example.com>\nTo: team@example.com\n"
        b"Subject: Seat price\nDate: Tue, 12 Mar 2024 09:00:00 +0000\n"
        b"Message-ID: <p1@example.com>\n\nThe seat price is $15 from April.\n"
    )


def test_upload_reads_a_slack_export_and_a_mailbox(uploads) -> None:
    client = login(uploads, "uploads")
    response = _upload(
        client,
        [("files", ("export.zip", _slack_zip())), ("files", ("team.mbox", _mbox()))],
        fragment=True,
    )
    assert response.status_code == 200, response.text
    assert "added 2, skipped 1 (1 channel_join), failed 0" in response.text
    assert "<td>slack</td>" in response.text and "<td>mail</td>" in response.text
    memory = Memory(uploads.db, scope="uploads", embedder=KeywordEmbedder(WORDS))
    stored = list(memory.records())
    assert [r.author for r in stored] == ["Ana Ruiz", "Ana Ruiz"]
    assert "Seat is $15." in stored[0].text and stored[0].day == "2024-03-12"
    assert "seat price is $15 from April" in stored[1].text
    assert all("mempp-upload-" not in (r.source or "") for r in stored)


def test_an_upload_skips_what_is_stored_by_source_as_mempp_import_does(uploads) -> None:
    # A Message-ID names one message: the same mail uploaded again with another body is
    # already imported, as `mempp import mail` and POST /v1/import/mail judge it.
    client = login(uploads, "uploads")
    first = _upload(client, [("files", ("team.mbox", _mbox()))], fragment=True)
    assert "added 1, skipped 0, failed 0" in first.text
    edited = _mbox().replace(b"from April", b"from May")
    again = _upload(client, [("files", ("again.mbox", edited))], fragment=True)
    assert "added 0, skipped 1 (1 already imported), failed 0" in again.text
    memory = Memory(uploads.db, scope="uploads", embedder=KeywordEmbedder(WORDS))
    assert [r.text.endswith("from April.") for r in memory.records()] == [True]


def test_a_zip_that_is_no_export_stores_nothing(uploads) -> None:
    client = login(uploads, "uploads")
    memory = Memory(uploads.db, scope="uploads", embedder=KeywordEmbedder(WORDS))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes/readme.md", "not a Slack export")
    response = _upload(
        client,
        [("files", ("ok.md", b"A fine note.")), ("files", ("photos.zip", buffer.getvalue()))],
    )
    assert_error_page(response, 400, "photos.zip", "Nothing was stored")
    assert len(memory) == 0


@pytest.mark.parametrize("fragment", [False, True])
def test_upload_of_the_wrong_kind_stores_nothing(uploads, fragment) -> None:
    client = login(uploads, "uploads")
    memory = Memory(uploads.db, scope="uploads", embedder=KeywordEmbedder(WORDS))
    before = len(memory)
    response = _upload(
        client,
        [("files", ("ok.txt", b"fine text")), ("files", ("photo.png", b"\x89PNG..."))],
        fragment=fragment,
    )
    assert response.status_code == 400
    assert "photo.png" in response.text and "Nothing was stored" in response.text
    assert len(memory) == before


def test_upload_with_no_file_is_refused(uploads) -> None:
    client = login(uploads, "uploads")
    token = _csrf(client.get("/upload").text)
    assert_error_page(client.post("/upload", data={"csrf": token}), 400, "at least one file")


def test_web_routes_stay_out_of_the_api_schema(served) -> None:
    schema = httpx.get(served.url + "/openapi.json", timeout=30).json()
    assert not any(path in schema["paths"] for path in ("/search", "/login", "/upload", "/"))


def test_assets_ship_in_the_package(served) -> None:
    for asset in ("mempp.css", "mempp.js", "favicon.svg"):
        assert httpx.get(f"{served.url}/static/{asset}", timeout=30).status_code == 200


# -- a server without keys (loopback) ------------------------------------------------------
def test_a_keyless_loopback_server_serves_the_default_scope_with_csrf(tmp_path: Path) -> None:
    with running_server(tmp_path, with_keys=False) as server:
        client = httpx.Client(base_url=server.url, timeout=30)
        page = client.get("/search?q=plan")
        assert page.status_code == 200 and "scope <b>default</b> · admin" in page.text
        assert "Log out" not in page.text
        assert client.get("/login?next=/upload").headers["location"] == "/upload"
        response = client.post("/upload", files={"files": ("a.md", b"x")}, data={"csrf": "no"})
        assert response.status_code == 403
        ok = _upload(client, [("files", ("a.md", b"A keyless note."))])
        assert "added 1" in ok.text


def test_record_page_names_a_manual_correction_by_what_it_did(uploads) -> None:
    with Memory(str(uploads.db), embedder=KeywordEmbedder(WORDS)) as memory:
        first, later = uploads.ids["thread_first"], uploads.ids["thread_last"]
        done = memory.supersede(first, by=later, reason="newer")
        memory.undo(done.run_id)
    client = login(uploads, "read")
    page = client.get(f"/records/{first}")
    assert page.status_code == 200
    # Issue 30: a manual supersede read "consolidate #1" in the change log.
    assert f"<b>supersede #{done.run_id}</b>" in page.text
    assert f"<b>undo #{done.run_id + 1}</b>" in page.text and f"of #{done.run_id}" in page.text
    assert f"consolidate #{done.run_id}" not in page.text
