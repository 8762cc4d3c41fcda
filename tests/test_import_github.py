"""The GitHub importer on the real recorded API responses (go-gitea/test_repo, with their HTTP
headers) and on exports built here in the REST API's shapes: pages as `gh api --paginate`
writes them, edits between two exports, events, and broken input."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.cli import main
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.github import GitHubImporter
from tool_samples import sample

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

API = "https://api.github.com/repos/acme/app"
WEB = "https://github.com/acme/app"


def user(login: str, uid: int, kind: str = "User") -> dict[str, Any]:
    return {"login": login, "id": uid, "type": kind, "avatar_url": f"https://a/{uid}"}


def issue(number: int, title: str, body: str, who: str, created: str, **extra: Any) -> dict:
    return {
        "url": f"{API}/issues/{number}",
        "html_url": f"{WEB}/issues/{number}",
        "id": 1000 + number,
        "number": number,
        "title": title,
        "body": body,
        "user": user(who, hash(who) % 1000),
        "labels": [{"name": "bug"}],
        "state": "open",
        "created_at": created,
        "updated_at": created,
        "closed_at": None,
    } | extra


def comment(cid: int, number: int, body: str, who: str, created: str, **extra: Any) -> dict:
    return {
        "url": f"{API}/issues/comments/{cid}",
        "html_url": f"{WEB}/issues/{number}#issuecomment-{cid}",
        "issue_url": f"{API}/issues/{number}",
        "id": cid,
        "user": user(who, hash(who) % 1000),
        "created_at": created,
        "updated_at": created,
        "body": body,
    } | extra


def pull(number: int, title: str, who: str, created: str, **extra: Any) -> dict:
    return {
        "url": f"{API}/pulls/{number}",
        "html_url": f"{WEB}/pull/{number}",
        "issue_url": f"{API}/issues/{number}",
        "number": number,
        "title": title,
        "body": "please review",
        "user": user(who, 7),
        "state": "closed",
        "created_at": created,
        "updated_at": created,
        "closed_at": "2024-03-20T10:00:00Z",
        "merged_at": "2024-03-20T10:00:00Z",
        "head": {"ref": "feature"},
        "base": {"ref": "main"},
        "labels": [],
    } | extra


def review(rid: int, number: int, state: str, body: str, when: str) -> dict:
    return {
        "id": rid,
        "user": user("lee", 9),
        "body": body,
        "state": state,
        "html_url": f"{WEB}/pull/{number}#pullrequestreview-{rid}",
        "pull_request_url": f"{API}/pulls/{number}",
        "submitted_at": when,
    }


def event(eid: int, name: str, who: str, when: str) -> dict:
    return {
        "id": eid,
        "url": f"{API}/issues/events/{eid}",
        "actor": user(who, 3),
        "event": name,
        "created_at": when,
    }


def headers(link: str | None = None, status: str = "HTTP/2.0 200 OK") -> str:
    lines = [status, "Content-Type: application/json; charset=utf-8", 'Etag: W/"abc"']
    if link:
        lines.append(f"Link: {link}")
    return "\r\n".join(lines) + "\r\n\r\n"


def build_export(root: Path) -> Path:
    """A repository's issues (two pages, as --paginate --include writes them), comments,
    a pull request with reviews, an issue's events and its users."""
    root.mkdir(parents=True)
    first = [
        issue(1, "Login fails on Safari", "Steps: open /login", "ana", "2024-01-10T09:00:00Z"),
        issue(
            2,
            "Dark mode",
            "Please add it",
            "bo",
            "2024-02-01T12:00:00Z",
            state="closed",
            closed_at="2024-04-02T08:00:00Z",
            closed_by=user("ana", 1),
            state_reason="completed",
        ),
    ]
    second = [
        issue(
            3,
            "Add the export button",
            "please review",
            "cy",
            "2024-03-01T00:00:00Z",
            pull_request={"url": f"{API}/pulls/3", "merged_at": "2024-03-20T10:00:00Z"},
            html_url=f"{WEB}/pull/3",
            closed_at="2024-03-20T10:00:00Z",
            state="closed",
        )
    ]
    (root / "issues.json").write_text(
        headers(f'<{API}/issues?page=2>; rel="next"')
        + json.dumps(first)
        + "\n"
        + headers()
        + json.dumps(second)
    )
    # --paginate without --include: pages back to back, no separator.
    (root / "issue1_comments.json").write_text(
        json.dumps([comment(11, 1, "Reproduced on Safari 17.", "bo", "2024-01-11T10:00:00Z")])
        + json.dumps(
            [comment(12, 1, "Fixed by clearing the cache.", "ana", "2024-01-12T10:00:00Z")]
        )
    )
    (root / "pulls.json").write_text(
        json.dumps([[pull(3, "Add the export button", "cy", "2024-03-01T00:00:00Z")]])  # --slurp
    )
    (root / "pull3_reviews.json").write_text(
        "\n".join(
            json.dumps(r)  # --jq '.[]': one object a line
            for r in (
                review(31, 3, "CHANGES_REQUESTED", "Needs a test.", "2024-03-05T00:00:00Z"),
                review(32, 3, "APPROVED", "", "2024-03-06T00:00:00Z"),
                review(33, 3, "PENDING", "", "2024-03-07T00:00:00Z") | {"submitted_at": None},
            )
        )
    )
    (root / "issue2_events.json").write_text(
        json.dumps(
            [
                event(51, "labeled", "ana", "2024-02-02T00:00:00Z"),
                event(52, "closed", "ana", "2024-02-10T00:00:00Z"),
                event(53, "reopened", "bo", "2024-03-01T00:00:00Z"),
                event(54, "closed", "ana", "2024-04-02T08:00:00Z"),
            ]
        )
    )
    (root / "users.json").write_text(
        json.dumps([user("ana", 1) | {"name": "Ana López"}, user("bo", 2) | {"name": "Bo Berg"}])
    )
    (root / "README.md").write_text("how this export was made\n")
    return root


