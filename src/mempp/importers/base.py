"""What an importer yields, what an import reports, and the one loop that writes an import.

An importer turns a path (an export, a mailbox, a folder) into a stream of items: each a
:class:`~mempp.records.Document` to store, or an :class:`ItemError` (this item could not be
read, and why), a :class:`Skipped` (deliberately not stored: a join message, an unsupported
file) or a :class:`Notice` (read, but something about it is worth telling). A problem with the
path as a whole (it does not exist, it is not an export, it would unpack past the cap) is an
:class:`~mempp.errors.InvalidInput` raised before anything is yielded, so nothing is written.

:func:`run_import` writes the documents in batches (one transaction each, as ``add_many``)
and returns an :class:`ImportReport`; with ``dry_run`` it parses and reports but writes nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mempp.records import AddResult, Document

if TYPE_CHECKING:
    from mempp.memory import Memory

DEFAULT_BATCH = 64


@dataclass(frozen=True, slots=True)
class ItemError:
    """An item that could not be read: ``location`` is ``file:item`` (a line, the N-th
    message), ``reason`` says why in one line."""

    location: str
    reason: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """An item deliberately not stored. ``reason`` is the short key it is counted under
    (``channel_join``, ``not a document file``); ``detail``, when given, is told to the user
    item by item (a skipped file, with what to do instead)."""

    location: str
    reason: str
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    """Something worth telling about an item that was read anyway (a charset repaired, a
    user id not in ``users.json``, a date taken from elsewhere)."""

    location: str
    message: str


Item = Document | ItemError | Skipped | Notice


@runtime_checkable
class Importer(Protocol):
    """One source of documents. ``name`` is what ``mempp import NAME`` calls it;
    ``description`` is one line for ``--help``. An importer whose document sources are
    stable identities (a Slack message's URI, a Message-ID) sets ``stable_sources = True``
    (optional, default false): a re-import then skips every document whose source a row of
    the scope already has, even if its text changed (an edit between two exports). It may
    instead be a predicate on a document, for an importer only some of whose sources are
    (the folder importer's document versions, ``PATH#sha256=...``)."""

    name: str
    description: str

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        """Does ``path`` look like this importer's input? Cheap (names and a few bytes, never
        a full parse): ``mempp ingest`` uses it to tell which command a skipped path needs."""
        ...

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        """The items of ``path``, in the source's order. Raises ``InvalidInput`` (before the
        first item) when ``path`` as a whole cannot be read."""
        ...


# Which documents' sources are identities: all (True), none (False), or those a predicate picks.
SourceRule = bool | Callable[[Document], bool]


def source_rule(importer: Importer) -> SourceRule:
    """An importer's ``stable_sources``, a bool or a predicate (absent: false)."""
    rule = getattr(importer, "stable_sources", False)
    return rule if callable(rule) else bool(rule)


@dataclass(slots=True)
class ImportReport:
    """What an import did (or, with ``dry_run``, would do)."""

    source: str
    dry_run: bool = False
    read: int = 0  # documents parsed
    ids: list[int] = field(default_factory=list)
    would_add: int = 0  # dry run: documents that are neither empty nor a stored duplicate
    skipped: Counter[str] = field(default_factory=Counter)
    told: list[Skipped] = field(default_factory=list)  # skipped items with a detail
    failures: list[ItemError] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    undated: int = 0

    @property
    def added(self) -> int:
        return self.would_add if self.dry_run else len(self.ids)

    @property
    def failed(self) -> int:
        return len(self.failures)

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "dry_run": self.dry_run,
            "read": self.read,
            "added": self.added,
            "skipped": sum(self.skipped.values()),
            "skipped_by_reason": dict(self.skipped),
            "skipped_items": [
                {"location": s.location, "reason": s.reason, "detail": s.detail} for s in self.told
            ],
            "failed": self.failed,
            "failures": [{"location": f.location, "reason": f.reason} for f in self.failures],
            "warnings": [{"location": n.location, "message": n.message} for n in self.notices],
            "undated": self.undated,
            "ids": list(self.ids),
        }

    def summary(self) -> str:
        """One line: added, skipped by reason, failed, warnings; and a hint on undated ones."""
        verb = "would add" if self.dry_run else "added"
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        line = (
            f"{verb} {self.added}, skipped {sum(self.skipped.values())}"
            + (f" ({reasons})" if reasons else "")
            + f", failed {self.failed}"
        )
        if self.notices:
            line += f", {len(self.notices)} warning" + ("s" if len(self.notices) != 1 else "")
        if self.undated:
            line += (
                f"; {self.undated} undated: searches with --as-of will not see them "
                "(give them a date in front matter, a `date` field or a YYYY-MM-DD file name)"
            )
        return line


def run_import(
    memory: Memory | None,
    importer: Importer,
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    on_item: Callable[[Item], None] | None = None,
    progress: Callable[[int], None] | None = None,
    shown_as: str | None = None,
) -> ImportReport:
    """Read ``path`` (or several paths) with ``importer`` and store its documents in
    ``memory``, ``batch_size`` to a transaction.

    ``dry_run`` writes nothing; ``memory`` may then be ``None`` (no store to compare with), or
    a memory whose stored duplicates are counted as such. ``on_item`` sees every item that is
    not a document (to print failures as they come); ``progress(n)`` is called with the
    number of items consumed since its last call. ``shown_as`` names a single ``path`` in
    locations, errors and sources (an upload's own name for its temporary file). Raises
    ``InvalidInput``, before anything is written, when a path cannot be read at all.
    """
    items = read_paths(importer, path, shown_as=shown_as)
    return store_read(
        memory,
        importer,
        items,
        dry_run=dry_run,
        batch_size=batch_size,
        on_item=on_item,
        progress=progress,
    )


def store_read(
    memory: Memory | None,
    importer: Importer,
    items: Iterable[Item],
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    on_item: Callable[[Item], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """:func:`store_items` of what ``importer`` read (:func:`read_paths`): under its name and
    with its ``stable_sources`` rule, as every door that imports stores it."""
    return store_items(
        memory,
        items,
        source=importer.name,
        by_source=source_rule(importer),
        dry_run=dry_run,
        batch_size=batch_size,
        on_item=on_item,
        progress=progress,
    )


def read_paths(
    importer: Importer,
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    shown_as: str | None = None,
) -> Iterator[Item]:
    """The items of every path in turn. Each path's reader is started here, so a path that
    cannot be read at all raises ``InvalidInput`` now, before any item is stored."""
    from mempp.errors import InvalidInput

    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if shown_as is not None and len(paths) != 1:
        raise InvalidInput("shown_as names one path; more were given")
    streams: list[Iterator[Item]] = []
    for one in paths:
        try:
            stream = _flattened(iter(importer.read(one)), importer.name)
            first = next(stream, None)
        except InvalidInput as exc:
            if shown_as is None:
                raise
            raise InvalidInput(str(exc).replace(os.fspath(one), shown_as)) from None
        streams.append(itertools.chain([first], stream) if first is not None else iter(()))
    items = itertools.chain.from_iterable(streams)
    if shown_as is None:
        return items
    return (_renamed(item, os.fspath(paths[0]), shown_as) for item in items)


def _flattened(items: Iterator[Item], source: str) -> Iterator[Item]:
    """The importer's items, each read with labels flattened rather than refused (a mail's
    folded Subject, a channel name with a tab: the source's, not the user's to fix); a
    document whose labels were flattened is followed by a :class:`Notice` saying which."""
    from mempp.validate import flattening_labels

    while True:
        # Set around each step only: the generator runs in the caller's context, and the
        # caller (store_items, a web upload) must still refuse what it validates itself.
        with flattening_labels() as fields:
            item = next(items, None)
        if item is None:
            return
        yield item
        if fields:
            where = item.source if isinstance(item, Document) and item.source else source
            named = ", ".join(dict.fromkeys(fields))
            yield Notice(where, f"{named}: control characters replaced by spaces")


def _renamed(item: Item, prefix: str, name: str) -> Item:
    """``item`` with a location or source that starts with ``prefix`` starting with ``name``."""
    if isinstance(item, Document):
        changes = {
            field: name + value[len(prefix) :]
            for field in ("source", "thread")
            if (value := getattr(item, field)) is not None and value.startswith(prefix)
        }
        return dataclasses.replace(item, **changes) if changes else item
    if item.location.startswith(prefix):
        return dataclasses.replace(item, location=name + item.location[len(prefix) :])
    return item


def store_items(
    memory: Memory | None,
    items: Iterable[Item],
    *,
    source: str,
    by_source: SourceRule = False,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    on_item: Callable[[Item], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Store the documents among ``items`` and count the rest: :func:`run_import` once the
    paths are open (the CLI opens them before it opens, maybe creates, the store).
    ``by_source`` skips a document whose source is stored already, or came earlier in this
    import, as ``already imported`` (every document's, or, a predicate, those it picks)."""
    from mempp.errors import InvalidInput

    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InvalidInput(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if memory is None and not dry_run:
        raise InvalidInput("a memory to write to is needed unless dry_run is set")
    report = ImportReport(source=source, dry_run=dry_run)
    batch: list[Document] = []
    seen: set[str] | None = set() if by_source else None
    stable: Callable[[Document], bool] = by_source if callable(by_source) else _any_document
    consumed = 0

    def flush() -> None:
        nonlocal consumed
        if batch:
            fresh = batch if seen is None else _new_sources(memory, batch, seen, stable, report)
            if fresh:
                _write(memory, fresh, report, on_item)
            batch.clear()
        if progress is not None and consumed:
            progress(consumed)
        consumed = 0

    for item in items:
        consumed += 1
        if isinstance(item, Document):
            report.read += 1
            if item.date is None:
                report.undated += 1
            batch.append(item)
            if len(batch) >= batch_size:
                flush()
            continue
        if isinstance(item, ItemError):
            report.failures.append(item)
        elif isinstance(item, Skipped):
            report.skipped[item.reason] += 1
            if item.detail is not None:
                report.told.append(item)
        elif isinstance(item, Notice):
            consumed -= 1  # a notice accompanies an item; it is not one
            report.notices.append(item)
        if on_item is not None:
            on_item(item)
    flush()
    return report


def _any_document(doc: Document) -> bool:
    return True


def _new_sources(
    memory: Memory | None,
    batch: list[Document],
    seen: set[str],
    stable: Callable[[Document], bool],
    report: ImportReport,
) -> list[Document]:
    """The documents of ``batch`` whose source is neither stored nor seen earlier (of those
    whose sources ``stable`` says are identities; the others all pass)."""
    checked = [doc for doc in batch if doc.source is not None and stable(doc)]
    sources = {doc.source for doc in checked if doc.source is not None}
    if memory is not None and sources - seen:
        seen |= memory.store.stored_sources(memory.scope, sources - seen)
    fresh = []
    for doc in batch:
        if doc.source is None or not stable(doc):
            fresh.append(doc)
            continue
        if doc.source in seen:
            report.skipped["already imported"] += 1
            continue
        if doc.source is not None:
            seen.add(doc.source)
        fresh.append(doc)
    return fresh


def _add_all(
    memory: Memory,
    batch: list[Document],
    report: ImportReport,
    on_item: Callable[[Item], None] | None,
) -> list[AddResult]:
    """``add_many`` of the batch; when an embeddings endpoint refuses one document for good,
    the others are stored one by one and the refused one is reported, so one long document
    never aborts an import."""
    from mempp.encoders.openai import EmbeddingRejected

    try:
        return memory.add_many(batch, batch_size=len(batch))
    except EmbeddingRejected:
        pass
    results = []
    for position, doc in enumerate(batch):
        try:
            results.extend(memory.add_many([doc]))
        except EmbeddingRejected as exc:
            where = doc.source or f"{report.source}: item {position + 1} of its batch"
            failure = ItemError(location=where, reason=str(exc))
            report.failures.append(failure)
            if on_item is not None:
                on_item(failure)
    return results


def _write(
    memory: Memory | None,
    batch: list[Document],
    report: ImportReport,
    on_item: Callable[[Item], None] | None,
) -> None:
    if not report.dry_run:
        assert memory is not None
        for result in _add_all(memory, batch, report, on_item):
            if result.id is not None:
                report.ids.append(result.id)
            else:
                report.skipped[result.skipped or "skipped"] += 1
        return
    fresh = [doc for doc in batch if not doc.is_empty]
    report.skipped["empty"] += len(batch) - len(fresh)
    if memory is not None and fresh:
        repeats = sum(d is not None for d in memory.store.find_duplicates(memory.scope, fresh))
        report.skipped["duplicate"] += repeats
        report.would_add += len(fresh) - repeats
    else:
        report.would_add += len(fresh)
    report.skipped = +report.skipped  # drop zero counts
