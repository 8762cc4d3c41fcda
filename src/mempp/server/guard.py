"""The server's front door: only its own names reach it, only its own pages write to it.

:class:`Guard` is pure ASGI middleware wrapped around the whole app (``/v1``, ``/mcp``, the
web pages, ``/healthz``), so no door can forget it. For each request it checks, before any
route runs:

1. **Host.** The ``Host`` header must be one of the server's names: the loopback names
   (``localhost``, ``127.0.0.1``, ``[::1]``), with the port the server listens on when a
   port is given; the address it was bound to; and the names given with ``--allowed-host``
   (repeatable) or ``$MEMPP_ALLOWED_HOSTS`` (comma-separated), each ``name`` (any port) or
   ``name:port``. Anything else is a 421: a page whose name an attacker rebinds to
   127.0.0.1 (DNS rebinding) sends its own name as ``Host`` and is turned away. Names are
   compared exactly, lower-cased: ``localhost.`` (trailing dot) is another name.
   ``X-Forwarded-Host`` is never read; a reverse proxy passes the client's ``Host`` on and
   that name is listed with ``--allowed-host``. Bound to a wildcard address (``0.0.0.0``)
   with no name listed, any Host is accepted (keys are required there) and the banner says
   so.
2. **Origin**, for a request that can change state (any method but GET, HEAD, OPTIONS): an
   ``Origin`` header, when present, must be this server's own (``http(s)://`` + the
   request's Host); ``Origin: null`` (a sandboxed frame, a file page) is refused; so is
   ``Sec-Fetch-Site: cross-site``. A 403. A client that sends no Origin (curl, an SDK, an
   agent) is not a browser page and passes.
3. **Media type**, for a state-changing request to ``/v1`` or ``/mcp``: none of the types a
   browser sends cross-site without a CORS preflight (``text/plain``,
   ``application/x-www-form-urlencoded``, ``multipart/form-data``), nor
   ``application/octet-stream``. A 415. The web pages' own forms (login, logout, ask,
   upload) are not under ``/v1``: they carry a CSRF token and pass the Origin check.

Every response also gets ``X-Content-Type-Options: nosniff``,
``Cross-Origin-Resource-Policy: same-origin`` and an ``X-Request-Id`` (the id the server log
names next to any error it hides from the client); an HTML response also gets a strict
Content-Security-Policy (no inline script or style, nothing from another host, no framing),
``X-Frame-Options: DENY`` and ``Referrer-Policy: same-origin``.

A refused request never reaches a route, so it changes nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempp.errors import InvalidInput
from mempp.server.problems import REQUEST_ID_KEY, Problem, problem_response

log = logging.getLogger("mempp.server")

ENV_ALLOWED_HOSTS = "MEMPP_ALLOWED_HOSTS"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})
# The media types a page on another site may send with no preflight (the Fetch standard's
# CORS-safelisted request types), and the raw one that is just as easy to send.
SIMPLE_TYPES = frozenset(
    {
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        "application/octet-stream",
    }
)
API_PREFIXES = ("/v1/", "/mcp")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
_HTML = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]
_WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})
_NOT_IN_HOST = re.compile(r"[\s/\\@?#]")


@dataclass(frozen=True, slots=True)
class HostName:
    """A name the server answers to: ``port`` None for any port."""

    name: str
    port: int | None = None


@functools.lru_cache(maxsize=256)  # a server sees few Host values; bounded all the same
def split_host(value: str) -> HostName | None:
    """``name[:port]`` or ``[v6]:port`` as a lower-cased :class:`HostName`; None when it is
    not a host (empty, spaces, a bad port, an unclosed bracket)."""
    value = value.strip().lower()
    if not value or _NOT_IN_HOST.search(value):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return None
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text_raw = value.partition(":")
        port_text = port_text_raw if colon else None
        if not name or ":" in port_text_raw:
            return None
    if port_text is None:
        return HostName(name)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return HostName(name, int(port_text))


def allowed_names(values: Iterable[str]) -> tuple[HostName, ...]:
    """``--allowed-host`` values (and ``$MEMPP_ALLOWED_HOSTS``), checked: each must be a
    host name, a bracketed IPv6 address, or either with ``:port``."""
    names = []
    for value in values:
        found = split_host(value)
        if found is None:
            raise InvalidInput(
                f"{value!r} is not a host name (give NAME or NAME:PORT)", field="allowed_host"
            )
        names.append(found)
    return tuple(names)


def configured_hosts(given: Iterable[str] = ()) -> tuple[HostName, ...]:
    """The names given on the command line plus those of ``$MEMPP_ALLOWED_HOSTS``."""
    env = os.environ.get(ENV_ALLOWED_HOSTS, "")
    return allowed_names([*given, *(v for v in env.split(",") if v.strip())])


def _bind_name(host: str) -> str:
    """The bound address as a Host header would name it (IPv6 in brackets)."""
    host = host.strip().lower()
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]"
    except ValueError:
        pass
    return host


def answers_to(bind_host: str, names: Iterable[HostName]) -> str:
    """The names a server bound to ``bind_host`` answers to, for its banner."""
    bound = _bind_name(bind_host)
    listed = {h.name if h.port is None else f"{h.name}:{h.port}" for h in names}
    if bound in _WILDCARDS and not listed:
        return "any Host (bound to every interface and no --allowed-host given)"
    extra = set() if bound in _WILDCARDS else {bound}
    return "Host " + ", ".join(sorted(LOOPBACK_NAMES | extra | listed))


class Guard:
    """ASGI middleware: the Host allowlist, the cross-site write checks, the media types of
    API writes, and the response headers every door shares (see the module docstring)."""

    def __init__(
        self, app: ASGIApp, *, bind_host: str, allowed_hosts: Iterable[HostName] = ()
    ) -> None:
        self.app = app
        self.names = frozenset(allowed_hosts)
        self.bound = _bind_name(bind_host)
        # Bound to every interface and told no name: any Host (keys are required there).
        self.any_host = self.bound in _WILDCARDS and not self.names
        self._ids = itertools.count(1)
        self._prefix = os.urandom(3).hex()  # tells the request ids of two processes apart

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        # A request id given by a middleware outside this one (the server's request log) is
        # used as it is, and that middleware sends the header.
        outer = (scope.get("state") or {}).get("request_id")
        request_id = outer if isinstance(outer, str) else f"{self._prefix}-{next(self._ids)}"
        scope[REQUEST_ID_KEY] = request_id  # in place: the router marks the route on it
        refusal = self.refusal(scope)
        stamped = _stamping(send, None if isinstance(outer, str) else request_id)
        if refusal is not None:
            log.warning(
                "refused %s %s (request %s): %s",
                scope.get("method", "WS"),
                scope.get("path", ""),
                request_id,
                refusal.detail,
            )
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await problem_response(refusal)(scope, receive, stamped)
            return
        await self.app(scope, receive, stamped)

    def refusal(self, scope: Scope) -> Problem | None:
        """Why this request may not pass, or None. Reads only the request's headers."""
        host = origin = fetch_site = content_type = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
            elif key == b"sec-fetch-site":
                fetch_site = value.decode("latin-1")
            elif key == b"content-type":
                content_type = value.decode("latin-1")
        if host is None:
            return Problem(400, "the request has no Host header", field="Host")
        problem = self._host_problem(host, scope)
        if problem is not None or scope.get("method", "GET").encode() in SAFE_METHODS:
            return problem
        if origin is not None:
            problem = _origin_problem(origin, host)
            if problem is not None:
                return problem
        if fetch_site is not None and fetch_site.strip().lower() == "cross-site":
            return Problem(
                403, "a cross-site request may not change anything here", field="Sec-Fetch-Site"
            )
        path = scope.get("path", "")
        if content_type is not None and path.startswith(API_PREFIXES):
            kind = content_type.split(";", 1)[0].strip().lower()
            if kind in SIMPLE_TYPES:
                return Problem(
                    415,
                    f"{kind} is not accepted here (any web page can send it): send JSON as "
                    "application/json, an upload as application/x-ndjson",
                    field="Content-Type",
                )
        return None

    def _host_problem(self, header: str, scope: Scope) -> Problem | None:
        found = split_host(header)
        if found is None:
            return Problem(400, f"the Host header {header[:80]!r} is not a host", field="Host")
        if found.name in LOOPBACK_NAMES or (
            found.name == self.bound and self.bound not in _WILDCARDS
        ):
            server = scope.get("server")
            listening = server[1] if server and len(server) > 1 else None
            if found.port is None or listening is None or found.port == listening:
                return None
        elif self.any_host or found in self.names or HostName(found.name) in self.names:
            return None
        shown = header[:80]
        return Problem(
            421,
            f"this server does not answer to the name {shown!r}: start it with "
            f"--allowed-host {found.name} (or set ${ENV_ALLOWED_HOSTS}) if that name is its own",
            field="Host",
        )


def _origin_problem(origin: str, host: str) -> Problem | None:
    value = origin.strip().lower()
    if value == "null":
        return Problem(
            403,
            "a request from an opaque origin (Origin: null: a sandboxed frame or a local file) "
            "may not change anything here",
            field="Origin",
        )
    scheme, sep, netloc = value.partition("://")
    if sep and scheme in ("http", "https") and netloc == host.strip().lower():
        return None
    return Problem(
        403,
        f"a page of another origin ({origin[:80]}) may not change anything here",
        field="Origin",
    )


def _stamping(send: Send, request_id: str | None) -> Send:
    """``send`` adding the shared headers (and ``X-Request-Id`` when given) to the start."""
    extra = [*_ALWAYS] + ([(b"x-request-id", request_id.encode())] if request_id else [])

    async def stamped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            present = {key.lower() for key, _ in headers}
            html = any(
                key.lower() == b"content-type" and value.lower().startswith(b"text/html")
                for key, value in headers
            )
            for key, value in extra + (_HTML if html else []):
                if key not in present:
                    headers.append((key, value))
            message = {**message, "headers": headers}
        await send(message)

    return stamped
