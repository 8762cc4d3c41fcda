"""Who is asking, and what happens when a page cannot be shown.

Every page resolves the visitor to the server's ``Principal`` the same way the API does: from
the API key in the session cookie (checked again on each request), or, on a server without
keys, as the default principal. Failures become readable HTML pages with a way back, never a
traceback: :class:`WebError` carries a status, a title and a message, and
:class:`HTMLErrorRoute` turns it (and mempp's own errors) into the error page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from mempp.errors import InvalidInput, MemppError, RecordNotFound, StoreError
from mempp.server.problems import Problem, hidden, request_id_of
from mempp.server.web.session import COOKIE, MAX_AGE, Session, SessionCodec

log = logging.getLogger(__name__)


class WebError(Exception):
    """A page that cannot be shown: ``status``, a short ``title``, a ``message`` for people,
    and where ``back`` leads (the page the visitor came from by default)."""

    def __init__(self, status: int, title: str, message: str, back: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message
        self.back = back


class LoginRequired(Exception):
    """No valid session: the visitor is sent to the login form, then back."""


@dataclass(frozen=True, slots=True)
class Visitor:
    """A resolved request: the principal (scope and role), its session and CSRF token."""

    principal: Any  # mempp.server.state.Principal
    session: Session
    csrf: str
    keys_required: bool
    new_cookie: str | None  # a session cookie to set (first visit to a keyless server)

    @property
    def scope(self) -> str:
        return str(self.principal.scope)

    @property
    def role(self) -> str:
        return str(self.principal.role)

    def may(self, role: str) -> bool:
        return bool(self.principal.allows(role))


def server_state(request: Request) -> Any:
    return request.app.state.mempp


def codec(request: Request) -> SessionCodec:
    return request.app.state.mempp_web_codec


def templates(request: Request) -> Jinja2Templates:
    return request.app.state.mempp_web_templates


def visitor(request: Request) -> Visitor:
    """The dependency every page uses. Raises :class:`LoginRequired` without a valid key."""
    state = server_state(request)
    sessions = codec(request)
    session = sessions.load(request.cookies.get(COOKIE))
    new_cookie = None
    if not state.keys_required:
        if session is None:
            session = sessions.new(None)
            new_cookie = sessions.dump(session)
        principal = state.local_principal()
    else:
        if session is None or session.token is None:
            raise LoginRequired()
        principal = state.authenticate(session.token)
        if principal is None:  # revoked since login, or a key of another server
            raise LoginRequired()
    return Visitor(principal, session, sessions.csrf(session), state.keys_required, new_cookie)


def require(who: Visitor, role: str) -> None:
    if not who.may(role):
        raise WebError(
            403,
            "Not allowed",
            f"This page needs a key with the {role} role; yours has the {who.role} role.",
        )


def check_csrf(request: Request, who: Visitor, offered: str | None) -> None:
    if not codec(request).csrf_ok(who.session, offered):
        raise WebError(
            403,
            "Form expired",
            "This form was not sent from this page's session (or the session ended). "
            "Reload the page and send it again.",
        )


def set_session_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=MAX_AGE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def render(
    request: Request,
    who: Visitor | None,
    name: str,
    context: dict[str, Any],
    status: int = 200,
) -> Response:
    base = {"who": who, "csrf": who.csrf if who else None, "llm": _has_llm(request)}
    response = templates(request).TemplateResponse(
        request, name, {**base, **context}, status_code=status
    )
    if who is not None and who.new_cookie:
        set_session_cookie(request, response, who.new_cookie)
    return response


def _has_llm(request: Request) -> bool:
    return server_state(request).llm is not None


def error_page(request: Request, error: WebError) -> Response:
    back = error.back or _same_site_referer(request) or "/"
    context = {"title": error.title, "message": error.message, "back": back, "who": None}
    return templates(request).TemplateResponse(
        request, "error.html", context, status_code=error.status
    )


def _same_site_referer(request: Request) -> str | None:
    """The path of the page the visitor came from, when it is a page of this server."""
    referer = request.headers.get("referer")
    if not referer:
        return None
    try:
        came = urlsplit(referer)
    except ValueError:
        return None
    here = request.url
    # The netloc only: behind a TLS proxy the page was https while this request is http.
    if came.scheme not in ("http", "https") or came.netloc.lower() != here.netloc.lower():
        return None
    path = same_origin_path(came.path + (f"?{came.query}" if came.query else ""))
    if path is None or path.rstrip("/") == here.path.rstrip("/"):
        return None
    return path


def same_origin_path(target: str | None) -> str | None:
    """``target`` if it is a path on this site; None for anything a browser could read as
    another host (``//host``, ``/\\host``, a scheme, control characters)."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return None
    if "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return None
    return target


def as_web_error(exc: Exception, request_id: str | None = None) -> WebError:
    """mempp's and the framework's errors as a page (anything else is a bug, logged). A
    store's or a model's failure is told without its text (paths, SQL, a driver's words):
    the log has it under ``request_id``."""
    from mempp.llm import LLMError

    if isinstance(exc, WebError):
        return exc
    if isinstance(exc, RecordNotFound):
        return WebError(404, "No such record", str(exc))
    if isinstance(exc, InvalidInput):
        return WebError(400, "Cannot read that", str(exc))
    if isinstance(exc, StoreError):
        detail = hidden("the store could not serve this page", exc, request_id)
        return WebError(503, "The store is unavailable", detail[0].upper() + detail[1:] + ".")
    if isinstance(exc, LLMError):
        detail = hidden("the language model failed", exc, request_id)
        return WebError(502, "No answer", detail[0].upper() + detail[1:] + ".")
    if isinstance(exc, MemppError):
        return WebError(400, "Cannot do that", str(exc))
    if isinstance(exc, RequestValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ())[1:]) or 'form'}: {err.get('msg')}"
            for err in exc.errors()
        )
        return WebError(400, "Cannot read that", problems or "the request is malformed")
    if isinstance(exc, Problem):  # e.g. the server's body limit, met while reading a form
        return WebError(exc.status, "Cannot do that", exc.detail)
    if isinstance(exc, HTTPException):
        return WebError(exc.status_code, "Cannot do that", str(exc.detail))
    log.exception("request %s: web page failed", request_id or "-", exc_info=exc)
    where = f" (request {request_id})" if request_id else ""
    return WebError(500, "Something went wrong", f"The server could not show this page{where}.")


class HTMLErrorRoute(APIRoute):
    """A route whose failures render the error page, and whose missing login redirects."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                if request.method != "GET":
                    target = "/"
                return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
            except Exception as exc:
                return error_page(request, as_web_error(exc, request_id_of(request.scope)))

        return guarded
