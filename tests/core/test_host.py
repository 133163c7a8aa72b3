"""The host model: a layer pass costs max(device time, host time to issue it).

Software stacks (``twin/presets/software.yaml``) give kernels per sub-layer pass and the
host cost per kernel; small models on eager stacks are host-bound, large ones are not.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from twin.core.errors import NotFoundError, SpecError
from twin.core.scenario_io import resolve_software, scenario_from_dict
from twin.core.specs import DEFAULT_SOFTWARE, Software
from twin.engine import Engine
from twin.reference import case_software

TINY = {"preset": "llama3.1-8b", "name": "tiny", "layers": 8, "hidden": 512, "ffn": 2048, "heads": 8,
        "kv_heads": 8, "seq_len": 512, "vocab": 8192}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


def _scenario(engine: Engine, software=None, *, model=TINY, mbs=1, m=8, gpus=1, tp=1, pp=1, **plan):
    dp = gpus // (tp * pp)
    data = {"cluster": {"system": "DGX-H100", "num_gpus": gpus}, "model": model,
            "plan": {"tp": tp, "pp": pp, "mbs": mbs, "gbs": mbs * m * dp, **plan}}
    if software is not None:
        data["software"] = software
    return scenario_from_dict(data, engine.catalog)


def _step(engine: Engine, software=None, **kw) -> float:
    return engine.evaluate(_scenario(engine, software, **kw), report=False).step_time_s


def test_host_bound_step_is_flat_in_micro_batch_size_on_an_eager_stack(engine):
    # Same number of micro-batches: a device-bound step grows with mbs, a host-bound one does not.
    eager = [_step(engine, "pytorch-fsdp2", mbs=b) for b in (1, 2, 4)]
    assert max(eager) / min(eager) < 1.02, eager
    graphs = [_step(engine, "megatron-core-te-cudagraphs", mbs=b) for b in (1, 2, 4)]
    assert graphs[0] < graphs[1] < graphs[2] and graphs[2] / graphs[0] > 1.5, graphs
    # and the eager floor is well above the device time the graphed stack shows
    assert eager[0] > 2.0 * graphs[0]


def test_the_floor_is_kernels_times_dispatch_cost(engine):
    # Host-bound: doubling the per-kernel cost doubles a layer pass.
    one = engine.evaluate(_scenario(engine, {"preset": "pytorch-fsdp2"}), report=False)
    two = engine.evaluate(_scenario(engine, {"preset": "pytorch-fsdp2", "dispatch_us": 28.0}), report=False)
    sw = resolve_software("pytorch-fsdp2", engine.catalog)
    per_layer_fwd = (sw.attention_fwd_ops + sw.mlp_fwd_ops) * sw.dispatch_us * 1e-6
    layers, mb = TINY["layers"], 8
    fwd_layers = layers * per_layer_fwd * mb
    edges = (sw.edge_fwd_ops + sw.edge_bwd_ops) * sw.dispatch_us * 1e-6 * mb  # the stage's ends, host-bound too
    assert two.breakdown.compute_s - one.breakdown.compute_s == pytest.approx(
        fwd_layers * (1 + (sw.attention_bwd_ops + sw.mlp_bwd_ops) / (sw.attention_fwd_ops + sw.mlp_fwd_ops)) + edges,
        rel=1e-6)
    assert any("host-bound on pytorch-fsdp2" in n for n in one.notes)


def test_a_large_model_is_unchanged_by_the_software_stack(engine):
    kw = {"model": "llama3.1-70b", "gpus": 64, "tp": 8, "mbs": 1, "m": 16}
    base = _step(engine, None, **kw)
    for name in engine.catalog.names("software"):
        # The host's share only (a stack without flash attention, with another attention
        # kernel, without TP or gradient-reduction overlap, or with other model states, is
        # another matter, below and in test_attention_kernel.py).
        same_kernels = {"preset": name, "flash_attention": True, "attention_kernel": "profile",
                        "tp_comm_overlap": True, "grad_reduce_overlap": True, "master_weights": True}
        assert _step(engine, same_kernels, **kw) == pytest.approx(base, rel=0.005), name
    est = engine.evaluate(_scenario(engine, None, **kw), report=False)
    assert not any("host-bound" in n for n in est.notes)


def test_the_step_tail_and_pipeline_sends_cost_host_time(engine):
    base = engine.evaluate(_scenario(engine, "megatron-core-te"), report=False)
    slow_tail = engine.evaluate(_scenario(engine, {"step_us": 50_000.0}), report=False)
    # the optimizer step is no shorter than the host's step tail
    tail = 1e-6 * (50_000.0 + DEFAULT_SOFTWARE.optimizer_us_per_layer * TINY["layers"])
    assert slow_tail.breakdown.optimizer_s == pytest.approx(tail, rel=1e-9)
    assert slow_tail.step_time_s - base.step_time_s == pytest.approx(
        tail - base.breakdown.optimizer_s, rel=1e-6)
    # per micro-batch send/recv launches with pipelining (8 micro-batches, 2 stages)
    kw = {"gpus": 2, "pp": 2, "m": 8}
    p0 = _step(engine, {"p2p_us": 0.0, "microbatch_us": 0.0}, **kw)
    p1 = _step(engine, {"p2p_us": 20_000.0, "microbatch_us": 0.0}, **kw)
    # (m + bubble stages) micro-batch passes each pay the 20 ms on the bottleneck stage
    assert p1 - p0 >= 8 * 0.02


def test_default_is_megatron_core_te(engine):
    scn = _scenario(engine)
    assert scn.software is DEFAULT_SOFTWARE
    preset = resolve_software("megatron-core-te", engine.catalog)
    assert dataclasses.replace(preset, source="") == DEFAULT_SOFTWARE
    assert _step(engine, None) == _step(engine, "megatron-core-te")
    for name in engine.catalog.names("software"):
        assert resolve_software(name, engine.catalog).source, name  # every preset says where its numbers come from


def test_bad_software_input_names_the_field(engine):
    with pytest.raises(NotFoundError) as err:
        _scenario(engine, "no-such-stack")
    assert err.value.field == "software"
    with pytest.raises(NotFoundError) as err:
        _scenario(engine, {"preset": "nope"})
    assert err.value.field == "software.preset"
    with pytest.raises(SpecError) as err:
        _scenario(engine, {"preset": "pytorch-fsdp2", "dispatch_us": -1.0})
    assert err.value.field == "software.dispatch_us" and ">= 0" in str(err.value)
    with pytest.raises(SpecError) as err:
        _scenario(engine, {"graphed": ["attention", "router"]})
    assert err.value.field == "software.graphed[1]"
    with pytest.raises(SpecError) as err:
        _scenario(engine, {"dispatch": 3})
    assert err.value.field == "software.dispatch"
    with pytest.raises(SpecError) as err:
        _scenario(engine, 7)
    assert err.value.field == "software"


def test_batch_path_matches_one_by_one_with_mixed_software(engine):
    rng = random.Random(7)
    names = engine.catalog.names("software")
    scns = []
    for _ in range(120):
        model = rng.choice([TINY, "llama3.1-8b", "mixtral-8x7b"])
        tp, pp = rng.choice([1, 2]), rng.choice([1, 2])
        sw = rng.choice([None, *names, {"preset": rng.choice(names), "dispatch_us": rng.choice([2.0, 40.0])}])
        scns.append(_scenario(engine, sw, model=model, gpus=8, tp=tp, pp=pp, mbs=rng.choice([1, 2]),
                              m=rng.choice([1, 4, 8]), recompute=rng.choice(["none", "full"])))
    batch = engine.evaluate_many(scns, require_fit=False)
    assert batch.stats["evaluated"] > 0
    for i, scn in enumerate(scns):
        est = engine.evaluate(scn, report=False)
        assert batch.columns["step_time_s"][i] == est.step_time_s, (i, scn.software.name)
        assert batch.columns["optimizer_s"][i] == est.breakdown.optimizer_s
        assert batch.columns["compute_s"][i] == est.breakdown.compute_s


def test_reference_cases_take_their_stack_by_one_rule():
    assert case_software({"family": "NeMo AutoModel (PyTorch/FSDP2 backend) Pre-Training Performance"}) \
        == "nemo-automodel"
    assert case_software({"family": "Megatron-LM 2019 (Shoeybi et al.)"}) == "megatron-deepspeed"
    assert case_software({"family": "Korthikanti et al. 2022"}) == "megatron-deepspeed"
    assert case_software({"family": "NeMo 24.07 performance summary (pretraining)"}) == "megatron-core-te"
    assert case_software({"family": "Megatron-LM README H100 weak scaling"}) == "megatron-core-te"
    assert case_software({"family": "torchtitan Llama 3 8B"}) == "pytorch-fsdp2"
    assert case_software({"family": "NeMo Megatron Launcher A100 GPT scaling"}) == "nemo-megatron"
    assert case_software({"family": "x", "software": "megatron-core-te-cudagraphs"}) == "megatron-core-te-cudagraphs"


def test_software_travels_on_the_wire(engine):
    from twin.wire.convert import message_to_mapping, scenario_from_mapping

    data = {"cluster": {"system": "DGX-H100", "num_gpus": 8}, "model": "llama3.1-8b", "plan": {"gbs": 64},
            "software": {"preset": "pytorch-fsdp2", "dispatch_us": 20.0, "graphed": ["attention"]}}
    back = message_to_mapping(scenario_from_mapping(data))
    scn = scenario_from_dict(back, engine.catalog)
    assert scn.software.name == "pytorch-fsdp2" and scn.software.dispatch_us == 20.0
    assert scn.software.graphed == ("attention",)
    bare = message_to_mapping(scenario_from_mapping({**data, "software": "megatron-core-te-cudagraphs"}))
    assert scenario_from_dict(bare, engine.catalog).software.cuda_graphs is True


def test_software_is_a_frozen_slotted_spec():
    sw = Software()
    with pytest.raises(dataclasses.FrozenInstanceError):
        sw.dispatch_us = 1.0  # type: ignore[misc]
    assert not hasattr(sw, "__dict__")


def test_a_stack_without_flash_attention_runs_and_stores_attention_unfused(engine):
    """Megatron-LM before 2023 (megatron-deepspeed preset): batched GEMMs around a fused
    softmax, the score matrix kept for backward, so attention is slower and memory larger."""
    big = {"preset": "llama3.1-8b", "seq_len": 4096}
    flash = engine.evaluate(_scenario(engine, {"preset": "megatron-deepspeed", "flash_attention": True},
                                            model=big, gpus=8, tp=8))
    unfused = engine.evaluate(_scenario(engine, "megatron-deepspeed", model=big, gpus=8, tp=8))
    assert unfused.step_time_s > flash.step_time_s
    # Scores + softmax + dropout mask: 2.5 x heads x seq bytes-units per token (Korthikanti et al. §4).
    assert unfused.memory.activations > flash.memory.activations


def test_tp_overlap_defaults_to_what_the_stack_does(engine):
    """DTensor TP (pytorch-fsdp2) issues its collectives between the GEMMs: exposed, unless the plan says otherwise."""
    kw = {"model": "llama3.1-70b", "gpus": 8, "tp": 8, "mbs": 1, "m": 4}
    te = engine.evaluate(_scenario(engine, {"preset": "pytorch-fsdp2", "tp_comm_overlap": True}, **kw))
    dtensor = engine.evaluate(_scenario(engine, "pytorch-fsdp2", **kw))
    assert dtensor.breakdown.exposed_comm_s["tp"] > te.breakdown.exposed_comm_s["tp"]
    forced = engine.evaluate(_scenario(engine, "pytorch-fsdp2", overlap={"tp_comm": True}, **kw))
    assert forced.breakdown.exposed_comm_s["tp"] == pytest.approx(te.breakdown.exposed_comm_s["tp"])


def test_nemo_megatron_is_the_apex_stack_with_nemo_defaults(engine):
    """NeMo Megatron's GPT-3 configs (2022-2023, A100): no Transformer Engine, batched-GEMM
    attention, no TP overlap, and no recomputation unless a run sets it."""
    from twin.reference import STACK_DEFAULTS

    nemo = resolve_software("nemo-megatron", engine.catalog)
    apex = resolve_software("megatron-deepspeed", engine.catalog)
    assert nemo.flash_attention is False and nemo.tp_comm_overlap is False
    # the Apex kernels of Megatron-LM, but Apex's DistributedFusedAdam overlaps the reduction
    assert nemo.grad_reduce_overlap is True and apex.grad_reduce_overlap is False
    assert dataclasses.replace(nemo, name=apex.name, source=apex.source, grad_reduce_overlap=False) == apex
    assert STACK_DEFAULTS["nemo-megatron"]["recompute"] == "none"
    assert STACK_DEFAULTS["megatron-deepspeed"]["recompute"] == "full"


def test_a_stack_that_reduces_gradients_after_the_backward_exposes_all_of_it(engine):
    """Megatron-LM's local DDP (megatron-deepspeed) all-reduces after the backward: the whole
    data-parallel reduction is exposed; the same stack with the overlap hides it behind the
    backward but for the last bucket."""
    kw = {"model": "llama3.1-8b", "gpus": 16, "tp": 1, "mbs": 1, "m": 2,
          "optimizer_sharding": "none"}
    after = engine.evaluate(_scenario(engine, "megatron-deepspeed", **kw))
    under = engine.evaluate(_scenario(engine, {"preset": "megatron-deepspeed", "grad_reduce_overlap": True},
                                            **kw))
    assert after.breakdown.exposed_comm_s["dp"] == pytest.approx(after.comm_issued_s["dp"])
    assert under.breakdown.exposed_comm_s["dp"] < 0.5 * after.breakdown.exposed_comm_s["dp"]
    # plan.overlap.grad_reduce false turns it off on an overlapping stack too
    off = engine.evaluate(_scenario(engine, {"preset": "megatron-deepspeed", "grad_reduce_overlap": True},
                                          overlap={"grad_reduce": False}, **kw))
    assert off.breakdown.exposed_comm_s["dp"] == pytest.approx(after.breakdown.exposed_comm_s["dp"])
