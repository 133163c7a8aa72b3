"""Strategy selection: built-ins are defaults, plugins register alternatives a scenario selects.

The third-party alternative is the example package's compressed pipeline
(``tests/example_plugin``, installed by the ``example_plugin`` fixtures of tests/conftest.py),
registered here explicitly (and, in ``test_the_installed_example_is_dormant_until_selected``,
through its entry point).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tests.conftest import example_plugin_on_path
from twin.api import EvalContext, SpecError, Strategy, Terms
from twin.core.point_set import PointSet
from twin.engine import Engine
from twin.sweep.evaluator import SweepEvaluator
from twin.sweep.runner import run_sweep
from twin.sweep.sweep_points import SweepSource
from twin.sweep.sweep_spec import parse_spec
from twin.testing import engine_with
from twin.wire.convert import scenario_from_mapping, scenario_to_mapping

PP = "example-compressed-pp"


def scenario(**extra: Any) -> dict[str, Any]:
    return {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
            "plan": {"tp": 8, "pp": 4, "gbs": 512}, **extra}


def selected(config: dict[str, Any] | None = None) -> dict[str, Any]:
    return scenario(strategies={"pp": {"name": PP, "config": config or {}}})


@pytest.fixture(scope="module")
def alt(example_plugin_site) -> Engine:
    """The built-ins plus the example's compressed pipeline (the class only: its entry point stays unseen)."""
    with example_plugin_on_path(example_plugin_site):
        from twin_example_dragonfly.compressed_pp import CompressedPipeline
    return engine_with(CompressedPipeline())


def test_an_alternative_changes_nothing_until_selected(alt):
    builtin = Engine(autoload=False)
    assert alt.evaluate(scenario()).to_dict() == builtin.evaluate(scenario()).to_dict()


def test_the_selected_alternative_replaces_the_builtin_not_stacks(alt):
    base = alt.evaluate(scenario())
    # At 16 bits both ways it is the built-in's arithmetic: counted twice, pp would double.
    same = alt.evaluate(selected())
    assert math.isclose(same.breakdown.exposed_comm_s["pp"], base.breakdown.exposed_comm_s["pp"], rel_tol=1e-12)
    assert math.isclose(same.step_time_s, base.step_time_s, rel_tol=1e-12)
    assert same.bytes_per_step["pp"] == base.bytes_per_step["pp"]
    # 4-bit activations, 8-bit gradients: (4 + 8) / (16 + 16) of the bytes.
    small = alt.evaluate(selected({"forward_bits": 4, "backward_bits": 8}))
    assert math.isclose(small.bytes_per_step["pp"], base.bytes_per_step["pp"] * 12 / 32, rel_tol=1e-12)
    assert small.breakdown.exposed_comm_s["pp"] < base.breakdown.exposed_comm_s["pp"]


def test_an_unknown_name_names_the_field_and_the_registered_names(alt):
    with pytest.raises(SpecError) as info:
        alt.scenario(scenario(strategies={"pp": "zero-bubble-9000"}))
    assert info.value.field == "strategies.pp"
    assert PP in info.value.rule and "pipeline" in info.value.rule
    with pytest.raises(SpecError) as info:
        alt.scenario(scenario(strategies={"pq": "pipeline"}))
    assert info.value.field == "strategies.pq" and "pp" in info.value.rule
    # a strategy of another dimension is not a choice for this one
    with pytest.raises(SpecError) as info:
        alt.scenario(scenario(strategies={"tp": PP}))
    assert info.value.field == "strategies.tp" and "tensor" in info.value.rule


@pytest.mark.parametrize(("config", "field"), [
    ({"forward_bits": 0}, "strategies.pp.config.forward_bits"),
    ({"backward_bits": 4.5}, "strategies.pp.config.backward_bits"),
    ({"bits": 4}, "strategies.pp.config.bits"),
])
def test_the_plugin_checks_its_own_config_block(alt, config, field):
    with pytest.raises(SpecError) as info:
        alt.scenario(selected(config))
    assert info.value.field == field


