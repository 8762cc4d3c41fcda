"""The tool importers on generated hostile input (a fixed seed, bounded): fields of every
type where a string, a list or an object belongs, bytes flipped in XML and HTML. Every item
ends as documents, an error, a skip or a notice, never an exception."""

from __future__ import annotations

import json
import random
from pathlib import Path

from mempp import Document
from mempp.importers import ItemError, Notice, Skipped, get
from test_import_confluence import RUNBOOK
from test_import_github import comment, event, issue, pull, review
from test_import_gitlab import ANA, note
from test_import_gitlab import issue as gl_issue
from test_import_hostile import _value
from test_import_jira import build_xml
from test_import_notion import HTML_PAGE

ITEM_TYPES = (Document, ItemError, Skipped, Notice)


def _mutated(rng: random.Random, item: dict[str, object]) -> object:
    out = dict(item)
    for key in rng.sample(sorted(out), k=rng.randrange(1, min(5, len(out)) + 1)):
        out[key] = _value(rng) if rng.random() < 0.85 else rng.choice(["", "x", 0, [], {}])
    return out if rng.random() < 0.95 else _value(rng)


def _outcomes(name: str, path: Path) -> list[object]:
    found = list(get(name).read(path))
    assert all(isinstance(item, ITEM_TYPES) for item in found)
    return found


def test_github_and_gitlab_items_of_every_shape(tmp_path: Path) -> None:
    rng = random.Random(2901)
    seeds = [
        issue(1, "t", "b", "ana", "2024-01-01T00:00:00Z", closed_at="2024-02-01T00:00:00Z"),
        comment(2, 1, "c", "bo", "2024-01-02T00:00:00Z"),
        pull(3, "p", "cy", "2024-01-03T00:00:00Z"),
        review(4, 3, "APPROVED", "ok", "2024-01-04T00:00:00Z"),
        event(5, "closed", "ana", "2024-01-05T00:00:00Z"),
    ]
    for name, base in (
        ("github", seeds),
        ("gitlab", [gl_issue(1, "t", "2024-01-01T00:00:00Z"), note(2, 1, "n", ANA, "2024-01-02")]),
    ):
        folder = tmp_path / name
        folder.mkdir()
        total = 0
        for page in range(20):
            items = [_mutated(rng, rng.choice(base)) for _ in range(40)]
            if name == "gitlab" and page % 5 == 0:
                items = [{"id": "d", "individual_note": True, "notes": items}]
            total += len(items)
            (folder / f"issue{page}_page.json").write_text(json.dumps(items))
        found = _outcomes(name, folder)
        assert len([i for i in found if not isinstance(i, Notice)]) >= total
        assert sum(isinstance(i, Document) for i in found) > total // 10


def _flipped(rng: random.Random, raw: bytes, count: int) -> bytes:
    data = bytearray(raw)
    for _ in range(count):
        data[rng.randrange(len(data))] = rng.choice([0, 10, 34, 38, 39, 60, 62, 0x80, 0xFF])
    if rng.random() < 0.2:
        data = data[: rng.randrange(len(data))]
    return bytes(data)


def test_jira_confluence_and_notion_files_with_flipped_bytes(tmp_path: Path) -> None:
    rng = random.Random(2902)
    xml = build_xml(tmp_path / "seed.xml").read_bytes()
    for name, seed, suffix in (
        ("jira", xml, ".xml"),
        ("confluence", RUNBOOK.encode(), ".html"),
        ("notion", HTML_PAGE.encode(), ".html"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        for number in range(60):
            stem = f"Page {number:032x}" if name == "notion" else f"file{number}"
            (folder / f"{stem}{suffix}").write_bytes(_flipped(rng, seed, rng.randrange(1, 6)))
        found = _outcomes(name, folder)
        assert sum(isinstance(i, Document) for i in found) > 10
