"""Property tests: invariants that must hold for any valid scenario."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.core.errors import TwinError

SYSTEMS = ["DGX-A100", "DGX-H100", "DGX-B200", "GB200-NVL72", "Meta-RoCE-H100"]
MODELS = ["llama3.1-8b", "llama3.1-70b", "gpt3-175b", "mixtral-8x7b"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def scenarios(draw):
    system = draw(st.sampled_from(SYSTEMS))
    model = draw(st.sampled_from(MODELS))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    nodes = draw(st.sampled_from([2, 4, 8, 16]))
    per_node = 4 if "NVL72" in system else 8
    n = nodes * per_node
    if n % (tp * pp):
        tp = 1
    dp = n // (tp * pp)
    mbs = draw(st.sampled_from([1, 2]))
    gbs = dp * mbs * draw(st.sampled_from([1, 4, 16]))
    ep = draw(st.sampled_from([1, 2, 8])) if model == "mixtral-8x7b" else 1
    plan = {"tp": tp, "pp": pp, "mbs": mbs, "gbs": gbs, "ep": ep,
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
            "optimizer_sharding": draw(st.sampled_from(["none", "distributed_optimizer", "zero3"]))}
    return {"cluster": {"system": system, "num_gpus": n}, "model": model, "plan": plan}


def _evaluate(engine, data):
    try:
        scn = engine.scenario(data)
    except TwinError:
        return None, None
    return scn, engine.evaluate(scn, validate=False)


@SETTINGS
@given(data=scenarios(), factor=st.sampled_from([1.5, 2.0, 4.0]))
def test_more_bandwidth_never_slows_a_step(engine, data, factor):
    scn, est = _evaluate(engine, data)
    if scn is None:
        return
    c = scn.cluster
    faster_up = dataclasses.replace(c.scale_up, link_GBps=(c.scale_up.link_GBps or c.gpu.nvlink_GBps) * factor)
    faster_out = dataclasses.replace(c.scale_out, nic_gbps=c.scale_out.nic_gbps * factor)
    for cluster in (dataclasses.replace(c, scale_up=faster_up), dataclasses.replace(c, scale_out=faster_out)):
        fast = engine.evaluate(dataclasses.replace(scn, cluster=cluster), validate=False)
        assert fast.step_time_s <= est.step_time_s * (1 + 1e-9)


@SETTINGS
@given(data=scenarios())
def test_memory_is_monotone_in_micro_batch(engine, data):
    scn, est = _evaluate(engine, data)
    if scn is None:
        return
    bigger = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, mbs=scn.plan.mbs * 2,
                                                               gbs=scn.plan.gbs * 2))
    est2 = engine.evaluate(bigger, validate=False)
    assert est2.memory.activations >= est.memory.activations
    assert est2.memory.total >= est.memory.total


@SETTINGS
@given(data=scenarios())
def test_breakdown_adds_up_and_is_non_negative(engine, data):
    scn, est = _evaluate(engine, data)
    if scn is None:
        return
    bd = est.breakdown
    assert abs(bd.total_s - est.step_time_s) <= 1e-9 * est.step_time_s
    parts = [bd.compute_s, bd.recompute_s, bd.bubble_s, bd.optimizer_s, bd.offload_s,
             bd.overlap_interference_s, *bd.exposed_comm_s.values()]
    assert all(p >= 0 for p in parts)
    assert 0 < est.mfu < 1


@SETTINGS
@given(data=scenarios())
def test_more_gpus_at_fixed_per_gpu_batch_keeps_throughput(engine, data):
    """Doubling data parallelism at a fixed per-GPU batch may lose throughput only to the
    extra communication it adds (the exposed DP time), never more."""
    scn, est = _evaluate(engine, data)
    if scn is None:
        return
    c = scn.cluster
    big = dataclasses.replace(scn, cluster=dataclasses.replace(c, num_gpus=c.num_gpus * 2),
                              plan=dataclasses.replace(scn.plan, gbs=scn.plan.gbs * 2, dp=None))
    est2 = engine.evaluate(big, validate=False)
    b1, b2 = est.breakdown, est2.breakdown
    # Per-GPU work is unchanged; the optimizer shard can only shrink.
    assert b2.compute_s == pytest.approx(b1.compute_s, rel=1e-9)
    assert b2.recompute_s == pytest.approx(b1.recompute_s, rel=1e-9)
    assert b2.optimizer_s <= b1.optimizer_s * (1 + 1e-9)
    # What is lost is explained by communication: its exposed part, the interference of its
    # hidden part, and the pipeline bubble it lengthens.
    comm1 = sum(b1.exposed_comm_s.values()) + b1.overlap_interference_s + b1.bubble_s
    comm2 = sum(b2.exposed_comm_s.values()) + b2.overlap_interference_s + b2.bubble_s
    lost = 1 - est2.tokens_per_s / (2 * est.tokens_per_s)
    assert lost <= max(0.0, comm2 - comm1) / est2.step_time_s + 1e-9
