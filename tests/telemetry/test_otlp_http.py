"""The OTLP/HTTP receiver (`twin serve --otlp-http-port`): the real OpenTelemetry SDK HTTP
exporter, JSON, gzip, partial success, every refusal with its status and message, auth."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter
from opentelemetry.metrics import Observation
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.resources import Resource

from tests.telemetry.conftest import pb
from twin.server.server_config import load_config
from twin.telemetry.ingest import Overloaded
from twin.telemetry.otlp_http import PATH, HttpSettings, OtlpHttpReceiver, inflate
from twin.telemetry.otlpbuild import request

PROTO, JSON = "application/x-protobuf", "application/json"
TOKEN = "http-s3cret-token"


def call(address: str, body: bytes = b"", headers: dict | None = None, method: str = "POST", path: str = PATH):
    """(status, headers, body) of one request."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def status_of(body: bytes, content_type: str = PROTO) -> status_pb2.Status:
    st = status_pb2.Status()
    if content_type == JSON:
        json_format.Parse(body, st)
    else:
        st.ParseFromString(body)
    return st


def ib_request(host: str = "node-1", state: float = 4.0):
    t = time.time_ns()
    return request({"host.name": host}, [("node_infiniband_state_id", "gauge",
                                          [({"device": "mlx5_0", "port": "1"}, 0, t, state)])])


@pytest.fixture
def http_server(start_server, tmp_path):
    return start_server("--calibrate-interval", "0", "--max-receive-bytes", str(64 * 1024),
                        state_dir=tmp_path / "http", otlp_http_port=0)


def _comparable(state: pb.GetLiveStateResponse) -> list[dict]:
    out = []
    for c in state.components:
        d = json_format.MessageToDict(c)
        for obj in (d, *d.get("evidence", [])):
            for key in [k for k in obj if k.endswith("UnixNano")]:  # when the server saw it: differs
                obj.pop(key)
        out.append(d)
    return out


def test_sdk_http_exporter_updates_live_state_like_grpc(start_server, tmp_path) -> None:
    via_http = start_server("--calibrate-interval", "0", state_dir=tmp_path / "a", otlp_http_port=0)
    via_grpc = start_server("--calibrate-interval", "0", state_dir=tmp_path / "b")
    assert via_http.http_address and not via_grpc.http_address  # off unless enabled
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"host.name": "node-1"}))
    value = {"tx": 0, "state": 4}
    meter = provider.get_meter("t")
    meter.create_observable_counter("node_infiniband_port_data_transmitted_bytes_total",
                                    [lambda o: [Observation(value["tx"], {"device": "mlx5_0", "port": "1"})]])
    meter.create_observable_gauge("node_infiniband_state_id",
                                  [lambda o: [Observation(value["state"], {"device": "mlx5_0", "port": "1"})]])
    http_plain = HttpExporter(endpoint=f"http://{via_http.http_address}{PATH}")
    http_gzip = HttpExporter(endpoint=f"http://{via_http.http_address}{PATH}", compression=Compression.Gzip)
    grpc_exp = GrpcExporter(endpoint=via_grpc.address, insecure=True)
    try:
        steps = [(http_plain, 0, 4), (http_gzip, 10**9, 4), (http_plain, 2 * 10**9, 1)]
        for step, (exporter, tx, state) in enumerate(steps):
            if step:
                time.sleep(0.5)
            value.update(tx=tx, state=state)
            data = reader.get_metrics_data()
            assert exporter.export(data) == MetricExportResult.SUCCESS
            assert grpc_exp.export(data) == MetricExportResult.SUCCESS
            if step == 1:
                port = via_http.component("node-1/ib_port:mlx5_0/1")
                assert port.state == pb.COMPONENT_STATE_UP and port.tx_bytes_per_s > 0
        port = via_http.component("node-1/ib_port:mlx5_0/1")
        assert port.state == pb.COMPONENT_STATE_DOWN  # state_id 1 = DOWN: the HTTP push moved live state
        assert _comparable(via_http.state()) == _comparable(via_grpc.state())
    finally:
        for exporter in (http_plain, http_gzip, grpc_exp):
            exporter.shutdown()
        provider.shutdown()


