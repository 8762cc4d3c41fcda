"""The context index's write side: each record's context text (its predecessors in its
thread, oldest first, then the record) encoded as a second vector, on write, when the index
is switched on over an existing store, after an erasure, and after a re-encoding.

Which predecessors is the store's rule (``mempp.store.context``); this module only reads
them, composes the text and encodes it. Every path is the same call, ``fill``: the rows
with no context yet, in id order, a page at a time, so an interrupted fill resumes where it
stopped and nothing is encoded twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mempp.encoders import Embedder
from mempp.store.context import ContextSource, ContextStore, check_depth, context_store

__all__ = ["context_store", "context_text", "enable", "fill"]

# Characters of each predecessor read into a context: the record itself must stay inside the
# encoder's 256 word pieces, and a long predecessor's first part says what it is about.
MEMBER_CHARS = 400
_PAGE = 256


def context_text(source: ContextSource) -> str:
    """The text a record's context vector encodes."""
    parts = [text[:MEMBER_CHARS] for text in source.member_texts]
    return "\n".join([*parts, source.text])


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
    sources = store.context_sources(ids)
    if not sources:
        return 0
    # A record with no predecessor has no context beyond itself, which its own vector already
    # is: nothing is encoded for it (the row records that it was looked at), and the leg
    # leaves it to the vector leg. So a store of unthreaded documents pays nothing.
    vectors = np.zeros((len(sources), encoder[1]), dtype=np.float32)
    threaded = [i for i, source in enumerate(sources) if source.members]
    if threaded:
        vectors[threaded] = embedder.embed([context_text(sources[i]) for i in threaded])
    store.store_contexts(encoder, sources, vectors)
    return len(sources)


def enable(store: object, embedder: Embedder, depth: int | None = None) -> int:
    """Enable the optional index ``context`` (``mempp.store.indexes``), reading ``depth``
    predecessors (default: the depth it had, else ``DEFAULT_DEPTH``), and encode every record
    lacking a context; returns how many were encoded. Run again, it finishes what an
    interrupted run left."""
    from mempp.errors import InvalidInput
    from mempp.store.indexes import IndexedStore

    if not (isinstance(store, ContextStore) and isinstance(store, IndexedStore)):
        raise InvalidInput(f"{type(store).__name__} keeps no context index", field="store")
    if depth is not None:
        store.set_context_depth(check_depth(depth))
    store.enable_index("context")
    return fill(store, embedder)
