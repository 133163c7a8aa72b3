"""Fabric models behave as their physics says."""

from __future__ import annotations

import pytest

from tests.conftest import base_scenario


def _cluster_scn(engine, **cluster):
    data = base_scenario()
    data["cluster"].update(cluster)
    return engine.scenario(data)


def test_nvlink_generation_bandwidths(engine):
    h100 = engine.hierarchy(_cluster_scn(engine, system="DGX-H100", num_gpus=128))
    a100 = engine.hierarchy(_cluster_scn(engine, system="DGX-A100", num_gpus=128))
    assert h100.tiers[0].bw_Bps / 1e9 == pytest.approx(450 * 0.82)   # NVLink 4, NCCL-achievable
    assert a100.tiers[0].bw_Bps / 1e9 == pytest.approx(300 * 0.775)  # NVLink 3
    assert h100.tiers[0].reduction == "nvls" and a100.tiers[0].reduction == ""


def test_nvl72_domain_keeps_tp_and_ep_on_nvlink(engine):
    scn = engine.scenario({"cluster": {"system": "GB200-NVL72", "num_gpus": 128}, "model": "mixtral-8x7b",
                           "plan": {"tp": 4, "ep": 8, "gbs": 128}})
    est = engine.evaluate(scn)
    assert est.fabric["tiers"][0]["span_gpus"] == 72
    from twin.core.interfaces import stride_of
    from twin.core.topology import place_group

    span = place_group(*stride_of(scn.plan, scn.dp, "ep"), engine.hierarchy(scn))
    assert span.m == 1  # 8 experts x stride 4 = 32 GPUs inside one 72-GPU domain


def test_roce_ecmp_and_congestion_reduce_bandwidth_beyond_the_leaf(engine):
    params = {"ecmp_flows_per_pair": 1, "congestion_control": "dcqcn"}
    scn = _cluster_scn(engine, system="DGX-H100", num_gpus=4096, scale_out={"fabric": "roce", "params": params})
    tiers = engine.hierarchy(scn).tiers
    assert tiers[2].bw_Bps < tiers[1].bw_Bps  # ECMP collisions only beyond the leaf
    sprayed = _cluster_scn(engine, system="DGX-H100", num_gpus=4096,
                           scale_out={"fabric": "roce", "params": {"packet_spraying": True}})
    assert engine.hierarchy(sprayed).tiers[2].bw_Bps == pytest.approx(
        engine.hierarchy(sprayed).tiers[1].bw_Bps)


def test_cpo_radix_reduces_tiers_and_power(engine):
    def fabric(kind):
        data = {"cluster": {"system": "DGX-B200", "num_gpus": 32768, "optics": {"kind": kind}},
                "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 1, "gbs": 4096}}
        return engine.evaluate(data).fabric["optics"]

    plug, cpo = fabric("pluggable"), fabric("cpo")
    assert cpo["tiers"] < plug["tiers"]          # radix 144 vs 64: 4,096 nodes per rail need 3 tiers at 64, 2 at 144
    assert cpo["optics_power_kw"] < plug["optics_power_kw"] / 3
    assert cpo["expected_link_failures_per_year"] < plug["expected_link_failures_per_year"]


def test_the_scale_out_report_is_the_tree_the_optics_build(engine):
    """Co-packaged optics force 144-port switches: the scale-out fabric reports that tree (one
    switch count per cluster, the one the hierarchy and the energy model use)."""
    def fabric(kind):
        data = {"cluster": {"system": "DGX-B200", "num_gpus": 32768, "optics": {"kind": kind},
                            "power": {"switch_w": [1000.0]}},
                "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 1, "gbs": 4096}}
        est = engine.evaluate(data)
        return est.fabric, est.energy.switch_j / est.step_time_s

    (plug, plug_w), (cpo, cpo_w) = fabric("pluggable"), fabric("cpo")
    assert plug["scale_out"]["switch_radix"] == 64 and cpo["scale_out"]["switch_radix"] == 144
    for report in (plug, cpo):
        assert report["scale_out"]["switches_per_tier"] == report["optics"]["switches_per_tier"]
        assert report["scale_out"]["tiers"] == report["optics"]["tiers"] == len(report["tiers"]) - 1
    # 1 kW a switch: the switch power is the switch count of the tree as built.
    assert plug_w == pytest.approx(1000.0 * sum(plug["scale_out"]["switches_per_tier"]))
    assert cpo_w == pytest.approx(1000.0 * sum(cpo["scale_out"]["switches_per_tier"])) and cpo_w < plug_w


def test_cxl_offload_moves_optimizer_out_of_hbm_and_costs_time(engine):
    import yaml

    from tests.conftest import EXAMPLES

    data = yaml.safe_load((EXAMPLES / "llama3-70b-cxl-offload.yaml").read_text())
    with_offload = engine.evaluate(data)
    data["plan"]["offload"] = {"optimizer": "none"}
    without = engine.evaluate(data)
    assert with_offload.memory.optimizer == 0
    assert with_offload.memory.offloaded == pytest.approx(without.memory.optimizer)
    assert with_offload.breakdown.offload_s > 0
    assert with_offload.step_time_s > without.step_time_s


def test_cxl_bandwidth_over_device_limit_is_rejected(engine):
    from twin.core.errors import SpecError

    data = base_scenario()
    data["cluster"]["memory_pool"] = {"bandwidth_GBps_per_node": 10_000, "devices_per_node": 2}
    with pytest.raises(SpecError) as info:
        engine.scenario(data)
    assert info.value.field == "cluster.memory_pool.bandwidth_GBps_per_node"


def test_sharp_speeds_up_data_parallel_all_reduce(engine):
    def step(sharp):
        data = {"cluster": {"system": "DGX-A100", "num_gpus": 512, "scale_out": {"sharp": sharp}},
                "model": "llama3.1-8b", "plan": {"tp": 1, "gbs": 512, "optimizer_sharding": "none",
                                                  "overlap": {"grad_reduce": False}}}
        return engine.evaluate(data).breakdown.exposed_comm_s["dp"]

    assert step(True) < step(False)
