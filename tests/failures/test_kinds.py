"""One test per failure kind, each with a hand-checked expectation."""

from __future__ import annotations

import math

import pytest

from tests.conftest import EXAMPLES
from tests.failures.conftest import SMALL_FAT_TREE, with_failures
from twin.core.collectives import collective_cost
from twin.core.conditions import Conditions, degrade_hierarchy, degrade_scenario
from twin.core.errors import SpecError
from twin.core.failures.components import Impact
from twin.core.failures.fabric import go_back_n_efficiency, nic_share_factor
from twin.core.failures.inventory import THERMAL_THROTTLE_FRACTION
from twin.core.interfaces import stride_of
from twin.core.topology import place_group

GPT3 = EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"
LLAMA = EXAMPLES / "llama3-405b-16k-roce.yaml"


def _inject(fa, source, *injections, **failures):
    return fa.analyze(source, failures={**failures, "inject": list(injections)}).injections


# ------------------------------------------------------------------ link / switch down
def test_losing_one_of_four_leaf_uplinks_cuts_up_bandwidth_by_a_quarter(fa, engine):
    scn, _ = fa.load(SMALL_FAT_TREE)
    inv = fa.inventory(scn)
    uplinks = next(g for g in inv.groups if g.name == "link.leaf-spine")
    assert uplinks.attrs["uplinks_per_switch"] == 4  # radix 8, non-blocking: 4 down, 4 up
    (res,) = _inject(fa, SMALL_FAT_TREE, {"kind": "component_down", "component": "link.leaf-spine"})
    assert res["uplink_capacity_fraction"] == pytest.approx(0.75)
    assert res["outcome"] == "continue_degraded" and res["interrupts"] is False
    # The data-parallel ring (one GPU per node, every hop leaves its leaf) crosses the leaf
    # at full rate: its bus bandwidth drops to 3/4, a large all-reduce takes 4/3 as long.
    h = engine.hierarchy(scn)
    mode = next(m for m in inv.modes if m.component == "link.leaf-spine")
    span = place_group(*stride_of(scn.plan, scn.dp, "dp"), h)
    assert span.top == 2 and span.k == span.k_top  # crosses the spine, crossing fraction 1
    before = collective_cost("all_reduce", 4e9, span, h)
    after = collective_cost("all_reduce", 4e9, span, degrade_hierarchy(h, mode.degraded))
    assert after.bottleneck_bw_Bps == pytest.approx(0.75 * before.bottleneck_bw_Bps, rel=1e-6)
    assert after.time_s / before.time_s == pytest.approx(4 / 3, rel=0.01)
    # ...and the step's data-parallel communication slows by the same ratio.
    nominal = engine.evaluate(scn, validate=False)
    degraded = engine.evaluate(scn, validate=False, conditions=Conditions(impact=mode.degraded))
    assert degraded.comm_issued_s["dp"] / nominal.comm_issued_s["dp"] == pytest.approx(4 / 3, rel=0.02)
    assert degraded.comm_issued_s["tp"] == pytest.approx(nominal.comm_issued_s["tp"])  # inside the node


def test_spine_switch_down_halves_a_rail_leafs_uplinks_and_reroutes(fa):
    # GPT-3 example: per rail, 4 leaves x 32 uplinks over 2 spines -> 16 links to each spine.
    (res,) = _inject(fa, GPT3, {"kind": "switch_down", "tier": "spine"})
    assert res["uplink_capacity_fraction"] == pytest.approx(0.5)
    assert res["interrupts"] is False and res["outcome"] == "continue_degraded"
    assert res["lost_work_s"] == 0


def test_leaf_switch_down_on_a_rail_fabric_crashes_and_can_restart_over_the_other_rails(fa):
    (res,) = _inject(fa, GPT3, {"kind": "switch_down", "tier": "leaf"})
    assert res["interrupts"] is True
    options = {o["option"]: o for o in res["options"]}
    assert {"restart_replace", "restart_degraded", "restart_after_repair"} <= set(options)
    # 8 GPUs on 7 NICs: two GPUs share one NIC, so the worst rank keeps half its NIC.
    assert nic_share_factor(8, 8) == 0.5
    assert res["degraded"]["impact"]["tier_bw"] == [[1, 0.5], [2, 0.5]]
    assert res["degraded"]["slowdown"] > 1.0


