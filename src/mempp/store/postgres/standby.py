"""Reads from PostgreSQL hot standbys, and the rule that keeps them correct.

``MEMPP_PG_READ_URLS`` (``mempp serve --read-url``, repeatable) names one or more streaming
replicas of the store's database. A read (``Store.reading()``: a search with its legs and its
records, evidence, a get) asks the primary for its current WAL position, then takes the first
standby, in turn, that has replayed up to it (waiting at most ``READ_WAIT_S`` for one); when
none has, the read goes to the primary. So a read sees every write answered before it began
(read-your-writes for every key on every node, stronger than per key), and an erased record
is never served by a lagging standby: its erasure is a write before the read. Writes, the
change log and the state-changing calls always go to the primary.

A read URL is checked when the store opens: it must be a server in recovery (not the
primary itself) whose system identifier is the primary's (a replica of this cluster, not of
another store's database).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from mempp.errors import InvalidInput, StoreError

ENV_READ_URLS = "MEMPP_PG_READ_URLS"
# How long a read waits for a standby to replay up to the primary's position before it goes
# to the primary instead, and how often it looks.
READ_WAIT_S = 0.05
READ_POLL_S = 0.005


def read_urls_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """The standbys' URLs: ``MEMPP_PG_READ_URLS``, separated by commas or spaces."""
    raw = (os.environ if env is None else env).get(ENV_READ_URLS, "")
    urls = [url for url in raw.replace(",", " ").split() if url]
    for url in urls:
        if not url.startswith(("postgresql://", "postgres://")):
            raise InvalidInput(f"{ENV_READ_URLS}: not a PostgreSQL URL: {url.split('@')[-1]}")
    return urls


class Standbys:
    """The standbys' pools, and which of them may serve the read about to start."""

    def __init__(
        self,
        pools: list[tuple[str, Any]],
        primary_position: Callable[[], str],
        psycopg: Any,
    ) -> None:
        self._pools = pools  # (masked location, pool)
        self._primary_position = primary_position
        self._psycopg = psycopg
        self._turn = itertools.cycle(range(len(pools))) if pools else None
        self._turn_lock = threading.Lock()
        self.served = [0] * len(pools)  # reads each standby took (for the tests and metrics)
        self.fell_back = 0  # reads that went to the primary because none had caught up

    def __bool__(self) -> bool:
        return bool(self._pools)

    @staticmethod
    def check(conn: Any, location: str, primary: tuple[int, str]) -> None:
        """Refuse a read URL that is not a hot standby of the primary's cluster, or that
        names another database of it (another store)."""
        row = conn.execute(
            "SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system()), "
            "current_database()"
        ).fetchone()
        primary_system, primary_database = primary
        if not row[0]:
            raise StoreError(
                f"read URL {location} is not a standby (not in recovery): it may be the "
                "primary itself; give the URL of a streaming replica"
            )
        if int(row[1]) != primary_system:
            raise StoreError(
                f"read URL {location} is a standby of another cluster (system identifier "
                f"{row[1]}, the store's is {primary_system})"
            )
        if row[2] != primary_database:
            raise StoreError(
                f"read URL {location} names database {row[2]!r}; the store is database "
                f"{primary_database!r}"
            )

    def choose(self) -> Any | None:
        """The pool of a standby that has replayed the primary's current position, or None
        (read from the primary)."""
        if not self._pools or self._turn is None:
            return None
        target = self._primary_position()
        with self._turn_lock:
            first = next(self._turn)
        order = [(first + i) % len(self._pools) for i in range(len(self._pools))]
        deadline = time.monotonic() + READ_WAIT_S
        while True:
            for index in order:
                if self._replayed(index, target):
                    self.served[index] += 1
                    return self._pools[index][1]
            if time.monotonic() >= deadline:
                self.fell_back += 1
                return None
            time.sleep(READ_POLL_S)

    def _replayed(self, index: int, target: str) -> bool:
        pool = self._pools[index][1]
        try:
            with pool.connection(timeout=READ_WAIT_S) as conn:
                row = conn.execute(
                    "SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)", (target,)
                ).fetchone()
        except (self._psycopg.Error, Exception):  # a standby away: read elsewhere
            return False
        return bool(row[0])

    def close(self) -> None:
        for _, pool in self._pools:
            pool.close()


_READ_POOL: ContextVar[Any | None] = ContextVar("mempp_pg_read_pool", default=None)


def read_pool() -> Any | None:
    """The standby pool the current read was given, if any."""
    return _READ_POOL.get()


@contextmanager
def reading_from(pool: Any | None) -> Iterator[None]:
    token = _READ_POOL.set(pool)
    try:
        yield
    finally:
        _READ_POOL.reset(token)
