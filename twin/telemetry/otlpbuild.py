"""Build OTLP ExportMetricsServiceRequests directly (the Prometheus scraper and remote-write
receiver, benchmarks, tests of raw protocol cases).

The OpenTelemetry SDK is the real client and tests use it; this builder exists for what
the SDK cannot send on purpose (NaN, negative counters, duplicates with identical
timestamps, malformed points), for pre-encoded benchmark load, and for the requests
``twin.telemetry.scrape`` builds from scraped exposition pages and
``twin.telemetry.remote_write`` from remote-write requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

# (name, "sum"|"gauge", [(attributes, start_ns, time_ns, value)])
MetricSpec = tuple[str, str, Sequence[tuple[Mapping[str, str], int, int, float]]]


def _kvs(attrs: Mapping[str, object]) -> list[KeyValue]:
    out = []
    for k, v in attrs.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out.append(KeyValue(key=k, value=AnyValue(string_value=str(v))))
        elif isinstance(v, int):
            out.append(KeyValue(key=k, value=AnyValue(int_value=v)))
        else:
            out.append(KeyValue(key=k, value=AnyValue(double_value=v)))
    return out


def request(resource: Mapping[str, object], metrics: Iterable[MetricSpec]) -> ExportMetricsServiceRequest:
    """One request with one resource and one scope holding ``metrics``."""
    req = ExportMetricsServiceRequest()
    add_resource(req, resource, metrics)
    return req


def add_resource(req: ExportMetricsServiceRequest, resource: Mapping[str, object], metrics: Iterable[MetricSpec],
                 scope: str = "twin.otlpbuild") -> None:
    """Append one resource with one scope (named ``scope``) holding ``metrics`` to ``req``."""
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend(_kvs(resource))
    sm = rm.scope_metrics.add()
    sm.scope.name = scope
    # The KeyValues of each attribute mapping, built once: a series' samples share one mapping
    # (remote write, a scrape), and building them was most of the cost (ids are unique while
    # ``metrics`` holds the mappings).
    built: dict[int, list[KeyValue]] = {}
    for name, kind, points in metrics:
        m = sm.metrics.add()
        m.name = name
        if kind == "sum":
            m.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
            m.sum.is_monotonic = True
            dps = m.sum.data_points
        else:
            dps = m.gauge.data_points
        for attrs, start, t, value in points:
            dp = dps.add()
            kvs = built.get(id(attrs))
            if kvs is None:
                kvs = built[id(attrs)] = _kvs(attrs)
            dp.attributes.extend(kvs)
            dp.start_time_unix_nano = start
            dp.time_unix_nano = t
            if isinstance(value, int) and not isinstance(value, bool):
                dp.as_int = value
            else:
                dp.as_double = float(value)
