"""``Memory``: the public Python API over a store, an encoder and the read-path settings.

from mempp import Memory

with Memory("org.db") as memory:
    memory.add("We ship on Friday.", author="Ana", date="2024-03-01")
    for hit in memory.search("when do we ship?", as_of="2024-03-31"):
        print(hit.rank, hit.record.date, hit.record.text)
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from mempp import validate
from mempp.context import enable as enable_contexts
from mempp.context import fill as fill_contexts
from mempp.dates import DateLike, key_to_datetime, parse_as_of
from mempp.encoders import Embedder, default_embedder, mismatch
from mempp.errors import InvalidDate, InvalidInput, RecordNotFound
from mempp.filters import NO_FILTERS, Filters
from mempp.records import AddResult, Document, Hit, Record
from mempp.reembed import DEFAULT_BATCH as DEFAULT_REEMBED_BATCH
from mempp.reembed import ReembedReport
from mempp.reembed import reembed as reembed_store
from mempp.search import stages
from mempp.search.corrections import with_corrections
from mempp.search.evidence import Evidence, EvidenceStyle, append_facts, render_evidence
from mempp.search.packing import PackingOptions
from mempp.search.question_vectors import RECENT_QUESTIONS, QuestionVectors
from mempp.search.retrieval import LegLists, fuse_and_select, run_legs, scope_bound, to_hits
from mempp.search.row_facts import RowFacts
from mempp.search.stages import stage
from mempp.settings import Settings, preset
from mempp.store import Store, open_store
from mempp.store.context import ContextRule, context_store
from mempp.store.indexes import require as require_indexes
from mempp.store.verify import Check
from mempp.threads.background import HelperThreads

if TYPE_CHECKING:  # the LLM modules load only when ask() runs
    from mempp.llm import LLMClient
    from mempp.llm.answer import Answer
    from mempp.llm.consolidate import UndoReport
    from mempp.llm.graph import GraphOptions
    from mempp.timeline import Changes, Correction, HistoryEntry
    from mempp.transfer.dump import DumpReport
    from mempp.transfer.restore import RestoreReport

DocumentLike = Document | Mapping[str, Any] | str
DEFAULT_SCOPE = "default"
DEFAULT_BATCH = 64


class Memory:
    """A non-destructive memory: documents kept whole, chosen at read time.

    ``location`` is a SQLite file path (created if missing), a ``postgresql://`` URL, or a
    :class:`Store` already open, which Memories of several scopes may then share (closing
    any of them closes it; a server closes it once, at shutdown).
    ``scope`` isolates tenants sharing one store. ``embedder`` defaults to the local
    all-MiniLM-L6-v2, loaded on first use. ``settings`` is a :class:`Settings` or a preset name.
    ``recent_questions``: how many recent questions' vectors are held, so that one asked again
    (the next page, another as-of bound) skips the encoder; 0 holds none.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | Store = "mempp.db",
        *,
        scope: str = DEFAULT_SCOPE,
        embedder: Embedder | None = None,
        settings: Settings | str = "default",
        recent_questions: int = RECENT_QUESTIONS,
    ) -> None:
        self.scope = validate.scope(scope)
        if not (validate.is_int(recent_questions) and 0 <= recent_questions <= 1 << 20):
            raise InvalidInput(
                f"must be an integer from 0 to {1 << 20}, got {validate.shown(recent_questions)}",
                field="recent_questions",
            )
        self.settings = _resolve_settings(settings)
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._encoder_bound = False
        self._questions = QuestionVectors(recent_questions)
        self._store: Store = (
            location if isinstance(location, Store) else open_store(validate.location(location))
        )
        # The thread a search's legs that need no vector run on while the caller encodes
        # the question (kept alive: no thread start per search); ended by close(), or when
        # this Memory is collected unclosed.
        self._beside = HelperThreads("mempp-legs")
        weakref.finalize(self, self._beside.close)

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        self._beside.close()
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def store(self) -> Store:
        return self._store

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            # warm() in one thread and a search in another must not load the weights twice.
            with self._embedder_lock:
                if self._embedder is None:
                    self._embedder = default_embedder()
        return self._embedder

    def __len__(self) -> int:
        return self._store.count(self.scope)

    def warm(self) -> None:
        """Load now what the first search would load: the encoder, and the store's in-RAM
        indexes for this scope (SQLite's vectors, and from 20,000 records its BM25 replica;
        PostgreSQL's BM25 replica; on both, the context index's copy when it is on). The first
        search is then as fast as later ones. It may
        run in a thread of its own, e.g. while a server starts, as searches and writes go
        on; closing the store meanwhile makes it raise ``StoreError``."""
        if self.settings.w_vec > 0:
            self.embedder  # noqa: B018 - loads the weights
        self._store.warm(self.scope)

    # -- write path -------------------------------------------------------------------
    def add(
        self,
        text: str,
        *,
        author: str | None = None,
        date: DateLike = None,
        tags: Iterable[str] | str = (),
        source: str | None = None,
        thread: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AddResult:
        """Store one document. Returns its new id, or why it was skipped (empty/duplicate).

        ``thread`` names the conversation, channel thread, e-mail thread or ticket the document
        belongs to; at read time a row lends context to the rows after it in its thread.
        A single string ``tags`` is one tag. ``metadata`` (a JSON-able mapping) is kept with
        the record and exported, not searched.
        """
        doc = Document.create(
            text,
            author=author,
            date=date,
            tags=tags,
            source=source,
            thread=thread,
            metadata=metadata,
        )
        return self._write_batch([doc])[0]

    def add_many(
        self,
        documents: Iterable[DocumentLike],
        *,
        batch_size: int = DEFAULT_BATCH,
        progress: Callable[[int], None] | None = None,
    ) -> list[AddResult]:
        """Store many documents, one transaction per batch of ``batch_size``.

        Each item is a :class:`Document`, a mapping with ``text`` and optional ``author``,
        ``date``, ``tags``, ``source``, ``thread``, or a plain string. All items are validated
        before anything is written, so a bad item stores nothing; the error names it
        (``items[3].tags``). ``progress(n)`` is called after each batch with the number of
        documents it held.
        """
        validate.count(batch_size, "batch_size")
        if progress is not None and not callable(progress):
            raise InvalidInput("must be callable or None", field="progress")
        if isinstance(documents, str | bytes | Mapping | Document) or not isinstance(
            documents, Iterable
        ):
            raise InvalidInput(
                f"must be an iterable of documents, got {type(documents).__name__}",
                field="documents",
            )
        docs: list[Document] = []
        for position, item in enumerate(documents):
            try:
                docs.append(as_document(item))
            except InvalidInput as exc:
                raise exc.within(f"items[{position}]") from None
        results: list[AddResult] = []
        for start in range(0, len(docs), batch_size):
            batch = docs[start : start + batch_size]
            results.extend(self._write_batch(batch))
            if progress is not None:
                progress(len(batch))
        return results

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """Load many documents at once: on PostgreSQL the HNSW index is dropped and built
        once when the block ends, instead of being updated row by row (searches inside the
        block stay exact, and slower). Use it when the load is a large part of the store:
        the build covers every row. If the process dies inside it, the next one to open the
        store builds the index. On SQLite nothing changes.

            with memory.bulk_load():
                memory.add_many(documents, batch_size=2000)
        """
        with self._store.bulk_load():
            yield

    def _write_batch(self, docs: Sequence[Document]) -> list[AddResult]:
        """Skip empties and known duplicates, embed the rest, insert in one transaction."""
        results: list[AddResult | None] = [
            AddResult(None, "empty") if doc.is_empty else None for doc in docs
        ]
        candidates = [i for i, doc in enumerate(docs) if results[i] is None]
        if not candidates:
            return [r for r in results if r is not None]
        duplicates = self._store.find_duplicates(self.scope, [docs[i] for i in candidates])
        for i, duplicate_of in zip(candidates, duplicates, strict=True):
            if duplicate_of is not None:
                results[i] = AddResult(None, "duplicate", duplicate_of)
        fresh = [i for i in candidates if results[i] is None]
        if fresh:
            embedder = self.embedder
            vectors = embedder.embed([docs[i].text for i in fresh])
            if not self._encoder_bound:
                self._store.bind_encoder(embedder.name, embedder.dim)
                self._encoder_bound = True
            elif (bound := self._store.encoder()) != (embedder.name, embedder.dim):
                # Re-encoded by another process since (mempp reembed): refuse, as on open.
                assert bound is not None
                raise mismatch(self._store.location, bound, embedder.name, embedder.dim)
            with stage(stages.WRITE, rows=len(fresh)):
                # With the context index on, the rows' contexts are written in the rows' own
                # transaction (a crash takes both or neither): the sum rule's from the
                # vectors, the text rule's encoded there by this encoder.
                stored = self._store.insert(
                    self.scope, [docs[i] for i in fresh], vectors, encode_context=embedder.embed
                )
            for i, result in zip(fresh, stored, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    # -- read path --------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        as_of: DateLike = None,
        k: int | None = None,
        settings: Settings | str | None = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
        filters: Filters | None = None,
    ) -> list[Hit]:
        """The read path: scope, three legs, weighted RRF, the date leg, thread context, recency
        slots. Best first. ``as_of`` bounds the scope (a bare date includes that whole day);
        without it, settings with ``as_of_in_question`` take the bound from an "as of <date>"
        phrase in the query.

        The filters narrow the scope before ranking, like ``as_of`` (see
        :class:`mempp.filters.Filters`): ``known_at`` (ingested by then: what the memory held
        on that date), ``since`` (event date from then on), ``author``, ``tags`` with
        ``tags_mode`` ``"any"``/``"all"``, ``thread``, ``source`` (a prefix). Pass them one by
        one, or prebuilt as ``filters``, not both.
        """
        scope_filters = _filters(filters, known_at, since, author, tags, tags_mode, thread, source)
        config = self.settings if settings is None else _resolve_settings(settings)
        k = validate.count(config.k if k is None else k, "k", maximum=validate.MAX_K)
        question = validate.query(query)
        bound = scope_bound(question, _as_of_key(as_of), config)
        scope_filters.check_with_as_of(bound)
        facts = RowFacts(self._store, self.scope, bound, config, k, scope_filters)
        with self._store.reading():  # one read: on a standby that has every answered write
            legs = self.legs(
                question, as_of=bound, settings=config, filters=scope_filters, facts=facts
            )
            chosen = fuse_and_select(
                self._store, self.scope, legs, bound, config, k, scope_filters, facts
            )
            hits = to_hits(self._store, self.scope, chosen)
            return with_corrections(self._store, self.scope, hits, bound, scope_filters.known_at)

    def effective_as_of(
        self, query: str, *, as_of: DateLike = None, settings: Settings | str | None = None
    ) -> DateLike:
        """The as-of bound a search of ``query`` applies: ``as_of`` itself when given; else,
        under settings with ``as_of_in_question``, the last day its "as of <date>" phrase
        covers (a month names its last day); else ``None``. The answer prompt and the graph
        facts use this, so they see the same bound as the search."""
        if as_of is not None:
            return as_of
        config = self.settings if settings is None else _resolve_settings(settings)
        bound = scope_bound(validate.query(query), None, config)
        return None if bound is None else key_to_datetime(bound).date()

    def legs(
        self,
        question: str,
        *,
        as_of: int | None,
        settings: Settings,
        filters: Filters = NO_FILTERS,
        facts: RowFacts | None = None,
    ) -> LegLists:
        """Run the three legs alone (used by ``search`` and by the benchmarks). The question
        is encoded while the legs that need no vector run (and ``facts`` looks up their rows
        for the fusion meanwhile). Settings needing an optional index the store lacks fail
        first (``IndexMissing``), before the encoder loads."""
        require_indexes(settings, self._store)
        wanted = settings.w_vec > 0 or settings.w_ctx > 0
        vector = self._query_encoding(question) if wanted else None
        return run_legs(
            self._store,
            self.scope,
            question,
            vector,
            as_of,
            settings,
            filters,
            facts,
            beside=self._beside.submit,
        )

    def _query_encoding(self, question: str) -> np.ndarray | Callable[[], np.ndarray] | None:
        """The call that encodes ``question`` (its vector itself when it was asked lately), or
        None while nothing is stored. The encoder is loaded and checked against the store's
        here, so a mismatch fails before any leg."""
        stored = self._store.encoder()
        if stored is None:  # nothing stored yet: no vectors to compare with
            return None
        embedder = self.embedder
        if stored != (embedder.name, embedder.dim):
            raise mismatch(self._store.location, stored, embedder.name, embedder.dim)
        held = self._questions.get(embedder.name, question)
        if held is not None:  # asked again: no encoder, and no thread to run it on
            return held

        # Tokenized here, on the caller's thread, where the encoder can (``embed_later``):
        # the thread the encoding runs on then starts with the forward pass.
        embed_later = getattr(embedder, "embed_later", None)
        finish = embed_later([question]) if embed_later is not None else None

        def encode() -> np.ndarray:
            vector = embedder.embed([question]) if finish is None else finish()
            return self._questions.put(embedder.name, question, vector[0])

        return encode

    def evidence(
        self,
        query: str,
        *,
        as_of: DateLike = None,
        k: int | None = None,
        budget: int | None = None,
        style: EvidenceStyle = "headers",
        settings: Settings | str | None = None,
        graph: GraphOptions | None = None,
        packing: PackingOptions | None = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
        filters: Filters | None = None,
    ) -> Evidence:
        """Search, then render the hits as a dated, attributed evidence block.

        With ``packing`` (see :mod:`mempp.search.packing`), long records below the best-ranked are
        shown as query-focused excerpts, each naming its record id, so more records fit the
        budget. With ``graph`` (Mem^g++, see :mod:`mempp.llm.graph`), one LLM call finds the
        entities the query names and at most 5 related triples follow the rows, under the
        same budget. The filters are those of :meth:`search` (graph facts honour ``as_of``
        only).
        """
        if budget is not None:
            validate.count(budget, "budget")
        if style not in ("headers", "paper"):
            raise InvalidInput(
                f"must be 'headers' or 'paper', got {validate.shown(style)}", field="style"
            )
        if packing is not None and not isinstance(packing, PackingOptions):
            raise InvalidInput("must be PackingOptions or None", field="packing")
        scope_filters = _filters(filters, known_at, since, author, tags, tags_mode, thread, source)
        hits = self.search(query, as_of=as_of, k=k, settings=settings, filters=scope_filters)
        with stage(stages.EVIDENCE):
            evidence = render_evidence(
                hits, budget=budget, style=style, packing=packing, query=validate.query(query)
            )
        if graph is None:
            return evidence
        from mempp.llm.graph import facts_for_evidence

        bound = self.effective_as_of(query, as_of=as_of, settings=settings)
        facts = facts_for_evidence(self, validate.query(query), graph, bound)
        return append_facts(evidence, facts, budget=budget)

    def ask(
        self,
        question: str,
        *,
        as_of: DateLike = None,
        k: int = 50,
        llm: LLMClient | None = None,
        budget: int = 40_000,
        packing: PackingOptions | None = None,
        known_at: DateLike = None,
        since: DateLike = None,
        author: str | None = None,
        tags: Iterable[str] | None = None,
        tags_mode: str = "any",
        thread: str | None = None,
        source: str | None = None,
        filters: Filters | None = None,
    ) -> Answer:
        """Answer from this memory's evidence with a language model, citing record ids.

        See :func:`mempp.llm.answer.ask`. ``llm`` defaults to ``LLMClient.from_env()``; with no
        evidence the answer is ``"not in memory"`` and no model is called. The filters are
        those of :meth:`search`.
        """
        from mempp.llm import LLMClient
        from mempp.llm.answer import ask

        validate.query(question, "question")
        validate.count(k, "k", maximum=validate.MAX_K)
        validate.count(budget, "budget")
        if llm is not None and not isinstance(llm, LLMClient):
            raise InvalidInput("must be an LLMClient or None", field="llm")
        scope_filters = _filters(filters, known_at, since, author, tags, tags_mode, thread, source)
        return ask(
            self,
            question,
            as_of=as_of,
            k=k,
            llm=llm,
            budget=budget,
            packing=packing,
            filters=scope_filters,
        )

    def records(self, *, active_only: bool = False, page: int = 1000) -> Iterator[Record]:
        """Every record of this scope in the order written (archived ones too, unless
        ``active_only``), read a page at a time: rows written meanwhile are included."""
        validate.count(page, "page", maximum=validate.MAX_PAGE)
        after = 0
        while True:
            batch = self._store.records_after(self.scope, after, page, active_only=active_only)
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].id

    def get(self, record_id: int) -> Record:
        """The record with this id (any state). Raises ``RecordNotFound``."""
        validate.record_id(record_id)
        with self._store.reading():
            found = self._store.get(self.scope, [record_id])
        if record_id not in found:
            raise RecordNotFound(f"no record {record_id} in scope {self.scope!r}")
        return found[record_id]

    # -- integrity --------------------------------------------------------------------
    def verify(self) -> list[Check]:
        """Check the whole store (every scope): the engine's own integrity check, the
        full-text index against the records, a vector for every record, the append-only
        triggers. See docs/architecture.md, "What the database enforces"."""
        return self._store.verify()  # type: ignore[attr-defined, no-any-return]

    # -- optional indexes (mempp.store.indexes) --------------------------------------------
    def indexes(self) -> tuple[str, ...]:
        """The optional indexes this store has enabled (every scope shares them)."""
        return self._store.indexes()

    def enable_index(
        self, name: str, *, progress: Callable[[int, int], None] | None = None
    ) -> bool:
        """Build optional index ``name`` (``"keyword"``: the keyword leg's, which ``w_kw > 0``
        needs) over every stored row in one transaction, and keep it on every write from then
        on. ``progress(done, total)`` is told the rows indexed. False when it was already
        enabled. ``"context"`` (the context leg's, which ``w_ctx > 0`` needs) is then made
        here, a page of records at a time, outside that transaction: enabling it again
        finishes an interrupted run (see :meth:`enable_context`)."""
        name = validate.clean_text(name, "index")
        built = self._store.enable_index(name, progress=progress)
        if name == "context":
            enable_contexts(self._store, self.embedder)
        return built

    def disable_index(self, name: str) -> bool:
        """Drop optional index ``name``; searches needing it then fail until it is enabled
        again. False when it was not enabled."""
        return self._store.disable_index(validate.clean_text(name, "index"))

    def reembed(
        self,
        embedder: Embedder,
        *,
        batch: int = DEFAULT_REEMBED_BATCH,
        restart: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReembedReport:
        """Re-encode the whole store (every scope) with ``embedder`` and switch it over in one
        step; this Memory then uses ``embedder``. Searches, here and in other processes, use
        the old vectors until the switch. Resumable: a run stopped at any point continues
        from the rows it had not staged when called again with the same encoder. See
        :mod:`mempp.reembed`."""
        report = reembed_store(
            self._store, embedder, batch=batch, restart=restart, progress=progress
        )
        with self._embedder_lock:
            self._embedder = embedder  # questions are held per encoder name: none go stale
            self._encoder_bound = True
        contexts = context_store(self._store)
        if contexts is not None and contexts.context_encoder() != (embedder.name, embedder.dim):
            rule = contexts.context_rule()
            self._store.disable_index("context")  # the old encoder's contexts: made again
            enable_contexts(contexts, embedder, rule=rule)
        return report

    def enable_context(self, depth: int | None = None, rule: ContextRule | None = None) -> int:
        """Enable the optional index ``context``: each record gets a second vector over itself
        and its ``depth`` predecessors in its thread (``mempp.store.context`` says which;
        default 2, or the depth it had), made by ``rule`` (``ContextRule``: the sum rule adds
        the stored vectors, no encoding; the text rule encodes the texts; default: the rule
        it had, else ``ContextRule()``, the sum rule at depth 2, decay 0.5), now for the
        records stored and on every later write, in its own transaction. Searches read it
        under settings with ``w_ctx > 0``. Returns how many contexts were made; another rule
        than before makes them all again. ``disable_index("context")`` drops it."""
        return enable_contexts(self._store, self.embedder, depth, rule)

    # -- snapshots (mempp.transfer.dump, mempp.transfer.restore) ---------------------------
    def dump(
        self,
        out: str | os.PathLike[str] | TextIO,
        *,
        scopes: Sequence[str] | None = None,
        vectors: bool = True,
    ) -> DumpReport:
        """Write a lossless snapshot of the whole store (every scope; or only ``scopes``) to
        ``out``, a path or a text stream: ids, texts, dates, ingest times, states, links,
        metadata, the change log, redaction tombstones, API keys' hashes, the encoder and,
        unless ``vectors=False``, the vectors. A path is written aside and renamed when
        complete. See :mod:`mempp.transfer.dump`."""
        from mempp.transfer.dump import write_dump

        chosen = None if scopes is None else [validate.scope(s, "scopes") for s in scopes]
        if not isinstance(out, str | os.PathLike):
            return write_dump(self._store, out, scopes=chosen, vectors=vectors)
        target = os.fspath(out)
        partial = f"{target}.partial"
        try:
            with open(partial, "w", encoding="utf-8", newline="\n") as handle:
                report = write_dump(self._store, handle, scopes=chosen, vectors=vectors)
            os.replace(partial, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise
        return report

    def restore(self, path: str | os.PathLike[str]) -> RestoreReport:
        """Restore a snapshot of :meth:`dump` into this store, which must be empty (any
        engine), id for id; every scope of the snapshot is restored. Checked whole before
        anything is written, then written in one transaction. A snapshot without vectors is
        encoded again by this Memory's encoder, which must be the snapshot's. See
        :mod:`mempp.transfer.restore`."""
        from mempp.transfer.restore import read_header, restore_dump

        location = validate.location(path)
        embedder = self._embedder
        if embedder is None and not read_header(location).vectors:
            embedder = self.embedder
        report = restore_dump(self._store, location, embedder=embedder)
        contexts = context_store(self._store)
        if contexts is not None:  # a snapshot carries no contexts: they are encoded again
            fill_contexts(contexts, self.embedder)
        return report

    # -- time and truth (mempp.timeline) ------------------------------------------------
    def history(
        self,
        query: str | None = None,
        *,
        record_id: int | None = None,
        as_of: DateLike = None,
        limit: int = 50,
    ) -> list[HistoryEntry]:
        """The records about one subject (``record_id``, or the best hit of ``query``), oldest
        event first, each with its state and what superseded it. See
        :func:`mempp.timeline.history`."""
        from mempp.timeline import history

        return history(self, query, record_id=record_id, as_of=as_of, limit=limit)

    def changes(
        self,
        since: DateLike,
        until: DateLike,
        *,
        query: str | None = None,
        known_since: DateLike = None,
        known_until: DateLike = None,
        limit: int = 200,
    ) -> Changes:
        """What entered the record between two event dates, what it superseded, and what was
        archived or redacted meanwhile. See :func:`mempp.timeline.changes`."""
        from mempp.timeline import changes

        return changes(
            self,
            since,
            until,
            query=query,
            known_since=known_since,
            known_until=known_until,
            limit=limit,
        )

    def supersede(
        self, old_id: int, *, by: int, reason: str, actor: str | None = None
    ) -> Correction:
        """Record that ``by`` supersedes ``old_id`` (logged, attributed, undoable)."""
        from mempp.timeline import supersede

        return supersede(self, old_id, by=by, reason=reason, actor=actor)

    def archive(self, record_id: int, *, reason: str, actor: str | None = None) -> Correction:
        """Take a record out of every search (logged, attributed, undoable)."""
        from mempp.timeline import archive

        return archive(self, record_id, reason=reason, actor=actor)

    def redact(self, record_id: int, *, reason: str, actor: str | None = None) -> Correction:
        """Erase a record's content for good, keeping a tombstone (logged, not undoable).
        See :func:`mempp.timeline.redact`."""
        from mempp.timeline import redact

        correction = redact(self, record_id, reason=reason, actor=actor)
        contexts = context_store(self._store)
        if contexts is not None:  # the contexts that read the erased text, encoded again
            fill_contexts(contexts, self.embedder)
        return correction

    def corrections(self) -> list[Correction]:
        """Every manual correction of this scope, oldest first."""
        from mempp.timeline import corrections

        return corrections(self)

    def undo(self, run_id: int) -> UndoReport:
        """Undo a correction or a consolidation run (an erasure cannot be undone)."""
        from mempp.llm.consolidate import undo

        return undo(self, run_id)


def as_document(item: DocumentLike) -> Document:
    """Validate one incoming item (Document, mapping or string) into a :class:`Document`."""
    if isinstance(item, Document):
        return item
    if isinstance(item, str):
        return Document.create(item)
    if isinstance(item, Mapping):
        return Document.from_fields(item)
    raise InvalidInput(f"cannot make a document from {type(item).__name__}")


def _as_of_key(as_of: object) -> int | None:
    try:
        return parse_as_of(as_of)  # type: ignore[arg-type]
    except InvalidDate as exc:
        raise exc.within("as_of") from None


def _filters(
    filters: Filters | None,
    known_at: DateLike,
    since: DateLike,
    author: str | None,
    tags: Iterable[str] | None,
    tags_mode: str,
    thread: str | None,
    source: str | None,
) -> Filters:
    """The search's filters: ``filters`` as given, or built from the keywords (not both)."""
    built = Filters.create(
        known_at=known_at,
        since=since,
        author=author,
        tags=tags,
        tags_mode=tags_mode,
        thread=thread,
        source=source,
    )
    if filters is None:
        return built
    if not isinstance(filters, Filters):
        raise InvalidInput(f"filters must be a Filters, got {type(filters).__name__}")
    if not built.is_empty:
        raise InvalidInput("pass filters either one by one or as filters=, not both")
    return filters


def _resolve_settings(settings: Settings | str) -> Settings:
    if isinstance(settings, Settings):
        return settings
    if isinstance(settings, str):
        try:
            return preset(settings)
        except InvalidInput as exc:
            raise exc.within("settings") from None
    raise InvalidInput(
        f"must be a Settings or a preset name, got {type(settings).__name__}", field="settings"
    )
