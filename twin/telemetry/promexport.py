"""The twin's answers as Prometheus metrics: a ``/metrics`` endpoint beside the fleet's own.

Served with ``prometheus_client`` (the Prometheus project's Python client) on
``telemetry.metrics_address`` (off unless set; 9464 is the port OpenTelemetry's Prometheus
exporter uses by default). Names follow the OpenMetrics / Prometheus naming conventions
(https://prometheus.io/docs/practices/naming/): a ``twin_`` prefix, base units in the name
(``_seconds``, ``_ratio``), ``_total`` for counters. Every value is read from the telemetry
service when scraped:

- ``twin_job_step_seconds{job,basis}``: predicted step time, ``basis`` = ``designed`` (the
  scenario as specified) or ``now`` (the live cluster's capacities and the fitted calibration);
- ``twin_job_observed_step_seconds{job}``: the job's reported step time (mean of the window);
- ``twin_job_divergence_ratio{job,basis}``: observed / predicted - 1;
- ``twin_calibration_factor{factor}``: the fitted factors (1 = as designed);
- ``twin_components{kind,state}``: monitored components by kind and state;
- ``twin_component_capacity_ratio{component,kind,tier}``: usable capacity of every component
  that is not fully up (1 - paused time, rate / peak rate, 0 when down);
- ``twin_ingest_points_total{outcome}``: OTLP data points accepted, rejected, duplicate;
- ``twin_ignored_metric_points_total{metric,exporter}``: points of metrics the twin does not read.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

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
        step = GaugeMetricFamily("twin_job_step_seconds", "Predicted training step time", labels=["job", "basis"])
        observed = GaugeMetricFamily("twin_job_observed_step_seconds", "Reported training step time", labels=["job"])
        div = GaugeMetricFamily("twin_job_divergence_ratio", "Observed / predicted step time - 1",
                                labels=["job", "basis"])
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


class MetricsEndpoint:
    """``/metrics`` on ``host:port`` (port 0: a free one), until :meth:`close`."""

    def __init__(self, service: Scraped, address: str) -> None:
        from prometheus_client import start_http_server

        host, _, port = address.rpartition(":")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TwinCollector(service))
        self._server, self._thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        self.address = f"{host or '127.0.0.1'}:{self._server.server_port}"

    def close(self) -> None:
        """Stop the server this endpoint started."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
