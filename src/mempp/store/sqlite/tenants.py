"""The SQLite engine's lexical ranking in a file that holds several scopes: BM25 under the
searched scope's own statistics.

FTS5's ``bm25()`` takes N, the mean row length and each term's document frequency over its
whole table. In a file of several tenants one tenant's words would then move another's
ranking, and the store would rank otherwise than PostgreSQL, whose replica is per scope, so a
migration would change what an agent is told (issue 30). While a file holds one scope its
table is that scope, and FTS5 (or the replica under the whole index's statistics) ranks
exactly as the scope's statistics would. Once it holds several, every lexical ranking comes
from the in-RAM replica (``mempp.index.bm25``) under the scope's statistics (``Among``: N
counts the scope's rows of every state, as PostgreSQL counts them): read from FTS5's postings
on the searching connection below ``bm25_min_rows``, else in its thread, which the search
waits for; either way saved beside the file, so that the next process loads it
(``benchmarks/bench_tenant_lexical_cost.py`` has the costs).

Phrases (a question's adjacent words, and a query word FTS5 reads as several tokens) are
matched by FTS5, which knows positions: one query per phrase. FTS5 reports a phrase's bm25
under its table's statistics, not how often the phrase occurs; the count is recovered from
the score (``frequencies_from_scores``) and the phrase scored again under the scope's.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mempp.filters import Filters
from mempp.index.bm25 import Among, Bm25Index, frequencies_from_scores
from mempp.index.vectors import ExactVectorIndex
from mempp.search.query import LexicalQuery
from mempp.store.sqlite.replicas import _eligible, _ReplicasMixin

_EMPTY = np.empty(0, dtype=np.int64)


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Prepared:
    """One search's view of the replica: its statistics for the scope, the query's
    single-token words, and each phrase's (ids in the scope, BM25) with, in conjunctive mode,
    the ids of the rows that must hold it."""

    bm25: Bm25Index
    index: ExactVectorIndex
    among: Among
    words: tuple[str, ...]
    conjunctive: bool
    extra: tuple[np.ndarray, np.ndarray] | None
    required: tuple[np.ndarray, ...]
    allowed: np.ndarray | None

    def phrases(self) -> Callable[[], tuple[np.ndarray, np.ndarray]] | None:
        """The phrases' scores as ``Bm25Index.search`` asks for them."""
        extra = self.extra
        return None if extra is None else (lambda: extra)


