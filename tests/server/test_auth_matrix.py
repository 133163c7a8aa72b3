"""The auth matrix (issue 39): every port of ``twin serve``, gRPC and HTTP, with and without TLS,
against no token, a wrong one, case and whitespace variants, and the right one. Where auth is
configured only the right token passes; Health (the Health-only port, and Health on the main
port) stays open for probes, as designed.

"Right" is the header value ``Bearer <token>``. HTTP/1.1 drops whitespace around a field value
(RFC 9110, section 5.5: it is not part of the value), so ``Bearer <token>`` with a space after it
on the wire *is* the right value on the HTTP ports; gRPC compares the metadata as sent, so there
it is refused; a tab inside the value is one gRPC will not even send. Every other variant,
inside the value or in its case, is refused on every port.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc

from tests.server.conftest import ServerProcess
from tests.server.test_security import pki  # noqa: F401 (the certificates, a fixture)
from twin.rpc.v1 import twin_service_pb2 as t
from twin.rpc.v1 import twin_service_pb2_grpc
from twin.telemetry.otlpbuild import request

TOKEN = "Matrix-t0ken-for-the-test"
VARIANTS = {
    "none": None,
    "wrong": "Bearer wrong-token",
    "token upper case": f"Bearer {TOKEN.upper()}",
    "token lower case": f"Bearer {TOKEN.lower()}",
    "scheme lower case": f"bearer {TOKEN}",
    "scheme upper case": f"BEARER {TOKEN}",
    "no scheme": TOKEN,
    "two spaces": f"Bearer  {TOKEN}",
    "tab": f"Bearer\t{TOKEN}",
    "no space": f"Bearer{TOKEN}",
    "space inside the token": f"Bearer {TOKEN[:6]} {TOKEN[6:]}",
    "token cut": f"Bearer {TOKEN[:-1]}",
    "token and more": f"Bearer {TOKEN}x",
    "right, then a space": f"Bearer {TOKEN} ",
    "right": f"Bearer {TOKEN}",
}
# HTTP drops the whitespace around a field value (RFC 9110 5.5): on an HTTP port this is "right".
HTTP_SAME_AS_RIGHT = {"right, then a space"}
PORTS = ("main", "otlp_grpc", "otlp_http", "remote_write", "metrics", "web", "health")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp, tls: dict[str, str] | None) -> ServerProcess:
    config = {"host": "127.0.0.1", "health_port": _free_port(), "otlp_http_port": 0, "log_format": "json",
              "auth": {"token_env": "TWIN_MATRIX_TOKEN"}, "web": {"address": "127.0.0.1:0"},
              "telemetry": {"otlp_address": "127.0.0.1:0", "metrics_address": "127.0.0.1:0",
                            "calibrate_interval_s": 0}}
    if tls:
        config["tls"] = tls
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    return ServerProcess(tmp, "--config", str(path), env={"TWIN_MATRIX_TOKEN": TOKEN})


@pytest.fixture(scope="module", params=["plaintext", "TLS"])
def served(request, tmp_path_factory, pki) -> Iterator[tuple[dict[str, str], str | None]]:  # noqa: F811
    tls = None
    if request.param == "TLS":
        tls = {"cert_file": pki["server_cert"], "key_file": pki["server_key"]}
    srv = _serve(tmp_path_factory.mktemp(f"matrix-{request.param}"), tls)
    serving = srv.wait_log(lambda r: r.get("msg") == "serving")
    listeners = {"main": serving["address"], "health": f"127.0.0.1:{serving['health_port']}",
                 **serving["listeners"]}
    yield listeners, (pki["ca"] if tls else None)
    assert srv.stop() == 0, srv.text()[-2000:]


def _channel(address: str, ca: str | None) -> grpc.Channel:
    if ca is None:
        return grpc.insecure_channel(address)
    with open(ca, "rb") as fh:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=fh.read()))


def _grpc_call(fn: Callable[[tuple], object], header: str | None) -> str:
    metadata = () if header is None else (("authorization", header),)
    try:
        fn(metadata)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.UNAUTHENTICATED:
            return "refused"
        if err.code() == grpc.StatusCode.INTERNAL and err.details() == "Invalid metadata":
            return "not sendable"  # gRPC core refuses to send it (a tab: "Illegal header value")
        return "passes"
    except ValueError:  # gRPC itself will not send this metadata value
        return "not sendable"
    return "passes"


def _http_call(address: str, ca: str | None, method: str, path: str, body: bytes, headers: dict[str, str],
               header: str | None) -> str:
    host, port = address.rsplit(":", 1)
    if ca is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=30)
    else:
        conn = http.client.HTTPSConnection(host, int(port), timeout=30,
                                           context=ssl.create_default_context(cafile=ca))
    if header is not None:
        headers = {**headers, "Authorization": header}
    try:
        conn.request(method, path, body=body or None, headers=headers)
        resp = conn.getresponse()
        resp.read()
    except ValueError:  # http.client itself will not send this header value
        return "not sendable"
    finally:
        conn.close()
    return "refused" if resp.status == 401 else "passes" if resp.status < 400 else f"{resp.status}"


def _outcome(port: str, listeners: dict[str, str], ca: str | None, header: str | None) -> str:
    if port in ("main", "otlp_grpc", "health"):
        with _channel(listeners[port], ca) as ch:
            if port == "main":
                stub = twin_service_pb2_grpc.TwinServiceStub(ch)
                return _grpc_call(lambda md: stub.GetCatalog(t.GetCatalogRequest(), metadata=md, timeout=30), header)
            if port == "health":
                health = health_pb2_grpc.HealthStub(ch)
                return _grpc_call(lambda md: health.Check(health_pb2.HealthCheckRequest(), metadata=md, timeout=30),
                                  header)
            otlp = metrics_service_pb2_grpc.MetricsServiceStub(ch)
            points = [({"job": "matrix"}, 0, time.time_ns(), 1.0)]
            req = request({"host.name": "n"}, [("twin.training.step_time", "gauge", points)])
            return _grpc_call(lambda md: otlp.Export(req, metadata=md, timeout=30), header)
    if port == "otlp_http":
        points = [({"job": "matrix"}, 0, time.time_ns(), 1.0)]
        body = request({"host.name": "n"}, [("twin.training.step_time", "gauge", points)]).SerializeToString()
        return _http_call(listeners[port], ca, "POST", "/v1/metrics", body,
                          {"Content-Type": "application/x-protobuf"}, header)
    if port == "remote_write":
        import cramjam

        from twin.rpc.prompb import remote_pb2

        write = remote_pb2.WriteRequest()
        ts = write.timeseries.add()
        ts.labels.add(name="__name__", value="up")
        ts.samples.add(value=1.0, timestamp=time.time_ns() // 10**6)
        return _http_call(listeners["otlp_http"], ca, "POST", "/api/v1/write",
                          bytes(cramjam.snappy.compress_raw(write.SerializeToString())),
                          {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}, header)
    if port == "metrics":
        return _http_call(listeners[port], ca, "GET", "/metrics", b"", {}, header)
    return _http_call(listeners["web"], ca, "GET", "/api/jobs", b"", {}, header)


def test_only_the_right_token_passes_on_every_port(served):
    listeners, ca = served
    matrix = {port: {name: _outcome(port, listeners, ca, header) for name, header in VARIANTS.items()}
              for port in PORTS}
    print(json.dumps({"tls": ca is not None, "matrix": matrix}, indent=1))
    for port, row in matrix.items():
        if port == "health":  # open by design: kubelet's probes carry no token
            assert set(row.values()) <= {"passes", "not sendable"} and row["none"] == "passes", row
            continue
        http_port = port in ("otlp_http", "remote_write", "metrics", "web")
        for name, outcome in row.items():
            right = name == "right" or (http_port and name in HTTP_SAME_AS_RIGHT)
            assert (outcome == "passes") == right, (port, name, outcome)
        assert row["none"] == "refused" and row["wrong"] == "refused"


def test_health_on_the_main_port_stays_open_and_other_calls_need_the_token(served):
    listeners, ca = served
    with _channel(listeners["main"], ca) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=30).status == \
            health_pb2.HealthCheckResponse.SERVING
