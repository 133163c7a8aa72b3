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
    ({"recompute": "selective", "recompute_modules": ["shared_experts"]}, "plan.recompute_modules", "must be one of"),
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
    for module, words in (("mla_up_proj", "multi-head latent attention"), ("moe_act", "an MoE model"),
                          ("moe", "an MoE model")):
        s = copy.deepcopy(dense)
        s["plan"]["recompute_modules"] = [module]
        with pytest.raises(SpecError) as err:
            engine.evaluate(s)
        assert err.value.field == "plan.recompute_modules" and words in str(err.value)


def test_mlp_and_moe_checkpoint_whole_sub_layers(engine):
    """mlp keeps only the dense MLP's input (DeepSeek-V3's 3 dense layers: fc1's 2 x 18432
    output and the activation's 18432, FP8 where a GEMM input); moe keeps only the MoE
    layer's input (58 layers: every routed copy's and the shared expert's activations)."""
    base = per_token_layer(engine, recompute="selective")
    mlp = per_token_layer(engine, recompute="selective", recompute_modules=["mlp"])
    assert base - mlp == pytest.approx((2 * 2 * 18432 + 1 * 18432) * 3 / 61)
    moe = per_token_layer(engine, recompute="selective", recompute_modules=["moe"])
    routed = 8 * (1 * 7168 + 2 * 2 * 2048 + 1 * 2048)
    shared = 2 * 2 * 2048 + 1 * 2048
    assert base - moe == pytest.approx((routed + shared) * 58 / 61)
    # moe includes what moe_act drops: naming both drops no more than moe alone
    assert per_token_layer(engine, recompute="selective", recompute_modules=["moe", "moe_act"]) == pytest.approx(moe)


def test_moe_recompute_repeats_the_layer_forward_and_its_all_to_all(engine):
    s = copy.deepcopy(DEEPSEEK)
    s["plan"].update(recompute="selective", recompute_modules=["layernorm"])
    norm = engine.evaluate(s)
    s["plan"]["recompute_modules"] = ["layernorm", "moe"]
    moe = engine.evaluate(s)
    expected = (per_token_layer(engine, recompute="selective", recompute_modules=["layernorm", "moe"])
                / per_token_layer(engine, recompute="selective", recompute_modules=["layernorm"]))
    assert moe.memory.activations / norm.memory.activations == pytest.approx(expected, rel=0.02)
    assert moe.breakdown.recompute_s > 5 * norm.breakdown.recompute_s
    # dispatch and combine forward and backward, then forward again: 6 passes instead of 4
    # (to within the shares the contention model gives it beside the other dimensions' traffic)
    assert moe.comm_issued_s["ep"] == pytest.approx(1.5 * norm.comm_issued_s["ep"], rel=0.005)
    s["plan"]["recompute_modules"] = ["layernorm", "mlp"]
    mlp = engine.evaluate(s)
    assert norm.breakdown.recompute_s < mlp.breakdown.recompute_s < moe.breakdown.recompute_s
    assert mlp.comm_issued_s["ep"] == pytest.approx(norm.comm_issued_s["ep"], rel=1e-12)


def test_mlp_needs_dense_mlp_layers(engine):
    qwen = {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "qwen3-235b-a22b",
            "plan": {"tp": 2, "pp": 4, "ep": 8, "gbs": 64, "recompute": "selective", "recompute_modules": ["mlp"]}}
    with pytest.raises(SpecError) as err:
        engine.evaluate(qwen)
    assert err.value.field == "plan.recompute_modules" and "dense MLP layers" in str(err.value)
    qwen["plan"]["recompute_modules"] = ["moe"]
    assert engine.evaluate(qwen).step_time_s > 0