# ------------------------------------------------------------------ component down (GPU)
def test_gpu_lost_without_spares_restarts_with_half_an_interval_of_lost_work(fa):
    rep = fa.analyze(GPT3, failures={"spare_nodes": 0, "inject": [{"kind": "component_down", "component": "gpu"}]})
    (res,) = rep.injections
    interval = rep.figures["checkpoint_interval_s"]
    assert res["interrupts"] is True
    assert res["outcome"] == "restart_after_repair"  # no spare, no elastic: wait for the node
    assert res["lost_work_s"] == pytest.approx(interval / 2)
    assert {"option": "restart_replace", "why": "needs 1 spare node(s), the job holds 0"} in res["not_possible"]
    # with the cluster's pool (default) the job restarts on a replacement instead
    (pool,) = _inject(fa, GPT3, {"kind": "component_down", "component": "gpu"})
    assert pool["outcome"] == "restart_replace" and pool["lost_work_s"] == pytest.approx(interval / 2)


def test_shrink_reshards_and_rechecks_memory(fa, engine):
    base = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-70b",
            "plan": {"tp": 8, "gbs": 64, "mbs": 1, "optimizer_sharding": "zero3"}}
    (res,) = _inject(fa, base, {"kind": "component_down", "component": "gpu"}, spare_nodes=0, elastic=True)
    shrink = next(o for o in res["options"] if o["option"] == "shrink")
    assert "dp 8 -> 7" in shrink["detail"]
    by_hand = engine.evaluate({**base, "cluster": {"system": "DGX-H100", "num_gpus": 56},
                               "plan": {**base["plan"], "gbs": 56}})
    nominal = engine.evaluate(base)
    # ZeRO-3 shards optimizer states over dp: 8 -> 7 replicas grows them by 8/7.
    assert by_hand.memory.optimizer / nominal.memory.optimizer == pytest.approx(8 / 7)
    assert shrink["throughput_fraction"] == pytest.approx(by_hand.tokens_per_s / nominal.tokens_per_s)
    # With pipeline stages the lost node takes half of dp=2 away and ZeRO-3 no longer fits.
    tight = {**base, "cluster": {"system": "DGX-H100", "num_gpus": 32}, "plan": {**base["plan"], "pp": 2}}
    (res,) = _inject(fa, tight, {"kind": "component_down", "component": "gpu"}, spare_nodes=0, elastic=True)
    why = dict((o["option"], o["why"]) for o in res["not_possible"])["shrink"]
    assert "does not fit after resharding" in why


# ------------------------------------------------------------------ link degraded
def test_nic_link_at_half_its_lanes_halves_scale_out_bandwidth(fa, engine):
    scn, _ = fa.load(SMALL_FAT_TREE)
    (res,) = _inject(fa, SMALL_FAT_TREE, {"kind": "link_degraded", "component": "link.nic-leaf",
                                          "lanes_fraction": 0.5})
    assert res["degraded"]["impact"]["tier_bw"] == [[1, 0.5], [2, 0.5]]
    assert res["interrupts"] is False and res["outcome"] == "continue_degraded"
    h = engine.hierarchy(scn)
    span = place_group(*stride_of(scn.plan, scn.dp, "dp"), h)
    dh = degrade_hierarchy(h, Impact(tier_bw=((1, 0.5), (2, 0.5))))
    assert collective_cost("all_reduce", 4e9, span, dh).bottleneck_bw_Bps == pytest.approx(
        0.5 * collective_cost("all_reduce", 4e9, span, h).bottleneck_bw_Bps)


def test_high_ber_costs_go_back_n_retransmissions():
    # p = 1 - (1 - 1e-7)^(8 * 4158) = 3.32e-3; W = 100 packets in flight:
    # (1 - p) / (1 + 99 p) = 0.7501
    p = 1 - (1 - 1e-7) ** (8 * 4158)
    assert p == pytest.approx(3.32e-3, rel=0.01)
    assert go_back_n_efficiency(1e-7, 4158, 100) == pytest.approx((1 - p) / (1 + 99 * p))
    assert go_back_n_efficiency(1e-7, 4158, 100) == pytest.approx(0.750, abs=0.002)
    assert go_back_n_efficiency(0.0, 4158, 100) == 1.0
    assert go_back_n_efficiency(1e-12, 4158, 100) > 0.9999


