"""Seeded hostile requests for every method on every port of a running ``twin serve``.

Used by ``tests/server/test_fuzz_ports.py`` (a bounded run in the suite) and by
``benchmarks/fuzz_server.py`` (10^6 requests and more). One :class:`random.Random` seed
fixes each thread's sequence (thread ``w`` of seed ``s`` draws from ``Random(f"{s}/{w}")``),
so a failure is replayed by its seed, thread and case number; :func:`run` sends them from
``threads`` threads at once, the mix that crashed ``twin serve`` in issue 39.

Every gRPC method of every service the server registers (Twin, Sweep, Failure,
Telemetry, OTLP Metrics, Health, reflection, and method names that do not exist) gets, in
turn: random bytes, a valid request with bytes flipped or cut, a request built field by
field from its descriptor with hostile values (NaN, inf, 2^63-1, negative, unknown enum
numbers, control characters, lone surrogates in documents, long strings), and a valid
request with a few fields replaced by such values. The HTTP ports (OTLP/HTTP, Prometheus
``/metrics``) get random bodies, content types, encodings, paths and methods; the OTLP/HTTP
port's remote-write path gets snappy-compressed hostile WriteRequests and broken snappy. Calls carry
the right bearer token most of the time and a wrong or missing one otherwise.

:func:`verdict` says whether an answer is acceptable: a domain error or OK is; INTERNAL,
UNKNOWN, DATA_LOSS, a 5xx other than a retryable 503, or a dead connection is not.
"""

from __future__ import annotations

import gzip
import http.client
import json
import math
import random
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import grpc
from google.protobuf import message as pb_message
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from twin.rpc.prompb import remote_pb2
from twin.rpc.v1 import failure_service_pb2, sweep_service_pb2, telemetry_pb2, twin_service_pb2
from twin.telemetry.otlpbuild import request as otlp_request
from twin.wire.convert import scenario_from_mapping

BASE = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}}
JOB_YAML = json.dumps(BASE)
SWEEP_DOC = json.dumps({"name": "fuzz", "base": BASE, "axes": [{"path": "plan.tp", "values": [1, 2, 4, 8]}]})
FLEET_DOC = json.dumps({"name": "fuzz", "cluster": {"system": "DGX-H100", "num_gpus": 128},
                        "jobs": [{"name": "a", "gpus": 64, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}},
                                 {"name": "b", "gpus": 64, "model": "llama3.1-8b", "plan": {"tp": 4, "gbs": 64}}]})

# Answers that are a verdict on the request, not a server fault.
DOMAIN_CODES = frozenset({grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                          grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED,
                          grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED,
                          grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.OUT_OF_RANGE})