def read(path: Path, importer: GitHubImporter | None = None) -> list[object]:
    return list((importer or GitHubImporter()).read(path))


def docs_of(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_the_real_recorded_responses_read_cleanly() -> None:
    folder = sample("github", "forgejo-recorded")
    found = read(folder)
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    docs = docs_of(found)
    skipped = [i for i in found if isinstance(i, Skipped)]
    assert [s.reason for s in skipped] == ["reaction", "reaction"]
    by_source = {d.source: d for d in docs}
    first = by_source["https://github.com/go-gitea/test_repo/issues/1"]
    assert first.author == "guillep2k" and first.date.text == "2019-11-09T17:00:29+00:00"
    assert first.text.startswith("Issue #1: Please add an animated gif icon")
    assert set(first.tags) == {"go-gitea/test_repo", "issue", "bug", "good first issue"}
    assert first.meta["user_id"] == 18600385 and first.meta["milestone"] == "1.0.0"
    closed = by_source[
        "https://github.com/go-gitea/test_repo/issues/1#event-closed-20191112T202222Z"
    ]
    assert (closed.text, closed.author) == ("go-gitea/test_repo#1 closed by mrsdizzie", "mrsdizzie")
    assert closed.thread == first.thread == "https://github.com/go-gitea/test_repo/issues/1"
    # A pull request, its reviews and review comments share the pull request's thread.
    thread4 = [d for d in docs if d.thread == "https://github.com/go-gitea/test_repo/issues/4"]
    assert sorted(d.meta["kind"] for d in thread4) == [
        "pull request",
        "review",
        "review",
        "review",
        "review comment",
    ]
    assert {d.author for d in thread4} == {"mrsdizzie", "lunny"}
    merged = by_source[
        "https://github.com/go-gitea/test_repo/issues/3#event-merged-20191112T213927Z"
    ]
    assert merged.text == "go-gitea/test_repo#3 merged"
    assert all(d.date is not None for d in docs)
    assert len(docs) == 18


def test_pages_headers_slurp_and_lines_read_alike_with_names_and_states(tmp_path) -> None:
    found = read(build_export(tmp_path / "export"))
    failures = [i for i in found if isinstance(i, ItemError)]
    assert failures == []
    skipped = {(Path(s.location).name, s.reason) for s in found if isinstance(s, Skipped)}
    assert skipped == {
        ("README.md", "not an API response"),
        ("issue2_events.json:1", "event labeled"),
        ("pull3_reviews.json:3", "pending review"),
        ("users.json:1", "user profile"),
        ("users.json:2", "user profile"),
        ("pulls.json:1", "repeated in the export"),  # the pull request of the issues list
        ("pulls.json:1", "repeated in the export"),  # and its merge and close
        ("issues.json:2", "repeated in the export"),  # the close its events file told
    }
    docs = docs_of(found)
    by_source = {d.source: d for d in docs}
    # Users are read first, whatever the file order: their names join the metadata.
    login = by_source[f"{WEB}/issues/1"]
    assert login.author == "ana" and login.meta["user_name"] == "Ana López"
    assert by_source[f"{WEB}/issues/1#issuecomment-11"].meta["user_name"] == "Bo Berg"
    assert by_source[f"{WEB}/issues/1#issuecomment-12"].text == "Fixed by clearing the cache."
    assert "user_name" not in by_source[f"{WEB}/pull/3"].meta  # no profile for cy
    states = sorted(
        (d.date.text[:10], d.text) for d in docs if d.meta["kind"] == "state" and "#2 " in d.text
    )
    assert states == [
        ("2024-02-10", "acme/app#2 closed by ana"),
        ("2024-03-01", "acme/app#2 reopened by bo"),
        ("2024-04-02", "acme/app#2 closed by ana"),
    ]
    reviews = [d for d in docs if d.meta["kind"] == "review"]
    assert [r.text for r in reviews] == [
        "Review of pull request #3: changes requested\n\nNeeds a test.",
        "Review of pull request #3: approved",
    ]
    assert {r.thread for r in reviews} == {f"{WEB}/issues/3"}


def test_import_reimport_and_an_edit_between_exports(tmp_path, engine_location) -> None:
    export = build_export(tmp_path / "export")
    with Memory(engine_location, embedder=KeywordEmbedder(["safari"])) as memory:
        report = run_import(memory, get("github"), export)
        assert report.failed == 0 and report.added == len(report.ids) == 12
        again = run_import(memory, get("github"), export)
        assert again.added == 0 and again.skipped["duplicate"] == 12

        # The next export: comment 12 edited, a new comment; the rest unchanged.
        later = tmp_path / "later"
        later.mkdir()
        (later / "issue1_comments.json").write_text(
            json.dumps(
                [
                    comment(11, 1, "Reproduced on Safari 17.", "bo", "2024-01-11T10:00:00Z"),
                    comment(
                        12,
                        1,
                        "Fixed by clearing the service worker cache.",
                        "ana",
                        "2024-01-12T10:00:00Z",
                        updated_at="2024-01-13T08:00:00Z",
                    ),
                    comment(13, 1, "Confirmed.", "cy", "2024-01-14T10:00:00Z"),
                ]
            )
        )
        third = run_import(memory, get("github"), later)
        assert third.added == 2 and third.skipped["duplicate"] == 1
        versions = [r for r in memory.records() if r.source == f"{WEB}/issues/1#issuecomment-12"]
        assert sorted(r.text for r in versions) == [
            "Fixed by clearing the cache.",
            "Fixed by clearing the service worker cache.",
        ]
        # As of March 15 issue 2 had been reopened; the last close came in April.
        thread2 = sorted(
            (r.day, r.text)
            for r in memory.records()
            if r.thread == f"{WEB}/issues/2" and r.day and r.day <= "2024-03-15"
        )
        assert thread2[-1] == ("2024-03-01", "acme/app#2 reopened by bo")
        # The read path answers it: as of March 15 the state records of #2 end with the reopen.
        hits = memory.search(
            "acme/app#2 closed reopened",
            as_of="2024-03-15",
            thread=f"{WEB}/issues/2",
            tags=["state"],
        )
        assert sorted((h.record.day, h.record.text) for h in hits) == [
            ("2024-02-10", "acme/app#2 closed by ana"),
            ("2024-03-01", "acme/app#2 reopened by bo"),
        ]


def test_a_truncated_page_keeps_what_precedes_the_cut(tmp_path) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    page = json.dumps(
        [comment(i, 5, f"comment number {i}", "ana", f"2024-05-0{i}T00:00:00Z") for i in (1, 2, 3)]
    )
    (folder / "comments.json").write_text(headers() + page[: page.index("comment number 3") + 5])
    (folder / "issues.json").write_text(json.dumps([issue(5, "t", "b", "ana", "2024-05-01")]))
    found = read(folder)
    failures = [i for i in found if isinstance(i, ItemError)]
    assert len(failures) == 1
    assert failures[0].location == f"{folder / 'comments.json'}:3"
    assert "invalid JSON at line 5" in failures[0].reason and "cut short" in failures[0].reason
    assert len(docs_of(found)) == 3  # two comments and the issue


def test_another_tools_export_is_refused_or_skipped_with_the_right_command(tmp_path) -> None:
    gitlab = [{"id": 1, "iid": 1, "project_id": 9, "title": "x", "web_url": "https://gl/x/-/1"}]
    single = tmp_path / "gitlab_issues.json"
    single.write_text(json.dumps(gitlab))
    with pytest.raises(InvalidInput, match=r"GitLab API response.*mempp import gitlab"):
        read(single)
    (tmp_path / "notes.txt").write_text("just text")
    with pytest.raises(InvalidInput, match="not GitHub API JSON"):
        read(tmp_path / "notes.txt")
    with pytest.raises(InvalidInput, match="no such file"):
        read(tmp_path / "missing.json")
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "gl.json").write_text(json.dumps(gitlab * 2))
    (folder / "gh.json").write_text(json.dumps([issue(1, "t", "b", "ana", "2024-01-01")]))
    found = read(folder)
    told = [i for i in found if isinstance(i, Skipped) and i.detail]
    assert [(Path(t.location).name, t.reason) for t in told] == [("gl.json:1", "not a GitHub item")]
    assert "mempp import gitlab" in told[0].detail
    assert sum(isinstance(i, Skipped) for i in found) == 2 and len(docs_of(found)) == 1


