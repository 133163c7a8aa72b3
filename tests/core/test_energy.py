"""Energy and cost of a step (twin.core.energy): by component, adding up, sourced inputs,
every input validated and changing the answer, and no cost without prices.

The 1,024-GPU H100 step is ``examples/energy-h100-1024.yaml`` (GPT-3 175B on 128 DGX H100
nodes, pluggable optics); ``twin predict examples/energy-h100-1024.yaml`` prints it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from twin.core.errors import SpecError, reason_of
from twin.core.specs import YEAR_S
from twin.engine import Engine
from twin.wire.convert import estimate_from_message, estimate_to_message

EXAMPLE = EXAMPLES / "energy-h100-1024.yaml"
SMALL = {"cluster": {"system": "DGX-H100", "num_gpus": 64, "optics": {"kind": "pluggable"}},
         "model": "llama3.1-8b", "plan": {"tp": 2, "pp": 2, "gbs": 256}}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


def with_cluster(base: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in cluster.items():
        if isinstance(value, dict) and isinstance(out["cluster"].get(key), dict):
            out["cluster"][key].update(value)
        else:
            out["cluster"][key] = value
    return out


def example(engine: Engine, **cluster: Any) -> Any:
    from twin.core.scenario_io import read_mapping

    return engine.evaluate(with_cluster(read_mapping(EXAMPLE), **cluster))


def test_a_1024_gpu_h100_step_by_component(engine):
    est = engine.evaluate(EXAMPLE)
    e = est.energy
    # GPUs at TDP while busy (and, with no waiting power given, while waiting: said so)
    assert e.gpu_j == pytest.approx(1024 * 700.0 * est.step_time_s, rel=1e-12)
    assert e.assumed and "gpu_idle_w" in e.assumed[0]
    # 128 nodes x 8 ConnectX-7 at 24.8 W; hosts at the rest of the rated 10.2 kW node power
    assert e.nic_j == pytest.approx(128 * 8 * 24.8 * est.step_time_s, rel=1e-12)
    assert e.host_j == pytest.approx(128 * 4401.6 * est.step_time_s, rel=1e-12)
    # pluggable optics at 15 pJ/bit on 2,048 links of 400 Gb/s each way (8 rails x 2 tiers x 128)
    assert e.optics_j == pytest.approx(2048 * 400e9 * 2 * 15e-12 * est.step_time_s, rel=1e-12)
    assert e.switch_j == 0 and any("switch_w" in n for n in e.not_counted)   # no datasheet figure shipped
    assert e.cxl_j == 0 and e.facility_j == 0 and e.pue == 1.0
    shares = {k: v / e.total_j for k, v in e.parts_j.items()}
    assert shares["gpu"] > 0.5 and shares["host"] > shares["nic"] > 0 and shares["optics"] > 0
    assert est.cost is None


def test_the_node_draws_the_rated_10_2_kw_at_full_compute(engine):
    """The DGX-H100 preset is consistent with the DGX H100 user guide's 10.2 kW maximum."""
    cluster = engine.scenario(SMALL).cluster
    f = engine._model.power_facts(cluster)
    nodes = cluster.num_nodes
    assert (f.gpus * f.gpu_busy_w + f.nic_w + f.host_w) / nodes == pytest.approx(10_200.0, rel=1e-12)


def test_co_packaged_optics_lower_the_network_share(engine):
    plug = example(engine, optics={"kind": "pluggable"})
    cpo = example(engine, optics={"kind": "cpo"})

    def share(est: Any) -> float:
        return est.energy.network_j / est.energy.total_j

    assert cpo.energy.optics_j < plug.energy.optics_j / 3      # 4.5 vs 15 pJ/bit, and fewer links
    assert share(cpo) < share(plug)
    # radix 144 instead of 64: one tier of switches instead of two
    from twin.core.scenario_io import read_mapping

    counts = [engine._model.power_facts(engine.scenario(with_cluster(read_mapping(EXAMPLE), optics={"kind": k}))
                                       .cluster).counts["switches_per_tier"] for k in ("pluggable", "cpo")]
    assert len(counts[1]) < len(counts[0])
    with_switches = [example(engine, optics={"kind": k}, power={"switch_w": [500.0]}) for k in ("pluggable", "cpo")]
    assert with_switches[1].energy.switch_j < with_switches[0].energy.switch_j
    assert share(with_switches[1]) < share(with_switches[0])


