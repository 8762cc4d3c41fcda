"""One set of bounds (issue 36): the MCP tools advertise and enforce the HTTP API's limits,
uploads and imports are read with bounded memory (a 256 MiB member is refused with its size),
and an operational failure reaches a tenant without paths, SQL or driver text while the log
keeps it under the request id.
"""

from __future__ import annotations

import json
import logging
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from mempp.errors import StoreError
from mempp.importers import get
from mempp.importers.base import ItemError, run_import
from mempp.importers.files import MAX_FILE_BYTES
from mempp.llm import LLMError
from mempp.server.app import create_app
from mempp.server.schemas import (
    MAX_TAGS,
    AskIn,
    DocumentIn,
    EvidenceIn,
    HistoryIn,
    SearchIn,
)
from mempp.server.state import ServerState

from conftest import KeywordEmbedder
from fake_openai import FakeOpenAI, fast_client
from serving import live_server

MCP_HEADERS = {"accept": "application/json, text/event-stream"}
BOUNDS = ("maxLength", "minLength", "maxItems", "minItems", "maximum", "minimum")
PAIRS = [
    ("remember", DocumentIn),
    ("search_memory", SearchIn),
    ("get_evidence", EvidenceIn),
    ("memory_history", HistoryIn),
    ("ask_memory", AskIn),
]
RENAMED = {"ask_memory": {"question": "question"}}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, ServerState]]:
    with FakeOpenAI() as fake:
        state = ServerState(
            str(tmp_path / "b.db"), embedder=KeywordEmbedder(["plan"]), llm=fast_client(fake)
        )
        state.memory("default").add("The plan is set.", author="Ana", date="2024-01-01")
        with live_server(create_app(state), lifespan="on") as url:
            yield url, state


