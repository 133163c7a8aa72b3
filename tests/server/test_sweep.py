"""Server-streaming sweeps: progress and rows as they complete; cancel and deadline stop the work."""

from __future__ import annotations

import copy
import json

import grpc
import pytest
from google.protobuf import struct_pb2

from twin.client import event_rows
from twin.engine import Engine
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.rpc.v1 import sweep_service_pb2_grpc as sw_grpc
from twin.rpc.v1 import twin_service_pb2 as t
from twin.server.services import DEADLINE_SLACK_S, stop_reason
from twin.sweep.sweep_spec import set_path
from twin.wire.convert import scenario_from_mapping

BASE = {"name": "base", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
        "plan": {"tp": 8, "pp": 4, "gbs": 256}}


def values(*xs) -> sw.ValueList:
    out = sw.ValueList()
    for x in xs:
        v = struct_pb2.Value()
        if isinstance(x, str):
            v.string_value = x
        else:
            v.number_value = x
        out.values.append(v)
    return out


def test_grid_sweep_streams_rows_progress_and_best(sweep_stub):
    spec = sw.SweepSpec(name="tp-pp", base=scenario_from_mapping(BASE), axes=[
        sw.SweepAxis(path="plan.tp", values=values(1, 2, 4, 8, 3)),
        sw.SweepAxis(path="plan.pp", range=sw.Range(start=1, stop=5, step=1))],
        objective=sw.SweepObjective(metric="step_time_s", top=3))
    events = list(sweep_stub.Sweep(sw.SweepRequest(spec=spec), timeout=60))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and "progress" in kinds
    assert events[0].started.total_points == 20 and list(events[0].started.axis_paths) == ["plan.tp", "plan.pp"]
    rows = [r for e in events for r in event_rows(e)]
    assert [r.index for r in rows] == list(range(20))  # inline: in point order
    errors = [r for r in rows if r.HasField("error")]
    # Infeasible points are counted by reason: a broken rule (INVALID_ARGUMENT naming the
    # plan field) or a plan that does not fit (FAILED_PRECONDITION naming memory).
    assert errors and all((r.error.code == "INVALID_ARGUMENT" and r.error.field.startswith("plan."))
                          or (r.error.code == "FAILED_PRECONDITION" and r.error.field == "memory") for r in errors)
    assert any(r.assignment.fields["plan.tp"].number_value == 3 for r in errors)  # tp=3 cannot divide 64 heads
    done = events[-1].finished
    assert done.done_points == 20 and done.failed_points == len(errors)
    best = [r.estimate.step_time_s for r in done.best]
    assert len(best) == 3 and best == sorted(best)
    ok_times = sorted(r.estimate.step_time_s for r in rows if r.HasField("estimate"))
    assert best == ok_times[:3]
    # Each row matches a local evaluation of the same point.
    engine = Engine(autoload=False)
    first = next(r for r in rows if r.HasField("estimate"))
    point = {k: int(v.number_value) for k, v in first.assignment.fields.items()}
    scenario = copy.deepcopy(BASE)
    for path, value in point.items():  # as the sweep engine applies a point to the base
        set_path(scenario, path.split("."), value, engine.catalog)
    local = engine.evaluate(engine.scenario(scenario), validate=False, report=False)
    assert first.estimate.step_time_s == local.step_time_s
    # The row is a whole estimate from the batch's own numbers (nothing is evaluated again).
    got = first.estimate
    assert got.breakdown.compute_s == local.breakdown.compute_s and got.breakdown.bubble_s == local.breakdown.bubble_s
    for dim, value in local.breakdown.exposed_comm_s.items():
        assert got.breakdown.exposed_comm_s[dim] == value, dim
    for dim, value in local.comm_issued_s.items():
        assert got.comm_issued_s[dim] == value, dim
    mem = local.memory.as_gib()
    assert (got.memory.total_gib, got.memory.weights_gib, got.memory.activations_gib, got.memory.fits) == (
        mem["total_gib"], mem["weights_gib"], mem["activations_gib"], local.memory.fits)
    assert (got.mfu, got.microbatches, got.dp, got.model_flops_per_step) == (
        local.mfu, local.microbatches, local.dp, local.model_flops_per_step)
    assert got.energy.total_j == local.energy.total_j and got.energy.gpu_busy_s == local.energy.gpu_busy_s


