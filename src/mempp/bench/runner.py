"""One benchmark run: load, ingest (or reuse), run every system on every question, score.

The result is a plain JSON-able dictionary (see ``docs/benchmarks.md``); ``report`` writes it
out. Without ``RunOptions.llm`` no language model is called. Answers can come from two places,
for the systems named in ``answer_systems`` (default: the paper preset, ``mempp-default`` and
any LLM ablation run):

* ``RunOptions.llm`` (an endpoint): the built-in answer + judge step of
  :mod:`mempp.bench.llm_eval`, run after retrieval, questions in parallel; the LLM ablations
  (``mempp-consolidated``, ``mempp-graph``, :mod:`mempp.bench.ablations`; ``mempp-fact-index``,
  :mod:`mempp.bench.facts`) need it too.
* an ``AnswerHook``, called per question with the question and the system's rendered evidence
  (uncut: the answerer applies its own window, as the OrgMemBench harness does); whatever
  mapping it returns is stored in the question's row (a numeric ``"score"`` is also aggregated
  as ``answer_score``). A hook replaces the built-in answer + judge step.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np

from mempp import context as contexts
from mempp.bench import ablations, cache, facts, llm_eval, supersession
from mempp.bench.aggregate import aggregate, paired_delta
from mempp.bench.chunking import TOKENIZER_NAME, TokenSpans, chunk_history, word_piece_spans
from mempp.bench.datasets import Benchmark, Question
from mempp.bench.metrics import (
    as_budgeted,
    ndcg_at,
    recall_at,
    reciprocal_rank,
    text_visible,
    window_chars,
    window_recall,
)
from mempp.bench.retrieve import (
    FullContext,
    GoldSizes,
    MemppRetriever,
    RagIndex,
    Retrieved,
    clean_question,
    date_key,
)
from mempp.bench.systems import System
from mempp.dates import parse_as_of
from mempp.encoders import Embedder
from mempp.errors import EncoderMismatch, InvalidInput
from mempp.search.evidence import EvidenceStyle
from mempp.search.packing import PackingOptions
from mempp.search.retrieval import LegLists
from mempp.settings import Settings
from mempp.store import Store, indexes, open_store

AnswerHook = Callable[[Question, str], Mapping[str, Any]]

DEFAULT_KS = (1, 5, 10, 20, 50)
DEFAULT_SWEEP = (5, 10, 20, 30, 50, 75, 100)
DEFAULT_WINDOW = 40_000
REFERENCE_SYSTEM = "mempp-paper"
TOP_ITEMS = 10
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(slots=True)
class RunOptions:
    """How to score. Nothing here may depend on a question or a category."""

    ks: tuple[int, ...] = DEFAULT_KS
    sweep: tuple[int, ...] = DEFAULT_SWEEP
    window: int = DEFAULT_WINDOW
    style: EvidenceStyle = "headers"
    rag_limit: int = 50
    resamples: int = 2000
    seed: int = 0
    limit: int | None = None
    progress: bool = True
    answer_hook: AnswerHook | None = None
    # None: the paper preset, mempp-default and any LLM ablation run (see llm_eval).
    answer_systems: tuple[str, ...] | None = None
    llm: llm_eval.LLMOptions | None = None  # an endpoint: answer + judge, LLM ablations
    extra: dict[str, Any] = field(default_factory=dict)  # recorded as is (e.g. the command)
    # Another engine (a PostgreSQL URL): the mempp systems read a copy of the cached store there.
    engine_url: str | None = None
    # mempp-fact-index: documents asked for facts this run at most (None: every pending one).
    fact_limit: int | None = None
    # OrgMemBench: run each mempp system again over a copy with the benchmark's version
    # chains written as supersessions, and pair the two (mempp.bench.supersession).
    supersession: bool = False

    @property
    def judges(self) -> bool:
        """Whether the built-in answer + judge step runs (an endpoint, and no hook)."""
        return self.llm is not None and self.answer_hook is None


def load_benchmark(name: str, root: Path, **options: Any) -> Benchmark:
    """Dispatch to the benchmark's loader (options are loader keyword arguments)."""
    if name == "orgmembench":
        from mempp.bench import orgmembench

        return orgmembench.load(root, **options)
    if name == "locomo":
        from mempp.bench import locomo

        return locomo.load(root, **options)
    if name == "longmemeval":
        from mempp.bench import longmemeval

        return longmemeval.load(root, **options)
    raise ValueError(f"unknown benchmark {name!r}")