def test_json_request_gets_a_json_answer_with_partial_success(http_server) -> None:
    t = time.time_ns()
    req = request({"host.name": "node-j"}, [("node_infiniband_state_id", "gauge", [
        ({"device": "mlx5_0", "port": "1"}, 0, t, 4.0), ({"device": "mlx5_1", "port": "1"}, 0, t, float("nan"))])])
    body = json.loads(json_format.MessageToJson(req))
    body["someFieldFromTheFuture"] = {"x": 1}  # OTLP/JSON receivers MUST ignore unknown fields
    status, headers, raw = call(http_server.http_address, json.dumps(body).encode(),
                                {"Content-Type": "application/json; charset=utf-8"})
    assert status == 200 and headers["content-type"] == JSON
    resp = json.loads(raw)
    assert resp["partialSuccess"]["rejectedDataPoints"] in ("1", 1)
    assert "NaN" in resp["partialSuccess"]["errorMessage"] or resp["partialSuccess"]["errorMessage"]
    assert http_server.component("node-j/ib_port:mlx5_0/1").state == pb.COMPONENT_STATE_UP


def test_protobuf_partial_success_and_manual_gzip(http_server) -> None:
    t = time.time_ns()
    req = request({"host.name": "node-p"}, [("node_infiniband_state_id", "gauge", [
        ({"device": "mlx5_0", "port": "1"}, 0, t, 4.0), ({"device": "mlx5_1", "port": "1"}, 0, t, float("nan"))])])
    status, headers, raw = call(http_server.http_address, gzip.compress(req.SerializeToString()),
                                {"Content-Type": PROTO, "Content-Encoding": "gzip"})
    assert status == 200 and headers["content-type"] == PROTO
    resp = ExportMetricsServiceResponse.FromString(raw)
    assert resp.partial_success.rejected_data_points == 1 and resp.partial_success.error_message
    assert http_server.component("node-p/ib_port:mlx5_0/1").state == pb.COMPONENT_STATE_UP


BAD = [
    ("garbage protobuf", "POST", PATH, b"\xff\xff\xff\xff", {"Content-Type": PROTO}, 400,
     "not a valid OTLP protobuf ExportMetricsServiceRequest"),
    ("garbage JSON", "POST", PATH, b"{not json", {"Content-Type": JSON}, 400, "not a valid OTLP/JSON"),
    ("JSON of the wrong shape", "POST", PATH, b'{"resourceMetrics": 3}', {"Content-Type": JSON}, 400,
     "not a valid OTLP/JSON"),
    ("bad gzip", "POST", PATH, b"\x1f\x8bnot gzip", {"Content-Type": PROTO, "Content-Encoding": "gzip"}, 400,
     "not valid gzip"),
    ("truncated gzip", "POST", PATH, gzip.compress(b"x" * 1000)[:20], {"Content-Type": PROTO,
                                                                        "Content-Encoding": "gzip"}, 400, "truncated"),
    ("other content type", "POST", PATH, b"x", {"Content-Type": "text/plain"}, 415, "Content-Type 'text/plain'"),
    ("no content type", "POST", PATH, b"x", {}, 415, "Content-Type '(none)'"),
    ("other content encoding", "POST", PATH, b"x", {"Content-Type": PROTO, "Content-Encoding": "br"}, 415,
     "Content-Encoding 'br'"),
    ("other path", "POST", "/v1/traces", b"", {"Content-Type": PROTO}, 404, "POSTed to /v1/metrics"),
    ("GET", "GET", PATH, b"", {}, 405, "GET not allowed"),
    ("PUT", "PUT", PATH, b"x", {"Content-Type": PROTO}, 405, "PUT not allowed"),
    ("too large", "POST", PATH, b"\0" * (64 * 1024 + 1), {"Content-Type": PROTO}, 413, "exceeds the receive limit"),
    ("gzip bomb", "POST", PATH, gzip.compress(b"\0" * (4 << 20)), {"Content-Type": PROTO, "Content-Encoding": "gzip"},
     413, "inflates beyond the receive limit"),
]


