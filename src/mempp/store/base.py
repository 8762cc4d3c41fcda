"""The ``Store`` protocol: what the write and read paths need from a storage engine.

Every engine keeps the same guarantees: rows are never deleted, a row's content never changes
(only ``state`` and ``superseded_by``), each write batch is one transaction, and every
ranked lookup applies the scope *before* ranking (same tenant scope, active rows, and with an
as-of bound ``event_key <= as_of``, so undated rows drop out), so all ``limit`` slots go to
eligible rows. Ties in every ranking go to the newer ingest (larger id).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import numpy as np

from mempp.query import LexicalQuery
from mempp.records import AddResult, Document, Record, State


class Store(Protocol):
    #: Where the data lives, for messages (a path or a URL without password).
    location: str

    def close(self) -> None: ...

    # -- encoder identity -------------------------------------------------------------
    def encoder(self) -> tuple[str, int] | None:
        """(name, dim) of the encoder that filled this store, or None while empty."""
        ...

    def bind_encoder(self, name: str, dim: int) -> None:
        """Remember the encoder; raise ``EncoderMismatch`` if another one filled the store."""
        ...

    # -- write path -------------------------------------------------------------------
    def find_duplicates(self, scope: str, docs: Sequence[Document]) -> list[bool]:
        """For each document: does an active row of the same scope and author have its text?"""
        ...

    def insert(self, scope: str, docs: Sequence[Document], vectors: np.ndarray) -> list[AddResult]:
        """Store documents (``vectors[i]`` belongs to ``docs[i]``) in ONE transaction.

        Duplicates are checked again inside the transaction, against the store and against
        earlier documents of the same batch, so concurrent writers never store one twice.
        """
        ...

    # -- state (consolidation) --------------------------------------------------------
    def set_state(
        self, scope: str, ids: Collection[int], state: State, superseded_by: int | None
    ) -> None: ...

    # -- reads ------------------------------------------------------------------------
    def get(self, scope: str, ids: Collection[int]) -> dict[int, Record]: ...

    def count(self, scope: str, *, active_only: bool = True) -> int: ...

    def lexical(self, scope: str, query: LexicalQuery, as_of: int | None, limit: int) -> list[int]:
        """Full-text leg: ids ranked by relevance (best first)."""
        ...

    def tagged(self, scope: str, labels: Sequence[str], as_of: int | None, limit: int) -> list[int]:
        """Tag leg: rows carrying any label, most labels first, then newest."""
        ...

    def nearest(self, scope: str, vector: np.ndarray, as_of: int | None, limit: int) -> list[int]:
        """Vector leg: exact cosine ranking of in-scope rows (best first)."""
        ...

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, int]:
        """Event-date key of each row, its ingest-time key where undated."""
        ...

    def latest_unmatched(
        self, scope: str, exclude: Collection[int], as_of: int | None, limit: int
    ) -> list[int]:
        """The most recently ingested in-scope rows whose ids are not in ``exclude``."""
        ...
