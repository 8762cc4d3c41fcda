"""The SQLite engine's retrieval legs: lexical (FTS5, or its in-RAM BM25 replica), tagged
(SQL, or the in-RAM tag postings), nearest (the in-RAM vector index), dated spans, thread
followers, recency keys and the latest unmatched rows. The in-RAM copies themselves are kept
by ``mempp.store.sqlite.replicas``."""

from __future__ import annotations

import json
import weakref
from collections.abc import Collection, Sequence
from dataclasses import replace

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.index.analysis import first_per_key
from mempp.index.vectors import ExactVectorIndex
from mempp.search.query import LexicalQuery, storable_query
from mempp.store.base import followers_in_order
from mempp.store.filter_sql import filter_condition
from mempp.store.sqlite.replicas import _eligible
from mempp.store.sqlite.tenants import _TenantsMixin
from mempp.threads.background import started

# Filtered id sets kept for the next searches (see _LegsMixin._filtered_ids).
_FILTERED_KEPT = 8


def thread_key(alias: str) -> str:
    """A row's place in its thread (the records_thread index expression)."""
    return f"coalesce({alias}.event_key, {alias}.ingested_key)"


def fts_match_expression(query: LexicalQuery) -> str | None:
    """Quote every term of a ``storable_query`` as an FTS5 string literal and join them with
    AND / OR. A quoted two-word phrase is an FTS5 phrase: its words must stand side by side."""
    terms = list(query.terms)
    if query.mode == "disjunctive":
        terms += query.phrases
    if not terms:
        return None
    joiner = " AND " if query.mode == "conjunctive" else " OR "
    return joiner.join(_quoted(term) for term in terms)


def filtered_ids_query(scope: str, filters: Filters) -> tuple[str, dict[str, object]]:
    """The SQL (and its parameters) for the ids of the scope's active rows the filters keep.
    Each filter has an index to answer it from (``mempp.store.filter_sql``)."""
    where, params = filter_condition(filters, "r", "sqlite")
    # With tags, the rows are best found from the labels' postings: the unary + keeps the
    # planner from walking every row of the scope through an index on it instead.
    scope_term = "+r.scope" if filters.tags else "r.scope"
    sql = f"""SELECT r.id FROM records r
              WHERE {scope_term} = :scope AND r.state = 'active'{where} ORDER BY r.id"""
    return sql, {"scope": scope, **params}


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


