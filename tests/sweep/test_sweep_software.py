"""A sweep (and a plan search) runs on the software stack its base names."""

from __future__ import annotations

import pytest

from twin.core.errors import NotFoundError, SpecError
from twin.sweep.evaluator import SweepEvaluator
from twin.sweep.plansearch import search_plans, space_for
from twin.sweep.sweep_points import SweepSource
from twin.sweep.sweep_spec import parse_spec

TINY = {"preset": "llama3.1-8b", "layers": 8, "hidden": 512, "ffn": 2048, "heads": 8, "kv_heads": 8,
        "seq_len": 512, "vocab": 8192}


def _spec(software=None):
    base = {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": TINY, "plan": {"gbs": 64}}
    if software is not None:
        base["software"] = software
    return {"name": "stack", "base": base, "axes": [{"path": "plan.mbs", "values": [1, 2, 4]}]}


def _steps(engine, software=None):
    spec = parse_spec(_spec(software))
    batch = SweepSource(spec, engine.catalog).batch(0, spec.total_points)
    return SweepEvaluator(engine).evaluate(batch).floats["step_time_s"], batch


def test_base_software_changes_every_point_as_evaluate_does(engine):
    default, _ = _steps(engine)
    eager, batch = _steps(engine, "pytorch-fsdp2")
    assert (eager > default).all()   # a tiny model is host-bound; FSDP2's eager dispatch costs more
    for i in range(len(batch)):
        assert eager[i] == engine.evaluate(batch.scenario(i), report=False).step_time_s


def test_software_is_not_an_axis_and_bad_stacks_are_named(engine):
    spec = _spec()
    spec["axes"].append({"path": "software.dispatch_us", "values": [1.0, 2.0]})
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert err.value.field == "axes[1].path"
    with pytest.raises(NotFoundError) as nf:
        SweepSource(parse_spec(_spec("no-such-stack")), engine.catalog)
    assert nf.value.field == "software"


def test_plan_search_uses_the_named_stack(engine):
    fast = search_plans(engine, space_for(engine, TINY, "DGX-H100", 8, gbs=64), top=1)
    eager = search_plans(engine, space_for(engine, TINY, "DGX-H100", 8, gbs=64, software="pytorch-fsdp2"), top=1)
    assert eager.plans()[0]["step_time_s"] > fast.plans()[0]["step_time_s"]
    # The full estimate of the best plan is the named stack's too.
    assert eager.plans()[0]["estimate"]["step_time_s"] == pytest.approx(eager.plans()[0]["step_time_s"])
