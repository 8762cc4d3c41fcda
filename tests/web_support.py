"""A real mempp server on a loopback port for the web page's tests (HTTP and browser).

``running_server`` builds a SQLite store with the example folder, a thread and a
supersession chain written through the change log, makes API keys with
``mempp.server.keys``, and serves ``create_app`` with uvicorn in a thread until the block
ends. ``with_keys=False`` gives a keyless loopback server (every request the default
scope's admin).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mempp import Memory
from mempp.importers.files import read_sources
from mempp.llm import LLMClient
from mempp.server import keys
from mempp.server.app import create_app
from mempp.server.state import ServerState
from mempp.store.base import GroupOutcome, StateChange

from conftest import KeywordEmbedder
from serving import live_server

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


@contextmanager
def running_server(
    tmp: Path, *, with_keys: bool = True, llm: LLMClient | None = None
) -> Iterator[Served]:
    db = tmp / "web.db"
    ids = fill(db)
    state = ServerState(str(db), host="127.0.0.1", embedder=KeywordEmbedder(WORDS), llm=llm)
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
    with live_server(create_app(state, mcp=False), lifespan="on") as url:
        yield Served(url, db, tokens, ids)
