"""Non-NVIDIA accelerators and scale-up fabrics (issue 38): AMD Infinity Fabric (xgmi), TPU ICI
(ici), AWS NeuronLink (neuronlink), Intel Gaudi's RoCE mesh (gaudi_roce) and UALink (ualink).

Each fabric through the conformance kit; the batch path against one scenario at a time on
every new system (bit for bit); properties of meshes and tori; every field the new schema
accepts either changes the answer or is refused naming it; the generation table covers every
generation; the reference reader reads and scores the new published runs.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import typing
from typing import Any

import pytest
import twin_plugins.gaudi as gaudi
import twin_plugins.ici as ici
import twin_plugins.neuronlink as neuronlink
import twin_plugins.ualink as ualink
import twin_plugins.xgmi as xgmi
import yaml

from tests.conftest import REFERENCE
from twin.api import SpecError, Tier, hookimpl, mesh_tier, torus_tier
from twin.core.accelerator_generations import FALLBACK_TUNING, GENERATIONS, generation_facts, nccl_tuning_key
from twin.core.cluster_specs import Generation
from twin.core.collectives import collective_cost
from twin.core.errors import TwinError
from twin.core.topology import Hierarchy, place_group
from twin.reference import validate_file
from twin.testing import (
    assert_batch_matches_one_by_one,
    assert_scale_up_fabric_conforms,
    assert_strategies_agree,
    engine_with,
)

MB = 1 << 20


class _Presets:
    """A plugin's presets alone (its fabric is blocked and registered again by the kit)."""

    def __init__(self, module: Any) -> None:
        self.module = module

    @hookimpl
    def twin_presets(self) -> dict[str, dict[str, dict[str, Any]]]:
        return self.module.twin_presets()


# (fabric, plugin name, cluster, plan) for the conformance kit: one of each fabric's systems.
CONFORMANCE = [
    (xgmi.XGMIFabric(), "xgmi", xgmi, {"system": "ND-MI300X-v5", "num_gpus": 64}, None),
    (ici.ICIFabric(), "ici", ici, {"system": "TPU-v5p-1024", "num_gpus": 512}, {"tp": 8, "gbs": 64}),
    (ici.ICIFabric(), "ici", ici, {"system": "TPU-v6e-256", "num_gpus": 256}, {"tp": 4, "gbs": 64}),
    (neuronlink.NeuronLinkFabric(), "neuronlink", neuronlink, {"system": "trn1.32xlarge", "num_gpus": 64},
     {"tp": 16, "gbs": 64}),
    (neuronlink.NeuronLinkFabric(), "neuronlink", neuronlink, {"system": "Trn2-UltraServer", "num_gpus": 128},
     {"tp": 16, "pp": 4, "gbs": 64}),
    (gaudi.GaudiRoCEFabric(), "gaudi", gaudi, {"system": "HLS-Gaudi3", "num_gpus": 64}, None),
    (ualink.UALinkFabric(), "ualink", xgmi,
     {"gpu": "MI355X", "num_gpus": 128, "gpus_per_node": 8, "scale_out": {"fabric": "roce"},
      "scale_up": {"fabric": "ualink", "domain_gpus": 64, "link_GBps": 800}}, None),
]


def _system_scale_up(engine: Any, cluster: dict[str, Any]) -> dict[str, Any]:
    """The cluster with its system's scale_up spelled out (the kit merges fields into it)."""
    if "system" not in cluster:
        return cluster
    scn = engine.scenario({"cluster": cluster, "model": "llama3.1-8b", "plan": {"gbs": 1024}})
    up = dataclasses.asdict(scn.cluster.scale_up)
    return {**cluster, "scale_up": {k: v for k, v in up.items() if v is not None and v != {}}}


@pytest.mark.parametrize(("fabric", "name", "module", "cluster", "plan"), CONFORMANCE,
                         ids=[f"{c[1]}-{c[3].get('system', c[3].get('gpu'))}" for c in CONFORMANCE])
def test_each_new_fabric_passes_the_conformance_kit(engine, fabric, name, module, cluster, plan):
    spelled = _system_scale_up(engine, cluster)
    # The plugin is blocked and its fabric registered by the kit; its presets come back alone.
    assert_scale_up_fabric_conforms(fabric, cluster=spelled, replace_builtin=name, plan=plan,
                                    plugins=[] if name == "ualink" else [_Presets(module)])


