"""The one-scenario path builds its per-evaluation records positionally (``step.work``,
``step.context``, ``step.shared``: keywords cost about twice as much); these pin the field orders those
calls are written in, so that a field added in the middle fails here, not silently there."""

from __future__ import annotations

import dataclasses

from twin.core import step
from twin.core.interfaces import EvalContext
from twin.core.run import driver
from twin.engine import Engine


def test_eval_context_fields_are_in_the_order_context_passes_them():
    assert [f.name for f in dataclasses.fields(EvalContext)] == [
        "plan", "model", "cluster", "calibration", "dp", "microbatches", "device", "workload", "hierarchy", "spans",
        "stage", "params_per_gpu", "expert_params_per_gpu", "tp_overlap", "cost_fn", "memory_tiers",
        "activation_bytes", "points", "scenario", "notes", "software"]


def test_work_fields_are_in_the_order_work_passes_them():
    assert [f.name for f in dataclasses.fields(step.Work)] == [
        "plan", "dp", "m", "dev", "w", "stage", "params", "expert", "act", "mem", "divisors", "optimizer_s", "flops",
        "capacity", "tiers", "tp_overlap_default", "half_peak", "prec_peak", "num_gpus"]


def test_shared_fields_are_in_the_order_shared_passes_them():
    assert [f.name for f in dataclasses.fields(step.Shared)] == [
        "states", "tiers", "optimizer_s", "passes"]


def test_a_context_built_for_one_scenario_holds_what_it_was_given():
    engine = Engine(autoload=False)
    seen: list[EvalContext] = []
    original = driver.strategy_terms

    def spy(strat, ctx, point=None):
        seen.append(ctx)
        return original(strat, ctx, point)

    driver.strategy_terms = spy
    scenario = engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b",
                                "plan": {"tp": 8, "pp": 2, "gbs": 64}})
    try:
        est = engine.evaluate(scenario)
    finally:
        driver.strategy_terms = original
    ctx = seen[0]
    assert ctx.plan is scenario.plan and ctx.model is scenario.model and ctx.cluster is scenario.cluster
    assert ctx.calibration is scenario.calibration and ctx.software is scenario.software
    assert ctx.scenario is scenario and ctx.points == 0 and ctx.notes == [] and ctx.dp == est.dp
    assert ctx.microbatches == est.microbatches and ctx.workload.tokens > 0 and callable(ctx.cost_fn)
