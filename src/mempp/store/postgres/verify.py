"""``verify`` for the PostgreSQL engine: a vector of the bound size, not zeroed, for every
record that is not a tombstone, every text against its stored hash (the full-text vector is a
column generated from the text, so a text rewritten with the triggers off is found by its
hash, not by the index), each row's full-text vector as today's tokenizer gives it, the
append-only triggers. (Page-level integrity
is PostgreSQL's own: data checksums and the ``amcheck`` extension.)"""

from __future__ import annotations

from mempp.store.postgres.schema import _PostgresBase
from mempp.store.verify import (
    POSTGRES_TRIGGERS,
    Check,
    reembed_check,
    texts_check,
    triggers_check,
    vectors_check,
)


class _VerifyMixin(_PostgresBase):
    def verify(self) -> list[Check]:
        checks: list[Check] = []
        with self._connection() as conn:
            bad = "SELECT count(*) FROM records WHERE embedding IS NULL "
            bad += " OR vector_dims(embedding) != %s"
            dim = conn.execute("SELECT value FROM mempp_meta WHERE key = 'dim'").fetchone()
            total = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            count_bad = lambda size: conn.execute(bad, (size,)).fetchone()[0]  # noqa: E731
            zeroed = [
                row[0]
                for row in conn.execute(
                    """SELECT id FROM records r WHERE vector_norm(embedding) = 0
                       AND NOT EXISTS (SELECT 1 FROM redactions x
                                       WHERE x.scope = r.scope AND x.record_id = r.id)
                       ORDER BY id"""
                )
            ]
            checks.append(vectors_check(dim and dim[0], total, count_bad, zeroed))
            mismatched = [
                row[0]
                for row in conn.execute(
                    """SELECT id FROM records r WHERE CASE
                         WHEN EXISTS (SELECT 1 FROM redactions x
                                      WHERE x.scope = r.scope AND x.record_id = r.id)
                         THEN text <> '' OR text_hash <> '\\x'::bytea
                         ELSE text_hash <> sha256(convert_to(text, 'UTF8')) END
                       ORDER BY id"""
                )
            ]
            checks.append(texts_check(total, mismatched))
            meta = dict(
                conn.execute(
                    """SELECT key, value FROM mempp_meta
                       WHERE key IN ('reembed_encoder', 'reembed_dim')"""
                ).fetchall()
            )
            if "reembed_encoder" in meta:
                target = (meta["reembed_encoder"], int(meta["reembed_dim"]))
                staged, wrong = conn.execute(
                    """SELECT count(*), count(*) FILTER (WHERE vector_dims(embedding) != %s)
                       FROM reembed_vectors""",
                    (target[1],),
                ).fetchone()
                checks.append(reembed_check(target, staged, total, wrong))
            else:
                checks.append(reembed_check(None, 0, 0, 0))
            stale = conn.execute(
                "SELECT count(*) FROM records WHERE tsv IS DISTINCT FROM mempp_tsvector(text)"
            ).fetchone()[0]
            checks.append(
                Check(
                    "full-text index",
                    stale == 0,
                    f"{stale} rows' tsvector differs from their text" if stale else "matches",
                )
            )
            present = {
                row[0]
                for row in conn.execute(
                    "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN "
                    "(SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)"
                )
            }
        checks.append(triggers_check(present, POSTGRES_TRIGGERS))
        return checks
