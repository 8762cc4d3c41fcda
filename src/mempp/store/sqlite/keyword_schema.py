"""The SQLite keyword index (``mempp.store.sqlite.keyword``), an optional index
(``mempp.store.indexes``): an FTS5 table with the ``trigram`` tokenizer over the record text,
external content (the text is stored once, in ``records``), filled by a trigger on insert;
and ``records_kw_rows``, a narrow index of each record's id, scope, state and event key, so
that the leg checks a match's scope without reading the record row (which holds its text and
vector).

Built only when a store enables it (``mempp.store.sqlite.indexes``): what to create, how to
fill it from the rows already stored, what to drop, how an erasure takes a redacted row's text
out of it, and how ``verify`` compares it with the records.
"""

from __future__ import annotations

import sqlite3

from mempp.store.indexes import Progress
from mempp.store.verify import Check

KEYWORD_TABLE = "records_kw"
KEYWORD_ROWS_INDEX = "records_kw_rows"
_TRIGGER = "records_kw_insert"
# Rows read and indexed per step of a build (one transaction in all: the steps only report).
_FILL_ROWS = 20_000

CREATE = (
    f"""CREATE VIRTUAL TABLE {KEYWORD_TABLE} USING fts5(
        text, content='records', content_rowid='id', tokenize='trigram')""",
    f"""CREATE TRIGGER {_TRIGGER} AFTER INSERT ON records BEGIN
        INSERT INTO {KEYWORD_TABLE} (rowid, text) VALUES (new.id, new.text);
    END""",
    f"CREATE INDEX {KEYWORD_ROWS_INDEX} ON records (id, scope, state, event_key)",
)
# IF EXISTS: a part dropped by hand (verify says which) does not stop the rest going.
DROP = (
    f"DROP TRIGGER IF EXISTS {_TRIGGER}",
    f"DROP TABLE IF EXISTS {KEYWORD_TABLE}",
    f"DROP INDEX IF EXISTS {KEYWORD_ROWS_INDEX}",
)


def fill(conn: sqlite3.Connection, progress: Progress | None) -> None:
    """Index every stored row (a redacted one holds its tombstone's empty text), in id order,
    reporting after each step."""
    total = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    done, after = 0, 0
    if progress is not None:
        progress(0, total)
    while True:
        last = conn.execute(
            "SELECT max(id), count(*) FROM (SELECT id FROM records WHERE id > ? ORDER BY id "
            "LIMIT ?)",
            (after, _FILL_ROWS),
        ).fetchone()
        if last[0] is None:
            break
        conn.execute(
            f"INSERT INTO {KEYWORD_TABLE} (rowid, text) "
            "SELECT id, text FROM records WHERE id > ? AND id <= ? ORDER BY id",
            (after, last[0]),
        )
        after, done = last[0], done + last[1]
        if progress is not None:
            progress(done, total)


def erase(conn: sqlite3.Connection, row: int, old_text: str, new_text: str) -> None:
    """Take ``old_text`` of an erased row out of the index and put its tombstone's text in
    (one entry per record, so the integrity check still finds the index whole)."""
    conn.execute(
        f"INSERT INTO {KEYWORD_TABLE} ({KEYWORD_TABLE}, rowid, text) VALUES ('delete', ?, ?)",
        (row, old_text),
    )
    conn.execute(f"INSERT INTO {KEYWORD_TABLE} (rowid, text) VALUES (?, ?)", (row, new_text))


def after_erasure(conn: sqlite3.Connection) -> None:
    # 'delete' leaves the old trigrams in older segments until they merge: merge them now.
    conn.execute(f"INSERT INTO {KEYWORD_TABLE} ({KEYWORD_TABLE}) VALUES ('optimize')")


def check(conn: sqlite3.Connection) -> Check:
    name = "keyword index"
    try:
        # rank=1: compare the index with the records table it is built from.
        conn.execute(
            f"INSERT INTO {KEYWORD_TABLE} ({KEYWORD_TABLE}, rank) VALUES ('integrity-check', 1)"
        )
    except sqlite3.DatabaseError as exc:
        return Check(name, False, f"does not match the records ({exc})")
    present = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN (?, ?)", (_TRIGGER, KEYWORD_ROWS_INDEX)
        )
    }
    if _TRIGGER not in present:
        return Check(name, False, f"its trigger {_TRIGGER} is missing: new rows are not indexed")
    if KEYWORD_ROWS_INDEX not in present:
        return Check(name, False, f"its index {KEYWORD_ROWS_INDEX} is missing")
    return Check(name, True, "matches the records")
