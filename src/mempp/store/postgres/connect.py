"""Connecting to PostgreSQL: the driver, the pool's sizes and waits, the settings read from
the environment, and a location safe to print (the URL without its password)."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from mempp.errors import InvalidInput, StoreError

INSTALL_HINT = "pip install 'mempp[postgres]'"

POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8
CONNECT_TIMEOUT_S = 10
# How long a call waits for a pooled connection before it fails with StoreUnavailable
# (MEMPP_PG_WAIT_S; a server answers 503 with Retry-After), and the probe's connect timeout.
ENV_POOL_WAIT = "MEMPP_PG_WAIT_S"
DEFAULT_POOL_WAIT_S = 5.0
PROBE_CONNECT_TIMEOUT_S = 2
# psycopg prepares a statement server-side after it ran this many times on a connection
# (its default). Behind PgBouncer in transaction mode (before 1.21, or without
# max_prepared_statements) prepared statements break: set MEMPP_PG_PREPARE_THRESHOLD=off.
ENV_PREPARE_THRESHOLD = "MEMPP_PG_PREPARE_THRESHOLD"
DEFAULT_PREPARE_THRESHOLD = 5


def _import_driver() -> tuple[Any, Any, Any]:
    """psycopg, psycopg_pool and pgvector's psycopg adapter, or a StoreError saying how."""
    try:
        import pgvector.psycopg
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            f"the PostgreSQL engine needs psycopg 3, psycopg-pool and pgvector "
            f"(missing: {exc.name}); install them with: {INSTALL_HINT}"
        ) from None
    return psycopg, psycopg_pool, pgvector.psycopg


def pool_wait_from_env(env: Mapping[str, str] | None = None) -> float:
    """``MEMPP_PG_WAIT_S``: seconds a call waits for a pooled connection (default 5)."""
    raw = (os.environ if env is None else env).get(ENV_POOL_WAIT, "").strip()
    if not raw:
        return DEFAULT_POOL_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 600:
        raise InvalidInput(f"{ENV_POOL_WAIT} must be seconds from 0.1 to 600, got {raw!r}")
    return value


def prepare_threshold_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """``MEMPP_PG_PREPARE_THRESHOLD``: a count (0 prepares at once), or ``off`` for never
    (PgBouncer in transaction mode); unset means psycopg's default of 5."""
    raw = (os.environ if env is None else env).get(ENV_PREPARE_THRESHOLD, "").strip().lower()
    if not raw:
        return DEFAULT_PREPARE_THRESHOLD
    if raw in ("off", "none", "never"):
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidInput(f"{ENV_PREPARE_THRESHOLD} must be a count >= 0 or 'off', got {raw!r}")
    return value


def mask_url(url: str) -> str:
    """The URL with any password (in the authority or the query string) replaced by ***."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "postgresql://(unparsable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and password:
            netloc = f"{user}:***@{hostinfo}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(key == "password" for key, _ in pairs):
            query = urllib.parse.urlencode(
                [(k, "***" if k == "password" else v) for k, v in pairs], safe="/*"
            )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
