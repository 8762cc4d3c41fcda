"""Prometheus metrics of a running server, at ``GET /metrics``.

What a team watching several nodes needs to see: requests by route and status with their
latency (``http_server_request_duration_seconds``, named after OpenTelemetry's HTTP
semantic conventions), how long each search stage takes (question encoding, each leg,
fusion, the records read, the evidence block: ``mempp_search_stage_duration_seconds``), the
records written (``mempp_records_written_total``), the records each scope holds and the
database pool's use (read from the store at scrape time).

Who may read it: on a keyless loopback server, anyone who can reach it (every request there
acts as admin). On a keyed server a scrape must carry ``Authorization: Bearer`` with the
token in ``$MEMPP_METRICS_TOKEN``; without that variable ``/metrics`` is refused, because the
page names every scope, which no tenant's key may see. With ``--workers N`` each worker
counts its own requests; set ``$PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess
mode) for one page over all of them.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mempp.errors import MemppError
from mempp.search import stages

if TYPE_CHECKING:
    from mempp.server.state import ServerState

ENV_TOKEN = "MEMPP_METRICS_TOKEN"
ENV_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A scrape reads at most this many scopes' counts, so its cost stays bounded.
MAX_SCOPES = 200

# Request latencies from a millisecond to a minute; stages from 0.1 ms to 10 s.
_REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
_STAGE_BUCKETS += (0.5, 1, 2.5, 10)
_STORE_FAMILIES = ("mempp_records", "mempp_store_reachable", "mempp_db_pool_connections")


class Metrics:
    """The server's metrics: fed by the observability middleware, read by ``render``."""

    def __init__(self, state: ServerState) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "http_server_request_duration_seconds",
            "Duration of HTTP server requests, by method, route template and status.",
            ["http_request_method", "http_route", "http_response_status_code"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.stages = Histogram(
            "mempp_search_stage_duration_seconds",
            "Duration of each stage of the read path (query encoding, legs, fusion, records "
            "read, evidence) and of write batches.",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=self.registry,
        )
        self.written = Counter(
            "mempp_records_written_total",
            "Records stored by writes through this server (duplicates and empty texts not "
            "counted).",
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(state))
        self._token = os.environ.get(ENV_TOKEN) or None

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).observe(seconds)

    def observe_stage(self, name: str, seconds: float, attributes: Mapping[str, int]) -> None:
        self.stages.labels(name).observe(seconds)
        if name == stages.WRITE:
            self.written.inc(attributes.get("rows", 0))

    def allowed(self, keys_required: bool, authorization: str | None) -> str | None:
        """Why a scrape with this ``Authorization`` header is refused, or None."""
        if not keys_required:
            return None
        if self._token is None:
            return f"metrics of a keyed server need ${ENV_TOKEN} set when it starts"
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self._token.encode()
        ):
            return "a scrape needs Authorization: Bearer <$MEMPP_METRICS_TOKEN>"
        return None

    def render(self) -> bytes:
        if os.environ.get(ENV_MULTIPROC):
            from prometheus_client import multiprocess

            combined = CollectorRegistry()
            multiprocess.MultiProcessCollector(combined)
            return generate_latest(combined) + generate_latest(_StoreOnly(self.registry))
        return generate_latest(self.registry)


class _StoreCollector(Collector):
    """Gauges read from the store at scrape time: records per scope, the pool's use."""

    def __init__(self, state: ServerState) -> None:
        self._state = state

    def describe(self) -> list[Any]:
        return []  # read at scrape time only: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        store = self._state.store
        records = GaugeMetricFamily(
            "mempp_records",
            "Records of each scope, by state (active, or not).",
            labels=["scope", "state"],
        )
        reachable = GaugeMetricFamily(
            "mempp_store_reachable", "1 when the last scrape could read the store, else 0."
        )
        try:
            for scope in store.scopes()[:MAX_SCOPES]:
                active = store.count(scope)
                inactive = store.count(scope, active_only=False) - active
                records.add_metric([scope, "active"], active)
                records.add_metric([scope, "inactive"], inactive)
        except MemppError:  # the database is away: said by the gauge below
            reachable.add_metric([], 0)
        else:
            reachable.add_metric([], 1)
        yield records
        yield reachable
        stats = getattr(store, "pool_stats", None)
        if stats is not None:
            pool = GaugeMetricFamily(
                "mempp_db_pool_connections", "The database pool's connections.", labels=["state"]
            )
            for name, value in stats().items():
                pool.add_metric([name], value)
            yield pool


class _StoreOnly(Collector):
    """In multiprocess mode, this worker's store gauges (the shared files hold the rest)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Any]:
        for family in self._registry.collect():
            if family.name in _STORE_FAMILIES:
                yield family
