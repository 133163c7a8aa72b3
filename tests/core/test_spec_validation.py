"""Every validation rule rejects bad input with a SpecError naming the field."""

from __future__ import annotations

import copy
import math

import pytest

from tests.conftest import base_scenario
from twin.core.errors import NotFoundError, SpecError


def mutate(path: str, value: object) -> dict:
    data = copy.deepcopy(base_scenario())
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        if isinstance(node.get(k), str):  # a preset name: expand to an override mapping
            node[k] = {"preset": node[k]} if k == "model" else node[k]
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


BAD = [
    # (path to set, value, expected field in the error, words expected in the rule)
    ("plan.tp", 0, "plan.tp", ">= 1"),
    ("plan.tp", "8", "plan.tp", "integer"),
    ("plan.tp", True, "plan.tp", "integer"),
    ("plan.tp", 2.5, "plan.tp", "integer"),
    ("plan.gbs", -4, "plan.gbs", ">= 1"),
    ("plan.mbs", None, "plan.mbs", "null"),
    ("plan.recompute", "sometimes", "plan.recompute", "one of"),
    ("plan.precision", "fp7", "plan.precision", "one of"),
    ("plan.bogus", 1, "plan.bogus", "unknown field"),
    ("plan.dp", 3, "plan.dp", "num_gpus"),
    ("plan.gbs", 100, "plan.gbs", "multiple of mbs*dp"),
    ("plan.tp", 3, "plan.tp", "divide"),
    ("plan.vp", 2, "plan.vp", None),
    ("plan.cp", 3, "plan.tp", "divide num_gpus"),
    ("plan.ep", 2, "plan.ep", "MoE"),
    ("plan.precision", "fp4", "plan.precision", "tensor cores"),
    ("plan.offload.optimizer", "cxl", "plan.offload.optimizer", "memory_pool"),
    ("cluster.num_gpus", 100, "cluster.num_gpus", "multiple of gpus_per_node"),
    ("cluster.num_gpus", 0, "cluster.num_gpus", ">= 1"),
    ("cluster.num_gpus", float("nan"), "cluster.num_gpus", "integer"),
    ("cluster.scale_out.nic_gbps", float("inf"), "cluster.scale_out.nic_gbps", "finite"),
    ("cluster.scale_out.nic_gbps", -400, "cluster.scale_out.nic_gbps", ">= 0.001"),
    ("cluster.num_gpus", 10**12, "cluster.num_gpus", "<= 10000000"),
    ("cluster.scale_out.fabric", "carrier-pigeon", "cluster.scale_out.fabric", "unknown name"),
    ("cluster.scale_out.params", {"warp_drive": 1}, "cluster.scale_out.params.warp_drive", "unknown parameter"),
    ("cluster.scale_up.generation", 9, "cluster.scale_up.generation", "one of"),
    ("cluster.scale_up.domain_gpus", 3, "cluster.scale_up.domain_gpus", "gpus_per_node"),
    ("cluster.gpu", "Z9000", "cluster.gpu", "unknown name"),
    ("model.kv_heads", 7, "model.kv_heads", "divide"),
    ("model.layers", -1, "model.layers", ">= 1"),
    ("model.preset", "gpt-99", "model.preset", "unknown name"),
]


@pytest.mark.parametrize(("path", "value", "field", "words"), BAD)
def test_bad_input_names_the_field(engine, path, value, field, words):
    data = mutate(path, value)
    if path == "plan.vp":  # interleaving without pipelining
        data["plan"]["pp"] = 1
        data["plan"]["vp"] = 2
        field = "plan.vp"
    with pytest.raises((SpecError, NotFoundError)) as info:
        engine.scenario(data)
    err = info.value
    assert err.field == field, str(err)
    if words:
        assert words in str(err), str(err)


def test_ep_must_divide_experts(engine):
    data = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "mixtral-8x7b",
            "plan": {"tp": 1, "ep": 3, "gbs": 64}}
    with pytest.raises(SpecError) as info:
        engine.scenario(data)
    assert info.value.field == "plan.ep"
    assert "experts (8)" in str(info.value)


def test_hybrid_pattern_must_match_layers(engine):
    model = {"layers": 4, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 512,
             "hybrid": {"pattern": "M*M"}}
    with pytest.raises(SpecError) as info:
        engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": model, "plan": {"gbs": 8}})
    assert info.value.field == "model.hybrid.pattern"


def test_unknown_top_level_key(engine):
    data = base_scenario()
    data["plna"] = {}
    with pytest.raises(SpecError) as info:
        engine.scenario(data)
    assert info.value.field == "plna"


