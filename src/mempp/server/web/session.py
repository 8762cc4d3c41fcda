"""The web page's session cookie and CSRF tokens.

A browser logs in once with an API key; the server makes a session key from it
(:func:`mempp.server.keys.create_session`), which travels in the cookie only encrypted and
authenticated (Fernet: AES-128-CBC + HMAC-SHA256), so every request authenticates the session
key again through the server's own key check: logging out revokes it (a replayed cookie gets
the login page), and revoking the key logged in with ends its sessions. The cookie
is HttpOnly, SameSite=Strict and expires. Each session holds a random nonce; the CSRF token in
every form is an HMAC of that nonce, so a page from another site can neither read nor forge it.

Without keys (a loopback server), a visitor still gets a session without a key, so writes
from the page carry a CSRF token too.

The secret comes from ``MEMPP_SESSION_SECRET`` (any string; set it when several server
processes share sessions); else a random one per process, so sessions end with the process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken

from mempp.server.keys import SESSION_MAX_S

COOKIE = "mempp_session"
SECRET_ENV = "MEMPP_SESSION_SECRET"
MAX_AGE = SESSION_MAX_S  # seconds a login lasts


@dataclass(frozen=True, slots=True)
class Session:
    """What one browser's cookie holds: its API key (``None`` without keys) and a nonce."""

    token: str | None
    nonce: str


class SessionCodec:
    """Encrypts sessions into cookie values and derives CSRF tokens, under one secret."""

    def __init__(self, secret: str | None = None) -> None:
        secret = secret or os.environ.get(SECRET_ENV) or secrets.token_urlsafe(32)
        master = hashlib.sha256(secret.encode("utf-8")).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(_derive(master, b"cookie")))
        self._csrf_key = _derive(master, b"csrf")

    def new(self, token: str | None) -> Session:
        return Session(token, secrets.token_urlsafe(16))

    def dump(self, session: Session) -> str:
        payload = json.dumps({"t": session.token, "n": session.nonce}).encode("utf-8")
        return self._fernet.encrypt(payload).decode("ascii")

    def load(self, cookie: str | None) -> Session | None:
        """The session in a cookie value; ``None`` if absent, forged, or older than MAX_AGE."""
        if not cookie:
            return None
        try:
            payload = json.loads(self._fernet.decrypt(cookie.encode("ascii"), ttl=MAX_AGE))
        except (InvalidToken, UnicodeEncodeError, ValueError):
            return None
        token, nonce = payload.get("t"), payload.get("n")
        if not isinstance(nonce, str) or not (token is None or isinstance(token, str)):
            return None
        return Session(token, nonce)

    def csrf(self, session: Session) -> str:
        return hmac.new(self._csrf_key, session.nonce.encode("ascii"), "sha256").hexdigest()

    def csrf_ok(self, session: Session | None, offered: str | None) -> bool:
        if session is None or not offered:
            return False
        return hmac.compare_digest(self.csrf(session), offered)


def _derive(master: bytes, purpose: bytes) -> bytes:
    return hmac.new(master, purpose, "sha256").digest()
