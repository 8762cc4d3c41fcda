"""The GitLab importer: API v4 responses saved to files (``glab api --paginate``, ``curl -i``,
pages with or without headers; see :mod:`mempp.importers.api_pages`), one file, a folder or a
zip of them, into one document per issue, merge request, note (from ``/notes`` or
``/discussions``) and milestone, and one per state change (closed, reopened, merged).

- author: the user's ``name`` (every GitLab user object carries it), ``username`` and id in
  metadata;
- date: ``created_at``; a state change when it happened;
- thread: ``gitlab://HOST/projects/ID/issues/IID`` (``merge_requests/IID``) for an issue or a
  merge request, its notes and state changes: built from the project id and the iid, which
  every one of those objects names (a note by ``noteable_iid``; a state event by the page's
  ``Link`` or the file name, or by the issue read earlier), whatever the file order;
- source: an issue's, a merge request's or a milestone's ``web_url``; a note
  ``gitlab://HOST/projects/ID/notes/NOTE_ID``; a state change ``THREAD#event-closed-STAMP``;
- tags: the project path (``group/project``) when the export names it, the kind, labels.

System notes (``changed the description``, ``mentioned in``) are skipped, except the state
changes they report, which are read as state records like ``resource_state_events``.
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

_HOST = re.compile(r"^(https?://[^/]+)/")
_LINK = re.compile(r"/projects/(\d+)/(issues|merge_requests)/(\d+)/")
_FILE = re.compile(r"(issues?|merge_requests?|mrs?)[^0-9a-z]{0,3}(\d+)(?!\d)", re.I)
_PATH = re.compile(r"^https?://[^/]+/(.+?)/-/(issues|merge_requests|milestones)/\d+")
_STATE_NOTES = {"closed": "closed", "reopened": "reopened", "merged": "merged"}
_KINDS = {"Issue": "issues", "MergeRequest": "merge_requests"}


def _kind(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    web = value.get("web_url") if isinstance(value.get("web_url"), str) else ""
    if isinstance(value.get("notes"), list) and "individual_note" in value:
        return "discussion"
    if "noteable_type" in value and "body" in value:
        return "note"
    if "resource_type" in value and "state" in value and "created_at" in value:
        return "state event"
    if "iid" in value and "/-/merge_requests/" in web:
        return "merge request"
    if "iid" in value and ("/-/issues/" in web or "/-/work_items/" in web):
        return "issue"
    if "iid" in value and "/-/milestones/" in web:
        return "milestone"
    if "name" in value and "awardable_type" in value:
        return "award emoji"
    if "username" in value and "web_url" in value and "state" in value:
        return "user"
    return None


class _Export(ForgeExport):
    forge = "gitlab"
    kind_of = staticmethod(_kind)
    message_types = (str, dict)

    def __init__(self, tree: Tree) -> None:
        super().__init__(tree)
        self.paths: dict[int, str] = {}  # project id -> group/project
        self.by_global: dict[tuple[str, int], str] = {}  # (kind, global id) -> thread

    def _item(self, file: str, location: str, entry: Entry, kind: str) -> Iterator[Item]:
        value = entry.value
        if kind in ("award emoji", "user"):
            yield Skipped(location, kind)
        elif kind in ("issue", "merge request"):
            yield from self._issue(location, value, kind)
        elif kind == "milestone":
            yield from self._milestone(location, value)
        elif kind == "discussion":
            for number, note in enumerate(value["notes"], start=1):
                yield from self._note(f"{location}.{number}", note, file, entry)
        elif kind == "note":
            yield from self._note(location, value, file, entry)
        else:
            yield from self._state_event(location, value, entry)

    # -- fields --------------------------------------------------------------------------

    def _person(self, user: Any, location: str, what: str) -> Iterator[Item]:
        if not isinstance(user, dict) or not (user.get("name") or user.get("username")):
            yield Notice(location, f"{what} without an author: stored without one")
            return None, {}
        meta: dict[str, Any] = {}
        if isinstance(user.get("username"), str):
            meta["user"] = user["username"]
        if isinstance(user.get("id"), int):
            meta["user_id"] = user["id"]
        if user.get("bot") is True:
            meta["bot"] = True
        name = user.get("name") if isinstance(user.get("name"), str) else None
        return (name.strip() if name and name.strip() else user.get("username")), meta

    def _date(self, value: dict[str, Any], location: str, what: str) -> Iterator[Item]:
        moment = iso_moment(value.get("created_at"))
        if moment is None:
            yield Notice(location, f"{what}: no readable created_at; stored undated")
        return moment

    @staticmethod
    def _host(*urls: Any) -> str:
        for url in urls:
            if isinstance(url, str) and (match := _HOST.match(url)):
                return match.group(1).split("://", 1)[1]
        return "gitlab.com"

    def _state(
        self,
        location: str,
        thread: str,
        label: str,
        event: str,
        moment: datetime | None,
        actor: Any,
        tags: list[str],
    ) -> Iterator[Item]:
        if moment is None:
            return
        # To the second: the issue's closed_at and its state event differ in milliseconds.
        moment = moment.replace(microsecond=0)
        if not self._first_state(thread, event, moment):
            yield Skipped(location, "repeated in the export")
            return
        who, meta = (None, {})
        if isinstance(actor, dict):
            who, meta = yield from self._person(actor, location, f"the {event} event")
        yield Document.create(
            f"{label} {event}" + (f" by {who}" if who else ""),
            author=who,
            date=moment,
            tags=[*tags, "state"],
            source=f"{thread}#event-{event}-{utc_stamp(moment)}",
            thread=thread,
            metadata={"kind": "state", "event": event} | meta,
        )

    # -- items ---------------------------------------------------------------------------

    def _issue(self, location: str, value: dict[str, Any], kind: str) -> Iterator[Item]:
        project, iid = value.get("project_id"), value.get("iid")
        if not isinstance(project, int) or not isinstance(iid, int):
            yield ItemError(location, f"{kind} without a project_id and iid")
            return
        web = value["web_url"]
        host = self._host(web)
        path_match = _PATH.match(web)
        if path_match:
            self.paths.setdefault(project, path_match.group(1))
        plural = "merge_requests" if kind == "merge request" else "issues"
        thread = f"gitlab://{host}/projects/{project}/{plural}/{iid}"
        if isinstance(value.get("id"), int):
            self.by_global[(plural, value["id"])] = thread
        label = f"Merge request !{iid}" if kind == "merge request" else f"Issue #{iid}"
        title = value.get("title") if isinstance(value.get("title"), str) else ""
        body = value.get("description") if isinstance(value.get("description"), str) else ""
        author, meta = yield from self._person(value.get("author"), location, label)
        moment = yield from self._date(value, location, label)
        path = self.paths.get(project)
        labels = [
            (lab if isinstance(lab, str) else lab.get("name"))
            for lab in listed(value.get("labels"))
            if isinstance(lab, str) or (isinstance(lab, dict) and isinstance(lab.get("name"), str))
        ]
        tags = [path] if path else []
        meta |= {"kind": kind, "project_id": project, "iid": iid}
        for key in ("id", "state", "updated_at", "closed_at", "merged_at", "source_branch"):
            if isinstance(value.get(key), str | int) and not isinstance(value.get(key), bool):
                meta[key] = value[key]
        if isinstance(value.get("milestone"), dict) and value["milestone"].get("title"):
            meta["milestone"] = value["milestone"]["title"]
        doc = Document.create(
            f"{label}: {title}\n\n{body}".strip(),
            author=author,
            date=moment,
            tags=[*tags, kind, *[lab for lab in labels if lab]],
            source=web,
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, value.get("updated_at"), location)
        merged = iso_moment(value.get("merged_at"))
        merger = value.get("merged_by") or value.get("merge_user")
        yield from self._state(location, thread, label, "merged", merged, merger, tags)
        closed = iso_moment(value.get("closed_at"))
        yield from self._state(
            location, thread, label, "closed", closed, value.get("closed_by"), tags
        )

    def _milestone(self, location: str, value: dict[str, Any]) -> Iterator[Item]:
        web = value["web_url"]
        title = value.get("title") if isinstance(value.get("title"), str) else ""
        moment = yield from self._date(value, location, "milestone")
        due = value.get("due_date") if isinstance(value.get("due_date"), str) else None
        description = value.get("description") if isinstance(value.get("description"), str) else ""
        path_match = _PATH.match(web)
        tags = [path_match.group(1)] if path_match else []
        meta = {"kind": "milestone", "iid": value.get("iid"), "state": value.get("state")}
        doc = Document.create(
            "\n\n".join(
                p
                for p in (f"Milestone {title}" + (f", due {due}" if due else ""), description)
                if p
            ),
            date=moment,
            tags=[*tags, "milestone"],
            source=web,
            thread=web,
            metadata={k: v for k, v in meta.items() if v is not None},
        )
        yield from self._repeat_or(doc, value.get("updated_at"), location)

    def _thread_of(
        self, plural: str | None, iid: Any, project: Any, host: str, file: str, entry: Entry
    ) -> str | None:
        """The thread of an item that names its issue by iid, or leaves it to the page."""
        if plural and isinstance(iid, int) and isinstance(project, int):
            return f"gitlab://{host}/projects/{project}/{plural}/{iid}"
        link = _LINK.search(entry.response.headers.get("link", ""))
        if link is not None:
            return f"gitlab://{host}/projects/{link.group(1)}/{link.group(2)}/{link.group(3)}"
        named = _FILE.search(unquote(PurePosixPath(file).name))
        if named is not None and isinstance(project, int):
            kind = "merge_requests" if named.group(1).lower().startswith("m") else "issues"
            return f"gitlab://{host}/projects/{project}/{kind}/{int(named.group(2))}"
        return None

    def _note(self, location: str, note: Any, file: str, entry: Entry) -> Iterator[Item]:
        if not isinstance(note, dict):
            yield ItemError(location, "a note must be a JSON object")
            return
        author = note.get("author") if isinstance(note.get("author"), dict) else {}
        host = self._host(author.get("web_url"))
        plural = _KINDS.get(note.get("noteable_type") or "")
        project = note.get("project_id")
        thread = self._thread_of(plural, note.get("noteable_iid"), project, host, file, entry)
        if thread is None:
            yield ItemError(location, "a note that does not say its issue or merge request")
            return
        body = note.get("body") if isinstance(note.get("body"), str) else ""
        iid = int(thread.rsplit("/", 1)[1])
        label = f"Merge request !{iid}" if "/merge_requests/" in thread else f"Issue #{iid}"
        path = self.paths.get(project) if isinstance(project, int) else None
        tags = [path] if path else []
        moment = iso_moment(note.get("created_at"))
        if note.get("system"):
            event = _STATE_NOTES.get(body.strip().split(" ", 1)[0] if body.strip() else "")
            if event is None:
                yield Skipped(location, "system note")
                return
            yield from self._state(location, thread, label, event, moment, author, tags)
            return
        who, meta = yield from self._person(note.get("author"), location, "note")
        if moment is None:
            yield Notice(location, "note: no readable created_at; stored undated")
        meta |= {"kind": "note", "iid": iid}
        for key in ("id", "updated_at", "type", "noteable_type", "project_id"):
            if isinstance(note.get(key), str | int) and not isinstance(note.get(key), bool):
                meta[key] = note[key]
        base = thread.split("/projects/", 1)[0]
        doc = Document.create(
            body,
            author=who,
            date=moment,
            tags=[*tags, "note"],
            source=f"{base}/projects/{project}/notes/{note.get('id')}",
            thread=thread,
            metadata=meta,
        )
        yield from self._repeat_or(doc, note.get("updated_at"), location)

    def _state_event(self, location: str, value: dict[str, Any], entry: Entry) -> Iterator[Item]:
        event = value.get("state")
        if event not in ("closed", "reopened", "merged"):
            yield Skipped(location, f"state event {event}")
            return
        user = value.get("user") if isinstance(value.get("user"), dict) else {}
        host = self._host(user.get("web_url"))
        plural = _KINDS.get(value.get("resource_type") or "")
        thread = self.by_global.get((plural or "", value.get("resource_id") or -1))
        link = _LINK.search(entry.response.headers.get("link", ""))
        if thread is None and link is not None:
            thread = f"gitlab://{host}/projects/{link.group(1)}/{link.group(2)}/{link.group(3)}"
        if thread is None:
            yield ItemError(
                location,
                "a state event that does not say its issue: keep the page's Link header "
                "(glab api --include) or import it with its issue",
            )
            return
        moment = iso_moment(value.get("created_at"))
        if moment is None:
            yield ItemError(location, f"a {event} event without a readable created_at")
            return
        iid = int(thread.rsplit("/", 1)[1])
        label = f"Merge request !{iid}" if "/merge_requests/" in thread else f"Issue #{iid}"
        project = int(thread.split("/projects/", 1)[1].split("/", 1)[0])
        tags = [self.paths[project]] if project in self.paths else []
        yield from self._state(location, thread, label, event, moment, value.get("user"), tags)


class GitLabImporter(ForgeImporter):
    """Reads saved GitLab API v4 responses. ``max_unpacked``/``max_member`` cap a zip."""

    name = "gitlab"
    description = "GitLab API v4 JSON as `glab api --paginate` saves it (a file, folder or zip)"
    export = _Export
