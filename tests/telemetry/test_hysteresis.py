"""Live state has hysteresis: worse at the first evidence, better only after N clean samples."""

from __future__ import annotations

import time

import pytest

from twin.core.errors import SpecError
from twin.engine import Engine
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

PORT = "node-1/ib_port:mlx5_0/1"
ACTIVE, DOWN = 4.0, 1.0  # IBTA logical port states (node_exporter's state_id)


def _service(tmp_path, **kw) -> TelemetryService:
    return TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0, **kw))


T0 = time.time_ns()


def _states(svc: TelemetryService, values: list[float], after_s: int = 0) -> list[str]:
    out = []
    t = T0 + after_s * 10**9  # samples in time order (an older one is a duplicate)
    for i, v in enumerate(values):
        svc.ingest(request({"host.name": "node-1"}, [
            ("node_infiniband_state_id", "gauge", [({"device": "mlx5_0", "port": "1"}, 0, t + i * 10**9, v)])]))
        out.append(svc.state.components[PORT].state)
    return out


def test_a_port_goes_down_at_once_and_comes_back_after_three_clean_samples(tmp_path):
    svc = _service(tmp_path)
    try:
        got = _states(svc, [ACTIVE, DOWN, ACTIVE, ACTIVE, ACTIVE, ACTIVE])
        assert got == ["up", "down", "down", "down", "up", "up"]
        # One quiet sample between two faults does not bring a flapping port back.
        got = _states(svc, [DOWN, ACTIVE, DOWN, ACTIVE, ACTIVE], after_s=10)
        assert got == ["down", "down", "down", "down", "down"]
        events = [e for e in svc.state.events if e[1] == PORT]
        assert [(e[2], e[3]) for e in events] == [("up", "down"), ("down", "up"), ("up", "down")]
    finally:
        svc.close()


def test_the_paces_are_settings(tmp_path):
    svc = _service(tmp_path, degrade_after=2, recover_after=1)
    try:
        assert _states(svc, [ACTIVE, DOWN, DOWN, ACTIVE]) == ["up", "up", "down", "up"]
    finally:
        svc.close()
    with pytest.raises(SpecError) as err:
        TelemetryConfig(state_dir=tmp_path, recover_after=0).validate()
    assert err.value.field == "telemetry.recover_after"
