"""The PostgreSQL engine while its database is away: fail at once, come back at once.

Left to itself the connection pool makes a request wait its whole timeout for a connection
that cannot come, and after an outage retries with a doubling backoff, so the first request
after the database returns may wait many seconds more (measured in issue 33: 30 s hangs, the
first success 12-16 s after a 45 s outage). Here, once a connection cannot be had or breaks
and a direct connection attempt fails too, the database is *down*: every call fails at once
with ``StoreUnavailable`` (the server answers 503 with ``Retry-After``), and a probe thread
tries a direct connection every ``PROBE_INTERVAL_S``; the first that succeeds has a fresh pool
built and swapped in, so the next request is served. A connection that broke while the
database still answers (a backend terminated, a proxy's idle cut) is only that: the pool is
asked to check its connections, nothing is marked down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from mempp.errors import StoreUnavailable

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 0.25
RETRY_AFTER_S = 1


class Outage:
    """Whether the database is down, and the probe that notices it is back."""

    def __init__(
        self,
        location: str,
        connect: Callable[[], None],
        reopen: Callable[[], None],
        recheck: Callable[[], None],
    ) -> None:
        self._location = location
        self._connect = connect  # one direct connection attempt, raising when it fails
        self._reopen = reopen  # a fresh pool, swapped in
        self._recheck = recheck  # the pool's own check of its idle connections
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._probe: threading.Thread | None = None
        self._closing = threading.Event()

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def refuse_if_down(self) -> None:
        """Raise ``StoreUnavailable`` at once while the database is down."""
        since = self._down_since
        if since is not None:
            raise StoreUnavailable(
                f"{self._location}: the database has not answered for "
                f"{time.monotonic() - since:.0f} s",
                retry_after=RETRY_AFTER_S,
            )

    def connection_failed(self) -> bool:
        """A connection could not be had or broke: True if the database is down (a direct
        attempt failed too; the probe now runs), False if it answers (the pool rechecks)."""
        if self.down:
            return True
        try:
            self._connect()
        except Exception as exc:  # any failure to connect means: not reachable now
            self._mark_down(exc)
            return True
        self._recheck()
        return False

    def _mark_down(self, exc: BaseException) -> None:
        with self._lock:
            if self._down_since is not None or self._closing.is_set():
                return
            self._down_since = time.monotonic()
            log.info("%s is unreachable (%s); probing for its return", self._location, exc)
            self._probe = threading.Thread(target=self._wait_for_return, name="mempp-pg-probe")
            self._probe.daemon = True
            self._probe.start()

    def _wait_for_return(self) -> None:
        while not self._closing.wait(PROBE_INTERVAL_S):
            try:
                self._connect()
                self._reopen()
            except Exception:  # still away (or the new pool could not open): try again
                continue
            with self._lock:
                down = time.monotonic() - (self._down_since or time.monotonic())
                self._down_since = None
            log.info("%s answers again after %.1f s", self._location, down)
            return

    def close(self) -> None:
        self._closing.set()
        probe = self._probe
        if probe is not None and probe is not threading.current_thread():
            probe.join(timeout=5)
