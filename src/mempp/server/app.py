"""The ASGI app: the ``/v1`` API, MCP at ``/mcp``, health, and the web pages when present.

``create_app(state)`` builds it over a :class:`~mempp.server.state.ServerState` (the app
owns the state from then on and closes it at shutdown); ``build_app(config)`` also opens
the state from a :class:`ServeConfig`, which is what ``mempp serve`` runs (with
``--workers N``, each worker process builds its own through :func:`app_from_environ`).

The web pages live in ``mempp.server.web``; when that package is installed, its
``mount(app)`` is called last, so it can add routes and static files over the same state.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from mempp.server import api, problems
from mempp.server.config import DEFAULT_MAX_BODY, DEFAULT_MAX_UPLOAD, ServeConfig
from mempp.server.guard import Guard, configured_hosts
from mempp.server.idempotency import IdempotencyKeys
from mempp.server.limits import BodyLimit
from mempp.server.logs import ENV_FORMAT as ENV_LOG_FORMAT
from mempp.server.logs import configure as configure_logs
from mempp.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from mempp.server.metrics import Metrics
from mempp.server.observability import Observability
from mempp.server.problems import Problem, problem_responses
from mempp.server.schemas import ProblemDocument, StatusOut
from mempp.server.state import ServerState
from mempp.server.tracing import Tracing, from_environment

ENV_CONFIG = "MEMPP_SERVE_CONFIG"  # how `mempp serve --workers N` hands its options over

DESCRIPTION = """\
mempp keeps every document whole with its date and author and chooses at read time: the \
as-of filter first, then lexical, tag and vector rankings fused by weighted reciprocal rank \
fusion, recency slots, and dated, attributed evidence naming record ids.

