"""Calibration that cannot learn a mistake (issue 34, item 3).

A synthetic job whose true compute efficiency is 0.9 of the twin's reports its steps; for
part of the run one of its GPUs is throttled to 56% clocks (its steps slow down). The fit
converges within 3% of 0.9, does not move while the fault lasts (the job's own parts are not
healthy: skipped, with the reason), and never leaves its bounds (no compute factor above the
SKU's measured ceiling, 1 / sustained).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tests.telemetry.conftest import EXAMPLES
from twin.core.conditions import Conditions, Impact
from twin.core.fault_kinds import Part, classify
from twin.core.specs import Calibration
from twin.engine import Engine
from twin.telemetry import live_predict
from twin.telemetry import service as service_module
from twin.telemetry.otlpbuild import request
from twin.telemetry.service import TelemetryService
from twin.telemetry.telemetry_config import TelemetryConfig

SCENARIO = EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"
HOSTS = ("s-1", "s-2")
TRUTH = 0.9


def _service(tmp_path: Path) -> TelemetryService:
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    svc.register_job("syn", SCENARIO.read_text(), {"hosts": list(HOSTS)})
    return svc


def _true_step(svc: TelemetryService, clock: float = 1.0) -> float:
    """The synthetic job's real step: compute efficiency 0.9 of the twin's, one GPU at ``clock``."""
    scn = svc.jobs["syn"]
    cal = dataclasses.replace(scn.calibration, compute_efficiency=scn.calibration.compute_efficiency * TRUTH)
    impact = Impact(compute=clock) if clock < 1.0 else None
    return svc.engine.evaluate(scn, validate=False, report=False,
                               conditions=Conditions(calibration=cal, impact=impact)).step_time_s


def _report(svc: TelemetryService, step_s: float, clock: float = 1.0, reasons: int = 0, steps: int = 3) -> None:
    """One exporter interval: every GPU's clock and reasons (GPU 0 of s-1 at ``clock``), then the steps."""
    for host in HOSTS:
        t = time.time_ns()
        slow = clock if host == "s-1" else 1.0
        svc.ingest(request({"host.name": host}, [
            ("DCGM_FI_DEV_SM_CLOCK", "gauge", [({"gpu": str(g)}, 0, t, round(1980 * (slow if g == 0 else 1.0)))
                                               for g in range(8)]),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", [({"gpu": str(g)}, 0, t, reasons if g == 0 and
                                                            host == "s-1" else 0) for g in range(8)])]))
    for _ in range(steps):
        svc.ingest(request({}, [("twin.training.step_time", "gauge", [({"job": "syn"}, 0, time.time_ns(), step_s)])]))


def test_converges_to_the_true_efficiency_and_holds_still_during_a_fault(tmp_path) -> None:
    svc = _service(tmp_path)
    try:
        healthy, throttled = _true_step(svc), _true_step(svc, 1109 / 1980)
        ceiling = live_predict.compute_ceiling(svc.jobs["syn"])
        assert throttled > 1.3 * healthy
        trace = []
        for r in range(24):
            fault = 6 <= r < 14
            _report(svc, throttled if fault else healthy, 0.56 if fault else 1.0, 0x08 if fault else 0)
            out = svc.calibrate()
            skipped = {s["job"]: s["reason"] for s in out["skipped"]}
            trace.append((r, fault, svc.calibration.compute_efficiency, skipped))
        factors = [c for _, _, c, _ in trace]
        # Never out of bounds: [min_factor, the SKU's measured ceiling] (H100: 1 / 0.78 sustained).
        assert ceiling == pytest.approx(1 / 0.78)
        assert all(0.25 <= c <= ceiling for c in factors), factors
        # Before the fault it has learned 0.9 already (one Gauss-Newton step, then the deadband).
        assert factors[5] == pytest.approx(TRUTH, rel=0.03)
        # While the fault lasts (and until the GPU's recovery is confirmed) it does not move.
        during = [c for r, fault, c, skipped in trace if fault]
        assert during == [factors[5]] * len(during)
        for r, fault, _, skipped in trace:
            if fault:
                assert "its own parts are not healthy: s-1/gpu:0" in skipped["syn"], (r, skipped)
        # After the recovery is confirmed (3 assessments) the job is learned from again.
        assert trace[-1][3] == {} and svc.calibration_state()["skipped"] == []
        assert abs(factors[-1] / TRUTH - 1) < 0.03, factors
        assert svc.predict("syn", basis="now")["calibration_skipped"] == ""
    finally:
        svc.close()