@pytest.mark.parametrize(("method", "path", "body", "headers", "code", "message"),
                         [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_every_refusal_has_its_status_and_a_clear_message(http_server, method, path, body, headers, code,
                                                          message) -> None:
    status, got_headers, raw = call(http_server.http_address, body, headers, method=method, path=path)
    assert status == code, raw
    st = status_of(raw, got_headers["content-type"])
    assert message in st.message and "Traceback" not in st.message
    if code == 405:
        assert got_headers["allow"] == "POST"
    # ... and the server keeps serving.
    ok, _, _ = call(http_server.http_address, ib_request().SerializeToString(), {"Content-Type": PROTO})
    assert ok == 200


def test_nothing_usable_is_400_invalid_argument(http_server) -> None:
    t = time.time_ns()
    req = request({"host.name": "n"}, [("node_infiniband_state_id", "gauge", [({"device": "d", "port": "1"}, 0, t,
                                                                                float("nan"))])])
    status, headers, raw = call(http_server.http_address, json_format.MessageToJson(req).encode(),
                                {"Content-Type": JSON})
    assert status == 400 and headers["content-type"] == JSON
    st = status_of(raw, JSON)
    assert st.code == code_pb2.INVALID_ARGUMENT and st.message.startswith("metrics: ")


def test_protocol_garbage_and_chunked_bodies(http_server) -> None:
    host, port = http_server.http_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"\x16\x03\x01 this is not http\r\n\r\n")
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.") and b" 400 " in reply.split(b"\r\n", 1)[0]
    body = ib_request("node-c").SerializeToString()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                  b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert b" 200 " in reply.split(b"\r\n", 1)[0]
    assert http_server.component("node-c/ib_port:mlx5_0/1").state == pb.COMPONENT_STATE_UP
    status, _, _ = call(http_server.http_address, b"", {"Content-Type": PROTO, "Content-Length": "nope"})
    assert status == 400


def test_a_full_queue_is_503_with_retry_after(start_server, tmp_path) -> None:
    srv = start_server("--calibrate-interval", "0", "--max-pending-points", "1", state_dir=tmp_path / "q",
                       otlp_http_port=0)
    t0 = time.time_ns()
    reqs = [request({"host.name": f"n{k}"}, [("node_infiniband_state_id", "gauge",
                                               [({"device": f"mlx5_{i}", "port": "1"}, 0, t0, 4.0)
                                                for i in range(3000)])]).SerializeToString() for k in range(24)]
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda b: call(srv.http_address, b, {"Content-Type": PROTO}), reqs))
    refused = [r for r in results if r[0] != 200]
    assert refused and len(refused) < len(reqs)
    for status, headers, raw in refused:
        assert status == 503 and headers["retry-after"] == "1"
        st = status_of(raw)
        # Refused by the full writer queue, or earlier, with more waiting to be decoded than allowed.
        assert st.code == code_pb2.UNAVAILABLE and ("ingest queue full" in st.message
                                                    or "requests wait to be decoded" in st.message
                                                    or "requests wait for a receiver worker" in st.message), st.message


class _FakeService:
    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.config = type("C", (), {"retry_after_s": 2.5})()

    def ingest(self, request, timeout=None, raw=None):
        raise self.error


@pytest.mark.parametrize(("error", "code", "retry", "message"), [
    (Overloaded(10, 0.2), 503, "1", "ingest queue full"),
    (RuntimeError("disk on fire"), 503, "3", "telemetry store unavailable"),
    (TimeoutError(), 504, None, "did not commit"),
], ids=["overloaded", "store failure", "timeout"])
def test_ingest_errors_map_like_grpc(error, code, retry, message) -> None:
    receiver = OtlpHttpReceiver(_FakeService(error), "127.0.0.1", 0, HttpSettings(max_receive_bytes=1 << 20))
    try:
        status, headers, raw = call(receiver.address, ib_request().SerializeToString(), {"Content-Type": PROTO})
        assert status == code and headers.get("retry-after") == retry
        assert message in status_of(raw).message and "disk on fire" not in status_of(raw).message
    finally:
        receiver.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", receiver.port), timeout=2):
        pass  # stopped: the port is closed


