"""The decoder: values of every OTLP kind, refusals, and series ids from the attribute-layout memo."""

from __future__ import annotations

import math
import time

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from twin.engine import Engine
from twin.telemetry.decode import MAX_POINT_ATTRIBUTES, TOO_MANY_ATTRIBUTES, DecodeDeadline, Decoder, point_keys
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
    assert _ports(dec.decode(req([2, 3], 10.0))) == first[1:]


def test_a_point_beyond_the_sdk_attribute_limit_is_refused_naming_it() -> None:
    t = time.time_ns()
    many = {"device": "d", "port": "1", **{f"a{i}": "x" for i in range(MAX_POINT_ATTRIBUTES)}}
    points = [(many, 0, t, 4.0), ({"device": "d", "port": "2"}, 0, t, 4.0)]
    out = _decoder().decode(request({"host.name": "n"}, [(STATE, "gauge", points)]))
    assert _ports(out) == [("n/ib_port:d/2", 4.0)]
    assert out.rejected == {TOO_MANY_ATTRIBUTES: 1} and "128 attributes" in TOO_MANY_ATTRIBUTES


def test_decoding_stops_at_its_deadline() -> None:
    t = time.time_ns()
    req = request({"host.name": "n"}, [(STATE, "gauge", [({"device": "d", "port": "1"}, 0, t, 4.0)])])
    with pytest.raises(DecodeDeadline, match="deadline"):
        _decoder().decode(req, deadline=time.monotonic() - 1)
    assert _ports(_decoder().decode(req, deadline=time.monotonic() + 60)) == [("n/ib_port:d/1", 4.0)]


def test_a_metric_whose_wire_repeats_its_data_as_gauge_and_sum_decodes_as_parsed() -> None:
    """gauge{A} sum{B} gauge{C} on the wire parses as gauge{C} (the last member of the oneof wins);
    its points are the parsed ones."""
    t = time.time_ns()

    def part(kind: str, ports: list[int]) -> bytes:
        m = request({}, [(STATE, kind, [({"device": "d", "port": str(i)}, 0, t, 4.0) for i in ports])])
        return m.resource_metrics[0].scope_metrics[0].metrics[0].SerializeToString()

    metric = metrics_pb2.Metric.FromString(part("gauge", [1, 2]) + part("sum", [3]) + part("gauge", [4]))
    assert metric.WhichOneof("data") == "gauge" and len(metric.gauge.data_points) == 1
    req = request({"host.name": "n"}, [])
    req.resource_metrics[0].scope_metrics[0].metrics.append(metric)
    assert _ports(_decoder().decode(req)) == [("n/ib_port:d/4", 4.0)]


def test_point_keys_are_the_attributes_without_the_times_and_value() -> None:
    def point(attrs: dict[str, str], t: int, value: float | int) -> metrics_pb2.NumberDataPoint:
        req = request({}, [(STATE, "gauge", [(attrs, t - 1, t, value)])])
        return req.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0]

    a1, a2 = point({"device": "d", "port": "1"}, 10**18, 4.0), point({"device": "d", "port": "1"}, 2 * 10**18, 7)
    b = point({"device": "d", "port": "2"}, 10**18, 4.0)
    keys = point_keys([a1, a2, b])
    assert keys[0] == keys[1] != keys[2]
    assert b"port" in keys[0] and b"\x00\x00" not in keys[0][:2]
    flagged = metrics_pb2.NumberDataPoint()
    flagged.CopyFrom(a1)
    flagged.flags = 1
    assert point_keys([flagged])[0] != keys[0]  # anything else a point carries stays in its key
