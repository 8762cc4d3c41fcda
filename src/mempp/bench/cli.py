"""``mempp bench``: the command line of the benchmarks.

``add_parser(subparsers)`` registers the ``bench`` sub-command on any argparse subparsers
object and ``run(args)`` executes it, returning an exit code: 0 success, 1 data missing,
the LLM endpoint failing, or another operational error, 2 bad option. ``python -m mempp.bench
...`` runs it stand-alone.

Retrieval is always scored. The answer + judge step and the LLM ablations run only when an
endpoint is configured (``--llm-base-url`` or ``MEMPP_LLM_BASE_URL``); otherwise one line says
the run is retrieval-only.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from mempp.bench.datasets import ENV_VAR, default_data_root
from mempp.encoders import ENCODERS
from mempp.errors import InvalidInput, MemppError

BENCHMARKS = ("orgmembench", "locomo", "longmemeval")
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on an ``argparse`` subparsers object and return its parser."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmarks (OrgMemBench, LoCoMo, LongMemEval_S): retrieval, and answers with an LLM",
        description=(
            "Score gold-evidence retrieval of mempp and baselines on a benchmark: recall@k, "
            "MRR, nDCG@10 and recall inside the answer window, per category, with bootstrap "
            "intervals. With an LLM endpoint (--llm-base-url or $MEMPP_LLM_BASE_URL) also "
            "answer the questions and grade the answers with the benchmark's judge. Writes "
            "results.json, results.md and PNG plots to --out."
        ),
    )
    parser.add_argument("benchmark", choices=BENCHMARKS)
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help=f"datasets folder (default: ${ENV_VAR}, else ../shared/datasets from the cwd)",
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        default=None,
        metavar="NAME",
        help="systems to run, space or comma separated (default: all): mempp-paper "
        "mempp-default mempp-default-packed no-lex no-tag no-vec no-recency bm25 vector "
        "rag-512 rag-2048 rag-4096 full-context, or mempp:<preset>, "
        "mempp:<preset>+<setting>=<value>... (a preset with settings changed), rag-<N>; "
        "with an LLM endpoint also the ablations mempp-consolidated, mempp-graph and "
        "mempp-fact-index (only when named)",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: bench-out/<benchmark>")
    parser.add_argument(
        "--k", nargs="+", default=None, metavar="K", help="recall@k cut-offs (default 1 5 10 20 50)"
    )
    parser.add_argument(
        "--sweep",
        nargs="+",
        default=None,
        metavar="K",
        help="k values mempp systems are re-run with (default 5 10 20 30 50 75 100; 0 = none)",
    )
    parser.add_argument(
        "--window", type=int, default=40_000, help="answer window in characters (default 40000)"
    )
    parser.add_argument(
        "--style",
        choices=("headers", "paper"),
        default="headers",
        help="evidence rendering: mempp's dated headers (default) or the authors' '{i}. text'",
    )
    parser.add_argument(
        "--rag-sizes", nargs="+", default=None, metavar="N", help="RAG chunk sizes in tokens"
    )
    parser.add_argument("--cache", type=Path, default=None, help="default: ./.mempp-cache")
    parser.add_argument(
        "--encoder",
        choices=ENCODERS,
        default=None,
        help="sentence encoder of the store and the queries (default: $MEMPP_ENCODER, else "
        "minilm); each encoder has its own cached store (docs/encoders.md)",
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument(
        "--half",
        choices=("dev", "test"),
        default=None,
        help="only the development or the test half of the questions (docs/retrieval.md)",
    )
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument(
        "--author-from-header",
        action="store_true",
        help="OrgMemBench: store the header's author display name (the harness passes none)",
    )
    parser.add_argument(
        "--include-adversarial", action="store_true", help="LoCoMo: keep category 5"
    )
    parser.add_argument(
        "--include-abstention", action="store_true", help="LongMemEval: keep _abs questions"
    )
    parser.add_argument("--file", type=Path, default=None, help="LongMemEval: the JSON file")
    parser.add_argument(
        "--answer-hook",
        default=None,
        metavar="MODULE:FUNCTION",
        help="call FUNCTION(question, evidence) -> dict per question (answer + judge)",
    )
    parser.add_argument(
        "--answer-systems",
        nargs="+",
        default=None,
        metavar="NAME",
        help="systems answered (and judged) per question (default: mempp-paper, "
        "mempp-default, mempp-default-packed and any LLM ablation run)",
    )
    llm = parser.add_argument_group(
        "answer and judge (only with an LLM endpoint; without one the run is retrieval-only)"
    )
    llm.add_argument(
        "--llm-base-url",
        default=None,
        metavar="URL",
        help="OpenAI-compatible API root incl. /v1 (default: $MEMPP_LLM_BASE_URL); "
        "the key is read from $MEMPP_LLM_API_KEY",
    )
    llm.add_argument(
        "--answer-model", default=None, metavar="NAME", help="default: $MEMPP_LLM_MODEL"
    )
    llm.add_argument(
        "--judge-model", default=None, metavar="NAME", help="default: the answer model"
    )
    llm.add_argument(
        "--memory-model",
        default=None,
        metavar="NAME",
        help="model of the LLM ablations (consolidation, graph extraction, graph entities, "
        "fact extraction); "
        "default: the answer model",
    )
    llm.add_argument(
        "--judge-runs",
        type=int,
        default=3,
        metavar="N",
        help="OrgMemBench rubric judge runs per answer (default 3; mean and sd reported)",
    )
    llm.add_argument(
        "--llm-concurrency",
        type=int,
        default=None,
        metavar="N",
        help="questions (and LLM requests) in flight at once (default 1 for a loopback "
        "endpoint, whose slots often share one context; 4 otherwise)",
    )
    llm.add_argument(
        "--graph-paper",
        action="store_true",
        help="mempp-graph as in the paper: undated triples, no as-of filter "
        "(default: dated triples that obey the as-of date)",
    )
    llm.add_argument(
        "--fact-limit",
        type=int,
        default=None,
        metavar="N",
        help="mempp-fact-index: ask for the facts of at most N more documents this run (0: "
        "none); the others stay pending and unindexed, and the report says how many",
    )
    parser.add_argument(
        "--engine-url",
        default=None,
        metavar="URL",
        help="run the mempp systems on a copy of the benchmark store in this empty "
        "PostgreSQL database (default: the cached SQLite file)",
    )
    parser.add_argument(
        "--supersession-layer",
        action="store_true",
        help="OrgMemBench: also run each mempp system over a copy with the benchmark's "
        "version chains written as supersessions, paired per question (docs/benchmarks.md)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def _words(values: list[str] | None) -> list[str]:
    """Accept ``a b`` and ``a,b`` alike."""
    return [part for value in values or [] for part in value.split(",") if part.strip()]


def _ints(values: list[str] | None, name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    if values is None:
        return default
    try:
        numbers = tuple(int(v) for v in _words(values))
    except ValueError:
        raise InvalidInput(f"{name} takes whole numbers, got {' '.join(values)!r}") from None
    if any(n < 0 for n in numbers):
        raise InvalidInput(f"{name} values must be >= 0")
    return tuple(sorted(set(n for n in numbers if n > 0)))


def _load_hook(spec: str) -> Any:
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise InvalidInput(f"--answer-hook needs MODULE:FUNCTION, got {spec!r}")
    try:
        return getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as exc:
        raise InvalidInput(f"cannot load answer hook {spec!r}: {exc}") from None


def run(args: argparse.Namespace, *, embedder: Any = None, spans: Any = None) -> int:
    """Execute ``mempp bench`` from parsed arguments; returns the exit code.

    ``embedder`` and ``spans`` (a tokenizer for RAG chunking) default to all-MiniLM-L6-v2;
    tests pass small ones.
    """
    try:
        return _run(args, embedder, spans)
    except InvalidInput as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except MemppError as exc:
        _fail(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _fail("interrupted (a finished ingest stays cached; an unfinished one is discarded)")
        return 130


def _fail(message: str) -> None:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"mempp bench: error: {first}", file=sys.stderr)


def _run(args: argparse.Namespace, embedder: Any, spans: Any) -> int:
    from mempp.bench import llm_eval, report, systems
    from mempp.bench.runner import DEFAULT_KS, DEFAULT_SWEEP, RunOptions, load_benchmark
    from mempp.bench.runner import run as run_benchmark

    ks = _ints(args.k, "--k", DEFAULT_KS)
    sweep = _ints(args.sweep, "--sweep", DEFAULT_SWEEP)
    rag_sizes = _ints(args.rag_sizes, "--rag-sizes", systems.DEFAULT_RAG_SIZES)
    if not ks:
        raise InvalidInput("--k needs at least one cut-off >= 1")
    if args.window < 1 or (args.limit is not None and args.limit < 1) or args.resamples < 0:
        raise InvalidInput("--window and --limit must be >= 1, --resamples >= 0")
    if args.judge_runs < 1 or (args.llm_concurrency is not None and args.llm_concurrency < 1):
        raise InvalidInput("--judge-runs and --llm-concurrency must be >= 1")
    if args.fact_limit is not None and args.fact_limit < 0:
        raise InvalidInput("--fact-limit must be >= 0")
    llm_options = llm_eval.LLMOptions.resolve(
        base_url=args.llm_base_url,
        answer_model=args.answer_model,
        judge_model=args.judge_model,
        memory_model=args.memory_model,
        judge_runs=args.judge_runs,
        concurrency=args.llm_concurrency,
    )
    chosen = systems.select(
        args.benchmark,
        _words(args.systems),
        rag_sizes,
        llm=llm_options is not None,
        graph_dated=not args.graph_paper,
    )
    hook = _load_hook(args.answer_hook) if args.answer_hook else None
    requested = tuple(_words(args.answer_systems)) or None
    unknown = [n for n in requested or () if n not in {s.name for s in chosen}]
    if unknown:
        raise InvalidInput(
            f"--answer-systems {', '.join(unknown)}: not among the systems run (--systems)"
        )
    answered = llm_eval.answered_systems(requested, chosen)

    root = args.data if args.data is not None else default_data_root()
    options: dict[str, Any] = {}
    if args.benchmark == "orgmembench":
        options["author_from_header"] = args.author_from_header
    elif args.benchmark == "locomo":
        options["include_adversarial"] = args.include_adversarial
    else:
        options["include_abstention"] = args.include_abstention
        options["path"] = args.file
    started = time.perf_counter()
    benchmark = load_benchmark(args.benchmark, root, **options)
    if args.half is not None:
        from mempp.bench.halves import restrict

        benchmark = restrict(benchmark, args.half)
    load_seconds = time.perf_counter() - started
    print(_llm_status(llm_options, hook is not None, args, answered, chosen), file=sys.stderr)

    if embedder is None:
        from mempp.encoders import embedder_named

        embedder = embedder_named(getattr(args, "encoder", None))
    run_options = RunOptions(
        ks=ks,
        sweep=sweep,
        window=args.window,
        style=args.style,
        resamples=args.resamples,
        seed=args.seed,
        limit=args.limit,
        progress=not args.quiet,
        answer_hook=hook,
        answer_systems=answered,
        llm=llm_options,
        engine_url=args.engine_url,
        fact_limit=args.fact_limit,
        supersession=args.supersession_layer,
        extra={
            "options": {
                key: _recorded(key, value)
                for key, value in vars(args).items()
                if key not in ("func",) and not callable(value)
            },
            "load_s": round(load_seconds, 3),
        },
    )
    results = run_benchmark(
        benchmark,
        chosen,
        embedder=embedder,
        cache_dir=args.cache if args.cache is not None else Path(".mempp-cache"),
        options=run_options,
        spans=spans,
    )
    out = args.out if args.out is not None else Path("bench-out") / args.benchmark
    written = report.write(results, out, plots=not args.no_plots)
    print(report.markdown(results))
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    aborted = results.get("llm", {}).get("aborted")
    if aborted:
        # The retrieval figures are written; the answers are incomplete, so say it and fail.
        _fail(f"answer + judge stopped early ({aborted}); rerun to finish (replies are cached)")
        return EXIT_ERROR
    return EXIT_OK


def _llm_status(
    options: Any, hook: bool, args: argparse.Namespace, answered: tuple[str, ...], chosen: Any
) -> str:
    """The one line saying what the run does beyond retrieval."""
    from mempp.bench import llm_eval

    if options is None:
        if hook:
            return f"mempp bench: answers from the hook {args.answer_hook}; no LLM endpoint"
        return (
            "mempp bench: no LLM endpoint (--llm-base-url or MEMPP_LLM_BASE_URL): "
            "retrieval only, no answers or judge scores"
        )
    if hook:
        return (
            f"mempp bench: answers from the hook {args.answer_hook}; the endpoint "
            f"{options.base_url} serves the LLM ablations only"
        )
    runs = f", {options.judge_runs} judge runs" if args.benchmark == "orgmembench" else ""
    calls = sum(
        llm_eval.calls_per_question(args.benchmark, s, options.judge_runs)
        for s in chosen
        if s.name in answered
    )
    return (
        f"mempp bench: answer + judge at {options.base_url} (answer {options.answer_model}, "
        f"judge {options.judge}{runs}) for {', '.join(answered)}: up to {calls} calls per "
        "question, cached replies are free"
    )


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m mempp.bench``)."""
    parser = argparse.ArgumentParser(prog="python -m mempp.bench")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parser(commands)
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


def _recorded(option: str, value: Any) -> Any:
    """An option as the report records it: paths as text, no password of a database URL."""
    if option == "engine_url" and value is not None:
        from mempp.store.postgres import mask_url

        return mask_url(value)
    return str(value) if isinstance(value, Path) else value