class _LegsMixin(_TenantsMixin):
    """The retrieval legs, and the read-time lookups beside them (threads, recency)."""

    def lexical(
        self,
        scope: str,
        query: LexicalQuery,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        query = storable_query(query)
        if query.unique_stems:
            query = self._one_term_per_stem(query)
        expression = fts_match_expression(query)
        if expression is None or limit <= 0:
            return []
        # A file of several scopes ranks under the scope's statistics (mempp.store.sqlite
        # .tenants); with one, FTS5's own statistics are the scope's.
        scoped = self._tenant_lexical(scope, query, as_of, limit, filters)
        if scoped is not None:
            return scoped
        fast = self._lexical_in_ram(scope, query, as_of, limit, filters)
        if fast is not None:
            return fast
        date_condition = "" if as_of is None else " AND r.event_key <= :as_of"
        where, params = filter_condition(filters, "r", "sqlite")
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT r.id FROM records_fts JOIN records r ON r.id = records_fts.rowid
                    WHERE records_fts MATCH :match AND r.scope = :scope
                      AND r.state = 'active'{date_condition}{where}
                    ORDER BY bm25(records_fts), r.id DESC LIMIT :limit""",
                {"match": expression, "scope": scope, "as_of": as_of, "limit": limit, **params},
            ).fetchall()
        return [row[0] for row in rows]

    def bm25_scores(self, scope: str, query: LexicalQuery) -> dict[int, float]:
        """The BM25 (higher is better) of every row of the scope (any state or date) the
        query matches, as the lexical leg ranks them: FTS5's ``bm25()`` negated, or in a file
        of several scopes the replica's under the scope's statistics. For diagnosis, and for
        the conformance tests, which compare PostgreSQL's with it."""
        query = storable_query(query)
        if query.unique_stems:
            query = self._one_term_per_stem(query)
        expression = fts_match_expression(query)
        if expression is None:
            return {}
        scoped = self._tenant_scores(scope, query)
        if scoped is not None:
            return scoped
        with self._lock:
            rows = self._conn.execute(
                """SELECT r.id, -bm25(records_fts) FROM records_fts
                   JOIN records r ON r.id = records_fts.rowid
                   WHERE records_fts MATCH ? AND r.scope = ?""",
                (expression, scope),
            ).fetchall()
        return {row: score for row, score in rows}

    def _one_term_per_stem(self, query: LexicalQuery) -> LexicalQuery:
        """Keep the first term (and phrase) of each distinct FTS5 token sequence."""
        with self._lock:
            term_tokens = self._term_tokens(list(query.terms))
            phrase_tokens = self._term_tokens(list(query.phrases))
        return replace(
            query,
            terms=first_per_key(query.terms, term_tokens),
            phrases=first_per_key(query.phrases, phrase_tokens),
        )

    def _lexical_in_ram(
        self,
        scope: str,
        query: LexicalQuery,
        as_of: int | None,
        limit: int,
        filters: Filters = NO_FILTERS,
    ) -> list[int] | None:
        """The same ranking from the in-RAM bm25 replica, or None where it cannot serve.

        BM25 is a sum over the query's phrases, so phrase scores (from FTS5, which knows
        word positions) are added to the replica's single-term scores exactly. FTS5 matches
        the phrases on a thread of its own while the replica scores the words: for two
        common words side by side each takes tens of ms at 1M rows (docs/scaling.md). So
        the caller must not hold the store's lock, which that thread takes."""
        conjunctive = query.mode == "conjunctive"
        with self._lock:
            bm25 = self._bm25_ready()
            if bm25 is None:
                return None
            tokens = self._fts_tokens(query.terms)
            if tokens is None:  # a term FTS5 reads as a multi-token phrase: leave it to FTS5
                return None
            index = self._index
            assert index is not None
            allowed = self._filtered_ids(scope, filters, index)
        extra = None
        if query.phrases and not conjunctive:
            phrases = query.phrases
            extra = started(lambda: self._phrase_scores(phrases), "mempp-phrases")
        return bm25.search(
            tokens,
            conjunctive=conjunctive,
            eligible=lambda ids: _eligible(index, ids, scope, as_of, allowed),
            limit=limit,
            extra=extra,
        )

    def _phrase_scores(self, phrases: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of the rows matching any of ``phrases`` and FTS5's bm25 of them."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT rowid, -bm25(records_fts) FROM records_fts WHERE records_fts MATCH ?",
                (" OR ".join(_quoted(p) for p in phrases),),
            ).fetchall()
        return (
            np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
            np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows)),
        )

    def tagged(
        self,
        scope: str,
        labels: Sequence[str],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if not labels:
            return []
        fast = self._tagged_in_ram(scope, labels, as_of, limit, filters)
        if fast is not None:
            return fast
        return self._tagged_sql(scope, labels, as_of, limit, filters)

    def _tagged_sql(
        self,
        scope: str,
        labels: Sequence[str],
        as_of: int | None,
        limit: int,
        filters: Filters,
    ) -> list[int]:
        """The tag leg in SQL (while the in-RAM postings are not read yet)."""
        date_condition = "" if as_of is None else " AND r.event_key <= :as_of"
        where, params = filter_condition(filters, "r", "sqlite")
        with self._lock:
            rows = self._conn.execute(
                # CROSS JOIN fixes the join order (labels first): without planner statistics
                # SQLite would otherwise visit every row of the scope.
                f"""SELECT r.id FROM record_tags t CROSS JOIN records r ON r.id = t.record_id
                    WHERE t.label IN (SELECT value FROM json_each(:labels))
                      AND r.scope = :scope AND r.state = 'active'{date_condition}{where}
                    GROUP BY r.id ORDER BY count(*) DESC, r.id DESC LIMIT :limit""",
                {
                    "labels": json.dumps(list(labels)),
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                    **params,
                },
            ).fetchall()
        return [row[0] for row in rows]

    def _tagged_in_ram(
        self,
        scope: str,
        labels: Sequence[str],
        as_of: int | None,
        limit: int,
        filters: Filters,
    ) -> list[int] | None:
        """The same ranking from the in-RAM postings, or None while they are not read yet."""
        index = self._vector_index()
        if index is None:
            return None
        with self._lock:
            postings = self._tags_ready(index)
            if postings is None:
                return None
            grouped: dict[str, list[int]] = {}
            if index.max_id > postings.max_id:
                # Rows past the postings, up to the vector index's last row (whose states
                # decide eligibility): one seek on record_tags' key per asked label.
                rows = self._conn.execute(
                    """SELECT label, record_id FROM record_tags
                       WHERE label IN (SELECT value FROM json_each(:labels))
                         AND record_id > :low AND record_id <= :high
                       ORDER BY label, record_id""",
                    {
                        "labels": json.dumps(list(labels)),
                        "low": postings.max_id,
                        "high": index.max_id,
                    },
                ).fetchall()
                for label, row_id in rows:
                    grouped.setdefault(label, []).append(row_id)
            tail = {label: np.array(ids, dtype=np.int64) for label, ids in grouped.items()}
            allowed = self._filtered_ids(scope, filters, index)
            return postings.search(
                labels,
                lambda ids: index.eligible(ids, scope, as_of, allowed),
                limit,
                tail,
            )

    def nearest(
        self,
        scope: str,
        vector: np.ndarray,
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        index = self._vector_index()
        if index is None:
            return []
        with self._lock:
            allowed = self._filtered_ids(scope, filters, index)
        return index.search(vector, scope, as_of, limit, allowed)

    def _filtered_ids(
        self, scope: str, filters: Filters, index: ExactVectorIndex
    ) -> np.ndarray | None:
        """Ids of the scope's active rows the filters keep (ascending), for the in-RAM
        indexes to mask with; None when no filter is set (the caller holds the lock).

        Kept while ``index`` holds the same rows in the same states: a record's filtered
        fields never change (erasure also archives the row), so nothing else can change the
        answer. One search asks up to three times (lexical, tag and vector legs), and a
        page of results often asks again with the same filters."""
        if filters.is_empty:
            return None
        key = (scope, filters)
        kept = self._filtered.get(key)
        if kept is not None and kept[0]() is index and kept[1] == index.version:
            return kept[2]
        rows = self._conn.execute(*filtered_ids_query(scope, filters)).fetchall()
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        if len(self._filtered) >= _FILTERED_KEPT:
            del self._filtered[next(iter(self._filtered))]  # the oldest
        # A weak reference: a replaced index must not stay in RAM for the sake of this entry.
        self._filtered[key] = (weakref.ref(index), index.version, ids)
        return ids

    def dated_within(
        self,
        scope: str,
        spans: Sequence[tuple[int, int]],
        as_of: int | None,
        limit: int,
        among: Collection[int] | None = None,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if not spans or limit <= 0 or (among is not None and not among):
            return []
        date_condition = "" if as_of is None else " AND event_key <= :as_of"
        where, params = filter_condition(filters, "records", "sqlite")
        among_condition = "" if among is None else " AND id IN (SELECT value FROM json_each(:ids))"
        found: set[int] = set()
        with self._lock:
            for start, end in spans:  # one index range per span
                rows = self._conn.execute(
                    f"""SELECT id FROM records
                        WHERE scope = :scope AND state = 'active'
                          AND event_key >= :start AND event_key < :end{date_condition}
                          {among_condition}{where}
                        ORDER BY id DESC LIMIT :limit""",
                    {
                        "scope": scope,
                        "start": start,
                        "end": end,
                        "as_of": as_of,
                        "ids": None if among is None else json.dumps([int(i) for i in among]),
                        "limit": limit,
                        **params,
                    },
                ).fetchall()
                found.update(row[0] for row in rows)
        return sorted(found, reverse=True)[:limit]

    def thread_followers(
        self,
        scope: str,
        ids: Collection[int],
        as_of: int | None,
        depth: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> dict[int, list[int]]:
        if not ids or depth < 1:
            return {}
        where, params = filter_condition(filters, "m", "sqlite")
        # Every row within an as-of bound has its thread key within it too (undated rows fail
        # the bound anyway), so the bound also ends the index walk.
        date_condition = (
            "" if as_of is None else f" AND m.event_key <= :as_of AND {thread_key('m')} <= :as_of"
        )
        with self._lock:
            rows = self._conn.execute(
                # One short walk on the records_thread index per row that has a thread: it
                # starts at the row's own place (the >= term is the seek) and stops after
                # ``depth`` eligible rows. INDEXED BY: with an as-of bound the planner would
                # otherwise scan the scope's rows by date.
                f"""SELECT c.id, n.id, {thread_key("n")} FROM records c JOIN records n
                    ON n.id IN (
                        SELECT m.id FROM records m INDEXED BY records_thread
                        WHERE m.scope = c.scope AND m.thread = c.thread
                          AND m.state = 'active'{date_condition}{where}
                          AND {thread_key("m")} >= {thread_key("c")}
                          AND ({thread_key("m")} > {thread_key("c")} OR m.id > c.id)
                        ORDER BY {thread_key("m")}, m.id
                        LIMIT :depth)
                    WHERE c.id IN (SELECT value FROM json_each(:ids)) AND +c.scope = :scope
                      AND c.thread IS NOT NULL""",
                {
                    "ids": json.dumps([int(i) for i in ids]),
                    "scope": scope,
                    "as_of": as_of,
                    "depth": depth,
                    **params,
                },
            ).fetchall()
        return followers_in_order(rows)

    def recency_keys(self, scope: str, ids: Collection[int]) -> dict[int, tuple[int | None, int]]:
        if not ids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                """SELECT id, event_key, ingested_key FROM records
                   WHERE id IN (SELECT value FROM json_each(?)) AND +scope = ?""",
                (json.dumps([int(i) for i in ids]), scope),
            ).fetchall()
        return {row: (event, ingested) for row, event, ingested in rows}

    def latest_unmatched(
        self,
        scope: str,
        exclude: Collection[int],
        as_of: int | None,
        limit: int,
        *,
        filters: Filters = NO_FILTERS,
    ) -> list[int]:
        if not filters.is_empty:
            index = self._vector_index()
            if index is not None:
                with self._lock:
                    allowed = self._filtered_ids(scope, filters, index)
                assert allowed is not None
                # Newest first among the rows the filters keep: walking ids newest-first in
                # SQL would read every row when the filters keep few of them.
                newest = allowed[index.eligible(allowed, scope, as_of)][::-1]
                skip = {int(i) for i in exclude}
                return [i for i in newest[: limit + len(skip)].tolist() if i not in skip][:limit]
        date_condition = "" if as_of is None else " AND +event_key <= :as_of"
        where, params = filter_condition(filters, "records", "sqlite")
        with self._lock:
            rows = self._conn.execute(
                # The unary + keeps SQLite walking ids newest-first (stopping at the limit)
                # instead of sorting every in-scope row.
                f"""SELECT id FROM records
                    WHERE +scope = :scope AND +state = 'active'{date_condition}{where}
                      AND id NOT IN (SELECT value FROM json_each(:exclude))
                    ORDER BY id DESC LIMIT :limit""",
                {
                    "scope": scope,
                    "as_of": as_of,
                    "limit": limit,
                    "exclude": json.dumps([int(i) for i in exclude]),
                    **params,
                },
            ).fetchall()
        return [row[0] for row in rows]
