"""The decoder: values of every OTLP kind, refusals, and series ids from the attribute-layout memo."""

from __future__ import annotations

import math
import time

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from twin.engine import Engine
from twin.telemetry.decode import Decoder
from twin.telemetry.mapping import MetricCatalog
from twin.telemetry.otlpbuild import request

STATE = "node_infiniband_state_id"  # a gauge of ib_port (device, port)


def _decoder() -> Decoder:
    return Decoder(MetricCatalog.from_plugins(Engine(autoload=False).pm))


def _ports(decoded) -> list[tuple[str, float]]:
    return [(sid.cid, v) for b in decoded.points for sid, v in zip(b.sids, b.values, strict=True)]


def test_integer_zero_negative_zero_and_missing_values() -> None:
    t = time.time_ns()
    req = request({"host.name": "n"}, [(STATE, "gauge", [({"device": "d", "port": str(i)}, 0, t, v)
                                                         for i, v in enumerate([7, 0, 0.0, -0.0, 4.5, math.nan])])])
    dps = req.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points
    extra = dps.add()                                  # no value, not flagged: refused
    extra.attributes.add(key="device", value={"string_value": "d"})
    extra.time_unix_nano = t
    flagged = dps.add()                                # no value, flagged "no recorded value": skipped
    flagged.CopyFrom(extra)
    flagged.flags = 1
    out = _decoder().decode(req)
    values = [v for _, v in _ports(out)]
    assert values == [7.0, 0.0, 0.0, 0.0, 4.5] and math.copysign(1, values[3]) == -1
    assert out.rejected == {"non-finite value (NaN or infinity)": 1, "data point without a value": 1}
    assert out.count == 5 and out.total == 8


def test_a_layout_seen_before_and_a_reordered_one_map_each_point_to_its_series() -> None:
    dec = _decoder()
    t = time.time_ns()

    def req(order: list[int], value: float) -> ExportMetricsServiceRequest:
        return request({"host.name": "n"}, [(STATE, "gauge", [({"device": "d", "port": str(i)}, 0, t, value + i)
                                                              for i in order])])

    first = _ports(dec.decode(req([1, 2, 3], 10.0)))
    again = dec.decode(req([1, 2, 3], 10.0))
    assert _ports(again) == first == [("n/ib_port:d/1", 11.0), ("n/ib_port:d/2", 12.0), ("n/ib_port:d/3", 13.0)]
    assert sorted(_ports(dec.decode(req([3, 1, 2], 10.0)))) == first
    # Given the wire bytes the request came from, the result is the same.
    r = req([2, 3], 10.0)
    assert _ports(dec.decode(r, r.SerializeToString())) == first[1:]


def test_a_metric_whose_wire_repeats_its_data_as_gauge_and_sum_decodes_as_parsed() -> None:
    """gauge{A} sum{B} gauge{C} on the wire parses as gauge{C} (the last member of the oneof wins);
    the attribute view sees A and C, which do not line up, so points resolve from what was parsed."""
    t = time.time_ns()

    def part(kind: str, ports: list[int]) -> bytes:
        m = request({}, [(STATE, kind, [({"device": "d", "port": str(i)}, 0, t, 4.0) for i in ports])])
        return m.resource_metrics[0].scope_metrics[0].metrics[0].SerializeToString()

    metric = metrics_pb2.Metric.FromString(part("gauge", [1, 2]) + part("sum", [3]) + part("gauge", [4]))
    assert metric.WhichOneof("data") == "gauge" and len(metric.gauge.data_points) == 1
    req = request({"host.name": "n"}, [])
    req.resource_metrics[0].scope_metrics[0].metrics.append(metric)
    assert _ports(_decoder().decode(req)) == [("n/ib_port:d/4", 4.0)]
