"""MoE and Mamba-2 layers as they run: expert FLOPs per GPU, grouped GEMM, load imbalance,
pad-to-capacity, router/permute kernels, SSD pricing."""

from __future__ import annotations

import dataclasses

import pytest

from twin.core import compute
from twin.core.compute import device_for, gemm_time, grouped_gemm_time, kernel_times, ssd_times, sublayer_times
from twin.core.errors import SpecError
from twin.core.workload import build_workload

MIXTRAL = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "mixtral-8x7b",
           "plan": {"tp": 1, "ep": 8, "pp": 1, "gbs": 64, "mbs": 1}}


def _with_moe(scn, **changes):
    return dataclasses.replace(scn, model=dataclasses.replace(
        scn.model, moe=dataclasses.replace(scn.model.moe, **changes)))


def _device(scn):
    gpu = scn.cluster.gpu
    return device_for(gpu, "bf16", gpu.efficiency)


def _expert_gemms(w):
    return [g for g in w.sublayers["moe"].gemms if g.grouped]


def test_expert_flops_per_gpu_do_not_depend_on_expert_tp(engine):
    model = engine.scenario(MIXTRAL).model
    moe = model.moe
    flops = {}
    for tp, etp in ((4, 1), (4, 2), (4, 4)):
        w = build_workload(model, tp, 1, 1, True, 8, etp)
        flops[(tp, etp)] = sum(g.flops for g in _expert_gemms(w))
    assert flops[(4, 1)] == pytest.approx(flops[(4, 4)], rel=1e-9)
    assert flops[(4, 2)] == pytest.approx(flops[(4, 4)], rel=1e-9)
    # Hand count: tokens/tp of this rank x top_k copies x 3 GEMMs of h x ffn (gated), 2 FLOPs each,
    # spread over ep ranks that each receive what they send.
    tokens = model.seq_len
    hand = tokens / 4 * moe.top_k * 2 * 3 * model.hidden * moe.expert_ffn
    assert flops[(4, 1)] == pytest.approx(hand, rel=1e-6)
    # And a quarter of the tp=1 figure: four TP ranks share one group's tokens.
    w1 = build_workload(model, 1, 1, 1, False, 8, 1)
    assert flops[(4, 4)] == pytest.approx(sum(g.flops for g in _expert_gemms(w1)) / 4, rel=1e-6)


def test_grouped_gemm_is_one_kernel_over_all_tiles(engine):
    dev = _device(engine.scenario(MIXTRAL))
    # One expert: the grouped GEMM is the plain GEMM.
    for m, n, k in ((4096, 28672, 4096), (64, 1536, 7168), (8, 512, 512)):
        assert grouped_gemm_time(dev, m, n, k, 1) == gemm_time(dev, m, n, k)
    # 32 small experts: one wave schedule over 32x16 tiles instead of 32 GEMMs of 16 tiles on
    # 132 SMs each (the weights still have to be read, so HBM bounds the gain).
    m, n, k, e = 64, 2048, 2048, 32
    grouped, separate = grouped_gemm_time(dev, m, n, k, e), e * gemm_time(dev, m, n, k)
    assert grouped < 0.8 * separate
    assert grouped >= e * (m * k + k * n) * dev.in_bytes / dev.hbm_Bps
    # Tiny problems: the grouped kernel is one floor, not e floors.
    assert grouped_gemm_time(dev, 8, 64, 64, e) == pytest.approx(dev.kernel_min_s)
    assert e * gemm_time(dev, 8, 64, 64) == pytest.approx(e * dev.kernel_min_s)


def test_load_imbalance_scales_the_busiest_ranks_expert_work(engine):
    base = engine.scenario(MIXTRAL)
    skew = _with_moe(base, load_imbalance=1.5)
    dev = _device(base)
    w0 = build_workload(base.model, 1, 1, 1, False, 8, 1)
    w1 = build_workload(skew.model, 1, 1, 1, False, 8, 1)
    for g0, g1 in zip(_expert_gemms(w0), _expert_gemms(w1), strict=True):
        assert g1.m == pytest.approx(1.5 * g0.m)
    f0, b0, _, _ = sublayer_times(dev, w0.sublayers["moe"])
    f1, b1, _, _ = sublayer_times(dev, w1.sublayers["moe"])
    # The expert share of the layer (grouped GEMMs, their activation traffic) grows by half.
    expert = sum(sum(compute.gemm_pass_times(dev, g)) for g in _expert_gemms(w0))
    mlp_act = 3.0 * base.model.moe.expert_ffn * w0.tokens * base.model.moe.top_k * 2.0 / dev.hbm_Bps * 3.0
    assert (f1 + b1) - (f0 + b0) == pytest.approx(0.5 * (expert + mlp_act), rel=0.03)
    # The all-to-all carries the busiest rank's copies, and the step is slower.
    e0, e1 = engine.evaluate(base), engine.evaluate(skew)
    assert e1.bytes_per_step["ep"] == pytest.approx(1.5 * e0.bytes_per_step["ep"], rel=1e-9)
    assert e1.step_time_s > e0.step_time_s
    # The MFU convention counts the balanced work: model FLOPs do not change.
    assert e1.model_flops_per_step == pytest.approx(e0.model_flops_per_step, rel=1e-12)


