"""Only acknowledged points are live (issue 39, item 8).

A batch whose commit fails was answered with an error, so the exporter will send it again (or
give up): the live state must not show it. Before this fix, with a full state dir 24 of 400
requests were acknowledged, yet GetLiveState showed 8,000 live components (480 after a restart).
"""

from __future__ import annotations

import errno
import time

import pytest

from twin.engine import Engine
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

GPUS_PER_REQUEST = 20


def _service(state_dir) -> TelemetryService:
    return TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=state_dir, calibrate_interval_s=0))


def _gpus(host: str, t: int, temp: float = 60.0, xid: float = 0.0, ecc: float = 0.0):
    """One request: temperature, XID and a double-bit ECC counter of ``GPUS_PER_REQUEST`` GPUs of ``host``."""
    gpus = [{"gpu": str(i)} for i in range(GPUS_PER_REQUEST)]
    return request({"host.name": host}, [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", [(g, 0, t, temp) for g in gpus]),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", [(g, 0, t, xid) for g in gpus]),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "sum", [(g, 1, t, ecc) for g in gpus])])


def _fail_commits(svc: TelemetryService, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(svc.store, "commit_batch", full)


def _live(svc: TelemetryService) -> dict:
    """Everything a reader can see: components as the API shows them, series, observations, events."""
    state = svc.live_state(max_events=1000)
    with svc.lock:
        series = {k: (s.start_ns, s.time_ns, s.value, s.derived) for k, s in svc.state.series.items()}
        observations = {j: list(d) for j, d in svc.state.observations.items()}
    return {"components": state["components"], "events": state["events"], "series": series,
            "observations": observations, "tiers": state["tiers"]}


def test_points_whose_commit_failed_are_not_live_and_not_there_after_a_restart(tmp_path, monkeypatch):
    svc = _service(tmp_path)
    t = time.time_ns()
    svc.ingest(_gpus("acked", t), timeout=10)  # acknowledged: live
    acknowledged = _live(svc)
    assert len(acknowledged["components"]) == GPUS_PER_REQUEST
    with monkeypatch.context() as m:
        _fail_commits(svc, m)
        for n in range(30):  # a full disk: every request refused
            with pytest.raises(OSError):
                svc.ingest(_gpus(f"refused-{n}", t + n), timeout=10)
    assert _live(svc) == acknowledged
    svc.close()
    restarted = _service(tmp_path)
    try:
        assert [c["id"] for c in restarted.live_state()["components"]] == \
            [c["id"] for c in acknowledged["components"]]
    finally:
        restarted.close()


def test_a_failed_batch_on_known_series_leaves_every_value_state_and_event_as_acknowledged(tmp_path, monkeypatch):
    """The refused batch changes known series (a counter's rate, a gauge), turns GPUs down
    (XID 79), adds components and a step observation: all of it is taken back."""
    svc = _service(tmp_path)
    try:
        svc.register_job("j", _job_yaml())
        t = time.time_ns()
        svc.ingest(_gpus("n1", t, ecc=0.0), timeout=10)
        svc.ingest(_gpus("n1", t + 10**9, ecc=2.0), timeout=10)  # a rate, degraded by the ECC rule
        svc.ingest(request({}, [("twin.training.step_time", "gauge", [({"job": "j"}, 0, t, 7.0)])]), timeout=10)
        acknowledged = _live(svc)
        assert any(c["state"] == "degraded" for c in acknowledged["components"])
        with monkeypatch.context() as m:
            _fail_commits(svc, m)
            refused = [_gpus("n1", t + 2 * 10**9, temp=95.0, xid=79.0, ecc=50.0), _gpus("n2", t + 10**9),
                       request({}, [("twin.training.step_time", "gauge", [({"job": "j"}, 0, t + 10**9, 9.0)])])]
            for req in refused:
                with pytest.raises(OSError):
                    svc.ingest(req, timeout=10)
        assert _live(svc) == acknowledged
        # The exporter's retry of the same points is applied in full once the disk has room again.
        for req in refused:
            assert svc.ingest(req, timeout=10)[0] == 0
        after = svc.live_state()
        assert sum(1 for c in after["components"] if c["state"] == "down") == GPUS_PER_REQUEST
        assert len(after["components"]) == 2 * GPUS_PER_REQUEST + 1
    finally:
        svc.close()


def _job_yaml() -> str:
    from tests.telemetry.conftest import EXAMPLES

    return (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
