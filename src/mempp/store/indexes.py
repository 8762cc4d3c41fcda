"""Optional derived indexes: structures built from the records only when a store opts in.

Some legs need an index that costs every store ingest time and disk (the keyword leg's
trigram index nearly triples a document's ingest), so no migration builds it. A store enables
it (``Memory.enable_index``, ``mempp index enable NAME``): one transaction builds it from the
rows already stored and records the name in ``mempp_meta`` (key ``index:NAME``); from then on
every write keeps it current in the write's own transaction (a trigger or the engine's write
path). ``disable_index`` drops it in one transaction. ``verify`` checks only the enabled
ones; ``dump`` writes the enabled names into the snapshot's header and ``restore`` builds
them again.

A search whose settings need an index the store lacks fails with ``IndexMissing``, one line
naming the command that builds it; one asking for a leg the store cannot run at all (the
query-time context leg on a store that is not a ``ContextStore``) with ``LegUnsupported``:
the leg is never skipped silently. The check runs once a search, at its boundary
(``Memory.legs``, the bench's retriever), before the encoder loads.

This module holds what is the same on every engine: the known indexes (``OPTIONAL_INDEXES``),
the meta key, the check a search makes, and the protocol the engines implement
(``mempp.store.sqlite.indexes``, ``mempp.store.postgres.indexes``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mempp.errors import InvalidInput
from mempp.filters import NO_FILTERS, Filters
from mempp.settings import Settings
from mempp.store.context import ContextStore

#: Called with (rows indexed so far, rows to index) while an index is built.
Progress = Callable[[int, int], None]

META_PREFIX = "index:"


@dataclass(frozen=True, slots=True)
class OptionalIndex:
    """One kind of optional index: its name, what it is for, and which settings need it."""

    name: str
    summary: str
    # The setting that asks for it, for the message of a search that lacks it.
    setting: str
    needed_by: Callable[[Settings], bool]


OPTIONAL_INDEXES: dict[str, OptionalIndex] = {
    "keyword": OptionalIndex(
        "keyword",
        "trigram index of the record text, for the keyword leg (substring matches)",
        "w_kw",
        # The prefix match reads the full-text index every store has.
        lambda settings: settings.w_kw > 0 and settings.kw_match == "substring",
    ),
    "context": OptionalIndex(
        "context",
        "a second vector per record over it and its predecessors in its thread, for the "
        "context leg (by default the sum of their stored vectors: no encoding)",
        "w_ctx",
        # The query-time contexts (ctx_source="query") read only the stored record vectors.
        lambda settings: settings.w_ctx > 0 and settings.ctx_source == "index",
    ),
}


class IndexMissing(InvalidInput):
    """The settings need an optional index this store has not enabled."""


class LegUnsupported(InvalidInput):
    """The settings ask for a leg this store cannot run (no index would give it)."""


def known(name: str) -> OptionalIndex:
    """The index called ``name``, or ``InvalidInput`` listing the known ones."""
    found = OPTIONAL_INDEXES.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidInput(
            f"unknown index {name!r} (known: {', '.join(OPTIONAL_INDEXES)})", field="index"
        )
    return found


def meta_key(name: str) -> str:
    return META_PREFIX + name


def names_from_meta(keys: Collection[str]) -> tuple[str, ...]:
    """The enabled indexes among ``mempp_meta`` keys, sorted (keys of indexes this mempp
    does not know are left out: a newer mempp's)."""
    names = (key.removeprefix(META_PREFIX) for key in keys if key.startswith(META_PREFIX))
    return tuple(sorted(name for name in names if name in OPTIONAL_INDEXES))


def needed(settings: Settings) -> tuple[str, ...]:
    """The optional indexes a search with ``settings`` reads."""
    return tuple(name for name, index in OPTIONAL_INDEXES.items() if index.needed_by(settings))


def require(settings: Settings, store: object) -> None:
    """Raise ``IndexMissing`` when ``settings`` need an index ``store`` lacks, and
    ``LegUnsupported`` when they ask for the query-time context leg of a store that cannot
    read its threads' stored vectors (not a ``ContextStore``). Asks the store only when some
    index is needed, so a search that needs none pays nothing."""
    at_query = settings.w_ctx > 0 and settings.ctx_source == "query"
    if at_query and not isinstance(store, ContextStore):
        raise LegUnsupported(
            f"ctx_source='query' needs a store that reads its threads' stored vectors "
            f"(mempp.store.context.ContextStore: sum_sources, context_eligible); "
            f"{type(store).__name__} is not one; set w_ctx=0",
            field="ctx_source",
        )
    wanted = needed(settings)
    if not wanted:
        return
    listed = getattr(store, "indexes", None)  # a store with no optional index lacks them all
    enabled = set(listed()) if callable(listed) else set()
    for name in wanted:
        if name not in enabled:
            index = OPTIONAL_INDEXES[name]
            raise IndexMissing(
                f"{index.setting} > 0 needs the {name} index, which this store has not enabled; "
                f"run `mempp index enable {name}` (or Memory.enable_index({name!r}))",
                field=index.setting,
            )


@runtime_checkable
class IndexedStore(Protocol):
    """What an engine gives for optional indexes (mirrored by ``Memory``), and the legs that
    read them."""

    location: str

    def indexes(self) -> tuple[str, ...]:
        """The optional indexes this store has enabled, sorted."""
        ...

    def enable_index(self, name: str, *, progress: Progress | None = None) -> bool:
        """Build index ``name`` from every stored row and keep it on every write from now on,
        in ONE transaction (writers wait; on any error nothing changes). False when it was
        already enabled (nothing done). ``InvalidInput`` for an unknown name."""
        ...

    def disable_index(self, name: str) -> bool:
        """Drop index ``name`` in one transaction; False when it was not enabled."""
        ...

    def keyword(
        self,
        scope: str,
        terms: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
        max_tokens: int | None = None,
    ) -> list[int]:
        """The keyword leg, on the ``keyword`` index: in-scope rows whose text holds any of
        ``terms`` (``keyword_terms``) as a substring, ASCII case folded, ranked by
        ``mempp.search.keyword.rank_matches`` (rows over ``max_tokens`` full-text tokens
        not ranked)."""
        ...

    def keyword_prefix(
        self,
        scope: str,
        words: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
        max_tokens: int | None = None,
    ) -> list[int]:
        """The keyword leg with ``kw_match="prefix"``, on the full-text index every store
        has: in-scope rows holding a token that begins with a word's token (``prefix_terms``),
        ranked by ``mempp.search.keyword.rank_matches`` (rows over ``max_tokens`` not
        ranked)."""
        ...