def test_degraded_link_in_an_ecmp_group_slows_the_flows_hashed_onto_it(fa):
    # RoCE without spraying: a leaf uplink at half speed stays in the ECMP group, so the
    # ring whose flow hashed onto it runs at half speed beyond the leaf.
    (res,) = _inject(fa, LLAMA, {"kind": "link_degraded", "component": "link.leaf-spine", "speed_fraction": 0.5})
    loss = res["degraded"]["impact"]["uplinks"][0]
    assert loss["worst_link"] == 0.5
    assert res["degraded"]["slowdown"] > 1.01


def test_nvlink_link_and_nvswitch_planes(fa):
    (link, chip) = _inject(fa, GPT3, {"kind": "link_degraded", "component": "nvlink_link", "lanes_fraction": 0.5},
                           {"kind": "component_down", "component": "nvswitch"})
    assert link["degraded"]["impact"]["tier_bw"] == [[0, pytest.approx(17.5 / 18)]]
    # HGX H100: 18 links per GPU over 4 NVSwitch chips (5/4/4/5): losing the chip with 5
    # leaves 13 of 18, and NVLS (which needs every switch) is off.
    assert chip["interrupts"] is True
    assert chip["degraded"]["impact"]["tier_bw"] == [[0, pytest.approx(13 / 18)]]
    assert chip["degraded"]["impact"]["nvls"] is False
    assert chip["degraded"]["slowdown"] > 1.0


# ------------------------------------------------------------------ congestion
def test_ecmp_collision_episode_uses_balls_into_bins(fa, engine):
    from twin_plugins.roce import ecmp_efficiency

    (res,) = _inject(fa, LLAMA, {"kind": "congestion", "cause": "ecmp_collision", "duration_s": 600})
    # Llama 3: 64-port ToR, 1:1 -> 32 uplinks, E-ECMP with 16 flows per pair; the episode
    # collapses to one flow per pair.
    expected = ecmp_efficiency(1 * 32, 32) / ecmp_efficiency(16 * 32, 32)
    factors = {t: f for t, f in res["degraded"]["impact"]["tier_bw"]}
    assert set(factors) == {2, 3} and factors[2] == pytest.approx(expected)
    assert res["chosen"]["slow_s"] == 600


def test_pfc_storm_and_a_generic_congestion_episode(fa):
    storm, generic = _inject(fa, LLAMA, {"kind": "congestion", "cause": "pfc_storm"},
                             {"kind": "congestion", "cause": "incast", "fraction": 0.5, "duration_s": 30})
    assert storm["outcome"] == "continue_degraded" and storm["chosen"]["slow_s"] == pytest.approx(60)
    assert all(f == 0.25 for _, f in storm["degraded"]["impact"]["tier_bw"])
    assert generic["degraded"]["slowdown"] > 1.0
    with pytest.raises(SpecError, match=r"failures.inject\[0\].fraction"):
        _inject(fa, GPT3, {"kind": "congestion", "cause": "incast"})


# ------------------------------------------------------------------ stragglers
def test_thermal_throttle_straggler_paces_the_step_but_not_the_bubble(fa, engine):
    (res,) = _inject(fa, GPT3, {"kind": "straggler", "cause": "thermal_throttle"})
    assert pytest.approx(1590 / 1980) == THERMAL_THROTTLE_FRACTION
    nominal = engine.evaluate(GPT3)
    deg = res["degraded"]
    # compute-bound GEMMs at 80% clock take up to 1/0.8 as long; memory-bound parts less
    ratio = deg["breakdown"]["compute_s"] / nominal.breakdown.compute_s
    assert 1.15 < ratio <= 1 / THERMAL_THROTTLE_FRACTION + 1e-9
    # One slow GPU: every micro-batch of its stage slows, the other stages' fill/drain does
    # not, so the step is the all-slow step less the extra bubble.
    scn = engine.scenario(GPT3)
    all_slow = engine.evaluate(degrade_scenario(scn, Impact(compute=THERMAL_THROTTLE_FRACTION)), validate=False)
    assert all_slow.breakdown.bubble_s > nominal.breakdown.bubble_s
    assert deg["step_time_s"] == pytest.approx(
        all_slow.step_time_s - (all_slow.breakdown.bubble_s - nominal.breakdown.bubble_s))
    assert res["interrupts"] is False
    assert res["outcome"] in ("continue_degraded", "drain_and_replace")
    (slow_hbm,) = _inject(fa, GPT3, {"kind": "straggler", "cause": "slow_hbm", "fraction": 0.5})
    assert 1.0 < slow_hbm["degraded"]["slowdown"] < res["degraded"]["slowdown"]