def test_zip_random_and_document_sweeps(sweep_stub):
    zipped = {"base": BASE, "mode": "zip", "keep_rows": False, "objective": {"metric": "mfu", "top": 2},
              "axes": [{"path": "plan.tp", "values": [2, 4, 8]},
                       {"path": "model.seq_len", "values": [2048, 4096, 8192]}]}
    events = list(sweep_stub.Sweep(sw.SweepRequest(spec_document=json.dumps(zipped)), timeout=60))
    assert not any(event_rows(e) for e in events)  # keep_rows false: progress and best only
    fin = events[-1].finished
    assert fin.done_points == 3 and fin.objective_metric == "mfu"
    assert fin.best[0].estimate.mfu >= fin.best[1].estimate.mfu
    assert fin.best[0].assignment.fields["model.seq_len"].number_value in (2048, 4096, 8192)
    rnd = {"base": BASE, "mode": "random", "axes": [
        {"path": "plan.mbs", "sample": {"choices": [1, 2], "n": 6, "seed": 7}},
        {"path": "cluster.scale_out.nic_gbps", "sample": {"low": 100.0, "high": 800.0, "n": 6, "seed": 7}}]}
    first = list(sweep_stub.Sweep(sw.SweepRequest(spec_document=json.dumps(rnd)), timeout=60))
    again = list(sweep_stub.Sweep(sw.SweepRequest(spec_document=json.dumps(rnd)), timeout=60))
    rows = [r for e in first for r in event_rows(e)]
    assert len(rows) == 6 and [r.assignment for r in rows] == [r.assignment for e in again for r in event_rows(e)]
    assert all(100 <= r.assignment.fields["cluster.scale_out.nic_gbps"].number_value <= 800 for r in rows)


