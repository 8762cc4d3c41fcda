"""``mempp serve``, ``mempp mcp`` and ``mempp keys``: the server's command line.

``add_parser(commands)`` registers the three commands on mempp's argparse subparsers and
``run(args)`` executes one, returning the exit code (0 success, 1 operational error, 2 bad
input). They take ``--db`` and ``--scope`` after the command name as well as before it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
from typing import Any

from mempp.errors import InvalidInput, MemppError
from mempp.server.config import DEFAULT_MAX_BODY, DEFAULT_MAX_UPLOAD, DEFAULT_PORT, ServeConfig
from mempp.server.logs import ENV_FORMAT as ENV_LOG_FORMAT
from mempp.server.logs import FORMATS as LOG_FORMATS
from mempp.server.logs import configure as configure_logs

COMMANDS = ("serve", "mcp", "keys")
EXIT_OK = 0


def add_parser(commands: Any) -> None:
    """Register ``serve``, ``mcp`` and ``keys`` on an argparse subparsers object."""
    from mempp.server.keys import ROLES

    serve = commands.add_parser(
        "serve",
        help="serve the store over HTTP (/v1) and MCP (/mcp) to agents",
        description="One ASGI app: the /v1 API, MCP over streamable HTTP at /mcp, /healthz, "
        "/readyz and /openapi.json. Keys (`mempp keys create`) bind each client to one "
        "scope; without keys the server only listens on a loopback address.",
    )
    _store_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="a name the server answers to besides the loopback names and --host (repeatable; "
        "e.g. the name a reverse proxy serves it under; also $MEMPP_ALLOWED_HOSTS, "
        "comma-separated). Requests naming any other Host get a 421",
    )
    serve.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        help=f"largest JSON request body in bytes (default {DEFAULT_MAX_BODY})",
    )
    serve.add_argument(
        "--max-upload",
        type=int,
        default=DEFAULT_MAX_UPLOAD,
        help=f"largest JSON Lines upload to /v1/ingest in bytes (default {DEFAULT_MAX_UPLOAD})",
    )
    serve.add_argument(
        "--oauth-issuer",
        default=None,
        metavar="URL",
        help="also accept bearer JWTs from this OAuth issuer (default: $MEMPP_OAUTH_ISSUER)",
    )
    serve.add_argument(
        "--oauth-audience",
        default=None,
        metavar="AUD",
        help="the audience those tokens must name (default: $MEMPP_OAUTH_AUDIENCE)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
    )
    serve.add_argument(
        "--read-url",
        action="append",
        default=None,
        metavar="URL",
        help="a PostgreSQL hot standby of the store to serve reads (repeatable; default "
        "$MEMPP_PG_READ_URLS); reads see every write answered before them",
    )
    serve.add_argument(
        "--log-format",
        default=None,
        choices=LOG_FORMATS,
        help=f"text, or one JSON object a line with request ids (default: ${ENV_LOG_FORMAT}, "
        "else uvicorn's own)",
    )

    mcp = commands.add_parser(
        "mcp",
        help="serve the store's MCP tools on stdin/stdout (for an MCP host to spawn)",
        description="The MCP tools (remember, search_memory, get_evidence, get_record, and "
        "ask_memory with an LLM endpoint) over stdio, acting on --scope.",
    )
    _store_options(mcp)

    keys = commands.add_parser("keys", help="create, list and revoke the server's API keys")
    _location_option(keys)
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="make a key for one scope (printed once)")
    create.add_argument("--scope", required=True, help="the one scope (tenant) the key may use")
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument("--label", default=None, help="a note: who or what holds the key")
    create.add_argument("--json", action="store_true")
    listing = actions.add_parser("list", help="every key (never the secrets)")
    listing.add_argument("--scope", default=None, help="only this scope's keys")
    listing.add_argument("--json", action="store_true")
    revoke = actions.add_parser("revoke", help="revoke a key at once (it stays listed)")
    revoke.add_argument("key_id", help="the key id (the part after mempp_)")
    revoke.add_argument("--json", action="store_true")


def _location_option(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: an absent option leaves mempp's own --db (given before the command) alone.
    parser.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        help="SQLite file or postgresql:// URL (default: $MEMPP_DB, else ./mempp.db)",
    )


def _store_options(parser: argparse.ArgumentParser) -> None:
    _location_option(parser)
    parser.add_argument(
        "--scope", default=argparse.SUPPRESS, help="the scope served without keys (default)"
    )
    parser.add_argument("--preset", default="default", help="read-path settings preset")
    parser.add_argument(
        "--llm-base-url",
        default=None,
        help="OpenAI-compatible API root for ask (default: $MEMPP_LLM_BASE_URL; none: no ask)",
    )
    parser.add_argument("--model", default=None, help="model name (default: $MEMPP_LLM_MODEL)")


def run(args: argparse.Namespace) -> int:
    if args.command != "keys":
        _require_extra()
        # Before the MCP SDK would install its own handler: one plain format, on stderr (for
        # `mempp mcp`, stdout carries the protocol).
        level = getattr(args, "log_level", "warning").upper()
        logging.basicConfig(
            level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
        )
    location = args.db or os.environ.get("MEMPP_DB") or "mempp.db"
    if args.command == "keys":
        return _keys(args, location)
    config = _config(args, location)
    if args.command == "mcp":
        return _mcp(config)
    return _serve(args, config)


def _require_extra() -> None:
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "mcp") if importlib.util.find_spec(m) is None]
    if missing:
        raise MemppError(f"the server needs {', '.join(missing)}: pip install 'mempp[serve]'")


def _config(args: argparse.Namespace, location: str) -> ServeConfig:
    from mempp.encoders import ENV_ENCODER
    from mempp.memory import DEFAULT_SCOPE
    from mempp.settings import preset

    preset(args.preset)  # a bad name fails before anything opens
    if args.command == "serve":
        if not 0 <= args.port <= 65535:
            raise InvalidInput(f"--port must be between 0 and 65535, got {args.port}")
        if args.workers < 1:
            raise InvalidInput("--workers must be >= 1")
        if args.max_body < 1 or args.max_upload < 1:
            raise InvalidInput("--max-body and --max-upload must be >= 1")
        from mempp.server.guard import configured_hosts

        configured_hosts(args.allowed_host)  # a bad name fails before anything opens
    return ServeConfig(
        location=location,
        host=getattr(args, "host", "127.0.0.1"),
        scope=args.scope or DEFAULT_SCOPE,
        preset=args.preset,
        encoder=args.encoder or os.environ.get(ENV_ENCODER),
        llm_base_url=args.llm_base_url,
        llm_model=args.model,
        max_body=getattr(args, "max_body", DEFAULT_MAX_BODY),
        max_upload=getattr(args, "max_upload", DEFAULT_MAX_UPLOAD),
        allowed_hosts=tuple(getattr(args, "allowed_host", ())),
        oauth_issuer=getattr(args, "oauth_issuer", None),
        oauth_audience=getattr(args, "oauth_audience", None),
    )


def _serve(args: argparse.Namespace, config: ServeConfig) -> int:
    import uvicorn

    from mempp.server.app import ENV_CONFIG, app_from_environ, build_app, open_state
    from mempp.server.web.session import SECRET_ENV as SESSION_SECRET_ENV

    common = {
        "host": config.host,
        "port": args.port,
        "log_level": args.log_level,
        "timeout_graceful_shutdown": 30,  # in-flight requests (writes) finish first
    }
    if args.read_url:
        if "://" not in config.location:
            raise InvalidInput("--read-url needs a PostgreSQL store (--db postgresql://...)")
        os.environ["MEMPP_PG_READ_URLS"] = " ".join(args.read_url)  # the workers' too
    log_format = args.log_format or os.environ.get(ENV_LOG_FORMAT)
    if log_format:
        if log_format not in LOG_FORMATS:
            raise InvalidInput(f"${ENV_LOG_FORMAT} must be one of {', '.join(LOG_FORMATS)}")
        os.environ[ENV_LOG_FORMAT] = log_format  # the workers configure theirs from it
        configure_logs(log_format)
        common["log_config"] = None  # keep the handlers just installed
    if args.workers == 1:
        app = build_app(config)  # refuses a keyless store on a public address, before binding
        print(_banner(app.state.mempp, args.port, config), file=sys.stderr)
        uvicorn.run(app, **common)
        return EXIT_OK
    state = open_state(config)  # the same refusal, once, before the workers start
    print(_banner(state, args.port, config), file=sys.stderr)
    state.close()
    os.environ[ENV_CONFIG] = config.to_json()
    # The workers must all read the web page's session cookies: one secret for all of them.
    os.environ.setdefault(SESSION_SECRET_ENV, secrets.token_urlsafe(32))
    uvicorn.run(
        f"{app_from_environ.__module__}:{app_from_environ.__name__}",
        factory=True,
        workers=args.workers,
        **common,
    )
    return EXIT_OK


def _banner(state: Any, port: int, config: ServeConfig) -> str:
    from mempp.server.guard import answers_to, configured_hosts

    keys = "required" if state.keys_required else f"not required (scope {state.default_scope})"
    names = answers_to(state.host, configured_hosts(config.allowed_hosts))
    # A PostgreSQL store's location is its URL without the password.
    return (
        f"mempp: serving {state.store.location} on http://{state.host}:{port} "
        f"(API /v1, MCP /mcp; keys {keys}; answers to {names})"
    )


def _mcp(config: ServeConfig) -> int:
    from mempp.server.app import open_state
    from mempp.server.mcp import run_stdio
    from mempp.server.state import Principal

    state = open_state(config)  # loopback: a local process, no keys needed
    try:
        state.start_warming()
        run_stdio(state, Principal("stdio", state.default_scope, "admin"))
    finally:
        state.close()
    return EXIT_OK


def _keys(args: argparse.Namespace, location: str) -> int:
    from mempp.server import keys
    from mempp.store import open_store

    is_url = location.startswith(("postgresql://", "postgres://"))
    path = location.removeprefix("sqlite:///")
    if args.keys_command != "create" and not is_url and not os.path.exists(path):
        raise InvalidInput(f"no database at {path}")
    store = open_store(location)
    try:
        if args.keys_command == "create":
            key, token = keys.create_key(store, scope=args.scope, role=args.role, label=args.label)
            if args.json:
                _print_json({**key.to_dict(), "token": token})
            else:
                print(token)
                print(
                    f"key {key.key_id}: scope {key.scope}, role {key.role}. The key is shown "
                    "only now: store it safely.",
                    file=sys.stderr,
                )
        elif args.keys_command == "list":
            found = keys.list_keys(store, args.scope)
            if args.json:
                _print_json([key.to_dict() for key in found])
            for key in found if not args.json else ():
                status = f"revoked {key.revoked_at}" if key.revoked_at else "active"
                label = f"  {key.label}" if key.label else ""
                print(f"{key.key_id}  {key.scope}  {key.role}  {key.created_at}  {status}{label}")
        else:
            key = keys.revoke_key(store, args.key_id)
            if args.json:
                _print_json(key.to_dict())
            else:
                print(f"revoked key {key.key_id} (scope {key.scope}) at {key.revoked_at}")
    finally:
        store.close()
    return EXIT_OK


def _print_json(value: object) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
