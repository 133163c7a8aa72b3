"""The batch-equals-one-by-one kit (``twin.testing``) and the two leaks it was written to catch.

1. A strategy that handles one scenario at a time (``vectorized = False``) is evaluated point
   by point on the batch path; a plugin's collective-cost hook must reach it there too, as it
   does one by one.
2. A failure changes the network, not which strategies run: with an alternative strategy
   installed (it runs only where a scenario selects it), a degraded network must not turn it
   into a default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from twin_plugins.data_parallel import DataParallel
from twin_plugins.pipeline_parallel import PipelineParallel

from twin.api import CollectiveCost, EvalContext, Strategy, Terms, hookimpl
from twin.core.conditions import Impact
from twin.core.failures.impact import ImpactEvaluator
from twin.engine import Engine
from twin.testing import assert_batch_matches_one_by_one, assert_strategies_agree, engine_with

BASE = {"name": "kit", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-8b",
        "plan": {"tp": 2, "pp": 2, "gbs": 256, "mbs": 1}}


class ScalarGradNorm(Strategy):
    """A third-party strategy that only handles one scenario at a time: one all-reduce per step."""

    name = "scalar-gradnorm"
    dimension = "gradnorm"
    phase = "step"
    vectorized = False
    reads_schedule = False

    def evaluate(self, ctx: EvalContext) -> Terms:
        cost = ctx.cost("all_reduce", 4.0 * 1024 * 1024, "dp")
        return Terms(exposed_per_step_s=cost.time_s, issued_per_step_s=cost.time_s, bytes_per_step=4.0 * 2**20)


class SlowAllReduce:
    """A collective-cost hook: every all-reduce takes one millisecond."""

    @hookimpl
    def twin_collective_cost(self, op: str, size_bytes: float, span: Any, hierarchy: Any, algorithm: Any,
                             scenario: Any) -> CollectiveCost | None:
        if op != "all_reduce":
            return None
        return CollectiveCost(1e-3, "hooked", "hook", size_bytes / 1e-3)


def _variants(engine: Any, base: dict[str, Any]) -> list[Any]:
    scn = engine.scenario(base)
    out = [scn]
    for kw in ({"gbs": 512}, {"mbs": 2}, {"recompute": "full"}):
        out.append(dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, **kw)))
    return out


def test_a_cost_hook_reaches_a_scalar_only_strategy_on_the_batch_path():
    # Before: honoured one by one (1 ms), ignored on the batch path; and with points sharing a
    # group (here the gbs variant), the hook was asked about another point's group (IndexError).
    engine = engine_with(ScalarGradNorm(), plugins=[SlowAllReduce()])
    one = engine.evaluate(BASE)
    assert one.breakdown.exposed_comm_s["gradnorm"] == pytest.approx(1e-3)  # the hook priced it
    variants = _variants(engine, BASE)
    assert_batch_matches_one_by_one(engine, variants)
    res = engine.evaluate_many(variants)
    assert res.value("exposed_gradnorm_s", 0) == pytest.approx(1e-3)


class OtherPipeline(PipelineParallel):
    """An alternative pipeline strategy: runs only where a scenario selects it."""

    name = "other-pipeline"


class OtherData(DataParallel):
    """An alternative data-parallel strategy."""

    name = "other-data"


def test_a_failure_keeps_the_scenarios_strategy_selection():
    # Before: failure analysis evaluated on a copy of the model that forgot which strategies
    # are built in, so the alternatives ran too (pipeline and data traffic counted twice).
    engine = engine_with(OtherPipeline(), OtherData())
    scn = engine.scenario(BASE)
    tiers = len(engine.hierarchy(scn).tiers)
    # Every scale-out tier at half its bandwidth is the scenario with half the scale-out bandwidth.
    impact = Impact(tier_bw=tuple((t, 0.5) for t in range(1, tiers)), note="half the scale-out bandwidth")
    by_hand = engine.evaluate({**BASE, "calibration": {"scale_out_bandwidth": 0.5}})
    degraded = ImpactEvaluator(engine, scn).run(impact)
    assert degraded.step_time_s == by_hand.step_time_s
    assert_strategies_agree(engine)


def test_every_built_in_strategy_agrees_on_both_paths_and_under_a_failure():
    engine = Engine(autoload=False)
    assert {row["kind"] for row in engine.components()["strategy"]} >= {
        "tensor", "pipeline", "data", "fsdp", "context", "expert"}
    assert_strategies_agree(engine)


def test_the_example_plugins_strategies_agree(example_plugin):
    engine = Engine()  # autoload: the example plugin's entry point, as a user's install has it
    names = {row["kind"] for row in engine.components()["strategy"]}
    assert "example-compressed-pp" in names, names
    assert_strategies_agree(engine)


class Inconsistent(Strategy):
    """A strategy whose batch and one-scenario answers differ (what the kit exists to catch)."""

    name = "inconsistent"
    dimension = "extra"
    phase = "step"

    def evaluate(self, ctx: EvalContext) -> Terms:
        return Terms(exposed_per_step_s=2e-3 if ctx.batch else 1e-3)


def test_the_kit_catches_a_batch_that_disagrees():
    engine = engine_with(Inconsistent())
    with pytest.raises(AssertionError, match="in a batch"):
        assert_batch_matches_one_by_one(engine, _variants(engine, BASE))
    with pytest.raises(AssertionError, match="in a batch"):
        assert_strategies_agree(engine)


def test_the_kit_catches_a_strategy_that_takes_part_nowhere():
    class Idle(Inconsistent):
        name = "idle"

        def active(self, ctx: EvalContext) -> Any:
            return False

    with pytest.raises(AssertionError, match="takes part in none"):
        assert_strategies_agree(engine_with(Idle()))
