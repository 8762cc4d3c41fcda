"""SQLite schema migration 11 (the keyword leg, ``mempp.store.sqlite.keyword``): a trigram
index of the record text. Kept apart from ``schema`` so the leg's module can import the
engine's base; applied with the others (``schema.MIGRATIONS``)."""

from __future__ import annotations

from mempp.store.migrations import Migration

KEYWORD_TABLE = "records_kw"

KEYWORD_MIGRATION = Migration(
    11,
    "keyword leg: a trigram index of the record text, for substring matches",
    (
        f"""CREATE VIRTUAL TABLE {KEYWORD_TABLE} USING fts5(
            text, content='records', content_rowid='id', tokenize='trigram')""",
        f"""CREATE TRIGGER records_kw_insert AFTER INSERT ON records BEGIN
            INSERT INTO {KEYWORD_TABLE} (rowid, text) VALUES (new.id, new.text);
        END""",
        # Every row written before: read from the content table (redacted rows hold '').
        f"INSERT INTO {KEYWORD_TABLE} ({KEYWORD_TABLE}) VALUES ('rebuild')",
    ),
)
