"""Re-encoding a whole store with another encoder (``mempp reembed``, ``Memory.reembed``).

Every row of every scope (any state; erased rows excepted, they get zeros) is encoded again,
batch by batch, and its new vector staged by the engine (``ReembedStore``), one transaction a
batch. Searches go on with the old vectors meanwhile. When no row is left without a new
vector, the engine swaps them all in and binds the new encoder in one transaction; rows added
by writers during the run are encoded before that (the switch refuses while any is left, and
the loop goes round again). A run stopped at any point, ``kill -9`` included, resumes from the
rows not yet staged when it is started again with the same encoder. Records, ids, dates,
states and the change log are never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mempp.encoders.base import Embedder
from mempp.errors import InvalidInput, StoreError
from mempp.store.base import ReembedStore, Store, supports

__all__ = ["DEFAULT_BATCH", "ReembedReport", "abandon", "reembed"]

DEFAULT_BATCH = 128
# Rounds of "encode what is left, then try to switch" before giving up on a store whose
# writers add rows faster than they are encoded (each round encodes only the newcomers).
_SWITCH_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """What a run did: the encoders before and after, rows encoded by this run and by an
    earlier, interrupted one (``resumed``), and the rows in all."""

    old_encoder: str
    new_encoder: str
    dim: int
    encoded: int
    resumed: int
    total: int

    def to_dict(self) -> dict[str, object]:
        return {
            "old_encoder": self.old_encoder,
            "new_encoder": self.new_encoder,
            "dim": self.dim,
            "encoded": self.encoded,
            "resumed": self.resumed,
            "total": self.total,
        }


def _checked(vectors: np.ndarray, rows: int, embedder: Embedder) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.shape != (rows, embedder.dim):
        raise StoreError(
            f"encoder {embedder.name} returned vectors of shape {matrix.shape} for {rows} "
            f"texts, not ({rows}, {embedder.dim}); nothing of this batch was staged"
        )
    if not np.isfinite(matrix).all():
        raise StoreError(f"encoder {embedder.name} returned non-finite vectors; nothing staged")
    return matrix


def reembed(
    store: Store,
    embedder: Embedder,
    *,
    batch: int = DEFAULT_BATCH,
    restart: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReembedReport:
    """Re-encode every row of ``store`` with ``embedder`` and switch the store to it.

    ``progress(done, total)`` is called after each staged batch. ``InvalidInput`` when the
    store holds nothing, already uses this encoder, or another re-encoding is under way
    (``restart`` drops that one).
    """
    supports(store, ReembedStore, "re-encoding (mempp reembed)")
    assert isinstance(store, ReembedStore)
    if not (isinstance(batch, int) and 1 <= batch <= 100_000):
        raise InvalidInput(f"must be an integer from 1 to 100000, got {batch!r}", field="batch")
    old = store.encoder()
    status = store.reembed_begin(embedder.name, embedder.dim, restart=restart)
    resumed = status.staged
    encoded = 0
    for _ in range(_SWITCH_ROUNDS):
        after = 0
        while rows := store.reembed_pending(after, batch):
            ids = [row_id for row_id, _ in rows]
            vectors = _checked(embedder.embed([text for _, text in rows]), len(rows), embedder)
            store.reembed_stage(ids, vectors)
            encoded += len(rows)
            after = ids[-1]
            if progress is not None:
                progress(resumed + encoded, max(status.total, resumed + encoded))
        if store.reembed_switch():
            return ReembedReport(
                old_encoder=old[0] if old else "",
                new_encoder=embedder.name,
                dim=embedder.dim,
                encoded=encoded,
                resumed=resumed,
                total=resumed + encoded,
            )
        status = store.reembed_status() or status  # rows were added: encode them too
    raise StoreError(
        f"{store.location}: rows kept arriving faster than they were encoded; the new vectors "
        "staged so far are kept: run mempp reembed again when writes are fewer"
    )


def abandon(store: Store) -> bool:
    """Drop a re-encoding under way (its staged vectors); False when none was."""
    supports(store, ReembedStore, "re-encoding (mempp reembed)")
    assert isinstance(store, ReembedStore)
    return store.reembed_abandon()