def test_the_energy_adds_up(engine):
    """Components sum to the total; each is its power times its time."""
    scn = with_cluster(SMALL, num_gpus=1024, memory_pool={"capacity_gib_per_node": 512},
                       power={"gpu_idle_w": 120.0, "gpu_busy_fraction": 0.9, "switch_w": [400.0, 600.0],
                              "cxl_device_w": 12.0, "pue": 1.3})
    est = engine.evaluate(scn)
    e = est.energy
    cluster = engine.scenario(scn).cluster
    t = est.step_time_s
    assert math.fsum(e.parts_j.values()) == pytest.approx(e.total_j, rel=1e-12)
    assert e.gpu_busy_s + e.gpu_wait_s == pytest.approx(t, rel=1e-12)
    bd = est.breakdown
    assert e.gpu_busy_s == pytest.approx(bd.compute_s + bd.recompute_s + bd.optimizer_s
                                         + bd.overlap_interference_s, rel=1e-12)
    assert e.gpu_wait_s > 0                               # exposed communication and the bubble
    assert e.gpu_j == pytest.approx(1024 * (700 * 0.9 * e.gpu_busy_s + 120.0 * e.gpu_wait_s), rel=1e-12)
    assert e.nic_j == pytest.approx(128 * 8 * 24.8 * t, rel=1e-12)
    assert e.host_j == pytest.approx(128 * 4401.6 * t, rel=1e-12)
    assert e.cxl_j == pytest.approx(128 * 4 * 12.0 * t, rel=1e-12)
    report = engine._model.cluster_report(cluster, engine.hierarchy(engine.scenario(scn)))
    per_tier = report["optics"]["switches_per_tier"]
    assert len(per_tier) == 2 and e.switch_j == pytest.approx((per_tier[0] * 400 + per_tier[1] * 600) * t, rel=1e-12)
    assert e.optics_j == pytest.approx(report["optics"]["optics_power_kw"] * 1e3 * t, rel=1e-12)
    it = e.total_j - e.facility_j
    assert e.facility_j == pytest.approx(0.3 * it, rel=1e-12)
    assert e.average_power_w * t == pytest.approx(e.total_j, rel=1e-12)
    tokens = 256 * 8192                                   # gbs x seq_len
    assert e.joules_per_token * tokens == pytest.approx(e.total_j, rel=1e-12)
    assert e.tokens_per_joule * e.joules_per_token == pytest.approx(1.0, rel=1e-12)


def test_gpu_waiting_power_lowers_the_gpu_energy_by_the_waiting_time(engine):
    hot = engine.evaluate(SMALL).energy
    cool = engine.evaluate(with_cluster(SMALL, power={"gpu_idle_w": 100.0})).energy
    assert hot.gpu_wait_s == cool.gpu_wait_s > 0
    assert hot.gpu_j - cool.gpu_j == pytest.approx(64 * (700.0 - 100.0) * cool.gpu_wait_s, rel=1e-9)
    assert not cool.assumed and hot.assumed


@pytest.mark.parametrize(("section", "field", "value", "what"), [
    ("power", "gpu_busy_fraction", 0.8, "gpu_j"),
    ("power", "gpu_idle_w", 90.0, "gpu_j"),
    ("power", "nic_w", 30.0, "nic_j"),
    ("power", "switch_w", [450.0], "switch_j"),
    ("power", "host_w", 1000.0, "host_j"),
    ("power", "cxl_device_w", 15.0, "cxl_j"),
    ("power", "pue", 1.2, "facility_j"),
    ("prices", "usd_per_gpu_hour", 2.0, "cost"),
    ("prices", "usd_per_kwh", 0.1, "cost"),
])
def test_every_input_changes_the_answer(engine, section, field, value, what):
    base = with_cluster(SMALL, memory_pool={"capacity_gib_per_node": 512})
    before = engine.evaluate(base)
    after = engine.evaluate(with_cluster(base, **{section: {field: value}}))
    assert after.step_time_s == before.step_time_s          # energy inputs do not touch the step time
    if what == "cost":
        assert before.cost is None and after.cost is not None and after.cost.usd_per_step > 0
    else:
        assert getattr(after.energy, what) != getattr(before.energy, what)
        assert after.energy.total_j != before.energy.total_j


def test_capex_and_years_change_the_cost(engine):
    one = engine.evaluate(with_cluster(SMALL, prices={"capex_usd_per_gpu": 30000.0, "amortisation_years": 4.0}))
    two = engine.evaluate(with_cluster(SMALL, prices={"capex_usd_per_gpu": 30000.0, "amortisation_years": 2.0}))
    assert one.cost.hardware_usd == pytest.approx(30000.0 * 64 * one.step_time_s / (4 * YEAR_S), rel=1e-12)
    assert two.cost.hardware_usd == pytest.approx(2 * one.cost.hardware_usd, rel=1e-12)
    assert one.cost.electricity_usd == 0.0