def test_skip_reason_is_in_the_live_answer_while_the_fault_lasts(tmp_path) -> None:
    svc = _service(tmp_path)
    try:
        _report(svc, _true_step(svc, 0.56), 0.56, 0x08)
        before = svc.calibration
        out = svc.calibrate()
        assert svc.calibration == before and not out["adjustments"]
        reason = svc.predict("syn", basis="now")["calibration_skipped"]
        assert reason.startswith("its own parts are not healthy: s-1/gpu:0")
        assert svc.calibration_state()["skipped"] == [{"job": "syn", "reason": reason}]
        svc.register_job("nowhere", SCENARIO.read_text())
        svc.calibrate()
        assert "placement unknown" in dict((s["job"], s["reason"]) for s in svc.calibration_state()["skipped"])[
            "nowhere"]
    finally:
        svc.close()


def test_an_impossibly_fast_job_stops_at_the_ceiling(tmp_path) -> None:
    """Steps at half the twin's: the compute factor rises 10% per update to 1 / sustained, never past."""
    svc = _service(tmp_path)
    try:
        ceiling = live_predict.compute_ceiling(svc.jobs["syn"])
        fast = 0.5 * _true_step(svc) * TRUTH
        made = []
        for _ in range(8):
            _report(svc, fast)
            made += svc.calibrate()["adjustments"]
        factors = [a["new"] for a in made if a["factor"] == "compute_efficiency"]
        assert max(factors) == pytest.approx(ceiling) and all(f <= ceiling for f in factors)
        assert "held at its bound" in made[-1]["reason"] or any("held at its bound" in a["reason"] for a in made)
    finally:
        svc.close()


def test_a_factor_learned_before_the_bound_existed_is_brought_back(tmp_path) -> None:
    """The 1.46 that a9e9bbe learned from a mis-priced fault is clamped to the ceiling at the next fit."""
    svc = _service(tmp_path)
    try:
        svc.calibration = Calibration(compute_efficiency=1.46, source="live telemetry fit")
        _report(svc, _true_step(svc))
        out = svc.calibrate()
        assert svc.calibration.compute_efficiency <= live_predict.compute_ceiling(svc.jobs["syn"])
        assert any("outside its physical bounds" in a["reason"] for a in out["adjustments"])
    finally:
        svc.close()


@pytest.mark.parametrize(("kind", "signal", "value", "consequence"), [
    ("gpu", "xid", 79.0, "interruption"), ("gpu", "xid", 48.0, "interruption"), ("gpu", "xid", 13.0, "interruption"),
    ("gpu", "xid", 63.0, "none"), ("gpu", "xid", 64.0, "none"), ("gpu", "ecc_dbe_per_s", 0.1, "interruption"),
    ("gpu", "clock_event_reasons", 0x08, "straggler"), ("gpu", "clock_event_reasons", 0x04, "none"),
    ("ib_port", "state", 1.0, "bandwidth"), ("roce_port", "paused_fraction", 0.4, "bandwidth"),
    ("transceiver", "rx_power_dbm", -9.0, "none"),
])
def test_the_fault_table_by_kind(kind, signal, value, consequence) -> None:
    tier = {"gpu": "compute", "transceiver": "scale_out"}.get(kind, "scale_out")
    (fault,) = classify(Part("h/x", kind, "h", tier, "degraded", 1.0, {signal: value}, ((signal, value, "degraded"),)))
    assert fault.consequence == consequence and fault.source
    assert fault.restart_in_place == (signal == "xid" and value == 13.0)


