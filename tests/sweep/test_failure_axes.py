"""Failure figures in sweeps: axes over failures.* and goodput objectives."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import EXAMPLES
from twin.core.errors import SpecError
from twin.failure_analyzer import failure_metrics
from twin.sweep.reduce import nrows
from twin.sweep.runner import run_job, sweep_job
from twin.sweep.sweep_spec import parse_spec

BASE = yaml.safe_load((EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text())


def test_spares_axis_and_effective_training_time_objective(engine):
    spec = parse_spec({"name": "spares", "base": BASE, "keep_rows": True,
                       "axes": [{"path": "failures.spare_nodes", "values": [0, 16]}],
                       "objective": {"metric": "effective_training_time_pct", "top": 2}})
    result = run_job(sweep_job(spec, engine), engine=engine, executor="inline")
    rows = result.rows
    assert nrows(rows) == 2
    by_spares = {int(rows["failures.spare_nodes"][i]): i for i in range(2)}
    ett = rows["effective_training_time_pct"]
    # Hot spares turn a node loss into a quick swap instead of a reschedule.
    assert ett[by_spares[16]] > ett[by_spares[0]]
    # Each point's figures are the failure analysis of that point.
    lib = failure_metrics(engine, {**BASE, "failures": {"spare_nodes": 16}})
    assert ett[by_spares[16]] == pytest.approx(lib["effective_training_time_pct"])
    assert rows["goodput_tokens_per_s"][by_spares[16]] == pytest.approx(lib["goodput_tokens_per_s"])
    best = result.top
    assert int(best["failures.spare_nodes"][0]) == 16


def test_plain_sweeps_leave_failure_columns_empty(engine):
    spec = parse_spec({"base": BASE, "keep_rows": True, "axes": [{"path": "plan.mbs", "values": [1]}]})
    rows = run_job(sweep_job(spec, engine), engine=engine, executor="inline").rows
    assert rows["effective_training_time_pct"][0] != rows["effective_training_time_pct"][0]  # NaN


def test_bad_failures_path_is_a_spec_error(engine):
    with pytest.raises(SpecError) as info:
        sweep_job(parse_spec({"base": BASE, "axes": [{"path": "failures.spare_gpus", "values": [1]}]}), engine)
    assert info.value.field.startswith("axes[0]")
    with pytest.raises(SpecError) as info:
        sweep_job(parse_spec({"base": BASE, "axes": [{"path": "failures.spare_nodes", "values": [-3]}]}), engine)
    assert "axes[0].values[0]" in info.value.field
