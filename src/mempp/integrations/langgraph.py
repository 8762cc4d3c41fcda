"""LangGraph: ``MemppStore``, a ``BaseStore`` kept in a mempp memory, versioned, never erased.

    from mempp.integrations.langgraph import MemppStore

    store = MemppStore(memory=memory)                      # a Memory or a Client (admin key)
    store.put(("users", "ana"), "prefs", {"theme": "dark"})
    store.search(("users",), query="theme", filter={"theme": "dark"}, limit=5)
    past = MemppStore(memory=memory, as_of="2024-03-31")   # the store as it stood then

What maps where:

- the store: the memory's scope (the ``Memory``'s, or the ``Client``'s key's);
- a namespace ``("users", "ana")``: tags, one per prefix (``()``, ``("users",)``, ...) and
  one per key, hashed so that no tag normalisation can merge two labels; the namespace, the
  key and the value exactly in the record's metadata;
- ``put``: a new record (its text: the value's indexed fields, or its JSON) that supersedes
  the key's previous version (kept, and in the history);
- ``get``: the key's newest version within the view;
- ``search`` with a query: ``Memory.search`` (lexical, tag and vector legs fused) within the
  namespace's tag, then the value filter; without one, the namespace's items in the order
  first put, as LangGraph's ``InMemoryStore`` lists them;
- ``delete``: every version of the key archived: out of every search, never erased;
- ``list_namespaces``: the namespaces with a current item (one whose items are all deleted
  is not listed).

``as_of`` (items put by then) and ``known_at`` (items the memory had received by then) make
the whole store a view of the past: ``get`` and ``search`` answer with the version current at
that moment, and writes are refused. A deleted item is archived, so it is gone from past views
too. An item put with ``index=False`` is left out of query searches (it is stored and read by
``get`` and by searches without a query). Batches follow ``InMemoryStore``: the reads of a batch
see the store as it was before it, then its puts apply (the last put of a key wins).

What it cannot honour is refused, never ignored: a ``ttl``, an ``AsyncClient`` (``abatch``
runs the sync calls in a worker thread: pass a ``Client``), a value that is not JSON, a filter
operator other than ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``. Searches without a
query and ``list_namespaces`` read the scope's records (a scan: sized for agent memories, not
for millions of rows); the rest goes through the search indexes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from mempp.dates import parse_as_of
from mempp.errors import InvalidInput
from mempp.integrations import backend
from mempp.records import Record

ROOT_TAG = "lg-store"
UNINDEXED_TAG = "lg-unindexed"
META = "langgraph"
LINKS = 64  # most supersession steps followed from one version to the key's newest
MAX_K = 1000  # the HTTP API's largest k
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
DateLike = str | date | datetime | None


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()[:32]


def prefix_tag(prefix: Sequence[str]) -> str:
    return ROOT_TAG if not prefix else "lg-" + _digest(list(prefix))


def key_tag(namespace: Sequence[str], key: str) -> str:
    return "lgk-" + _digest([list(namespace), key])


@dataclass(frozen=True, slots=True)
class _Version:
    record: Record
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    indexed: bool

    @classmethod
    def of(cls, record: Record) -> _Version | None:
        meta = (record.metadata or {}).get(META)
        if not isinstance(meta, dict):
            return None
        return cls(
            record,
            tuple(meta["namespace"]),
            meta["key"],
            meta["value"],
            datetime.fromisoformat(meta["created_at"]),
            UNINDEXED_TAG not in record.tags,
        )

    def item(self, score: float | None = None, *, search: bool = False) -> Item:
        updated = datetime.fromisoformat(self.record.date or self.record.ingested_at)
        fields = {
            "value": self.value,
            "key": self.key,
            "namespace": self.namespace,
            "created_at": self.created_at,
            "updated_at": updated,
        }
        return SearchItem(**fields, score=score) if search else Item(**fields)


class MemppStore(BaseStore):
    """A LangGraph ``BaseStore`` over a mempp ``Memory`` or ``Client`` (see the module)."""

    supports_ttl = False

    def __init__(self, *, memory: Any, as_of: DateLike = None, known_at: DateLike = None) -> None:
        self.memory = backend.check(memory)
        if backend.is_async(self.memory):
            raise InvalidInput(
                "the LangGraph store runs the sync calls (abatch in a worker thread); pass a "
                "mempp.Client, not an AsyncClient",
                field="memory",
            )
        self._as_of = _bound(as_of, "as_of")
        self._known_at = _bound(known_at, "known_at")
        self.as_of, self.known_at = as_of, known_at

    # -- BaseStore ------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                self._check_put(op)
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise InvalidInput(
                    f"is not a LangGraph store operation: {type(op).__name__}", field="op"
                )
        for step, op in enumerate(puts.values()):
            if op.value is None:
                self._delete(op.namespace, op.key)
            else:
                self._put(op, step)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # -- reads ----------------------------------------------------------------------------
    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return backend.call(self.memory, name, *args, **kwargs)

    def _bounds(self) -> dict[str, Any]:
        return {"as_of": self.as_of, "known_at": self.known_at}

    def _within(self, record: Record) -> bool:
        if self._as_of is not None and (
            record.date is None or parse_as_of(record.date) > self._as_of
        ):
            return False
        return self._known_at is None or parse_as_of(record.ingested_at) <= self._known_at

    def _newest(self, record: Record) -> Record | None:
        """The newest version within the view, following supersessions from ``record``;
        None when the key was deleted (its versions are archived)."""
        for _ in range(LINKS):
            if record.state != "active":
                return None
            if record.superseded_by is None:
                return record
            successor = self._call("get", record.superseded_by)
            if not self._within(successor):
                return record
            record = successor
        raise InvalidInput(f"record {record.id}: more than {LINKS} newer versions to follow")

    def _current(self, namespace: tuple[str, ...], key: str) -> _Version | None:
        tag = key_tag(namespace, key)
        hits = self._call("search", _probe(key), tags=[tag], k=MAX_K, **self._bounds())
        versions = [h.record for h in hits if h.record.state == "active"]
        if not versions:
            return None
        newest = self._newest(max(versions, key=lambda r: r.id))
        return None if newest is None else _Version.of(newest)

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        found = self._current(tuple(namespace), key)
        return None if found is None else found.item()

    def _scan(self) -> list[_Version]:
        """The current version of every item in the view: namespace by namespace, in the
        order each was first written to (deleted items count, as in LangGraph's in-memory
        store), and within one, keys in the order first put (a key put again after its
        deletion goes last)."""
        newest: dict[tuple[tuple[str, ...], str], _Version] = {}
        first: dict[tuple[str, ...], int] = {}
        for record in self._call("records"):
            if not self._within(record):
                continue
            version = _Version.of(record)
            if version is None:
                continue
            first.setdefault(version.namespace, record.id)
            if record.state == "active":  # ids rise: the newest version comes last
                newest[(version.namespace, version.key)] = version
        return sorted(
            newest.values(), key=lambda v: (first[v.namespace], v.created_at, v.record.id)
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        _check_filter(op.filter)
        prefix = tuple(op.namespace_prefix)
        wanted = op.offset + op.limit
        if not op.query:
            found = [
                v.item(search=True)
                for v in self._scan()
                if v.namespace[: len(prefix)] == prefix and _matches(v.value, op.filter)
            ]
            return found[op.offset : wanted]  # type: ignore[return-value]
        k = min(MAX_K, max(50, 4 * wanted))
        while True:
            hits = self._call("search", op.query, tags=[prefix_tag(prefix)], k=k, **self._bounds())
            kept: list[SearchItem] = []
            seen: set[tuple[tuple[str, ...], str]] = set()
            for hit in hits:
                version = _Version.of(hit.record)
                if version is None or not version.indexed or not _matches(version.value, op.filter):
                    continue
                if (version.namespace, version.key) in seen or self._newest(
                    hit.record
                ) != hit.record:
                    continue  # an older version: the key's current one is ranked on its own
                seen.add((version.namespace, version.key))
                kept.append(version.item(hit.score, search=True))  # type: ignore[arg-type]
            if len(kept) >= wanted or len(hits) < k or k >= MAX_K:
                return kept[op.offset : wanted]
            k = min(MAX_K, 4 * k)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        names = {v.namespace for v in self._scan()}
        for condition in op.match_conditions or ():
            names = {n for n in names if _namespace_matches(condition, n)}
        if op.max_depth is not None:
            names = {n[: op.max_depth] for n in names}
        return sorted(names)[op.offset : op.offset + op.limit]

    # -- writes ---------------------------------------------------------------------------
    def _check_put(self, op: PutOp) -> None:
        if self._as_of is not None or self._known_at is not None:
            raise InvalidInput(
                "this store is a view of the past (as_of/known_at): it cannot be written",
                field="op",
            )
        if op.ttl is not None:
            raise InvalidInput("mempp keeps every version: items do not expire", field="ttl")
        if not op.namespace or not all(isinstance(p, str) and p for p in op.namespace):
            raise InvalidInput(
                f"must be a tuple of non-empty strings, got {op.namespace!r}", field="namespace"
            )
        if op.value is not None and not isinstance(op.value, Mapping):
            raise InvalidInput(f"must be a dict, got {type(op.value).__name__}", field="value")

    def _put(self, op: PutOp, step: int) -> None:
        namespace = tuple(op.namespace)
        previous = self._current(namespace, op.key)
        now = datetime.now(UTC) + timedelta(microseconds=step)  # distinct within one batch
        created = previous.created_at if previous is not None else now
        tags = [prefix_tag(namespace[:depth]) for depth in range(len(namespace) + 1)]
        tags.append(key_tag(namespace, op.key))
        if op.index is False:
            tags.append(UNINDEXED_TAG)
        meta = {
            META: {
                "namespace": list(namespace),
                "key": op.key,
                "value": dict(op.value),  # type: ignore[arg-type]
                "created_at": created.isoformat(),
            }
        }
        text = _text(op.value, op.index)  # type: ignore[arg-type]
        for bump in range(3):  # the same text on the same microsecond is a duplicate: move on
            moment = now + timedelta(microseconds=bump * 1000)
            try:
                added = self._call("add", text, date=moment, tags=tags, metadata=meta)
            except InvalidInput as exc:
                if exc.field and exc.field.startswith("metadata"):
                    raise InvalidInput(
                        exc.problem, field="value" + exc.field[len("metadata.langgraph.value") :]
                    ) from None
                raise
            if added.id is not None:
                break
        else:
            raise InvalidInput(
                "could not be stored: the memory answered 'duplicate'", field="value"
            )
        if previous is not None:
            self._call(
                "supersede", previous.record.id, by=added.id, reason=f"langgraph put {op.key!r}"
            )

    def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        tag = key_tag(tuple(namespace), key)
        for _ in range(LINKS):
            hits = self._call("search", _probe(key), tags=[tag], k=MAX_K)
            if not hits:
                return
            for hit in hits:
                self._call("archive", hit.id, reason=f"langgraph delete {key!r}")
        raise InvalidInput(f"{key!r}: versions kept appearing while deleting", field="key")


def _text(value: Mapping[str, Any], index: Any) -> str:
    """What a version is searched by: the fields ``index`` names, else the value's JSON."""
    if index is None or index is False:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    if isinstance(index, str) or not all(isinstance(p, str) for p in index):
        raise InvalidInput("must be a list of field paths, None or False", field="index")
    texts = [text for path in index for text in get_text_at_path(value, tokenize_path(path))]
    if not any(t.strip() for t in texts):
        raise InvalidInput(
            f"none of the fields {list(index)} holds text in this value", field="index"
        )
    return "\n".join(texts)


