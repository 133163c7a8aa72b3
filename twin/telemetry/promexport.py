"""The twin's answers as Prometheus metrics: a ``/metrics`` endpoint beside the fleet's own.

The metric families are ``prometheus_client``'s (the Prometheus project's Python client),
served on ``telemetry.metrics_address`` (off unless set; 127.0.0.1 when it names no host; 9464
is the port OpenTelemetry's Prometheus exporter uses by default) with the main port's bearer
token and TLS, like every other port: with a token, ``Authorization: Bearer <token>`` is
required (401 otherwise: a Prometheus sets it with ``authorization: {credentials: <token>}``,
a ServiceMonitor with ``authorization``); with TLS it speaks HTTPS (``scheme: https`` and
``tls_config``; client certificates required under mutual TLS). At most ``MAX_CONNECTIONS``
scrapes are served at once. Names follow the OpenMetrics / Prometheus naming conventions
(https://prometheus.io/docs/practices/naming/): a ``twin_`` prefix, base units in the name
(``_seconds``, ``_ratio``), ``_total`` for counters. Every value is read from the telemetry
service when scraped:

- ``twin_job_step_seconds{training_job,basis}``: predicted step time, ``basis`` = ``designed`` (the
  scenario as specified) or ``now`` (the live cluster's capacities and the fitted calibration);
- ``twin_job_observed_step_seconds{training_job}``: the job's reported step time (mean of the window);
- ``twin_job_divergence_ratio{training_job,basis}``: observed / predicted - 1;

The training job's label is ``training_job``, not ``job``: Prometheus attaches its own ``job``
and ``instance`` target labels to every scraped series, and a scraped ``job`` is renamed
``exported_job`` (``honor_labels: false``, the default), so ``{job="..."}`` would find nothing.
No exported label is named ``job`` or ``instance`` (``RESERVED_LABELS``; a test).
- ``twin_calibration_factor{factor}``: the fitted factors (1 = as designed);
- ``twin_components{kind,state}``: monitored components by kind and state;
- ``twin_component_capacity_ratio{component,kind,tier}``: usable capacity of every component
  that is not fully up (1 - paused time, rate / peak rate, 0 when down);
- ``twin_ingest_points_total{outcome}``: OTLP data points accepted, rejected, duplicate;
- ``twin_ignored_metric_points_total{metric,exporter}``: points of metrics the twin does not read.
"""

from __future__ import annotations

import http.server
import logging
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from twin.telemetry.httpbase import GuardedServer, HttpError, authorize

if TYPE_CHECKING:
    from twin.core.specs import Calibration
    from twin.telemetry.state import LiveState

log = logging.getLogger(__name__)


class Scraped(Protocol):
    """What the collector reads (``TelemetryService`` is one; a protocol, since the service
    creates the endpoint and the two modules must not import each other).
    """

    lock: AbstractContextManager[Any]
    state: LiveState
    calibration: Calibration
    stats: dict[str, int]

    def divergence(self) -> list[dict[str, Any]]: ...

    def ignored_metrics(self) -> list[dict[str, Any]]: ...

# Prometheus' own target labels (https://prometheus.io/docs/concepts/jobs_instances/): never exported.
RESERVED_LABELS = ("job", "instance")

# Every metric family the endpoint exports (the Grafana dashboards may query only these).
FAMILIES = ("twin_job_step_seconds", "twin_job_observed_step_seconds", "twin_job_divergence_ratio",
            "twin_calibration_factor", "twin_components", "twin_component_capacity_ratio",
            "twin_ingest_points_total", "twin_ignored_metric_points_total")