def test_auth_same_token_as_grpc(start_server, tmp_path) -> None:
    srv = start_server("--calibrate-interval", "0", state_dir=tmp_path / "auth", otlp_http_port=0,
                       auth={"token_env": "TWIN_TEST_TOKEN"}, env={"TWIN_TEST_TOKEN": TOKEN})
    body = ib_request().SerializeToString()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, got, raw = call(srv.http_address, body, {"Content-Type": PROTO, **headers})
        assert status == 401 and got["www-authenticate"].startswith("Bearer")
        st = status_of(raw)
        assert st.code == code_pb2.UNAUTHENTICATED and "bearer token" in st.message
    status, _, _ = call(srv.http_address, body, {"Content-Type": PROTO, "Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"host.name": "node-a"}))
    provider.get_meter("t").create_observable_gauge(
        "node_infiniband_state_id", [lambda o: [Observation(4, {"device": "mlx5_0", "port": "1"})]])
    url = f"http://{srv.http_address}{PATH}"
    good = HttpExporter(endpoint=url, headers={"Authorization": f"Bearer {TOKEN}"})
    bad = HttpExporter(endpoint=url)
    try:
        data = reader.get_metrics_data()
        assert bad.export(data) == MetricExportResult.FAILURE
        assert good.export(data) == MetricExportResult.SUCCESS
    finally:
        good.shutdown()
        bad.shutdown()
        provider.shutdown()


def test_the_setting_off_by_default_flag_and_env() -> None:
    assert load_config(env={}).otlp_http_port is None
    assert load_config(env={"TWIN_OTLP_HTTP_PORT": "4318"}).otlp_http_port == 4318
    assert load_config(env={"TWIN_OTLP_HTTP_PORT": ""}).otlp_http_port is None
    assert load_config(env={}, overrides={"otlp_http_port": 0}).otlp_http_port == 0


def test_inflate_bounds() -> None:
    assert inflate(gzip.compress(b"a") + gzip.compress(b"b"), 10) == b"ab"  # multi-member gzip
    with pytest.raises(Exception, match="inflates beyond"):
        inflate(gzip.compress(b"\0" * 11), 10)


class _BlockingService:
    """A service whose ingest waits until released: requests stay in flight as long as a test wants."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def ingest(self, request, timeout=None, raw=None):
        self.entered.release()
        assert self.release.wait(30)
        return 0, ""


def test_requests_past_the_workers_and_their_queue_are_refused_before_their_body_is_read() -> None:
    """At most `workers` requests run and `max_queued` wait (issue 39: at 2x load every request
    was held, accepted p99 11.8 s, none refused); the one past both is
    refused at once with 503 and Retry-After, and its connection stays open for the retry."""
    service = _BlockingService()
    receiver = OtlpHttpReceiver(service, "127.0.0.1", 0,
                                HttpSettings(max_receive_bytes=1 << 20, workers=1, max_queued=1, retry_after_s=2.0))
    body = ib_request().SerializeToString()
    try:
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(call, receiver.address, body, {"Content-Type": PROTO})
            assert service.entered.acquire(timeout=30)  # the one worker is busy
            waiting = pool.submit(call, receiver.address, body, {"Content-Type": PROTO})
            deadline = time.monotonic() + 30
            while receiver._server.gate.waiting < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            host, port = receiver.address.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            started = time.monotonic()
            conn.request("POST", PATH, body=body, headers={"Content-Type": PROTO})
            resp = conn.getresponse()
            refused_in = time.monotonic() - started
            raw = resp.read()
            assert resp.status == 503 and resp.getheader("Retry-After") == "2"
            assert resp.getheader("Connection") != "close"  # the small body was read: the connection is reusable
            st = status_of(raw)
            assert st.code == code_pb2.UNAVAILABLE and "1 requests wait for a receiver worker" in st.message
            assert refused_in < 5  # not held until a worker frees (the others wait for the test's release)
            service.release.set()
            assert running.result(30)[0] == 200 and waiting.result(30)[0] == 200
            conn.request("POST", PATH, body=body, headers={"Content-Type": PROTO})  # the same connection
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        service.release.set()
        receiver.stop()
