"""Selective recomputation by module (plan.recompute_modules, Megatron-Core's recompute_modules).

What each module stops storing, per token and layer, worked by hand on DeepSeek-V3's
dimensions (tp 1, FP8: a saved GEMM input is 1 byte, other activations 2): mla_up_proj
keeps the latents (q 1536 + kv 512 in FP8, the 64-wide rope key in 16 bits) instead of
q, k and v (2 * (128 + 2*128) * 128 bytes); layernorm drops each norm's output (7168 bytes
in FP8, before attention and before every MLP/MoE); moe_act drops the expert activation's
output (8 routed copies x 2048 in FP8) and, under DeepSeek's FP8 recipe, caches its
input (2 x 2048) in FP8 too (DeepSeek-V3 report §3.2.3, §3.3.3).
"""

from __future__ import annotations

import copy

import pytest

from twin.core.errors import SpecError
from twin.core.memory import activation_bytes_per_token_layer
from twin.core.scenario_io import resolve_model
from twin.core.schema import load
from twin.core.specs import Plan
from twin.core.workload import build_workload

DEEPSEEK = {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "deepseek-v3",
            "plan": {"tp": 1, "pp": 8, "ep": 32, "gbs": 512, "mbs": 1, "precision": "fp8", "recipe": "blockwise"}}


def per_token_layer(engine, **plan_fields) -> float:
    model = resolve_model("deepseek-v3", engine.catalog)
    plan = load(Plan, {"gbs": 512, "ep": 32, "precision": "fp8", "recipe": "blockwise", **plan_fields}, "plan")
    w = build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
    return activation_bytes_per_token_layer(plan, model, w, True)


def test_each_module_drops_what_it_recomputes(engine):
    base = per_token_layer(engine, recompute="selective")
    assert base == per_token_layer(engine)  # flash attention: the attention core stores no scores anyway
    # 61 layers, each with attention; 3 dense MLPs and 58 MoE layers
    up = per_token_layer(engine, recompute="selective", recompute_modules=["mla_up_proj"])
    assert base - up == pytest.approx(2 * (128 + 2 * 128) * 128 - (1536 + 512) - 2 * 64)
    norm = per_token_layer(engine, recompute="selective", recompute_modules=["layernorm"])
    assert base - norm == pytest.approx(7168 * (61 + 3 + 58) / 61)
    act = per_token_layer(engine, recompute="selective", recompute_modules=["moe_act"])
    assert base - act == pytest.approx(8 * (2048 + 2 * 2048) * 58 / 61)
    both = per_token_layer(engine, recompute="selective", recompute_modules=["mla_up_proj", "layernorm", "moe_act"])
    assert base - both == pytest.approx((base - up) + (base - norm) + (base - act))


def test_moe_act_caches_its_input_in_fp8_only_under_deepseeks_recipe(engine):
    cur = per_token_layer(engine, recompute="selective", recipe="current")
    cur_act = per_token_layer(engine, recompute="selective", recipe="current", recompute_modules=["moe_act"])
    assert cur - cur_act == pytest.approx(8 * 2048 * 58 / 61)  # the output only


def test_recomputed_modules_cost_time_and_save_memory(engine):
    s = copy.deepcopy(DEEPSEEK)
    s["plan"]["recompute"] = "selective"
    core = engine.evaluate(s)
    s["plan"]["recompute_modules"] = ["layernorm", "mla_up_proj", "moe_act"]
    deepseek = engine.evaluate(s)
    assert deepseek.memory.activations < 0.7 * core.memory.activations
    # a norm, two thin GEMMs and an activation per layer: cheaper than the attention core
    assert 0 < deepseek.breakdown.recompute_s < core.breakdown.recompute_s
    # the default set is the attention core: stating it changes nothing
    s["plan"]["recompute_modules"] = ["core_attn"]
    assert engine.evaluate(s).step_time_s == core.step_time_s


@pytest.mark.parametrize(("fields", "path", "words"), [
    ({"recompute_modules": ["layernorm"]}, "plan.recompute_modules", "applies only with recompute: selective"),
    ({"recompute": "selective", "recompute_modules": []}, "plan.recompute_modules", "at least one module"),
    ({"recompute": "selective", "recompute_modules": ["mlp"]}, "plan.recompute_modules", "must be one of"),
])
def test_module_rules_name_the_field(engine, fields, path, words):
    s = copy.deepcopy(DEEPSEEK)
    s["plan"].update(fields)
    with pytest.raises(SpecError) as err:
        engine.evaluate(s)
    assert err.value.field.startswith(path) and words in str(err.value), str(err.value)


def test_mla_and_moe_modules_need_such_a_model(engine):
    dense = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-70b",
             "plan": {"tp": 8, "pp": 2, "gbs": 64, "recompute": "selective"}}
    for module, words in (("mla_up_proj", "multi-head latent attention"), ("moe_act", "an MoE model")):
        s = copy.deepcopy(dense)
        s["plan"]["recompute_modules"] = [module]
        with pytest.raises(SpecError) as err:
            engine.evaluate(s)
        assert err.value.field == "plan.recompute_modules" and words in str(err.value)
