"""The web page's upload reads the tool exports (a GitHub API page, a Jira XML export, a
Confluence space zip, a Notion export zip) through the same importers as `mempp import`,
over a real uvicorn on a loopback port."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("fastapi")

from mempp import Memory
from test_import_confluence import build_space
from test_import_github import comment, issue
from test_import_jira import build_xml
from test_import_notion import as_notion_delivers, build_markdown
from test_web import _upload, login
from web_support import WORDS, running_server

from conftest import KeywordEmbedder


@pytest.fixture
def uploads(tmp_path: Path):
    (tmp_path / "server").mkdir()
    with running_server(tmp_path / "server") as server:
        yield server


def test_upload_reads_the_tool_exports(uploads, tmp_path) -> None:
    github = json.dumps(
        [issue(1, "Login fails", "on Safari", "ana", "2024-01-10T09:00:00Z")]
    ) + json.dumps([comment(11, 1, "Reproduced.", "bo", "2024-01-11T10:00:00Z")])
    space = build_space(tmp_path / "space")
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        for file in sorted(space.rglob("*")):
            if file.is_file():
                archive.write(file, f"Engineering/{file.relative_to(space)}")
    notion = as_notion_delivers(build_markdown(tmp_path / "notion"), tmp_path / "notion.zip")
    client = login(uploads, "uploads")
    response = _upload(
        client,
        [
            ("files", ("issues.json", github.encode())),
            ("files", ("jira.xml", build_xml(tmp_path / "jira.xml").read_bytes())),
            ("files", ("Engineering.zip", packed.getvalue())),
            ("files", ("notion.zip", notion.read_bytes())),
        ],
        fragment=True,
    )
    assert response.status_code == 200, response.text
    for name in ("github", "jira", "confluence", "notion"):
        assert f"<td>{name}</td>" in response.text
    memory = Memory(uploads.db, scope="uploads", embedder=KeywordEmbedder(WORDS))
    sources = {r.source for r in memory.records()}
    assert "https://github.com/acme/app/issues/1#issuecomment-11" in sources
    assert "https://acme.atlassian.net/browse/OPS-1?focusedCommentId=501" in sources
    assert "confluence://Engineering/98305#comment-98310" in sources
    assert "notion://22222222222222222222222222222222" in sources
    assert all("mempp-upload-" not in (s or "") for s in sources)