class _TenantsMixin(_ReplicasMixin):
    """BM25 per scope in a file of several scopes (see the module's docstring)."""

    _among_kept: dict[str, tuple[tuple[object, ...], weakref.ref[Bm25Index], Among]]

    def warm(self, scope: str) -> None:
        super().warm(scope)
        self._tenant_replica()  # a file of several scopes ranks from it at every size

    def _tenant_lexical(
        self,
        scope: str,
        query: LexicalQuery,
        as_of: int | None,
        limit: int,
        filters: Filters,
    ) -> list[int] | None:
        """The lexical leg under the scope's statistics; None while the file holds at most
        one scope (FTS5's statistics are then the scope's). ``query`` is storable."""
        prepared = self._tenant_prepared(scope, query, filters)
        if prepared is None:
            return None
        if isinstance(prepared, list):
            return prepared
        p = prepared

        def eligible(ids: np.ndarray) -> np.ndarray:
            return _eligible(p.index, ids, scope, as_of, p.allowed) & holding(ids, p.required)

        return p.bm25.search(p.words, p.conjunctive, eligible, limit, p.phrases(), p.among)

    def _tenant_scores(self, scope: str, query: LexicalQuery) -> dict[int, float] | None:
        """``bm25_scores`` under the scope's statistics; None while the file holds at most
        one scope."""
        prepared = self._tenant_prepared(scope, query, None)
        if prepared is None:
            return None
        if isinstance(prepared, list):
            return {}
        p = prepared
        ids, score = p.bm25.scored(p.words, p.conjunctive, p.phrases(), p.among)
        ids = ids[_members(ids, p.among) & holding(ids, p.required)]
        return dict(zip(ids.tolist(), score[ids].tolist(), strict=True))

    def _tenant_prepared(
        self, scope: str, query: LexicalQuery, filters: Filters | None
    ) -> _Prepared | list[int] | None:
        """What ``_tenant_lexical`` ranks from; ``[]`` when nothing can match, None while the
        file holds at most one scope."""
        held = self._tenant_replica()
        if held is None:
            return None
        bm25, index = held
        conjunctive = query.mode == "conjunctive"
        with self._lock:
            term_tokens = self._term_tokens(list(query.terms))
            if conjunctive and any(not tokens for tokens in term_tokens):
                return []  # FTS5: a phrase with no token matches no row
            words = tuple(t[0] for t in term_tokens if len(t) == 1)
            longer = [term for term, t in zip(query.terms, term_tokens, strict=True) if len(t) > 1]
            phrases = longer if conjunctive else [*longer, *query.phrases]
            among = self._tenant_among(scope, bm25, index)
            allowed = None if filters is None else self._filtered_ids(scope, filters, index)
            found = [self._phrase_rows(bm25, among, phrase) for phrase in phrases]
        if conjunctive and any(len(ids) == 0 for ids, _ in found):
            return []
        extra = None
        if found:
            extra = (np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]))
        required = tuple(ids for ids, _ in found) if conjunctive else ()
        if not words and extra is None:
            return []
        return _Prepared(bm25, index, among, words, conjunctive, extra, required, allowed)

    def _tenant_replica(self) -> tuple[Bm25Index, ExactVectorIndex] | None:
        """The replica, caught up, and the vector index (whose rows say each row's scope),
        when the file holds several scopes; None otherwise. Read here on a small file (or in
        memory); on a large one, the thread loading or building it is waited for."""
        while True:
            with self._lock:
                index = self._vector_index()
                if index is None or len(index.scopes) <= 1:
                    return None
                bm25 = self._bm25_ready()
                if bm25 is not None:
                    return bm25, index
                building = self._bm25_thread
                if building is None or not building.is_alive():
                    # Small, in memory, or the build failed: loaded or read here (and saved
                    # beside the file, so that the next process loads it).
                    self._bm25, self._bm25_built = self._bm25_of_file(self._conn), None
                    continue
            building.join()  # outside the lock: the build ends by taking it

    def _tenant_among(self, scope: str, bm25: Bm25Index, index: ExactVectorIndex) -> Among:
        """The scope's statistics over the rows the replica holds (the caller holds the lock),
        kept while neither the replica nor the vector index gained rows."""
        key = (len(index), index.max_id, bm25.rows, bm25.tokens, bm25.max_id)
        kept = self._among_kept.get(scope)
        if kept is not None and kept[0] == key and kept[1]() is bm25:
            return kept[2]
        among = bm25.among(index.members_by_id(scope))
        if len(self._among_kept) >= 8:
            del self._among_kept[next(iter(self._among_kept))]  # the oldest
        self._among_kept[scope] = (key, weakref.ref(bm25), among)
        return among

    def _phrase_rows(
        self, bm25: Bm25Index, among: Among, phrase: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """The scope's rows where FTS5 finds ``phrase`` (ascending ids) and the phrase's BM25
        in each under the scope's statistics (the caller holds the lock)."""
        rows = self._conn.execute(
            "SELECT rowid, -bm25(records_fts) FROM records_fts WHERE records_fts MATCH ? "
            "ORDER BY rowid",
            (_quoted(phrase),),
        ).fetchall()
        if not rows:
            return _EMPTY, np.empty(0, dtype=np.float64)
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        scores = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        matches = len(ids)  # over the whole table, as FTS5 counted them
        held = ids <= bm25.max_id  # rows written since the replica caught up: not in the scope yet
        ids, scores = ids[held], scores[held]
        tf = frequencies_from_scores(scores, bm25.lengths(ids), bm25.rows, bm25.tokens, matches)
        mine = _members(ids, among)
        ids, tf = ids[mine], tf[mine]
        return ids, bm25.phrase_scores(ids, tf, len(ids), among)


def _members(ids: np.ndarray, among: Among) -> np.ndarray:
    """Which of ``ids`` are rows of the scope ``among`` describes."""
    keep = np.zeros(len(ids), dtype=bool)
    inside = ids < len(among.members)
    keep[inside] = among.members[ids[inside]]
    return keep


def holding(ids: np.ndarray, required: Sequence[np.ndarray]) -> np.ndarray:
    """Which of ``ids`` are in every one of ``required``."""
    keep = np.ones(len(ids), dtype=bool)
    for held in required:
        keep &= np.isin(ids, held, assume_unique=True)
    return keep
