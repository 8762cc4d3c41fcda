"""An opt-in on-disk SQLite cache of chat replies, keyed by endpoint, model, messages and
parameters, so re-judging a benchmark run costs nothing and gives the same replies."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mempp.private import create_file, make_dirs


class LLMCache:
    """Replies on disk in one SQLite file, keyed by a hash of the full request.

    Only successful replies are stored. A reply the caller found unusable is evicted
    (:meth:`discard`), so a retry or a rerun asks the model again instead of replaying it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        make_dirs(self.path.parent)  # new folders 0700, the file 0600 (mempp.private)
        create_file(self.path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        with self._lock, self._db:
            # WAL lets several benchmark processes share one cache file.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS calls ("
                " key TEXT PRIMARY KEY, created TEXT NOT NULL, model TEXT,"
                " request TEXT NOT NULL, reply TEXT NOT NULL)"
            )

    @staticmethod
    def key(endpoint: str, payload: Mapping[str, Any], tag: str | None = None) -> str:
        """Hash of endpoint, model, messages and every sampling parameter (never the API key)."""
        material = {"endpoint": endpoint, "payload": payload, "tag": tag}
        blob = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT reply FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, payload: Mapping[str, Any], reply: str) -> None:
        request = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (key, created, model, request, reply)"
                " VALUES (?, ?, ?, ?, ?)",
                (key, now, payload.get("model"), request, reply),
            )

    def discard(self, key: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM calls WHERE key = ?", (key,))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
