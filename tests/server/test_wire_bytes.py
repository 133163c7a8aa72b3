"""The serving path's wire messages are byte for byte what the generic path built: the
estimate filled field by field (``convert.estimate_to_message``, in place in the response)
and ``details`` walked once (``convert.struct_from_data``) against the constructor-built
message and protobuf's Struct.update, over every example and every preset model x system."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import pytest
from google.protobuf import struct_pb2

from twin.core.errors import InfeasibleError, SpecError, TooLargeError
from twin.core.estimate import Estimate
from twin.core.schema import freeze
from twin.core.units import GIB
from twin.rpc.v1 import estimate_pb2, twin_service_pb2
from twin.server import guard
from twin.wire import convert

from .wire_corpus import scenarios


def reference_message(est: Estimate, *, fabric: bool = True) -> estimate_pb2.Estimate:
    """The estimate message as one constructor call built it before the field-by-field version
    (the oracle: kept here unchanged so the fast path has something independent to match)."""
    bd, mem = est.breakdown, est.memory
    msg = estimate_pb2.Estimate(
        scenario_name=est.scenario, step_time_s=est.step_time_s,
        breakdown=estimate_pb2.StepBreakdown(
            compute_s=bd.compute_s, recompute_s=bd.recompute_s, exposed_comm_s=bd.exposed_comm_s,
            bubble_s=bd.bubble_s, optimizer_s=bd.optimizer_s, offload_s=bd.offload_s,
            overlap_interference_s=bd.overlap_interference_s, total_s=bd.total_s),
        memory=estimate_pb2.MemoryPerGpu(**mem.as_gib(), offload_capacity_gib=mem.pool_capacity / GIB, fits=mem.fits),
        tokens_per_s=est.tokens_per_s, tokens_per_s_per_gpu=est.tokens_per_s_per_gpu,
        model_tflops_per_gpu=est.model_tflops_per_gpu, mfu=est.mfu, mfu_at_precision_peak=est.mfu_at_precision_peak,
        model_flops_per_step=est.model_flops_per_step, microbatches=est.microbatches, dp=est.dp,
        comm_issued_s=est.comm_issued_s, bytes_per_step=est.bytes_per_step, algorithms=est.algorithms,
        notes=est.notes,
        links=[estimate_pb2.LinkLoad(tier=link.tier, name=link.name, capacity_GBps=link.capacity_GBps,
                                     utilisation=link.utilisation, stretch=link.stretch) for link in est.links],
        contention_s=est.contention_s)
    if est.energy is not None:
        msg.energy.CopyFrom(estimate_pb2.StepEnergy(**{f.name: getattr(est.energy, f.name)
                                                       for f in dataclasses.fields(est.energy)}))
    if est.cost is not None:
        msg.cost.CopyFrom(estimate_pb2.StepCost(**{f.name: getattr(est.cost, f.name)
                                                   for f in dataclasses.fields(est.cost)}))
    if est.interval is not None:
        msg.interval.CopyFrom(estimate_pb2.StepInterval(**{f.name: getattr(est.interval, f.name)
                                                           for f in dataclasses.fields(est.interval)}))
    if fabric and est.fabric:
        convert.dict_to_struct(est.fabric, msg.fabric)
    if est.details:
        convert.dict_to_struct(est.details, msg.details)
    return msg


def _estimates(engine: Any) -> list[tuple[str, Estimate]]:
    out = []
    for label, mapping in scenarios(engine):
        # A preset pair the rules refuse is simply not in the set.
        with contextlib.suppress(SpecError, InfeasibleError, TooLargeError):
            out.append((label, guard.evaluate(engine, engine.scenario(mapping), report=True)))
    return out


@pytest.fixture(scope="module")
def estimates(engine: Any) -> list[tuple[str, Estimate]]:
    out = _estimates(engine)
    assert len(out) > 40  # the corpus really covers the examples and many preset pairs
    return out


def _bytes(msg: Any) -> bytes:
    return msg.SerializeToString(deterministic=True)


@pytest.mark.parametrize("fabric", [True, False])
def test_predict_response_bytes_match_the_constructor_built_message(estimates, fabric):
    for label, est in estimates:
        want = _bytes(twin_service_pb2.PredictResponse(estimate=reference_message(est, fabric=fabric)))
        response = twin_service_pb2.PredictResponse()
        convert.estimate_to_message(est, fabric=fabric, out=response.estimate)
        assert _bytes(response) == want, label
        assert _bytes(convert.estimate_to_message(est, fabric=fabric)) == _bytes(reference_message(est, fabric=fabric))


def test_the_corpus_exercises_every_part_of_the_message(estimates):
    # Each optional part is set by some scenario, so the byte checks above cover it.
    assert any(est.energy is not None for _, est in estimates)
    assert any(est.cost is not None for _, est in estimates)
    assert any(est.details for _, est in estimates) and any(est.links for _, est in estimates)
    assert any(est.notes for _, est in estimates) and any(est.fabric for _, est in estimates)
    assert any(est.interval is not None for _, est in estimates)


def test_an_empty_estimate_is_still_present_in_the_response(estimates):
    est = dataclasses.replace(estimates[0][1], scenario="", details={}, fabric={}, links=(), notes=())
    response = twin_service_pb2.PredictResponse()
    convert.estimate_to_message(est, out=response.estimate)
    assert response.HasField("estimate")
    assert _bytes(response) == _bytes(twin_service_pb2.PredictResponse(estimate=reference_message(est)))


@dataclasses.dataclass
class _Point:
    x: int
    y: tuple[int, ...]


@pytest.mark.parametrize("data", [
    {"a": 1, "b": 1.5, "c": True, "d": None, "e": "s", "f": [1, "x", None, [2, {}]], "g": {}, "h": []},
    {"nested": {"deeper": {"list": [{"k": False}, (1, 2)]}}},
    {"big": 2**60, "huge": 2**1100, "neg": -(2**53)},  # past a double's integers: to_jsonable's rules
    {"point": _Point(1, (2, 3)), "set": {1}},  # dataclasses and sets: the general path
    {1: "non-string key"},
    freeze({"frozen": {"list": [1, 2]}}),
])
def test_struct_from_data_matches_dict_to_struct(data):
    assert _bytes(convert.struct_from_data(data, struct_pb2.Struct())) == _bytes(convert.dict_to_struct(data))


def test_a_changed_plain_fabric_report_is_encoded_anew():
    # A plain dict (not the core's read-only report) may change between calls: never served stale.
    report: dict[str, Any] = {"tiers": [{"name": "a"}]}
    first = convert._cached_struct_bytes(report)
    report["tiers"][0]["name"] = "b"
    assert convert._cached_struct_bytes(report) != first
    assert convert._cached_struct_bytes(report) == convert.dict_to_struct(report).SerializeToString()


def test_the_frozen_report_is_cached_by_identity():
    report = freeze({"tiers": [{"name": "a", "span_gpus": 8}]})
    assert convert._cached_struct_bytes(report) == convert.dict_to_struct(report).SerializeToString()
    assert convert._STRUCT_CACHE[id(report)][0] is report  # keyed by the object, which the entry holds
    twin = freeze({"tiers": [{"name": "a", "span_gpus": 8}]})
    assert convert._cached_struct_bytes(twin) == convert._cached_struct_bytes(report)


def test_every_corpus_scenario_reads_back_from_the_wire_as_the_same_scenario(engine):
    # scenario_to_mapping reads fields by a per-message plan: every kind of field it meets
    # (maps of messages, enums, lists, Structs) must come back as the file gave it.
    checked = 0
    for label, mapping in scenarios(engine):
        try:
            want = engine.scenario(mapping)
        except SpecError:  # a preset pair the rules refuse
            continue
        assert engine.scenario(convert.scenario_to_mapping(convert.scenario_from_mapping(mapping))) == want, label
        checked += 1
    assert checked > 40
