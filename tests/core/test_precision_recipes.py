"""Low precision as recipes run it, and what one GPU SKU has over another (issue 10).

Each test works a number out by hand from the mechanism's definition (which GEMMs run in
which precision, the bytes a recipe's quantize kernels move, the exponentials the SFU
computes) and checks the model against it.
"""

from __future__ import annotations

import dataclasses

import pytest

from twin.core.compute import QUANT_BYTES, device_for, gemm_time, high_precision, sublayer_times
from twin.core.errors import SpecError
from twin.core.scenario_io import resolve_gpu, resolve_model
from twin.core.schedule import stage_times
from twin.core.specs import Plan
from twin.core.workload import build_workload


def _gpu(engine, name):
    return resolve_gpu(name, engine.catalog)


def _device(engine, gpu_name, precision, recipe="auto"):
    gpu = _gpu(engine, gpu_name)
    return device_for(gpu, precision, gpu.efficiency, 1.0, recipe)


def _model(engine, name="llama3.1-70b", **overrides):
    model = resolve_model(name, engine.catalog)
    return dataclasses.replace(model, **overrides) if overrides else model


def test_the_lm_head_runs_in_bf16_under_fp8(engine):
    """Megatron-Core's output layer is not a TE module: its GEMMs cost what they cost in bf16."""
    model = _model(engine)
    w = build_workload(model, 8, 1, 1, True, 1, 1)
    fp8, bf16 = _device(engine, "H100-SXM-80GB", "fp8"), _device(engine, "H100-SXM-80GB", "bf16")
    f8, b8, _, _ = sublayer_times(fp8, w.head)
    f16, b16, _, _ = sublayer_times(bf16, w.head)
    assert (f8, b8) == (f16, b16)
    # ... while the layers' GEMMs do speed up.
    assert sublayer_times(fp8, w.sublayers["mlp"])[0] < sublayer_times(bf16, w.sublayers["mlp"])[0]


def test_recipes_differ_by_their_quantize_traffic(engine):
    """current - delayed scaling = (4 - 1) bytes per quantized element, over the HBM rate."""
    model = _model(engine)
    w = build_workload(model, 8, 1, 1, True, 1, 1)
    mlp = w.sublayers["mlp"]
    delayed = _device(engine, "H100-SXM-80GB", "fp8", "delayed")
    current = _device(engine, "H100-SXM-80GB", "fp8", "current")
    assert (delayed.quant_bytes, current.quant_bytes) == (QUANT_BYTES["delayed"], QUANT_BYTES["current"])
    q_fwd = sum(g.m * g.k * g.count for g in mlp.gemms)
    q_bwd = sum(g.m * g.n * g.count for g in mlp.gemms)
    fd, bd, _, _ = sublayer_times(delayed, mlp)
    fc, bc, _, _ = sublayer_times(current, mlp)
    assert fc - fd == pytest.approx(3.0 * q_fwd / delayed.hbm_Bps, rel=1e-9)
    assert bc - bd == pytest.approx(3.0 * q_bwd / delayed.hbm_Bps, rel=1e-9)
    # The stack's default on each generation.
    assert _device(engine, "H100-SXM-80GB", "fp8").quant_bytes == QUANT_BYTES["delayed"]
    assert _device(engine, "GB200", "fp8").quant_bytes == QUANT_BYTES["mxfp8"]
    assert _device(engine, "GB200", "fp4").quant_bytes == QUANT_BYTES["nvfp4"]
    assert _device(engine, "GB200", "bf16").quant_bytes == 0.0


def test_layers_kept_in_bf16_cost_what_bf16_layers_cost(engine):
    """An fp8 plan that keeps every layer in bf16 has the bf16 plan's stage times."""
    model = _model(engine)
    w = build_workload(model, 8, 1, 1, True, 1, 1)
    bf16 = Plan(gbs=64, tp=8, precision="bf16")
    all_kept = Plan(gbs=64, tp=8, precision="fp8", bf16_layers_start=model.layers)
    none_kept = Plan(gbs=64, tp=8, precision="fp8")
    fp8_dev = _device(engine, "H100-SXM-80GB", "fp8")
    s16 = stage_times(bf16, model, _device(engine, "H100-SXM-80GB", "bf16"), w)
    s_all = stage_times(all_kept, model, fp8_dev, w)
    s_none = stage_times(none_kept, model, fp8_dev, w)
    assert s_all.fwd_s == pytest.approx(s16.fwd_s, rel=1e-12)
    assert s_all.bwd_s == pytest.approx(s16.bwd_s, rel=1e-12)
    assert s_none.fwd_s < s_all.fwd_s


def test_kept_layers_sit_on_the_first_and_last_pipeline_stages(engine):
    """With pp=4, two kept layers at the end slow only the last stage: it becomes the bottleneck."""
    model = _model(engine)
    w = build_workload(model, 8, 1, 1, True, 1, 1)
    dev = _device(engine, "H100-SXM-80GB", "fp8")
    plain = stage_times(Plan(gbs=64, tp=8, pp=4, precision="fp8"), model, dev, w)
    kept = stage_times(Plan(gbs=64, tp=8, pp=4, precision="fp8", bf16_layers_end=2), model, dev, w)
    f16 = sum(sublayer_times(high_precision(dev), w.sublayers[k])[0] * c for k, c in w.counts.items()) / model.layers
    extra = 2 * (f16 - plain.layer_fwd_s)
    hf = sublayer_times(dev, w.head)[0]
    # The last stage: its layers, two of them in bf16, and the LM head.
    assert kept.fwd_s == pytest.approx(kept.layers * plain.layer_fwd_s + hf + extra, rel=1e-9)
    assert kept.fwd_s > plain.fwd_s


