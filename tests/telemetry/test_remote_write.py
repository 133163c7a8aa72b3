"""Prometheus remote write in (`POST /api/v1/write` on the OTLP/HTTP port): a real client
library (`prometheus-remote-writer`) pushing to `twin serve`, the same live state as a scrape
of the same page, and every refusal with its status and a clear message."""

from __future__ import annotations

import http.client
import math
import re
import struct
import time

import cramjam
import pytest
from prometheus_remote_writer import RemoteWriter
from prometheus_remote_writer import WriteRequest as ClientWriteRequest

from tests.telemetry.conftest import pb
from tests.telemetry.test_scrape import PAGE, Exporter
from twin.engine import Engine
from twin.rpc.prompb import remote_pb2, types_pb2
from twin.telemetry.ingest import Overloaded
from twin.telemetry.otlp_http import HttpSettings, OtlpHttpReceiver
from twin.telemetry.remote_write import PATH, STALE_NAN_BITS
from twin.telemetry.scrape import ScrapeTarget
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

TOKEN = "rw-s3cret-token"
HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
           "X-Prometheus-Remote-Write-Version": "0.1.0"}
STALE = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def series(name: str, labels: dict[str, str], samples: list[tuple[float, int]]) -> types_pb2.TimeSeries:
    ts = types_pb2.TimeSeries()
    for k, v in sorted({"__name__": name, **labels}.items()):
        ts.labels.add(name=k, value=v)
    for value, t in samples:
        ts.samples.add(value=value, timestamp=t)
    return ts


def body(*ts: types_pb2.TimeSeries) -> bytes:
    return bytes(cramjam.snappy.compress_raw(remote_pb2.WriteRequest(timeseries=ts).SerializeToString()))


def call(address: str, data: bytes, headers: dict | None = None, method: str = "POST", path: str = PATH):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=data, headers=HEADERS if headers is None else headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def _authorized(srv):
    """GetLiveState / GetIgnoredMetrics of a server that wants the token on gRPC too."""
    md = (("authorization", f"Bearer {TOKEN}"),)
    api = srv.api()

    def component(cid: str) -> pb.LiveComponent:
        state = api.GetLiveState(pb.GetLiveStateRequest(), metadata=md, timeout=30)
        return next(c for c in state.components if c.id == cid)

    return (component, lambda: api.GetLiveState(pb.GetLiveStateRequest(), metadata=md, timeout=30),
            lambda: api.GetIgnoredMetrics(pb.GetIgnoredMetricsRequest(), metadata=md, timeout=30).metrics)


def ib_state(device: str, value: float, t: int | None = None) -> types_pb2.TimeSeries:
    return series("node_infiniband_state_id", {"device": device, "port": "1", "instance": "node-1:9100",
                                               "job": "node"}, [(value, now_ms() if t is None else t)])