def test_bad_items_are_told_one_line_each_and_the_rest_imported(tmp_path) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    no_author = comment(1, 1, "who wrote this?", "x", "2024-01-01T00:00:00Z") | {"user": None}
    no_date = comment(2, 1, "when?", "ana", "2024-01-01") | {"created_at": None}
    first = comment(3, 1, "first take", "ana", "2024-01-02T00:00:00Z")
    clash = comment(3, 1, "another take", "ana", "2024-01-02T00:00:00Z")  # same id and time
    error = {"message": "Not Found", "documentation_url": "https://docs.github.com"}
    (folder / "c.json").write_text(json.dumps([no_author, no_date, first, clash]))
    (folder / "e.json").write_text(headers(status="HTTP/2.0 404 Not Found") + json.dumps(error))
    (folder / "latin1.json").write_bytes('[{"body": "caf\xe9"}]'.encode("latin-1"))
    found = read(folder)
    lines = {
        (Path(i.location).name, type(i).__name__) for i in found if not isinstance(i, Document)
    }
    assert lines == {
        ("c.json:1", "Notice"),
        ("c.json:2", "Notice"),
        ("c.json:4", "ItemError"),
        ("e.json", "Notice"),
        ("e.json:1", "ItemError"),
        ("latin1.json", "ItemError"),
    }
    texts = {d.text: d for d in docs_of(found)}
    assert texts["who wrote this?"].author is None and texts["when?"].date is None
    assert "first take" in texts and "another take" not in texts
    clash_error = next(i for i in found if isinstance(i, ItemError) and "c.json:4" in i.location)
    assert "c.json:3" in clash_error.reason and "the first is kept" in clash_error.reason


