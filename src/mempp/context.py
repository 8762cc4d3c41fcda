"""The context index's write side: each record's context (its predecessors in its thread,
oldest first, then the record) made into a second vector, on write, when the index is
switched on over an existing store, after an erasure, and after a re-encoding.

Which predecessors, and what of them, is the store's rule (``mempp.store.context``,
``ContextRule``); this module reads them and makes the vectors: the text rule composes the
text and encodes it, the sum rule adds the stored vectors (no encoding). Every path is the
same call, ``fill``: the rows with no context yet, in id order, a page at a time, so an
interrupted fill resumes where it stopped and nothing is made twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from mempp.encoders import Embedder
from mempp.store.context import (
    ContextRule,
    ContextStore,
    context_store,
    context_text,
    make_vectors,
)

__all__ = ["context_store", "context_text", "enable", "fill"]

_PAGE = 256


def fill(store: ContextStore, embedder: Embedder, ids: Sequence[int] | None = None) -> int:
    """Encode and store the contexts of ``ids`` (default: every unerased record lacking one);
    returns how many rows were written (those of records with no predecessor hold no
    vector)."""
    written = 0
    encoder = (embedder.name, embedder.dim)
    if ids is not None:
        for start in range(0, len(ids), _PAGE):
            written += _encode(store, embedder, encoder, list(ids[start : start + _PAGE]))
        return written
    after = 0
    while page := store.context_pending(after, _PAGE):
        written += _encode(store, embedder, encoder, page)
        after = page[-1]
    return written


def _encode(
    store: ContextStore, embedder: Embedder, encoder: tuple[str, int], ids: list[int]
) -> int:
    rule = store.context_rule()
    sources = store.context_sources(ids)
    if rule is None or not sources:
        return 0
    vectors = make_vectors(rule, sources, embedder.embed, encoder[1])
    assert vectors is not None  # an encoder is at hand
    store.store_contexts(encoder, sources, vectors)
    return len(sources)


def enable(
    store: object,
    embedder: Embedder,
    depth: int | None = None,
    rule: ContextRule | None = None,
) -> int:
    """Enable the optional index ``context`` (``mempp.store.indexes``) with ``rule`` (default:
    the rule it had, else ``ContextRule()``; ``depth`` alone changes only the depth), and make
    the context of every record lacking one; returns how many were made. Run again, it
    finishes what an interrupted run left."""
    from dataclasses import replace

    from mempp.errors import InvalidInput
    from mempp.store.indexes import IndexedStore

    if not (isinstance(store, ContextStore) and isinstance(store, IndexedStore)):
        raise InvalidInput(f"{type(store).__name__} keeps no context index", field="store")
    if rule is None and depth is not None:
        rule = replace(store.context_rule() or ContextRule(), depth=depth)
    elif rule is not None and depth is not None:
        rule = replace(rule, depth=depth)
    if rule is not None:
        store.set_context_rule(rule)
    store.enable_index("context")
    return fill(store, embedder)
