"""twin.server.process.start_serve: the one way the demo, tests and benchmarks start a server."""

from __future__ import annotations

import os

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import ROOT
from twin.server.process import start_serve


def test_start_serve_returns_the_address_of_a_serving_server(tmp_path):
    env = {**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc, serving = start_serve(["--host", "127.0.0.1", "--port", "0", "--state-dir", str(tmp_path / "state")],
                                env=env, cwd=ROOT)
    try:
        assert serving["port"] > 0 and serving["address"].endswith(f":{serving['port']}")
        # twin serve froze its startup heap (twin.server.heap): tens of thousands of objects,
        # never fewer than the modules and presets alone hold.
        assert serving["gc_frozen_objects"] > 20_000
        # and shortened its GIL switch interval (twin.server.gil): Health past capacity
        assert serving["switch_interval_s"] == pytest.approx(0.001)
        with grpc.insecure_channel(serving["address"]) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_start_serve_reports_why_a_server_did_not_start(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(RuntimeError, match=r"exited \(2\) before serving: .*missing\.yaml: cannot read file"):
        start_serve(["--config", str(missing)], cwd=ROOT)
