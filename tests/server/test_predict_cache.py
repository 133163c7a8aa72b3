"""A repeated Predict is answered from the server's cache, with the same answer, and only
an identical request (same scenario, same report switch) is a repeat."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from twin.engine import Engine
from twin.rpc.v1 import twin_service_pb2 as t
from twin.rpc.v1 import twin_service_pb2_grpc as t_grpc
from twin.server import grpc_app, guard
from twin.server.server_config import ServerConfig
from twin.wire.convert import scenario_from_mapping

ONE = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
       "plan": {"tp": 4, "pp": 4, "vp": 5, "gbs": 1024}}
threads: list[str] = []  # the thread each evaluation ran on
TOO_BIG = {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-405b", "plan": {"tp": 8, "gbs": 8}}


def _serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: int) -> Iterator[tuple[Any, list[str]]]:
    evaluated: list[str] = []
    real = guard.evaluate
    threads.clear()

    def counting(engine: Engine, scenario: Any, *, report: bool = True) -> Any:
        evaluated.append(scenario.name)
        threads.append(threading.current_thread().name)
        return real(engine, scenario, report=report)

    monkeypatch.setattr(guard, "evaluate", counting)
    running = grpc_app.build_server(ServerConfig(port=0, state_dir=str(tmp_path / "state"), plugins_autoload=False,
                                            grace_s=1.0, scenario_cache=cache), Engine(autoload=False))
    grpc_app.start(running)
    try:
        with grpc.insecure_channel(running.address) as channel:
            yield t_grpc.TwinServiceStub(channel), evaluated
    finally:
        grpc_app.stop(running)


@pytest.fixture
def cached(tmp_path, monkeypatch):
    yield from _serve(tmp_path, monkeypatch, 1024)


def predict(stub: Any, mapping: dict[str, Any], **kw: Any) -> t.PredictResponse:
    return stub.Predict(t.PredictRequest(scenario=scenario_from_mapping(mapping), **kw), timeout=30)


def test_predict_runs_on_the_model_pool(cached):
    stub, _ = cached
    predict(stub, ONE)
    assert len(threads) == 1 and threads[0].startswith("twin-model")  # limits.model_workers' pool


def test_a_repeated_predict_is_evaluated_once_and_answered_the_same(cached):
    stub, evaluated = cached
    first, second = predict(stub, ONE), predict(stub, ONE)
    assert len(evaluated) == 1
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(deterministic=True)
    assert first.estimate.fabric.fields  # the full answer, report included


def test_the_report_switch_and_the_scenario_are_part_of_the_key(cached):
    stub, evaluated = cached
    full = predict(stub, ONE)
    lean = predict(stub, ONE, omit_fabric_report=True)
    assert full.estimate.fabric.fields and not lean.estimate.fabric.fields
    renamed = predict(stub, {**ONE, "name": "other"})
    assert renamed.estimate.scenario_name == "other" and full.estimate.scenario_name != "other"
    bigger = predict(stub, {**ONE, "plan": {**ONE["plan"], "gbs": 2048}})
    assert bigger.estimate.step_time_s > full.estimate.step_time_s
    assert len(evaluated) == 4
    predict(stub, ONE, omit_fabric_report=True)
    assert len(evaluated) == 4


def test_require_fit_is_checked_on_a_cached_answer_too(cached):
    stub, evaluated = cached
    assert predict(stub, TOO_BIG).estimate.memory.fits is False
    with pytest.raises(grpc.RpcError) as err:
        predict(stub, TOO_BIG, require_fit=True)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and len(evaluated) == 1


def test_with_the_cache_off_every_call_evaluates(tmp_path, monkeypatch):
    for stub, evaluated in _serve(tmp_path, monkeypatch, 0):
        predict(stub, ONE), predict(stub, ONE)
        assert len(evaluated) == 2
