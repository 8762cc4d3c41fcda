"""What every door of the server shares: one store, one ``Memory`` per scope, the keys.

The contract the HTTP API, the MCP tools and the web pages (``mempp.server.web``) rely on:
``app.state.mempp`` is a :class:`ServerState` with

- ``memory(scope) -> Memory``: a shared, thread-safe Memory for that scope (one store per
  server, one Memory per scope, one encoder for all of them);
- ``authenticate(token) -> Principal | None``: the principal of a valid, unrevoked API key;
  :class:`Principal` is the frozen dataclass ``(key_id, scope, role)`` with ``role`` one of
  ``"read"``, ``"write"``, ``"admin"``;
- ``keys_required: bool``: False only while the store has no keys and the server listens on
  a loopback address; every request then acts as ``default_scope`` with role ``admin``;
- ``llm: LLMClient | None``: set only when an LLM endpoint is configured (``ask`` needs it);
- :func:`principal_for` (a FastAPI dependency: ``Depends(principal_for)``) gives a request's
  principal or raises the 401 problem; :func:`require` (``Depends(require("write"))``) also
  checks the role and raises the 403 problem.

Searches and writes run in worker threads (FastAPI runs plain ``def`` routes off the event
loop); ``Memory`` and the stores are safe to share between threads.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi import Request

from mempp.encoders import Embedder, embedder_named
from mempp.errors import InvalidInput, MemppError
from mempp.memory import DEFAULT_SCOPE, Memory
from mempp.server import keys
from mempp.server.keys import Principal, Role
from mempp.server.problems import Problem
from mempp.settings import Settings
from mempp.store import Store, open_store

if TYPE_CHECKING:
    from mempp.llm import LLMClient
    from mempp.server.oauth import OAuthVerifier

__all__ = ["Principal", "Role", "ServerState", "is_loopback", "principal_for", "require"]

log = logging.getLogger("mempp.server")

LOCAL_KEY_ID = "local"  # the principal of every request while no keys are required


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServerState:
    """The store, its Memories and its keys, for one server process.

    Refuses (``InvalidInput``) to serve a store without keys on a non-loopback ``host``.
    ``embedder`` defaults to ``$MEMPP_ENCODER``'s (the local MiniLM), loaded once by
    :meth:`warm` or the first request that needs it.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | Store,
        *,
        host: str = "127.0.0.1",
        embedder: Embedder | None = None,
        settings: Settings | str = "default",
        llm: LLMClient | None = None,
        default_scope: str = DEFAULT_SCOPE,
        oauth: OAuthVerifier | None = None,
    ) -> None:
        self.store: Store = location if isinstance(location, Store) else open_store(location)
        try:
            self._keys_seen = keys.has_keys(self.store)
            if not self._keys_seen and not is_loopback(host) and oauth is None:
                raise InvalidInput(
                    f"refusing to serve {self.store.location} on {host}, a non-loopback address, "
                    "without API keys: create one with `mempp keys create --scope S --role R`, "
                    "configure OAuth (--oauth-issuer, --oauth-audience) or listen on 127.0.0.1"
                )
            self.default_scope = Memory(self.store, scope=default_scope).scope  # validated
        except BaseException:
            self.store.close()
            raise
        self.host = host
        self.settings = settings
        self.llm = llm
        self.oauth = oauth  # bearer JWTs of this issuer, beside the API keys (server.oauth)
        self._embedder = embedder
        self._lock = threading.Lock()
        self._memories: dict[str, Memory] = {}
        self._ready = threading.Event()
        self.warm_error: str | None = None
        self._warmer: threading.Thread | None = None
        self._closed = False

    # -- the contract -----------------------------------------------------------------
    @property
    def keys_required(self) -> bool:
        if not self._keys_seen:  # a key made meanwhile (by `mempp keys create`) closes the door
            self._keys_seen = keys.has_keys(self.store)
        return self._keys_seen or self.oauth is not None or not is_loopback(self.host)

    def memory(self, scope: str) -> Memory:
        with self._lock:
            found = self._memories.get(scope)
            if found is None:
                embedder = self._shared_embedder()
                found = Memory(self.store, scope=scope, embedder=embedder, settings=self.settings)
                self._memories[scope] = found
            return found

    def authenticate(self, token: str) -> Principal | None:
        return keys.authenticate(self.store, token)

    def local_principal(self) -> Principal:
        return Principal(LOCAL_KEY_ID, self.default_scope, "admin")

    # -- readiness and lifecycle ------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def start_warming(self) -> None:
        """Load the encoder and the store's indexes in a thread of its own; ``ready`` turns
        True when done. Searches and writes are served meanwhile (the first ones wait for
        what they need)."""
        self._warmer = threading.Thread(target=self.warm, name="mempp-warm", daemon=True)
        self._warmer.start()

    def warm(self) -> None:
        try:
            for scope in self._known_scopes():
                self.memory(scope).warm()
        except MemppError as exc:
            if not self._closed:
                self.warm_error = str(exc)
                log.error("warming the store failed: %s", exc)
            return
        except Exception as exc:  # a bug: logged whole, and the server stays not-ready
            log.exception("warming the store failed")
            self.warm_error = f"{type(exc).__name__}: {exc}"
            return
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self.store.close()
        if self._warmer is not None:
            self._warmer.join(timeout=10)
        if self.llm is not None:
            self.llm.close()
        if self.oauth is not None:
            self.oauth.close()

    # -- internals --------------------------------------------------------------------
    def _shared_embedder(self) -> Embedder:
        # Called under self._lock: one load, shared by every scope's Memory.
        if self._embedder is None:
            self._embedder = embedder_named(None)
        return self._embedder

    def _known_scopes(self) -> list[str]:
        scopes = [self.default_scope]
        if keys.supports_keys(self.store):
            scopes += [key.scope for key in keys.list_keys(self.store) if not key.revoked_at]
        return list(dict.fromkeys(scopes))


