"""Sweep specs: errors in the spec name the field; infeasible points are counted, not errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from twin.core.errors import SpecError, TooLargeError
from twin.sweep.runner import run_sweep, sweep_job
from twin.sweep.sweep_points import SweepSource
from twin.sweep.sweep_spec import check_values, load_spec, parse_spec

BASE = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"gbs": 64}}


def spec(**over: object) -> dict:
    data = {"name": "t", "base": copy.deepcopy(BASE), "axes": [{"path": "plan.tp", "values": [1, 2, 4, 8]}]}
    data.update(over)
    return data


def checked(data: dict, engine) -> None:
    check_values(parse_spec(data), engine.catalog, engine.fabrics.kinds())


BAD_SPECS = [
    # (spec overrides, field named in the error, words in the rule)
    ({"axes": [{"path": "plan.tpp", "values": [1]}]}, "axes[0].path", "unknown field 'plan.tpp'"),
    ({"axes": [{"path": "clusters.num_gpus", "values": [1]}]}, "axes[0].path", "starts with one of"),
    ({"axes": [{"path": "cluster.scale_out.nic_gbps.x", "values": [1]}]}, "axes[0].path", "no sub-fields"),
    ({"axes": [{"path": "plan.tp"}]}, "axes[0]", "exactly one of values, range, sample"),
    ({"axes": [{"path": "plan.tp", "values": []}]}, "axes[0].values", "non-empty list"),
    ({"axes": [{"path": "plan.tp", "values": [1], "step": 2}]}, "axes[0].step", "unknown field"),
    ({"axes": [{"path": "plan.tp", "range": {"start": 8, "stop": 1}}]}, "axes[0].range", "is empty"),
    ({"axes": [{"path": "plan.tp", "range": {"start": 8, "stop": 8}}]}, "axes[0].range", "stop is exclusive"),
    ({"axes": [{"path": "plan.tp", "range": {"start": 1, "stop": 8, "factor": 1}}]}, "axes[0].range.factor", "> 1"),
    ({"axes": [{"path": "plan.tp", "sample": {"low": 1, "high": 8}}]}, "axes[0].sample.n", "is required"),
    ({"axes": [{"path": "plan.tp", "values": [1]}, {"path": "plan", "values": [{}]}]}, "axes[1].path", "overlaps"),
    ({"mode": "diagonal"}, "mode", "one of grid, zip, random"),
    ({"mode": "random"}, "axes[0]", "random mode needs every axis to use sample"),
    ({"mode": "random", "axes": []}, "axes", "needs at least one axis"),
    ({"samples": 5}, "samples", "only applies to random mode"),
    ({"mode": "zip", "axes": [{"path": "plan.tp", "values": [1, 2]}, {"path": "plan.pp", "values": [1]}]},
     "axes[1]", "zip mode needs every axis to have 2 values"),
    ({"objective": {"metric": "happiness"}}, "objective.metric", "must be one of"),
    ({"objective": {"metric": "mfu", "order": "up"}}, "objective.order", "'min' or 'max'"),
    ({"keep_rows": "yes"}, "keep_rows", "boolean"),
    ({"colour": "red"}, "colour", "unknown field"),
]


@pytest.mark.parametrize(("over", "field", "words"), BAD_SPECS)
def test_bad_specs_name_the_field(over, field, words):
    with pytest.raises(SpecError) as err:
        parse_spec(spec(**over))
    assert err.value.field == field
    assert words in err.value.rule


BAD_VALUES = [
    # axis values that break the field's own type or bounds: spec errors naming the value
    ({"path": "plan.tp", "values": [1, 0]}, "axes[0].values[1]", "plan.tp: must be >= 1"),
    ({"path": "plan.recompute", "values": ["none", "sometimes"]}, "axes[0].values[1]", "plan.recompute"),
    ({"path": "cluster.num_gpus", "values": ["many"]}, "axes[0].values[0]", "cluster.num_gpus: must be an integer"),
    ({"path": "cluster.scale_out.fabric", "values": ["roce", "carrier-pigeon"]}, "axes[0].values[1]",
     "unknown scale_out fabric 'carrier-pigeon'"),
    ({"path": "model", "values": ["llama3.1-8b", "gpt-99"]}, "axes[0].values[1]", "unknown name 'gpt-99'"),
    ({"path": "cluster.system", "values": ["DGX-Z"]}, "axes[0].values[0]", "cluster.system"),
    ({"path": "cluster.scale_out.nic_gbps", "sample": {"choices": [400, -5], "n": 40, "seed": 1}},
     "axes[0].values", "cluster.scale_out.nic_gbps: must be >="),
]


@pytest.mark.parametrize(("axis", "field", "words"), BAD_VALUES)
def test_bad_axis_values_name_the_value(engine, axis, field, words):
    with pytest.raises(SpecError) as err:
        checked(spec(axes=[axis]), engine)
    assert err.value.field.startswith(field)
    assert words in err.value.rule


def test_random_mode_checks_the_sample_range(engine):
    data = spec(mode="random", samples=10,
                axes=[{"path": "cluster.scale_out.nic_gbps", "sample": {"low": -5, "high": 400}}])
    with pytest.raises(SpecError) as err:
        checked(data, engine)
    assert err.value.field == "axes[0].sample.low" and "nic_gbps: must be >=" in err.value.rule


def test_too_many_points_is_refused(engine):
    data = spec(axes=[{"path": "plan.gbs", "range": {"start": 1, "stop": 5000}},
                      {"path": "plan.mbs", "range": {"start": 1, "stop": 5000}}])
    with pytest.raises(TooLargeError):
        check_values(parse_spec(data), engine.catalog, engine.fabrics.kinds(), max_points=1_000_000)


@pytest.mark.parametrize(("axis", "field"), [
    ({"path": "plan.gbs", "range": {"start": 1, "stop": 1002}}, "axes[0].range"),
    ({"path": "cluster.num_gpus", "range": {"start": 1, "stop": 1e300, "factor": 1.5}}, "axes[0].range"),
    ({"path": "plan.mbs", "sample": {"low": 1, "high": 8, "n": 10**12}}, "axes[0].sample.n"),
    ({"path": "plan.tp", "values": [1] * 1001}, "axes[0].values"),
])
def test_an_axis_over_the_point_limit_is_refused_while_parsing(axis, field):
    # Refused before the values are built: 10^12 draws would need 7 TiB.
    with pytest.raises(TooLargeError) as err:
        parse_spec(spec(axes=[axis]), max_points=1000)
    assert err.value.field == field and "at most 1,000" in err.value.rule


def test_the_axis_limit_is_the_point_limit():
    at_limit = {"path": "plan.gbs", "range": {"start": 1, "stop": 1001}}
    assert len(parse_spec(spec(axes=[at_limit]), max_points=1000).axes[0].values) == 1000
    over = {"path": "plan.gbs", "range": {"start": 1, "stop": 1002}}
    assert len(parse_spec(spec(axes=[over])).axes[0].values) == 1001  # the default limit (the CLI's) is far higher


def test_ranges_and_counts():
    s = parse_spec(spec(axes=[{"path": "cluster.num_gpus", "range": {"start": 64, "stop": 2048, "factor": 2}},
                              {"path": "plan.mbs", "range": {"start": 1, "stop": 5, "step": 1}},
                              {"path": "cluster.scale_out.nic_gbps", "range": {"start": 100.0, "stop": 250.0,
                                                                               "step": 50.0}}]))
    assert s.axes[0].values == (64, 128, 256, 512, 1024)
    assert s.axes[1].values == (1, 2, 3, 4)
    assert s.axes[2].values == (100.0, 150.0, 200.0)
    # integer bounds give integers (with a factor too), float bounds floats; stop is exclusive
    assert {type(v) for v in s.axes[0].values + s.axes[1].values} == {int}
    assert {type(v) for v in s.axes[2].values} == {float}
    assert s.total_points == 5 * 4 * 3


def test_grid_enumeration_is_row_major(engine):
    s = parse_spec(spec(axes=[{"path": "plan.tp", "values": [1, 2]}, {"path": "plan.mbs", "values": [1, 2, 4]}]))
    src = SweepSource(s, engine.catalog)
    b = src.batch(0, s.total_points)
    assert list(b.axis_columns()["plan.tp"]) == [1, 1, 1, 2, 2, 2]
    assert list(b.axis_columns()["plan.mbs"]) == [1, 2, 4, 1, 2, 4]
    # the plan columns the model reads are built from the same codes
    assert b.plan.tp.tolist() == [1, 1, 1, 2, 2, 2] and b.plan.mbs.tolist() == [1, 2, 4, 1, 2, 4]


def test_random_points_are_a_function_of_the_id(engine):
    data = spec(mode="random", samples=500, seed=7,
                axes=[{"path": "plan.tp", "values": [1, 2, 4, 8]},
                      {"path": "cluster.scale_out.nic_gbps", "sample": {"low": 100, "high": 800, "log": True}}])
    s = load_spec(data)
    whole = SweepSource(s, engine.catalog).batch(0, 500)
    part = SweepSource(s, engine.catalog).batch(200, 300)
    assert list(part.axis_columns()["plan.tp"]) == list(whole.axis_columns()["plan.tp"][200:300])
    np.testing.assert_array_equal(part.axis_columns()["cluster.scale_out.nic_gbps"],
                                  whole.axis_columns()["cluster.scale_out.nic_gbps"][200:300])
    nic = whole.axis_columns()["cluster.scale_out.nic_gbps"]
    assert nic.min() >= 100 and nic.max() <= 800 and len(set(nic.tolist())) > 100  # integer draws (ints given)
    assert set(whole.axis_columns()["plan.tp"]) == {1, 2, 4, 8}
    other = SweepSource(load_spec({**data, "seed": 8}), engine.catalog).batch(0, 500)
    assert list(other.axis_columns()["plan.tp"]) != list(whole.axis_columns()["plan.tp"])


def test_random_without_samples_zips_each_axis_draws(engine):
    s = parse_spec(spec(mode="random", axes=[{"path": "plan.tp", "sample": {"choices": [1, 2, 4], "n": 6, "seed": 1}},
                                             {"path": "plan.mbs", "sample": {"low": 1, "high": 4, "n": 6, "seed": 2}}]))
    assert s.mode == "zip" and s.total_points == 6
    b = SweepSource(s, engine.catalog).batch(0, 6)
    assert list(b.axis_columns()["plan.tp"]) == list(s.axes[0].values)
    assert list(b.axis_columns()["plan.mbs"]) == list(s.axes[1].values)
    with pytest.raises(SpecError) as err:
        parse_spec(spec(mode="random", axes=[{"path": "plan.tp", "sample": {"choices": [1, 2], "n": 3}},
                                             {"path": "plan.mbs", "sample": {"choices": [1, 2], "n": 4}}]))
    assert err.value.field == "axes[1]" and "random mode needs every axis to have 3 values" in err.value.rule


def test_sampled_axis_in_grid_mode_is_seeded():
    data = spec(axes=[{"path": "plan.mbs", "sample": {"choices": [1, 2, 4], "n": 5, "seed": 3}}])
    assert parse_spec(data).axes[0].values == parse_spec(data).axes[0].values
    assert len(parse_spec(data).axes[0].values) == 5


def test_paths_into_presets_merge_with_the_preset(engine):
    """model.seq_len on a preset name, cluster.gpu.hbm_gib on a system's GPU: overrides, not replacements."""
    s = parse_spec(spec(axes=[{"path": "model.seq_len", "values": [4096]},
                              {"path": "cluster.gpu.hbm_gib", "values": [141]},
                              {"path": "cluster.scale_out.nic_gbps", "values": [800]}]))
    job = sweep_job(s, engine)
    g = SweepSource(job.recipe, engine.catalog).batch(0, 1).scenario(0)
    assert g.model.seq_len == 4096 and g.model.layers == 32           # llama3.1-8b preset kept
    assert g.cluster.gpu.hbm_gib == 141 and g.cluster.gpu.generation == "hopper"
    assert g.cluster.scale_out.nic_gbps == 800 and g.cluster.scale_out.fabric == "infiniband"


