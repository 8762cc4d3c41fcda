"""PostgreSQL schema migration 10: one analysis of text for both engines.

Until schema 9 PostgreSQL indexed ``to_tsvector('english', text)``: Snowball stems, English
stop words dropped, no diacritic folding, URLs and versions as single lexemes, at most 255
positions a lexeme. SQLite indexes FTS5's ``porter unicode61 remove_diacritics 2`` tokens, so
a store moved from one engine to the other ranked differently. From schema 10 every row's
``terms`` holds FTS5's tokens of its text, in order, joined by spaces
(``mempp.index.analysis``, computed by mempp on writing); the BM25 replica reads term
frequencies, lengths and positions from them, uncapped, and the ``tsvector`` (for
``ts_rank_cd`` and its GIN index) is generated from them, never from PostgreSQL's parser.

The migration analyses every stored text in its own transaction, then swaps the generated
column (``backfill_terms``; measured by ``benchmarks/bench_analysis_migration.py``). Kept in
one module so it can be renumbered on merge.
"""

from __future__ import annotations

from typing import Any

from mempp.index.analysis import terms_of
from mempp.store.migrations import Migration

# The HNSW index's name (``mempp.store.postgres.bulk.HNSW_INDEX``, which imports the schema).
HNSW_INDEX = "records_embedding_hnsw"

ANALYSIS_VERSION = 10

# Rows analysed and written per round of the backfill.
_BACKFILL_ROWS = 2000


def backfill_terms(conn: Any) -> None:
    """Write every row's ``terms`` from its text, then generate the tsvector from them.

    Every row is rewritten, so every index of the table would take a new entry per row (at
    10,000 rows the HNSW index alone made that 31 s): the secondary indexes are dropped
    first and built once at the end, and the HNSW index is left to the store's repair on
    open (``bulk._ensure_hnsw``, sized for the rows), as after a bulk load. The table is
    locked by the migration's first ALTER until it commits."""
    kept = [
        row[0]
        for row in conn.execute(
            """SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
               WHERE i.indrelid = 'records'::regclass AND NOT i.indisprimary
                 AND i.indexrelid <> coalesce(to_regclass(%s), 0)""",
            (HNSW_INDEX,),
        )
    ]
    for (name,) in conn.execute(
        """SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           WHERE i.indrelid = 'records'::regclass AND NOT i.indisprimary"""
    ).fetchall():
        conn.execute(f'DROP INDEX "{name}"')
    # ('', 0) precedes every row (ids start at 1), and a plain row comparison stays an index
    # condition in the generic plan psycopg's prepared statement gets after five rounds.
    after: tuple[str, int] = ("", 0)
    while True:
        rows = conn.execute(
            """SELECT scope, id, text FROM records
               WHERE (scope, id) > (%(scope)s, %(id)s)
               ORDER BY scope, id LIMIT %(limit)s""",
            {"scope": after[0], "id": after[1], "limit": _BACKFILL_ROWS},
        ).fetchall()
        if not rows:
            break
        conn.execute(
            """UPDATE records r SET terms = v.terms
               FROM unnest(%s::text[], %s::int8[], %s::text[]) AS v(scope, id, terms)
               WHERE r.scope = v.scope AND r.id = v.id""",
            (
                [row[0] for row in rows],
                [row[1] for row in rows],
                terms_of([row[2] for row in rows]),
            ),
        )
        after = (rows[-1][0], rows[-1][1])
    conn.execute("ALTER TABLE records ALTER COLUMN terms SET NOT NULL")
    conn.execute(  # rewrites the table, with only its primary key left to rebuild
        """ALTER TABLE records
            ADD COLUMN tsv tsvector GENERATED ALWAYS AS (mempp_terms_tsvector(terms)) STORED"""
    )
    for definition in kept:
        conn.execute(definition)


# A row's tsvector from its terms, with no parser or dictionary in between: each distinct term
# with its positions (1-based token numbers, as PostgreSQL counts them; a tsvector holds
# positions up to 16,383 and 256 of them a lexeme, so a term seen only later is kept without
# positions), terms of more than 2,047 bytes (tsvector's limit) left out, and the terms in
# order of first occurrence while their bytes stay within a tsvector's 1 MB.
TERMS_TSVECTOR = r"""CREATE FUNCTION mempp_terms_tsvector(terms text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN (
        SELECT coalesce(string_agg(entry, ' '), '')::tsvector FROM (
            SELECT entry, sum(octet_length(term) + 8) OVER (ORDER BY first) AS size FROM (
                SELECT u.term, min(u.n) AS first,
                       '''' || replace(replace(u.term, '\', '\\'), '''', '''''') || ''''
                       || coalesce(':' || array_to_string(
                              (array_agg(u.n ORDER BY u.n) FILTER (WHERE u.n <= 16383))[1:256],
                              ','), '') AS entry
                FROM unnest(string_to_array(terms, ' ')) WITH ORDINALITY AS u(term, n)
                WHERE octet_length(u.term) <= 2047
                GROUP BY u.term) lexemes) sized
        WHERE size <= 1000000)"""

ANALYSIS_MIGRATION = Migration(
    ANALYSIS_VERSION,
    "one analysis for both engines: FTS5's tokens in records.terms, the tsvector built from them",
    (
        "ALTER TABLE records ADD COLUMN terms TEXT",
        "ALTER TABLE records DROP COLUMN tsv",  # and its GIN index, records_tsv
        "DROP FUNCTION mempp_tsvector(text)",
        TERMS_TSVECTOR,
    ),
    backfill_terms,
    (
        "CREATE INDEX records_tsv ON records USING gin (tsv)",
        # Terms are content: written with the row, emptied only by its redaction.
        """CREATE FUNCTION mempp_guard_terms() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.terms = '' AND mempp_redaction_pending(OLD.scope, OLD.id) THEN
                RETURN NEW;
            END IF;
            RAISE EXCEPTION
                'mempp: a record''s terms are its text''s; only a redaction empties them'
                USING ERRCODE = 'integrity_constraint_violation';
        END $$""",
        """CREATE TRIGGER records_terms_frozen BEFORE UPDATE OF terms ON records
            FOR EACH ROW EXECUTE FUNCTION mempp_guard_terms()""",
    ),
)
