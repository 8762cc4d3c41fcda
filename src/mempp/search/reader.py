"""What the features built over the read path need of one scope: the seam between them and
the ``Memory`` facade.

The time features (``mempp.timeline``) and the LLM layers (``mempp.llm``) work on a scope's
store and ask its read path questions; they declare that need here, as protocols, instead of
importing ``Memory``. ``Memory`` satisfies both structurally and hands itself to them, so the
arrows point one way: the facade composes the features, the features depend on this module,
the store protocol and the vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mempp.dates import DateLike
    from mempp.encoders.base import Embedder
    from mempp.filters import Filters
    from mempp.records import Hit, Record
    from mempp.search.evidence import Evidence
    from mempp.search.packing import PackingOptions
    from mempp.settings import Settings
    from mempp.store.base import Store

__all__ = ["Reader", "ScopedStore"]


class ScopedStore(Protocol):
    """A store seen through one scope, with the encoder that fills its vectors."""

    scope: str

    @property
    def store(self) -> Store: ...

    @property
    def embedder(self) -> Embedder: ...


class Reader(ScopedStore, Protocol):
    """A scope's read path: the fused search, its evidence, a record by id, and the as-of
    bound a question's search applies (``Memory`` is the implementation)."""

    def search(
        self,
        query: str,
        *,
        as_of: DateLike = None,
        k: int | None = None,
        filters: Filters | None = None,
    ) -> list[Hit]: ...

    def evidence(
        self,
        query: str,
        *,
        as_of: DateLike = None,
        k: int | None = None,
        budget: int | None = None,
        settings: Settings | str | None = None,
        packing: PackingOptions | None = None,
        filters: Filters | None = None,
    ) -> Evidence: ...

    def get(self, record_id: int) -> Record: ...

    def effective_as_of(
        self, query: str, *, as_of: DateLike = None, settings: Settings | str | None = None
    ) -> DateLike: ...