def test_infeasible_points_are_counted_by_reason_not_errors(engine):
    data = spec(axes=[{"path": "plan.tp", "values": [1, 3, 8]},            # 3 divides neither heads nor 64
                      {"path": "plan.pp", "values": [1, 2]},
                      {"path": "plan.vp", "values": [1, 2]},                # vp 2 needs pp > 1
                      {"path": "cluster.num_gpus", "values": [64, 100]}])   # 100 is not a multiple of 8
    r = run_sweep(data, engine=engine, executor="inline")
    assert r.done == r.total == 24
    assert r.feasible + r.infeasible == 24 and r.feasible > 0
    assert r.counts["cluster.num_gpus: must be a multiple of gpus_per_node"] == 12
    assert r.counts["plan.tp: tp*pp*cp must divide num_gpus"] == 4               # tp 3 on 64 GPUs
    assert r.counts["plan.vp: interleaving needs pipeline parallelism"] == 2     # tp 1 and 8, pp 1, vp 2


def test_base_may_be_a_scenario_file(tmp_path, engine):
    (tmp_path / "s.yaml").write_text("cluster: {system: DGX-H100, num_gpus: 64}\nmodel: llama3.1-8b\n"
                                     "plan: {gbs: 64}\n")
    (tmp_path / "sweep.yaml").write_text("name: f\nbase: s.yaml\naxes: [{path: plan.tp, values: [4, 8]}]\n")
    r = run_sweep(tmp_path / "sweep.yaml", engine=engine, executor="inline")
    assert r.done == 2 and r.feasible == 2


def test_grid_codes_of_a_contiguous_range_are_the_row_major_digits():
    """The division-free code generator equals (id // stride) % radix for every range."""
    from hypothesis import given
    from hypothesis import strategies as st

    from twin.sweep.sweep_points import _grid_codes

    @given(st.integers(0, 10**7), st.integers(1, 5000), st.integers(1, 10**4), st.integers(1, 64))
    def check(start: int, n: int, stride: int, radix: int) -> None:
        ids = np.arange(start, start + n, dtype=np.int64)
        np.testing.assert_array_equal(_grid_codes(start, n, stride, radix), (ids // stride) % radix)

    check()
