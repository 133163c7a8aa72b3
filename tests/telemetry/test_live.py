"""The real OpenTelemetry SDK exporter pushing exporter-named metrics to a live server."""

from __future__ import annotations

import time

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.resources import Resource

from tests.telemetry.conftest import EXAMPLES, pb
from twin.telemetry.otlpbuild import request
from twin.telemetry.simulate import SimulatedCluster

SCENARIO = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
UP, DEGRADED, DOWN = pb.COMPONENT_STATE_UP, pb.COMPONENT_STATE_DEGRADED, pb.COMPONENT_STATE_DOWN


def push(sim: SimulatedCluster, times: int = 1) -> None:
    for _ in range(times):
        # Rates come from counter deltas over the SDK's timestamps; scheduling jitter on a
        # loaded 2-core machine is tens of ms, so intervals of 0.5 s keep it to a few percent.
        time.sleep(0.5)
        assert sim.push() == [MetricExportResult.SUCCESS] * len(sim.nodes)


def test_sdk_push_live_state_and_now_prediction(start_server) -> None:
    srv = start_server("--calibrate-interval", "0")
    api = srv.api()
    designed = api.RegisterJob(pb.RegisterJobRequest(job="gpt", scenario_yaml=SCENARIO)).predicted_step_time_s
    sim = SimulatedCluster(srv.address, nodes=2, gpus_per_node=8, job="gpt", step_time_s=designed)
    try:
        push(sim, 2)
        st = srv.state()
        kinds = {c.kind for c in st.components}
        assert {"gpu", "nvlink", "ib_port", "roce_port", "transceiver", "job"} <= kinds
        assert all(c.state == UP for c in st.components), [c.id for c in st.components if c.state != UP]
        port = srv.component("node-1/ib_port:mlx5_3/1")
        assert port.tx_bytes_per_s == pytest.approx(0.8 * 50e9, rel=0.2)  # achieved bandwidth from the counter
        assert srv.component("node-1/gpu:0").signals["temperature_c"] == 62.0
        p0 = api.PredictLive(pb.PredictLiveRequest(job="gpt"))
        # Healthy, except ~0.5% PFC pause time on every RoCE port: "now" is barely slower.
        assert p0.designed_step_time_s <= p0.now_step_time_s < p0.designed_step_time_s * 1.02
        assert not p0.down_components and not p0.degraded_components

        sim.set_port(0, 3, "degraded")  # trains down to half rate, symbol errors, low rx power
        push(sim, 2)
        port = srv.component("node-1/ib_port:mlx5_3/1")
        assert port.state == DEGRADED and port.capacity_fraction == pytest.approx(0.5)
        signals = {e.signal for e in port.evidence}
        assert {"rate_Bps", "symbol_errors_per_s"} <= signals
        assert srv.component("node-1/transceiver:mlx5_3").state == DEGRADED
        p1 = api.PredictLive(pb.PredictLiveRequest(job="gpt"))
        assert p1.now_step_time_s > p0.now_step_time_s * 1.005  # a degraded link slows the predicted step
        assert p1.designed_step_time_s == pytest.approx(p0.designed_step_time_s)
        assert "node-1/ib_port:mlx5_3/1" in p1.degraded_components
        assert p1.now_calibration.scale_out_bandwidth == pytest.approx(0.5)

        sim.set_port(1, 5, "down")
        push(sim)
        down = srv.component("node-2/ib_port:mlx5_5/1")
        assert down.state == DOWN and any(e.severity == "down" for e in down.evidence)
        p2 = api.PredictLive(pb.PredictLiveRequest(job="gpt"))
        assert p2.down_components == ["node-2/ib_port:mlx5_5/1"]  # a downed link is reported
        # Priced by kind: NCCL runs on the node's 7 remaining NICs (twin.core.fault_kinds), shown in the notes.
        assert any(n.startswith("node-2/ib_port:mlx5_5/1: state=1 -> bandwidth") for n in p2.notes)
        events = {(e.component, e.new_state) for e in srv.state().events}
        assert ("node-1/ib_port:mlx5_3/1", DEGRADED) in events and ("node-2/ib_port:mlx5_5/1", DOWN) in events
    finally:
        sim.shutdown()


def _exporter_pair(addr: str, host: str, value: dict, compression: Compression | None = None):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"host.name": host}))
    provider.get_meter("t").create_observable_counter(
        "node_infiniband_port_data_transmitted_bytes_total",
        [lambda o: [Observation(value["v"], {"device": "mlx5_0", "port": "1"})]])
    return provider, reader, OTLPMetricExporter(endpoint=addr, insecure=True, compression=compression)


def _point(data):
    return data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0]


