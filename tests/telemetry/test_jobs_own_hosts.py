"""Two jobs on one fabric, pushed by the real OpenTelemetry SDK exporters (issue 34, items 1-2).

Job A is placed by a selector on its exporters' ``k8s.job.name``, job B by an explicit host
list; a third host belongs to neither. Faults injected on A's hosts never move B's answer;
an XID 79 on A is an interruption with its goodput cost (not a slower step); a GPU of A at
56% clocks slows A's "now" step as a straggler (compute time / clock fraction); a NIC down
on A leaves its node 7 of 8 NICs (NCCL on the remaining rails).
"""

from __future__ import annotations

import dataclasses
import json
import time

import grpc
import pytest
from opentelemetry.sdk.metrics.export import MetricExportResult

from tests.telemetry.conftest import EXAMPLES, pb
from twin.core.conditions import Conditions, Impact
from twin.engine import Engine
from twin.telemetry.simulate import SimulatedCluster

SCENARIO = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()


def _push(sims: list[SimulatedCluster], times: int = 1) -> None:
    for _ in range(times):
        time.sleep(0.5)  # rates from counter deltas: see test_live.push
        for sim in sims:
            assert sim.push() == [MetricExportResult.SUCCESS] * len(sim.nodes)


def _b_answer(p: pb.PredictLiveResponse) -> tuple[object, ...]:
    return (p.now_step_time_s, p.designed_step_time_s, tuple(p.faults), tuple(p.down_components),
            tuple(p.degraded_components), p.now_calibration.SerializeToString(), p.interrupted)


def _now(engine: Engine, scn, compute: float = 1.0, scale_out: float = 1.0) -> float:
    cal = dataclasses.replace(scn.calibration, scale_out_bandwidth=scn.calibration.scale_out_bandwidth * scale_out)
    impact = Impact(compute=compute) if compute < 1.0 else None
    return engine.evaluate(scn, validate=False, report=False,
                           conditions=Conditions(calibration=cal, impact=impact)).step_time_s


