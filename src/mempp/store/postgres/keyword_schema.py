"""The PostgreSQL keyword index (``mempp.store.postgres.keyword``), an optional index
(``mempp.store.indexes``): a ``pg_trgm`` GIN index of the record text as the leg folds it
(``mempp_kw_fold``, the SQL twin of ``mempp.search.keyword.fold``). PostgreSQL keeps it on
every insert and on an erasure's update itself; built only when a store enables it
(``mempp.store.postgres.indexes``)."""

from __future__ import annotations

from typing import Any

from mempp.search.keyword import FOLD_FROM, FOLD_TO
from mempp.store.verify import Check

# pg_trgm ships with PostgreSQL (contrib) and is a trusted extension: the database's owner
# may create it without being a superuser.
EXTENSION = "pg_trgm"
INDEX_NAME = "records_text_trgm"
FOLD_FUNCTION = "mempp_kw_fold"


def _fold_sql() -> str:
    sql = 'lower(body COLLATE "C")'
    for source, target in zip(FOLD_FROM[26:], FOLD_TO[26:], strict=True):
        sql = f"replace({sql}, '{source}', '{target}')"
    return sql


CREATE = (
    f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}",
    # IMMUTABLE, so an index may be built on it; the leg's LIKE on the same expression is the
    # rule itself, and the index answers it. lower() under the "C" collation folds A-Z only,
    # whatever the database's locale; then the two characters beyond ASCII. (translate()
    # does the same but costs some 15 times more per row, and every candidate is rechecked.)
    f"""CREATE OR REPLACE FUNCTION {FOLD_FUNCTION}(body TEXT) RETURNS TEXT
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$SELECT {_fold_sql()}$$""",
    f"CREATE INDEX {INDEX_NAME} ON records USING gin ({FOLD_FUNCTION}(text) gin_trgm_ops)",
)
# IF EXISTS: a part dropped by hand (verify says which) does not stop the rest going.
DROP = (f"DROP INDEX IF EXISTS {INDEX_NAME}", f"DROP FUNCTION IF EXISTS {FOLD_FUNCTION}(TEXT)")


def check(conn: Any) -> Check:
    """The index is there and valid (PostgreSQL maintains its content; ``amcheck`` checks
    pages)."""
    found = conn.execute(
        """SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace""",
        (INDEX_NAME,),
    ).fetchone()
    if found is None:
        return Check("keyword index", False, f"enabled, but {INDEX_NAME} is missing")
    if not found[0]:
        return Check("keyword index", False, f"{INDEX_NAME} is marked invalid")
    return Check("keyword index", True, f"{INDEX_NAME} present and valid")