def test_scenario_must_be_a_mapping(engine):
    with pytest.raises(SpecError):
        engine.scenario(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_malformed_yaml_file(engine, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("cluster: [unclosed\n")
    with pytest.raises(SpecError) as info:
        engine.scenario(f)
    assert "not valid YAML" in str(info.value)


def test_valid_scenario_loads_with_presets(engine):
    scn = engine.scenario(base_scenario())
    assert scn.dp == 128 // (8 * 2)
    assert scn.cluster.gpu.name == "H100-SXM-80GB"
    assert math.isclose(scn.cluster.gpu.peak_tflops["bf16"], 989.4)


def _model(**over):
    m = {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1000, "seq_len": 1024}
    m.update(over)
    return m


MORE_BAD = [
    # (scenario overrides, expected field)
    ({"model": _model(kv_heads=16)}, "model.kv_heads"),
    # knobs of one mode set in another would be ignored: refused instead
    ({"model": _model(mla={"kv_lora_rank": 256})}, "model.mla"),
    ({"model": _model(moe={"experts": 8, "top_k": 2, "expert_ffn": 256, "shared_expert_ffn": 512})},
     "model.moe.shared_expert_ffn"),
    ({"plan": {"gbs": 64, "tp": 1, "lora_rank": 64}}, "plan.lora_rank"),
    ({"plan": {"gbs": 64, "tp": 1, "fsdp_reshard_after_forward": False}}, "plan.fsdp_reshard_after_forward"),
    ({"model": _model(attention="mla")}, "model.mla"),
    ({"model": _model(moe={"experts": 4, "top_k": 8, "expert_ffn": 256})}, "model.moe.top_k"),
    ({"model": _model(moe={"experts": 4, "top_k": 2, "expert_ffn": 256, "moe_layers": 8, "dense_layers": 2})},
     "model.moe.moe_layers"),
    ({"model": _model(moe={"experts": 4, "top_k": 2, "expert_ffn": 256, "dense_layers": 9})}, "model.moe.dense_layers"),
    ({"model": _model(hybrid={"pattern": "MMMM**Xx"})}, "model.hybrid.pattern"),
    ({"model": _model(hybrid={"pattern": "MMEE**MM"})}, "model.moe"),
    ({"model": _model(hybrid={"pattern": "MM**MM**", "mamba_layers": 3})}, "model.hybrid.mamba_layers"),
    ({"plan": {"gbs": 64, "tp": 1, "pp": 16}}, "plan.pp"),
    ({"plan": {"gbs": 64, "tp": 1, "pp": 2, "vp": 8}}, "plan.vp"),
    ({"plan": {"gbs": 64, "tp": 1, "cp": 2}, "model": _model(seq_len=1002)}, "plan.cp"),
    ({"plan": {"gbs": 64, "tp": 8, "sequence_parallel": True}, "model": _model(seq_len=1004)},
     "plan.sequence_parallel"),
    ({"plan": {"gbs": 64, "tp": 1, "ep": 8, "etp": 3},
      "model": _model(moe={"experts": 8, "top_k": 2, "expert_ffn": 256})}, "plan.ep"),
    ({"plan": {"gbs": 64, "tp": 1, "recompute": "selective", "recompute_layers": 2}}, "plan.recompute_layers"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": {"tiers": 2, "oversubscription": [1, 2]}}},
     "cluster.scale_out.oversubscription"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": {"tiers": 2, "tier_spans": [16]}}},
     "cluster.scale_out.tier_spans"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": {"tier_spans": [64, 16]}}},
     "cluster.scale_out.tier_spans"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": None}}, "cluster.scale_out"),
    ({"cluster": {"system": "DGX-A100", "num_gpus": 64, "scale_up": {"nvls": True}}}, "cluster.scale_up.nvls"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_up": {"params": {"x": 1}}}},
     "cluster.scale_up.params.x"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": {"nics_per_node": 16}}},
     "cluster.scale_out.nics_per_node"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64,
                  "scale_out": {"fabric": "roce", "params": {"congestion_control": "magic"}}}},
     "cluster.scale_out.params.congestion_control"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64,
                  "scale_out": {"fabric": "roce", "params": {"ecmp_flows_per_pair": 0}}}},
     "cluster.scale_out.params.ecmp_flows_per_pair"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64,
                  "scale_out": {"fabric": "roce", "params": {"congestion_efficiency": 1.5}}}},
     "cluster.scale_out.params.congestion_efficiency"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "scale_out": {"params": {"nested": {"a": 1}}}}},
     "cluster.scale_out.params.nested"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "optics": {"kind": "cpo", "params": {"pj_per_bit": -1}}}},
     "cluster.optics.params.pj_per_bit"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64,
                  "optics": {"kind": "pluggable", "params": {"max_link_length_m": 5000}}}},
     "cluster.optics.params.max_link_length_m"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "optics": {"kind": "copper"}}}, "cluster.optics.kind"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "memory_pool": {"fabric": "cxl", "params": {"q": 1}}}},
     "cluster.memory_pool.params.q"),
    ({"cluster": {"system": "DGX-H100", "num_gpus": 64, "gpu": {"preset": "H100-SXM-80GB",
                                                                "peak_tflops": {"bf16": 0}}}},
     "cluster.gpu.peak_tflops.bf16"),
]


@pytest.mark.parametrize(("overrides", "field"), MORE_BAD)
def test_every_cross_field_rule_names_its_field(engine, overrides, field):
    data = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": _model(), "plan": {"gbs": 64, "tp": 1}}
    data.update(overrides)
    with pytest.raises((SpecError, NotFoundError)) as info:
        engine.scenario(data)
    assert info.value.field == field, str(info.value)
