"""A supersession layer built from OrgMemBench's own version chains, and what it does to
evidence recall (``mempp bench orgmembench --supersession-layer``).

Issue 30 shows corrections in evidence headers (``superseded by record N (DATE)``, only when
the question's moment can see them). Whether that changes what reaches the answer window is
measured by running each mempp system twice, on the benchmark store and on a copy of it with
the layer applied, and pairing the two per question.

The version chains come from the benchmark data, never from a model:

* ``source_of_truth/events.jsonl``: an event with ``corrects_event_id`` is the next version of
  the event it corrects;
* the questions whose ground truth states an earlier and a later version (``prior_value`` /
  ``current_value``, ``original_value`` / ``corrected_value``, or non-empty ``replacements``):
  the events of their gold artifacts are versions of one thing.

Events joined by such pairs form one chain, ordered by ``occurred_at`` (then id); each version
is superseded by the next one: every artifact of the earlier event by the later event's
primary artifact (its header's ``role: primary``, else its first artifact in index order).
The links are written with :meth:`mempp.Memory.supersede`, logged as any manual correction.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mempp.bench.aggregate import paired_delta
from mempp.bench.cache import IngestedStore
from mempp.bench.datasets import Benchmark, JsonlReport, read_jsonl
from mempp.bench.orgmembench import TIER
from mempp.bench.systems import System

SUFFIX = "+supersession"
# Ground-truth keys that say a question is about an earlier and a later version of one fact.
_VERSION_KEYS = ("prior_value", "original_value")
_ROLE = re.compile(r"^\s*role:\s*(\S+)\s*$", re.MULTILINE)
_HEADER = re.compile(r"^\s*<!--.*?-->", re.DOTALL)
COMPARED = ("window", "window_full", "gold_visible", "recall@10")


@dataclass(frozen=True, slots=True)
class Link:
    """Record ``old`` superseded by record ``new`` (artifacts ``old_item``, ``new_item``)."""

    old: int
    new: int
    old_item: str
    new_item: str


@dataclass(slots=True)
class Layer:
    """The chains found, the links written, and why any pair was not linked."""

    chains: list[list[str]]
    links: list[Link]
    sources: dict[str, int]
    skipped: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "chains": self.chains,
            "links": len(self.links),
            "superseded_records": len({link.old for link in self.links}),
            "pairs_by_source": self.sources,
            "skipped": self.skipped,
        }


def version_pairs(benchmark: Benchmark) -> tuple[set[tuple[str, str]], dict[str, int]]:
    """Unordered pairs of events that are versions of one another, and how many came from
    each source (a pair named by both sources is counted in both)."""
    events = _events(benchmark)
    event_of = {item.id: item.group for item in benchmark.items if item.group}
    corrections = {
        frozenset((str(row["id"]), str(row["corrects_event_id"])))
        for row in events.values()
        if row.get("corrects_event_id") and str(row["corrects_event_id"]) in events
    }
    declared: set[frozenset[str]] = set()
    for question in benchmark.questions:
        truth = question.reference if isinstance(question.reference, Mapping) else {}
        if not (any(truth.get(k) for k in _VERSION_KEYS) or truth.get("replacements")):
            continue
        groups = sorted({g for item in question.gold if (g := event_of.get(item)) in events})
        declared.update(frozenset((a, b)) for i, a in enumerate(groups) for b in groups[i + 1 :])
    pairs = {(min(pair), max(pair)) for pair in corrections | declared}
    sources = {"corrects_event_id": len(corrections), "ground_truth_versions": len(declared)}
    return pairs, sources


def chains(benchmark: Benchmark, pairs: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Connected events, each chain ordered by occurred_at then id (oldest version first)."""
    occurred = {
        key: str(row.get("occurred_at") or "")[:10] for key, row in _events(benchmark).items()
    }
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in pairs:
        parent[root(a)] = root(b)
    members: dict[str, list[str]] = {}
    for node in parent:
        members.setdefault(root(node), []).append(node)
    ordered = [sorted(group, key=lambda e: (occurred.get(e, ""), e)) for group in members.values()]
    return sorted(ordered, key=lambda chain: (occurred.get(chain[0], ""), chain[0]))