# ------------------------------------------------------------------ a real client, a real server
def test_a_real_client_library_remote_writes_to_twin_serve_and_live_state_moves(start_server, tmp_path):
    srv = start_server("--calibrate-interval", "0", state_dir=tmp_path / "rw", otlp_http_port=0,
                       auth={"token_env": "TWIN_TEST_TOKEN"}, env={"TWIN_TEST_TOKEN": TOKEN})
    url = f"http://{srv.http_address}{PATH}"
    writer = RemoteWriter(url=url, auth={"bearer_token": TOKEN}, retries=0)
    anonymous = RemoteWriter(url=url, retries=0)
    # What a Prometheus scraping node_exporter and dcgm-exporter forwards: its target labels
    # (job, instance) on every series, counters as cumulative values.
    node = {"instance": "node-1:9100", "job": "node-exporter", "device": "mlx5_0", "port": "1"}
    gpu = {"instance": "node-1:9400", "job": "dcgm-exporter", "gpu": "0", "UUID": "GPU-8f3a", "Hostname": "node-1"}
    component, live_state, ignored_metrics = _authorized(srv)
    t0 = now_ms()
    try:
        first = writer.send([
            {"metric": {"__name__": "node_infiniband_port_data_transmitted_bytes_total", **node},
             "values": [0, 10**9], "timestamps": [t0 - 1000, t0]},
            {"metric": {"__name__": "node_infiniband_state_id", **node}, "values": [4], "timestamps": [t0]},
            {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", **gpu}, "values": [63], "timestamps": [t0]},
            {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", **gpu}, "values": [70123], "timestamps": [t0]},
        ])
        assert first.last_response.status_code == 204 and first.samples_sent == 5
        port = component("node-1/ib_port:mlx5_0/1")  # the host: instance without its port
        assert port.state == pb.COMPONENT_STATE_UP
        assert port.tx_bytes_per_s == pytest.approx(1e9, rel=1e-6)  # a rate from two samples 1 s apart
        assert component("node-1/gpu:0").signals["temperature_c"] == 63.0
        ignored = ignored_metrics()
        assert [(m.name, m.exporter, m.points) for m in ignored] == [("DCGM_FI_DEV_FB_USED", "dcgm-exporter", 1)]
        with pytest.raises(RuntimeError, match="status=401"):  # the main port's token, or nothing
            anonymous.send([{"metric": {"__name__": "node_infiniband_state_id", **node}, "values": [1],
                             "timestamps": [t0 + 1000]}])
        assert component("node-1/ib_port:mlx5_0/1").state == pb.COMPONENT_STATE_UP
        writer.send([{"metric": {"__name__": "node_infiniband_state_id", **node}, "values": [1],
                      "timestamps": [t0 + 1000]}])
        assert component("node-1/ib_port:mlx5_0/1").state == pb.COMPONENT_STATE_DOWN  # state_id 1 = DOWN
        stats = live_state().ingest
        assert stats.points_accepted == 5 and stats.points_rejected == 1  # FB_USED: read by no mapping
    finally:
        writer.close()
        anonymous.close()


def _page_series(text: str, labels: dict[str, str], t: int) -> list[dict]:
    """The samples of an exposition page as a Prometheus forwards them (names as written)."""
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if m and not line.startswith("#"):
            own = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out.append({"metric": {"__name__": m.group(1), **own, **labels}, "values": [float(m.group(3))],
                        "timestamps": [t]})
    return out


def test_remote_write_and_a_scrape_of_the_same_page_give_the_same_live_state(tmp_path):
    exporter = Exporter()
    scraped, written = (TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path / d,
                                                                                 calibrate_interval_s=0))
                        for d in ("s", "w"))
    receiver = OtlpHttpReceiver(written, "127.0.0.1", 0, HttpSettings(max_receive_bytes=1 << 20))
    writer = RemoteWriter(url=receiver.remote_write_url, retries=0)
    target = ScrapeTarget(exporter.url, interval_s=3600, host="node-1", job="dcgm-exporter")
    try:
        t = now_ms()
        for step, (crc, tx) in enumerate([(0, 0), (50, 40 * 10**9)]):
            exporter.crc, exporter.tx = crc, tx
            scraped.scraper.scrape(target)
            page = PAGE.replace("{crc}", str(crc)).replace("{tx}", str(tx))
            assert writer.send(_page_series(page, {"job": "dcgm-exporter", "instance": "node-1:9400"},
                                            t + 1000 * step)).last_response.status_code == 204
            if not step:
                time.sleep(1.0)  # the scrape's timestamps are its own clock's

        def view(svc):
            return {cid: (c.state, sorted(c.signals)) for cid, c in svc.state.components.items()}

        assert view(written) == view(scraped) and len(view(written)) >= 4
        port = "node-1/ib_port:mlx5_0/1"
        assert written.state.components[port].signals["tx_Bps"] == pytest.approx(40e9)  # 40 GB over 1 s
        for svc in (scraped, written):
            names = {r["name"] for r in svc.ignored_metrics()}
            assert "DCGM_FI_DEV_FB_USED" in names  # unknown: counted, on both paths
    finally:
        writer.close()
        receiver.stop()
        exporter.close()
        scraped.close()
        written.close()


# ------------------------------------------------------------------ refusals, in process
@pytest.fixture
def twin(tmp_path):
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    receiver = OtlpHttpReceiver(svc, "127.0.0.1", 0, HttpSettings(max_receive_bytes=64 * 1024))
    yield svc, receiver
    receiver.stop()
    svc.close()


def _raw_snappy(declared: int, payload: bytes) -> bytes:
    """A block with a hand-written length preamble (varint) before ``payload``."""
    out = bytearray()
    while True:
        out.append((declared & 0x7F) | (0x80 if declared > 0x7F else 0))
        declared >>= 7
        if not declared:
            return bytes(out) + payload