def metric_names(options: RunOptions, benchmark: Benchmark, systems: Sequence[System]) -> list[str]:
    names = [f"recall@{k}" for k in options.ks] + ["mrr", "ndcg@10", "window", "window_full"]
    if any(_shows_records(s) for s in systems):
        names.append("gold_visible")
    if any(q.gold_groups for q in benchmark.questions):
        names += [f"session_recall@{k}" for k in options.ks]
    if any(s.kind == "mempp" for s in systems):
        names += [f"sweep_recall@{k}" for k in options.sweep]
        names += [f"sweep_window@{k}" for k in options.sweep]
    if options.answer_hook is not None or options.judges:
        names.append("answer_score")
    if options.judges and benchmark.name == "locomo":
        names += ["answer_f1", "answer_bleu1"]
    return names


def _shows_records(system: System) -> bool:
    """Whether the system's entries are records of the benchmark store, so that the share of
    gold text it shows is defined (not for chunks, nor for a consolidated copy's merged rows)."""
    return system.kind in ("mempp", "full") and system.ablation != "consolidated"


def _score(
    question: Question,
    result: Retrieved,
    options: RunOptions,
    groups: Mapping[tuple[str, str], str | None],
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    gold = question.gold
    row: dict[str, Any] = {"n_gold": len(gold)}
    # Full context does not rank: its ranking metrics are recorded as missing, not as 0.
    row.update(dict.fromkeys([f"recall@{k}" for k in options.ks] + ["mrr", "ndcg@10"]))
    if result.ranked is not None:
        for k in options.ks:
            row[f"recall@{k}"] = recall_at(result.ranked, gold, k)
        row["mrr"] = reciprocal_rank(result.ranked, gold)
        row["ndcg@10"] = ndcg_at(result.ranked, gold, 10)
        if question.gold_groups:
            ranked_groups = [
                frozenset(g for i in entry if (g := groups.get((question.scope, i))) is not None)
                for entry in result.ranked
            ]
            for k in options.ks:
                row[f"session_recall@{k}"] = recall_at(ranked_groups, question.gold_groups, k)
    # The window is a budget: correction notes within their allowance are not counted.
    placed = as_budgeted(result.window, options.window)
    inside = window_recall(placed, gold, options.window, result.parts)
    row["window"], row["window_full"] = inside if inside else (None, None)
    if sizes is not None:
        row["gold_visible"] = text_visible(placed, gold, options.window, sizes)
    row["window_entries"] = sum(entry.offset < options.window for entry in placed)
    return row


def _timing(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {}
    data = np.asarray(seconds) * 1000.0
    return {
        "total_s": round(float(data.sum()) / 1000.0, 3),
        "mean_ms": round(float(data.mean()), 2),
        "p50_ms": round(float(np.percentile(data, 50)), 2),
        "p95_ms": round(float(np.percentile(data, 95)), 2),
    }


def run(
    benchmark: Benchmark,
    systems: Sequence[System],
    *,
    embedder: Embedder,
    cache_dir: Path,
    options: RunOptions | None = None,
    spans: TokenSpans | None = None,
    tokenizer_name: str | None = None,
) -> dict[str, Any]:
    """Run ``systems`` on ``benchmark`` and return the results dictionary."""
    from tqdm import tqdm

    options = options or RunOptions()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    clock = time.perf_counter()
    timings: dict[str, Any] = {}
    if options.llm is None and any(s.ablation for s in systems):
        names = ", ".join(s.name for s in systems if s.ablation)
        raise InvalidInput(f"{names}: LLM ablations need RunOptions.llm (an endpoint)")
    if options.supersession:
        if benchmark.name != "orgmembench" or options.engine_url is not None:
            raise InvalidInput(
                "--supersession-layer: OrgMemBench on the SQLite store only (its version "
                "chains are that benchmark's)"
            )
        systems = [*systems, *supersession.twins(systems)]
    questions = benchmark.questions[: options.limit] if options.limit else benchmark.questions
    answered = llm_eval.answered_systems(options.answer_systems, systems)

    ingested = cache.ingest(benchmark, embedder, cache_dir, progress=options.progress)
    timings["ingest_s"] = round(time.perf_counter() - clock, 3)
    clients = llm_eval.BenchClients(options.llm, cache_dir) if options.llm is not None else None
    stores: list[Store] = []
    fact_index: facts.FactIndex | None = None
    llm_info: dict[str, Any] = {}
    layer_folder: TemporaryDirectory[str] | None = None
    layer_info: dict[str, Any] | None = None
    try:
        store = open_store(ingested.path)
        stores.append(store)
        if store.encoder() not in (None, (embedder.name, embedder.dim)):
            raise EncoderMismatch(f"{ingested.path} was filled by another encoder")
        if options.engine_url is not None:
            clock = time.perf_counter()
            store = cache.copy_store(store, list(benchmark.scopes), options.engine_url)
            stores.append(store)
            timings["engine_copy_s"] = round(time.perf_counter() - clock, 3)
        # The optional indexes the systems' settings read (mempp.store.indexes): the bench's
        # own store opts in, as a user's would, once (the build is cached with it).
        for name in sorted({n for s in systems if s.settings for n in indexes.needed(s.settings)}):
            clock = time.perf_counter()
            if store.enable_index(name):
                timings[f"index_{name}_s"] = round(time.perf_counter() - clock, 3)
            if name == "context":  # its vectors need the encoder (mempp.context)
                contexts.enable(store, embedder)
                timings[f"index_{name}_s"] = round(time.perf_counter() - clock, 3)
        records_of_scope: dict[str, list[int]] = {}
        for (scope, _), record in ingested.item_record.items():
            if record is not None:
                records_of_scope.setdefault(scope, []).append(record)
        groups = {(item.scope, item.id): item.group for item in benchmark.items}
        gold_sizes = GoldSizes(store, ingested.item_record)
        clock = time.perf_counter()
        rag = _rag_indexes(benchmark, systems, embedder, ingested.path.parent, spans, options)
        timings["rag_index_s"] = round(time.perf_counter() - clock, 3)
        retrievers: dict[str | None, MemppRetriever] = {
            None: MemppRetriever(store, ingested.record_items)
        }
        if options.supersession:
            clock = time.perf_counter()
            layer_folder = TemporaryDirectory(prefix="mempp-supersession-")
            layered, layer = supersession.layered_copy(benchmark, ingested, Path(layer_folder.name))
            stores.append(open_store(layered))
            retrievers["supersession"] = MemppRetriever(stores[-1], ingested.record_items)
            layer_info = layer.to_dict()
            timings["supersession_layer_s"] = round(time.perf_counter() - clock, 3)
        graph_store: Store | None = None
        if clients is not None:
            # The ablations get their own copies of the store; the one above is never written.
            scopes = list(dict.fromkeys(q.scope for q in questions))
            width = clients.options.concurrency
            if any(s.ablation == "consolidated" for s in systems):
                clock = time.perf_counter()
                consolidated = ablations.consolidated_store(
                    ingested,
                    scopes,
                    clients.memory,
                    embedder,
                    max_workers=width,
                    progress=options.progress,
                )
                timings["consolidation_s"] = round(time.perf_counter() - clock, 3)
                stores.append(open_store(consolidated.path))
                retrievers["consolidated"] = MemppRetriever(stores[-1], consolidated.record_items)
                llm_info["consolidation"] = consolidated.to_dict()
            if any(s.ablation == "graph" for s in systems):
                clock = time.perf_counter()
                graph = ablations.graph_store(
                    ingested, scopes, clients.memory, max_workers=width, progress=options.progress
                )
                timings["graph_extraction_s"] = round(time.perf_counter() - clock, 3)
                graph_store = open_store(graph.path)
                stores.append(graph_store)
                llm_info["graph"] = graph.to_dict()
            if any(s.ablation == "facts" for s in systems):
                clock = time.perf_counter()
                fact_index, built = facts.fact_index(
                    ingested,
                    stores[0],
                    scopes,
                    clients.memory,
                    embedder,
                    max_workers=width,
                    limit=options.fact_limit,
                    progress=options.progress,
                )
                timings["fact_extraction_s"] = round(time.perf_counter() - clock, 3)
                llm_info["fact_index"] = built.to_dict()
        context = _Context(
            retrievers,
            rag,
            FullContext(store, records_of_scope),
            ingested.record_items,
            options,
            fact_index,
        )

        spent: dict[str, list[float]] = {s.name: [] for s in systems}
        embed_seconds: list[float] = []
        rows: list[dict[str, Any]] = []
        tasks: list[llm_eval.AnswerTask] = []
        needs_vector = any(
            s.kind == "rag" or (s.settings is not None and s.settings.w_vec > 0) for s in systems
        )
        vectors: np.ndarray | None = None
        if needs_vector:
            vectors, embed_seconds = cache.question_vectors(
                ingested.path.parent,
                [clean_question(question.text) for question in questions],
                embedder,
                progress=options.progress,
            )
        clock = time.perf_counter()
        bar = tqdm(
            questions, desc=benchmark.name, unit="q", file=sys.stderr, disable=not options.progress
        )
        for index, question in enumerate(bar):
            as_of = parse_as_of(question.as_of)
            vector = None if vectors is None else vectors[index]
            sizes = gold_sizes(question.scope, question.gold)
            for system in systems:
                result, extra, seconds = _run_one(system, question, vector, as_of, context)
                spent[system.name].append(seconds)
                row = {
                    "question": question.id,
                    "category": question.category,
                    "system": system.name,
                    "as_of": question.as_of,
                    **_score(
                        question,
                        result,
                        options,
                        groups,
                        sizes if _shows_records(system) else None,
                    ),
                    **extra,
                }
                if system.name in answered:
                    if options.answer_hook is not None:
                        row.update(_answer(options.answer_hook, question, result.evidence))
                    elif options.judges:
                        # Only what the answerer keeps: the harness strips the context and
                        # slices its first `window` characters (evidence starts with a header).
                        cut = window_chars(result.window, options.window)
                        text = result.evidence.lstrip()[:cut]
                        tasks.append(llm_eval.AnswerTask(len(rows), question, system, text))
                rows.append(row)
        timings["questions_s"] = round(time.perf_counter() - clock, 3)

        if clients is not None and options.judges:
            clock = time.perf_counter()
            judge = llm_eval.AnswerJudge(
                benchmark, clients, window=options.window, graph_store=graph_store
            )
            outcomes = judge.run(tasks, progress=options.progress)
            for outcome in outcomes:
                rows[outcome.task.row].update(outcome.update)
            timings["answer_judge_s"] = round(time.perf_counter() - clock, 3)
            llm_info["answers"] = {
                name: llm_eval.summarize(
                    benchmark.name,
                    benchmark.categories,
                    [o for o in outcomes if o.task.system.name == name],
                )
                for name in answered
                if any(s.name == name for s in systems)
            }
            llm_info["aborted"] = judge.abort_reason
            llm_info["calls_per_question"] = {
                s.name: llm_eval.calls_per_question(benchmark.name, s, clients.options.judge_runs)
                for s in systems
                if s.name in answered
            }
        if clients is not None:
            llm_info["usage"] = clients.usage()
    finally:
        for open_one in stores:
            open_one.close()
        if layer_folder is not None:
            layer_folder.cleanup()
        if fact_index is not None:
            fact_index.close()
        if clients is not None:
            clients.close()

    names = metric_names(options, benchmark, systems)
    categories = list(benchmark.categories)
    by_system = {s.name: [r for r in rows if r["system"] == s.name] for s in systems}
    aggregates = {
        name: aggregate(
            system_rows, names, categories, resamples=options.resamples, seed=options.seed
        )
        for name, system_rows in by_system.items()
    }
    deltas: dict[str, Any] = {}
    if REFERENCE_SYSTEM in by_system:
        reference = by_system[REFERENCE_SYSTEM]
        for name, system_rows in by_system.items():
            if name == REFERENCE_SYSTEM:
                continue
            deltas[name] = {
                metric: paired_delta(
                    [r.get(metric) for r in system_rows],
                    [r.get(metric) for r in reference],
                    resamples=options.resamples,
                    seed=options.seed,
                )
                for metric in ("window", "recall@10", "answer_score")
                if any(r.get(metric) is not None for r in system_rows)
                and any(r.get(metric) is not None for r in reference)
            }
    timings["query_embedding"] = _timing(embed_seconds)
    timings["systems"] = {name: _timing(seconds) for name, seconds in spent.items()}
    timings["total_s"] = round(sum(v for k, v in timings.items() if k.endswith("_s")), 3)
    from mempp import __version__

    if options.llm is None:
        llm_section: dict[str, Any] = {"enabled": False}
    else:
        llm_section = {
            "enabled": True,
            "judged": options.judges,
            "settings": options.llm.to_dict(),
            "answer_window_chars": options.window,
            "cache": str(cache_dir / llm_eval.CACHE_FILE),
            "answered_systems": [n for n in answered if n in by_system],
            **llm_info,
        }
    return {
        "benchmark": benchmark.dataset_info(),
        "categories": benchmark.categories,
        "run": {
            "started": started_at,
            "mempp_version": __version__,
            "encoder": {"name": embedder.name, "dim": embedder.dim},
            "tokenizer": tokenizer_name or TOKENIZER_NAME,
            "window_chars": options.window,
            "evidence_style": options.style,
            "ks": list(options.ks),
            "sweep": list(options.sweep),
            "rag_limit": options.rag_limit,
            "bootstrap": {"resamples": options.resamples, "seed": options.seed, "level": 0.95},
            "questions_run": len(questions),
            # Thread settings change encoder speed a lot on a busy machine: record them.
            "env": {k: os.environ[k] for k in THREAD_VARS if k in os.environ},
            "limit": options.limit,
            "cache": {"path": str(ingested.path), "key": ingested.key, **ingested.stats},
            **options.extra,
        },
        "systems": [s.to_dict() for s in systems],
        "metrics": names,
        "aggregates": aggregates,
        "deltas_vs_reference": {"reference": REFERENCE_SYSTEM, "systems": deltas},
        **(
            {}
            if layer_info is None
            else {
                "supersession": {
                    "layer": layer_info,
                    "deltas": supersession.compare(
                        by_system, categories, resamples=options.resamples, seed=options.seed
                    ),
                }
            }
        ),
        "llm": llm_section,
        "timings": timings,
        "questions": rows,
    }


@dataclass(slots=True)
class _Context:
    """What running one system on one question needs. ``retrievers[None]`` reads the
    benchmark store; ``retrievers["consolidated"]`` its consolidated copy; ``fact_index`` is
    the fact index of ``mempp-fact-index``."""

    retrievers: dict[str | None, MemppRetriever]
    rag: dict[int, RagIndex]
    full: FullContext
    record_items: Mapping[int, Sequence[str]]
    options: RunOptions
    fact_index: facts.FactIndex | None = None


def _run_one(
    system: System,
    question: Question,
    vector: np.ndarray | None,
    as_of: int | None,
    context: _Context,
) -> tuple[Retrieved, dict[str, Any], float]:
    """One system on one question: its result, extra row fields, and the seconds it took
    (the k sweep and the question embedding are not counted)."""
    options = context.options
    tick = time.perf_counter()
    extra: dict[str, Any] = {}
    if system.kind == "mempp":
        assert system.settings is not None
        settings = system.settings
        # Mem^g++ retrieves the paper preset's rows from the benchmark store (its graph facts
        # come with the answer); mempp-consolidated reads the consolidated copy.
        retriever = context.retrievers[
            system.ablation if system.ablation in ("consolidated", "supersession") else None
        ]
        query_vector = vector if settings.w_vec > 0 else None
        if system.ablation == "facts":
            legs = _fact_legs(context, question, query_vector, as_of, settings)
        else:
            legs = retriever.legs(question.scope, question.text, query_vector, as_of, settings)
        hits = retriever.hits(question.scope, legs, as_of, settings, settings.k)
        query = clean_question(question.text)
        result = retriever.retrieved(hits, options.style, system.packing, query)
        seconds = time.perf_counter() - tick
        items = retriever.record_items
        extra["top"] = [(items.get(hit.id) or ("?",))[0] for hit in hits[:TOP_ITEMS]]
        extra["legs_fired"] = {leg: len(ids) for leg, ids in legs.as_dict().items() if ids}
        extra.update(_sweep(retriever, question, legs, as_of, settings, options, system.packing))
        return result, extra, seconds
    if system.kind == "rag":
        assert vector is not None and system.chunk_tokens is not None
        index = context.rag[system.chunk_tokens]
        result = index.retrieve(question.scope, vector, as_of, options.rag_limit)
        return result, extra, time.perf_counter() - tick
    result = context.full.retrieve(
        question.scope, as_of, options.window, context.record_items, options.style
    )
    return result, extra, time.perf_counter() - tick


def _fact_legs(
    context: _Context,
    question: Question,
    vector: np.ndarray | None,
    as_of: int | None,
    settings: Settings,
) -> LegLists:
    """The preset's legs with the lexical and vector ones searching the fact index instead of
    the documents (the tag leg and the date leg still read the documents)."""
    assert context.fact_index is not None
    scope, text = question.scope, question.text
    documents_only = settings.with_(w_lex=0.0, w_vec=0.0)
    base = context.retrievers[None].legs(scope, text, None, as_of, documents_only)
    lex, vec = facts.fact_legs(context.fact_index, scope, text, vector, as_of, settings)
    return LegLists(lex, base.tag, vec, base.dated, base.kw)


def _sweep(
    retriever: MemppRetriever,
    question: Question,
    legs: LegLists,
    as_of: int | None,
    settings: Settings,
    options: RunOptions,
    packing: PackingOptions | None = None,
) -> dict[str, Any]:
    """Recall of the whole returned list and window recall when the system returns k rows
    (evidence packed as the system packs it)."""
    out: dict[str, Any] = {}
    query = clean_question(question.text)
    for k in options.sweep:
        hits = retriever.hits(question.scope, legs, as_of, settings, k)
        result = retriever.retrieved(hits, options.style, packing, query)
        assert result.ranked is not None
        out[f"sweep_recall@{k}"] = recall_at(result.ranked, question.gold, k)
        placed = as_budgeted(result.window, options.window)
        inside = window_recall(placed, question.gold, options.window)
        out[f"sweep_window@{k}"] = inside[0] if inside else None
    return out


def _answer(hook: AnswerHook, question: Question, evidence: str) -> dict[str, Any]:
    """Call the answer/judge hook; a failure is recorded on the row, not fatal to the run."""
    try:
        outcome = dict(hook(question, evidence))
    except Exception as exc:  # an LLM or network failure must not lose the retrieval run
        return {"answer": {"error": f"{type(exc).__name__}: {exc}"}, "answer_score": None}
    score = outcome.get("score")
    numeric = isinstance(score, int | float) and not isinstance(score, bool)
    return {"answer": outcome, "answer_score": float(score) if numeric else None}


def _rag_indexes(
    benchmark: Benchmark,
    systems: Sequence[System],
    embedder: Embedder,
    directory: Path,
    spans: TokenSpans | None,
    options: RunOptions,
) -> dict[int, RagIndex]:
    sizes = sorted({s.chunk_tokens for s in systems if s.kind == "rag" and s.chunk_tokens})
    if not sizes:
        return {}
    spans = spans or word_piece_spans()
    keys = {(item.scope, item.id): date_key(item.date) for item in benchmark.items}
    # The history in date order; equal dates keep ingest order (sorted() is stable).
    histories: dict[str, list[tuple[str, str]]] = {}
    for item in sorted(benchmark.items, key=lambda i: keys[(i.scope, i.id)]):
        if item.history.strip():
            histories.setdefault(item.scope, []).append((item.id, item.history))
    indexes: dict[int, RagIndex] = {}
    for size in sizes:
        chunks = {
            scope: chunk_history(entries, size, spans) for scope, entries in histories.items()
        }
        texts = [chunk.text for scope_chunks in chunks.values() for chunk in scope_chunks]
        vectors = cache.chunk_vectors(
            directory, f"rag-{size}", texts, embedder, progress=options.progress
        )
        by_scope: dict[str, np.ndarray] = {}
        start = 0
        for scope, scope_chunks in chunks.items():
            by_scope[scope] = vectors[start : start + len(scope_chunks)]
            start += len(scope_chunks)
        indexes[size] = RagIndex(chunks, by_scope, keys)
    return indexes
