"""Memory of the most loaded pipeline stage: the first holds the most micro-batches in
flight, the last holds the logits (hand-worked against the activation terms)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.core.memory import activation_terms, memory_per_gpu
from twin.core.scenario_io import resolve_model
from twin.core.specs import Plan
from twin.core.units import GIB
from twin.core.workload import build_workload


def _memory(engine, plan, vocab=None):
    model = resolve_model("llama3.1-70b", engine.catalog)
    if vocab:
        model = dataclasses.replace(model, vocab=vocab)
    w = build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
    act = activation_terms(plan, model, w, True)
    mem = memory_per_gpu(plan, model, w, 8, 8, 1e9, 0.0, 80 * GIB, 0.0, True, act=act)
    logits = 6.0 * w.tokens * model.vocab / plan.tp
    return mem, act, logits


def test_pipelined_first_stage_holds_no_logits(engine):
    plan = Plan(gbs=512, tp=8, pp=4)
    mem, act, _ = _memory(engine, plan)
    # 1F1B: the first stage holds min(p, m) = 4 micro-batches, and the last stage's logits
    # (one micro-batch of tokens x vocab/tp) are smaller than 3 micro-batches of activations.
    assert mem.activations == pytest.approx(4 * act.per_microbatch + act.recompute_live)
    assert mem.logits == 0.0


def test_a_large_vocabulary_makes_the_last_stage_the_most_loaded(engine):
    plan = Plan(gbs=512, tp=8, pp=4)
    mem, act, logits = _memory(engine, plan, vocab=4_000_000)
    assert mem.logits == pytest.approx(logits)
    assert mem.activations == pytest.approx(act.per_microbatch + act.recompute_live)


def test_without_pipelining_one_gpu_holds_both(engine):
    plan = Plan(gbs=512, tp=8, pp=1)
    mem, act, logits = _memory(engine, plan)
    assert mem.logits == pytest.approx(logits)
    assert mem.activations == pytest.approx(act.per_microbatch + act.recompute_live)


def test_an_uneven_pipeline_layout_moves_layers_off_the_end_stages(engine):
    """Megatron's --decoder-first/last-pipeline-num-layers: 80 layers on pp=4 as 14 + 26 + 26 + 14."""
    from twin.core.memory import stage_layers

    assert stage_layers(80, 4, 14, 14) == (14, 26, 14)
    assert stage_layers(80, 4, 14, None) == (14, 22, 22)
    even = engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 32}, "model": "llama3.1-70b",
                            "plan": {"gbs": 64, "tp": 8, "pp": 4}})
    uneven = engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 32}, "model": "llama3.1-70b",
                              "plan": {"gbs": 64, "tp": 8, "pp": 4, "pp_first_layers": 14, "pp_last_layers": 14}})
    # The bottleneck is now a 26-layer middle stage instead of a 20-layer one: slower per
    # micro-batch, and the first stage holds less activation memory.
    assert uneven.step_time_s > even.step_time_s
    assert uneven.memory.activations < even.memory.activations


@pytest.mark.parametrize(("plan", "words"), [
    ({"pp": 1, "pp_first_layers": 4}, "needs pipeline parallelism"),
    ({"pp": 4, "pp_first_layers": 13, "pp_last_layers": 14}, "split the remaining 53 of 80 layers evenly"),
    ({"pp": 2, "pp_first_layers": 30, "pp_last_layers": 30}, "remaining 20 of 80"),
])
def test_a_layout_that_does_not_add_up_is_rejected(engine, plan, words):
    from twin.core.errors import SpecError

    with pytest.raises(SpecError) as err:
        engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 32}, "model": "llama3.1-70b",
                         "plan": {"gbs": 64, "tp": 8, **plan}})
    assert err.value.field == "plan.pp_first_layers" and words in str(err.value)
