"""The read path ``Phi(q, theta)``: temporal scope, three legs (and the optional keyword
and context legs), fusion, the date leg, thread context, recency reserve.

No language model is called here. The scope (tenant, active rows, ``event_date <= as_of``)
is applied inside every leg's lookup, before ranking, so every slot goes to an eligible row.
The read path never looks at ``superseded_by``: a superseded row competes like any other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mempp.filters import NO_FILTERS, Filters
from mempp.records import Hit
from mempp.search import stages
from mempp.search.fusion import Fused, add_date_leg, add_thread_context, rrf
from mempp.search.keyword import keyword_terms, prefix_terms
from mempp.search.query import date_spans, lexical_query, question_as_of, tag_labels
from mempp.search.query_context import query_contexts
from mempp.search.reserve import recency, select_with_reserve
from mempp.search.row_facts import RowFacts
from mempp.search.stages import stage, timed
from mempp.settings import LEGS, Settings
from mempp.store.base import Store
from mempp.store.context import ContextStore, context_store
from mempp.threads.background import starting


@dataclass(frozen=True, slots=True)
class LegLists:
    """What each leg returned, best first (for inspection and benchmarks)."""

    lex: list[int]
    tag: list[int]
    vec: list[int]
    # Rows dated within a day or month the question names (unordered: the date leg orders
    # them by the other legs' fused score).
    dated: list[int] = field(default_factory=list)
    # Rows holding the question's content words as substrings (mempp.search.keyword).
    kw: list[int] = field(default_factory=list)
    # The context leg (stores with the context index on), its hits credited as the settings say.
    ctx: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[int]]:
        """The ranked legs of the first fusion (the date leg is applied after it)."""
        return {"lex": self.lex, "tag": self.tag, "vec": self.vec, "kw": self.kw, "ctx": self.ctx}


def scope_bound(question: str, as_of: int | None, settings: Settings) -> int | None:
    """The as-of bound of a search: the caller's, else (when ``as_of_in_question`` is on) the
    one an "as of <date>" phrase in the question states, else none."""
    if as_of is not None or not settings.as_of_in_question:
        return as_of
    return question_as_of(question)


def run_legs(
    store: Store,
    scope: str,
    question: str,
    query_vector: np.ndarray | Callable[[], np.ndarray] | None,
    as_of: int | None,
    settings: Settings,
    filters: Filters = NO_FILTERS,
    facts: RowFacts | None = None,
    beside: Callable[[Callable[[], Any]], Future[Any]] | None = None,
) -> LegLists:
    """Each leg returns at most ``C`` in-scope rows (the scope: tenant, active, ``as_of`` and
    ``filters``). A leg of weight 0 is not queried. The legs are independent lookups, run
    together where the engine gains from it.

    ``query_vector`` may be the call that computes it (the question's encoding). On an engine
    whose gather runs in turn (SQLite) it then runs on the caller's thread while the legs
    that need no vector run beside it on a thread from ``beside`` (e.g.
    :meth:`HelperThreads.submit`), and the caller goes from the encoding straight into the
    vector leg; on one whose gather runs the legs at once (PostgreSQL) it runs on that
    thread while the legs run on the engine's pooled connections. If the
    vector is still being computed when those legs are done, ``facts`` looks up what the
    fusion will ask about their rows meanwhile (:meth:`RowFacts.look_ahead`).
    The caller has checked ``settings`` against the store (``mempp.store.indexes.require``)."""
    limit = settings.candidates
    calls: dict[str, Callable[[], list[int]]] = {}
    if settings.w_lex > 0:
        terms = lexical_query(question, settings)
        calls["lex"] = timed(
            stages.LEXICAL, lambda: store.lexical(scope, terms, as_of, limit, filters=filters)
        )
    if settings.w_tag > 0:
        labels = tag_labels(question, settings)
        calls["tag"] = timed(
            stages.TAG, lambda: store.tagged(scope, labels, as_of, limit, filters=filters)
        )
    max_tokens = settings.kw_max_tokens or None
    if settings.w_kw > 0 and settings.kw_match == "prefix":
        prefixes = prefix_terms(question)
        calls["kw"] = timed(
            stages.KEYWORD,
            lambda: store.keyword_prefix(
                scope, prefixes, as_of, limit, filters=filters, max_tokens=max_tokens
            ),
        )
    elif settings.w_kw > 0:
        words = keyword_terms(question)
        calls["kw"] = timed(
            stages.KEYWORD,
            lambda: store.keyword(
                scope, words, as_of, limit, filters=filters, max_tokens=max_tokens
            ),
        )
    spans = date_spans(question) if settings.w_date > 0 else ()
    if spans:
        calls["dated"] = timed(
            stages.DATED,
            lambda: store.dated_within(scope, spans, as_of, limit, filters=filters),
        )
    contexts = context_store(store) if settings.w_ctx > 0 else None
    at_query = settings.w_ctx > 0 and settings.ctx_source == "query"
    if at_query:
        contexts = None  # scored after the vector leg, from its rows (query_context)
    vector: _QuestionVector | None = None
    needing: dict[str, Callable[[], list[int]]] = {}
    if (settings.w_vec > 0 or contexts is not None or at_query) and query_vector is not None:
        vector = asked = _QuestionVector(query_vector)
        if settings.w_vec > 0:
            needing["vec"] = timed(
                stages.VECTOR,
                lambda: store.nearest(scope, asked(), as_of, limit, filters=filters),
            )
        if contexts is not None:
            needing["ctx"] = timed(
                stages.CONTEXT,
                lambda: contexts.contextual(scope, asked(), as_of, limit, filters=filters),
            )
    found = _all_legs(store, calls, needing, vector, facts, beside)
    lex, tag, vec, kw, ctx = (found.get(leg, []) for leg in ("lex", "tag", "vec", "kw", "ctx"))
    if ctx and contexts is not None and settings.ctx_credit == "members":
        ctx = credited(contexts, scope, ctx, as_of, filters, contexts.context_members(ctx))
    if at_query and vector is not None and isinstance(store, ContextStore):
        with stage(stages.CONTEXT):
            rows = vec if settings.w_vec > 0 else []
            if settings.w_vec <= 0:  # the candidates are the vector leg's, run or not
                rows = store.nearest(scope, vector(), as_of, limit, filters=filters)
            ctx, members = query_contexts(
                store, scope, rows, vector(), as_of, limit, filters=filters
            )
            if ctx and settings.ctx_credit == "members":
                ctx = credited(store, scope, ctx, as_of, filters, members)
    dated: list[int] = []
    if spans:
        # The legs' own candidates dated in the spans, then the newest other such rows.
        matched = {*lex, *tag, *vec, *kw}
        dated = store.dated_within(
            scope, spans, as_of, len(matched), among=matched, filters=filters
        )
        dated += [row for row in found["dated"] if row not in matched]
    return LegLists(lex, tag, vec, dated, kw, ctx)


def credited(
    store: ContextStore,
    scope: str,
    hits: list[int],
    as_of: int | None,
    filters: Filters,
    members: dict[int, tuple[int, ...]],
) -> list[int]:
    """The context leg's hits, each followed by the predecessors its context read
    (``members``, oldest first; listed nearest first) that are in the search's scope and not
    listed yet."""
    wanted = {m for row in hits for m in members.get(row, ())}
    eligible = store.context_eligible(scope, wanted, as_of, filters) if wanted else set()
    listed: list[int] = []
    seen: set[int] = set()
    for row in hits:
        for candidate in (row, *reversed(members.get(row, ()))):
            if candidate not in seen and (candidate == row or candidate in eligible):
                seen.add(candidate)
                listed.append(candidate)
    return listed


LegResults = dict[str, list[int]]


class _QuestionVector:
    """The question's vector, computed at most once however many legs ask for it (on
    PostgreSQL the vector and context legs may ask at once). A failed encoding is not
    repeated: every leg that asks gets its error (a remote encoder is not called again)."""

    def __init__(self, source: np.ndarray | Callable[[], np.ndarray]) -> None:
        self._held: list[np.ndarray] = [] if callable(source) else [source]
        self._compute = timed(stages.ENCODE, source) if callable(source) else None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def done(self) -> bool:
        """Is the encoding over (the vector given or computed, or its error raised)? The
        look-ahead stops then."""
        return bool(self._held) or self._error is not None

    def __call__(self) -> np.ndarray:
        with self._lock:
            if self._error is not None:
                raise self._error
            if not self._held and self._compute is not None:
                try:
                    self._held.append(self._compute())
                except BaseException as exc:
                    self._error = exc
                    raise
            return self._held[0]


def _all_legs(
    store: Store,
    plain: dict[str, Callable[[], list[int]]],
    needing: dict[str, Callable[[], list[int]]],
    vector: _QuestionVector | None,
    facts: RowFacts | None,
    beside: Callable[[Callable[[], Any]], Future[Any]] | None,
) -> LegResults:
    """Every leg's rows: ``plain`` (the legs that need no vector) and ``needing`` (those
    that need the question's vector), the question encoded beside the plain legs where it
    still has to be."""
    if vector is None or vector.done() or not plain:  # nothing to overlap the encoding with
        calls = {**plain, **needing}
        return dict(zip(calls, store.gather(list(calls.values())), strict=True))
    asked = vector
    work = beside if beside is not None else starting
    if getattr(store, "gathers_at_once", False):
        # The engine runs a gather's calls at once on pooled connections: the question is
        # encoded on a helper thread and the legs needing it wait for it there, while the
        # caller runs the first plain leg. (Encoding on the caller with the plain legs on
        # the pooled threads measured slower on PostgreSQL: 25 against 21 ms p50, with the
        # legs and the fusion's look-ups all later.)
        encoding = work(asked)
        noted = {leg: _noted(leg, call, facts) for leg, call in plain.items()} if facts else plain
        calls = {**noted}
        if facts is not None:
            calls["ahead"] = lambda: _look_ahead(facts, list(facts.found.values()), asked.done)
        calls.update(needing)
        try:
            return dict(zip(calls, store.gather(list(calls.values())), strict=True))
        finally:
            wait([encoding])  # its error, if any, reached the legs that asked for it
    # The engine runs a gather's calls in turn (SQLite: one connection): the plain legs run
    # on a helper thread while this thread encodes the question and then, without a
    # hand-off, runs the vector leg. Encoding a question (6-8 ms of ONNX Runtime, the GIL
    # released; a network round trip for a remote encoder) and the plain legs each want a core.
    legs = work(lambda: _plain_legs(store, plain, facts, vector.done))
    try:
        vector()
        found = dict(zip(needing, store.gather(list(needing.values())), strict=True))
    finally:
        wait([legs])  # never leave a leg running behind the caller's back
    return {**legs.result(), **found}


def _plain_legs(
    store: Store,
    calls: dict[str, Callable[[], list[int]]],
    facts: RowFacts | None,
    encoded: Callable[[], bool],
) -> LegResults:
    """The legs that need no vector, then, while the question is still being encoded, the
    look-up of their rows for the fusion (it stops once ``encoded()``)."""
    found = dict(zip(calls, store.gather(list(calls.values())), strict=True))
    if facts is not None:
        _look_ahead(facts, list(found.values()), encoded)
    return found


def _noted(leg: str, call: Callable[[], list[int]], facts: RowFacts) -> Callable[[], list[int]]:
    """``call``, handing the rows it found to ``facts`` for the look-ahead."""

    def run() -> list[int]:
        rows = call()
        facts.found[leg] = rows
        return rows

    return run


def _look_ahead(facts: RowFacts, found: list[list[int]], encoded: Callable[[], bool]) -> list[int]:
    """Between the legs that need no vector and the vector leg: while the encoder still runs,
    the rows those legs ``found`` (on an engine that runs the legs at once, those found so
    far) are looked up for the fusion. Once the vector is there the vector leg goes first."""
    if encoded():
        return []
    rows = list(dict.fromkeys(row for leg in found for row in leg))
    facts.look_ahead(rows, waiting=lambda: not encoded())
    return rows


def fuse_and_select(
    store: Store,
    scope: str,
    legs: LegLists,
    as_of: int | None,
    settings: Settings,
    k: int,
    filters: Filters = NO_FILTERS,
    facts: RowFacts | None = None,
) -> list[tuple[Fused, bool]]:
    """Weighted RRF, the date leg, thread context, then ``k - slots`` fused rows and
    ``slots`` recency slots (``Settings.reserve_slots``). ``facts``: the rows' thread
    followers and recency keys as far as they were looked up already (``run_legs``)."""
    if facts is None:
        facts = RowFacts(store, scope, as_of, settings, k, filters)
    with stage(stages.FUSION):
        weights = {leg: settings.weight(leg) for leg in LEGS}
        fused = rrf(legs.as_dict(), weights, settings.gamma)
        if settings.w_date > 0 and legs.dated:
            fused = add_date_leg(
                fused, legs.dated, settings.w_date, settings.gamma, settings.candidates
            )
        if settings.thread_weight > 0 and fused:
            # Only the first C fused rows lend: a row further down has little to lend, and each
            # lender costs an index walk (measured: no recall lost, a third of the time).
            lenders = [f.id for f in fused[: settings.candidates]]
            followers = facts.followers(lenders)
            fused = add_thread_context(fused, followers, settings.thread_weight)
        slots = settings.reserve_slots(k)
        remaining = [f.id for f in fused[k - slots :]]
        keys = facts.recency_keys(remaining) if slots else {}
        selection = select_with_reserve(
            fused,
            k,
            slots,
            recency_key=lambda row: recency(*keys[row], undated_last=settings.undated_last),
            unmatched_fill=lambda exclude, n: store.latest_unmatched(
                scope, exclude, as_of, n, filters=filters
            ),
        )
        return [(f, False) for f in selection.fused] + [(f, True) for f in selection.reserved]


def to_hits(store: Store, scope: str, chosen: list[tuple[Fused, bool]]) -> list[Hit]:
    with stage(stages.RECORDS):
        records = store.get(scope, [f.id for f, _ in chosen])
    present = [(f, reserved) for f, reserved in chosen if f.id in records]
    return [
        Hit(records[f.id], rank, f.score, dict(f.leg_ranks), reserved)
        for rank, (f, reserved) in enumerate(present, start=1)
    ]
