"""Context parallelism's exchange (plan.cp_comm_type, Megatron-Core --cp-comm-type): ring
attention overlaps its K/V blocks with attention; the all-gather of Llama 3 (§3.3.2) and the
all-to-alls of DeepSpeed-Ulysses sit on the critical path."""

from __future__ import annotations

import copy

import pytest

from twin.core.errors import SpecError

LONG = {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": {"preset": "llama3.1-70b", "seq_len": 131072},
        "plan": {"tp": 4, "cp": 8, "gbs": 16, "mbs": 1}}


def evaluate(engine, **plan):
    s = copy.deepcopy(LONG)
    s["plan"].update(plan)
    return engine.evaluate(s)


def test_the_ring_hides_what_the_gather_and_the_all_to_alls_expose(engine):
    ring = evaluate(engine)
    gather = evaluate(engine, cp_comm_type="all_gather")
    ulysses = evaluate(engine, cp_comm_type="a2a")
    assert ring.breakdown.exposed_comm_s["cp"] == 0.0    # each block's transfer under its attention here
    for est in (gather, ulysses):
        assert est.breakdown.exposed_comm_s["cp"] == pytest.approx(est.comm_issued_s["cp"])  # all exposed
        assert est.breakdown.exposed_comm_s["cp"] > 0 and est.step_time_s > ring.step_time_s
        assert est.breakdown.compute_s == ring.breakdown.compute_s


def test_the_gather_keeps_no_more_activations_and_gathers_again_in_backward(engine):
    """The gathered K/V are not kept: activations as the ring's. Issued: forward all-gather,
    backward all-gather and reduce-scatter (3 collectives a layer); full recomputation adds a
    fourth, the recomputed forward's gather."""
    ring = evaluate(engine)
    gather = evaluate(engine, cp_comm_type="all_gather")
    assert gather.memory.activations == ring.memory.activations
    full = evaluate(engine, cp_comm_type="all_gather", recompute="full")
    assert full.comm_issued_s["cp"] > gather.comm_issued_s["cp"]


@pytest.mark.parametrize(("plan", "words"), [
    ({"cp": 1, "gbs": 128, "cp_comm_type": "all_gather"}, "applies only with context parallelism"),
    ({"tp": 8, "cp": 16, "gbs": 32, "cp_comm_type": "a2a"}, "cp must divide them"),
    ({"cp_comm_type": "allgather"}, "must be one of"),
])
def test_cp_comm_type_rules_name_the_field(engine, plan, words):
    with pytest.raises(SpecError) as err:
        evaluate(engine, **plan)
    assert err.value.field == "plan.cp_comm_type" and words in str(err.value), str(err.value)
