"""API keys: each bound to one scope (tenant) and one role, stored hashed in the store.

A key reads ``mempp_<key id>_<secret>``. The key id is public (it names the key in lists and
logs); the secret is 32 random bytes, shown once when the key is made. The store keeps only
the SHA-256 of the secret: a fast hash is enough for a secret of that entropy, and checking
it costs microseconds per request. Revoking marks the key; nothing is deleted.

Logging in to the web pages makes a **session key**: a key of its own (same scope and
role), labelled ``web session of <key id>``, whose token the session cookie carries instead
of the key typed in. It is valid only while the key it was made from is active and for
``SESSION_MAX_S`` after its creation; logging out revokes it, so a replayed cookie is dead
on every server process at once (the store is what they share), and revoking a key ends
every session made from it. ``mempp keys list`` leaves session keys out.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

from mempp.errors import InvalidInput, StoreError
from mempp.store import Store
from mempp.store.base import ApiKey, KeyStore

Role = Literal["read", "write", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
PREFIX = "mempp"
_TOKEN = re.compile(r"^mempp_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_RANK = {role: rank for rank, role in enumerate(ROLES)}
SESSION_LABEL = "web session of "  # + the id of the key logged in with
SESSION_MAX_S = 12 * 3600  # how long a login lasts


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: a key's id, the one scope it may touch, and its role.

    ``read`` searches and reads; ``write`` also adds and ingests; ``admin`` also changes a
    record's state (supersede, archive, redact) where the server offers it.
    """

    key_id: str
    scope: str
    role: Role

    def allows(self, needed: Role) -> bool:
        return _RANK[self.role] >= _RANK[needed]


def key_store(store: Store) -> KeyStore:
    if not isinstance(store, KeyStore):
        raise StoreError(f"the {type(store).__name__} engine cannot keep API keys yet")
    return store


def supports_keys(store: Store) -> bool:
    return isinstance(store, KeyStore)


def create_key(
    store: Store, *, scope: str, role: str, label: str | None = None
) -> tuple[ApiKey, str]:
    """Make a key for ``scope`` with ``role``; returns it and the token (shown only now)."""
    if not isinstance(scope, str) or not scope.strip() or "\x00" in scope:
        raise InvalidInput("scope must be a non-empty string without NUL characters")
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if label is not None and "\x00" in label:
        raise InvalidInput("label contains a NUL character")
    if label is not None and label.startswith(SESSION_LABEL):
        raise InvalidInput(f"a label may not start with {SESSION_LABEL!r} (session keys do)")
    return _make(store, scope, role, label)


def _make(store: Store, scope: str, role: str, label: str | None) -> tuple[ApiKey, str]:
    keys = key_store(store)
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    key = ApiKey(key_id, scope, role, label or None, _now())
    keys.add_key(key, _digest(secret))
    return key, f"{PREFIX}_{key_id}_{secret}"


def list_keys(store: Store, scope: str | None = None, *, sessions: bool = False) -> list[ApiKey]:
    """The keys (of ``scope``), without the web's session keys unless ``sessions``."""
    found = key_store(store).api_keys(scope)
    return found if sessions else [key for key in found if not is_session(key)]


def is_session(key: ApiKey) -> bool:
    return bool(key.label and key.label.startswith(SESSION_LABEL))


def create_session(store: Store, principal: Principal) -> str:
    """A session key for a login with ``principal``'s key; its token (for the cookie)."""
    parent = principal.key_id
    found = key_store(store).api_key(parent)
    if found is not None and is_session(found[0]):  # a session's token typed in: its root
        parent = str(found[0].label)[len(SESSION_LABEL) :]
    _, token = _make(store, principal.scope, principal.role, f"{SESSION_LABEL}{parent}")
    return token


def end_session(store: Store, token: str) -> None:
    """Revoke the session key of ``token`` (a logout); any other token is left alone."""
    match = _TOKEN.match(token)
    if match is None or not supports_keys(store):
        return
    found = key_store(store).api_key(match.group(1))
    if found is not None and is_session(found[0]) and authenticate(store, token) is not None:
        key_store(store).revoke_key(match.group(1), _now())


def revoke_key(store: Store, key_id: str) -> ApiKey:
    found = key_store(store).revoke_key(key_id, _now())
    if found is None:
        raise InvalidInput(f"no key {key_id!r}")
    return found


def authenticate(store: Store, token: str) -> Principal | None:
    """The principal of a valid, unrevoked token; None for anything else."""
    match = _TOKEN.match(token)
    if match is None or not supports_keys(store):
        return None
    found = key_store(store).api_key(match.group(1))
    if found is None:
        return None
    key, stored_hash = found
    if not hmac.compare_digest(stored_hash, _digest(match.group(2))) or key.revoked_at:
        return None
    if is_session(key) and not _session_alive(store, key):
        return None
    return Principal(key.key_id, key.scope, key.role)  # type: ignore[arg-type]


def _session_alive(store: Store, key: ApiKey) -> bool:
    """A session key holds while its parent key is active and it is younger than a login."""
    parent = key_store(store).api_key(str(key.label)[len(SESSION_LABEL) :])
    if parent is None or parent[0].revoked_at:
        return False
    try:
        made = datetime.fromisoformat(key.created_at)
    except ValueError:
        return False
    return (datetime.now(UTC) - made).total_seconds() < SESSION_MAX_S


def has_keys(store: Store) -> bool:
    """Whether keys were ever made for this store (revoked ones count: revoking the last key
    must not open the server to everyone)."""
    return supports_keys(store) and key_store(store).key_count() > 0


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
