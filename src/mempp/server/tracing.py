"""OpenTelemetry traces of a running server: a span per request and one per search stage.

Optional (``pip install 'mempp[tracing]'``). On when the standard variables name an OTLP
endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; the
exporter reads the rest of its settings, headers and protocol, from the environment as
OpenTelemetry documents), or when the app is handed a tracer provider (the tests pass one with
an in-memory exporter). The request span follows the HTTP server semantic conventions (name
``METHOD route``, ``http.request.method``, ``http.route``, ``url.path``,
``http.response.status_code``); each stage the read path reports (``mempp.search.stages``)
becomes a child span ``mempp.<stage>`` with its real start and end. No span carries record
text, a query or a key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
INSTALL_HINT = "pip install 'mempp[tracing]'"


class Tracing:
    """Spans for requests and stages from one tracer provider."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import context, trace

        from mempp import __version__

        self._trace = trace
        self._context = context
        self._tracer = provider.get_tracer("mempp", __version__)

    @contextmanager
    def request(self, method: str, path: str, scheme: str) -> Iterator[_RequestSpan]:
        span = self._tracer.start_span(
            method,
            kind=self._trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path, "url.scheme": scheme},
        )
        token = self._context.attach(self._trace.set_span_in_context(span))
        holder = _RequestSpan(span, method, self._trace.set_span_in_context(span))
        try:
            yield holder
        finally:
            self._context.detach(token)
            span.end()

    def stage(
        self,
        request: _RequestSpan,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, int],
    ) -> None:
        span = self._tracer.start_span(
            f"mempp.{name}",
            context=request.context,
            start_time=start_ns,
            attributes={f"mempp.{key}": value for key, value in attributes.items()},
        )
        span.end(end_time=end_ns)


class _RequestSpan:
    """The request's span, named by its route once routing has found it."""

    def __init__(self, span: Any, method: str, context: Any) -> None:
        self.span = span
        self.context = context
        self._method = method

    def finish(self, route: str | None, status: int) -> None:
        if route is not None:
            self.span.update_name(f"{self._method} {route}")
            self.span.set_attribute("http.route", route)
        self.span.set_attribute("http.response.status_code", status)
        if status >= 500:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR))


def from_environment() -> Tracing | None:
    """Tracing to the OTLP endpoint the environment names, or None when it names none."""
    if not any(os.environ.get(name) for name in ENV_ENDPOINTS):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            f"an OTLP endpoint is set but OpenTelemetry is not installed ({INSTALL_HINT})"
        ) from exc
    service = os.environ.get("OTEL_SERVICE_NAME", "mempp")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider)