def _bound(value: DateLike, name: str) -> int | None:
    try:
        return parse_as_of(value)
    except InvalidInput as exc:
        raise exc.within(name) from None


def _check_filter(given: dict[str, Any] | None, path: str = "filter") -> None:
    for name, wanted in (given or {}).items():
        if isinstance(wanted, dict):
            for op in wanted:
                if op.startswith("$") and op not in OPERATORS:
                    raise InvalidInput(
                        f"unknown operator {op!r} (mempp applies {', '.join(OPERATORS)})",
                        field=f"{path}.{name}",
                    )
            _check_filter(
                {k: v for k, v in wanted.items() if not k.startswith("$")}, f"{path}.{name}"
            )


def _matches(value: Any, given: dict[str, Any] | None) -> bool:
    return all(
        _equal(value.get(k) if isinstance(value, dict) else None, v)
        for k, v in (given or {}).items()
    )


def _equal(actual: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: operators, nested objects, lists element by element."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_compare(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, dict) and all(_equal(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_equal(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _compare(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    try:
        left, right = float(actual), float(operand)
    except (TypeError, ValueError):
        return False  # not a number: it cannot be ordered, so it does not match
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[
        op
    ]


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInput(f"unknown match type {condition.match_type!r}", field="match_conditions")
    return all(p == "*" or n == p for n, p in pairs)


def _probe(key: str) -> str:
    """A query to find a key's versions by (the tag filter does the finding; any text will
    do, and a key may be blank)."""
    return key if key.strip() else "item"
