"""Fleet figures in sweeps: the swept job beside fixed neighbours on one fabric."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import EXAMPLES
from twin.core.errors import SpecError
from twin.fleet_report import evaluate_fleet
from twin.sweep.reduce import nrows
from twin.sweep.runner import run_job, sweep_job
from twin.sweep.sweep_spec import parse_spec

SPEC = yaml.safe_load((EXAMPLES / "sweeps" / "plans-beside-a-neighbour.yaml").read_text())


def test_every_point_is_evaluated_as_the_first_job_of_its_fleet(engine):
    spec = parse_spec({**SPEC, "keep_rows": True,
                       "axes": [{"path": "plan.rank_order", "values": ["tp-cp-ep-dp-pp", "tp-cp-pp-dp"]}]})
    rows = run_job(sweep_job(spec, engine), engine=engine, executor="inline").rows
    assert nrows(rows) == 2
    base = SPEC["base"]
    for i in range(2):
        order = str(rows["plan.rank_order"][i])
        fleet = {"cluster": {**base["cluster"], "num_gpus": base["fleet"]["cluster_gpus"]},
                 "jobs": [{"name": "swept", "gpus": base["cluster"]["num_gpus"], "first_gpu": 0,
                           "model": base["model"], "plan": {**base["plan"], "rank_order": order}},
                          *base["fleet"]["neighbours"]]}
        job = evaluate_fleet(engine, fleet).jobs[0]
        assert rows["step_time_shared_s"][i] == pytest.approx(job.shared.step_time_s, rel=1e-12)
        assert rows["fleet_slowdown"][i] == pytest.approx(job.slowdown, rel=1e-12)
        assert rows["fleet_slowdown"][i] >= 1.0


def test_fleet_objective_needs_a_fleet_and_bad_sections_name_the_field():
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "base": {k: v for k, v in SPEC["base"].items() if k != "fleet"}})
    assert err.value.field == "objective.metric" and "base.fleet" in err.value.rule
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "base": {**SPEC["base"], "fleet": {"neighbours": []}}})
    assert err.value.field == "base.fleet.cluster_gpus"
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "base": {**SPEC["base"], "fleet": {**SPEC["base"]["fleet"], "colour": 1}}})
    assert err.value.field == "base.fleet.colour"


def test_a_neighbour_that_breaks_a_rule_makes_the_points_infeasible_with_its_reason(engine):
    bad = {**SPEC["base"]["fleet"], "neighbours": [{**SPEC["base"]["fleet"]["neighbours"][0], "plan": {"tp": 3,
                                                                                                        "gbs": 8}}]}
    spec = parse_spec({**SPEC, "base": {**SPEC["base"], "fleet": bad}, "axes": [{"path": "plan.pp", "values": [4]}]})
    result = run_job(sweep_job(spec, engine), engine=engine, executor="inline")
    assert result.feasible == 0
    assert any(reason.startswith("fleet: jobs[1].plan.") for reason in result.counts), result.counts

