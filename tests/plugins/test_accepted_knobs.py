"""Every knob the schema accepts changes the answer or is refused, naming the field (issue 36):
the four that used to be accepted and ignored.
"""

from __future__ import annotations

import pytest

from tests.conftest import base_scenario
from twin.core.errors import SpecError


def _scn(engine, **cluster):
    data = base_scenario()
    data["cluster"].update(cluster)
    return engine.scenario(data)


def _refused(engine, field: str, **cluster) -> str:
    with pytest.raises(SpecError) as err:
        engine.hierarchy(_scn(engine, **cluster))
    assert err.value.field == field
    return err.value.rule


def test_nvlink_hop_latency_is_refused_with_the_reason(engine):
    rule = _refused(engine, "cluster.scale_up.latency_us", system="DGX-H100", num_gpus=64,
                    scale_up={"fabric": "nvlink", "latency_us": 3.0})
    assert "hwLat NVLINK" in rule


def test_an_nvlink_generation_other_than_the_gpus_is_refused(engine):
    rule = _refused(engine, "cluster.scale_up.generation", system="DGX-H100", num_gpus=64,
                    scale_up={"fabric": "nvlink", "generation": 5, "domain_gpus": 8})
    assert "NVLink 4" in rule and "link_GBps" in rule
    # the GPU's own generation is accepted, and a stated link bandwidth is the what-if that moves it
    own = engine.hierarchy(_scn(engine, system="DGX-H100", num_gpus=64,
                                scale_up={"fabric": "nvlink", "generation": 4, "domain_gpus": 8}))
    faster = engine.hierarchy(_scn(engine, system="DGX-H100", num_gpus=64,
                                   scale_up={"fabric": "nvlink", "generation": 4, "domain_gpus": 8,
                                             "link_GBps": 900}))
    assert faster.tiers[0].bw_Bps == pytest.approx(2 * own.tiers[0].bw_Bps)


def test_a_taper_for_uplinks_the_tree_does_not_have_is_refused(engine):
    # 1,024 GPUs at radix 64 need two tiers: a third entry tapers uplinks above the spine
    rule = _refused(engine, "cluster.scale_out.oversubscription[1]", system="DGX-H100", num_gpus=1024,
                    scale_out={"fabric": "infiniband", "oversubscription": [2, 4]})
    assert "2 tier(s)" in rule and "tier_spans" in rule
    # a non-blocking entry there changes nothing and is accepted; stating the tiers builds the tapered tier
    engine.hierarchy(_scn(engine, system="DGX-H100", num_gpus=1024,
                          scale_out={"fabric": "infiniband", "oversubscription": [2, 1]}))
    built = engine.hierarchy(_scn(engine, system="DGX-H100", num_gpus=1024,
                                  scale_out={"fabric": "infiniband", "oversubscription": [2, 4], "tiers": 3,
                                             "tier_spans": [64, 256, 1024]}))
    assert built.tiers[-1].oversubscription == pytest.approx(8.0)


def test_static_routing_efficiency_needs_static_routing(engine):
    so = {"fabric": "infiniband", "params": {"static_routing_efficiency": 0.8}}
    rule = _refused(engine, "cluster.scale_out.params.static_routing_efficiency", system="DGX-H100",
                    num_gpus=1024, scale_out=so)
    assert "adaptive_routing: false" in rule
    static = {**so, "adaptive_routing": False}
    lossy = engine.hierarchy(_scn(engine, system="DGX-H100", num_gpus=1024, scale_out=static))
    default = engine.hierarchy(_scn(engine, system="DGX-H100", num_gpus=1024,
                                    scale_out={"fabric": "infiniband", "adaptive_routing": False}))
    assert lossy.tiers[2].bw_Bps < default.tiers[2].bw_Bps  # 0.8 against the default 0.95
    _refused(engine, "cluster.scale_out.params.static_routing_efficiency", system="DGX-H100", num_gpus=1024,
             scale_out={**static, "params": {"static_routing_efficiency": 1.5}})
