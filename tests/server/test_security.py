"""Bearer-token auth, TLS and mutual TLS, with certificates made here."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from twin.client import TwinClient
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.rpc.v1 import sweep_service_pb2_grpc, twin_service_pb2_grpc
from twin.rpc.v1 import twin_service_pb2 as t
from twin.wire.status_table import RemoteError

TOKEN = "tw1n-t0ken-for-tests"
ONE_LINE = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}}


# ---------------------------------------------------------------------- certificates
def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool, usage=None):
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if usage == "server":
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif usage == "client":
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert=None, key=None) -> str:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    out: dict[str, str] = {}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("twin test CA", ca_key, _name("twin test CA"), ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert("other CA", other_key, _name("other CA"), other_key, ca=True)
    out["ca"] = _write(d / "ca.pem", cert=ca)
    for who, usage, issuer, ikey in (("server", "server", ca, ca_key), ("client", "client", ca, ca_key),
                                     ("rogue", "client", other, other_key)):
        key = ec.generate_private_key(ec.SECP256R1())
        out[f"{who}_cert"] = _write(d / f"{who}.pem", cert=_cert(who, key, issuer.subject, ikey, ca=False,
                                                                  usage=usage))
        out[f"{who}_key"] = _write(d / f"{who}.key", key=key)
    return out


def _unauthenticated(fn) -> None:
    with pytest.raises(grpc.RpcError) as info:
        result = fn()
        if hasattr(result, "__next__"):
            list(result)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value.details()


# ----------------------------------------------------------------------------- auth
def test_bearer_token(start_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    config = tmp_path / "twin.yaml"
    config.write_text(yaml.safe_dump({"auth": {"token_file": str(token_file)}}))
    srv = start_server("--config", str(config))
    assert srv.wait_log(lambda r: r.get("msg") == "serving")["auth"] is True
    with grpc.insecure_channel(srv.address) as ch:
        stub = twin_service_pb2_grpc.TwinServiceStub(ch)
        request = t.GetCatalogRequest()
        _unauthenticated(lambda: stub.GetCatalog(request, timeout=5))
        _unauthenticated(lambda: stub.GetCatalog(request, timeout=5, metadata=(("authorization", "Bearer nope"),)))
        _unauthenticated(lambda: stub.GetCatalog(request, timeout=5, metadata=(("authorization", TOKEN),)))
        sweeps = sweep_service_pb2_grpc.SweepServiceStub(ch)
        _unauthenticated(lambda: sweeps.Sweep(sw.SweepRequest(spec_document="{}"), timeout=5))
        ok = stub.GetCatalog(request, timeout=5, metadata=(("authorization", f"Bearer {TOKEN}"),))
        assert ok.catalog.gpus
        # Probes and discovery stay open.
        health = health_pb2_grpc.HealthStub(ch)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        assert "twin.rpc.v1.TwinService" in set(ProtoReflectionDescriptorDatabase(ch).get_services())
    with TwinClient(srv.address, token=TOKEN) as client:
        assert client.predict(ONE_LINE).step_time_s > 0
    with TwinClient(srv.address, token="wrong") as client, pytest.raises(RemoteError) as info:
        client.predict(ONE_LINE)
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_token_from_env(start_server):
    srv = start_server(env={"TWIN_AUTH_TOKEN": TOKEN})
    with TwinClient(srv.address, token="") as anon, pytest.raises(RemoteError):
        anon.catalog()
    with TwinClient(srv.address, token=TOKEN) as client:
        assert client.catalog().models


# ------------------------------------------------------------------------------ TLS
def _config(tmp_path: Path, tls: dict, **extra) -> str:
    path = tmp_path / "tls.yaml"
    path.write_text(yaml.safe_dump({"tls": tls, **extra}))
    return str(path)


def test_tls(start_server, tmp_path, pki):
    srv = start_server("--config", _config(tmp_path, {"cert_file": pki["server_cert"], "key_file": pki["server_key"]}))
    assert srv.wait_log(lambda r: r.get("msg") == "serving")["tls"] is True
    with TwinClient(srv.address, ca_file=pki["ca"], timeout_s=10) as client:
        assert client.health() == "SERVING"
        assert client.predict(ONE_LINE).step_time_s > 0
    # Plaintext against a TLS port never gets an answer.
    with TwinClient(srv.address, timeout_s=3) as plain, pytest.raises(RemoteError) as info:
        plain.catalog()
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    # A client that does not trust the issuing CA refuses the server.
    with TwinClient(srv.address, ca_file=pki["rogue_cert"], timeout_s=3) as wrong, pytest.raises(RemoteError):
        wrong.catalog()


def test_mutual_tls_and_plaintext_health_port(start_server, tmp_path, pki):
    tls = {"cert_file": pki["server_cert"], "key_file": pki["server_key"], "client_ca_file": pki["ca"]}
    with socket.socket() as sock:  # a free port for the health listener
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    srv = start_server("--config", _config(tmp_path, tls), "--health-port", str(free))
    rec = srv.wait_log(lambda r: r.get("msg") == "serving")
    assert rec["mtls"] is True and rec["health_port"] == free
    # kubelet's native gRPC probe speaks plaintext: the health port answers it.
    with grpc.insecure_channel(f"127.0.0.1:{free}") as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:  # and nothing else
            twin_service_pb2_grpc.TwinServiceStub(ch).GetCatalog(t.GetCatalogRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with TwinClient(srv.address, ca_file=pki["ca"], cert_file=pki["client_cert"], key_file=pki["client_key"]) as c:
        assert c.predict(ONE_LINE).step_time_s > 0
    with TwinClient(srv.address, ca_file=pki["ca"], timeout_s=3) as no_cert, pytest.raises(RemoteError) as info:
        no_cert.catalog()
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    with TwinClient(srv.address, ca_file=pki["ca"], cert_file=pki["rogue_cert"], key_file=pki["rogue_key"],
                    timeout_s=3) as rogue, pytest.raises(RemoteError):
        rogue.catalog()


# ------------------------------------------------------------- OTLP/HTTP TLS
class _AcceptAll:
    """A telemetry service stand-in that accepts every request."""

    def ingest(self, request, timeout=None, raw=None):
        return 0, ""


@pytest.mark.parametrize("mutual", [False, True], ids=["TLS", "mTLS"])
def test_otlp_http_port_speaks_the_main_ports_tls(pki, mutual):
    import http.client
    import ssl

    from twin.telemetry.httpbase import server_ssl_context
    from twin.telemetry.otlp_http import PATH, HttpSettings, OtlpHttpReceiver

    context = server_ssl_context(pki["server_cert"], pki["server_key"], pki["ca"] if mutual else "")
    receiver = OtlpHttpReceiver(_AcceptAll(), "127.0.0.1", 0, HttpSettings(max_receive_bytes=1 << 20), context)
    assert receiver.url.startswith("https://")

    def post(client_cert: bool) -> int:
        ctx = ssl.create_default_context(cafile=pki["ca"])
        if client_cert:
            ctx.load_cert_chain(pki["client_cert"], pki["client_key"])
        conn = http.client.HTTPSConnection("127.0.0.1", receiver.port, context=ctx, timeout=10)
        try:
            conn.request("POST", PATH, body=b"", headers={"Content-Type": "application/x-protobuf"})
            return conn.getresponse().status
        finally:
            conn.close()

    try:
        assert post(client_cert=True) == 200
        if mutual:
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                post(client_cert=False)
        else:
            assert post(client_cert=False) == 200
        plain = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            plain.request("POST", PATH, body=b"", headers={"Content-Type": "application/x-protobuf"})
            plain.getresponse()
        plain.close()
        assert post(client_cert=True) == 200  # still serving after the refused handshakes
    finally:
        receiver.stop()


@pytest.mark.parametrize("mutual", [False, True], ids=["TLS", "mTLS"])
def test_remote_write_on_that_port_speaks_the_same_tls(pki, mutual, tmp_path):
    """A real remote-write client (prometheus-remote-writer, over requests) to the HTTPS port."""
    import time

    import requests
    from prometheus_remote_writer import RemoteWriter

    from twin.engine import Engine
    from twin.telemetry.httpbase import server_ssl_context
    from twin.telemetry.otlp_http import HttpSettings, OtlpHttpReceiver
    from twin.telemetry.service import TelemetryService
    from twin.telemetry.telemetry_config import TelemetryConfig

    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    context = server_ssl_context(pki["server_cert"], pki["server_key"], pki["ca"] if mutual else "")
    receiver = OtlpHttpReceiver(svc, "127.0.0.1", 0, HttpSettings(max_receive_bytes=1 << 20), context)
    assert receiver.remote_write_url.startswith("https://")
    sample = [{"metric": {"__name__": "node_infiniband_state_id", "device": "mlx5_0", "port": "1",
                          "instance": "node-1:9100"}, "values": [4], "timestamps": [time.time_ns() // 10**6]}]
    with_cert = requests.Session()
    with_cert.cert = (pki["client_cert"], pki["client_key"])
    writers = [RemoteWriter(url=receiver.remote_write_url, verify=pki["ca"], session=with_cert, retries=0),
               RemoteWriter(url=receiver.remote_write_url, verify=pki["ca"], retries=0)]
    try:
        assert writers[0].send(sample).last_response.status_code == 204
        assert svc.state.components["node-1/ib_port:mlx5_0/1"].state == "up"
        if mutual:
            with pytest.raises(RuntimeError, match="Network error"):
                writers[1].send(sample)
        else:
            assert writers[1].send(sample).last_response.status_code == 204
    finally:
        with_cert.close()
        for w in writers:
            w.close()
        receiver.stop()
        svc.close()
