"""``POST /v1/import/{source}`` over a real uvicorn, on both engines: a tool's export sent as
the body is stored as ``mempp import`` stores it, every item accounted for, a second send adds
nothing, a dry run stores nothing, and bad requests (an unknown importer, a file of another
kind, no or a CORS-simple media type, a zip that is not one) are refused with nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mempp import Memory
from mempp.importers import get, run_import
from mempp.server.app import create_app
from mempp.server.state import ServerState
from tool_samples import sample

from conftest import KeywordEmbedder
from engines import engine_location, pg_server, pg_url  # noqa: F401 - fixtures
from serving import live_server

WORDS = ["issue", "review", "launch", "meeting", "budget"]
VTT = """WEBVTT

00:00:01.000 --> 00:00:04.000
<v Ana>We ship the launch on Friday.

00:00:05.000 --> 00:00:09.000
<v Bo>Then the budget review moves to Monday.
"""


@pytest.fixture
def served(engine_location: str) -> Iterator[tuple[httpx.Client, ServerState]]:  # noqa: F811
    state = ServerState(engine_location, embedder=KeywordEmbedder(WORDS))
    with live_server(create_app(state)) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client, state


def post(client: httpx.Client, source: str, name: str, body: bytes, kind: str, **params: object):
    return client.post(
        f"/v1/import/{source}",
        params={"name": name, **params},
        content=body,
        headers={"Content-Type": kind},
    )


def test_a_transcript_is_stored_with_its_speakers_once(
    served: tuple[httpx.Client, ServerState],
) -> None:
    client, state = served
    dry = post(client, "transcript", "standup.vtt", VTT.encode(), "text/vtt", dry_run="true")
    assert dry.status_code == 200, dry.text
    assert dry.json()["added"] == 2 and dry.json()["ids"] == []
    assert state.store.count("default", active_only=False) == 0  # a dry run stores nothing
    first = post(client, "transcript", "standup.vtt", VTT.encode(), "text/vtt")
    assert first.status_code == 200, first.text
    report = first.json()
    assert report["source"] == "transcript" and report["added"] == 2 and report["failed"] == 0
    authors = {client.get(f"/v1/records/{i}").json()["author"] for i in report["ids"]}
    assert authors == {"Ana", "Bo"}
    again = post(client, "transcript", "standup.vtt", VTT.encode(), "text/vtt").json()
    assert again["added"] == 0 and sum(again["skipped_by_reason"].values()) == 2
    assert state.store.count("default", active_only=False) == 2
    assert all("mempp-import-" not in w["location"] for w in report["warnings"])


def test_real_github_pages_store_what_mempp_import_stores(
    served: tuple[httpx.Client, ServerState], tmp_path: Path
) -> None:
    client, _ = served
    page = sample("github", "forgejo-recorded", "issues_page1.http")
    reply = post(client, "github", page.name, page.read_bytes(), "application/json")
    assert reply.status_code == 200, reply.text
    with Memory(str(tmp_path / "cli.db"), embedder=KeywordEmbedder(WORDS)) as memory:
        expected = run_import(memory, get("github"), page)
    assert reply.json()["added"] == expected.added > 0
    assert reply.json()["skipped_by_reason"] == dict(expected.skipped)


def test_bad_imports_are_refused_and_store_nothing(
    served: tuple[httpx.Client, ServerState],
) -> None:
    client, state = served
    unknown = post(client, "asana", "x.json", b"{}", "application/json")
    assert unknown.status_code == 422 and "unknown importer" in unknown.json()["detail"]
    simple = post(client, "transcript", "a.vtt", VTT.encode(), "text/plain")
    assert simple.status_code == 415  # a type any page may send cross-site
    bare = client.post("/v1/import/transcript", params={"name": "a.vtt"}, content=VTT.encode())
    assert bare.status_code == 415
    refused = post(client, "slack", "export.zip", b"not a zip at all", "application/zip")
    assert refused.status_code == 422, refused.text
    assert "mempp-import-" not in refused.text  # named by the upload's name, not the temp path
    wrong = post(client, "github", "notes.vtt", VTT.encode(), "text/vtt")
    assert wrong.status_code == 422, wrong.text
    assert state.store.count("default", active_only=False) == 0