Authenticate with `Authorization: Bearer <key>` (keys: `mempp keys create --scope S --role \
R`); a key reads and writes its own scope only. Errors are RFC 9457 problem documents \
(`application/problem+json`) whose `field` names the offending input."""


def open_state(config: ServeConfig) -> ServerState:
    """The state ``config`` describes; the LLM client only when an endpoint is configured."""
    from mempp.encoders import embedder_named
    from mempp.llm import ENV_BASE_URL, LLMClient

    embedder = embedder_named(config.encoder) if config.encoder else None
    llm = None
    if config.llm_base_url or os.environ.get(ENV_BASE_URL):
        llm = LLMClient.from_env(base_url=config.llm_base_url, model=config.llm_model)
    oauth = None
    if config.oauth_issuer or config.oauth_audience or os.environ.get("MEMPP_OAUTH_ISSUER"):
        from mempp.server.oauth import from_environment

        oauth = from_environment(config.oauth_issuer, config.oauth_audience)
    return ServerState(
        config.location,
        host=config.host,
        embedder=embedder,
        settings=config.preset,
        llm=llm,
        default_scope=config.scope,
        oauth=oauth,
    )


def build_app(config: ServeConfig) -> FastAPI:
    return create_app(
        open_state(config),
        max_body=config.max_body,
        max_upload=config.max_upload,
        allowed_hosts=config.allowed_hosts,
    )


def app_from_environ() -> FastAPI:
    """The app factory of worker processes: the config from ``$MEMPP_SERVE_CONFIG``."""
    if os.environ.get(ENV_LOG_FORMAT):
        configure_logs(os.environ[ENV_LOG_FORMAT])
    return build_app(ServeConfig.from_json(os.environ[ENV_CONFIG]))


def create_app(
    state: ServerState,
    *,
    mcp: bool = True,
    max_body: int = DEFAULT_MAX_BODY,
    max_upload: int = DEFAULT_MAX_UPLOAD,
    tracer_provider: Any = None,
    allowed_hosts: Sequence[str] = (),
) -> FastAPI:
    """The app over ``state``: warming starts at startup, the state closes at shutdown,
    after uvicorn has let in-flight requests finish. ``allowed_hosts`` (and
    ``$MEMPP_ALLOWED_HOSTS``) are the names it answers to besides the loopback names and
    the address it is bound to (see :mod:`mempp.server.guard`). Traces go to
    ``tracer_provider`` (an OpenTelemetry provider) when given, else to the OTLP endpoint the
    environment names, if any (``mempp.server.tracing``)."""
    from mempp import __version__

    names = configured_hosts(allowed_hosts)  # a bad name fails before anything is served

    mcp_app = manager = None
    if mcp:
        from mempp.server.mcp import http_mcp

        mcp_app, manager = http_mcp(state, max_body=max_body)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.start_warming()
        async with AsyncExitStack() as stack:
            stack.push_async_callback(run_in_threadpool, state.close)
            if manager is not None:
                await stack.enter_async_context(manager.run())
            yield

    app = FastAPI(
        title="mempp",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        responses=problem_responses(500),
        # FastAPI's /docs and /redoc load their scripts from a CDN: off. The schema stays at
        # /openapi.json for any viewer run locally.
        docs_url=None,
        redoc_url=None,
    )
    app.state.mempp = state
    problems.install(app)
    app.include_router(api.router)
    _health_routes(app)
    if mcp_app is not None:
        app.router.routes.append(Route("/mcp", endpoint=mcp_app, include_in_schema=False))
    # Inside the size limit: a write's body is bounded before it is read to be fingerprinted.
    app.add_middleware(IdempotencyKeys)
    app.add_middleware(BodyLimit, max_body=max_body, max_upload=max_upload)
    _problem_schema(app)
    _mount_web(app)
    # The guard before observability: observability outermost, so every request is counted,
    # logged and traced, the guard's refusals included; the guard before every door.
    app.add_middleware(Guard, bind_host=state.host, allowed_hosts=names)
    metrics = Metrics(state)
    tracing = Tracing(tracer_provider) if tracer_provider is not None else from_environment()
    app.state.metrics = metrics
    _metrics_route(app, metrics)
    app.add_middleware(Observability, metrics=metrics, tracing=tracing)
    return app


def _health_routes(app: FastAPI) -> None:
    @app.get(
        "/.well-known/oauth-protected-resource",
        summary="OAuth protected-resource metadata (RFC 9728)",
        description="Which authorization server issues tokens for this server, for MCP hosts "
        "and other OAuth clients; 404 when the server takes API keys only.",
        responses=problem_responses(404),
    )
    @app.get("/.well-known/oauth-protected-resource/mcp", include_in_schema=False)
    @app.get("/.well-known/oauth-protected-resource/v1", include_in_schema=False)
    def protected_resource(request: Request) -> dict[str, Any]:
        oauth = app.state.mempp.oauth
        if oauth is None:
            raise Problem(404, "this server takes API keys only: no OAuth is configured")
        return oauth.metadata(str(request.base_url))  # type: ignore[no-any-return]

    @app.get(
        "/healthz",
        response_model=StatusOut,
        summary="Liveness",
        description="200 while the process serves requests.",
    )
    def healthz() -> StatusOut:
        return StatusOut(status="ok")

    @app.get(
        "/readyz",
        response_model=StatusOut,
        summary="Readiness",
        description="200 once the encoder and the store's indexes are loaded (searches are "
        "then as fast as they get) and while the database answers; 503 otherwise.",
        responses=problem_responses(503),
    )
    def readyz() -> StatusOut:
        state: ServerState = app.state.mempp
        if not state.store.reachable():
            raise Problem(503, "the database does not answer", headers={"Retry-After": "1"})
        if state.ready:
            return StatusOut(status="ready")
        if state.warm_error is not None:  # its text (a path, a driver's) is in the log
            raise Problem(503, "not ready: loading the store failed; the server log says why")
        raise Problem(503, "warming up: loading the encoder and the store's indexes")


def _metrics_route(app: FastAPI, metrics: Metrics) -> None:
    @app.get("/metrics", include_in_schema=False)
    def prometheus(request: Request) -> Response:
        state: ServerState = app.state.mempp
        refusal = metrics.allowed(state.keys_required, request.headers.get("authorization"))
        if refusal is not None:
            raise Problem(403, refusal)
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)


def _problem_schema(app: FastAPI) -> None:
    """Put the problem document's schema where every error response's $ref points."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components["Problem"] = ProblemDocument.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _mount_web(app: FastAPI) -> None:
    import importlib
    import importlib.util

    if importlib.util.find_spec("mempp.server.web") is not None:
        importlib.import_module("mempp.server.web").mount(app)
