"""The live "now" interval (issue 35): the twin's interval for a job narrows onto the job's own
reported steps; "as designed" keeps the corpus's; the gRPC answer carries both."""

from __future__ import annotations

import time

import pytest

from tests.telemetry.conftest import EXAMPLES
from twin.engine import Engine
from twin.rpc.v1 import telemetry_pb2 as pb
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.servicer import TelemetryServicer
from twin.telemetry.telemetry_config import TelemetryConfig


@pytest.fixture
def svc(tmp_path):
    s = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    s.register_job("j", (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text())
    yield s
    s.close()


def _report(svc: TelemetryService, steps: list[float]) -> None:
    t = time.time_ns() - len(steps) * 10**9
    points = [({"job": "j"}, 0, t + i * 10**9, v) for i, v in enumerate(steps)]
    for p in points:  # one point a request, as a job's exporter sends them
        assert svc.ingest(request({}, [("twin.training.step_time", "gauge", [p])]), timeout=10)[0] == 0


def _width(iv: dict) -> float:
    return iv["p80_high_s"] / iv["p80_low_s"]


def test_the_now_interval_narrows_onto_the_jobs_own_steps(svc):
    before = svc.predict("j")
    designed = before["designed"]["interval"]
    assert before["now"]["interval"]["p80_low_s"] == pytest.approx(designed["p80_low_s"], rel=1e-3)
    _report(svc, [7.40, 7.43, 7.38, 7.41, 7.39, 7.42, 7.40, 7.44])
    after = svc.predict("j")
    now = after["now"]["interval"]
    assert now["p80_low_s"] < 7.41 < now["p80_high_s"]
    assert _width(now) < 1.03 < _width(designed)
    assert "narrowed by 8 observed steps" in now["basis"]
    assert after["designed"]["interval"] == designed  # as designed: the corpus's interval, unchanged


def test_a_scenario_asked_for_without_a_job_is_not_narrowed(svc):
    _report(svc, [7.4] * 8)
    text = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
    out = svc.predict(text=text)
    assert "narrowed" not in out["now"]["interval"]["basis"]


def test_predict_live_answers_both_intervals(svc):
    _report(svc, [7.40, 7.43, 7.38, 7.41, 7.39, 7.42])
    servicer = TelemetryServicer(svc)
    resp = servicer.PredictLive(pb.PredictLiveRequest(job="j"), context=None)
    assert resp.HasField("designed_interval") and resp.HasField("now_interval")
    d, n = resp.designed_interval, resp.now_interval
    assert d.p95_low_s <= d.p80_low_s < resp.designed_step_time_s * 1.2 and d.runs > 0 and d.basis
    assert n.p80_low_s < 7.41 < n.p80_high_s and "narrowed" in n.basis