# ------------------------------------------------------------ batch equals one by one
SYSTEM_SCENARIOS: list[dict[str, Any]] = [
    {"name": "mi300x-dense", "cluster": {"system": "ND-MI300X-v5", "num_gpus": 256}, "model": "llama3.1-8b",
     "plan": {"tp": 2, "pp": 2, "vp": 2, "cp": 2, "gbs": 256, "mbs": 1}},
    {"name": "mi355x-moe", "cluster": {"system": "MI355X-8-RoCE", "num_gpus": 256}, "model": "mixtral-8x7b",
     "plan": {"tp": 2, "pp": 2, "ep": 8, "gbs": 256, "mbs": 1}},
    {"name": "tpu-v5p-fsdp", "cluster": {"system": "TPU-v5p-1024", "num_gpus": 512}, "model": "llama3.1-8b",
     "plan": {"tp": 4, "gbs": 512, "optimizer_sharding": "fsdp"}},
    {"name": "tpu-v6e-2slices", "cluster": {"system": "TPU-v6e-256", "num_gpus": 512,
                                            "scale_out": {"fabric": "roce", "nic_gbps": 100}},
     "model": "llama3.1-8b", "plan": {"tp": 8, "pp": 2, "gbs": 512, "mbs": 1}},
    {"name": "trn1-tp", "cluster": {"system": "trn1.32xlarge", "num_gpus": 128}, "model": "llama3.1-8b",
     "plan": {"tp": 16, "cp": 2, "gbs": 256, "mbs": 1}},
    {"name": "trn2-ultraserver", "cluster": {"system": "Trn2-UltraServer", "num_gpus": 256}, "model": "mixtral-8x7b",
     "plan": {"tp": 4, "pp": 4, "ep": 8, "gbs": 256, "mbs": 1}},
    {"name": "gaudi3-offload", "cluster": {"system": "HLS-Gaudi3", "num_gpus": 64,
                                           "memory_pool": {"capacity_gib_per_node": 2048,
                                                           "bandwidth_GBps_per_node": 256}},
     "model": "llama3.1-8b", "plan": {"tp": 2, "gbs": 128, "offload": {"optimizer": "cxl"}}},
    {"name": "gaudi2-fsdp", "cluster": {"system": "HLS-Gaudi2", "num_gpus": 64}, "model": "llama3.1-8b",
     "plan": {"tp": 2, "gbs": 128, "optimizer_sharding": "fsdp"}},
    {"name": "ualink-pod", "cluster": {"gpu": "MI355X", "num_gpus": 128, "gpus_per_node": 8,
                                       "scale_up": {"fabric": "ualink", "domain_gpus": 64, "params": {"lanes": 32}},
                                       "scale_out": {"fabric": "roce"}},
     "model": "llama3.1-8b", "plan": {"tp": 8, "pp": 2, "gbs": 256, "mbs": 1}},
]


def test_every_strategy_agrees_batch_and_one_by_one_on_the_new_systems(engine):
    """The kit over every installed strategy, in the new systems' scenarios (a failure too)."""
    assert_strategies_agree(engine, SYSTEM_SCENARIOS)


