"""The LLM ablations of ``mempp bench``: ``mempp-consolidated`` and ``mempp-graph`` (Mem^g++).

Both change the store, so both work on their **own copy** of the cached benchmark store, never
on the store every other system reads (a consolidation archives and supersedes rows; a graph
adds tables). Each copy lives next to the benchmark store and is keyed by that store's cache
key and the model, so a rerun reuses it and makes no call:

* ``consolidated-<key>/store.db``: consolidation (``mempp.llm.consolidate.consolidate``, threshold
  0.85) run once per scope the questions touch. A scope is recorded in ``manifest.json`` only
  when its run finished, so an interrupted scope is undone and run again (its successful calls
  come back from the LLM cache). Merged rows stand for every benchmark item of the rows they
  replace, so gold-evidence metrics still apply.
* ``graph-<key>/store.db``: ``mempp.llm.graph.extract`` once per row of the scopes the questions
  touch. Extraction is incremental (a row is marked when done, a failed row stays pending), so
  a rerun only asks for the rows still pending.

A call that fails for a transport reason (endpoint down, HTTP error after the client's retries)
stops the preparation with :class:`AblationError` instead of being baked into the cached copy;
an unusable reply is the model's failure and is counted, as in the paper.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mempp.bench.cache import IngestedStore
from mempp.bench.systems import CONSOLIDATION_THRESHOLD
from mempp.encoders import Embedder
from mempp.errors import MemppError
from mempp.store import Store, open_store
from mempp.store.base import GraphStore, supports

if TYPE_CHECKING:
    from mempp.llm import LLMClient
    from mempp.memory import Memory

FORMAT = 1
STORE_FILE = "store.db"
MANIFEST = "manifest.json"
EXTRACT_BATCH = 64  # rows per extract() call, so the progress bar moves
# Failure reasons that say the endpoint failed (unreachable or still failing after the client's
# retries, or refusing the key, model or URL), not the model: such results must not be cached.
_TRANSPORT_FAILURE = re.compile(r"(?:^|: )(?:LLMUnavailable: |LLMError: HTTP (?:401|403|404) )")


class AblationError(MemppError):
    """An LLM ablation could not be prepared (the endpoint failed); nothing wrong was cached."""


@dataclass(slots=True)
class ScopeView:
    """The part of a ``Memory`` that ``mempp.llm.graph`` reads (its store and scope).

    The benchmark keeps one store open for every scope (LoCoMo has 10, LongMemEval one per
    question), as the retrieval systems do, instead of opening a ``Memory`` per scope.
    """

    store: Store
    scope: str

    def as_memory(self) -> Memory:
        # graph.extract / graph.related_facts read only .store and .scope.
        return cast("Memory", self)


def copy_store(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite store, made with SQLite's online backup API (the source
    may be open elsewhere, in WAL mode) into a temporary file renamed into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    src = sqlite3.connect(source)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()
    os.replace(partial, target)


def _key(material: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    os.replace(partial, path)


def _transport_failure(reasons: Iterable[str | None]) -> str | None:
    for reason in reasons:
        if reason and _TRANSPORT_FAILURE.search(reason):
            return reason
    return None


def _bar(total: int, desc: str, unit: str, progress: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not progress)


# -- mempp-consolidated ------------------------------------------------------------------------
@dataclass(slots=True)
class ConsolidatedStore:
    """The consolidated copy: where it is, and which benchmark items each row stands for."""

    path: Path
    key: str
    model: str
    record_items: dict[int, tuple[str, ...]]
    scopes: dict[str, dict[str, Any]]
    consolidated_now: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        totals: dict[str, Any] = {
            "rows": 0,
            "groups": 0,
            "failures": 0,
            "superseded": 0,
            "archived": 0,
            "merged": 0,
        }
        labels: dict[str, int] = {}
        for counts in self.scopes.values():
            for name in totals:
                totals[name] += int(counts.get(name, 0))
            for label, n in (counts.get("labels") or {}).items():
                labels[label] = labels.get(label, 0) + int(n)
        return {
            "path": str(self.path),
            "key": self.key,
            "model": self.model,
            "threshold": CONSOLIDATION_THRESHOLD,
            "scopes": len(self.scopes),
            "consolidated_now": len(self.consolidated_now),
            "reused": not self.consolidated_now,
            "seconds": round(self.seconds, 3),
            **totals,
            "labels": labels,
        }


def consolidated_store(
    ingested: IngestedStore,
    scopes: Sequence[str],
    llm: LLMClient,
    embedder: Embedder,
    *,
    max_workers: int = 1,
    progress: bool = True,
) -> ConsolidatedStore:
    """The benchmark store copied and consolidated once per scope in ``scopes`` (reused when
    already done for this store, model and threshold)."""
    from mempp.llm.consolidate import consolidate

    started = time.perf_counter()
    key = _key(
        {
            "format": FORMAT,
            "store": ingested.key,
            "model": llm.model,
            "threshold": CONSOLIDATION_THRESHOLD,
        }
    )
    directory = ingested.path.parent / f"consolidated-{key[:16]}"
    path, manifest_path = directory / STORE_FILE, directory / MANIFEST
    manifest = _read_manifest(manifest_path)
    if manifest is None or manifest.get("key") != key or not path.is_file():
        copy_store(ingested.path, path)
        manifest = {"format": FORMAT, "key": key, "model": llm.model, "scopes": {}}
        _write_manifest(manifest_path, manifest)
    done: dict[str, Any] = manifest["scopes"]
    todo = [scope for scope in dict.fromkeys(scopes) if scope not in done]
    bar = _bar(len(todo), "consolidate", "scope", progress and bool(todo))
    from mempp.memory import Memory

    with bar:
        for scope in todo:
            with Memory(path, scope=scope, embedder=embedder) as memory:
                _undo_unfinished(memory)
                report = consolidate(
                    memory, llm, threshold=CONSOLIDATION_THRESHOLD, max_workers=max_workers
                )
                failed = _transport_failure(d.detail for d in report.details if d.label == "failed")
                if failed is not None:
                    # Leave the scope as it was, so a later run tries again.
                    _undo_unfinished(memory)
                    raise AblationError(f"consolidation of scope {scope} failed: {failed}")
            done[scope] = {
                "run_id": report.run_id,
                **report.counts(),
                "merged_rows": {
                    str(d.merged_id): list(d.members)
                    for d in report.details
                    if d.merged_id is not None
                },
            }
            _write_manifest(manifest_path, manifest)
            bar.update(1)
    record_items = dict(ingested.record_items)
    for scope in dict.fromkeys(scopes):
        for merged, members in done[scope]["merged_rows"].items():
            # A merged row carries every item of the rows it replaced, in their order.
            items = [item for m in members for item in ingested.record_items.get(m, ())]
            record_items[int(merged)] = tuple(dict.fromkeys(items))
    return ConsolidatedStore(
        path,
        key,
        llm.model,
        record_items,
        {scope: done[scope] for scope in dict.fromkeys(scopes)},
        todo,
        time.perf_counter() - started,
    )


def _undo_unfinished(memory: Memory) -> None:
    """Undo consolidation runs of the scope not yet recorded as done (an interrupted run, or
    one that hit a transport failure), newest first, so the scope starts from the copy."""
    from mempp.llm.consolidate import history, undo

    for run in reversed(history(memory)):
        if run.kind == "consolidate" and not run.dry_run and run.undone_by is None:
            undo(memory, run.id)


# -- mempp-graph -------------------------------------------------------------------------------
@dataclass(slots=True)
class GraphCopy:
    """The copy holding the entity graph, and what this run's extraction did."""

    path: Path
    key: str
    model: str
    pending: int = 0
    extracted: int = 0
    triples: int = 0
    failures: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "key": self.key,
            "model": self.model,
            "pending": self.pending,
            "extracted_now": self.extracted,
            "triples_now": self.triples,
            "failures": self.failures,
            "failed": dict(list(self.failed.items())[:20]),  # a sample; the count is above
            "reused": self.pending == 0,
            "seconds": round(self.seconds, 3),
        }


