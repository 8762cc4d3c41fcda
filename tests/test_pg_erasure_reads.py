"""PostgreSQL reads a scope's erasure count once per search, not once per leg: the lexical,
tag and vector replicas each need it to know whether an erasure (by any node) made them
stale, and a search's legs share one read (``_PostgresBase._erasures`` inside ``gather``).
Counted at the one method that sends the statement. Real PostgreSQL."""

from __future__ import annotations

from mempp import Memory, preset

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url


def _counted(memory: Memory) -> list[str]:
    store = memory.store
    sent: list[str] = []
    read = store._read_erasures  # type: ignore[attr-defined]

    def counting(scope: str) -> int:
        sent.append(scope)
        return read(scope)

    store._read_erasures = counting  # type: ignore[attr-defined]
    return sent


def test_one_erasure_count_per_search_and_erasures_still_seen(pg_url: str) -> None:
    embedder = KeywordEmbedder(["alpha", "budget"])
    settings = preset("default")
    with Memory(pg_url, embedder=embedder) as memory, Memory(pg_url, embedder=embedder) as other:
        memory.add_many([f"alpha budget note {i}" for i in range(20)] + ["zanzibar budget"])
        memory.add("tagged alpha", tags=["budget"])
        sent = _counted(memory)
        for question in ("alpha budget", "zanzibar", "budget"):
            assert memory.search(question, settings=settings)
        assert sent == ["default"] * 3  # was 9: lexical, tag and vector legs each read it
        # Another node erases a row: the next search (one read) drops the stale replicas.
        erased = memory.search("zanzibar", settings=settings)[0].id
        other.redact(erased, reason="erasure request")
        found = memory.search("zanzibar", settings=settings.with_(w_vec=0, w_tag=0))
        assert erased not in [hit.id for hit in found]
        assert len(sent) == 5
