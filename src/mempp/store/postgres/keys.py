"""The PostgreSQL engine's API keys (``KeyStore``): one row per key, the secret only as a
hash, revoked in place and never deleted."""

from __future__ import annotations

from mempp.errors import InvalidInput
from mempp.store.base import API_KEY_COLUMNS, ApiKey
from mempp.store.postgres.schema import _PostgresBase


class _KeysMixin(_PostgresBase):
    """API keys of the server (mempp.server.keys)."""

    def add_key(self, key: ApiKey, secret_hash: bytes) -> None:
        for name, value in (("scope", key.scope), ("label", key.label)):
            if value is not None and "\x00" in value:
                raise InvalidInput(f"{name} contains a NUL character")
        with self._connection() as conn:
            inserted = conn.execute(
                f"""INSERT INTO api_keys ({API_KEY_COLUMNS}, secret_hash)
                    VALUES (%s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (key_id) DO NOTHING RETURNING key_id""",
                (*key.row(), secret_hash),
            ).fetchone()
        if inserted is None:
            raise InvalidInput(f"cannot store key {key.key_id}: the id is taken")

    def api_key(self, key_id: str) -> tuple[ApiKey, bytes] | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {API_KEY_COLUMNS}, secret_hash FROM api_keys WHERE key_id = %s", (key_id,)
            ).fetchone()
        return None if row is None else (ApiKey.from_row(row), bytes(row[6]))

    def api_keys(self, scope: str | None = None) -> list[ApiKey]:
        where, args = ("WHERE scope = %s", (scope,)) if scope is not None else ("", ())
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {API_KEY_COLUMNS} FROM api_keys {where} ORDER BY created_at, key_id", args
            ).fetchall()
        return [ApiKey.from_row(row) for row in rows]

    def revoke_key(self, key_id: str, revoked_at: str) -> ApiKey | None:
        with self._connection() as conn:
            conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
                (revoked_at, key_id),
            )
            row = conn.execute(
                f"SELECT {API_KEY_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,)
            ).fetchone()
        return None if row is None else ApiKey.from_row(row)

    def key_count(self) -> int:
        with self._connection() as conn:
            return int(conn.execute("SELECT count(*) FROM api_keys").fetchone()[0])
