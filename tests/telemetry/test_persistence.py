"""kill -9 after ingest and calibration, restart: state and calibration are identical."""

from __future__ import annotations

import time

from google.protobuf.json_format import MessageToDict
from opentelemetry.sdk.metrics.export import MetricExportResult

from tests.telemetry.conftest import EXAMPLES, pb
from twin.telemetry.simulate import SimulatedCluster


def snapshot(srv) -> dict:
    st = MessageToDict(srv.state(max_events=1000))
    st.pop("ingest", None)  # counters of this process's requests, not state
    cal = MessageToDict(srv.api().GetCalibration(pb.GetCalibrationRequest()))
    div = MessageToDict(srv.api().GetDivergence(pb.GetDivergenceRequest()))
    now = srv.api().PredictLive(pb.PredictLiveRequest(job="gpt"))
    return {"state": st, "calibration": cal, "divergence": div,
            "predict": (now.designed_step_time_s, now.now_step_time_s, list(now.down_components))}


def test_kill9_after_ingest_and_calibration_restores_identically(start_server, tmp_path) -> None:
    state_dir = tmp_path / "persist"
    srv = start_server("--calibrate-interval", "0", state_dir=state_dir)
    api = srv.api()
    designed = api.RegisterJob(pb.RegisterJobRequest(
        job="gpt", scenario_yaml=(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text(),
        placement=pb.JobPlacement(hosts=["node-1", "node-2"]))).predicted_step_time_s
    # The cluster runs 25% slower than designed: calibration has something to fit (while the
    # job's parts are healthy); then a port degrades and one goes down, and the fit skips the job.
    sim = SimulatedCluster(srv.address, nodes=2, gpus_per_node=4, job="gpt", step_time_s=designed * 1.25)
    try:
        for i in range(6):
            time.sleep(0.15)
            if i == 4:
                cal = api.Calibrate(pb.CalibrateRequest())
                sim.set_port(0, 1, "degraded")
                sim.set_port(1, 2, "down")
            assert sim.push() == [MetricExportResult.SUCCESS] * 2
    finally:
        sim.shutdown()
    assert cal.adjustments and cal.calibration.compute_efficiency < 1.0
    assert all("observed" in a.reason for a in cal.adjustments)
    skipped = api.Calibrate(pb.CalibrateRequest())
    assert not skipped.adjustments and "not healthy" in skipped.skipped[0].reason
    before = snapshot(srv)
    assert before["predict"][2] == ["node-2/ib_port:mlx5_2/1"]

    srv.kill9()
    again = start_server("--calibrate-interval", "0", state_dir=state_dir)
    after = snapshot(again)
    assert after == before
    # And it keeps working from the restored state: the next fit starts from the restored factors.
    hist = again.api().GetCalibration(pb.GetCalibrationRequest()).history
    assert [h.seq for h in hist] == [a.seq for a in cal.adjustments]