def _rpc(url: str, method: str, params: dict[str, Any]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return httpx.post(f"{url}/mcp", json=body, headers=MCP_HEADERS, timeout=60)


def _bounds(schema: dict[str, Any], defs: dict[str, Any]) -> set[tuple[str, Any]]:
    """Every bound in a property's schema, through anyOf, items and $ref."""
    found: set[tuple[str, Any]] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if "$ref" in node:
            stack.append(defs[node["$ref"].rsplit("/", 1)[1]])
        for key in BOUNDS:
            if key in node:
                found.add((key, node[key]))
        stack.extend(node.get("anyOf", []))
        if isinstance(node.get("items"), dict):
            found.add(("items", frozenset(_bounds(node["items"], defs))))
    return found


def test_mcp_tools_advertise_the_http_bounds(served) -> None:
    url, _ = served
    tools = {t["name"]: t for t in _rpc(url, "tools/list", {}).json()["result"]["tools"]}
    compared = 0
    for name, model in PAIRS:
        tool = tools[name]["inputSchema"]
        http = model.model_json_schema()
        for field, prop in tool["properties"].items():
            if field not in http["properties"]:
                continue
            mcp_bounds = _bounds(prop, tool.get("$defs", {}))
            http_bounds = _bounds(http["properties"][field], http.get("$defs", {}))
            assert mcp_bounds == http_bounds, (name, field, mcp_bounds, http_bounds)
            compared += 1
    assert compared >= 30  # every shared parameter of the five tools


def test_mcp_remember_refuses_what_http_refuses(served) -> None:
    url, state = served
    before = state.store.count("default")
    many = [f"t{i}" for i in range(20_000)]
    for arguments in (
        {"text": "x", "tags": many},
        {"text": "x", "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]},
        {"text": "x", "author": "a" * 1001},
        {"text": "x", "date": "2024-02-30"},
    ):
        reply = _rpc(url, "tools/call", {"name": "remember", "arguments": arguments}).json()
        assert reply.get("error") or reply["result"]["isError"], arguments
        http = httpx.post(f"{url}/v1/records", json=arguments, timeout=30)
        assert http.status_code == 422, arguments
    assert state.store.count("default") == before


def test_mcp_search_judges_filters_as_http_does(served) -> None:
    url, _ = served
    arguments = {"query": "plan", "as_of": "2024-01-01", "since": "2024-06-01"}
    reply = _rpc(url, "tools/call", {"name": "search_memory", "arguments": arguments}).json()
    assert reply["result"]["isError"] and "since" in reply["result"]["content"][0]["text"]
    http = httpx.post(f"{url}/v1/search", json=arguments, timeout=30)
    assert http.status_code == 422 and http.json()["field"] == "since"


# -- bounded memory ---------------------------------------------------------------------------
def test_a_256_mib_zip_member_is_refused_with_its_size(tmp_path: Path) -> None:
    archive = tmp_path / "slack.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("users.json", "[]")
        out.writestr("channels.json", json.dumps([{"id": "C1", "name": "general"}]))
        out.writestr(
            "general/2024-03-01.json",
            json.dumps(
                [{"type": "message", "text": "hi", "user": "U1", "ts": "1709251200.000100"}]
            ),
        )
        with out.open("general/2024-03-02.json", "w") as big:  # 256 MiB of blanks, streamed
            chunk = b" " * (1 << 20)
            for _ in range(256):
                big.write(chunk)
    assert archive.stat().st_size < 2 << 20
    report = run_import(None, get("slack"), archive, dry_run=True)
    reasons = [f.reason for f in report.failures if "03-02" in f.location]
    assert reasons == ["unpacks to 256 MiB, over the 32 MiB limit of one file"]
    assert report.added == 1


def test_an_oversized_note_or_line_is_refused_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "big.md").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    with (folder / "a.jsonl").open("w") as out:
        out.write(json.dumps({"text": "first"}) + "\n")
        out.write('{"text": "' + "y" * MAX_FILE_BYTES + '"}\n')
        out.write(json.dumps({"text": "third"}) + "\n")
    report = run_import(None, get("folder"), folder, dry_run=True)
    failed = {f.location.rsplit("/", 1)[-1]: f.reason for f in report.failures}
    assert failed == {
        "a.jsonl:2": f"line longer than {MAX_FILE_BYTES} characters",
        "big.md": f"is {MAX_FILE_BYTES + 1} bytes, over the {MAX_FILE_BYTES} limit",
    }
    assert report.added == 2
    assert all(isinstance(f, ItemError) for f in report.failures)


# -- what a tenant reads of a failure ---------------------------------------------------------
SECRET = "could not store the batch in /srv/mempp/store.db: database is locked (SQLITE_BUSY)"


@pytest.mark.parametrize("error", [StoreError(SECRET), LLMError(SECRET)], ids=["store", "llm"])
def test_a_failure_reaches_the_tenant_without_paths_or_driver_text(
    served, monkeypatch, caplog, error
) -> None:
    url, state = served
    memory = state.memory("default")

    def fail(*_: object, **__: object) -> object:
        raise error

    monkeypatch.setattr(memory, "search", fail)
    monkeypatch.setattr(memory, "evidence", fail)
    monkeypatch.setattr(memory, "ask", fail)
    caplog.set_level(logging.ERROR, logger="mempp.server")
    answers = [
        httpx.post(f"{url}/v1/search", json={"query": "plan"}, timeout=30),
        httpx.post(f"{url}/v1/ask", json={"question": "plan?"}, timeout=30),
        httpx.get(f"{url}/search?q=plan", timeout=30),
        _rpc(url, "tools/call", {"name": "get_evidence", "arguments": {"query": "plan"}}),
    ]
    for answer in answers:
        assert answer.status_code in (200, 502, 503), answer.text
        for leak in ("/srv", "store.db", "database is locked", "SQLITE"):
            assert leak not in answer.text, (answer.request.url, answer.text)
        rid = answer.headers["x-request-id"]
        assert f"request {rid}" in answer.text
        assert any(rid in r.getMessage() and SECRET in r.getMessage() for r in caplog.records)


def test_readyz_tells_no_warming_error_text(served) -> None:
    url, state = served
    while httpx.get(f"{url}/readyz", timeout=30).status_code != 200:  # warming is over
        time.sleep(0.05)
    state.warm_error = SECRET  # as a failed warm-up leaves it
    state._ready.clear()
    answer = httpx.get(f"{url}/readyz", timeout=30)
    assert answer.status_code == 503 and "/srv" not in answer.text


def test_an_oversized_mail_file_is_refused_by_its_size(tmp_path: Path) -> None:
    box = tmp_path / "big.eml"
    with box.open("wb") as out:
        out.write(b"Subject: big\r\nFrom: a@x.io\r\n\r\n")
        out.truncate(MAX_FILE_BYTES + 1)  # sparse: no 32 MiB written
    report = run_import(None, get("mail"), box, dry_run=True)
    assert [f.reason for f in report.failures] == [
        f"is {MAX_FILE_BYTES + 1} bytes, over the {MAX_FILE_BYTES} limit"
    ]
