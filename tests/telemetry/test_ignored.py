"""What the twin ignores is visible: unknown metrics counted per name and exporter, logged once."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import grpc

from twin.engine import Engine
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

EXPORT = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"


def _dcgm_page(t: int) -> object:
    # dcgm-exporter's default FB_USED is not a metric the twin reads; its temperature is.
    return request({"service.name": "dcgm-exporter", "host.name": "node-1"}, [
        ("DCGM_FI_DEV_FB_USED", "gauge", [({"gpu": "0"}, 0, t, 1000.0), ({"gpu": "1"}, 0, t, 2000.0)]),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", [({"gpu": "0"}, 0, t, 60.0)]),
    ])


def test_unknown_metrics_are_counted_per_name_and_exporter_and_logged_once(tmp_path, caplog):
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    try:
        t = time.time_ns()
        with caplog.at_level(logging.WARNING, logger="twin.telemetry.service"):
            for i in range(3):
                rejected, message = svc.ingest(_dcgm_page(t + i * 10**9))
                assert rejected == 2 and "unknown metric" in message
        (row,) = svc.ignored_metrics()
        assert (row["name"], row["exporter"], row["points"]) == ("DCGM_FI_DEV_FB_USED", "dcgm-exporter", 6)
        assert "unknown metric" in row["reason"] and row["first_seen_ns"] <= row["last_seen_ns"]
        logged = [r for r in caplog.records if "DCGM_FI_DEV_FB_USED" in r.getMessage()]
        assert len(logged) == 1  # once per name, not per request
        assert "node-1/gpu:0" in svc.state.components  # the mapped metric still lands
    finally:
        svc.close()


def test_twin_telemetry_status_lists_them_from_a_running_server(start_server):
    srv = start_server("--calibrate-interval", "0")
    ch = grpc.insecure_channel(srv.address)
    try:
        export = ch.unary_unary(EXPORT, request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=lambda b: b)
        export(_dcgm_page(time.time_ns()), timeout=30)
    finally:
        ch.close()
    out = subprocess.run([sys.executable, "-m", "twin.cli", "telemetry", "status", "--server", srv.address, "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ignored_metrics"][0]["name"] == "DCGM_FI_DEV_FB_USED"
    assert data["ignored_metrics"][0]["exporter"] == "dcgm-exporter"
    assert data["components"].get("up", 0) >= 1
    assert data["unplaced_hosts"] == ["node-1"]  # no job is registered: its host is shown as unplaced
    no_server = subprocess.run([sys.executable, "-m", "twin.cli", "telemetry", "status"], capture_output=True,
                               text=True, timeout=60, check=False)
    assert no_server.returncode == 2 and "--server" in no_server.stderr
