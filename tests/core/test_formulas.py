"""Unit tests of each formula against hand-worked numbers."""

from __future__ import annotations

import dataclasses
import math

import pytest
from twin_plugins.roce import ecmp_efficiency

from twin.core.collectives import bus_factor, collective_cost
from twin.core.compute import shape_efficiency
from twin.core.fattree import build_fat_tree, tiers_needed
from twin.core.memory import lora_trainable_fraction, shard_factors
from twin.core.schedule import stage_layers
from twin.core.specs import Cluster, Model, Plan, Scenario
from twin.core.step import model_flops_per_step
from twin.core.topology import Hierarchy, Tier, place_group
from twin.core.workload import build_workload, total_params

GB = 1e9


def flat_hierarchy(up_GBps=370.0, nic_GBps=47.0, domain=8, nvls=0.0, sharp=False, over=1.0):
    up = Tier("nvlink", "nvlink", domain, up_GBps * GB, 1e-6, reduction="nvls" if nvls else "",
              nvls_bw_Bps=nvls * GB)
    leaf = Tier("leaf", "ib", 256, nic_GBps * GB, 1e-6, reduction="sharp" if sharp else "")
    spine = Tier("spine", "ib", 1 << 20, nic_GBps * GB, 2e-6, oversubscription=over, reduction="sharp" if sharp else "")
    return Hierarchy(tiers=(up, leaf, spine), gpus_per_node=domain)


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert bus_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert bus_factor("broadcast", 8) == 1.0
    assert bus_factor("all_reduce", 1) == 1.0


def test_large_ring_all_reduce_is_bandwidth_bound():
    h = flat_hierarchy()
    span = place_group(8, 1, h)
    size = 8 * 2**30
    cost = collective_cost("all_reduce", size, span, h, algorithm="ring")
    # ring: 2(n-1)/n * S / B + NCCL Simple-protocol latency 8.4 us + 2(n-1) * 3.4 us (tuning.cc)
    expected = 2 * 7 / 8 * size / (370 * GB) + (8.4 + 14 * 3.4) * 1e-6
    assert cost.time_s == pytest.approx(expected, rel=1e-6)
    # Reported busbw is what nccl-tests would print at this size (latency included); the
    # asymptote (the link bandwidth) is the bottleneck.
    assert cost.busbw_Bps == pytest.approx(size * 2 * 7 / 8 / expected, rel=1e-9)
    assert cost.bottleneck_bw_Bps / GB == pytest.approx(370, rel=1e-9)


def test_small_messages_report_the_bandwidth_they_achieve_not_the_asymptote():
    h = flat_hierarchy()
    span = place_group(8, 1, h)
    small = collective_cost("all_reduce", 64 * 1024, span, h)
    large = collective_cost("all_reduce", 1 << 30, span, h)
    assert small.busbw_Bps < 0.5 * large.busbw_Bps  # latency-bound at 64 KiB
    assert small.busbw_Bps == pytest.approx(64 * 1024 * 2 * 7 / 8 / small.time_s, rel=1e-9)


def test_multi_node_ring_is_limited_by_the_nics_of_each_node():
    h = flat_hierarchy()
    span = place_group(16, 1, h)  # 2 nodes x 8 GPUs
    cost = collective_cost("all_reduce", 4 * 2**30, span, h, algorithm="ring")
    assert cost.bottleneck_bw_Bps / GB == pytest.approx(8 * 47, rel=0.02)  # 8 NICs per node
    one_per_node = place_group(16, 8, h)  # a DP group with tp=8: one rank per node
    cost1 = collective_cost("all_reduce", 4 * 2**30, one_per_node, h, algorithm="ring")
    assert cost1.bottleneck_bw_Bps / GB == pytest.approx(47, rel=0.02)


def test_nvls_uses_in_switch_reduction_bandwidth():
    h = flat_hierarchy(nvls=273.0)
    span = place_group(8, 1, h)
    cost = collective_cost("all_reduce", 8 * 2**30, span, h)
    assert cost.algorithm == "nvls"
    assert cost.busbw_Bps / GB == pytest.approx(273 * 2 * 7 / 8, rel=0.01)  # busbw = algbw * 2(n-1)/n


def test_sharp_halves_inter_node_traffic():
    ring = collective_cost("all_reduce", 4 * 2**30, place_group(64, 8, flat_hierarchy()), flat_hierarchy(),
                           algorithm="ring")
    h = flat_hierarchy(sharp=True)
    sharp = collective_cost("all_reduce", 4 * 2**30, place_group(64, 8, h), h, algorithm="sharp")
    assert sharp.time_s == pytest.approx(ring.time_s / (2 * 63 / 64), rel=0.05)