def test_one_batch_of_every_new_system_and_nvlink_matches_one_by_one(engine):
    """Switch, mesh and torus domains mixed in one batch: each row is its scenario's, bit for bit."""
    scns = [engine.scenario(s) for s in SYSTEM_SCENARIOS]
    scns.append(engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-8b",
                                 "plan": {"tp": 8, "pp": 2, "gbs": 256, "mbs": 1}}))
    more = []
    for s in scns:  # and each with its TP halved: a group that fills less of its domain
        if s.plan.tp >= 2:
            more.append(dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp=s.plan.tp // 2)))
    assert_batch_matches_one_by_one(engine, scns + more)


# ------------------------------------------------------------------- properties
def _hier(tier: Tier, per_node: int) -> Hierarchy:
    return Hierarchy(tiers=(tier,), gpus_per_node=per_node)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_a_torus_ring_over_more_dimensions_is_never_slower_than_over_one(op):
    """16 ranks as one wrapped axis of 16, as 4x4 and as 2x2x4, each axis's links at the same
    bandwidth: reducing over more axes (concurrently, axis by axis) is never slower."""
    bw = 50e9
    shapes = [[(16, bw, True)], [(4, bw, True), (4, bw, True)], [(2, bw, True), (2, bw, True), (4, bw, True)]]
    for size in (64 * 1024, 8 * MB, 512 * MB):
        times = []
        for axes in shapes:
            h = _hier(torus_tier("t", "t", axes, 1e-6), 16)
            times.append(collective_cost(op, float(size), place_group(16, 1, h), h, None).time_s)
        assert times[1] <= times[0] * (1 + 1e-12) and times[2] <= times[0] * (1 + 1e-12), (op, size, times)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"])
@pytest.mark.parametrize("kind", ["mesh", "torus"])
def test_more_link_bandwidth_is_never_slower(op, kind):
    for k in (2, 4, 8):
        prev = math.inf
        for bw in (10e9, 40e9, 160e9):
            tier = mesh_tier("m", "m", 8, bw) if kind == "mesh" else torus_tier("t", "t", [(4, bw, True),
                                                                                       (2, bw, False)])
            h = _hier(tier, 8)
            t = collective_cost(op, 32.0 * MB, place_group(k, 1, h), h, None).time_s
            assert t <= prev * (1 + 1e-12), (op, kind, k, bw, t, prev)
            prev = t


def test_a_mesh_group_gets_the_links_joining_it():
    """On the 8-GPU mesh a TP group of 2 gets one peer's links, of 8 all seven: 7x the bandwidth
    (twin.core.scale_up_shapes); NVSwitch would give both the whole GPU's."""
    h = _hier(mesh_tier("m", "xgmi", 8, 64e9), 8)
    size = 1024.0 * MB
    two = collective_cost("all_gather", size, place_group(2, 1, h), h, "ring")
    eight = collective_cost("all_gather", size, place_group(8, 1, h), h, "ring")
    assert eight.busbw_Bps == pytest.approx(7 * two.busbw_Bps, rel=0.02)


def test_more_ici_or_xgmi_bandwidth_never_slows_a_step(engine):
    for base in (SYSTEM_SCENARIOS[0], SYSTEM_SCENARIOS[2], SYSTEM_SCENARIOS[4], SYSTEM_SCENARIOS[6]):
        prev = math.inf
        for frac in (0.3, 0.6, 0.9):
            data = copy.deepcopy(base)
            scn = engine.scenario(data)
            up = dataclasses.replace(scn.cluster.scale_up, achievable_fraction=frac)
            scn = dataclasses.replace(scn, cluster=dataclasses.replace(scn.cluster, scale_up=up))
            t = engine.evaluate(scn, report=False).step_time_s
            assert t <= prev * (1 + 1e-12), (base["name"], frac)
            prev = t


def test_v5p_wraps_slices_of_whole_cubes_and_v6e_only_full_axes(engine):
    def tier(system: str, n: int, dims: str) -> Tier:
        scn = engine.scenario({"cluster": {"system": system, "num_gpus": n,
                                           "scale_up": {"fabric": "ici", "domain_gpus": n, "params": {"dims": dims}}},
                               "model": "llama3.1-8b", "plan": {"gbs": 1024}})
        return engine.hierarchy(scn).tiers[0]

    assert [a[2] for a in tier("TPU-v5p-1024", 512, "8x8x8").torus_axes] == [True, True, True]
    assert [a[2] for a in tier("TPU-v5p-1024", 32, "2x4x4").torus_axes] == [False, False, False]
    assert [a[2] for a in tier("TPU-v6e-256", 256, "16x16").torus_axes] == [True, True]
    assert [a[2] for a in tier("TPU-v6e-256", 64, "8x8").torus_axes] == [False, False]


def test_the_ultraserver_adds_a_ring_across_instances(engine):
    one = engine.hierarchy(engine.scenario(SYSTEM_SCENARIOS[5]))
    assert one.tiers[0].span_gpus == 64 and len(one.tiers[0].torus_axes) == 3
    inst = engine.scenario({"cluster": {"system": "trn2.48xlarge", "num_gpus": 256}, "model": "mixtral-8x7b",
                            "plan": {"tp": 4, "pp": 4, "ep": 8, "gbs": 256, "mbs": 1}})
    assert engine.hierarchy(inst).tiers[0].span_gpus == 16
    # The UltraServer's NeuronLink ring beats EFA for the pipeline's 4 stages across instances.
    assert engine.evaluate(SYSTEM_SCENARIOS[5]).step_time_s <= engine.evaluate(inst).step_time_s


# -------------------------------------------------- no accepted-but-ignored field
def _field(engine: Any, data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        engine.evaluate(data)
    return info.value.field


def _up(system: str, n: int, plan: dict[str, Any] | None = None, **up: Any) -> dict[str, Any]:
    return {"cluster": {"system": system, "num_gpus": n, "scale_up": up}, "model": "llama3.1-8b",
            "plan": plan or {"tp": 8, "gbs": 512}}


REFUSED = [
    (_up("ND-MI300X-v5", 64, nvls=True), "nvls"),
    (_up("ND-MI300X-v5", 64, generation=4), "generation"),
    (_up("ND-MI300X-v5", 64, params={"rings": 2}), "rings"),
    (_up("ND-MI300X-v5", 64, domain_gpus=16), "domain_gpus"),
    ({"cluster": {"gpu": "TPU-v5p", "num_gpus": 64, "gpus_per_node": 4, "scale_out": None,
                  "scale_up": {"fabric": "ici", "domain_gpus": 64}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "dims"),
    (_up("TPU-v5p-1024", 512, params={"dims": "8x8"}), "dims"),
    (_up("TPU-v5p-1024", 512, params={"dims": "8x8x4"}), "domain_gpus"),
    (_up("TPU-v5p-1024", 512, params={"dims": "8x8x8", "ocs": True}), "ocs"),
    (_up("TPU-v5p-1024", 512, nvls=True), "nvls"),
    (_up("trn1.32xlarge", 64, {"tp": 16, "gbs": 512}, link_GBps=100), "link_GBps"),
    (_up("trn1.32xlarge", 64, {"tp": 16, "gbs": 512}, domain_gpus=64), "domain_gpus"),
    (_up("trn1.32xlarge", 64, {"tp": 16, "gbs": 512}, generation=3), "generation"),
    (_up("HLS-Gaudi3", 64, domain_gpus=16), "domain_gpus"),
    (_up("HLS-Gaudi3", 64, nvls=True), "nvls"),
    (_up("HLS-Gaudi3", 64, params={"ports": 4}), "ports"),
    ({"cluster": {"gpu": "MI355X", "num_gpus": 64, "gpus_per_node": 8, "scale_out": None,
                  "scale_up": {"fabric": "ualink", "domain_gpus": 64}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "lanes"),
    ({"cluster": {"gpu": "MI355X", "num_gpus": 64, "gpus_per_node": 8, "scale_out": None,
                  "scale_up": {"fabric": "ualink", "domain_gpus": 64, "params": {"lanes": 8}, "latency_us": 1}},
      "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 512}}, "latency_us"),
    ({"cluster": {"gpu": "MI355X", "num_gpus": 2048, "gpus_per_node": 8, "scale_out": {"fabric": "roce"},
                  "scale_up": {"fabric": "ualink", "domain_gpus": 2048, "params": {"lanes": 8}}},
      "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 2048}}, "domain_gpus"),
    # an accelerator of another vendor on a vendor's fabric, NVLink on a non-NVIDIA part
    ({"cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8,
                  "scale_up": {"fabric": "xgmi", "domain_gpus": 8}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "nvlink_GBps"),
    # (a mesh of another vendor's parts only with its link rate stated: no default to take)
    ({"cluster": {"gpu": "TPU-v6e", "num_gpus": 64, "gpus_per_node": 8,
                  "scale_up": {"fabric": "xgmi", "domain_gpus": 8}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "link_GBps"),
    ({"cluster": {"gpu": "MI300X", "num_gpus": 64, "gpus_per_node": 8,
                  "scale_up": {"fabric": "ici", "domain_gpus": 8, "params": {"dims": "2x2x2"}}},
      "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 512}}, "generation"),
    ({"cluster": {"gpu": "Gaudi3", "num_gpus": 64, "gpus_per_node": 16,
                  "scale_up": {"fabric": "neuronlink", "domain_gpus": 16}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "generation"),
    ({"cluster": {"gpu": "MI300X", "num_gpus": 64, "gpus_per_node": 8,
                  "scale_up": {"fabric": "nvlink", "domain_gpus": 8}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "fabric"),
    ({"cluster": {"gpu": {"preset": "MI300X", "nvlink_GBps": 450}, "num_gpus": 64, "gpus_per_node": 8,
                  "scale_up": {"fabric": "xgmi", "domain_gpus": 8}}, "model": "llama3.1-8b",
      "plan": {"tp": 8, "gbs": 512}}, "nvlink_GBps"),
    # a TPU has no published board power: its idle power cannot be stated against it
    ({"cluster": {"system": "TPU-v6e-256", "num_gpus": 256, "power": {"gpu_idle_w": 100}},
      "model": "llama3.1-8b", "plan": {"tp": 4, "gbs": 256}}, "gpu_idle_w"),
]


@pytest.mark.parametrize(("data", "field"), REFUSED, ids=[f"{i}-{r[1]}" for i, r in enumerate(REFUSED)])
def test_what_a_new_fabric_does_not_model_is_refused_naming_the_field(engine, data, field):
    assert field in _field(engine, data)


ACCEPTED = [  # (base, changed): each accepted field changes the step
    (_up("ND-MI300X-v5", 64), _up("ND-MI300X-v5", 64, link_GBps=128)),
    (_up("ND-MI300X-v5", 64), _up("ND-MI300X-v5", 64, achievable_fraction=0.4)),
    (_up("ND-MI300X-v5", 64), _up("ND-MI300X-v5", 64, latency_us=20)),
    (_up("TPU-v5p-1024", 512, params={"dims": "8x8x8"}), _up("TPU-v5p-1024", 512, params={"dims": "4x8x16"})),
    (_up("TPU-v5p-1024", 512, params={"dims": "8x8x8"}),
     _up("TPU-v5p-1024", 512, params={"dims": "8x8x8"}, link_GBps=300)),
    (_up("trn1.32xlarge", 64, {"tp": 16, "gbs": 512}),
     _up("trn1.32xlarge", 64, {"tp": 16, "gbs": 512}, achievable_fraction=0.5)),
    (_up("HLS-Gaudi3", 64), _up("HLS-Gaudi3", 64, latency_us=30)),
]


@pytest.mark.parametrize(("base", "changed"), ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_what_a_new_fabric_accepts_changes_the_answer(engine, base, changed):
    assert engine.evaluate(changed).step_time_s != engine.evaluate(base).step_time_s


def test_ualink_lanes_and_link_rate_say_the_same():
    """32 lanes x 200 Gb/s = 800 GB/s per direction: the same tier as link_GBps 800."""
    def tier(up: dict[str, Any]) -> Tier:
        from twin.engine import Engine

        eng = Engine()
        scn = eng.scenario({"cluster": {"gpu": "MI355X", "num_gpus": 64, "gpus_per_node": 8, "scale_out": None,
                                        "scale_up": {"fabric": "ualink", "domain_gpus": 64, **up}},
                            "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 512}})
        return eng.hierarchy(scn).tiers[0]

    assert tier({"params": {"lanes": 32}}).bw_Bps == pytest.approx(tier({"link_GBps": 800}).bw_Bps)
    assert tier({"link_GBps": 800}).bw_Bps == pytest.approx(800e9 * ualink.EFFECTIVE)


def test_an_accelerator_without_published_power_counts_no_gpu_energy(engine):
    est = engine.evaluate({"cluster": {"system": "TPU-v6e-256", "num_gpus": 256}, "model": "llama3.1-8b",
                           "plan": {"tp": 4, "gbs": 256, "mbs": 1, "recompute": "full"}})
    assert est.step_time_s > 0
    energy = est.energy
    assert energy is not None and energy.gpu_j == 0
    assert any("gpu" in n.lower() for n in energy.not_counted), energy.not_counted


# --------------------------------------------------------------- generation table
def test_every_generation_has_a_row_and_a_tuning_row():
    from twin.core.nccl_tuning import LL_MAX_BW_ONE_NODE_GBPS, RING_PLATEAU

    gens = set(typing.get_args(Generation))
    assert gens == set(GENERATIONS)
    for g in gens:
        facts = generation_facts(g)
        assert facts.source and facts.collective_library
        assert nccl_tuning_key(g) in LL_MAX_BW_ONE_NODE_GBPS and nccl_tuning_key(g) in RING_PLATEAU
        if facts.vendor != "nvidia":
            assert nccl_tuning_key(g) == FALLBACK_TUNING and facts.tensor_flops_per_clk_unit is None


def test_every_new_accelerator_has_sourced_peaks_hbm_and_a_profile(engine):
    cat = engine.catalog_document()
    gpus = {g["name"]: g for g in cat["gpus"]}
    for name in ("MI300X", "MI325X", "MI355X", "TPU-v5p", "TPU-v6e", "Trainium", "Trainium2", "Gaudi2", "Gaudi3"):
        g, spec = gpus[name], gpus[name]["spec"]
        assert g["source"] and spec["hbm_gib"] > 0 and spec["hbm_TBps"] > 0 and spec["peak_tflops"]["bf16"] > 0, name
    profiles = {p["name"]: p for p in cat["efficiency_profiles"]}
    for prof in ("cdna3", "cdna3_mi325x", "cdna4", "tpu_v5p", "tpu_v6e", "trainium", "trainium2", "gaudi2", "gaudi3"):
        assert profiles[prof]["source"], prof


# ------------------------------------------------------------------ reference
NEW_FAMILIES = {"MaxText TPU recipes (Google tpu-recipes)": 3, "AWS Neuron NxD Trn1 training performance": 2,
                "Intel Gaudi 2 model performance (training)": 2,
                "Primus Megatron-LM on AMD Instinct (third-party logs)": 2}


def test_the_new_published_runs_are_read_and_scored(engine):
    """Every non-NVIDIA case of validation/reference is read (its fabric, params and stated
    'no scale-out') and scored; none is skipped."""
    data = yaml.safe_load((REFERENCE / "training_runs.yaml").read_text())
    cases = [c for c in data["cases"] if c["family"] in NEW_FAMILIES]
    assert len(cases) == sum(NEW_FAMILIES.values())
    report = validate_file(engine, REFERENCE / "training_runs.yaml")
    scored = {c.id: c for c in report.cases if c.family in NEW_FAMILIES}
    assert set(scored) == {c["id"] for c in cases}
    for fam, n in NEW_FAMILIES.items():
        errs = [abs(c.error_pct) for c in scored.values() if c.family == fam]
        assert len(errs) == n and all(math.isfinite(e) for e in errs)
    # the in-sample runs match their profiles' one constant; the TPU v6e runs within 10%
    assert abs(scored["neuron-trn1-llama3.1-8b-32node"].error_pct) < 0.5
    assert abs(scored["primus-mi325x-llama2-7b-64gpu-fp8"].error_pct) < 0.5
    assert abs(scored["maxtext-tpu-v6e-256-llama3.1-70b"].error_pct) < 10
    assert abs(scored["primus-mi325x-llama2-70b-16gpu-fp8-fsdp"].error_pct) < 15


def test_a_case_states_a_slice_without_scale_out_and_torus_dims(engine):
    from twin.reference.case_cluster import _cluster

    notes: list[str] = []
    c = _cluster(engine, {"gpu": "TPU-v5p", "num_gpus": 512, "gpus_per_node": 4,
                          "scale_up": {"fabric": "ici", "domain_gpus": 512, "params": {"dims": "8x8x8"}},
                          "scale_out": {"fabric": "none"}}, notes, "cluster")
    assert c.scale_out is None and c.scale_up.params == {"dims": "8x8x8"} and not notes
    with pytest.raises(SpecError) as info:
        _cluster(engine, {"gpu": "TPU-v5p", "num_gpus": 8, "scale_up": {"fabric": "ici", "params": [1]}},
                 notes, "cluster")
    assert info.value.field == "cluster.scale_up.params"


def test_engine_with_a_blocked_builtin_loses_its_presets():
    """Why the conformance test gives a blocked plugin's presets back (_Presets)."""
    eng = engine_with(replace_builtin="xgmi")
    with pytest.raises(TwinError):
        eng.scenario({"cluster": {"system": "ND-MI300X-v5", "num_gpus": 64}, "model": "llama3.1-8b",
                      "plan": {"gbs": 64}})