def test_two_jobs_faults_on_a_never_move_b(start_server) -> None:
    srv = start_server("--calibrate-interval", "0")
    api = srv.api()
    a = api.RegisterJob(pb.RegisterJobRequest(job="A", scenario_yaml=SCENARIO, placement=pb.JobPlacement(
        selector={"k8s.job.name": "train-a"})), timeout=60)
    api.RegisterJob(pb.RegisterJobRequest(job="B", scenario_yaml=SCENARIO, placement=pb.JobPlacement(
        hosts=["b-2", "b-1"])), timeout=60)
    designed = a.predicted_step_time_s
    sa = SimulatedCluster(srv.address, nodes=2, job="A", step_time_s=designed, prefix="a-",
                          resource={"k8s.job.name": "train-a"})
    sb = SimulatedCluster(srv.address, nodes=2, job="B", step_time_s=designed, prefix="b-",
                          resource={"slurm.job.id": "4242"})
    sc = SimulatedCluster(srv.address, nodes=1, job="", prefix="c-")
    sims = [sa, sb, sc]
    engine = Engine(autoload=False)
    scn = engine.scenario(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml")
    try:
        _push(sims, 2)
        assert srv.state().unplaced_hosts == ["c-1"]  # shown, not guessed into a job
        pa, pb0 = api.PredictLive(pb.PredictLiveRequest(job="A")), api.PredictLive(pb.PredictLiveRequest(job="B"))
        assert list(pa.placement.ranked_hosts) == ["a-1", "a-2"] and "natural order" in pa.placement.ranked_by
        assert list(pb0.placement.ranked_hosts) == ["b-2", "b-1"]  # the listed order is the rank order
        assert pa.placement.parts > 0 and pa.placement.parts_outside > 0
        assert pa.now_step_time_s == pytest.approx(designed) and not pa.faults
        b_before = _b_answer(pb0)

        # XID 79 on A: an interruption and its goodput cost, not a doubled step.
        sa.set_gpu(0, 3, xid=79)
        _push(sims)
        pa = api.PredictLive(pb.PredictLiveRequest(job="A"))
        assert _b_answer(api.PredictLive(pb.PredictLiveRequest(job="B"))) == b_before
        assert pa.interrupted and pa.now_step_time_s == pytest.approx(designed, rel=1e-9)
        (fault,) = [f for f in pa.faults if f.consequence == "interruption"]
        assert fault.component == "a-1/gpu:3" and fault.evidence == "xid=79" and "XID" in fault.source
        assert (fault.node_rank, fault.gpu_rank) == (0, 3)  # a-1 is node 0 (natural order of the names)
        cost = fault.interruption
        # Half the 1 h fallback interval + detection 30 s + rescheduling 300 s + init 120 s + load.
        assert cost.lost_work_s == pytest.approx(1800.0)
        assert cost.restart_s > 450.0 and cost.cost_s == pytest.approx(cost.lost_work_s + cost.restart_s)
        assert cost.gpu_hours == pytest.approx(cost.cost_s * 1024 / 3600)
        assert pa.interruption_cost_s == pytest.approx(cost.cost_s)
        assert any(n.startswith("interruption: ") and "GPU-hours" in n for n in pa.notes)
        assert any("a-1/gpu:3: xid=79 -> interruption" in n for n in pa.notes)
        # The fit does not learn from A while its own GPU is gone; the reason is in A's answer.
        skipped = {j.job: j.reason for j in api.Calibrate(pb.CalibrateRequest()).skipped}
        assert skipped["A"] == "its own parts are not healthy: a-1/gpu:3"
        pa = api.PredictLive(pb.PredictLiveRequest(job="A"))
        assert pa.calibration_skipped == skipped["A"] and any(n.startswith("calibration: ") for n in pa.notes)
        assert api.GetCalibration(pb.GetCalibrationRequest()).calibration.compute_efficiency == 1.0
        sa.set_gpu(0, 3, xid=0)
        _push(sims, 3)  # recovery is confirmed after 3 assessments (telemetry.recover_after)
        assert not api.PredictLive(pb.PredictLiveRequest(job="A")).interrupted

        # A GPU of A at 56% clocks (HW slowdown): a straggler, compute time / clock fraction.
        sa.set_gpu(1, 5, clock=0.56, reasons=0x08)
        _push(sims)
        pa = api.PredictLive(pb.PredictLiveRequest(job="A"))
        assert _b_answer(api.PredictLive(pb.PredictLiveRequest(job="B"))) == b_before
        (slow,) = [f for f in pa.faults if f.consequence == "straggler"]
        frac = round(1980 * 0.56) / 1980
        assert slow.component == "a-2/gpu:5" and slow.factor == pytest.approx(frac)
        assert (slow.node_rank, slow.gpu_rank) == (1, 13)
        assert pa.now_step_time_s == pytest.approx(_now(engine, scn, compute=frac), rel=1e-9)
        now_bd = json.loads(pa.now_estimate_json)["breakdown"]
        designed_bd = json.loads(pa.designed_estimate_json)["breakdown"]
        # The math kernels run at the clock fraction; memory-bound ones follow the memory clock
        # (a few percent of compute here), so compute time is a little under compute / fraction.
        assert 0.95 * designed_bd["compute_s"] / frac < now_bd["compute_s"] <= designed_bd["compute_s"] / frac
        assert 1.3 < pa.now_step_time_s / designed < 1 / frac
        sa.set_gpu(1, 5, clock=1.0, reasons=0)
        _push(sims, 3)

        # A NIC of A down: its node runs on 7 of its 8 NICs.
        sa.set_port(0, 2, "down")
        _push(sims)
        pa = api.PredictLive(pb.PredictLiveRequest(job="A"))
        assert _b_answer(api.PredictLive(pb.PredictLiveRequest(job="B"))) == b_before
        (nic,) = [f for f in pa.faults if f.consequence == "bandwidth"]
        assert nic.component == "a-1/ib_port:mlx5_2/1" and nic.factor == pytest.approx(7 / 8)
        assert pa.now_calibration.scale_out_bandwidth == pytest.approx(7 / 8)
        assert pa.now_step_time_s == pytest.approx(_now(engine, scn, scale_out=7 / 8), rel=1e-9)
        assert pa.now_step_time_s > designed and not pa.interrupted
        assert pa.down_components == ["a-1/ib_port:mlx5_2/1"]
        tiers = {t.tier: t for t in pa.tiers}
        assert list(tiers["scale_out"].down) == ["a-1/ib_port:mlx5_2/1"]
        assert tiers["scale_out"].capacity_fraction == pytest.approx(7 / 8) and tiers["compute"].capacity_fraction == 1
        assert all(d.startswith("a-") for d in pa.down_components)
    finally:
        for sim in sims:
            sim.shutdown()


@pytest.mark.parametrize(("placement", "field"), [
    ({"selector": {"k8s.job": "x"}}, "placement.selector['k8s.job']"),
    ({"selector": {"host.name": "*"}}, "placement.selector['host.name']"),
    ({"selector": {"host.name": "gpu-[ab"}}, "placement.selector['host.name']"),
    ({"hosts": ["n1", "n1"]}, "placement.hosts[1]"),
    ({"hosts": ["n1"], "selector": {"host.name": "n*"}}, "placement"),
    ({"hosts": ["n1"], "rank_attribute": "slurm.node.rank"}, "placement.rank_attribute"),
    ({"selector": {"slurm.job.id": "7"}, "rank_attribute": "rank"}, "placement.rank_attribute"),
])
def test_bad_placement_is_refused_naming_the_field(start_server, placement, field) -> None:
    srv = start_server("--calibrate-interval", "0")
    api = srv.api()
    with pytest.raises(grpc.RpcError) as err:
        api.RegisterJob(pb.RegisterJobRequest(job="j", scenario_yaml=SCENARIO,
                                              placement=pb.JobPlacement(**placement)), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()
    assert api.GetLiveState(pb.GetLiveStateRequest(), timeout=30).ingest.requests == 0  # still serving


def test_a_host_that_changes_jobs_moves_with_its_attributes_and_survives_a_restart(tmp_path) -> None:
    """Placement attributes are kept on the components, follow the scheduler when a host is
    given to another job, and are stored: after a restart the job still owns the same parts.
    """
    from twin.telemetry.otlpbuild import request
    from twin.telemetry.service import TelemetryService
    from twin.telemetry.telemetry_config import TelemetryConfig

    def gpu_point(job: str) -> object:
        return request({"host.name": "h1", "k8s.job.name": job}, [
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", [({"gpu": "0"}, 0, time.time_ns(), 60.0)])])

    def open_service() -> TelemetryService:
        return TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))

    svc = open_service()
    try:
        svc.register_job("X", SCENARIO, {"selector": {"k8s.job.name": "x-*"}})
        svc.ingest(gpu_point("x-1"))
        assert svc.predict("X", basis="designed")["placement"]["parts"] == 1 and svc.unplaced_hosts() == []
        svc.ingest(gpu_point("y-1"))  # the scheduler gives h1 to another job
        assert svc.predict("X", basis="designed")["placement"]["parts"] == 0 and svc.unplaced_hosts() == ["h1"]
        svc.ingest(gpu_point("x-2"))
    finally:
        svc.close()
    again = open_service()
    try:
        out = again.predict("X", basis="designed")["placement"]
        assert out["parts"] == 1 and out["ranked_hosts"] == ["h1"] and out["selector"] == {"k8s.job.name": "x-*"}
        assert again.state.components["h1/gpu:0"].labels["k8s.job.name"] == "x-2"
    finally:
        again.close()


def test_standalone_job_hosts_must_name_a_job(tmp_path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "twin.telemetry.standalone", "--state-dir", str(tmp_path), "--port",
                          "0", "--job-hosts", "nojob=h1,h2"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "--job-hosts: no --job named 'nojob'" in out.stderr
