"""PostgreSQL schema 10 (``store/postgres/analysis_schema.py``): a store written before it,
with PostgreSQL's own ``english`` analysis, is re-analysed on open, in one transaction, and
then answers as SQLite does; a migration that fails part-way leaves the store as it was.
The schema-9 store is made by undoing schema 10's DDL on a real PostgreSQL database (the
functions and column of migration 1, as mempp created them then)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from mempp import Memory, preset
from mempp.errors import StoreError
from mempp.index.analysis import terms_of
from mempp.search.query import lexical_query
from mempp.store.postgres import analysis_schema
from mempp.store.postgres.schema import MIGRATIONS

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url

TEXTS = [
    "Meet at the Café Zoë for the résumé review",
    "See https://docs.example.com/v1.2/setup for the setup",
    "This is about the only thing that matters",
    "release v1.2.3 shipped; the release date moved",
    "the team plan costs 12 dollars",
    "a generous offer, daily news",
    "budget " * 300 + "plan",
]
QUESTIONS = ["cafe resume", "docs setup", "what is this about", "release date", "news plan"]


_INDEXES = "SELECT indexname FROM pg_indexes WHERE tablename = 'records'"
INDEXES = {
    "records_pkey",
    "records_scope_state_date",
    "records_dedupe",
    "records_tsv",
    "records_thread",
    "records_source",
    "records_author_active",
    "records_embedding_hnsw",
}


def _old_tsvector_function() -> str:
    statements = MIGRATIONS[0].statements
    return next(s for s in statements if s.startswith("CREATE FUNCTION mempp_tsvector"))


def _as_schema_9(url: str) -> None:
    """Undo schema 10: the generated english tsvector back, no terms, no terms trigger."""
    with psycopg.connect(url) as conn:
        conn.execute("DROP TRIGGER records_terms_frozen ON records")
        conn.execute("DROP FUNCTION mempp_guard_terms()")
        conn.execute("ALTER TABLE records DROP COLUMN tsv")
        conn.execute("DROP FUNCTION mempp_terms_tsvector(text)")
        conn.execute("ALTER TABLE records DROP COLUMN terms")
        conn.execute(_old_tsvector_function())
        conn.execute(
            "ALTER TABLE records ADD COLUMN tsv tsvector "
            "GENERATED ALWAYS AS (mempp_tsvector(text)) STORED"
        )
        conn.execute("CREATE INDEX records_tsv ON records USING gin (tsv)")
        conn.execute("DELETE FROM mempp_migrations WHERE version = 10")


def _fill(location: str) -> None:
    with Memory(location, embedder=KeywordEmbedder(["plan"])) as memory:
        memory.add_many(TEXTS)
        memory.archive(3, reason="obsolete")
        memory.redact(6, reason="erasure request")


def _answers(memory: Memory) -> list[object]:
    settings = preset("default")
    found = []
    for question in QUESTIONS:
        query = lexical_query(question, settings)
        found.append(memory.store.lexical(memory.scope, query, None, 10))
        found.append(sorted(memory.store.bm25_scores(memory.scope, query).items()))  # type: ignore[attr-defined]
        found.append([(h.id, h.rank, h.score) for h in memory.search(question, settings=settings)])
    return found


def test_a_schema_9_store_is_reanalysed_and_answers_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    _fill(pg_url)
    with psycopg.connect(pg_url) as conn:
        assert {row[0] for row in conn.execute(_INDEXES)} == INDEXES
    _as_schema_9(pg_url)
    with psycopg.connect(pg_url) as conn:
        # Before: PostgreSQL's english lexemes (stop words gone, no folding).
        assert conn.execute("SELECT tsv::text FROM records WHERE id = 1").fetchone()[0] == (
            "'café':4 'meet':1 'review':9 'résumé':8 'zoë':5"
        )
    with Memory(pg_url, embedder=KeywordEmbedder(["plan"])) as memory:
        assert memory.store.schema_version() == analysis_schema.ANALYSIS_VERSION
        assert all(check.ok for check in memory.verify())
        with psycopg.connect(pg_url) as conn:
            # Every index dropped for the rewrite is back (the HNSW one rebuilt on open).
            indexes = {row[0] for row in conn.execute(_INDEXES)}
            assert indexes == INDEXES
            rows = conn.execute("SELECT text, terms FROM records ORDER BY id").fetchall()
            assert [terms for _, terms in rows] == terms_of([text for text, _ in rows])
            assert rows[5] == ("", "")  # the tombstone's terms are erased too
        migrated = _answers(memory)
    sqlite = str(tmp_path / "same.db")
    _fill(sqlite)
    with Memory(sqlite, embedder=KeywordEmbedder(["plan"])) as memory:
        assert _answers(memory) == migrated


def test_a_failed_reanalysis_leaves_the_store_as_it_was(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(pg_url)
    _as_schema_9(pg_url)
    monkeypatch.setattr(analysis_schema, "_BACKFILL_ROWS", 2)  # several rounds
    rounds = []

    def failing(texts: list[str]) -> list[str]:
        rounds.append(len(texts))
        if len(rounds) == 3:
            raise RuntimeError("the analyser failed")
        return terms_of(texts)

    monkeypatch.setattr(analysis_schema, "terms_of", failing)
    with pytest.raises(RuntimeError, match="the analyser failed"):
        Memory(pg_url, embedder=KeywordEmbedder(["plan"]))
    assert rounds == [2, 2, 2]
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT max(version) FROM mempp_migrations").fetchone()[0] == 9
        columns = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'records'"
            )
        }
        assert "terms" not in columns and "tsv" in columns
    monkeypatch.undo()
    with Memory(pg_url, embedder=KeywordEmbedder(["plan"])) as memory:  # and it retries
        assert memory.store.schema_version() == analysis_schema.ANALYSIS_VERSION
        assert all(check.ok for check in memory.verify())


def test_the_migration_names_the_hnsw_index_as_the_store_does() -> None:
    from mempp.store.postgres import bulk

    assert analysis_schema.HNSW_INDEX == bulk.HNSW_INDEX


def test_terms_cannot_be_rewritten(pg_url: str) -> None:
    _fill(pg_url)
    refused = pytest.raises(psycopg.errors.IntegrityError, match="only a redaction empties")
    with psycopg.connect(pg_url) as conn, refused:
        conn.execute("UPDATE records SET terms = 'forged' WHERE id = 1")
    memory = Memory(pg_url, embedder=KeywordEmbedder(["plan"]))
    store = memory.store
    with (
        memory,
        pytest.raises(StoreError, match="only a redaction empties"),
        store._connection() as conn,  # type: ignore[attr-defined]
    ):
        conn.execute("UPDATE records SET terms = '' WHERE id = 2")