@pytest.mark.parametrize(("spec", "field"), [
    ({"base": BASE, "axes": [{"path": "plan.tp"}]}, "spec.axes[0]"),
    ({"base": BASE, "axes": [{"path": "fabric.tp", "values": [1]}]}, "spec.axes[0].path"),
    ({"base": BASE, "mode": "diagonal"}, "spec.mode"),
    ({"base": BASE, "objective": {"metric": "vibes"}}, "spec.objective.metric"),
    ({"axes": []}, "spec.base"),
    ({"base": BASE, "axes": [{"path": "plan.tp", "range": {"start": 1, "stop": 9, "step": 0}}]},
     "spec.axes[0].range.step"),
    ({"base": BASE, "mode": "zip", "axes": [{"path": "plan.tp", "values": [1, 2]},
                                            {"path": "plan.pp", "values": [1]}]}, "spec.axes[1]"),
])
def test_bad_sweep_specs_name_the_field(sweep_stub, spec, field):
    from tests.server.test_errors import bad_field

    with pytest.raises(grpc.RpcError) as info:
        list(sweep_stub.Sweep(sw.SweepRequest(spec_document=json.dumps(spec)), timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(info.value) == field


# Rows are kept so that every feasible point is re-evaluated with the full model (~0.3 ms
# each): long enough for a cancel or a deadline to land mid-sweep on any machine.
# The deadline test's deadline (seconds): see test_deadline_stops_the_work for why this much.
DEADLINE_S = 5.0
BIG = {"base": BASE, "keep_rows": True, "axes": [
    {"path": "plan.gbs", "range": {"start": 256, "stop": 256 * 201, "step": 256}},
    {"path": "plan.mbs", "values": [1, 2]},
    {"path": "plan.recompute", "values": ["none", "selective", "full"]},
    {"path": "plan.pp", "values": [1, 2, 4, 5, 8, 10, 16, 20, 40, 80]}]}  # 12,000 points


def test_cancel_stops_the_work(server, sweep_stub):
    call = sweep_stub.Sweep(sw.SweepRequest(spec_document=json.dumps({**BIG, "name": "to-cancel"})), timeout=120)
    seen = 0
    for event in call:
        if event.HasField("started"):
            assert event.started.total_points == 12_000
        if event.HasField("progress") and event.progress.done_points > 0:
            seen = event.progress.done_points
            break
    call.cancel()
    rec = server.wait_log(lambda r: r.get("msg") == "sweep stopped" and r.get("sweep") == "to-cancel", timeout=10)
    assert rec["reason"] == "cancelled" and seen <= rec["done_points"] < 12_000


def test_python_client_sweep_and_early_close(server):
    from twin.client import TwinClient

    spec = {"name": "client", "base": BASE, "axes": [{"path": "plan.pp", "values": [1, 2, 4]}]}
    with TwinClient(server.address) as client:
        events = list(client.sweep(spec))
        assert events[-1].finished.done_points == 3
        stream = client.sweep({**BIG, "name": "client-cancel"})
        assert next(stream).started.total_points == 12_000
        stream.close()  # closing the iterator cancels the call
    rec = server.wait_log(lambda r: r.get("msg") == "sweep stopped" and r.get("sweep") == "client-cancel",
                          timeout=10)
    assert rec["reason"] == "cancelled" and rec["done_points"] < rec["total_points"] == 12_000


def test_stop_reason_counts_a_cancel_at_the_deadline_as_the_deadline():
    """The client's deadline timer fires before the server's (it started earlier), so its cancel can
    arrive with a little of the server's deadline left: that stop is the deadline's; one with more
    left is a cancel, and an error, a shutdown or a finish outrank both."""
    def reason(remaining_s, **kw):
        return stop_reason(**{"finished": False, "failed": "", "shutdown": False, **kw}, remaining_s=remaining_s)
    assert reason(-0.2) == reason(0.0) == reason(0.05) == reason(DEADLINE_SLACK_S) == "deadline"
    assert reason(DEADLINE_SLACK_S + 0.01) == reason(119.0) == reason(None) == "cancelled"
    assert reason(0.0, shutdown=True) == "shutdown"
    assert reason(0.0, failed="ValueError") == reason(119.0, failed="ValueError") == "ValueError"
    assert reason(0.0, finished=True) == reason(None, finished=True) == ""


def test_deadline_stops_the_work(start_server):
    """A deadline that passes while the sweep runs stops it: the server logs it stopped for the
    deadline, with fewer points done than the sweep has."""
    # 3,000,000 points with rows kept (the server's point limit raised for it): a minute of work
    # or more at the ~60,000 rows/s a 2-core machine streams, far more than the deadline on any
    # machine. The deadline must also land after the server has started the sweep: 0.7 s did
    # not on a loaded machine (the call could end before the handler read the request, and then
    # nothing runs or logs). The started event took up to about 1 s with four CPU-bound
    # processes beside the server; 5 s is that five times over.
    srv = start_server(env={"TWIN_LIMITS_MAX_SWEEP_POINTS": "3000000"})
    gbs = {"path": "plan.gbs", "range": {"start": 256, "stop": 256 * 100_001, "step": 256}}
    spec = {**BIG, "name": "deadline", "axes": [gbs, *BIG["axes"][1:3], {"path": "plan.pp", "values": [1, 2, 4, 5, 8]}]}
    kinds = []
    with grpc.insecure_channel(srv.address) as channel:
        stub = sw_grpc.SweepServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            for event in stub.Sweep(sw.SweepRequest(spec_document=json.dumps(spec)), timeout=DEADLINE_S):
                kinds.append(event.WhichOneof("event"))
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert kinds[:1] == ["started"] and "finished" not in kinds  # it ran, and did not finish
    # The stop lands within one row batch (4,096 points) of the deadline; the bound is for a loaded machine.
    rec = srv.wait_log(lambda r: r.get("msg") == "sweep stopped" and r.get("sweep") == "deadline", timeout=60)
    assert rec["reason"] == "deadline" and rec["done_points"] < rec["total_points"] == 3_000_000


def test_open_sweep_streams_do_not_starve_unary_calls_or_health(start_server):
    """Streams get a bounded share of the workers (issue 15, hole 4): with 3 workers at most 2
    streams; the next one is RESOURCE_EXHAUSTED at once, and Predict and Health still answer
    while the two streams sit unread."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from twin.rpc.v1 import sweep_service_pb2_grpc as swg
    from twin.rpc.v1 import twin_service_pb2_grpc as tsg

    srv = start_server(env={"TWIN_WORKERS": "3", "TWIN_LIMITS_MAX_SWEEP_STREAMS": "8"})
    ch = grpc.insecure_channel(srv.address)
    try:
        stub = swg.SweepServiceStub(ch)
        streams = [stub.Sweep(sw.SweepRequest(spec_document=json.dumps({**BIG, "name": f"hold-{i}"})), timeout=60)
                   for i in range(2)]
        for s in streams:
            assert next(s).started.total_points == 12_000       # both running, now left unread
        with pytest.raises(grpc.RpcError) as err:
            next(stub.Sweep(sw.SweepRequest(spec_document=json.dumps({**BIG, "name": "third"})), timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_sweep_streams" in err.value.details()
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        est = tsg.TwinServiceStub(ch).Predict(t.PredictRequest(scenario_document=json.dumps(BASE)), timeout=10)
        assert est.estimate.step_time_s > 0
        for s in streams:
            s.cancel()
    finally:
        ch.close()


def test_sigterm_past_the_grace_ends_a_sweep_with_a_final_event_and_exits(start_server):
    """Hole 8: with grace 2 s, a sweep still running at SIGTERM is stopped before the grace runs
    out, its stream ends with a Finished event saying "shutdown", and the process exits soon after."""
    import signal
    import time as _time

    from twin.rpc.v1 import sweep_service_pb2_grpc as swg

    srv = start_server(env={"TWIN_GRACE_S": "2", "TWIN_LIMITS_MAX_SWEEP_POINTS": "1000000"})
    # 900,000 points: ~10 s on a quiet 2-core machine (90,000 ran out in ~1 s there, before the
    # SIGTERM reached the sweep), so the sweep is still running when the signal lands.
    gbs = {"path": "plan.gbs", "range": {"start": 256, "stop": 256 * 30001, "step": 256}}
    spec = {**BIG, "name": "long", "axes": [gbs, *BIG["axes"][1:3], {"path": "plan.pp", "values": [1, 2, 4, 5, 8]}]}
    ch = grpc.insecure_channel(srv.address)
    try:
        stream = swg.SweepServiceStub(ch).Sweep(sw.SweepRequest(spec_document=json.dumps(spec)), timeout=120)
        assert next(stream).started.total_points == 900_000
        t0 = _time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        last = None
        for ev in stream:
            last = ev
        assert last is not None and last.WhichOneof("event") == "finished"
        assert last.finished.stopped == "shutdown" and last.finished.done_points < 900_000, \
            (last.finished.stopped, last.finished.done_points)
        assert srv.proc.wait(timeout=30) == 0
        assert _time.monotonic() - t0 < 10
    finally:
        ch.close()
