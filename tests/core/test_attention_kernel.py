"""software.attention_kernel: which fused-attention kernel a stack runs.

"profile" runs at the GPU profile's fitted attention figures; "cudnn" at the profile's
measured cuDNN 9 figures where it has them (Hopper), and at the fitted ones where those are
already that kernel's (Blackwell: no separate figures). Bad input is refused naming the field.
"""

from __future__ import annotations

import copy

import pytest

from twin.core.errors import SpecError
from twin.core.scenario_io import scenario_from_dict
from twin.engine import Engine

LONG = {"cluster": {"system": "DGX-H100", "num_gpus": 64},
        "model": {"preset": "llama3.1-8b", "seq_len": 65536},
        "plan": {"tp": 4, "pp": 1, "cp": 4, "gbs": 64}}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


def _with(software=None, system=None, base=LONG):
    data = copy.deepcopy(base)
    if software is not None:
        data["software"] = software
    if system is not None:
        data["cluster"]["system"] = system
    return data


def test_cudnn_runs_hopper_attention_at_the_measured_figures(engine):
    """On H100 the device of a "cudnn" stack has the profile's cuDNN figures, the default stack
    the fitted ones; the long-context step, mostly attention, is faster by most of their ratio."""
    profile = scenario_from_dict(_with(), engine.catalog)
    cudnn = scenario_from_dict(_with("megatron-core-te2"), engine.catalog)
    eff = profile.cluster.gpu.efficiency
    assert eff is not None and eff.cudnn_attention_fwd is not None and eff.cudnn_attention_bwd is not None
    dev = engine._model.device(profile.cluster.gpu, "bf16", 1.0, "auto", True, "cudnn")
    assert (dev.attn_fwd_eff, dev.attn_bwd_eff) == (eff.cudnn_attention_fwd, eff.cudnn_attention_bwd)
    dev = engine._model.device(profile.cluster.gpu, "bf16", 1.0)
    assert (dev.attn_fwd_eff, dev.attn_bwd_eff) == (eff.attention_fwd, eff.attention_bwd)
    slow = engine.evaluate(profile, report=False).step_time_s
    fast = engine.evaluate(cudnn, report=False).step_time_s
    bwd_ratio = eff.cudnn_attention_bwd / eff.attention_bwd
    assert 1.2 < slow / fast < bwd_ratio


def test_cudnn_changes_nothing_where_the_profile_has_no_separate_figures(engine):
    """Blackwell's fitted attention figures come from cuDNN-9-era stacks: no separate figures,
    so both kernels give the same step."""
    a = engine.evaluate(_with(system="DGX-B200")).step_time_s
    b = engine.evaluate(_with("megatron-core-te2", system="DGX-B200")).step_time_s
    assert a == b


def test_the_batch_path_runs_the_stacks_kernel(engine):
    """evaluate_many gives what evaluate gives, for both kernels and several sequence lengths."""
    maps = []
    for software in (None, "megatron-core-te2"):
        for seq in (8192, 32768, 65536):
            m = _with(software)
            m["model"]["seq_len"] = seq
            maps.append(m)
    rows = engine.evaluate_many(maps)
    for i, m in enumerate(maps):
        assert rows.columns["step_time_s"][i] == pytest.approx(engine.evaluate(m).step_time_s, rel=1e-9)


@pytest.mark.parametrize(("software", "field", "rule"), [
    ({"preset": "megatron-core-te2", "flash_attention": False}, "software.attention_kernel",
     "fused-attention kernel"),
    ({"attention_kernel": "flash3"}, "software.attention_kernel", "must be one of"),
])
def test_a_bad_kernel_is_refused_naming_the_field(engine, software, field, rule):
    with pytest.raises(SpecError) as err:
        engine.evaluate(_with(software))
    assert err.value.field == field
    assert rule in str(err.value)


def test_cudnn_figures_come_as_a_pair(engine):
    data = _with()
    data["cluster"]["gpu"] = {"preset": "H100-SXM-80GB", "efficiency": {
        "gemm": {"bf16": 0.8}, "attention_fwd": 0.4, "attention_bwd": 0.3, "hbm": 0.85, "cudnn_attention_fwd": 0.6}}
    with pytest.raises(SpecError) as err:
        engine.evaluate(data)
    assert err.value.field == "cluster.gpu.efficiency.cudnn_attention_bwd"


def test_the_rule_holds_after_the_same_cluster_and_model_passed(engine):
    """The engine skips the cluster and model rules for objects that passed before; the
    software rule must still run (it did not, until a test evaluated a good scenario first)."""
    engine.evaluate(_with("megatron-core-te2"))
    bad = _with({"preset": "megatron-core-te2", "flash_attention": False})
    with pytest.raises(SpecError) as err:
        engine.evaluate(bad)
    assert err.value.field == "software.attention_kernel"
    rows = engine.evaluate_many([bad, _with()])
    assert rows.reason(0).startswith("software.attention_kernel:") and rows.reason(1) is None
    assert rows.columns["step_time_s"][1] > 0


def test_the_estimate_says_which_kernel_it_assumed_where_it_matters(engine):
    """A default stack on Hopper with attention a large share of the compute gets a note naming
    the fitted figures it ran and how to state cuDNN; not once the stack states it, not where
    attention is a small share, not on a profile without separate cuDNN figures."""
    def kernel_notes(data):
        return [n for n in engine.evaluate(data).notes if n.startswith("attention is")]

    (note,) = kernel_notes(_with())
    eff = scenario_from_dict(_with(), engine.catalog).cluster.gpu.efficiency
    assert f"{eff.attention_fwd:g} / {eff.attention_bwd:g}" in note
    assert f"{eff.cudnn_attention_fwd:g} / {eff.cudnn_attention_bwd:g}" in note
    assert "software.attention_kernel: cudnn" in note
    assert kernel_notes(_with("megatron-core-te2")) == []
    assert kernel_notes(_with(system="DGX-B200")) == []
    short = _with()
    short["model"]["seq_len"] = 4096
    assert kernel_notes(short) == []