def test_oversubscription_slows_all_to_all_across_it():
    flat = flat_hierarchy()
    tapered = flat_hierarchy(over=4.0)
    span = place_group(1024, 1, flat)
    t_flat = collective_cost("all_to_all", 2**30, span, flat).time_s
    t_tapered = collective_cost("all_to_all", 2**30, place_group(1024, 1, tapered), tapered).time_s
    crossing = 1 - 256 / 1024  # share of peers outside the leaf
    assert t_tapered / t_flat == pytest.approx(4.0 * crossing, rel=0.05)


def test_group_placement():
    h = flat_hierarchy()
    tp = place_group(8, 1, h)
    assert (tp.k, tp.m, tp.top) == (8, 1, 0)
    dp = place_group(64, 8, h)  # stride 8: one member per node, 64 nodes
    assert (dp.k, dp.m, dp.nodes) == (1, 64, 64)
    assert dp.top == 2  # 512 GPUs exceeds the 256-GPU leaf


def test_fat_tree_sizes_from_radix():
    # Radix 64: 64 endpoints on one switch, 64^2/2 = 2048 on two tiers, 64^3/4 = 65536 on three.
    assert tiers_needed(64, 64) == 1
    assert tiers_needed(2048, 64) == 2
    assert tiers_needed(2049, 64) == 3
    tree = build_fat_tree(2048, 64)
    assert tree.levels[0].switches == 64  # 32 endpoints per non-blocking leaf
    assert tree.levels[1].switches == 32  # 2048 uplinks over 64-port spines
    tapered = build_fat_tree(2048, 64, oversubscription=(3.0,))
    assert tapered.levels[0].up_links == math.ceil(2048 / 3)


def test_ecmp_collision_efficiency():
    # Balls into bins: mean load c, fullest of U bins ~ c + sqrt(2 c ln U).
    c, u = 16, 32
    assert ecmp_efficiency(c * u, u) == pytest.approx(c / (c + math.sqrt(2 * c * math.log(u))))
    assert ecmp_efficiency(10, 1) == 1.0
    assert ecmp_efficiency(4 * 32, 32) < ecmp_efficiency(64 * 32, 32)  # more flows spread better


def test_shape_efficiency_penalises_partial_tiles_and_waves():
    assert shape_efficiency(128 * 132, 256, 132) == pytest.approx(1.0)  # exactly one full wave of 128x256
    assert shape_efficiency(64, 64, 132) < 0.05                       # one tile on 132 SMs
    assert shape_efficiency(8192, 8192, 132) > 0.9


def test_model_flops_match_megatron_formula():
    # Megatron-Core num_floating_point_operations for GPT (MHA, 4h MLP, untied head):
    # 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    model = Model(layers=24, hidden=2048, heads=16, vocab=131072, seq_len=4096)
    cluster = Cluster(gpu=_gpu(), num_gpus=8)
    scn = Scenario(cluster=cluster, model=model, plan=Plan(gbs=192))
    b, s, l, h, v = 192, 4096, 24, 2048, 131072
    megatron = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    assert model_flops_per_step(scn) == pytest.approx(megatron, rel=1e-3)


def test_parameter_count_of_llama3_405b(engine):
    scn = engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-405b",
                           "plan": {"tp": 8, "gbs": 8}})
    assert total_params(scn.model) / 1e9 == pytest.approx(405.8, rel=0.01)  # Llama 3 paper: 405B


def test_multi_token_prediction_module_adds_a_block_and_a_head(engine):
    scn = engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "deepseek-v3",
                           "plan": {"tp": 1, "ep": 8, "pp": 8, "gbs": 64}})
    assert scn.model.mtp_layers == 1
    without = dataclasses.replace(scn, model=dataclasses.replace(scn.model, mtp_layers=0))
    # DeepSeek-V3 report §4.2: 671B main model plus a 14B MTP module, which in the released
    # checkpoint carries its own copies of the embedding and head; the twin shares them.
    shared_copies = 2 * 129280 * 7168
    added = total_params(scn.model) - total_params(without.model)
    assert added / 1e9 == pytest.approx((14e9 - shared_copies) / 1e9, rel=0.08)
    assert total_params(without.model) / 1e9 == pytest.approx(671, rel=0.01)
    w = build_workload(scn.model, 1, 1, 1, False, 8, 1)
    w0 = build_workload(without.model, 1, 1, 1, False, 8, 1)
    # One head GEMM again plus one attention + MoE block and the 2h -> h projection.
    block = w0.sublayers["attention"].model_flops + w0.sublayers["moe"].model_flops
    proj = 2.0 * w0.tokens * 7168 * 2 * 7168
    assert w.head.model_flops == pytest.approx(2 * w0.head.model_flops + block + proj)
    # The module runs on the last pipeline stage, which becomes the bottleneck.
    assert engine.evaluate(scn).step_time_s > engine.evaluate(without).step_time_s * 1.05


