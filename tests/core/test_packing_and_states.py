"""Sequence packing (attention within each packed document) and the stack's model-state
precision (fp32 master weights or pure 16-bit parameters), against hand-worked numbers."""

from __future__ import annotations

import dataclasses

import pytest

from twin.core.errors import SpecError
from twin.core.scenario_io import resolve_model, resolve_software, scenario_from_dict
from twin.core.specs import Plan
from twin.core.workload import build_workload


def _attention(model):
    return build_workload(model, 1, 1, 1, False, 1, 1).sublayers["attention"]


def test_packed_documents_attend_within_themselves(engine):
    """Llama 2 7B shape, 4096-token sequences: one document has s(s+1)/2 query-key pairs;
    documents of 256 tokens give 16 x 256 x 257 / 2 = s (l+1)/2 pairs, 257/4097 of them."""
    base = resolve_model("llama3.1-8b", engine.catalog)
    model = dataclasses.replace(base, seq_len=4096)
    whole = _attention(model)
    packed = _attention(dataclasses.replace(model, packed_doc_tokens=256))
    d = model.head_size
    heads = model.heads
    assert whole.attn_flops == pytest.approx(2.0 * 4096 * 4097 / 2 * heads * 2 * d)
    assert packed.attn_flops == pytest.approx(2.0 * 4096 * 257 / 2 * heads * 2 * d)
    assert packed.attn_kv_len == pytest.approx(257 / 2)
    # The GEMMs and the publisher's model FLOPs (full causal square) do not change.
    assert [g.flops for g in packed.gemms] == [g.flops for g in whole.gemms]
    assert packed.model_flops == whole.model_flops


def test_packing_makes_the_step_faster_only_through_attention(engine):
    data = {"cluster": {"system": "DGX-H100", "num_gpus": 8},
            "model": {"preset": "llama3.1-8b", "seq_len": 4096}, "plan": {"gbs": 32, "mbs": 1}}
    whole = engine.evaluate(data)
    packed = engine.evaluate({**data, "model": {**data["model"], "packed_doc_tokens": 210}})
    assert packed.step_time_s < whole.step_time_s
    assert packed.model_flops_per_step == whole.model_flops_per_step


def test_a_packed_document_longer_than_its_sequence_is_refused(engine):
    with pytest.raises(SpecError) as err:
        engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 8},
                         "model": {"preset": "llama3.1-8b", "seq_len": 4096, "packed_doc_tokens": 8192},
                         "plan": {"gbs": 32}})
    assert err.value.field == "model.packed_doc_tokens"


def _states(engine, software):
    scn = scenario_from_dict({"cluster": {"system": "DGX-H100", "num_gpus": 8},
                              "model": "llama3.1-8b",
                              "plan": {"gbs": 64, "mbs": 1, "optimizer_sharding": "fsdp",
                                       "fsdp_reshard_after_forward": False},
                              "software": software}, engine.catalog)
    return scn, engine.evaluate(scn, report=False)


def test_pure_bf16_states_are_8_bytes_a_parameter_not_18(engine):
    """FSDP over 8 GPUs, no resharding (ZeRO-2): Megatron-style mixed precision keeps a
    bf16 weight (2 B, whole), fp32 gradients (4 B) and fp32 master + Adam moments (12 B),
    both sharded; AutoModel's bf16 model with torch.optim.Adam keeps 2 B gradients and
    4 B of moments, sharded."""
    _, mixed = _states(engine, "megatron-core-te")
    _, pure = _states(engine, "nemo-automodel")
    assert resolve_software("nemo-automodel", engine.catalog).master_weights is False
    assert mixed.memory.weights == pytest.approx(pure.memory.weights)
    assert pure.memory.gradients == pytest.approx(mixed.memory.gradients * 2 / 4)
    assert pure.memory.optimizer == pytest.approx(mixed.memory.optimizer * 4 / 12)


def test_the_optimizer_step_streams_what_the_states_hold():
    """Fused Adam per local parameter: 34 B with an fp32 master (read master, m, v, grad;
    write master, m, v, the bf16 weight; the clip read), 16 B on pure bf16 states."""
    from twin.core.memory import StateDivisors
    from twin.core.offload import NO_TIERS
    from twin.core.step import optimizer_time

    d = StateDivisors(1.0, 1.0, 8.0, 1.0, 1.0, 8.0)
    plan = Plan(gbs=8)
    hbm = 3.0e12
    assert optimizer_time(plan, 8e9, 0.0, d, NO_TIERS, hbm) == pytest.approx(1e9 * 34 / hbm)
    assert optimizer_time(plan, 8e9, 0.0, d, NO_TIERS, hbm, master_weights=False) == pytest.approx(1e9 * 16 / hbm)


def test_master_weights_is_a_stack_field_on_the_wire_and_in_batches(engine):
    from twin.wire.convert import message_to_mapping, scenario_from_mapping

    data = {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-8b", "plan": {"gbs": 64},
            "software": {"preset": "megatron-core-te", "master_weights": False}}
    back = scenario_from_dict(message_to_mapping(scenario_from_mapping(data)), engine.catalog)
    assert back.software.master_weights is False
    scns = [scenario_from_dict({**data, "software": sw}, engine.catalog)
            for sw in ("nemo-automodel", "megatron-core-te", {"preset": "megatron-core-te", "master_weights": False})]
    batch = engine.evaluate_many(scns, require_fit=False)
    for i, scn in enumerate(scns):
        est = engine.evaluate(scn, report=False)
        assert batch.columns["step_time_s"][i] == est.step_time_s
        assert batch.columns["optimizer_s"][i] == est.breakdown.optimizer_s
        assert batch.columns["memory_gib"][i] == est.memory.total / 2**30