def test_a_zip_and_a_zip_bomb(tmp_path) -> None:
    export = build_export(tmp_path / "export")
    packed = tmp_path / "export.zip"
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(export.iterdir()):
            archive.write(file, f"gh/{file.name}")
    assert len(docs_of(read(packed))) == len(docs_of(read(export)))
    assert GitHubImporter().recognizes(packed) and not get("gitlab").recognizes(packed)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("issues.json", "[" + " " * 5_000_000 + "]")
        archive.writestr("comments.json", json.dumps([comment(1, 1, "kept", "ana", "2024-01-01")]))
    with pytest.raises(InvalidInput, match=r"over the .* cap"):
        read(bomb, GitHubImporter(max_unpacked=1_000_000))
    found = read(bomb, GitHubImporter(max_member=1_000_000))
    failures = [i for i in found if isinstance(i, ItemError)]
    assert [f.location for f in failures] == [f"{bomb}:issues.json"]
    assert "limit of one file" in failures[0].reason
    assert [d.text for d in docs_of(found)] == ["kept"]


def test_recognizes_and_the_cli_dry_run(tmp_path, capsys) -> None:
    export = build_export(tmp_path / "export")
    importer = GitHubImporter()
    assert importer.recognizes(export / "issues.json") and importer.recognizes(export)
    assert not importer.recognizes(export / "README.md")
    db = tmp_path / "m.db"
    assert main(["--db", str(db), "import", "github", str(export), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not db.exists()
    assert out.startswith("would add 12, skipped 9 (1 event labeled, 1 not an API response,")


def test_a_large_paginated_file_streams(tmp_path) -> None:
    pages = []
    for page in range(50):
        items = [
            comment(page * 100 + i, i % 40 + 1, f"text {page} {i}", "ana", "2024-01-01T00:00:00Z")
            for i in range(100)
        ]
        pages.append(headers(f'<{API}/issues/comments?page={page + 2}>; rel="next"'))
        pages.append(json.dumps(items))
    file = tmp_path / "comments.http"
    file.write_text("".join(pages))
    found = read(file)
    assert len(docs_of(found)) == 5000 and not [i for i in found if not isinstance(i, Document)]
    assert len({d.thread for d in docs_of(found)}) == 40


def test_the_real_sample_through_a_store(tmp_path) -> None:
    folder = sample("github", "forgejo-recorded")
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["merge"])) as memory:
        report = run_import(memory, get("github"), folder)
        assert (report.added, report.failed) == (18, 0)
        assert run_import(memory, get("github"), folder).added == 0
        buffer = io.StringIO()
        buffer.write(report.summary())
        assert buffer.getvalue().startswith("added 18, skipped 2 (2 reaction), failed 0")
