"""The SQLite engine's API keys (``KeyStore``): one row per key, the secret only as a hash,
revoked in place and never deleted."""

from __future__ import annotations

import sqlite3

from mempp.errors import InvalidInput
from mempp.store.base import API_KEY_COLUMNS, ApiKey
from mempp.store.sqlite.schema import _SQLiteBase


class _KeysMixin(_SQLiteBase):
    """API keys of the server (mempp.server.keys)."""

    def add_key(self, key: ApiKey, secret_hash: bytes) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    f"""INSERT INTO api_keys ({API_KEY_COLUMNS}, secret_hash)
                        VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    (*key.row(), secret_hash),
                )
        except sqlite3.IntegrityError as exc:
            raise InvalidInput(f"cannot store key {key.key_id}: {exc}") from None

    def api_key(self, key_id: str) -> tuple[ApiKey, bytes] | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {API_KEY_COLUMNS}, secret_hash FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
        return None if row is None else (ApiKey.from_row(row), bytes(row[6]))

    def api_keys(self, scope: str | None = None) -> list[ApiKey]:
        where, args = ("WHERE scope = ?", (scope,)) if scope is not None else ("", ())
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {API_KEY_COLUMNS} FROM api_keys {where} ORDER BY created_at, key_id", args
            ).fetchall()
        return [ApiKey.from_row(row) for row in rows]

    def revoke_key(self, key_id: str, revoked_at: str) -> ApiKey | None:
        with self._write() as conn:
            conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (revoked_at, key_id),
            )
            row = conn.execute(
                f"SELECT {API_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
        return None if row is None else ApiKey.from_row(row)

    def key_count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM api_keys").fetchone()[0])