def test_counter_resets_and_duplicates_with_sdk(start_server) -> None:
    srv = start_server("--calibrate-interval", "0")
    value = {"v": 1_000_000.0}
    provider, reader, exp = _exporter_pair(srv.address, "h1", value, Compression.Gzip)  # gzip accepted
    cid = "h1/ib_port:mlx5_0/1"
    d1 = reader.get_metrics_data()
    assert exp.export(d1) == MetricExportResult.SUCCESS
    time.sleep(0.2)
    value["v"] = 5_000_000.0
    d2 = reader.get_metrics_data()
    assert exp.export(d2) == MetricExportResult.SUCCESS
    rate = (5_000_000.0 - 1_000_000.0) / ((_point(d2).time_unix_nano - _point(d1).time_unix_nano) * 1e-9)
    assert srv.component(cid).tx_bytes_per_s == pytest.approx(rate)
    before = srv.state().ingest
    assert exp.export(d2) == MetricExportResult.SUCCESS  # the same points sent twice
    after = srv.state().ingest
    assert after.points_duplicate == before.points_duplicate + 1
    assert srv.component(cid).tx_bytes_per_s == pytest.approx(rate)  # unchanged
    exp.shutdown()
    provider.shutdown()

    # The exporter restarts: new start time, counter from zero (lower value).
    value["v"] = 200_000.0
    provider2, reader2, exp2 = _exporter_pair(srv.address, "h1", value)
    time.sleep(0.2)
    d3 = reader2.get_metrics_data()
    assert exp2.export(d3) == MetricExportResult.SUCCESS
    st = srv.state()
    assert st.ingest.counter_resets == before.counter_resets + 1
    # Counted from zero since the new exporter's start time (inside the interval): never negative.
    since = max(_point(d3).start_time_unix_nano, _point(d2).time_unix_nano)
    reset_rate = 200_000.0 / ((_point(d3).time_unix_nano - since) * 1e-9)
    assert srv.component(cid).tx_bytes_per_s == pytest.approx(reset_rate)
    exp2.shutdown()
    provider2.shutdown()


def test_large_request_above_grpc_default_limit(start_server) -> None:
    srv = start_server("--calibrate-interval", "0")
    now = time.time_ns()
    pts = [({"device": f"mlx5_{i}", "port": "1", "pad": "x" * 500}, 0, now, 4.0) for i in range(9_000)]
    req = request({"host.name": "big"}, [("node_infiniband_state_id", "gauge", pts)])
    raw = req.SerializeToString()
    assert len(raw) > 4 * 1024 * 1024
    ch = grpc.insecure_channel(srv.address, options=[("grpc.max_send_message_length", 64 << 20)])
    call = ch.unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
    resp = call(raw, timeout=120)
    assert resp == b""  # full success: no partial_success
    assert srv.state(kinds=["none"]).ingest.series == 9_000
    ch.close()


def test_hostile_job_documents_are_invalid_argument_and_the_server_stays_up(start_server) -> None:
    """A 600-byte billion-laughs document, a 5,001-digit integer and a lone surrogate sent to
    RegisterJob: INVALID_ARGUMENT naming scenario_yaml, and the service answers afterwards."""
    from tests.core.test_docload import LAUGHS

    srv = start_server("--calibrate-interval", "0")
    api = srv.api()
    for doc, words in ((LAUGHS, "aliases"), ("cluster: {num_gpus: " + "9" * 5001 + "}", "digits"),
                       ('{"model": "\\ud800"}', "Unicode")):
        with pytest.raises(grpc.RpcError) as err:
            api.RegisterJob(pb.RegisterJobRequest(job="evil", scenario_yaml=doc), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert "scenario_yaml" in err.value.details() and words in err.value.details()
    ok = api.RegisterJob(pb.RegisterJobRequest(job="gpt", scenario_yaml=SCENARIO), timeout=30)
    assert ok.predicted_step_time_s > 0


def test_live_state_pages_through_components(start_server) -> None:
    """Issue 15, hole 10: components come in id-ordered pages (default 1,000), every one once."""
    srv = start_server("--calibrate-interval", "0")
    sim = SimulatedCluster(srv.address, nodes=2, gpus_per_node=8, job="", step_time_s=1.0)
    push(sim, 1)
    whole = srv.state(page_size=10_000)
    assert whole.total_components == len(whole.components) > 20 and not whole.next_page_token
    seen, token, pages = [], "", 0
    while True:
        page = srv.state(page_size=7, page_token=token)
        assert len(page.components) <= 7 and page.total_components == whole.total_components
        seen += [c.id for c in page.components]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(c.id for c in whole.components) and pages == -(-len(seen) // 7)
    with pytest.raises(grpc.RpcError) as err:
        srv.state(page_size=100_000)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in err.value.details()
