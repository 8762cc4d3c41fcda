"""``verify`` for the PostgreSQL engine: a vector of the bound size, not zeroed, for every
record that is not a tombstone, every text against its stored hash (the full-text vector is a
column generated from the text, so a text rewritten with the triggers off is found by its
hash, not by the index), each row's terms as today's analysis of its text gives them
(``mempp.index.analysis``) and its full-text vector as its terms give it, the append-only
triggers, each enabled optional index (``mempp.store.postgres.indexes``). (Page-level integrity
is PostgreSQL's own: data checksums and the ``amcheck`` extension.)"""

from __future__ import annotations

from typing import Any

from mempp.index.analysis import terms_of
from mempp.store.postgres.indexes import _IndexesMixin
from mempp.store.verify import (
    POSTGRES_TRIGGERS,
    Check,
    reembed_check,
    texts_check,
    triggers_check,
    vectors_check,
)

# Rows whose analysis is checked per round.
_VERIFY_ROWS = 2000


class _VerifyMixin(_IndexesMixin):
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
            checks.append(self._full_text_check(conn))
            checks += self._index_checks(conn)
            present = {
                row[0]
                for row in conn.execute(
                    "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN "
                    "(SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)"
                )
            }
        checks.append(triggers_check(present, POSTGRES_TRIGGERS))
        return checks

    @staticmethod
    def _full_text_check(conn: Any) -> Check:
        """Every row's terms are its text's by today's analysis (``mempp.index.analysis``),
        read in rounds along the primary key, and its tsvector is the one its terms give."""
        differ: list[int] = []
        after: tuple[str, int] = ("", 0)  # before every row: ids start at 1
        while True:
            rows = conn.execute(
                """SELECT scope, id, text, terms FROM records
                   WHERE (scope, id) > (%(scope)s, %(id)s)
                   ORDER BY scope, id LIMIT %(limit)s""",
                {"scope": after[0], "id": after[1], "limit": _VERIFY_ROWS},
            ).fetchall()
            if not rows:
                break
            expected = terms_of([row[2] for row in rows])
            differ += [row[1] for row, terms in zip(rows, expected, strict=True) if row[3] != terms]
            after = (rows[-1][0], rows[-1][1])
        stale = conn.execute(
            "SELECT count(*) FROM records WHERE tsv IS DISTINCT FROM mempp_terms_tsvector(terms)"
        ).fetchone()[0]
        if differ:
            shown = ", ".join(str(i) for i in sorted(differ)[:10])
            return Check(
                "full-text index",
                False,
                f"{len(differ)} rows' terms differ from their text's (ids {shown})",
            )
        if stale:
            return Check(
                "full-text index", False, f"{stale} rows' tsvector differs from their terms"
            )
        return Check("full-text index", True, "matches")