def test_a_config_block_for_a_strategy_that_takes_none_is_an_error(alt):
    with pytest.raises(SpecError) as info:
        alt.scenario(scenario(strategies={"pp": {"name": "pipeline", "config": {"forward_bits": 4}}}))
    assert info.value.field == "strategies.pp.config.forward_bits" and "takes no configuration" in info.value.rule


@pytest.mark.parametrize(("section", "field"), [
    ("pipeline", None),
    ({"pp": 3}, "strategies.pp"),
    ({"pp": {"config": {}}}, "strategies.pp.name"),
    ({"pp": {"name": PP, "options": {}}}, "strategies.pp.options"),
    ({"pp": {"name": PP, "config": [4]}}, "strategies.pp.config"),
])
def test_the_section_shape_is_checked(alt, section, field):
    with pytest.raises(SpecError) as info:
        alt.scenario(scenario(strategies=section))
    assert info.value.field == (field or "strategies")


class _Checkpoint(Strategy):
    """A plugin strategy with a dimension of its own (no built-in claims "checkpoint")."""

    name = "checkpoint-a"
    dimension = "checkpoint"
    phase = "step"

    def evaluate(self, ctx: EvalContext) -> Terms:
        return Terms(exposed_per_step_s=0.01, issued_per_step_s=0.01)


class _OtherCheckpoint(_Checkpoint):
    name = "checkpoint-b"

    def evaluate(self, ctx: EvalContext) -> Terms:
        return Terms(exposed_per_step_s=0.02, issued_per_step_s=0.02)


def test_one_plugin_on_its_own_dimension_runs_by_default():
    est = engine_with(_Checkpoint()).evaluate(scenario())
    assert est.breakdown.exposed_comm_s["checkpoint"] == 0.01


def test_two_plugins_claiming_a_dimension_without_a_builtin_is_an_error_naming_both():
    engine = engine_with(_Checkpoint(), _OtherCheckpoint())
    with pytest.raises(SpecError) as info:
        engine.scenario(scenario())
    assert info.value.field == "strategies.checkpoint"
    assert "checkpoint-a" in info.value.rule and "checkpoint-b" in info.value.rule
    # the batch path gives every point that reason
    res = engine.evaluate_many([scenario(), scenario()])
    assert not res.feasible.any() and "checkpoint-a" in (res.reason(0) or "")
    # selecting one resolves it
    est = engine.evaluate(scenario(strategies={"checkpoint": "checkpoint-b"}))
    assert est.breakdown.exposed_comm_s["checkpoint"] == 0.02


def test_naming_a_builtin_keeps_the_dimensions_builtins():
    engine = Engine(autoload=False)
    fsdp = scenario(plan={"tp": 8, "pp": 4, "gbs": 512, "optimizer_sharding": "fsdp"})
    # dp has two built-ins (data, fsdp), each for its own sharding modes: naming one keeps both.
    assert engine.evaluate({**fsdp, "strategies": {"dp": "data"}}).to_dict() == engine.evaluate(fsdp).to_dict()


def test_the_batch_path_groups_points_by_selection_and_matches_one_by_one(alt):
    sources = [scenario(), selected({"forward_bits": 4, "backward_bits": 8}), selected(),
               scenario(plan={"tp": 8, "pp": 8, "gbs": 512}),
               selected({"forward_bits": 2, "backward_bits": 4}) | {"plan": {"tp": 8, "pp": 8, "gbs": 512}}]
    res = alt.evaluate_many(sources)
    assert res.feasible.all()
    for i, src in enumerate(sources):
        assert math.isclose(float(res.columns["step_time_s"][i]), alt.evaluate(src).step_time_s, rel_tol=1e-12)
    # one point set must not mix selections
    scns = [alt.scenario(s) for s in sources[:2]]
    with pytest.raises(ValueError, match="strategy selection"):
        PointSet.from_scenarios(scns)


