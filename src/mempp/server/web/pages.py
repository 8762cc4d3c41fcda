"""The web pages: search, evidence (and ask), a record, upload, login.

Every page is a plain GET form over the library (the same calls ``Memory`` offers), rendered
on the server; writes (login, ask, upload) are POSTs carrying the session's CSRF token. The
handlers are plain functions, so FastAPI runs the library's blocking calls off the event loop.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from mempp.dates import parse_as_of, parse_event_date
from mempp.records import Hit, Record
from mempp.server import keys
from mempp.server.problems import request_id_of
from mempp.server.web import forms
from mempp.server.web.access import (
    HTMLErrorRoute,
    Visitor,
    WebError,
    as_web_error,
    check_csrf,
    codec,
    render,
    require,
    same_origin_path,
    server_state,
    set_session_cookie,
    visitor,
)
from mempp.server.web.record_links import (
    entries_about,
    newer_chain,
    older_chain,
    read_log,
)
from mempp.server.web.session import COOKIE
from mempp.server.web.timeline import Version, layout
from mempp.server.web.upload import ingest_files, totals

router = APIRouter(route_class=HTMLErrorRoute, include_in_schema=False)
Who = Annotated[Visitor, Depends(visitor)]

DEFAULT_K = 10
EVIDENCE_K = 20
DEFAULT_BUDGET = 6000
EXCERPT = 280


def _memory(request: Request, who: Visitor) -> Any:
    return server_state(request).memory(who.scope)


# -- login -------------------------------------------------------------------------------
@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    if not server_state(request).keys_required:  # nothing to log in with
        return RedirectResponse(_local(next), status_code=303)
    sessions = codec(request)
    session = sessions.load(request.cookies.get(COOKIE)) or sessions.new(None)
    response = render(
        request,
        None,
        "login.html",
        {"next": _local(next), "csrf": sessions.csrf(session), "error": None},
    )
    set_session_cookie(request, response, sessions.dump(session))
    return response


@router.post("/login")
def login(
    request: Request,
    key: Annotated[str, Form()] = "",
    csrf: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    sessions = codec(request)
    before = sessions.load(request.cookies.get(COOKIE))
    if not sessions.csrf_ok(before, csrf):
        raise WebError(403, "Form expired", "Reload the login page and try again.", "/login")
    state = server_state(request)
    principal = state.authenticate(key.strip()) if key.strip() else None
    if principal is None:
        session = sessions.new(None)
        response = render(
            request,
            None,
            "login.html",
            {
                "next": _local(next),
                "csrf": sessions.csrf(session),
                "error": "Unknown or revoked key.",
            },
            status=401,
        )
        set_session_cookie(request, response, sessions.dump(session))
        return response
    # A fresh nonce at login: a token seen before logging in is worthless after. The cookie
    # carries a session key of its own, which logout revokes.
    token = keys.create_session(state.store, principal)
    response = RedirectResponse(_local(next), status_code=303)
    set_session_cookie(request, response, sessions.dump(sessions.new(token)))
    return response


@router.post("/logout")
def logout(request: Request, who: Who, csrf: Annotated[str, Form()] = "") -> Response:
    check_csrf(request, who, csrf)
    if who.session.token is not None:  # ended on the server: the cookie is dead everywhere
        keys.end_session(server_state(request).store, who.session.token)
    response = RedirectResponse("/login" if who.keys_required else "/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def _local(target: str | None) -> str:
    """Only a path on this site may follow a login (no open redirect)."""
    return same_origin_path(target) or "/"


# -- search ------------------------------------------------------------------------------
@router.get("/")
@router.get("/search")
def search_page(
    request: Request,
    who: Who,
    q: str | None = None,
    as_of: str | None = None,
    known_at: str | None = None,
    author: str | None = None,
    tags: str | None = None,
    tags_mode: str | None = None,
    k: str | None = None,
) -> Response:
    query = forms.text(q)
    bound = forms.date_field("as_of", as_of)
    count = forms.int_field("k", k, default=DEFAULT_K, low=1, high=forms.MAX_K)
    filters = {
        "known_at": forms.date_field("known_at", known_at),
        "author": forms.text(author),
        "tags": forms.tag_list(tags),
        "tags_mode": forms.choice("tags_mode", tags_mode, ("any", "all")),
    }
    memory = _memory(request, who)
    hits = memory.search(query, as_of=bound, k=count, **filters) if query else []
    return render(
        request,
        who,
        "search.html",
        {
            "q": query or "",
            "as_of": bound or "",
            "k": count,
            "filters": {**filters, "tags": ", ".join(filters["tags"])},
            "hits": hits,
            "successors": successors_within(memory, hits, bound),
            "searched": query is not None,
            "range": date_range(request, memory),
            "excerpt": EXCERPT,
        },
    )


def successors_within(memory: Any, hits: list[Hit], bound: str | None) -> dict[int, Record]:
    """The records that superseded the hits, those dated within the as-of bound only: as of
    a date, a replacement written later was not there yet."""
    wanted = {h.record.superseded_by for h in hits if h.record.superseded_by is not None}
    found = memory.store.get(memory.scope, wanted) if wanted else {}
    limit = parse_as_of(bound)
    return {
        rid: r
        for rid, r in found.items()
        if limit is None or (r.date is not None and _event_key(r) <= limit)
    }


def _event_key(record: Record) -> int:
    parsed = parse_event_date(record.date)
    assert parsed is not None
    return parsed.key


def date_range(request: Request, memory: Any) -> tuple[str, str] | None:
    """First and last event day of the scope, for the as-of slider; cached per scope until
    its row count changes (rows are append-only, so a count names a state of the range)."""
    cache: dict[str, tuple[int, tuple[str, str] | None]] = request.app.state.mempp_web_ranges
    count = memory.store.count(memory.scope, active_only=False)
    cached = cache.get(memory.scope)
    if cached is not None and cached[0] == count:
        return cached[1]
    first = last = None
    for record in memory.records():
        if record.day:
            first = record.day if first is None or record.day < first else first
            last = record.day if last is None or record.day > last else last
    found = (first, last) if first and last else None
    cache[memory.scope] = (count, found)
    return found


# -- evidence and ask --------------------------------------------------------------------
@router.get("/evidence")
def evidence_page(
    request: Request,
    who: Who,
    q: str | None = None,
    as_of: str | None = None,
    k: str | None = None,
    budget: str | None = None,
) -> Response:
    return _evidence(request, who, q, as_of, k, budget, answer=None)


@router.post("/ask")
def ask(
    request: Request,
    who: Who,
    q: Annotated[str, Form()] = "",
    as_of: Annotated[str, Form()] = "",
    k: Annotated[str, Form()] = "",
    budget: Annotated[str, Form()] = "",
    csrf: Annotated[str, Form()] = "",
) -> Response:
    check_csrf(request, who, csrf)
    state = server_state(request)
    if state.llm is None:
        raise WebError(503, "No language model", "This server has no LLM endpoint configured.")
    question = forms.text(q)
    if question is None:
        raise WebError(400, "Nothing to ask", "q: write a question first.")
    bound = forms.date_field("as_of", as_of)
    count = forms.int_field("k", k, default=EVIDENCE_K, low=1, high=forms.MAX_K)
    chars = forms.int_field("budget", budget, default=DEFAULT_BUDGET, low=1, high=forms.MAX_BUDGET)
    answer = _memory(request, who).ask(question, as_of=bound, k=count, llm=state.llm, budget=chars)
    return _evidence(request, who, q, as_of, k, budget, answer=answer)


def _evidence(
    request: Request,
    who: Visitor,
    q: str | None,
    as_of: str | None,
    k: str | None,
    budget: str | None,
    answer: Any,
) -> Response:
    query = forms.text(q)
    bound = forms.date_field("as_of", as_of)
    count = forms.int_field("k", k, default=EVIDENCE_K, low=1, high=forms.MAX_K)
    chars = forms.int_field("budget", budget, default=DEFAULT_BUDGET, low=1, high=forms.MAX_BUDGET)
    entries: list[dict[str, Any]] = []
    used = 0
    if query:
        evidence = _memory(request, who).evidence(query, as_of=bound, k=count, budget=chars)
        used = len(evidence.text)
        for row in evidence.rows:
            entry = evidence.text[row.offset : row.offset + row.length]
            head, _, body = entry.partition("\n")
            entries.append({"id": row.id, "head": head, "body": body, "truncated": row.truncated})
    return render(
        request,
        who,
        "evidence.html",
        {
            "q": query or "",
            "as_of": bound or "",
            "k": count,
            "budget": chars,
            "used": used,
            "entries": entries,
            "searched": query is not None,
            "answer": answer,
        },
    )


# -- a record ----------------------------------------------------------------------------
@router.get("/records/{record_id}")
def record_page(request: Request, who: Who, record_id: str) -> Response:
    number = forms.record_id(record_id)
    memory = _memory(request, who)
    record = memory.get(number)
    log = read_log(memory)
    entries = memory.history(record_id=record.id)
    order = [e.record.id for e in entries]
    here = order.index(record.id) if record.id in order else len(order)
    thread = [(i, e.record) for i, e in enumerate(entries) if "thread" in e.reasons]
    return render(
        request,
        who,
        "record.html",
        {
            "record": record,
            "newer": newer_chain(memory, record),
            "older": older_chain(memory, record, log),
            "thread_before": [r for i, r in thread if i < here],
            "thread_after": [r for i, r in thread if i > here],
            "log": entries_about(log, record.id),
        },
    )


# -- timeline and changes ---------------------------------------------------------------
@router.get("/timeline")
def timeline_page(
    request: Request,
    who: Who,
    q: str | None = None,
    record: str | None = None,
    as_of: str | None = None,
) -> Response:
    """A subject's history on a time axis (``Memory.history``): the subject is a record, or
    the best hit of a query; the as-of line starts at ``as_of``."""
    query = forms.text(q)
    anchor = forms.record_id(record) if forms.text(record) is not None else None
    bound = forms.date_field("as_of", as_of)
    day = bound[:10] if bound else None
    context: dict[str, Any] = {"q": query or "", "as_of": day, "record": None, "versions": []}
    if query is None and anchor is None:
        return render(request, who, "timeline.html", context)
    memory = _memory(request, who)
    entries = memory.history(None if anchor else query, record_id=anchor)
    versions = [_version(entry.record, entry.reasons) for entry in entries]
    subject = next((e.record for e in entries if "subject" in e.reasons), None)
    context.update(
        record=subject,
        versions=versions,
        timeline=layout(versions, day),
        search_q=query or (subject.text[:80] if subject else ""),
    )
    return render(request, who, "timeline.html", context)


@router.get("/changes")
def changes_page(
    request: Request,
    who: Who,
    since: str | None = None,
    until: str | None = None,
    q: str | None = None,
) -> Response:
    """What entered the record between two event dates, what that superseded, and what was
    archived or redacted meanwhile (``Memory.changes``)."""
    memory = _memory(request, who)
    start = forms.date_field("since", since)
    end = forms.date_field("until", until)
    query = forms.text(q)
    span = date_range(request, memory)
    context: dict[str, Any] = {"since": start, "until": end, "q": query or "", "changes": None}
    if start is None and end is None:
        context.update(since=span[0] if span else "", until=span[1] if span else "")
        return render(request, who, "changes.html", context)
    if start is None or end is None:
        missing = "since" if start is None else "until"
        raise WebError(400, "Which dates?", f"{missing}: give both dates of the window.")
    context["changes"] = memory.changes(start, end, query=query)
    return render(request, who, "changes.html", context)


def _version(record: Record, reasons: tuple[str, ...]) -> Version:
    summary = " ".join(record.text.split())
    return Version(
        record.id,
        record.day,
        record.author,
        record.state,
        record.superseded_by,
        summary[:100] + ("…" if len(summary) > 100 else ""),
        reasons,
    )


# -- upload ------------------------------------------------------------------------------
@router.get("/upload")
def upload_form(request: Request, who: Who) -> Response:
    require(who, "write")
    return render(request, who, "upload.html", {"report": None})


@router.post("/upload")
async def upload(request: Request, who: Who) -> Response:
    # The page's script sends the files itself (to show progress) and wants only the report.
    fragment = request.headers.get("x-mempp-fragment") == "1"
    try:
        require(who, "write")
        memory = _memory(request, who)
        async with request.form(max_files=1000, max_fields=10) as form:
            check_csrf(request, who, _field(form.get("csrf")))
            files = [
                (item.filename, item.file)
                for item in form.getlist("files")
                if isinstance(item, UploadFile) and item.filename
            ]
            report = totals(await run_in_threadpool(ingest_files, memory, files))
    except Exception as exc:  # shown as the report's error, or as a page
        error = as_web_error(exc, request_id_of(request.scope))
        if not fragment:
            raise error from None
        context = {"title": error.title, "message": error.message}
        return render(request, who, "_upload_error.html", context, status=error.status)
    if fragment:
        return render(request, who, "_report.html", {"report": report})
    return render(request, who, "upload.html", {"report": report})


def _field(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- helpers for templates ---------------------------------------------------------------
def search_link(**params: Any) -> str:
    return "/search?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})


def day_index(day: str, first: str) -> int:
    return (date.fromisoformat(day[:10]) - date.fromisoformat(first)).days
