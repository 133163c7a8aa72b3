"""The host side of MoE layers (issue 35, item 1; ``twin.core.host``): expert GEMMs launched one per
local expert, and the dropless dispatcher's tokens-per-expert sync, after which the host cannot
queue the layer's kernels ahead of the device.
"""

from __future__ import annotations

import dataclasses

import pytest

from twin.core.host import host_layer_s, layer_pass_s, post_sync_host_s
from twin.core.scenario_io import resolve_software, scenario_from_dict
from twin.core.workload import build_workload
from twin.engine import Engine
from twin.testing import assert_batch_matches_one_by_one

# A fine-grained MoE (hidden 2K, 128 small experts, top-8), small enough that its layers at
# micro-batch 1 are host-bound on an eager stack.
FINE = {"name": "fine-moe", "layers": 8, "hidden": 1024, "ffn": 4096, "heads": 8, "kv_heads": 4, "head_dim": 128,
        "seq_len": 1024, "vocab": 32768, "gated_mlp": True,
        "moe": {"experts": 128, "top_k": 8, "expert_ffn": 256, "moe_layers": 8, "dense_layers": 0}}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


def _scenario(engine: Engine, software="megatron-core-te", *, ep=8, mbs=1, model=FINE, gpus=8):
    data = {"cluster": {"system": "DGX-H100", "num_gpus": gpus}, "model": model,
            "plan": {"tp": 1, "pp": 1, "ep": ep, "mbs": mbs, "gbs": 8 * mbs * gpus}, "software": software}
    return scenario_from_dict(data, engine.catalog)


def _workload(scn):
    p = scn.plan
    return build_workload(scn.model, p.tp, p.cp, p.mbs, p.sp, p.ep, p.expert_tp)


def test_expert_gemms_are_launched_one_per_local_expert(engine):
    sw = resolve_software("megatron-core-te", engine.catalog)
    hosts = {ep: host_layer_s(sw, _workload(_scenario(engine, ep=ep))) for ep in (8, 4)}
    # 16 -> 32 local experts: 16 more experts x (2 forward, 4 backward) launches per MoE layer.
    fwd = (hosts[4][0] - hosts[8][0]) / (sw.dispatch_us * 1e-6)
    bwd = (hosts[4][1] - hosts[8][1]) / (sw.dispatch_us * 1e-6)
    assert fwd == pytest.approx(16 * sw.expert_fwd_ops) and bwd == pytest.approx(16 * sw.expert_bwd_ops)
    assert (sw.expert_fwd_ops, sw.expert_bwd_ops) == (2, 4)
    # One grouped kernel for every expert (torchtitan's torch._grouped_mm): no launch per expert.
    fsdp2 = resolve_software("pytorch-fsdp2", engine.catalog)
    assert host_layer_s(fsdp2, _workload(_scenario(engine, ep=8))) == host_layer_s(
        fsdp2, _workload(_scenario(engine, ep=4)))


def test_after_the_sync_the_host_time_adds_to_the_rest_of_the_layer():
    # The flow shop of twin.core.host: max(host, device, post-sync host + the rest's device).
    engine = Engine(autoload=False)
    scn = _scenario(engine)
    w, sw = _workload(scn), scn.software
    post = post_sync_host_s(sw, w)
    assert post > 0
    host_f, _ = host_layer_s(sw, w)
    # Device-bound overall, but the post-sync part is host-bound: its host time delays the rest.
    dev_f, moe_f = 2.0 * host_f, 0.2 * host_f
    t_f, _ = layer_pass_s(sw, w, dev_f, 1.0, moe_f)
    assert t_f == pytest.approx(post + dev_f - moe_f) and t_f > max(dev_f, host_f)
    # Without the sync (or padded to capacity) the pass is max(device, host).
    no_sync = dataclasses.replace(sw, moe_host_sync=False)
    assert layer_pass_s(no_sync, w, dev_f, 1.0, moe_f)[0] == pytest.approx(max(dev_f, host_f))
    padded = {**FINE, "moe": {**FINE["moe"], "capacity_factor": 1.0, "pad_to_capacity": True}}
    wp = _workload(_scenario(engine, model=padded))
    assert post_sync_host_s(sw, wp) == 0.0
    # The backward reuses the forward's split sizes: no sync.
    assert layer_pass_s(sw, w, dev_f, 3.0, moe_f)[1] == 3.0


def test_a_fine_grained_moe_pays_its_post_sync_host_time_and_a_fixed_cost_per_micro_batch(engine):
    # Long sequences make attention device-heavy while 64 small local experts make the MoE
    # layer's post-sync part host-heavy: the sync costs time on top of max(device, host).
    long = {**FINE, "seq_len": 8192, "heads": 16}
    on = engine.evaluate(_scenario(engine, ep=2, model=long), report=False)
    off = engine.evaluate(_scenario(engine, {"preset": "megatron-core-te", "moe_host_sync": False}, ep=2,
                                    model=long), report=False)
    flat = engine.evaluate(_scenario(engine, {"preset": "megatron-core-te", "moe_host_sync": False,
                                              "expert_fwd_ops": 0, "expert_bwd_ops": 0}, ep=2, model=long),
                           report=False)
    assert on.step_time_s > 1.04 * off.step_time_s and off.step_time_s > 1.02 * flat.step_time_s
    # 128 local experts (no EP): micro-batch 1 is host-bound, so per token it costs well over
    # twice micro-batch 4 (published fine-grained recipes: up to 2.8x, issue 35).
    mid = {**FINE, "seq_len": 4096}
    one = engine.evaluate(_scenario(engine, ep=1, model=mid), report=False).step_time_s
    four = engine.evaluate(_scenario(engine, ep=1, model=mid, mbs=4), report=False).step_time_s
    assert one > 2.0 * four / 4


def test_batch_matches_one_by_one_with_local_experts_as_a_column(engine):
    scns = [_scenario(engine, sw, ep=ep, mbs=mbs) for sw in ("megatron-core-te", "nemo-automodel")
            for ep in (2, 8) for mbs in (1, 2)]
    assert_batch_matches_one_by_one(engine, scns)