def build(benchmark: Benchmark, ingested: IngestedStore) -> Layer:
    """The links of the layer: record ids of the ingested store, oldest version first."""
    pairs, sources = version_pairs(benchmark)
    found = chains(benchmark, pairs)
    artifacts: dict[str, list[str]] = {}
    for item in benchmark.items:
        if item.group:
            artifacts.setdefault(item.group, []).append(item.id)
    record = {item.id: ingested.item_record.get((item.scope, item.id)) for item in benchmark.items}
    skipped: Counter[str] = Counter()
    links: list[Link] = []
    for chain in found:
        for older, newer in itertools.pairwise(chain):
            successor = _primary(benchmark, artifacts.get(newer, []))
            new = None if successor is None else record.get(successor)
            if successor is None or new is None:
                skipped["successor stored nothing"] += 1
                continue
            for item in artifacts.get(older, []):
                old = record.get(item)
                if old is None or old == new:
                    skipped["artifact stored nothing" if old is None else "same record"] += 1
                    continue
                links.append(Link(old, new, item, successor))
    return Layer(found, links, sources, dict(skipped))


def layered_copy(benchmark: Benchmark, ingested: IngestedStore, folder: Path) -> tuple[Path, Layer]:
    """A copy of the benchmark store in ``folder`` with the layer written into it."""
    from mempp import Memory
    from mempp.bench.ablations import copy_store

    layer = build(benchmark, ingested)
    target = folder / "supersession.db"
    copy_store(ingested.path, target)
    scopes = {item.id: item.scope for item in benchmark.items}
    with Memory(target) as base:
        for link in layer.links:
            memory = Memory(base.store, scope=scopes[link.old_item])
            memory.supersede(
                link.old,
                by=link.new,
                reason=f"OrgMemBench version chain: {link.old_item} -> {link.new_item}",
                actor="mempp bench",
            )
    return target, layer


def twins(systems: Sequence[System]) -> list[System]:
    """Each mempp system that reads the benchmark store, again over the layered copy."""
    return [
        System(
            s.name + SUFFIX,
            s.kind,
            s.description + "; over the supersession layer (OrgMemBench version chains)",
            s.settings,
            packing=s.packing,
            ablation="supersession",
        )
        for s in systems
        if s.kind == "mempp" and s.ablation is None
    ]


def compare(
    by_system: Mapping[str, Sequence[Mapping[str, Any]]],
    categories: Sequence[str],
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Per system with a twin: layered minus plain, per metric, overall and per category,
    with paired bootstrap intervals over questions."""
    out: dict[str, Any] = {}
    for name, layered in by_system.items():
        if not name.endswith(SUFFIX) or name[: -len(SUFFIX)] not in by_system:
            continue
        plain = by_system[name[: -len(SUFFIX)]]
        entry: dict[str, Any] = {"overall": {}, "by_category": {c: {} for c in categories}}
        for metric in COMPARED:
            if all(r.get(metric) is None for r in plain):
                continue
            entry["overall"][metric] = paired_delta(
                [r.get(metric) for r in layered],
                [r.get(metric) for r in plain],
                resamples=resamples,
                seed=seed,
            )
            for category in categories:
                entry["by_category"][category][metric] = paired_delta(
                    [r.get(metric) for r in layered if r["category"] == category],
                    [r.get(metric) for r in plain if r["category"] == category],
                    resamples=resamples,
                    seed=seed,
                )
        out[name[: -len(SUFFIX)]] = entry
    return out


def _events(benchmark: Benchmark) -> dict[str, dict[str, Any]]:
    """The event rows by id (a malformed line was already reported by the loader)."""
    path = benchmark.root / TIER / "source_of_truth" / "events.jsonl"
    if not path.is_file():
        return {}
    rows = read_jsonl(path, JsonlReport())
    return {str(row["id"]): row for _, row in rows if row.get("id")}


def _primary(benchmark: Benchmark, items: Sequence[str]) -> str | None:
    """The artifact whose header says ``role: primary``, else the first one."""
    index = benchmark.root / TIER / "corpus_index.jsonl"
    wanted = set(items)
    paths = {
        str(row["slot_id"]): str(row["path"])
        for _, row in read_jsonl(index, JsonlReport())
        if row.get("slot_id") in wanted and isinstance(row.get("path"), str)
    }
    for item in items:
        try:
            head = _HEADER.match((benchmark.root / TIER / paths[item]).read_text(encoding="utf-8"))
        except (KeyError, OSError):
            continue
        role = _ROLE.search(head.group(0)) if head else None
        if role and role.group(1) == "primary":
            return item
    return items[0] if items else None