SWEEP = {"name": "pp-alternatives", "base": scenario(),
         "axes": [{"path": "strategies.pp", "values": ["pipeline", {"name": PP, "config": {"forward_bits": 4,
                                                                                          "backward_bits": 8}}]},
                  {"path": "plan.mbs", "values": [1, 2]}]}


def test_a_sweep_sweeps_the_selection(alt):
    spec = parse_spec(SWEEP)
    batch = SweepSource(spec, alt.catalog).batch(0, spec.total_points)
    assert len(batch.strategies) == 2
    ev = SweepEvaluator(alt).evaluate(batch)
    assert (ev.reason_ix < 0).all()
    for i in range(len(batch)):
        one = alt.evaluate(batch.scenario(i))
        assert math.isclose(ev.floats["step_time_s"][i], one.step_time_s, rel_tol=1e-12)
        assert math.isclose(ev.floats["exposed_pp_s"][i], one.breakdown.exposed_comm_s["pp"], rel_tol=1e-12)
    pp = ev.floats["exposed_pp_s"]
    assert pp[2] < pp[0] and pp[3] < pp[1]   # the compressed points (second value) expose less


def test_a_sweep_refuses_an_unknown_selection_up_front(alt):
    bad = {**SWEEP, "axes": [{"path": "strategies.pp", "values": ["pipeline", "nope"]}]}
    with pytest.raises(SpecError) as info:
        run_sweep(bad, engine=alt, executor="inline")
    assert info.value.field == "axes[0].values[1]" and "nope" in str(info.value)


def test_the_wire_carries_the_selection(alt):
    data = selected({"forward_bits": 4, "backward_bits": 8})
    back = scenario_to_mapping(scenario_from_mapping(data))
    assert alt.scenario(back).strategies == alt.scenario(data).strategies
    short = scenario_to_mapping(scenario_from_mapping(scenario(strategies={"pp": PP})))
    assert short["strategies"] == {"pp": {"name": PP}}


def test_the_installed_example_is_dormant_until_selected(example_plugin):
    loaded = Engine(autoload=True)
    assert PP in {s.name for s in loaded.strategies}
    plain = Engine(autoload=False)
    assert loaded.evaluate(scenario()).step_time_s == plain.evaluate(scenario()).step_time_s
    assert loaded.evaluate(selected({"forward_bits": 4})).step_time_s < plain.evaluate(scenario()).step_time_s
    assert np.isfinite(loaded.evaluate(selected()).step_time_s)


def test_a_fleet_job_takes_its_selection(alt):
    from twin.fleet_report import evaluate_fleet

    job = {"gpus": 256, "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 4, "gbs": 512}}
    fleet = {"cluster": {"system": "DGX-H100", "num_gpus": 512},
             "jobs": [{**job, "name": "plain"},
                      {**job, "name": "compressed",
                       "strategies": {"pp": {"name": PP, "config": {"forward_bits": 2, "backward_bits": 4}}}}]}
    plain, compressed = evaluate_fleet(alt, fleet).jobs
    assert compressed.alone.bytes_per_step["pp"] == plain.alone.bytes_per_step["pp"] * 6 / 32


def test_the_listing_says_which_strategies_are_alternatives(alt):
    rows = {r["kind"]: r for r in alt.components()["strategy"]}
    assert rows[PP]["dimension"] == "pp" and rows[PP]["alternative"]
    assert rows["pipeline"]["dimension"] == "pp" and not rows["pipeline"]["alternative"]
    assert not engine_with(_Checkpoint()).components()["strategy"][-1]["alternative"]
    two = engine_with(_Checkpoint(), _OtherCheckpoint())
    both = {r["kind"]: r["alternative"] for r in two.components()["strategy"]}
    assert both["checkpoint-a"] and both["checkpoint-b"]
