"""A real mempp server on a loopback port for the web page's tests (HTTP and browser).

``running_server`` builds a SQLite store with the example folder, a thread and a
supersession chain written through the change log, makes API keys with
``mempp.server.keys``, and serves ``create_app`` with uvicorn in a thread until the block
ends. ``with_keys=False`` gives a keyless loopback server (every request the default
scope's admin).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import uvicorn

from mempp import Memory
from mempp.ingest import read_sources
from mempp.llm import LLMClient
from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.store import Store, open_store
from mempp.store.base import ApiKey, GroupOutcome, StateChange
from mempp.store.sqlite import SQLiteStore

from conftest import KeywordEmbedder

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "acme"
WORDS = ["team", "plan", "pricing", "launch", "secret", "seat", "webhook"]
THREAD = [
    ("Launch checklist: docs, pricing page, status page.", "2024-05-02"),
    ("Status page is live; docs still pending.", "2024-05-03"),
    ("Docs done. We are ready to launch on Monday.", "2024-05-06"),
]


@dataclass
class Served:
    url: str
    db: Path
    tokens: dict[str, str] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)


def fill(db: Path) -> dict[str, int]:
    """The store the tests read: returns the ids they refer to by name."""
    with Memory(db, embedder=KeywordEmbedder(WORDS)) as memory:
        docs = [item.document for item in read_sources([str(EXAMPLES)])]
        added = memory.add_many([d for d in docs if d is not None])
        by_day = {
            d.date.day: r.id for d, r in zip(docs, added, strict=True) if d and d.date and r.id
        }
        thread_ids = [
            memory.add(text, author="Lena Park", date=day, thread="launch-2024").id
            for text, day in THREAD
        ]
        kickoff, raise_, reversal = by_day["2024-01-15"], by_day["2024-03-08"], by_day["2024-09-30"]
        store = memory.store
        run = store.begin_run(memory.scope, kind="consolidate", dry_run=False, settings={})
        changes = (
            StateChange(kickoff, "active", None, "active", raise_),
            StateChange(raise_, "active", None, "active", reversal),
        )
        members = (kickoff, raise_, reversal)
        store.record_group(memory.scope, run, GroupOutcome(0, "conflict", members, changes))
        store.finish_run(memory.scope, run, {"groups": 1})
    with Memory(db, scope="other", embedder=KeywordEmbedder(WORDS)) as other:
        secret = other.add("Other tenant's secret plan.", author="Eve", date="2024-02-01").id
    assert secret is not None
    return {
        "kickoff": kickoff,
        "raise": raise_,
        "reversal": reversal,
        "thread_first": thread_ids[0],
        "thread_last": thread_ids[-1],
        "other": secret,
    }


class _KeysInRAM(SQLiteStore):
    """The SQLite store with API keys kept in RAM, used only while the engine keeps none of
    its own (keys in SQLite come with the store split): ``mempp.server.keys`` makes, hashes,
    checks and revokes them exactly as it will on disk."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._keys: dict[str, tuple[ApiKey, bytes]] = {}

    def add_key(self, key: ApiKey, secret_hash: bytes) -> None:
        self._keys[key.key_id] = (key, secret_hash)

    def api_key(self, key_id: str) -> tuple[ApiKey, bytes] | None:
        return self._keys.get(key_id)

    def api_keys(self, scope: str | None = None) -> list[ApiKey]:
        return [k for k, _ in self._keys.values() if scope is None or k.scope == scope]

    def revoke_key(self, key_id: str, revoked_at: str) -> ApiKey | None:
        if key_id not in self._keys:
            return None
        key, digest = self._keys[key_id]
        key = replace(key, revoked_at=key.revoked_at or revoked_at)
        self._keys[key_id] = (key, digest)
        return key

    def key_count(self) -> int:
        return len(self._keys)


def _store_with_keys(db: Path) -> Store:
    store = open_store(str(db))
    if keys.supports_keys(store):
        return store
    store.close()
    return _KeysInRAM(str(db))


@contextmanager
def running_server(
    tmp: Path, *, with_keys: bool = True, llm: LLMClient | None = None
) -> Iterator[Served]:
    db = tmp / "web.db"
    ids = fill(db)
    store = _store_with_keys(db) if with_keys else open_store(str(db))
    state = ServerState(store, host="127.0.0.1", embedder=KeywordEmbedder(WORDS), llm=llm)
    tokens: dict[str, str] = {}
    if with_keys:
        for name, scope, role in [
            ("write", "default", "write"),
            ("read", "default", "read"),
            ("other", "other", "read"),
            ("uploads", "uploads", "write"),
            ("revoked", "default", "read"),
        ]:
            key, token = keys.create_key(state.store, scope=scope, role=role)
            tokens[name] = token
            if name == "revoked":
                keys.revoke_key(state.store, key.key_id)
    app = create_app(state, mcp=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", db, tokens, ids)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