class TwinCollector(Collector):
    """Reads the telemetry service at every scrape."""

    def __init__(self, service: Scraped) -> None:
        self.service = service

    def collect(self) -> Iterator[Any]:
        """The metric families (a failing part is logged and left out, never a failed scrape)."""
        svc = self.service
        step = GaugeMetricFamily("twin_job_step_seconds", "Predicted training step time",
                                 labels=["training_job", "basis"])
        observed = GaugeMetricFamily("twin_job_observed_step_seconds", "Reported training step time",
                                     labels=["training_job"])
        div = GaugeMetricFamily("twin_job_divergence_ratio", "Observed / predicted step time - 1",
                                labels=["training_job", "basis"])
        try:
            for v in svc.divergence():
                step.add_metric([v["job"], "designed"], v["predicted_designed_s"])
                step.add_metric([v["job"], "now"], v["predicted_now_s"])
                if v["observations"]:
                    observed.add_metric([v["job"]], v["observed_step_time_s"])
                    div.add_metric([v["job"], "now"], v["divergence_now"])
                    div.add_metric([v["job"], "designed"], v["divergence_designed"])
        except Exception:  # a scrape must not fail because one job cannot be evaluated
            log.exception("job metrics failed")
        yield from (step, observed, div)
        cal = GaugeMetricFamily("twin_calibration_factor", "Fitted calibration factor (1 = as designed)",
                                labels=["factor"])
        for f in ("compute_efficiency", "scale_up_bandwidth", "scale_out_bandwidth"):
            cal.add_metric([f], float(getattr(svc.calibration, f)))
        yield cal
        with svc.lock:
            comps = [(c.id, c.kind, c.tier, c.state, c.capacity) for c in svc.state.components.values()]
            stats = dict(svc.stats)
        by = GaugeMetricFamily("twin_components", "Monitored components by kind and state", labels=["kind", "state"])
        for (kind, state), n in sorted(Counter((k, s) for _, k, _, s, _ in comps).items()):
            by.add_metric([kind, state], n)
        yield by
        cap = GaugeMetricFamily("twin_component_capacity_ratio", "Usable capacity of a component not fully up",
                                labels=["component", "kind", "tier"])
        for cid, kind, tier, state, capacity in comps:
            if state != "up" or capacity < 1.0:
                cap.add_metric([cid, kind, tier], float(capacity))
        yield cap
        pts = CounterMetricFamily("twin_ingest_points", "OTLP data points by outcome", labels=["outcome"])
        pts.add_metric(["accepted"], stats["points_accepted"] - stats["points_duplicate"])
        pts.add_metric(["rejected"], stats["points_rejected"])
        pts.add_metric(["duplicate"], stats["points_duplicate"])
        yield pts
        ign = CounterMetricFamily("twin_ignored_metric_points", "Points of metrics the twin does not read",
                                  labels=["metric", "exporter"])
        for row in svc.ignored_metrics():
            ign.add_metric([row["name"], row["exporter"]], row["points"])
        yield ign


PATH = "/metrics"  # what Prometheus scrapes by default (scrape_config metrics_path)
# Scrapes served at once: a few Prometheus replicas and an operator's curl; each scrape reads the
# telemetry state under its lock, so more at once would only queue there.
MAX_CONNECTIONS = 16
SOCKET_TIMEOUT_S = 30.0  # an idle or slow client's connection: Prometheus' default scrape_timeout is 10 s


class _Handler(http.server.BaseHTTPRequestHandler):
    """``GET /metrics`` (and HEAD): the exposition in the format the scraper accepts."""

    protocol_version = "HTTP/1.1"
    server_version = "fabric-twin-metrics"
    sys_version = ""
    timeout = SOCKET_TIMEOUT_S
    server: _Server

    def do_GET(self) -> None:
        try:
            path = self.path.split("?", 1)[0]
            if path != PATH:
                raise HttpError(HTTPStatus.NOT_FOUND, f"no such path {path[:200]!r}; metrics are at {PATH}")
            authorize(self.headers.get("Authorization"), self.server.token)
        except HttpError as err:
            self._send(err.status, str(err).encode(), "text/plain; charset=utf-8", err.headers)
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept"))
        self._send(HTTPStatus.OK, encoder(self.server.registry), content_type)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _not_allowed(self) -> None:
        self.close_connection = True  # a body we do not read: not parsed as the next request
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} not allowed; GET {PATH}".encode(),
                   "text/plain; charset=utf-8", {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics %s: " + format, self.address_string(), *args)


class _Server(GuardedServer):
    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, token: str | None,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.registry = registry
        self.token = token
        super().__init__(address, _Handler, MAX_CONNECTIONS, ssl_context)


class MetricsEndpoint:
    """``/metrics`` on ``host:port`` (port 0: a free one; no host: 127.0.0.1), with the bearer
    ``token`` (None: open) and TLS ``ssl_context`` (None: plain HTTP), until :meth:`close`.
    """

    def __init__(self, service: Scraped, address: str, token: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TwinCollector(service))
        self._server = _Server((host, int(port)), self.registry, token, ssl_context)
        self.scheme = "https" if ssl_context is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        self.address = f"{shown}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="twin-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """What a Prometheus scrapes."""
        return f"{self.scheme}://{self.address}{PATH}"

    def close(self) -> None:
        """Stop the server this endpoint started."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
