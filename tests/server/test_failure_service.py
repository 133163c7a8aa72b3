"""FailureService against the live server: the same figures as the library, errors by field."""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import EXAMPLES
from twin.engine import Engine
from twin.failure_analyzer import FailureAnalyzer
from twin.rpc.v1 import failure_service_pb2 as fpb
from twin.rpc.v1 import failure_service_pb2_grpc as fpbg
from twin.wire.convert import struct_to_dict

from .test_errors import bad_field, call_error


@pytest.fixture(scope="module")
def failure_stub(channel: grpc.Channel) -> fpbg.FailureServiceStub:
    return fpbg.FailureServiceStub(channel)


def test_figures_match_the_library_and_ranking_is_ordered(failure_stub):
    doc = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
    resp = failure_stub.EvaluateFailures(fpb.EvaluateFailuresRequest(scenario_document=doc, rank=True), timeout=60)
    local = FailureAnalyzer(Engine(autoload=False)).analyze(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml", rank=True)
    assert resp.mean_time_between_interruptions_h == pytest.approx(local.figures["mean_time_between_interruptions_h"])
    assert resp.effective_training_time_pct == pytest.approx(local.effective_training_time_pct)
    assert 0 < resp.effective_training_time_pct < 100
    costs = [r.expected_cost_h_per_day for r in resp.ranking]
    assert costs and costs == sorted(costs, reverse=True)
    assert resp.ranking[0].component == "gpu"
    report = struct_to_dict(resp.report)
    assert report["scenario"] == "gpt3-175b-dgx-h100-ib"


def test_injected_failure_and_bad_injection(failure_stub):
    doc = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
    resp = failure_stub.EvaluateFailures(
        fpb.EvaluateFailuresRequest(scenario_document=doc, inject=["straggler:fraction=0.5"]), timeout=60)
    assert struct_to_dict(resp.report)["injections"]
    err = call_error(failure_stub.EvaluateFailures,
                     fpb.EvaluateFailuresRequest(scenario_document=doc, inject=["meteor_strike"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_field(err).startswith("inject[0]")
