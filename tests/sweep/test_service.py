"""This engine as the gRPC Sweep runner: a real in-process server, real stubs."""

from __future__ import annotations

import json
import logging
import time

import grpc
import pytest

from twin.client import event_rows
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.rpc.v1 import sweep_service_pb2_grpc as sw_grpc
from twin.server import extensions, grpc_app
from twin.server.server_config import ServerConfig
from twin.server.sweep_engine import EngineRunner
from twin.server.sweep_events import Finished, Progress, Row, RowBlock, Started

BASE = {"name": "base", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
        "plan": {"tp": 8, "pp": 4, "gbs": 256}}
GRID = {"name": "tp-pp", "base": BASE, "objective": {"metric": "step_time_s", "top": 3},
        "axes": [{"path": "plan.tp", "values": [1, 2, 4, 8, 3]}, {"path": "plan.pp", "range": {"start": 1, "stop": 5}}]}
# ~500k points: tens of seconds inline, so a cancel lands mid-sweep
BIG = {"name": "big", "base": BASE, "keep_rows": False, "axes": [
    {"path": "plan.gbs", "range": {"start": 256, "stop": 256 * 401, "step": 256}},
    {"path": "plan.mbs", "values": [1, 2]}, {"path": "plan.recompute", "values": ["none", "selective", "full"]},
    {"path": "plan.vp", "values": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}, {"path": "plan.tp", "values": [1, 2, 4, 8]},
    {"path": "plan.pp", "values": [1, 2, 4, 8, 16]}, {"path": "plan.cp", "values": [1, 2]}]}


def test_runner_events_follow_the_server_contract(engine):
    runner = EngineRunner(engine, max_points=100_000)
    events = list(runner(GRID, lambda: False))
    assert isinstance(events[0], Started) and events[0].total == 20
    assert events[0].axis_paths == ("plan.tp", "plan.pp")
    blocks = [e for e in events if isinstance(e, RowBlock)]  # kept rows come as blocks of a batch's rows
    assert blocks and not any(isinstance(e, Row) for e in events)
    rows = [r for b in blocks for r in b.rows()]
    assert sorted(r.index for r in rows) == list(range(20))          # keep_rows: the server's default
    bad = [r for r in rows if r.error is not None]
    # a broken rule is a SpecError naming the field; out of memory is InfeasibleError (FAILED_PRECONDITION)
    assert {type(r.error).__name__ for r in bad} == {"SpecError", "InfeasibleError"}
    assert all(r.error.field.startswith("plan.") for r in bad if type(r.error).__name__ == "SpecError")
    assert any(r.assignment["plan.tp"] == 3 and r.error.field == "plan.tp" for r in bad)
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.done == 20 and fin.failed == len(bad) and fin.stopped == ""
    assert [r.estimate.step_time_s for r in fin.best] == sorted(r.estimate.step_time_s for r in fin.best)
    ok = sorted(r.estimate.step_time_s for r in rows if r.estimate is not None)
    assert [r.estimate.step_time_s for r in fin.best] == ok[:3]
    first = next(r for r in rows if r.estimate is not None)
    local = engine.evaluate({**BASE, "plan": {**BASE["plan"], "tp": first.assignment["plan.tp"],
                                               "pp": first.assignment["plan.pp"]}})
    assert first.estimate.step_time_s == local.step_time_s
    assert any(isinstance(e, Progress) for e in events)


def test_runner_stops_when_asked(engine):
    runner = EngineRunner(engine, max_points=10_000_000)
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    events = list(runner(BIG, should_stop))
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.stopped == "cancelled" and fin.done < events[0].total


def test_bad_spec_names_the_field_like_the_server(engine):
    from twin.core.errors import SpecError, TooLargeError

    runner = EngineRunner(engine, max_points=1000)
    with pytest.raises(SpecError) as err:
        next(runner({"base": BASE, "axes": [{"path": "fabric.tp", "values": [1]}]}, lambda: False))
    assert err.value.field == "spec.axes[0].path"
    with pytest.raises(TooLargeError) as big:
        next(runner(BIG, lambda: False))
    assert big.value.field == "spec.axes"


@pytest.fixture
def served(tmp_path, engine, monkeypatch):
    """An in-process server whose Sweep RPC runs on this engine (inline)."""
    runner = EngineRunner(engine, max_points=10_000_000, executor="inline")

    def install(server, ctx) -> None:
        ctx.sweep_runner = runner
        ctx.on_shutdown.append(runner.close)

    monkeypatch.setattr(extensions, "EXTENSIONS", [*extensions.EXTENSIONS, install])
    cfg = ServerConfig(port=0, state_dir=str(tmp_path / "state"), plugins_autoload=False, grace_s=1.0, workers=4)
    running = grpc_app.build_server(cfg, engine)
    grpc_app.start(running)
    channel = grpc.insecure_channel(running.address)
    yield sw_grpc.SweepServiceStub(channel)
    channel.close()
    grpc_app.stop(running)


def test_grpc_sweep_streams_from_this_engine(served):
    events = list(served.Sweep(sw.SweepRequest(spec_document=json.dumps(GRID)), timeout=60))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and "progress" in kinds
    rows = [r for e in events for r in event_rows(e)]
    assert sorted(r.index for r in rows) == list(range(20))
    errors = [r for r in rows if r.HasField("error")]
    assert {r.error.code for r in errors} == {"INVALID_ARGUMENT", "FAILED_PRECONDITION"}
    assert all(r.error.field == "memory" for r in errors if r.error.code == "FAILED_PRECONDITION")
    best = [r.estimate.step_time_s for r in events[-1].finished.best]
    assert len(best) == 3 and best == sorted(best)


def stopped_record(caplog, name: str, timeout: float = 20.0) -> logging.LogRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in caplog.records:
            if rec.getMessage() == "sweep stopped" and getattr(rec, "sweep", None) == name:
                return rec
        time.sleep(0.05)
    raise AssertionError(f"no 'sweep stopped' log for {name}")


def test_grpc_cancel_stops_the_sweep(served, caplog):
    caplog.set_level(logging.INFO, logger="twin.server")
    call = served.Sweep(sw.SweepRequest(spec_document=json.dumps(BIG)), timeout=120)
    total = seen = 0
    for event in call:
        if event.HasField("started"):
            total = event.started.total_points
        if event.HasField("progress") and event.progress.done_points > 0:
            seen = event.progress.done_points
            break
    call.cancel()
    rec = stopped_record(caplog, "big")
    assert rec.reason == "cancelled" and 0 < seen <= rec.done_points < total == 400 * 2 * 3 * 10 * 4 * 5 * 2
