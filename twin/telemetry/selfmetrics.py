"""The twin's own metrics through the OpenTelemetry SDK: divergence, calibration, ingest.

- ``twin.prediction.divergence`` (gauge, ratio): observed / predicted - 1 per job
  (attribute ``training_job``: a ``job`` attribute would clash with Prometheus' target label
  where these reach a Prometheus) and ``basis`` = ``now`` or ``designed``;
- ``twin.calibration.factor`` (gauge): each fitted factor (attribute ``factor``);
- ``twin.telemetry.components`` (gauge): components per ``state``;
- ``twin.telemetry.points`` (counter): points per ``outcome`` (accepted, rejected, duplicate).
Exported over OTLP to ``self_metrics_endpoint`` (or any reader the caller's provider has).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.metrics import CallbackOptions, Observation

if TYPE_CHECKING:
    from twin.core.specs import Calibration
    from twin.telemetry.state import LiveState
    from twin.telemetry.telemetry_config import TelemetryConfig

log = logging.getLogger(__name__)


class Observed(Protocol):
    """What the instruments read (``TelemetryService`` is one).

    A protocol, not the service class: the service creates its :class:`SelfMetrics`, so
    importing the class here would make the two modules import each other.
    """

    lock: AbstractContextManager[Any]
    state: LiveState
    calibration: Calibration
    stats: dict[str, int]

    def divergence(self) -> list[dict[str, Any]]: ...


class SelfMetrics:
    """Observable instruments reading the service when the SDK collects."""

    def __init__(self, service: Observed, meter_provider: Any, config: TelemetryConfig) -> None:
        self.service = service
        self._owned = None
        if meter_provider is None:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            exporter = OTLPMetricExporter(endpoint=config.self_metrics_endpoint, insecure=True)
            reader = PeriodicExportingMetricReader(exporter,
                                                   export_interval_millis=int(config.self_metrics_interval_s * 1000))
            meter_provider = self._owned = MeterProvider(metric_readers=[reader])
        meter = meter_provider.get_meter("twin.telemetry")
        meter.create_observable_gauge("twin.prediction.divergence", [self._divergence], unit="1",
                                      description="observed / predicted step time - 1, per job and basis")
        meter.create_observable_gauge("twin.calibration.factor", [self._factors], unit="1",
                                      description="fitted calibration factors (1 = as designed)")
        meter.create_observable_gauge("twin.telemetry.components", [self._components], unit="{component}",
                                      description="monitored components by state")
        meter.create_observable_counter("twin.telemetry.points", [self._points], unit="{point}",
                                        description="OTLP data points by outcome")

    def _divergence(self, options: CallbackOptions) -> Iterable[Observation]:
        try:
            views = self.service.divergence()
        except Exception:  # never break the SDK's collection cycle
            log.exception("divergence metric failed")
            return []
        out = []
        for v in views:
            if v["observations"]:
                out.append(Observation(v["divergence_now"], {"training_job": v["job"], "basis": "now"}))
                out.append(Observation(v["divergence_designed"], {"training_job": v["job"], "basis": "designed"}))
        return out

    def _factors(self, options: CallbackOptions) -> Iterable[Observation]:
        cal = self.service.calibration
        return [Observation(float(getattr(cal, f)), {"factor": f})
                for f in ("compute_efficiency", "scale_up_bandwidth", "scale_out_bandwidth")]

    def _components(self, options: CallbackOptions) -> Iterable[Observation]:
        with self.service.lock:
            states = [c.state for c in self.service.state.components.values()]
        return [Observation(states.count(s), {"state": s}) for s in ("up", "degraded", "down")]

    def _points(self, options: CallbackOptions) -> Iterable[Observation]:
        with self.service.lock:
            st = dict(self.service.stats)
        return [Observation(st["points_accepted"] - st["points_duplicate"], {"outcome": "accepted"}),
                Observation(st["points_rejected"], {"outcome": "rejected"}),
                Observation(st["points_duplicate"], {"outcome": "duplicate"})]

    def shutdown(self) -> None:
        """Flush and stop the provider this object created (not one it was given)."""
        if self._owned is not None:
            self._owned.shutdown()
