"""Every listening port gets the main port's auth (issue 15, hole 5): the dedicated OTLP port
of `twin serve` refuses exports without the bearer token, like the main port."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import grpc
import pytest
import yaml
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc

from tests.telemetry.conftest import ROOT
from twin.server.process import start_serve
from twin.telemetry.otlpbuild import request

TOKEN = "s3cret-token-for-the-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    otlp_port = _free_port()
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({
        "host": "127.0.0.1", "port": 0, "state_dir": str(tmp_path / "state"), "log_format": "json",
        "auth": {"token_env": "TWIN_TEST_TOKEN"},
        "telemetry": {"otlp_address": f"127.0.0.1:{otlp_port}", "calibrate_interval_s": 0}}))
    proc, serving = start_serve(["--config", str(config)], cwd=ROOT,
                                env={**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "TWIN_TEST_TOKEN": TOKEN})
    try:
        yield serving["address"], f"127.0.0.1:{otlp_port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _export(address: str, metadata=()) -> metrics_service_pb2.ExportMetricsServiceResponse:
    points = [({"job": "j"}, 0, time.time_ns(), 1.0)]
    req = request({"host.name": "node-1"}, [("twin.training.step_time", "gauge", points)])
    with grpc.insecure_channel(address) as ch:
        return metrics_service_pb2_grpc.MetricsServiceStub(ch).Export(req, metadata=metadata, timeout=10)


@pytest.mark.parametrize("which", [0, 1], ids=["main port", "dedicated OTLP port"])
def test_an_export_without_the_token_is_unauthenticated_on_every_port(server, which):
    address = server[which]
    with pytest.raises(grpc.RpcError) as err:
        _export(address)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _export(address, metadata=(("authorization", f"Bearer {TOKEN}"),)) is not None