# Streams are cut by the fuzzer's own short deadline; OTLP may ask an exporter to retry.
STREAM_CODES = DOMAIN_CODES | {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
OTLP_CODES = DOMAIN_CODES | {grpc.StatusCode.UNAVAILABLE}


@dataclass(frozen=True)
class Method:
    """One gRPC method: its path, request type, a valid request, and whether it streams."""

    path: str
    request: type[pb_message.Message] | None
    valid: Callable[[], pb_message.Message] | None
    streaming: bool = False
    codes: frozenset[grpc.StatusCode] = DOMAIN_CODES
    max_events: int = 50  # a stream is cancelled after this many events (Watch never ends by itself)


def _otlp_valid() -> pb_message.Message:
    import time
    points = [({"job": "fuzz"}, 0, time.time_ns(), 1.0)]
    return otlp_request({"host.name": "node-1"}, [("twin.training.step_time", "gauge", points)])


# Metric names the twin maps (so a request gets past "unknown metric" into the decoder's series
# ids): the real names exporters send (dcgm-exporter, node_exporter, the twin's own).
MAPPED_NAMES = ("twin.training.step_time", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS",
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3", "node_infiniband_port_data_transmitted_bytes_total",
                "node_infiniband_state_id", "node_infiniband_symbol_error_total", "not_a_mapped_metric")
ATTRIBUTE_KEYS = ("gpu", "uuid", "device", "job", "host.name", "link", "port", "instance", "Hostname", "x")


def otlp_payload(rng: random.Random) -> bytes:
    """One seeded OTLP request of mapped metrics with random attribute layouts, as wire bytes:
    several resources and scopes, gauges and sums of both temporalities, string/int/double/bool
    attributes, sometimes a second message appended (repeated fields merge) or bits flipped."""
    import time

    req = metrics_service_pb2.ExportMetricsServiceRequest()
    for _ in range(rng.randrange(1, 3)):
        rm = req.resource_metrics.add()
        rm.resource.attributes.add(key="host.name").value.string_value = rng.choice(["n1", "n2", "n3"])
        for _ in range(rng.randrange(1, 3)):
            sm = rm.scope_metrics.add()
            for _ in range(rng.randrange(1, 5)):
                m = sm.metrics.add(name=rng.choice(MAPPED_NAMES))
                kind = rng.choice(["gauge", "sum"])
                if kind == "sum":
                    m.sum.aggregation_temporality = rng.choice([1, 2])
                    m.sum.is_monotonic = rng.random() < 0.8
                dps = getattr(m, kind).data_points
                for _ in range(rng.randrange(0, 20)):
                    dp = dps.add(time_unix_nano=time.time_ns() - rng.randrange(10**9), as_double=rng.random() * 100)
                    for key in rng.sample(ATTRIBUTE_KEYS, rng.randrange(0, 5)):
                        value = dp.attributes.add(key=key).value
                        pick = rng.random()
                        if pick < 0.6:
                            value.string_value = str(rng.randrange(8))
                        elif pick < 0.8:
                            value.int_value = rng.randrange(8)
                        elif pick < 0.9:
                            value.double_value = 1.5
                        else:
                            value.bool_value = True
    raw = req.SerializeToString()
    if rng.random() < 0.3:  # a second message on the wire merges into the first
        extra = metrics_service_pb2.ExportMetricsServiceRequest()
        extra.resource_metrics.add().scope_metrics.add().metrics.add(name=rng.choice(MAPPED_NAMES)) \
            .gauge.data_points.add(time_unix_nano=1, as_double=1.0)
        raw += extra.SerializeToString()
    if rng.random() < 0.3 and raw:
        flipped = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        raw = bytes(flipped)
    return raw


def _methods() -> list[Method]:
    t, s, f, tel = twin_service_pb2, sweep_service_pb2, failure_service_pb2, telemetry_pb2
    sc = lambda: scenario_from_mapping(BASE)  # noqa: E731
    twin = "/twin.rpc.v1.TwinService/"
    telem = "/twin.rpc.v1.TelemetryService/"
    return [
        Method(twin + "Predict", t.PredictRequest, lambda: t.PredictRequest(scenario=sc())),
        Method(twin + "Validate", t.ValidateRequest, lambda: t.ValidateRequest(scenario=sc())),
        Method(twin + "GetCatalog", t.GetCatalogRequest, t.GetCatalogRequest),
        Method(twin + "PredictFleet", t.PredictFleetRequest, lambda: t.PredictFleetRequest(fleet_document=FLEET_DOC)),
        Method("/twin.rpc.v1.SweepService/Sweep", s.SweepRequest, lambda: s.SweepRequest(spec_document=SWEEP_DOC),
               streaming=True, codes=STREAM_CODES),
        Method("/twin.rpc.v1.FailureService/EvaluateFailures", f.EvaluateFailuresRequest,
               lambda: f.EvaluateFailuresRequest(scenario=sc())),
        Method(telem + "GetLiveState", tel.GetLiveStateRequest, lambda: tel.GetLiveStateRequest(page_size=10)),
        Method(telem + "RegisterJob", tel.RegisterJobRequest,
               lambda: tel.RegisterJobRequest(job="fuzz", scenario_yaml=JOB_YAML)),
        Method(telem + "PredictLive", tel.PredictLiveRequest,
               lambda: tel.PredictLiveRequest(job="fuzz", scenario_yaml=JOB_YAML)),
        Method(telem + "GetDivergence", tel.GetDivergenceRequest, tel.GetDivergenceRequest),
        Method(telem + "Calibrate", tel.CalibrateRequest, tel.CalibrateRequest),
        Method(telem + "GetCalibration", tel.GetCalibrationRequest, tel.GetCalibrationRequest),
        Method(telem + "GetIgnoredMetrics", tel.GetIgnoredMetricsRequest, tel.GetIgnoredMetricsRequest),
        Method("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
               metrics_service_pb2.ExportMetricsServiceRequest, _otlp_valid, codes=OTLP_CODES),
        Method("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest, health_pb2.HealthCheckRequest),
        Method("/grpc.health.v1.Health/Watch", health_pb2.HealthCheckRequest, health_pb2.HealthCheckRequest,
               streaming=True, codes=STREAM_CODES, max_events=1),
        Method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", reflection_pb2.ServerReflectionRequest,
               lambda: reflection_pb2.ServerReflectionRequest(list_services=""), streaming=True, codes=STREAM_CODES),
        Method("/twin.rpc.v1.TwinService/NoSuchMethod", None, None),
        Method("/no.such.Service/Call", None, None),
    ]


METHODS = _methods()
# The methods a port serves: the main port all, the dedicated OTLP and the health ports theirs.
OTLP_ONLY = [m for m in METHODS if "MetricsService" in m.path or "/no.such" in m.path]
HEALTH_ONLY = [m for m in METHODS if "grpc.health" in m.path or "/no.such" in m.path]

INTS = [0, -1, 1, 2, 3, 7, 8, 64, 10**12, 2**63 - 1, -(2**63), 2**31, 2**32 + 1]
FLOATS = [0.0, -0.0, -1.0, 1e-300, 1e300, math.inf, -math.inf, math.nan, 2.0**63, 0.5, 1e-9]
NAMES = ["DGX-H100", "GB200-NVL72", "llama3.1-8b", "deepseek-v3", "H100-SXM-80GB", "nvlink", "infiniband", "roce",
         "cxl", "cpo", "", "\x00", "é" * 3, "x" * 300, "\u202e", "a\nb", "{{", "*&a", "!!python/object"]
DOCS = ["{", "[" * 500, "a: &a [*a]", "x: " + "9" * 5001, "num_gpus: 1e999", "\ud800", "- - - -", "\x00\x01",
        "a: !!binary AAAA", "cluster: {system: DGX-H100, num_gpus: -1}", json.dumps({"k": "v" * 10_000}),
        "l0: &l0 [a,a,a,a,a]\nl1: &l1 [*l0,*l0,*l0,*l0]\nl2: &l2 [*l1,*l1,*l1,*l1]\nl3: [*l2,*l2,*l2,*l2]"]


class Hostile:
    """Hostile values and messages from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def string(self, fd: FieldDescriptor | None = None) -> str:
        r = self.rng
        if fd is not None and (fd.name.endswith(("_yaml", "_document")) or fd.name == "page_token"):
            return r.choice([*DOCS, JOB_YAML, SWEEP_DOC, FLEET_DOC])
        if r.random() < 0.7:
            return r.choice(NAMES)
        return "".join(chr(r.randrange(0, 0x2FFF)) for _ in range(r.randrange(0, 24)))

    def scalar(self, fd: FieldDescriptor) -> Any:
        r = self.rng
        if fd.enum_type is not None:
            return r.choice([v.number for v in fd.enum_type.values] + [-3, 40, 2**31 - 1])
        if fd.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
            return r.choice(INTS) if r.random() < 0.7 else r.randrange(-10, 10**6)
        if fd.type in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
            return r.choice([0, -1, 1, 7, 10_001, 2**31 - 1, -(2**31)])
        if fd.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return r.choice([0, 1, 2**63, 2**64 - 1, 10**18])
        if fd.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return r.choice([0, 1, 2**32 - 1])
        if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return r.choice(FLOATS) if r.random() < 0.7 else r.uniform(-1e6, 1e6)
        if fd.type == FieldDescriptor.TYPE_BOOL:
            return r.random() < 0.5
        if fd.type == FieldDescriptor.TYPE_BYTES:
            return r.randbytes(r.randrange(0, 40))
        return self.string(fd)

    def fill(self, msg: pb_message.Message, fd: FieldDescriptor, depth: int) -> None:
        r = self.rng
        mtype = fd.message_type
        try:
            if mtype is not None and mtype.GetOptions().map_entry:
                vfd = mtype.fields_by_name["value"]
                target = getattr(msg, fd.name)
                for _ in range(r.randrange(0, 4)):
                    key = self.scalar(mtype.fields_by_name["key"])
                    if vfd.message_type is None:
                        target[key] = self.scalar(vfd)
                    else:
                        self.build(target[key], depth + 1)
            elif mtype is not None and mtype.full_name == "google.protobuf.Struct":
                getattr(msg, fd.name).update({self.string(): r.choice([None, True, 1.5, "x", -1.0])
                                              for _ in range(r.randrange(0, 4))})
            elif mtype is not None and mtype.full_name in ("google.protobuf.Value", "google.protobuf.ListValue"):
                return
            elif fd.is_repeated and mtype is None:
                getattr(msg, fd.name).extend(self.scalar(fd) for _ in range(r.randrange(0, 5)))
            elif fd.is_repeated:
                for _ in range(r.randrange(0, 3)):
                    self.build(getattr(msg, fd.name).add(), depth + 1)
            elif mtype is not None:
                self.build(getattr(msg, fd.name), depth + 1)
            else:
                setattr(msg, fd.name, self.scalar(fd))
        except (ValueError, TypeError):
            pass  # a value protobuf itself refuses (e.g. a lone surrogate in a string field)

    def build(self, msg: pb_message.Message, depth: int = 0) -> pb_message.Message:
        if depth > 4:
            return msg
        for fd in msg.DESCRIPTOR.fields:
            if self.rng.random() < 0.5:
                self.fill(msg, fd, depth)
        return msg

    def mutate(self, msg: pb_message.Message) -> pb_message.Message:
        """``msg`` with one to three scalar fields somewhere inside replaced by hostile values."""
        for _ in range(self.rng.randrange(1, 4)):
            node = msg
            for _depth in range(6):
                fields = list(node.DESCRIPTOR.fields)
                if not fields:
                    break
                fd = self.rng.choice(fields)
                mtype = fd.message_type
                if (mtype is None or fd.is_repeated or mtype.GetOptions().map_entry
                        or mtype.full_name.startswith("google.protobuf.")):
                    self.fill(node, fd, 3)
                    break
                node = getattr(node, fd.name)
        return msg

    def payload(self, method: Method) -> bytes:
        """The request bytes of one case for ``method``."""
        r = self.rng
        kind = r.random()
        if method.request is None or kind < 0.2:
            return r.randbytes(r.randrange(0, 512))
        if method.request is metrics_service_pb2.ExportMetricsServiceRequest and kind < 0.5:
            return otlp_payload(r)
        if method.valid is not None and kind < 0.4:
            raw = bytearray(method.valid().SerializeToString())
            for _ in range(r.randrange(1, 6)):
                if raw:
                    raw[r.randrange(len(raw))] ^= 1 << r.randrange(8)
            return bytes(raw[: r.randrange(len(raw) + 1)] if r.random() < 0.3 else raw)
        if method.valid is None or kind < 0.65:
            return self.build(method.request()).SerializeToString()
        return self.mutate(method.valid()).SerializeToString()


def verdict_grpc(method: Method, err: grpc.RpcError | None) -> str | None:
    """None when the answer is acceptable, else what was wrong."""
    if err is None:
        return None
    code = err.code() if hasattr(err, "code") else None
    if code in method.codes:
        return None
    return f"{method.path}: {code}: {(err.details() if hasattr(err, 'details') else err)!s:.300}"


def call_grpc(channel: grpc.Channel, method: Method, payload: bytes, metadata: tuple, timeout: float
              ) -> tuple[str, str | None]:
    """Send one case: (the status code's name, the verdict: None when acceptable)."""
    try:
        if method.streaming:
            stream = channel.unary_stream(method.path)(payload, metadata=metadata, timeout=timeout)
            for n, _event in enumerate(stream, 1):
                if n >= method.max_events:
                    stream.cancel()
                    break
        else:
            channel.unary_unary(method.path)(payload, metadata=metadata, timeout=timeout)
    except grpc.RpcError as err:
        code = err.code() if hasattr(err, "code") else None
        return (code.name if code else type(err).__name__), verdict_grpc(method, err)
    return "OK", None


HTTP_PATHS = ["/v1/metrics", "/v1/metrics/", "/api/v1/write", "/api/v1/write/", "/metrics", "/", "/v1/traces", "/%00",
              "/" + "a" * 3000, "/v1/metrics?x=1"]
HTTP_METHODS = ["POST", "GET", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]
HTTP_DOCS = [*DOCS, '{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": 1}]}]}]}',
             '{"resourceMetrics": ' + "[" * 300 + "]" * 300 + "}"]
CONTENT_TYPES = ["application/x-protobuf", "application/json", "text/plain", "", "application/json; charset=latin-1",
                 "multipart/form-data; boundary=x"]


# The request a port is for, sent most of the time so that the hostile part reaches the handler.
HTTP_USUAL = {"otlp_http": ("POST", "/v1/metrics"), "metrics": ("GET", "/metrics")}


def _remote_write_valid() -> remote_pb2.WriteRequest:
    import time
    req = remote_pb2.WriteRequest()
    ts = req.timeseries.add()
    for name, value in (("__name__", "twin_training_step_time_seconds"), ("job", "fuzz"), ("instance", "node-1:1")):
        ts.labels.add(name=name, value=value)
    ts.samples.add(value=1.0, timestamp=time.time_ns() // 10**6)
    return req


def remote_write_case(rng: random.Random) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of one hostile remote-write request: snappy of hostile or valid
    WriteRequests, broken snappy, and wrong content types, encodings and versions."""
    k = rng.random()
    if k < 0.4:
        raw = Hostile(rng).build(remote_pb2.WriteRequest()).SerializeToString()
    elif k < 0.6:
        raw = rng.randbytes(rng.randrange(0, 2048))
    else:
        raw = _remote_write_valid().SerializeToString()
    body = bytes(cramjam.snappy.compress_raw(raw))
    if rng.random() < 0.2:  # cut, flipped or with a lying length preamble
        body = rng.choice([body[: rng.randrange(0, len(body) + 1)], bytes([b ^ 0x5A for b in body]),
                           b"\xff\xff\xff\x0f" + body])
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
               "X-Prometheus-Remote-Write-Version": "0.1.0"}
    if rng.random() < 0.2:
        headers[rng.choice(list(headers))] = rng.choice(["", "gzip", "application/json", "2.0.0",
                                                          "application/x-protobuf;proto=io.prometheus.write.v2.Request"])
    return body, headers


# The web view's routes (twin.web.web_app) with hostile queries; /events is a never-ending stream,
# which a request/response client cannot read to its end, so it gets HEAD and bad methods (and a
# GET only when a method swap makes one: call_http then reads its headers, not its body).
WEB_ROUTES = [("GET", "/"), ("GET", "/step"), ("GET", "/failures"), ("GET", "/sweeps"), ("GET", "/api/jobs"),
              ("GET", "/api/fabric"), ("GET", "/api/step"), ("GET", "/api/failures"), ("GET", "/api/sweeps"),
              ("POST", "/api/sweeps"), ("POST", "/api/sweeps/load"), ("GET", "/api/sweeps/s1"),
              ("DELETE", "/api/sweeps/s1"), ("GET", "/login"), ("POST", "/login"), ("GET", "/logout"),
              ("HEAD", "/events"), ("PUT", "/events"), ("GET", "/static/twin.js"), ("GET", "/static/../pages/x"),
              ("GET", "/static/%2e%2e/%2e%2e/etc/passwd")]
WEB_QUERIES = ["job", "at", "sort", "order", "limit", "name", "token", "next"]
WEB_FILES = ["rows.csv", "rows.jsonl", "rows.parquet", "rows.txt", "", "../../x.csv", "a" * 300 + ".csv"]


def _web_sweep_spec(rng: random.Random) -> bytes:
    spec = {"name": "fuzz", "base": BASE, "axes": [{"path": "plan.gbs", "values": [256, 512]}]}
    if rng.random() < 0.5:
        spec["axes"] = [{"path": rng.choice(["plan.tp", "plan.nope", "cluster.num_gpus", ""]),
                         "values": rng.choice([[1, 2], [], ["x"], [2**70], list(range(500))])}]
    return json.dumps(spec).encode()


def web_case(rng: random.Random, token: str | None) -> tuple[str, str, bytes, dict[str, str]]:
    """(method, path, body, headers) of one hostile request to the web view."""
    hostile = Hostile(rng)
    method, path = rng.choice(WEB_ROUTES)
    if rng.random() < 0.1:
        method = rng.choice(HTTP_METHODS)
    params = [(rng.choice(WEB_QUERIES), hostile.string()) for _ in range(rng.randrange(0, 3))]
    if params:
        path += "?" + urllib.parse.urlencode(params, errors="surrogatepass")
    body = b""
    headers: dict[str, str] = {}
    if path.startswith("/api/sweeps/load"):
        body = rng.choice([rng.randbytes(rng.randrange(0, 2048)), b"point_id,feasible\n1,1\n", b"{}\n[",
                           b"\xff\xfe" * 100])
        path = "/api/sweeps/load?" + urllib.parse.urlencode({"name": rng.choice(WEB_FILES)})
    elif method == "POST" and path.startswith("/api/sweeps"):
        body = _web_sweep_spec(rng) if rng.random() < 0.4 else rng.choice(HTTP_DOCS).encode("utf-8", "surrogatepass")
        headers["Content-Type"] = rng.choice(["application/json", "application/yaml", "text/plain"])
    elif method == "POST":
        body = rng.choice([b"token=" + rng.randbytes(40), b"token=wrong&next=//evil.example", rng.randbytes(300)])
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if token is not None and rng.random() < 0.9:
        headers["Authorization"] = f"Bearer {token}"
    elif rng.random() < 0.5:
        headers["Cookie"] = rng.choice(["twin_session=" + "0" * 64, "twin_session=", "a=b; twin_session=x" * 50])
    return method, path, body, headers


def http_case(rng: random.Random, token: str | None, port: str = "otlp_http") -> tuple[str, str, bytes, dict[str, str]]:
    """(method, path, body, headers) of one hostile HTTP request to ``port``."""
    if port == "web":
        return web_case(rng, token)
    hostile = Hostile(rng)
    if port == "otlp_http" and rng.random() < 0.25:
        body, headers = remote_write_case(rng)
        if token is not None and rng.random() < 0.9:
            headers["Authorization"] = f"Bearer {token}"
        return "POST", "/api/v1/write", body, headers
    method, path = HTTP_USUAL.get(port, ("POST", "/"))
    if rng.random() < 0.3:
        method, path = rng.choice(HTTP_METHODS), rng.choice(HTTP_PATHS)
    ctype = rng.choice(CONTENT_TYPES)
    k = rng.random()
    if k < 0.3:
        body = rng.randbytes(rng.randrange(0, 2048))
    elif k < 0.45:
        body = otlp_payload(rng)
    elif k < 0.55:
        body = hostile.build(metrics_service_pb2.ExportMetricsServiceRequest()).SerializeToString()
    elif k < 0.75:
        body = rng.choice(HTTP_DOCS).encode("utf-8", "surrogatepass")
    else:
        body = _otlp_valid().SerializeToString()
    headers = {"Content-Type": ctype} if ctype else {}
    if rng.random() < 0.2:
        headers["Content-Encoding"] = rng.choice(["gzip", "deflate", "br", "gzip, gzip"])
        if headers["Content-Encoding"] == "gzip" and rng.random() < 0.5:
            pick = rng.random()
            if pick < 0.6:
                body = gzip.compress(body)
            elif pick < 0.8:  # many members (a few are one body; hundreds are refused)
                body = gzip.compress(body) + gzip.compress(b"") * rng.choice([1, 15, 300])
            else:  # a bomb: small, inflating far beyond its size
                body = gzip.compress(b"\0" * rng.choice([1 << 16, 1 << 22]))
    if token is not None and rng.random() < 0.9:
        headers["Authorization"] = f"Bearer {token}"
    elif rng.random() < 0.5:
        headers["Authorization"] = rng.choice(["Bearer wrong", "Basic abc", "Bearer", "x" * 5000])
    return method, path, body, headers


def call_http(address: str, case: tuple[str, str, bytes, dict[str, str]], timeout: float
              ) -> tuple[str, str | None]:
    """Send one HTTP case: (the status, the verdict: None when acceptable). 503 is fine only
    with Retry-After."""
    method, path, body, headers = case
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body if method not in ("GET", "HEAD") else None, headers=headers)
        resp = conn.getresponse()
        # An accepted GET /events (a hostile method swap can make one) is a never-ending
        # event stream: its status and headers are the answer, its body has no end to read.
        if not (resp.getheader("Content-Type") or "").startswith("text/event-stream"):
            resp.read()
    except (ConnectionError, http.client.HTTPException, TimeoutError, OSError) as err:
        return type(err).__name__, f"HTTP {method} {path[:40]} on {address}: {type(err).__name__}: {err}"
    finally:
        conn.close()
    if resp.status >= 500 and not (resp.status == 503 and resp.getheader("Retry-After")):
        return str(resp.status), f"HTTP {method} {path[:40]} on {address}: {resp.status} {resp.reason}"
    return str(resp.status), None


@dataclass
class FuzzReport:
    """What a run sent and what came back."""

    sent: int = 0
    by_target: dict[str, int] | None = None
    outcomes: dict[str, int] | None = None  # "port method -> code": how many
    failures: list[str] | None = None
    rss_mib: list[float] | None = None

    def __post_init__(self) -> None:
        self.by_target = self.by_target or {}
        self.outcomes = self.outcomes or {}
        self.failures = self.failures or []
        self.rss_mib = self.rss_mib or []


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (Linux /proc); NaN once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def targets(listeners: dict[str, str]) -> list[tuple[str, str, Method | None]]:
    """(port name, address, method) for every method on every port; HTTP ports have method None."""
    per_port = {"main": METHODS, "otlp_grpc": OTLP_ONLY, "health": HEALTH_ONLY}
    out: list[tuple[str, str, Method | None]] = []
    for name, address in listeners.items():
        if name in per_port:
            out += [(name, address, m) for m in per_port[name]]
        else:  # HTTP: weighted like a few methods
            out += [(name, address, None)] * 3
    return out


def _one(name: str, address: str, method: Method | None, rng: random.Random, hostile: Hostile,
         channels: dict[str, grpc.Channel], token: str | None, timeout: float) -> tuple[str, str | None]:
    """Send one case to (port ``name`` at ``address``, ``method``): (outcome, problem or None)."""
    if method is None:
        return call_http(address, http_case(rng, token, name), timeout)
    metadata: tuple = ()
    if token is not None and rng.random() < 0.9:
        metadata = (("authorization", f"Bearer {token}"),)
    elif rng.random() < 0.5:
        metadata = (("authorization", rng.choice(["Bearer wrong", "Bearer ", "x" * 3000])),)
    short = 2.0 if method.streaming else timeout
    return call_grpc(channels[name], method, hostile.payload(method), metadata, short)


def run(listeners: dict[str, str], token: str | None, requests: int, seed: int, *, timeout: float = 10.0,
        pid: int | None = None, progress: Callable[[int], None] | None = None, threads: int = 1,
        seconds: float | None = None, alive: Callable[[], bool] | None = None) -> FuzzReport:
    """Send ``requests`` seeded hostile cases spread over every method of every port, from
    ``threads`` threads at once, for at most ``seconds`` (None: no bound); stop early when
    ``alive()`` says the server is gone. ``progress(sent)`` is called after each case."""
    import threading
    import time

    table = targets(listeners)
    channels = {name: grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)])
                for name, address, m in table if m is not None}
    report = FuzzReport()
    lock = threading.Lock()
    stop = threading.Event()
    claimed = [0]  # cases taken by a thread (report.sent: cases answered)
    deadline = None if seconds is None else time.monotonic() + seconds
    if pid is not None:
        report.rss_mib.append(rss_mib(pid))

    def worker(w: int) -> None:
        rng = random.Random(f"{seed}/{w}") if threads > 1 else random.Random(seed)
        hostile = Hostile(rng)
        case = 0
        while not stop.is_set():
            with lock:
                if claimed[0] >= requests or (deadline is not None and time.monotonic() > deadline):
                    return
                claimed[0] += 1
                n = claimed[0]
            if alive is not None and n % 200 == 0 and not alive():
                with lock:
                    report.failures.append(f"the server died (after {report.sent:,} answered requests)")
                stop.set()
                return
            name, address, method = table[rng.randrange(len(table))]
            key = f"{name} {method.path if method else 'http'}"
            outcome, problem = _one(name, address, method, rng, hostile, channels, token, timeout)
            with lock:
                report.sent += 1
                sent = report.sent
                report.by_target[key] = report.by_target.get(key, 0) + 1
                report.outcomes[f"{key} -> {outcome}"] = report.outcomes.get(f"{key} -> {outcome}", 0) + 1
                if problem is not None:
                    where = f"thread {w} case {case}" if threads > 1 else f"case {case}"
                    report.failures.append(f"{where} (seed {seed}): {problem}")
            if pid is not None and sent % 1000 == 0:
                rss = rss_mib(pid)
                with lock:
                    report.rss_mib.append(rss)
            if progress is not None:
                progress(sent)
            case += 1

    try:
        pool = [threading.Thread(target=worker, args=(w,), name=f"fuzz-{w}") for w in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        for ch in channels.values():
            ch.close()
    if pid is not None:
        report.rss_mib.append(rss_mib(pid))
    return report


TOKEN_ENV = "TWIN_FUZZ_TOKEN"


def all_ports_config(directory: Path) -> Path:
    """A server config opening every port the service has, on 127.0.0.1, token auth on
    (the token from ``$TWIN_FUZZ_TOKEN``), small sweep limits so fuzzed sweeps stay quick."""
    import socket

    import yaml

    with socket.socket() as s:  # the Health-only port takes no 0; a port free just now
        s.bind(("127.0.0.1", 0))
        health_port = s.getsockname()[1]
    path = directory / "fuzz-serve.yaml"
    path.write_text(yaml.safe_dump({
        "host": "127.0.0.1", "port": 0, "health_port": health_port, "otlp_http_port": 0,
        "state_dir": str(directory / "state"), "log_format": "json",
        "auth": {"token_env": TOKEN_ENV}, "limits": {"max_sweep_points": 40},
        "telemetry": {"otlp_address": "127.0.0.1:0", "metrics_address": "127.0.0.1:0", "calibrate_interval_s": 0}}))
    return path


def listeners_of(serving: dict[str, Any]) -> dict[str, str]:
    """Port name -> address from the server's ``serving`` log record."""
    out = {"main": serving["address"]}
    if serving.get("health_port"):
        out["health"] = f"127.0.0.1:{serving['health_port']}"
    out.update(serving.get("listeners") or {})
    return out
