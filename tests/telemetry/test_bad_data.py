"""Bad data is rejected with partial success or INVALID_ARGUMENT; floods and overload are bounded."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub

from twin.telemetry.otlpbuild import request

PORT = {"device": "mlx5_0", "port": "1"}


def stub(srv) -> MetricsServiceStub:
    return MetricsServiceStub(srv.channel())


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_partial_success_names_each_reason(start_server) -> None:
    srv = start_server("--calibrate-interval", "0")
    t = time.time_ns()
    req = request({"host.name": "n1"}, [
        ("node_infiniband_state_id", "gauge", [(PORT, 0, t, 4)]),                       # good
        ("node_infiniband_rate_bytes_per_second", "gauge", [(PORT, 0, t, float("nan"))]),  # NaN
        ("node_infiniband_symbol_error_total", "sum", [(PORT, t - 10**9, t, -5.0)]),     # negative counter
        ("node_cpu_seconds_total", "sum", [({"cpu": "0"}, 0, t, 1.0)]),                  # unknown metric
        ("node_infiniband_port_transmit_wait_total", "sum", [({"port": "1"}, 0, t, 1.0)]),  # no device
    ])
    m = req.resource_metrics[0].scope_metrics[0].metrics.add()  # wrong type: a histogram
    m.name = "DCGM_FI_DEV_GPU_TEMP"
    h = m.histogram.data_points.add()
    h.time_unix_nano, h.count = t, 1
    resp = stub(srv).Export(req, timeout=30)
    assert resp.partial_success.rejected_data_points == 5
    msg = resp.partial_success.error_message
    for reason in ("non-finite", "negative counter", "unknown metric", "missing identifying attribute",
                   "data type not gauge or sum"):
        assert reason in msg, msg
    assert srv.component("n1/ib_port:mlx5_0/1").signals["state"] == 4  # the good point is in


def test_invalid_requests_are_invalid_argument(start_server) -> None:
    srv = start_server("--calibrate-interval", "0")
    t = time.time_ns()
    only_bad = request({"host.name": "n1"}, [("node_infiniband_rate_bytes_per_second", "gauge",
                                              [(PORT, 0, t, float("inf")), (PORT, 0, 0, 1.0)])])
    with pytest.raises(grpc.RpcError) as err:
        stub(srv).Export(only_bad, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "non-finite" in err.value.details() and "Traceback" not in err.value.details()
    raw = srv.channel().unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
    with pytest.raises(grpc.RpcError) as err:
        raw(b"\xff\xff\xff not protobuf", timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    empty = stub(srv).Export(ExportMetricsServiceRequest(), timeout=30)
    assert empty == ExportMetricsServiceResponse()


def test_attribute_flood_is_capped_and_memory_bounded(start_server) -> None:
    srv = start_server("--calibrate-interval", "0", "--max-series", "2000", "--max-components", "2000")
    client = stub(srv)
    t0 = time.time_ns()

    def flood(round_: int) -> int:
        pts = [({"device": f"rogue-{round_}-{i}", "port": "1"}, 0, t0 + round_, 4.0) for i in range(5000)]
        return client.Export(request({"host.name": "n1"}, [("node_infiniband_state_id", "gauge", pts)]),
                             timeout=60).partial_success.rejected_data_points

    flood(0)
    base = rss_kib(srv.proc.pid)
    rejected = sum(flood(r) for r in range(1, 16))  # 75,000 unique attribute sets
    grown = rss_kib(srv.proc.pid) - base
    st = srv.state(kinds=["none"]).ingest
    assert st.series == 2000 and st.components == 2000
    assert rejected == 15 * 5000
    assert grown < 40 * 1024, f"RSS grew {grown} KiB under a flood capped at 2000 series"
    # A known component still updates while the cap holds.
    ok = client.Export(request({"host.name": "n1"}, [("node_infiniband_state_id", "gauge",
                                                      [({"device": "rogue-0-0", "port": "1"}, 0, t0 + 99, 1.0)])]))
    assert ok.partial_success.rejected_data_points == 0
    assert srv.component("n1/ib_port:rogue-0-0/1").state == 3  # DOWN


def test_overload_is_unavailable_with_retry_info(start_server) -> None:
    srv = start_server("--calibrate-interval", "0", "--max-pending-points", "1")
    t0 = time.time_ns()
    reqs = [request({"host.name": f"n{k}"}, [("node_infiniband_state_id", "gauge",
                                               [({"device": f"mlx5_{i}", "port": "1"}, 0, t0, 4.0)
                                                for i in range(3000)])]) for k in range(24)]
    client = stub(srv)

    def send(req):
        try:
            client.Export(req, timeout=60)
            return None
        except grpc.RpcError as err:
            return err

    with ThreadPoolExecutor(12) as pool:
        errors = [e for e in pool.map(send, reqs) if e is not None]
    assert errors, "no request was refused although the queue holds one request"
    assert len(errors) < len(reqs)
    for err in errors:
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        md = dict(err.trailing_metadata())
        info = error_details_pb2.RetryInfo.FromString(md["google.rpc.retryinfo-bin"])
        assert info.retry_delay.seconds + info.retry_delay.nanos / 1e9 == pytest.approx(1.0)
        status = status_pb2.Status.FromString(md["grpc-status-details-bin"])
        assert status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
