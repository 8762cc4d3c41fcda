"""The GitHub importer: REST API responses saved to files (``gh api --paginate``, with or
without ``--include``'s headers; see :mod:`mempp.importers.api_pages`), one file, a folder or a
zip of them, into one document per issue, pull request, comment, review, review comment and
milestone, and one per state change (closed, merged, reopened).

- author: the login, as GitHub shows it on every item (a profile name is optional, can
  change, and is in no list response, so an export without profiles would name people
  otherwise and a re-import would store everything again); the numeric id in metadata, and
  the profile name when a user object gives it (``gh api users/LOGIN`` saved in a file named
  ``users*`` or ``members*``, read first);
- date: ``created_at`` (a review: ``submitted_at``; a state change: when it happened);
- thread: ``https://HOST/OWNER/REPO/issues/N`` for an issue or pull request and everything on
  it (GitHub numbers both in one series, and that URL opens either);
- source: the item's ``html_url``; a state change ``THREAD#event-closed-20191112T202222Z``;
- tags: ``OWNER/REPO``, the kind (``issue``, ``pull request``, ``comment``, ``review``,
  ``review comment``, ``milestone``, ``state``) and an issue's labels.

Texts come from the item alone (never from another file), so a re-import of the same or an
overlapping export gives the same documents and the store's duplicate rule (author, text,
date) skips them; an item edited between two exports (same ``created_at``, new text) is a new
record next to the old one. Reactions, user lists and the events that are not a state change
(labeled, assigned...) are skipped by reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote

from mempp.importers.api_pages import Entry
from mempp.importers.archive import Tree
from mempp.importers.base import Item, ItemError, Notice, Skipped
from mempp.importers.forges import ForgeExport, ForgeImporter, utc_stamp
from mempp.importers.inputs import iso_moment, listed
from mempp.records import Document
from mempp.validate import shown

_HTML = re.compile(r"^(https?://[^/]+)/([^/]+/[^/]+)/(issues|pull|pulls|milestone)/(\d+)")
_API = re.compile(
    r"^(https?://[^/]+)/(?:api/v3/)?repos/([^/]+/[^/]+)/(issues|pulls|milestones)/(\d+)"
)
_API_REPO = re.compile(r"^(https?://[^/]+)/(?:api/v3/)?repos/([^/]+/[^/]+)/")
_LINK_ISSUE = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)/(?:events|timeline)\b")
_FILE_NUMBER = re.compile(r"(?:issues?|pulls?|pr)[^0-9a-z]{0,3}(\d+)(?!\d)", re.I)
STATE_EVENTS = ("closed", "reopened", "merged")
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
_REVIEW_WORDS = {
    "APPROVED": "approved",
    "CHANGES_REQUESTED": "changes requested",
    "COMMENTED": "commented",
    "DISMISSED": "dismissed",
}


def _kind(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    html = value.get("html_url") if isinstance(value.get("html_url"), str) else ""
    if "pull_request_review_id" in value and "diff_hunk" in value:
        return "review comment"
    if "submitted_at" in value and "state" in value and "#pullrequestreview-" in html:
        return "review"
    if isinstance(value.get("event"), str) and ("actor" in value or "created_at" in value):
        return "event"
    if "number" in value and "title" in value and ("head" in value or "/pull/" in html):
        return "pull request"
    if "number" in value and "title" in value and "/issues/" in html:
        return "issue"
    if "issue_url" in value and "body" in value:
        return "comment"
    if "due_on" in value or "/milestone/" in html:
        return "milestone"
    if value.get("content") in REACTIONS and "user" in value and "body" not in value:
        return "reaction"
    if "login" in value and "type" in value and "avatar_url" in value:
        return "user"
    return None


class _Export(ForgeExport):
    forge = "github"
    kind_of = staticmethod(_kind)

    def __init__(self, tree: Tree) -> None:
        super().__init__(tree)
        self.names: dict[str, str] = {}  # login -> name, from user objects

    def items(self) -> Iterator[Item]:
        names = self.tree.names()
        # Users first: their names then attribute every item, whatever the file order.
        first = [n for n in names if PurePosixPath(n).name.lower().startswith(("user", "member"))]
        for name in first + [n for n in names if n not in first]:
            yield from self._file(name)

    def _item(self, file: str, location: str, entry: Entry, kind: str) -> Iterator[Item]:
        value = entry.value
        if kind == "reaction":
            yield Skipped(location, "reaction")
        elif kind == "user":
            login, full = value.get("login"), value.get("name")
            if isinstance(login, str) and isinstance(full, str) and full.strip():
                self.names[login] = full.strip()
            yield Skipped(location, "user profile")
        elif kind in ("issue", "pull request"):
            yield from self._issue(location, value, kind)
        elif kind == "comment":
            yield from self._comment(location, value)
        elif kind == "review":
            yield from self._review(location, value)
        elif kind == "review comment":
            yield from self._review_comment(location, value)
        elif kind == "milestone":
            yield from self._milestone(location, value)
        else:
            yield from self._event(file, location, entry)

    # -- fields --------------------------------------------------------------------------

    def _person(self, user: Any, location: str, what: str) -> Iterator[Item]:
        """The author's name and metadata; a notice when the item has none."""
        if not isinstance(user, dict) or not isinstance(user.get("login"), str):
            yield Notice(location, f"{what} without a user (a deleted account?): no author")
            return None, {}
        login = user["login"]
        meta: dict[str, Any] = {"user": login}
        if isinstance(user.get("id"), int):
            meta["user_id"] = user["id"]
        if user.get("type") == "Bot":
            meta["bot"] = True
        given = user.get("name") if isinstance(user.get("name"), str) else None
        named = self.names.get(login) or (given.strip() if given and given.strip() else None)
        if named:
            meta["user_name"] = named
        # The login, not the profile name: it is what GitHub shows on every item and it is in
        # every export, so an overlapping export without the profiles names people alike.
        return login, meta

    def _date(self, value: Any, key: str, location: str, what: str) -> Iterator[Item]:
        moment = iso_moment(value.get(key))
        if moment is None:
            said = value.get(key)
            why = f"unreadable {key} {shown(said)}" if said else f"no {key}"
            yield Notice(location, f"{what}: {why}; stored undated")
        return moment

    def _thread(self, value: Any, *keys: str) -> tuple[str, str, int] | None:
        """``(host, owner/repo, number)`` of the issue or pull request ``value`` is on."""
        for key in keys:
            url = value.get(key)
            if key == "_links" and isinstance(url, dict):
                url = (url.get("pull_request") or {}).get("href")
            if not isinstance(url, str):
                continue
            match = _HTML.match(url)
            if match and match.group(3) != "milestone":
                return match.group(1), match.group(2), int(match.group(4))
            match = _API.match(url)
            if match and match.group(3) != "milestones":
                host = match.group(1).replace("://api.github.com", "://github.com")
                return host, match.group(2), int(match.group(4))
        return None

    def _state(
        self,
        location: str,
        where: tuple[str, str, int],
        event: str,
        moment: datetime | None,
        actor: Any,
        extra: dict[str, Any],
    ) -> Iterator[Item]:
        if moment is None:
            return
        host, repo, number = where
        thread = f"{host}/{repo}/issues/{number}"
        if not self._first_state(thread, event, moment):
            yield Skipped(location, "repeated in the export")
            return
        who, meta = (None, {})
        if isinstance(actor, dict):
            who, meta = yield from self._person(actor, location, f"the {event} event")
        text = f"{repo}#{number} {event}" + (f" by {who}" if who else "")
        yield Document.create(
            text,
            author=who,
            date=moment,
            tags=[repo, "state"],
            source=f"{thread}#event-{event}-{utc_stamp(moment)}",
            thread=thread,
            metadata={"kind": "state", "event": event, "repo": repo, "number": number}
            | meta
            | extra,
        )

    # -- items ---------------------------------------------------------------------------

    def _issue(self, location: str, value: dict[str, Any], kind: str) -> Iterator[Item]:
        if "pull_request" in value and kind == "issue":
            kind = "pull request"
        where = self._thread(value, "html_url", "url")
        if where is None:
            yield ItemError(location, f"{kind} without an html_url or url naming its repository")
            return
        host, repo, number = where
        title = value.get("title") if isinstance(value.get("title"), str) else ""
        body = value.get("body") if isinstance(value.get("body"), str) else ""
        author, meta = yield from self._person(value.get("user"), location, f"{kind} #{number}")
        moment = yield from self._date(value, "created_at", location, f"{kind} #{number}")
        labels = [
            label["name"]
            for label in listed(value.get("labels"))
            if isinstance(label, dict) and isinstance(label.get("name"), str) and label["name"]
        ]
        word = "Pull request" if kind == "pull request" else "Issue"
        thread = f"{host}/{repo}/issues/{number}"
        meta |= {"kind": kind, "repo": repo, "number": number}
        for key in ("id", "state", "state_reason", "updated_at", "closed_at", "merged_at"):
            if isinstance(value.get(key), str | int) and not isinstance(value.get(key), bool):
                meta[key] = value[key]
        milestone = value.get("milestone")
        if isinstance(milestone, dict) and isinstance(milestone.get("title"), str):
            meta["milestone"] = milestone["title"]
        assignees = [
            a["login"]
            for a in listed(value.get("assignees"))
            if isinstance(a, dict) and isinstance(a.get("login"), str)
        ]
        if assignees:
            meta["assignees"] = assignees
        html = value.get("html_url")
        doc = Document.create(
            f"{word} #{number}: {title}\n\n{body}".strip(),
            author=author,
            date=moment,
            tags=[repo, kind, *labels],
            source=html if isinstance(html, str) and html else thread,
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, value.get("updated_at"), location)
        pull = value.get("pull_request") if isinstance(value.get("pull_request"), dict) else {}
        merged = iso_moment(value.get("merged_at") or pull.get("merged_at"))
        yield from self._state(location, where, "merged", merged, value.get("merged_by"), {})
        closed = iso_moment(value.get("closed_at"))
        reason = value.get("state_reason")
        extra = {"state_reason": reason} if isinstance(reason, str) else {}
        yield from self._state(location, where, "closed", closed, value.get("closed_by"), extra)

    def _comment(self, location: str, value: dict[str, Any]) -> Iterator[Item]:
        where = self._thread(value, "issue_url", "html_url")
        if where is None:
            yield ItemError(location, "comment without an issue_url naming its issue")
            return
        host, repo, number = where
        author, meta = yield from self._person(value.get("user"), location, "comment")
        moment = yield from self._date(value, "created_at", location, "comment")
        body = value.get("body") if isinstance(value.get("body"), str) else ""
        meta |= {"kind": "comment", "repo": repo, "number": number}
        for key in ("id", "updated_at"):
            if isinstance(value.get(key), str | int):
                meta[key] = value[key]
        thread = f"{host}/{repo}/issues/{number}"
        html = value.get("html_url")
        doc = Document.create(
            body,
            author=author,
            date=moment,
            tags=[repo, "comment"],
            source=html
            if isinstance(html, str) and html
            else f"{thread}#comment-{value.get('id')}",
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, value.get("updated_at"), location)

    def _review(self, location: str, value: dict[str, Any]) -> Iterator[Item]:
        where = self._thread(value, "pull_request_url", "_links", "html_url")
        if where is None:
            yield ItemError(location, "review without a pull_request_url naming its pull request")
            return
        state = value.get("state") if isinstance(value.get("state"), str) else ""
        if state == "PENDING" or not value.get("submitted_at"):
            yield Skipped(location, "pending review")
            return
        host, repo, number = where
        author, meta = yield from self._person(value.get("user"), location, "review")
        moment = yield from self._date(value, "submitted_at", location, "review")
        body = value.get("body") if isinstance(value.get("body"), str) else ""
        word = _REVIEW_WORDS.get(state, state.lower().replace("_", " "))
        meta |= {"kind": "review", "repo": repo, "number": number, "state": state}
        if isinstance(value.get("id"), int):
            meta["id"] = value["id"]
        thread = f"{host}/{repo}/issues/{number}"
        doc = Document.create(
            f"Review of pull request #{number}: {word}\n\n{body}".strip(),
            author=author,
            date=moment,
            tags=[repo, "review"],
            source=value.get("html_url") or f"{thread}#review-{value.get('id')}",
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, value.get("submitted_at"), location)

    def _review_comment(self, location: str, value: dict[str, Any]) -> Iterator[Item]:
        where = self._thread(value, "pull_request_url", "_links", "html_url")
        if where is None:
            yield ItemError(location, "review comment without a pull_request_url")
            return
        host, repo, number = where
        author, meta = yield from self._person(value.get("user"), location, "review comment")
        moment = yield from self._date(value, "created_at", location, "review comment")
        body = value.get("body") if isinstance(value.get("body"), str) else ""
        path = value.get("path") if isinstance(value.get("path"), str) else None
        line = value.get("line") or value.get("original_line")
        place = f"On {path}" + (f" line {line}" if isinstance(line, int) else "") if path else ""
        meta |= {"kind": "review comment", "repo": repo, "number": number}
        for key in (
            "id",
            "updated_at",
            "path",
            "commit_id",
            "pull_request_review_id",
            "in_reply_to_id",
        ):
            if isinstance(value.get(key), str | int):
                meta[key] = value[key]
        thread = f"{host}/{repo}/issues/{number}"
        doc = Document.create(
            f"{place}:\n{body}" if place and body.strip() else body,
            author=author,
            date=moment,
            tags=[repo, "review comment"],
            source=value.get("html_url") or f"{thread}#discussion-{value.get('id')}",
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, value.get("updated_at"), location)

    def _milestone(self, location: str, value: dict[str, Any]) -> Iterator[Item]:
        html = value.get("html_url") if isinstance(value.get("html_url"), str) else ""
        match = _HTML.match(html)
        api = _API.match(value.get("url") or "") if isinstance(value.get("url"), str) else None
        if match is None and api is None:
            yield ItemError(location, "milestone without an html_url naming its repository")
            return
        if match is not None:
            host, repo, number = match.group(1), match.group(2), int(match.group(4))
        else:
            assert api is not None
            host = api.group(1).replace("://api.github.com", "://github.com")
            repo, number = api.group(2), int(api.group(4))
        title = value.get("title") if isinstance(value.get("title"), str) else ""
        author, meta = yield from self._person(value.get("creator"), location, "milestone")
        moment = yield from self._date(value, "created_at", location, "milestone")
        due = iso_moment(value.get("due_on"))
        description = value.get("description") if isinstance(value.get("description"), str) else ""
        lines = [f"Milestone {title}" + (f", due {due.date().isoformat()}" if due else "")]
        if description.strip():
            lines.append(description.strip())
        thread = f"{host}/{repo}/milestone/{number}"
        meta |= {"kind": "milestone", "repo": repo, "number": number}
        for key in ("id", "state", "due_on", "updated_at", "closed_at"):
            if isinstance(value.get(key), str | int):
                meta[key] = value[key]
        doc = Document.create(
            "\n\n".join(lines),
            author=author,
            date=moment,
            tags=[repo, "milestone"],
            source=html or thread,
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, value.get("updated_at"), location)
        closed = iso_moment(value.get("closed_at"))
        if closed is not None and self._first_state(thread, "closed", closed):
            yield Document.create(
                f"Milestone {title} of {repo} closed",
                date=closed,
                tags=[repo, "state"],
                source=f"{thread}#event-closed-{utc_stamp(closed)}",
                thread=thread,
                metadata={"kind": "state", "event": "closed", "repo": repo, "milestone": title},
            )

    def _event(self, file: str, location: str, entry: Entry) -> Iterator[Item]:
        value = entry.value
        event = value["event"]
        if event == "commented":  # a timeline's comment is the comment itself
            yield from self._comment(location, value | {"issue_url": value.get("issue_url")})
            return
        if event == "reviewed":
            yield from self._review(location, value)
            return
        if event not in STATE_EVENTS:
            yield Skipped(location, f"event {event}")
            return
        where = self._event_thread(file, entry)
        if where is None:
            yield ItemError(
                location,
                f"a {event} event that does not say its issue: save /issues/N/events pages "
                "in a file whose name holds the number (issue12_events.json)",
            )
            return
        moment = iso_moment(value.get("created_at"))
        if moment is None:
            yield ItemError(location, f"a {event} event without a readable created_at")
            return
        extra: dict[str, Any] = {}
        for key in ("id", "commit_id", "state_reason"):
            if isinstance(value.get(key), str | int):
                extra["event_id" if key == "id" else key] = value[key]
        yield from self._state(location, where, event, moment, value.get("actor"), extra)

    def _event_thread(self, file: str, entry: Entry) -> tuple[str, str, int] | None:
        value = entry.value
        issue = value.get("issue")
        if isinstance(issue, dict):
            found = self._thread(issue, "html_url", "url")
            if found is not None:
                return found
        repo_match = (
            _API_REPO.match(value.get("url") or "") if isinstance(value.get("url"), str) else None
        )
        link = entry.response.headers.get("link", "")
        linked = _LINK_ISSUE.search(link)
        if linked is not None:
            host = repo_match.group(1) if repo_match else "https://github.com"
            return (
                host.replace("://api.github.com", "://github.com"),
                linked.group(1),
                int(linked.group(2)),
            )
        numbered = _FILE_NUMBER.search(unquote(PurePosixPath(file).name))
        if repo_match is not None and numbered is not None:
            host = repo_match.group(1).replace("://api.github.com", "://github.com")
            return host, repo_match.group(2), int(numbered.group(1))
        return None


class GitHubImporter(ForgeImporter):
    """Reads saved GitHub REST responses. ``max_unpacked``/``max_member`` cap a zip, in bytes."""

    name = "github"
    description = "GitHub REST API JSON as `gh api --paginate` saves it (a file, folder or zip)"
    export = _Export
