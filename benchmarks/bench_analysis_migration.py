"""How long PostgreSQL's schema 10 (``store/postgres/analysis_schema.py``) takes to re-analyse
a store written before it, per 10,000 rows.

Not a test: run it, read the figures. For each size N it fills a fresh database with N rows
(texts: OrgMemBench's corpus cut into paragraphs, repeated with a number so no two rows are
equal; 8-d random vectors, since the migration never reads them), puts the database back
to schema 9 as the test does (``tests/test_pg_analysis_migration.py``: PostgreSQL's own
``english`` tsvector, no terms), and times opening it with today's mempp, which runs the
migration: the analysis (``mempp.index.analysis``), the writes of every row's terms, the
regenerated tsvector and its GIN index, all in one transaction.

    python benchmarks/bench_analysis_migration.py --sizes 10000 50000
    python benchmarks/bench_analysis_migration.py --pg-url postgresql://user:pw@host/db

The corpus is read from ``--data`` (default ``../shared/datasets``), never copied.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

import numpy as np
import psycopg

from mempp import Document
from mempp.store.postgres import PostgresStore
from mempp.store.postgres.schema import MIGRATIONS

DIM = 8


def _paragraphs(data: Path) -> list[str]:
    corpus = data / "orgmembench" / "helix" / "medium" / "corpus"
    if not corpus.is_dir():
        raise SystemExit(f"{corpus}: not found (pass --data)")
    found = []
    for path in sorted(corpus.glob("*/*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [p.strip() for p in text.split("\n\n") if len(p.strip()) > 40]
    return found


def _as_schema_9(url: str) -> None:
    old = next(
        s for s in MIGRATIONS[0].statements if s.startswith("CREATE FUNCTION mempp_tsvector")
    )
    with psycopg.connect(url) as conn:
        conn.execute("DROP TRIGGER records_terms_frozen ON records")
        conn.execute("DROP FUNCTION mempp_guard_terms()")
        conn.execute("ALTER TABLE records DROP COLUMN tsv")
        conn.execute("DROP FUNCTION mempp_terms_tsvector(text)")
        conn.execute("ALTER TABLE records DROP COLUMN terms")
        conn.execute(old)
        conn.execute(
            "ALTER TABLE records ADD COLUMN tsv tsvector "
            "GENERATED ALWAYS AS (mempp_tsvector(text)) STORED"
        )
        conn.execute("CREATE INDEX records_tsv ON records USING gin (tsv)")
        conn.execute("DELETE FROM mempp_migrations WHERE version = 10")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE records")


def _database(admin: str) -> str:
    name = f"mempp_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    parts = urllib.parse.urlsplit(admin)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def run(admin: str, sizes: list[int], data: Path) -> None:
    paragraphs = _paragraphs(data)
    rng = np.random.default_rng(10)
    for size in sizes:
        url = _database(admin)
        texts = [f"{paragraphs[i % len(paragraphs)]} ({i})" for i in range(size)]
        store = PostgresStore(url)
        store.bind_encoder("bench", DIM)
        vectors = rng.standard_normal((size, DIM)).astype(np.float32)
        with store.bulk_load():
            for start in range(0, size, 5000):
                docs = [Document.create(t) for t in texts[start : start + 5000]]
                store.insert("default", docs, vectors[start : start + 5000])
        store.close()
        _as_schema_9(url)
        chars = sum(len(t) for t in texts)
        started = time.perf_counter()
        PostgresStore(url).close()  # opening runs migration 10
        elapsed = time.perf_counter() - started
        print(
            f"{size:>8,} rows ({chars / size:.0f} chars each): migration {elapsed:.1f} s, "
            f"{elapsed * 10_000 / size:.1f} s per 10,000 rows",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--pg-url", default=None, help="server to use (a database is created)")
    parser.add_argument("--data", type=Path, default=Path("../shared/datasets"))
    args = parser.parse_args()
    if args.pg_url is not None:
        run(args.pg_url, args.sizes, args.data)
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="mempp-bench-pg-") as folder:
        server = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            run(server.get_uri(), args.sizes, args.data)
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
