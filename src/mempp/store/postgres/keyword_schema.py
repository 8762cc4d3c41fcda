"""PostgreSQL schema migration 11 (the keyword leg, ``mempp.store.postgres.keyword``): the
``pg_trgm`` extension and a trigram index of the record text. Kept apart from ``schema`` for
size; applied with the others (``schema.MIGRATIONS``)."""

from __future__ import annotations

from mempp.store.migrations import Migration

# pg_trgm ships with PostgreSQL (contrib) and is a trusted extension: the database's owner
# may create it without being a superuser.
KEYWORD_EXTENSION = "pg_trgm"

KEYWORD_MIGRATION = Migration(
    11,
    "keyword leg: a trigram index of the record text, for substring matches",
    (
        f"CREATE EXTENSION IF NOT EXISTS {KEYWORD_EXTENSION}",
        # The leg asks ``text ILIKE '%term%'`` (which this index answers) and checks each
        # found row with the exact rule (mempp.store.postgres.keyword).
        "CREATE INDEX records_text_trgm ON records USING gin (text gin_trgm_ops)",
    ),
)