# ------------------------------------------------------------------ CXL device lost
def test_cxl_device_lost_shrinks_the_pool_and_slows_the_offloaded_optimizer(fa, engine):
    src = EXAMPLES / "llama3-70b-cxl-offload.yaml"
    (res,) = _inject(fa, src, {"kind": "cxl_device_lost"})
    assert res["interrupts"] is True  # the optimizer state lived there
    assert res["degraded"]["impact"]["pool"] == pytest.approx(3 / 4)
    est = engine.evaluate(src)
    # The optimizer state's three flat copies each pay the pool's round trip (twin.core.offload),
    # which a lost device does not change; their bytes take 4/3 as long on 3/4 of the bandwidth.
    round_trips = 3 * est.details["offload"]["cxl_latency_us"] * 1e-6
    nominal = est.breakdown.offload_s
    assert res["degraded"]["breakdown"]["offload_s"] == pytest.approx(
        round_trips + (nominal - round_trips) * 4 / 3, rel=1e-9)
    with pytest.raises(SpecError, match="memory_pool"):
        _inject(fa, GPT3, {"kind": "cxl_device_lost"})


# ------------------------------------------------------------------ optics laser failure
def test_laser_failure_pluggable_vs_cpo(fa):
    cpo = EXAMPLES / "b200-cpo-fabric.yaml"
    nic, up = _inject(fa, cpo, {"kind": "laser_failure", "component": "link.nic-leaf"},
                      {"kind": "laser_failure", "component": "link.leaf-spine"})
    # One external laser module feeds 8 ports (144 ports / 18 modules): 8 NIC links at once.
    assert nic["component"] == "laser_source.leaf" and nic["interrupts"] is True
    replace = next(o for o in nic["options"] if o["option"] == "restart_replace")
    assert "8 node(s)" in replace["detail"]
    assert up["interrupts"] is False and up["uplink_capacity_fraction"] < 1.0
    plug = {"cluster": {"system": "DGX-H100", "num_gpus": 1024, "optics": {"kind": "pluggable"}},
            "model": "gpt3-175b", "plan": {"tp": 8, "pp": 8, "gbs": 1536}}
    (one,) = _inject(fa, plug, {"kind": "laser_failure", "component": "link.leaf-spine"})
    assert one["component"] == "link.leaf-spine" and one["mode"] == "optics"
    assert one["uplink_capacity_fraction"] == pytest.approx(31 / 32)
    with pytest.raises(SpecError, match=r"cluster\.optics"):
        _inject(fa, GPT3, {"kind": "laser_failure"})


def test_bad_injections_name_the_field(fa):
    with pytest.raises(SpecError, match=r"failures.inject\[0\].component: unknown component 'link.nope'"):
        _inject(fa, GPT3, {"kind": "component_down", "component": "link.nope"})
    with pytest.raises(SpecError, match=r"failures.inject\[0\].kind"):
        _inject(fa, GPT3, {"kind": "meteor_strike"})
    with pytest.raises(SpecError, match=r"lanes_fraction < 1"):
        _inject(fa, GPT3, {"kind": "link_degraded", "component": "link.nic-leaf"})
    with pytest.raises(SpecError, match=r"failures.inject\[0\].tier"):
        _inject(fa, GPT3, {"kind": "switch_down", "tier": "core"})  # a 2-tier fabric
    assert math.isfinite(fa.analyze(with_failures(SMALL_FAT_TREE)).figures["mean_time_between_interruptions_h"])