def state_of(request: Request) -> ServerState:
    state = request.app.state.mempp
    assert isinstance(state, ServerState)
    return state


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def principal_of(
    state: ServerState, authorization: str | None, base_url: str | None = None
) -> Principal:
    """The principal an ``Authorization`` header stands for, or the 401 problem. With OAuth
    configured, a bearer JWT is checked by ``state.oauth`` and every challenge points to the
    protected-resource metadata under ``base_url``."""
    if not state.keys_required:
        return state.local_principal()
    token = bearer_token(authorization)
    oauth = state.oauth
    if token is None:
        what = "an API key or an OAuth bearer token" if oauth else "an API key"
        raise Problem(
            401,
            f"{what} is required: send 'Authorization: Bearer <key>'",
            field="Authorization",
            headers={"WWW-Authenticate": oauth.challenge(base_url) if oauth else "Bearer"},
        )
    if oauth is not None:
        from mempp.server.oauth import looks_like_jwt  # loaded already: oauth is one

        if looks_like_jwt(token):
            return oauth.principal(token, base_url)
    principal = state.authenticate(token)
    if principal is None:
        challenge = 'Bearer error="invalid_token"'
        if oauth is not None:
            challenge = oauth.challenge(base_url, "invalid_token", "unknown or revoked API key")
        raise Problem(
            401,
            "the API key is unknown or revoked",
            field="Authorization",
            headers={"WWW-Authenticate": challenge},
        )
    return principal


def principal_for(request: Request) -> Principal:
    """FastAPI dependency: the request's principal (401 problem without a valid key)."""
    return principal_of(
        state_of(request), request.headers.get("authorization"), str(request.base_url)
    )


def check_role(principal: Principal, needed: Role) -> None:
    if not principal.allows(needed):
        raise Problem(403, f"this key's role is {principal.role}; this needs {needed}")


def require(needed: Role) -> Callable[[Request], Principal]:
    """FastAPI dependency factory: the principal, if its role allows ``needed`` (else 403)."""

    def dependency(request: Request) -> Principal:
        principal = principal_for(request)
        check_role(principal, needed)
        return principal

    return dependency
