"""What the fusion looks up about single rows (the next rows of their thread, their recency
keys), held for one search, so that the rows the lexical, tag and date legs found can be
looked up while the question is still being encoded.

Both lookups answer row by row (a row's followers and keys do not depend on the other rows
asked with it), so asking for some rows early and the rest later gives the fusion the same
answers as one call would: only the time of the asking moves. At 100k records the two
lookups took 3 ms of a search's 25 ms p95, after the vector leg; looked up while the encoder
runs, they are off the search's critical path (docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from mempp.filters import NO_FILTERS, Filters
from mempp.search import stages
from mempp.search.stages import stage
from mempp.settings import Settings
from mempp.store.base import Store

RecencyKeys = dict[int, tuple[int | None, int]]


class RowFacts:
    """Thread followers and recency keys of rows, for one search (one scope, as-of bound,
    filters and settings), each row looked up at most once."""

    def __init__(
        self,
        store: Store,
        scope: str,
        as_of: int | None,
        settings: Settings,
        k: int,
        filters: Filters = NO_FILTERS,
    ) -> None:
        self._store, self._scope, self._as_of, self._filters = store, scope, as_of, filters
        self._depth = settings.thread_depth
        self._want_followers = settings.thread_weight > 0
        self._want_keys = settings.reserve_slots(k) > 0
        self._followers: dict[int, list[int]] = {}
        self._asked_followers: set[int] = set()
        self._keys: RecencyKeys = {}
        self._asked_keys: set[int] = set()
        # Each leg's rows as it ends (run_legs), for the look-ahead.
        self.found: dict[str, list[int]] = {}

    def followers(self, ids: Iterable[int]) -> dict[int, list[int]]:
        """``Store.thread_followers`` of ``ids`` (rows with no follower left out)."""
        wanted = list(dict.fromkeys(ids))
        missing = [row for row in wanted if row not in self._asked_followers]
        if missing:
            found = self._store.thread_followers(
                self._scope, missing, self._as_of, self._depth, filters=self._filters
            )
            self._followers.update(found)
            self._asked_followers.update(missing)
        return {row: self._followers[row] for row in wanted if row in self._followers}

    def recency_keys(self, ids: Collection[int]) -> RecencyKeys:
        """``Store.recency_keys`` of ``ids`` (rows the scope does not hold left out)."""
        missing = [row for row in ids if row not in self._asked_keys]
        if missing:
            self._keys.update(self._store.recency_keys(self._scope, missing))
            self._asked_keys.update(missing)
        return {row: self._keys[row] for row in ids if row in self._keys}

    def look_ahead(self, rows: Collection[int], waiting: Callable[[], bool]) -> None:
        """Look up now what the fusion may ask about ``rows`` (rows a leg found): their
        followers where thread context is on, then the recency keys of them and of those
        followers where the search has recency slots; the second look-up only while
        ``waiting()`` (the question is still being encoded), so that the look-ahead delays
        the vector leg by one look-up at most."""
        if not rows or not (self._want_followers or self._want_keys):
            return
        with stage(stages.LOOK_AHEAD, rows=len(rows)):
            ahead = set(rows)
            if self._want_followers:
                for followers in self.followers(rows).values():
                    ahead.update(followers)
            if self._want_keys and waiting():
                self.recency_keys(ahead)