def graph_store(
    ingested: IngestedStore,
    scopes: Sequence[str],
    llm: LLMClient,
    *,
    max_workers: int = 1,
    progress: bool = True,
) -> GraphCopy:
    """The benchmark store copied, with triples extracted for every active row of ``scopes``
    not yet extracted (one call per row)."""
    from mempp.llm.graph import extract

    started = time.perf_counter()
    key = _key({"format": FORMAT, "store": ingested.key, "model": llm.model})
    path = ingested.path.parent / f"graph-{key[:16]}" / STORE_FILE
    if not path.is_file():
        copy_store(ingested.path, path)
    copy = GraphCopy(path, key, llm.model)
    store = open_store(path)
    try:
        supports(store, GraphStore, "the entity graph")
        assert isinstance(store, GraphStore)
        pending = {scope: store.pending_extraction(scope, None) for scope in dict.fromkeys(scopes)}
        copy.pending = sum(len(ids) for ids in pending.values())
        with _bar(copy.pending, "graph extraction", "row", progress and copy.pending > 0) as bar:
            for scope, ids in pending.items():
                view = ScopeView(store, scope).as_memory()
                for start in range(0, len(ids), EXTRACT_BATCH):
                    batch = ids[start : start + EXTRACT_BATCH]
                    report = extract(view, llm, ids=batch, max_workers=max_workers)
                    copy.extracted += report.extracted
                    copy.triples += report.triples
                    copy.failures += report.failures
                    copy.failed.update({f"{scope}:{k}": v for k, v in report.failed.items()})
                    failed = _transport_failure(report.failed.values())
                    if failed is not None:
                        # Rows extracted so far are kept; the failed ones stay pending.
                        raise AblationError(f"graph extraction in scope {scope} failed: {failed}")
                    bar.update(len(batch))
    finally:
        store.close()
    copy.seconds = time.perf_counter() - started
    return copy
