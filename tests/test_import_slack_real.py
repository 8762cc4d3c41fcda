"""The Slack importer on the real workspace exports in ``shared/realdata/slack`` (read where
they lie, never copied; skipped when absent): every message accounted for, bots named by
what the export says of them, their posts' words searchable, file comments kept."""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from mempp import Document, Memory
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.slack import SlackImporter

from conftest import KeywordEmbedder


def _realdata() -> Path:
    for candidate in (
        Path(__file__).resolve().parents[1] / ".." / "shared" / "realdata",
        Path("/work/shared/realdata"),
    ):
        if (candidate / "slack").is_dir():
            return candidate.resolve()
    pytest.skip("the real Slack exports (shared/realdata/slack) are not here")


def _export(name: str) -> Path:
    path = _realdata() / "slack" / name
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    return path


def _messages_in(path: Path) -> int:
    """Messages in the export's day files, counted without the importer."""
    with zipfile.ZipFile(path) as archive:
        return sum(
            len(json.loads(archive.read(name)))
            for name in archive.namelist()
            if name.count("/") == 1 and name.endswith(".json") and name[-15:-5][:2] == "20"
        )


EXPORTS = [
    "slack-export-viewer/testarchive.zip",
    "langchain-community/slack_export.zip",
    "benknoble/export-2020-12-07-to-2021-03-14.zip",
    "benknoble/export-2021-03-14-to-2021-06-07.zip",
]


@pytest.mark.parametrize("name", EXPORTS)
def test_every_message_of_a_real_export_is_accounted_for(name: str) -> None:
    path = _export(name)
    found = list(SlackImporter().read(path))
    outcomes = [i for i in found if not isinstance(i, Notice)]
    assert len(outcomes) == _messages_in(path)
    assert not [i for i in found if isinstance(i, ItemError)]
    docs = [i for i in found if isinstance(i, Document)]
    assert all(d.date is not None and d.author for d in docs)
    assert not [d for d in docs if d.author.startswith("B0")]  # no raw bot id as author


def test_the_2016_export_names_its_bots_and_keeps_their_posts_and_the_file_comment() -> None:
    path = _export("slack-export-viewer/testarchive.zip")
    found = list(SlackImporter().read(path))
    docs = [i for i in found if isinstance(i, Document)]
    bots = [d for d in docs if json.loads(d.metadata).get("subtype") == "bot_message"]
    assert len(bots) == 94 and {d.author for d in bots} == {"github"}  # named by bot_add
    assert all(d.text.strip() for d in bots)  # their words were only in attachments
    assert {json.loads(d.metadata)["integration"] for d in bots} == {
        "GitHub Notifications (Legacy)"  # integration_logs.json, same channel and second
    }
    assert Counter(i.reason for i in found if isinstance(i, Skipped)) == {
        "channel_join": 8,
        "bot_add": 3,
    }
    comment = next(d for d in docs if json.loads(d.metadata).get("subtype") == "file_comment")
    assert comment.author == "Hermione Granger"
    assert comment.date is not None and comment.date.text == "2016-03-27T19:14:08+00:00"
    assert "'Holmesville': (31.7036111, -82.3208333)" in comment.text
    assert comment.text.endswith("[comment on file: 10 cities]")
    shares = [d for d in docs if json.loads(d.metadata).get("subtype") == "file_share"]
    assert {t for d in shares for t in json.loads(d.metadata)["files"]} == {
        "100_cities.js",
        "10_cities.js",
        "cities1000.js",
    }


def test_a_commit_message_from_a_bot_post_is_found_by_search(tmp_path: Path) -> None:
    path = _export("slack-export-viewer/testarchive.zip")
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["executor", "draft"])) as memory:
        report = run_import(memory, get("slack"), path)
        assert report.added == 147 and report.failed == 0
        hits = memory.search("executor rough draft")
        found = [h.record for h in hits[:5] if "ed1acbe" in h.record.text]
        assert found and found[0].author == "github" and found[0].date.startswith("2016-02-08")


def test_the_bot_user_of_users_json_and_link_unfurls_in_the_newer_exports() -> None:
    found = list(SlackImporter().read(_export("benknoble/export-2020-12-07-to-2021-03-14.zip")))
    docs = [i for i in found if isinstance(i, Document)]
    unfurled = [d for d in docs if "[attachment: benknoble/advent2020]" in d.text]
    assert unfurled and all("Language: Standard ML" in d.text for d in unfurled)