def test_cost_from_the_prices_given_and_none_without(engine):
    est = engine.evaluate(with_cluster(SMALL, power={"pue": 1.25},
                                       prices={"usd_per_gpu_hour": 2.0, "usd_per_kwh": 0.1}))
    c, e = est.cost, est.energy
    assert c.hardware_usd == pytest.approx(2.0 * 64 * est.step_time_s / 3600, rel=1e-12)
    assert c.electricity_usd == pytest.approx(0.1 * e.total_j / 3.6e6, rel=1e-12)   # facility energy, PUE included
    assert c.usd_per_step == pytest.approx(c.hardware_usd + c.electricity_usd, rel=1e-12)
    assert c.usd_per_million_tokens == pytest.approx(c.usd_per_step / (256 * 8192) * 1e6, rel=1e-12)
    msg = estimate_to_message(est)
    assert msg.HasField("cost") and estimate_from_message(msg).cost == c and estimate_from_message(msg).energy == e
    bare = engine.evaluate(SMALL)
    assert bare.cost is None and bare.to_dict()["cost"] is None
    wire = estimate_to_message(bare)
    assert not wire.HasField("cost") and estimate_from_message(wire).cost is None
    rows = engine.evaluate_many([SMALL])
    assert math.isnan(rows.columns["cost_usd_per_step"][0]) and math.isnan(rows.columns["usd_per_million_tokens"][0])


@pytest.mark.parametrize(("cluster", "field"), [
    ({"power": {"gpu_idle_w": 800.0}}, "cluster.power.gpu_idle_w"),                    # above the busy power
    ({"power": {"gpu_busy_fraction": 0.5, "gpu_idle_w": 400.0}}, "cluster.power.gpu_idle_w"),
    ({"power": {"gpu_busy_fraction": 0.0}}, "cluster.power.gpu_busy_fraction"),
    ({"power": {"gpu_busy_fraction": 1.2}}, "cluster.power.gpu_busy_fraction"),
    ({"power": {"pue": 0.9}}, "cluster.power.pue"),
    ({"power": {"nic_w": -1}}, "cluster.power.nic_w"),
    ({"power": {"switch_w": [400.0, 500.0, 600.0]}}, "cluster.power.switch_w"),        # 1 switch tier here
    ({"power": {"cxl_device_w": 10.0}}, "cluster.power.cxl_device_w"),                 # no memory pool
    ({"power": {"watts": 3}}, "cluster.power.watts"),
    ({"prices": {"capex_usd_per_gpu": 30000.0}}, "cluster.prices.amortisation_years"),
    ({"prices": {"amortisation_years": 4.0}}, "cluster.prices.capex_usd_per_gpu"),
    ({"prices": {"usd_per_gpu_hour": 2.0, "capex_usd_per_gpu": 1.0, "amortisation_years": 3.0}},
     "cluster.prices.capex_usd_per_gpu"),
    ({"prices": {"usd_per_kwh": -0.1}}, "cluster.prices.usd_per_kwh"),
    ({"prices": {"amortisation_years": 0, "capex_usd_per_gpu": 1.0}}, "cluster.prices.amortisation_years"),
])
def test_bad_input_names_the_field_and_the_rule_on_both_paths(engine, cluster, field):
    scn = with_cluster(SMALL, **cluster)
    with pytest.raises(SpecError) as info:
        engine.evaluate(scn)
    assert info.value.field == field
    assert engine.evaluate_many([scn]).reason(0) == reason_of(info.value)


def test_power_figures_need_the_hardware_they_apply_to(engine):
    from twin.core.scenario_io import read_mapping

    torus = read_mapping(EXAMPLES / "torus-3d.yaml")        # a direct network: no switches
    engine.evaluate(torus)
    with pytest.raises(SpecError) as info:
        engine.evaluate(with_cluster(torus, power={"switch_w": [500.0]}))
    assert info.value.field == "cluster.power.switch_w" and "0" in str(info.value)
    one_box = {"cluster": {"system": "DGX-H100", "num_gpus": 8, "scale_out": None, "power": {"nic_w": 20.0}},
               "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 8}}
    with pytest.raises(SpecError) as info:
        engine.evaluate(one_box)
    assert info.value.field == "cluster.power.nic_w"


def test_predict_json_and_table_show_the_energy(engine):
    data = engine.evaluate(EXAMPLE).to_dict()
    assert data["energy"]["total_j"] > 0 and data["cost"] is None
    assert set(data["energy"]) >= {"gpu_j", "nic_j", "switch_j", "optics_j", "host_j", "cxl_j", "facility_j",
                                   "joules_per_token", "tokens_per_joule", "not_counted", "assumed"}