def test_capacity_factor_below_one_drops_tokens(engine):
    base = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "mixtral-8x7b",
            "plan": {"tp": 1, "ep": 8, "pp": 1, "gbs": 64, "mbs": 1}}
    dropless = engine.scenario(base)
    moe = dropless.model.moe

    def with_factor(cf):
        return dataclasses.replace(dropless, model=dataclasses.replace(
            dropless.model, moe=dataclasses.replace(moe, capacity_factor=cf)))

    def expert_flops(scn):
        w = build_workload(scn.model, 1, 1, 1, False, 8, 1)
        return sum(g.flops for g in w.sublayers["moe"].gemms[1:3])

    half, roomy = with_factor(0.5), with_factor(1.25)
    assert expert_flops(half) == pytest.approx(expert_flops(dropless) / 2, rel=0.01)
    assert expert_flops(roomy) == expert_flops(dropless)  # balanced routing never overflows
    ep_bytes = {name: engine.evaluate(s).bytes_per_step["ep"] for name, s in
                (("dropless", dropless), ("half", half))}
    assert ep_bytes["half"] == pytest.approx(ep_bytes["dropless"] / 2, rel=0.01)


def test_lora_rank_sets_the_trainable_share(engine):
    base = {"cluster": {"system": "DGX-H100", "num_gpus": 16}, "model": "llama3.1-8b",
            "plan": {"tp": 1, "gbs": 64, "trainable": "lora", "lora_rank": 16}}
    low = engine.scenario(base)
    assert lora_trainable_fraction(low.model, low.plan) == pytest.approx(2 * 16 / 4096)
    base["plan"]["lora_rank"] = 64
    high = engine.scenario(base)
    assert lora_trainable_fraction(high.model, high.plan) == pytest.approx(4 * 2 * 16 / 4096)
    d_low, d_high = engine.evaluate(low), engine.evaluate(high)
    assert d_high.bytes_per_step["dp"] == pytest.approx(4 * d_low.bytes_per_step["dp"], rel=0.01)
    assert d_high.memory.optimizer > d_low.memory.optimizer


def test_tensor_parallel_splits_gemms():
    model = Model(layers=2, hidden=4096, heads=32, vocab=32000, seq_len=2048, ffn=16384)
    w1 = build_workload(model, 1, 1, 1, False, 1, 1)
    w8 = build_workload(model, 8, 1, 1, True, 1, 1)
    f1 = sum(g.flops for g in w1.sublayers["mlp"].gemms)
    f8 = sum(g.flops for g in w8.sublayers["mlp"].gemms)
    assert f8 == pytest.approx(f1 / 8)


def test_zero_sharding_factors():
    assert shard_factors("none", True, 8) == (1, 1, 1)
    assert shard_factors("distributed_optimizer", True, 8) == (1, 1, 8)
    assert shard_factors("zero2", True, 8) == (1, 8, 8)
    assert shard_factors("zero3", True, 8) == (8, 8, 8)
    assert shard_factors("fsdp", False, 8) == (1, 8, 8)  # FSDP without resharding keeps weights


def test_uneven_pipeline_split_shortens_first_and_last_stage():
    assert stage_layers(126, 16) == (7, 8, 7)  # Llama 3: one fewer layer on first and last stage
    assert stage_layers(96, 8) == (12, 12, 12)
    assert stage_layers(61, 4) == (15, 16, 15)  # 15 + 16 + 15 + 15: the one long stage is in the middle


def test_pipeline_bubble_fraction(engine):
    # 1F1B: bubble = (p-1) * t_mb; interleaved divides it by v (Narayanan et al. 2021).
    base = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "gpt3-175b",
            "plan": {"tp": 8, "pp": 8, "gbs": 32, "mbs": 1, "recompute": "full"}}
    e1 = engine.evaluate(base)
    base["plan"]["vp"] = 4
    e4 = engine.evaluate(base)
    assert e4.breakdown.bubble_s == pytest.approx(e1.breakdown.bubble_s / 4, rel=0.05)
    m = e1.microbatches
    t_mb = (e1.breakdown.compute_s + e1.breakdown.recompute_s) / m
    assert e1.breakdown.bubble_s == pytest.approx(7 * t_mb, rel=0.15)


def test_breakdown_adds_up_to_step_time(engine):
    for path in ("gpt3-175b-dgx-h100-ib.yaml", "llama3-405b-16k-roce.yaml", "deepseek-v3-gb200-nvl72.yaml",
                 "deepseek-v3-h800-dualpipe.yaml",
                 "llama3-70b-cxl-offload.yaml", "b200-cpo-fabric.yaml"):
        from tests.conftest import EXAMPLES

        est = engine.evaluate(EXAMPLES / path)
        assert est.breakdown.total_s == pytest.approx(est.step_time_s, rel=1e-9)
        assert 0 < est.mfu < 1


def _gpu():
    from twin.core.specs import GPU, ComputeEfficiency

    return GPU(name="test", generation="hopper", peak_tflops={"bf16": 1000.0}, hbm_gib=80, hbm_TBps=3.0,
               sm_count=132, efficiency=ComputeEfficiency(gemm={"bf16": 0.8}, attention_fwd=0.6,
                                                          attention_bwd=0.45, hbm=0.85))
