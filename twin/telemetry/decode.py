"""OTLP metrics request -> mapped points, with every point the twin cannot use counted.

Per data point: the metric must be one the catalog maps (else "unknown metric"); its data
must be a gauge or a sum (histograms and summaries carry no signal the twin maps); the
value must be present and finite; a counter must not be negative; the point needs a
timestamp and the attributes that identify its component. Attribute keys are compared
case-insensitively; data-point attributes win over resource attributes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from twin.telemetry.mapping import MetricCatalog
from twin.telemetry.state import Point

# Where the host name comes from, in order (OTel resource semantic conventions first,
# then the labels Prometheus exporters carry: dcgm-exporter "Hostname", "instance").
HOST_KEYS = ("host.name", "hostname", "k8s.node.name", "host", "node", "instance", "service.instance.id")
# Ports reported by a switch exporter name their switch.
SWITCH_KEYS = ("switch", "switch.name", "switch_name")
_DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
_NO_RECORDED_VALUE = 1  # DataPointFlags.FLAG_NO_RECORDED_VALUE


@dataclass
class Decoded:
    """Points ready to apply, and the points refused with why (reason -> count, example)."""

    points: list[Point] = field(default_factory=list)
    total: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def reject(self, reason: str, n: int, example: str) -> None:
        """Count ``n`` refused points."""
        self.rejected[reason] = self.rejected.get(reason, 0) + n
        self.examples.setdefault(reason, example)

    @property
    def rejected_count(self) -> int:
        """Points refused while decoding."""
        return sum(self.rejected.values())


def _attrs(kvs: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for kv in kvs:  # type: ignore[attr-defined]
        v = kv.value
        s = v.string_value
        if not s:
            which = v.WhichOneof("value")
            if which is None or which in ("array_value", "kvlist_value", "bytes_value"):
                continue
            s = str(getattr(v, which))
        out[kv.key.lower()] = s
    return out


def _first(attrs: dict[str, str], res: dict[str, str], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        v = attrs.get(k)
        if v is None:
            v = res.get(k)
        if v is not None:
            return v
    return None


def decode(request: ExportMetricsServiceRequest, catalog: MetricCatalog) -> Decoded:
    """Map every data point of ``request``; refused points are counted by reason."""
    out = Decoded()
    points = out.points
    for rm in request.resource_metrics:
        res = _attrs(rm.resource.attributes)
        res_host = _first(res, {}, HOST_KEYS) or ""
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind == "gauge":
                    dps, delta, cumulative_sum = metric.gauge.data_points, False, False
                elif kind == "sum":
                    dps = metric.sum.data_points
                    delta = metric.sum.aggregation_temporality == _DELTA
                    cumulative_sum = metric.sum.is_monotonic
                else:
                    n = len(getattr(metric, kind).data_points) if kind else 0
                    out.total += n
                    if n:
                        out.reject("data type not gauge or sum", n, f"{metric.name} ({kind})")
                    continue
                n = len(dps)
                out.total += n
                resolved = catalog.lookup(metric.name)
                if resolved is None:
                    out.reject("unknown metric", n, metric.name)
                    continue
                m = resolved.mapping
                counter = m.kind == "counter"
                if not counter and cumulative_sum and delta:
                    out.reject("delta sum for a gauge signal", n, metric.name)
                    continue
                scale = m.scale
                captures = dict(resolved.captures)
                ident_keys, detail_keys = resolved.identity, resolved.detail
                for dp in dps:
                    which = dp.WhichOneof("value")
                    if which is None:
                        if dp.flags & _NO_RECORDED_VALUE:
                            continue
                        out.reject("data point without a value", 1, metric.name)
                        continue
                    value = dp.as_double if which == "as_double" else float(dp.as_int)
                    if not math.isfinite(value):
                        out.reject("non-finite value (NaN or infinity)", 1, metric.name)
                        continue
                    if counter and value < 0:
                        out.reject("negative counter value", 1, metric.name)
                        continue
                    t = dp.time_unix_nano
                    if t <= 0:
                        out.reject("data point without a timestamp", 1, metric.name)
                        continue
                    attrs = _attrs(dp.attributes)
                    if captures:
                        attrs.update(captures)
                    ident = []
                    missing = None
                    for alts in ident_keys:
                        v = _first(attrs, res, alts)
                        if v is None:
                            missing = "|".join(alts)
                            break
                        ident.append(v)
                    if missing is not None:
                        out.reject(f"missing identifying attribute {missing!r}", 1, metric.name)
                        continue
                    detail = tuple(_first(attrs, res, alts) or "" for alts in detail_keys)
                    sw = _first(attrs, res, SWITCH_KEYS)
                    host = sw or _first(attrs, {}, HOST_KEYS) or res_host
                    points.append(Point(resolved, host, sw is not None, tuple(ident), detail, dp.start_time_unix_nano,
                                        t, value * scale, delta))
    return out


def summarize(reasons: dict[str, int], examples: dict[str, str], limit: int = 512) -> str:
    """A one-line error message for OTLP partial success."""
    parts = [f"{n} point(s): {r}" + (f" (e.g. {examples[r]!r})" if r in examples else "")
             for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."
