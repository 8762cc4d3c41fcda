"""The GitLab importer on the real recorded API v4 responses (gitlab.com's copy of
go-gitea/test_repo, with headers) and on exports built here in API v4's shapes: notes and
discussions, system notes, state events, edits between exports, broken input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.gitlab import GitLabImporter
from tool_samples import sample

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

WEB = "https://gitlab.example.org/acme/app"
THREAD = "gitlab://gitlab.example.org/projects/7"


def person(name: str, uid: int) -> dict[str, Any]:
    username = name.split()[0].lower()
    return {
        "id": uid,
        "username": username,
        "name": name,
        "state": "active",
        "web_url": f"https://gitlab.example.org/{username}",
    }


ANA, BO = person("Ana López", 1), person("Bo Berg", 2)


def issue(iid: int, title: str, created: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": 9000 + iid,
        "iid": iid,
        "project_id": 7,
        "title": title,
        "description": f"details of {title}",
        "state": "opened",
        "created_at": created,
        "updated_at": created,
        "closed_at": None,
        "closed_by": None,
        "labels": ["backend"],
        "author": ANA,
        "web_url": f"{WEB}/-/issues/{iid}",
        "references": {"full": f"acme/app#{iid}"},
    } | extra


def note(nid: int, iid: int, body: str, who: dict, created: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": nid,
        "type": None,
        "body": body,
        "author": who,
        "created_at": created,
        "updated_at": created,
        "system": False,
        "noteable_type": "Issue",
        "noteable_iid": iid,
        "project_id": 7,
    } | extra


def build_export(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "issues.json").write_text(
        json.dumps(
            [
                issue(1, "Checkout times out", "2024-03-01T09:00:00.123Z"),
                issue(
                    2,
                    "Rotate the keys",
                    "2024-03-02T09:00:00Z",
                    state="closed",
                    closed_at="2024-04-10T12:00:00.500Z",
                    closed_by=BO,
                ),
            ]
        )
    )
    (root / "issue1_discussions.json").write_text(
        "X-Total: 2\r\nX-Page: 1\r\n\r\n"
        + json.dumps(
            [
                {
                    "id": "abc",
                    "individual_note": False,
                    "notes": [
                        note(11, 1, "Seen on prod.", BO, "2024-03-01T10:00:00Z"),
                        note(12, 1, "Retry added.", ANA, "2024-03-01T11:00:00Z"),
                    ],
                },
                {
                    "id": "def",
                    "individual_note": True,
                    "notes": [
                        note(13, 1, "changed the description", ANA, "2024-03-01T12:00:00Z")
                        | {"system": True}
                    ],
                },
            ]
        )
    )
    link = (
        "Link: <https://gitlab.example.org/api/v4/projects/7/issues/2/resource_state_events"
        '?page=1&per_page=100>; rel="first"\r\n\r\n'
    )
    (root / "issue2_state_events.json").write_text(
        link
        + json.dumps(
            [
                {
                    "id": 1,
                    "user": BO,
                    "created_at": "2024-03-05T00:00:00Z",
                    "resource_type": "Issue",
                    "resource_id": 999999,  # a global id this export does not hold
                    "state": "closed",
                },
                {
                    "id": 2,
                    "user": ANA,
                    "created_at": "2024-03-20T00:00:00Z",
                    "resource_type": "Issue",
                    "resource_id": 999999,
                    "state": "reopened",
                },
                {
                    "id": 3,
                    "user": BO,
                    "created_at": "2024-04-10T12:00:00.900Z",
                    "resource_type": "Issue",
                    "resource_id": 999999,
                    "state": "closed",
                },
            ]
        )
    )
    (root / "merge_request3.json").write_text(
        json.dumps(
            issue(3, "Add retries", "2024-03-03T00:00:00Z", author=BO)
            | {
                "web_url": f"{WEB}/-/merge_requests/3",
                "state": "merged",
                "merged_at": "2024-03-04T00:00:00Z",
                "merged_by": ANA,
                "closed_at": None,
                "source_branch": "retries",
            }
        )
    )
    return root


def read(path: Path) -> list[object]:
    return list(GitLabImporter().read(path))


def docs_of(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_the_real_recorded_responses() -> None:
    found = read(sample("gitlab", "forgejo-recorded"))
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    assert [(Path(s.location).name, s.reason) for s in found if isinstance(s, Skipped)] == [
        ("issues_page1.http:2", "repeated in the export")  # issue 2's close, from its events
    ]
    docs = {d.source: d for d in docs_of(found)}
    first = docs["https://gitlab.com/forgejo/test_repo/-/issues/1"]
    assert (first.author, first.meta["user"]) == ("Moritz Kobel", "mkobel")
    assert first.thread == "gitlab://gitlab.com/projects/61363672/issues/1"
    assert set(first.tags) == {"forgejo/test_repo", "issue", "bug", "discussion"}
    comment = docs["gitlab://gitlab.com/projects/61363672/notes/2087994191"]
    assert comment.text == "This is a comment" and comment.thread.endswith("/issues/2")
    closed = docs["gitlab://gitlab.com/projects/61363672/issues/2#event-closed-20240903T144310Z"]
    assert closed.text == "Issue #2 closed by Moritz Kobel"
    mr = docs["https://gitlab.com/forgejo/test_repo/-/merge_requests/1"]
    assert (
        mr.author == "oliverpool"
        and mr.text == "Merge request !1: Test branch\n\ndo not merge this PR"
    )
    assert len(docs) == 7


def test_notes_system_notes_and_state_history(tmp_path) -> None:
    found = read(build_export(tmp_path / "export"))
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    assert sorted((Path(s.location).name, s.reason) for s in found if isinstance(s, Skipped)) == [
        ("issue1_discussions.json:2.1", "system note"),
        ("issues.json:2", "repeated in the export"),  # the close its events told, ms apart
    ]
    docs = docs_of(found)
    thread2 = sorted((d.date.text, d.text) for d in docs if d.thread == f"{THREAD}/issues/2")
    assert thread2 == [
        ("2024-03-02T09:00:00+00:00", "Issue #2: Rotate the keys\n\ndetails of Rotate the keys"),
        ("2024-03-05T00:00:00+00:00", "Issue #2 closed by Bo Berg"),
        ("2024-03-20T00:00:00+00:00", "Issue #2 reopened by Ana López"),
        ("2024-04-10T12:00:00+00:00", "Issue #2 closed by Bo Berg"),
    ]
    notes = [d for d in docs if d.meta["kind"] == "note"]
    assert [(n.author, n.text) for n in notes] == [
        ("Bo Berg", "Seen on prod."),
        ("Ana López", "Retry added."),
    ]
    merged = [d for d in docs if d.thread == f"{THREAD}/merge_requests/3"]
    assert sorted(d.text for d in merged) == [
        "Merge request !3 merged by Ana López",
        "Merge request !3: Add retries\n\ndetails of Add retries",
    ]


def test_reimport_and_an_edited_note(tmp_path, engine_location) -> None:
    export = build_export(tmp_path / "export")
    with Memory(engine_location, embedder=KeywordEmbedder()) as memory:
        assert run_import(memory, get("gitlab"), export).added == 9
        assert run_import(memory, get("gitlab"), export).added == 0
        later = tmp_path / "later.json"
        later.write_text(
            json.dumps(
                [
                    note(11, 1, "Seen on prod, twice.", BO, "2024-03-01T10:00:00Z")
                    | {"updated_at": "2024-03-02T00:00:00Z"},
                    note(12, 1, "Retry added.", ANA, "2024-03-01T11:00:00Z"),
                ]
            )
        )
        report = run_import(memory, get("gitlab"), later)
        assert report.added == 1 and report.skipped["duplicate"] == 1
        versions = [
            r.text
            for r in memory.records()
            if r.source == "gitlab://gitlab.example.org/projects/7/notes/11"
        ]
        assert sorted(versions) == ["Seen on prod, twice.", "Seen on prod."]


def test_bad_input(tmp_path, capsys) -> None:
    github = tmp_path / "gh.json"
    github.write_text(
        json.dumps([{"node_id": "x", "html_url": "https://github.com/a/b/issues/1", "number": 1}])
    )
    with pytest.raises(InvalidInput, match="mempp import github"):
        read(github)
    folder = tmp_path / "export"
    folder.mkdir()
    page = json.dumps([note(i, 1, f"note {i}", ANA, "2024-01-01T00:00:00Z") for i in (1, 2)])
    (folder / "notes.json").write_text(page[:-30])
    orphan = {"user": ANA, "created_at": "2024-01-01", "state": "closed"}
    orphan |= {"resource_type": "Issue", "resource_id": 5}  # no Link header, no issue read
    (folder / "orphan_events.json").write_text(json.dumps([orphan]))
    (folder / "nobody.json").write_text(
        json.dumps([issue(4, "who", "2024-01-01T00:00:00Z", author=None, created_at=None)])
    )
    found = read(folder)
    lines = sorted(
        (Path(i.location).name, type(i).__name__) for i in found if not isinstance(i, Document)
    )
    assert lines == [
        ("nobody.json:1", "Notice"),
        ("nobody.json:1", "Notice"),
        ("notes.json:2", "ItemError"),
        ("orphan_events.json:1", "ItemError"),
    ]
    assert [d.text for d in docs_of(found) if d.meta["kind"] == "note"] == ["note 1"]
    assert main(["--db", str(tmp_path / "m.db"), "import", "gitlab", str(folder), "--dry-run"]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("would add 2, skipped 0, failed 2, 2 warnings")
    assert f"{folder / 'notes.json'}:2: invalid JSON" in err