BAD = [
    ("bad snappy", _raw_snappy(16, b"\xff garbage that is not snappy"), HEADERS, 400, "not valid snappy block data"),
    ("bad length preamble", b"\xff\xff\xff\xff\xff\xff", HEADERS, 400, "bad length preamble"),
    ("empty body", b"", HEADERS, 400, "body: empty"),
    ("snappy bomb", _raw_snappy(1 << 30, b"\0"), HEADERS, 413, "decompresses to 1073741824 bytes"),
    ("too large as sent", b"\0" * (64 * 1024 + 1), HEADERS, 413, "exceeds the receive limit"),
    ("bad protobuf", bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff\xff")), HEADERS, 400,
     "not a valid protobuf prometheus.WriteRequest"),
    ("JSON content type", b"x", {**HEADERS, "Content-Type": "application/json"}, 415,
     "Content-Type 'application/json' not supported"),
    ("no content type", b"x", {"Content-Encoding": "snappy"}, 415, "Content-Type '(none)'"),
    ("remote write 2.0", b"x",
     {**HEADERS, "Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}, 415,
     "Remote-Write 1.0"),
    ("no snappy", b"x", {"Content-Type": "application/x-protobuf"}, 415, "Content-Encoding '(none)'"),
    ("gzip", b"x", {**HEADERS, "Content-Encoding": "gzip"}, 415, "Content-Encoding 'gzip'"),
]


@pytest.mark.parametrize(("data", "headers", "code", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_every_refusal_has_its_status_and_a_clear_text_message(twin, data, headers, code, message):
    svc, receiver = twin
    status, got, text = call(receiver.address, data, headers)
    assert status == code, text
    assert message in text and "Traceback" not in text
    assert got["content-type"].startswith("text/plain")  # what Prometheus logs from a failed send
    ok, got, text = call(receiver.address, body(ib_state("mlx5_0", 4.0)))  # ... and it keeps serving
    assert (ok, text) == (204, "") and "content-length" not in got
    assert svc.state.components["node-1/ib_port:mlx5_0/1"].state == "up"


def test_other_methods_and_a_missing_token(tmp_path):
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    receiver = OtlpHttpReceiver(svc, "127.0.0.1", 0, HttpSettings(max_receive_bytes=1 << 20, token=TOKEN))
    try:
        status, got, text = call(receiver.address, b"", {}, method="GET")
        assert status == 405 and got["allow"] == "POST" and f"GET not allowed on {PATH}" in text
        for auth in ({}, {"Authorization": "Bearer wrong"}):
            status, got, text = call(receiver.address, body(ib_state("mlx5_0", 4.0)), {**HEADERS, **auth})
            assert status == 401 and got["www-authenticate"].startswith("Bearer") and "bearer token" in text
        assert not svc.state.components  # nothing applied without the token
        status, _, _ = call(receiver.address, body(ib_state("mlx5_0", 4.0)),
                            {**HEADERS, "Authorization": f"Bearer {TOKEN}"})
        assert status == 204 and "node-1/ib_port:mlx5_0/1" in svc.state.components
    finally:
        receiver.stop()
        svc.close()


@pytest.mark.parametrize(("bad", "reason"), [
    (ib_state("mlx5_9", math.nan), "non-finite value"),
    (ib_state("mlx5_9", math.inf), "non-finite value"),
    (ib_state("mlx5_9", 4.0, t=2**62), "timestamp beyond 2^63-1 ns"),
    (ib_state("mlx5_9", 4.0, t=now_ms() + 2 * 3600 * 1000), "timestamp in the future"),
    (ib_state("mlx5_9", 4.0, t=-5), "timestamp before 1970"),
    (series("", {"device": "mlx5_9", "port": "1"}, [(4.0, now_ms())]), "series without a __name__ label"),
    (series("node_infiniband_port_data_transmitted_bytes_total", {"device": "mlx5_9", "port": "1",
                                                                   "instance": "node-1:9100"},
            [(-1.0, now_ms())]), "negative counter"),
], ids=["NaN", "infinity", "huge timestamp", "an hour ahead", "negative timestamp", "no name", "negative counter"])
def test_bad_samples_are_refused_like_otlp_refuses_them(twin, bad, reason):
    svc, receiver = twin
    status, _, text = call(receiver.address, body(bad))  # nothing else in the request
    assert status == 400 and reason in text, text
    # Mixed with a good sample: the good one is applied, the answer still names the bad one
    # (remote write has no partial success; a 4xx is not resent, so nothing is applied twice).
    status, _, text = call(receiver.address, body(ib_state("mlx5_0", 4.0), bad))
    assert status == 400 and "1 sample(s) refused, the rest applied" in text and reason in text, text
    assert svc.state.components["node-1/ib_port:mlx5_0/1"].state == "up"
    assert not any("mlx5_9" in cid for cid in svc.state.components)
    assert svc.stats["points_rejected"] == 2 and svc.stats["points_accepted"] == 1


def test_duplicate_label_names_are_refused(twin):
    svc, receiver = twin
    ts = ib_state("mlx5_0", 4.0)
    ts.labels.add(name="device", value="mlx5_1")
    status, _, text = call(receiver.address, body(ts))
    assert status == 400 and "duplicate label name" in text and "device" in text
    assert not svc.state.components


def test_stale_markers_unknown_names_histograms_and_metadata_are_not_errors(twin):
    svc, receiver = twin
    t = now_ms()
    stale = ib_state("mlx5_0", STALE, t + 1)
    unknown = series("DCGM_FI_DEV_FB_USED", {"gpu": "0", "Hostname": "node-1", "job": "dcgm"}, [(1.0, t)])
    histogram = series("http_request_duration_seconds", {"job": "api"}, [])
    histogram.histograms.append(b"\x08\x01")  # a prompb Histogram: count_int = 1
    status, _, text = call(receiver.address, body(ib_state("mlx5_0", 4.0, t), stale, unknown, histogram))
    assert (status, text) == (204, "")
    assert svc.state.components["node-1/ib_port:mlx5_0/1"].state == "up"  # the stale marker changed nothing
    assert svc.stats["stale_markers_skipped"] == 1 and svc.stats["points_accepted"] == 1
    ignored = {(r["name"], r["exporter"]): r for r in svc.ignored_metrics()}
    assert ignored[("DCGM_FI_DEV_FB_USED", "dcgm")]["points"] == 1
    assert "native histogram" in ignored[("http_request_duration_seconds", "api")]["reason"]
    # A plain NaN is not a stale marker: refused.
    status, _, text = call(receiver.address, body(ib_state("mlx5_0", math.nan, t + 2)))
    assert status == 400 and "non-finite" in text
    # What Prometheus sends on its own every minute (send_metadata): metadata, no series.
    meta = remote_pb2.WriteRequest(metadata=[b"\x08\x01\x12\x03foo"]).SerializeToString()
    status, _, _ = call(receiver.address, bytes(cramjam.snappy.compress_raw(meta)))
    assert status == 204


@pytest.mark.parametrize(("error", "code", "retry"), [
    (Overloaded(10, 0.2), 503, "1"),
    (RuntimeError("disk on fire"), 503, "1"),
    (TimeoutError(), 504, None),
], ids=["overloaded", "store failure", "timeout"])
def test_transient_failures_are_retryable_5xx_and_counted_once(twin, error, code, retry):
    svc, receiver = twin
    real = svc.ingest

    def failing(request, timeout=None, raw=None):
        raise error

    svc.ingest = failing
    try:
        status, got, text = call(receiver.address, body(ib_state("mlx5_0", 4.0), ib_state("mlx5_1", STALE)))
    finally:
        svc.ingest = real
    assert status == code and got.get("retry-after") == retry and "disk on fire" not in text
    assert svc.stats["stale_markers_skipped"] == 0  # counted when the sender's retry settles
    status, _, _ = call(receiver.address, body(ib_state("mlx5_0", 4.0), ib_state("mlx5_1", STALE)))
    assert status == 204 and svc.stats["stale_markers_skipped"] == 1


# ------------------------------------------------------------------ the messages themselves
def test_the_messages_are_wire_compatible_with_prompb():
    """Bytes of the client library's own prompb (prometheus/prompb, generated) decode into
    twin.rpc.prompb with every label and sample, and the field numbers are the spec's."""
    ref = ClientWriteRequest()
    ts = ref.timeseries.add()
    ts.labels.add(name="__name__", value="up")
    ts.labels.add(name="job", value="node")
    ts.samples.add(value=1.5, timestamp=1_700_000_000_123)
    ours = remote_pb2.WriteRequest.FromString(ref.SerializeToString())
    assert [(lb.name, lb.value) for lb in ours.timeseries[0].labels] == [("__name__", "up"), ("job", "node")]
    assert [(s.value, s.timestamp) for s in ours.timeseries[0].samples] == [(1.5, 1_700_000_000_123)]
    assert ours.SerializeToString() == ref.SerializeToString()
    fields = {(m.name, f.name): (f.number, f.type) for m in (remote_pb2.WriteRequest.DESCRIPTOR,
                                                             types_pb2.TimeSeries.DESCRIPTOR,
                                                             types_pb2.Label.DESCRIPTOR, types_pb2.Sample.DESCRIPTOR)
              for f in m.fields}
    f = remote_pb2.WriteRequest.DESCRIPTOR.fields_by_name["timeseries"]
    assert fields[("WriteRequest", "timeseries")] == (1, f.TYPE_MESSAGE)
    assert fields[("TimeSeries", "labels")] == (1, f.TYPE_MESSAGE)
    assert fields[("TimeSeries", "samples")] == (2, f.TYPE_MESSAGE)
    assert fields[("Label", "name")] == (1, f.TYPE_STRING) and fields[("Label", "value")] == (2, f.TYPE_STRING)
    assert fields[("Sample", "value")] == (1, f.TYPE_DOUBLE) and fields[("Sample", "timestamp")] == (2, f.TYPE_INT64)