def test_jobs_on_one_placement_share_one_pass_over_the_parts(tmp_path, monkeypatch) -> None:
    """Every job registered without a placement sees every part: their live conditions are one
    pass over the parts, not one per job (a read of 1,000 such jobs over 50,000 parts took seconds
    under the ingest lock). A placed job gets its own."""
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    for i in range(6):
        svc.register_job(f"open{i}", SCENARIO.read_text())
    svc.register_job("placed", SCENARIO.read_text(), {"hosts": list(HOSTS)})
    calls, indexed = [], []
    real_live, real_index = service_module.job_live, service_module.index_parts
    monkeypatch.setattr(service_module, "job_live", lambda parts, outside, place, scn: calls.append(place)
                        or real_live(parts, outside, place, scn))
    monkeypatch.setattr(service_module, "index_parts", lambda comps: indexed.append(1) or real_index(comps))
    _jobs, _obs, _fitted, lives, _key = svc._inputs()
    assert len(calls) == 2 and calls.count(None) == 1 and len(indexed) == 1
    assert lives["open0"] is lives["open5"] and lives["placed"] is not lives["open0"]
    assert lives["placed"].placement_known and not lives["open3"].placement_known
    # Read again with no component changed: no pass at all (the fuzz's reads slowed it 2.6x),
    # and each distinct JobLive's key is computed once, not once per job.
    keyed = []
    real_key = service_module.JobLive.key
    monkeypatch.setattr(service_module.JobLive, "key", lambda self: keyed.append(self) or real_key(self))
    again = svc._inputs()[3]
    assert len(calls) == 2 and len(indexed) == 1 and again["placed"] is lives["placed"]
    assert len(keyed) == 2
    # A point that changes a part: one index and a pass per placement again, with the new state.
    svc.ingest(request({"host.name": HOSTS[0]}, [("node_infiniband_state_id", "gauge",
                                                  [({"device": "mlx5_0", "port": "1"}, 0, time.time_ns(), 1.0)])]))
    moved = svc._inputs()[3]
    assert len(calls) == 4 and len(indexed) == 2 and moved["placed"] is not lives["placed"]
    assert moved["placed"].key() != lives["placed"].key()


def test_divergence_evaluates_again_only_the_jobs_whose_own_inputs_moved(tmp_path, monkeypatch) -> None:
    """A fault on one job's host re-evaluates that job, not every registered one (with 1,000
    jobs each /metrics scrape and GetDivergence re-evaluated all of them), and the rows are
    the ones a full evaluation gives."""
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0))
    for host in HOSTS:
        svc.register_job(f"on-{host}", SCENARIO.read_text(), {"hosts": [host]})
    t = time.time_ns()
    for host in HOSTS:
        svc.ingest(request({"host.name": host}, [("node_infiniband_state_id", "gauge",
                                                  [({"device": "mlx5_0", "port": "1"}, 0, t, 4.0)])]))
    evaluated = []
    real_views = live_predict.job_views
    monkeypatch.setattr(live_predict, "job_views", lambda engine, jobs, *rest: evaluated.append(sorted(jobs))
                        or real_views(engine, jobs, *rest))
    first = svc.divergence()
    assert evaluated == [["on-s-1", "on-s-2"]]
    svc.ingest(request({"host.name": "s-2"}, [("node_infiniband_state_id", "gauge",
                                               [({"device": "mlx5_0", "port": "1"}, 0, time.time_ns(), 1.0)])]))
    second = svc.divergence()
    assert evaluated[1:] == [["on-s-2"]]  # s-1's job is untouched
    jobs, obs, fitted, lives, _key = svc._inputs()
    assert second == [v.to_dict() for v in real_views(svc.engine, jobs, obs, fitted, lives)]
    assert second[0] == first[0] and second[1]["predicted_now_s"] > first[1]["predicted_now_s"]
    svc.close()