def test_pad_to_capacity_sizes_expert_gemms_at_capacity(engine):
    base = engine.scenario(MIXTRAL)

    def m_of(scn):
        return _expert_gemms(build_workload(scn.model, 1, 1, 1, False, 8, 1))[0].m

    balanced = m_of(base)
    # Dropping without padding: the busiest expert is capped at capacity, the GEMM follows the load.
    assert m_of(_with_moe(base, capacity_factor=1.25)) == balanced
    assert m_of(_with_moe(base, capacity_factor=1.25, load_imbalance=2.0)) == pytest.approx(1.25 * balanced)
    # Padded: capacity rows whatever was routed or dropped.
    padded = [m_of(_with_moe(base, capacity_factor=1.25, pad_to_capacity=True, load_imbalance=li))
              for li in (1.0, 1.3, 2.0)]
    assert padded == [pytest.approx(1.25 * balanced)] * 3
    half = [m_of(_with_moe(base, capacity_factor=0.5, pad_to_capacity=True, load_imbalance=li)) for li in (1.0, 3.0)]
    assert half == [pytest.approx(0.5 * balanced)] * 2
    # Padding is priced: it is slower than dropless balanced routing.
    padded_scn = _with_moe(base, capacity_factor=1.25, pad_to_capacity=True)
    assert engine.evaluate(padded_scn).step_time_s > engine.evaluate(_with_moe(base, capacity_factor=1.25)).step_time_s


def test_bad_moe_inputs_are_named(engine):
    spec = {**MIXTRAL, "model": {**_model_dict(engine), "moe": {**_model_dict(engine)["moe"], "load_imbalance": 0.8}}}
    with pytest.raises(SpecError) as err:
        engine.scenario(spec)
    assert "model.moe.load_imbalance" in str(err.value)
    spec = {**MIXTRAL, "model": {**_model_dict(engine), "moe": {**_model_dict(engine)["moe"], "pad_to_capacity": True}}}
    with pytest.raises(SpecError) as err:
        engine.scenario(spec)
    assert "model.moe.pad_to_capacity" in str(err.value)


def _model_dict(engine):
    m = engine.scenario(MIXTRAL).model
    d = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if getattr(m, f.name) is not None}
    d["moe"] = {f.name: getattr(m.moe, f.name) for f in dataclasses.fields(m.moe) if getattr(m.moe, f.name) is not None}
    return d


def test_router_and_permute_run_as_floored_kernels(engine):
    base = engine.scenario(MIXTRAL)
    dev = _device(base)
    sl = build_workload(base.model, 1, 1, 1, False, 8, 1).sublayers["moe"]
    fwd, bwd = kernel_times(dev, sl.kernels)
    # Four router kernels, permute + unpermute; one expert per rank: no regrouping.
    assert fwd >= 6 * dev.kernel_min_s
    assert bwd >= 5 * dev.kernel_min_s
    # Tiny micro-batch: every kernel sits on its floor.
    tiny = dataclasses.replace(base.model, seq_len=8)
    fwd_t, _ = kernel_times(dev, build_workload(tiny, 1, 1, 1, False, 8, 1).sublayers["moe"].kernels)
    assert fwd_t == pytest.approx(6 * dev.kernel_min_s)
    # More than one local expert behind Megatron's all-to-all: two sort-chunks kernels more;
    # DeepEP lays out its send buffers in the dispatch kernel and regroups nothing, so it keeps
    # one permute and one unpermute of the received copies (Megatron-Core _DeepepManager).
    tiny2 = build_workload(tiny, 1, 1, 1, False, 2, 1).sublayers["moe"]
    assert kernel_times(dev, tiny2.kernels, "alltoall")[0] == pytest.approx(8 * dev.kernel_min_s)
    assert kernel_times(dev, tiny2.kernels, "deepep")[0] == pytest.approx(6 * dev.kernel_min_s)
    # Large: DeepEP moves each routed copy through HBM twice (permute, unpermute), the
    # all-to-all dispatcher four times (permute, sort-chunks, sort-chunks back, unpermute).
    sl2 = build_workload(base.model, 1, 1, 1, False, 2, 1).sublayers["moe"]
    a2a, dpe = kernel_times(dev, sl2.kernels, "alltoall")[0], kernel_times(dev, sl2.kernels, "deepep")[0]
    router = 4 * max(sl2.kernels[0].bytes_each / dev.hbm_Bps, dev.kernel_min_s)
    assert (a2a - router) == pytest.approx(2 * (dpe - router), rel=1e-9)


def test_ssd_is_priced_as_matmuls_and_memory_not_attention(engine):
    scn = engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 8},
                           "model": {"layers": 4, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 4096,
                                     "hybrid": {"pattern": "M*M-"}},
                           "plan": {"tp": 1, "pp": 1, "gbs": 8, "mbs": 1}})
    dev = _device(scn)
    sl = build_workload(scn.model, 1, 1, 1, False, 1, 1).sublayers["mamba"]
    fwd, bwd = ssd_times(dev, sl)
    slow_attention = dataclasses.replace(dev, attn_fwd_eff=dev.attn_fwd_eff / 4, attn_bwd_eff=dev.attn_bwd_eff / 4)
    assert ssd_times(slow_attention, sl) == (fwd, bwd)
    assert fwd >= 5 * dev.kernel_min_s and bwd >= 12 * dev.kernel_min_s
    assert fwd >= sl.ssm_bytes / dev.hbm_Bps
    assert fwd >= sl.ssm_flops / (dev.attn_peak_flops * dev.gemm_eff)
    # A short sequence is floored by its kernels.
    short = dataclasses.replace(scn.model, seq_len=64)
    sl_s = build_workload(short, 1, 1, 1, False, 1, 1).sublayers["mamba"]
    assert ssd_times(dev, sl_s) == (pytest.approx(5 * dev.kernel_min_s), pytest.approx(12 * dev.kernel_min_s))