def test_fp4_over_fp8_is_less_than_the_peak_ratio(engine):
    """NVFP4 doubles the GEMM peak, but attention stays in bf16, the head in bf16, and NVFP4's
    quantize moves more bytes: a layer speeds up by well under 2x."""
    model = _model(engine)
    w = build_workload(model, 4, 1, 1, True, 1, 1)
    fp8, fp4 = _device(engine, "GB200", "fp8"), _device(engine, "GB200", "fp4")
    layer8 = sum(sum(sublayer_times(fp8, w.sublayers[k])[:2]) * c for k, c in w.counts.items())
    layer4 = sum(sum(sublayer_times(fp4, w.sublayers[k])[:2]) * c for k, c in w.counts.items())
    assert 1.0 < layer8 / layer4 < fp4.peak_flops * fp4.gemm_eff / (fp8.peak_flops * fp8.gemm_eff)


def test_blackwell_ultra_doubles_the_softmax_exponential_rate(engine):
    """B200 and B300 share the 16-bit peak; B300's SFU computes twice the exponentials per clock.

    Exponentials/s = 16-bit peak x exps per clock per SM / tensor FLOPs per clock per SM
    (B200: 2.25e15 x 16 / 8192 = 4.39e12), at the clock the SKU's power limit sustains
    (``twin.core.power_clock``: B300's 1,100 W against B200's 1,000 W, the tensor rate too).
    """
    b200, b300 = _device(engine, "B200-SXM-180GB", "bf16"), _device(engine, "B300-SXM-270GB", "bf16")
    assert b200.exp_per_s == pytest.approx(2.25e15 * 16 / 8192)
    clock = b300.attn_peak_flops / b200.attn_peak_flops
    assert clock == pytest.approx(1100.0 / 1000.0)
    assert b300.exp_per_s == pytest.approx(2 * clock * b200.exp_per_s)
    # Small heads (64) at long sequences are exponential-bound on B200, not on B300.
    small = _model(engine, "llama3.1-8b", seq_len=16384, head_dim=64, heads=64, kv_heads=8)
    attn = build_workload(small, 1, 1, 1, False, 1, 1).sublayers["attention"]
    f200, f300 = sublayer_times(b200, attn)[2], sublayer_times(b300, attn)[2]
    assert f200 == pytest.approx(attn.attn_exps / b200.exp_per_s, rel=1e-12)
    assert f300 < f200
    # Large heads (128) are matmul-bound on both: the SFU changes nothing, the clock does.
    big = _model(engine, "llama3.1-70b", seq_len=16384)
    attn = build_workload(big, 8, 1, 1, True, 1, 1).sublayers["attention"]
    assert sublayer_times(b200, attn)[2] == pytest.approx(clock * sublayer_times(b300, attn)[2], rel=1e-12)


@pytest.mark.parametrize(("precision", "recipe", "in_bytes"), [
    ("fp8", "delayed", 1.0), ("fp8", "current", 1.0),       # one scale per tensor
    ("fp8", "mxfp8", 1.0 + 1.0 / 32),                       # an E8M0 scale per 32 elements
    ("fp8", "blockwise", 1.0 + 4.0 / 128),                  # an FP32 scale per 128
    ("fp4", "auto", 0.5 + 1.0 / 16),                        # NVFP4: an E4M3 scale per 16
])
def test_block_scaled_gemms_read_their_scales(engine, precision, recipe, in_bytes):
    """A memory-bound GEMM (16 tokens against an 8192 x 8192 weight) reads its inputs and their
    block scales: time = ((m k + k n) x bytes per element + m n x 2) / HBM rate."""
    dev = _device(engine, "GB200", precision, recipe)
    assert dev.in_bytes == pytest.approx(in_bytes)
    m, n, k = 16, 8192, 8192
    assert gemm_time(dev, m, n, k) == pytest.approx(((m * k + k * n) * in_bytes + m * n * 2.0) / dev.hbm_Bps)


@pytest.mark.parametrize(("plan", "field", "words"), [
    ({"precision": "bf16", "recipe": "delayed"}, "plan.recipe", "recipe for fp8"),
    ({"precision": "fp8", "recipe": "nvfp4"}, "plan.recipe", "recipe for fp4"),
    ({"precision": "fp8", "recipe": "mxfp8"}, "plan.recipe", "microscaling"),
    ({"precision": "bf16", "bf16_layers_end": 1}, "plan.bf16_layers_start", "only with precision fp8"),
    ({"precision": "fp8", "bf16_layers_start": 50, "bf16_layers_end": 50}, "plan.bf16_layers_start", "<= layers"),
])
def test_recipe_fields_that_cannot_apply_are_rejected(engine, plan, field, words):
    scn = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b",
           "plan": {"gbs": 256, "tp": 8, **plan}}
    with pytest.raises(SpecError) as err:
        engine.evaluate(scn)
    assert err.value.field == field and words in str(err.value)


def test_a_recipe_changes_the_estimate_end_to_end(engine):
    base = {"cluster": {"system": "GB200-NVL72", "num_gpus": 72}, "model": "llama3.1-70b",
            "plan": {"gbs": 72, "tp": 4, "pp": 2, "precision": "fp8"}}
    steps = {}
    for recipe in ("delayed", "current", "mxfp8"):
        scn = {**base, "plan": {**base["plan"], "recipe": recipe}}
        steps[recipe] = engine.evaluate(scn).step_time_s
    assert steps["delayed"] < steps["current"] < steps["mxfp8"]
