"""Step-time history (issue 34, item 4): each job's predicted (designed, now) and observed step times,
sampled whether or not anyone looks, stored with the telemetry state, served over GetDivergence and
the Step page, and still there after a restart.
"""

from __future__ import annotations

import math
import time

import pytest

from tests.telemetry.conftest import EXAMPLES
from twin.core.errors import SpecError
from twin.engine import Engine
from twin.rpc.v1 import telemetry_pb2 as pb
from twin.telemetry import store as store_mod
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.servicer import TelemetryServicer
from twin.telemetry.telemetry_config import TelemetryConfig

S = 10**9
SCENARIO = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()


def _service(state_dir, history_interval_s: float = 0.0) -> TelemetryService:
    return TelemetryService(Engine(autoload=False), TelemetryConfig(
        state_dir=state_dir, calibrate_interval_s=0, history_interval_s=history_interval_s))


def _report(svc: TelemetryService, job: str, t: int, seconds: float) -> None:
    svc.ingest(request({}, [("twin.training.step_time", "gauge", [({"job": job}, 0, t, seconds)])]), timeout=10)


def test_samples_are_stored_when_they_move_and_read_back_after_a_restart(tmp_path):
    svc = _service(tmp_path)
    designed = svc.register_job("gpt", SCENARIO)
    assert svc.record_history() == 1                      # before any report: the predictions alone
    assert svc.record_history() == 0                      # nothing moved: nothing stored
    t0 = time.time_ns() - 100 * S
    for i in range(12):
        _report(svc, "gpt", t0 + i * S, designed * (1.05 + 0.01 * i))
        assert svc.record_history() == 1
        time.sleep(0.002)                                 # a new time_ns for each sample
    before = svc.history("gpt")["gpt"]
    svc.close()

    again = _service(tmp_path)                            # the state store restarted
    try:
        after = again.history("gpt")["gpt"]
        assert len(after) == 13 >= 10 and after == before
        assert after[0]["observed_s"] is None and after[0]["designed_s"] == pytest.approx(designed)
        assert [h["time_ns"] for h in after] == sorted(h["time_ns"] for h in after)
        assert all(h["now_s"] == pytest.approx(designed) for h in after)   # no fault: now is as designed
        assert after[-1]["observed_s"] > after[1]["observed_s"]            # the reported steps, in order
        assert again.record_history() == 0               # the last sample was read back too: not repeated
        assert len(again.history("gpt", 5)["gpt"]) == 5 and again.history("gpt", 5)["gpt"] == after[-5:]
        # Over the API: GetDivergence with history_points.
        got = TelemetryServicer(again).GetDivergence(pb.GetDivergenceRequest(history_points=20), None)
        (job,) = got.jobs
        assert len(job.history) == 13
        assert not job.history[0].HasField("observed_step_time_s")
        assert job.history[-1].observed_step_time_s == pytest.approx(after[-1]["observed_s"])
        assert job.history[-1].time_unix_nano == after[-1]["time_ns"]
        assert not TelemetryServicer(again).GetDivergence(pb.GetDivergenceRequest(), None).jobs[0].history
    finally:
        again.close()


def test_history_is_sampled_with_nobody_looking(tmp_path):
    svc = _service(tmp_path, history_interval_s=0.05)
    try:
        svc.register_job("gpt", SCENARIO)
        deadline = time.monotonic() + 30
        while not svc.history("gpt") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(svc.history("gpt")["gpt"]) == 1
    finally:
        svc.close()


def test_each_job_keeps_its_latest_samples(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "HISTORY_PER_JOB", 4)
    st = store_mod.Store(tmp_path / "t.sqlite3")
    try:
        st.save_history([("a", i, 1.0, 1.0 + i, None) for i in range(10)] + [("b", 5, 2.0, 2.0, 3.0)])
        got = st.load_history()
        assert [h["time_ns"] for h in got["a"]] == [6, 7, 8, 9] and len(got["b"]) == 1
        # A row this version cannot use (a hand edit): skipped and reported, never a crash.
        with st._lock:
            st._db.execute("INSERT INTO step_history VALUES ('a', 11, 'x', 1.0, NULL)")
        assert [h["time_ns"] for h in st.load_history("a", 4)["a"]] == [7, 8, 9]
        assert st.skipped and st.skipped[-1][0] == "step_history"
    finally:
        st.close()


@pytest.mark.parametrize("bad", [-1, 10_001, 2.5, True])
def test_a_bad_history_request_names_the_field(tmp_path, bad):
    svc = _service(tmp_path)
    try:
        with pytest.raises(SpecError) as err:
            svc.history("gpt", bad)
        assert err.value.field == "history_points"
    finally:
        svc.close()


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "15"])
def test_a_bad_history_interval_names_the_field(tmp_path, bad):
    with pytest.raises(SpecError) as err:
        TelemetryConfig(state_dir=tmp_path, history_interval_s=bad).validate()
    assert err.value.field == "telemetry.history_interval_s"


def test_a_live_server_serves_its_history_after_a_restart(start_server, tmp_path):
    """twin serve, stopped (SIGTERM) and started again on its state directory: >= 10 points read back."""
    state = tmp_path / "state"
    srv = start_server("--history-interval", "0.05", state_dir=state)
    api = srv.api()
    designed = api.RegisterJob(pb.RegisterJobRequest(job="gpt", scenario_yaml=SCENARIO), timeout=60)
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as otlp

    export = otlp.MetricsServiceStub(srv.channel())
    t0 = time.time_ns() - 100 * S
    for i in range(12):
        export.Export(request({}, [("twin.training.step_time", "gauge", [
            ({"job": "gpt"}, 0, t0 + i * S, designed.predicted_step_time_s * (1.1 + 0.01 * i))])]), timeout=30)
        time.sleep(0.2)                                   # a few sampling periods per report
    srv.stop()
    again = start_server(state_dir=state)
    jobs = again.api().GetDivergence(pb.GetDivergenceRequest(history_points=1000), timeout=60).jobs
    (job,) = jobs
    observed = [h.observed_step_time_s for h in job.history if h.HasField("observed_step_time_s")]
    assert len(job.history) >= 10 and len(observed) >= 10, job.history
    assert observed == sorted(observed)                   # the reports, in the order they came
