"""``verify`` for the SQLite engine: the file's own integrity check, the full-text index
against the records, every text against its stored hash, a vector of the right size and not
zeroed for every record that is not a tombstone, the append-only triggers, each enabled optional
index (``mempp.store.sqlite.indexes``)."""

from __future__ import annotations

import sqlite3

from mempp.records import text_hash
from mempp.store.sqlite.indexes import _IndexesMixin
from mempp.store.verify import (
    SQLITE_TRIGGERS,
    Check,
    reembed_check,
    texts_check,
    triggers_check,
    vectors_check,
)


class _VerifyMixin(_IndexesMixin):
    def verify(self) -> list[Check]:
        checks: list[Check] = []
        with self._lock:
            conn = self._conn
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check(20)")]
            checks.append(
                Check("sqlite integrity_check", problems == ["ok"], "; ".join(problems)[:500])
            )
            try:
                # rank=1: compare the index with the records table it is built from.
                conn.execute(
                    "INSERT INTO records_fts (records_fts, rank) VALUES ('integrity-check', 1)"
                )
                checks.append(Check("full-text index", True, "matches the records"))
            except sqlite3.DatabaseError as exc:
                checks.append(
                    Check(
                        "full-text index",
                        False,
                        f"does not match the records ({exc}); a row may have been removed "
                        "from it with the FTS5 'delete' command",
                    )
                )
            bad = "SELECT count(*) FROM records WHERE embedding IS NULL OR length(embedding) != ?"
            dim = conn.execute("SELECT value FROM mempp_meta WHERE key = 'dim'").fetchone()
            total = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            count_bad = lambda size: conn.execute(bad, (size * 4,)).fetchone()[0]  # noqa: E731
            zeroed = [
                row[0]
                for row in conn.execute(
                    """SELECT id FROM records WHERE embedding = zeroblob(length(embedding))
                       AND id NOT IN (SELECT record_id FROM redactions) ORDER BY id"""
                )
            ]
            checks.append(vectors_check(dim and dim[0], total, count_bad, zeroed))
            checks.append(texts_check(total, self._mismatched_texts(conn)))
            checks.append(self._reembed_check(conn))
            checks += self._index_checks(conn)
            present = {
                row[0]
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            }
        checks.append(triggers_check(present, SQLITE_TRIGGERS))
        return checks

    @staticmethod
    def _reembed_check(conn: sqlite3.Connection) -> Check:
        meta = dict(
            conn.execute(
                "SELECT key, value FROM mempp_meta WHERE key IN ('reembed_encoder', 'reembed_dim')"
            ).fetchall()
        )
        if "reembed_encoder" not in meta:
            return reembed_check(None, 0, 0, 0)
        dim = int(meta["reembed_dim"])
        staged, bad = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE length(embedding) != ?) FROM reembed_vectors",
            (dim * 4,),
        ).fetchone()
        total = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        return reembed_check((meta["reembed_encoder"], dim), staged, total, bad)

    @staticmethod
    def _mismatched_texts(conn: sqlite3.Connection) -> list[int]:
        """Ids whose text does not hash to the stored ``text_hash`` (SQLite has no SHA-256,
        so the rows are read here, a page at a time); a tombstone holds empty values."""
        rows = conn.execute(
            """SELECT id, text, text_hash,
                      EXISTS (SELECT 1 FROM redactions x WHERE x.record_id = records.id)
               FROM records ORDER BY id"""
        )
        bad = []
        while page := rows.fetchmany(2000):
            for row_id, text, stored, redacted in page:
                expected = b"" if redacted else text_hash(text)
                if bytes(stored) != expected or (redacted and text != ""):
                    bad.append(row_id)
        return bad
