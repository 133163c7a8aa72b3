"""Memory per GPU by category, for the most loaded pipeline stage.

Model states (Rajbhandari et al. 2020, ZeRO, §3; MODELING.md): mixed-precision Adam keeps
16-bit weights (2 B/param), fp32 main gradients (4 B, Megatron accumulates in fp32) and
fp32 master weights + Adam m and v (12 B). ZeRO-1/distributed optimizer shards the 12 B
over the data-parallel group, ZeRO-2 also the gradients, ZeRO-3/FSDP also the weights.

Activations (Korthikanti et al. 2022, §4) are counted tensor by tensor from the
sub-layer shapes; sequence parallelism shards the hidden-sized tensors over tp; flash
attention stores no score matrix; selective recompute drops it for unfused attention;
full recompute keeps only each layer's input. The first stage of a 1F1B pipeline holds
``min(p, m)`` micro-batches in flight; interleaving adds ``(p-1)/(p*v)`` (Narayanan et
al. 2021 §2.2.2); the other schedules hold their own counts (``twin.core.pipelines``).

Written once for one scenario and for a batch (``twin.core.ops``): plan fields may hold
one value per point (the model is shared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import ops, pipelines
from twin.core.specs import Model, recompute_module
from twin.core.units import GIB
from twin.core.workload import ACT_BYTES, Workload

# CUDA context, cuBLAS workspaces and NCCL channel buffers (PyTorch reports ~0.5-1 GiB of
# context per process; NCCL allocates NCCL_BUFFSIZE=4 MiB per channel per peer).
RUNTIME_RESERVED_BYTES = 2.5 * GIB
# Caching-allocator fragmentation on top of live tensors (PyTorch memory stats in
# large-scale runs typically show 5-10% reserved-but-unallocated).
FRAGMENTATION = 0.07
# Mixed-precision Adam keeps an fp32 master copy, momentum and variance: 4 + 4 + 4 bytes a
# parameter (Rajbhandari et al. 2020, ZeRO §3.1: K = 12).
ADAM_STATE_BYTES = 12.0
# Adam on 16-bit parameters without a master copy (torch.optim.Adam on a bf16 model, as
# NeMo AutoModel trains: its models are cast to bf16 and its benchmark configs use
# torch.optim.Adam): momentum and variance in the parameter's dtype, 2 + 2 bytes.
PURE_16BIT_ADAM_BYTES = 4.0


def lora_trainable_fraction(model: Model, plan: Any) -> Any:
    """Share of a layer's weights that LoRA adapters train.

    A rank-r adapter on a d x k weight trains r(d + k) parameters (Hu et al. 2021 §4);
    for the hidden-sized projections that dominate a layer that is 2r/h of the weight.
    """
    return ops.minimum(1.0, 2.0 * plan.lora_rank / model.hidden)


# The memory tiers a plan's state may not fit in, in the order a verdict names them.
TIERS = ("HBM", "host DRAM", "the CXL pool")


@dataclass(slots=True)  # a result object: see estimate.py on why not frozen
class MemoryBreakdown:
    """Bytes per GPU by category, the capacities and the verdict (arrays for a batch).

    ``offloaded``: bytes kept off HBM, in both tiers; ``offloaded_host`` of them in host DRAM
    (``host_capacity`` of it available to this GPU), the rest in the CXL pool
    (``pool_capacity``; 0: none).
    """

    weights: Any
    gradients: Any
    optimizer: Any
    activations: Any
    logits: Any
    runtime: Any
    offloaded: Any
    capacity: Any
    pool_capacity: Any
    offloaded_host: Any = 0.0
    host_capacity: Any = 0.0

    @property
    def total(self) -> Any:
        """Bytes that must live in HBM."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.runtime

    @property
    def offloaded_pool(self) -> Any:
        """Bytes kept in the CXL pool."""
        return self.offloaded - self.offloaded_host

    def tier_fits(self) -> tuple[Any, Any, Any]:
        """Whether HBM, host DRAM and the pool (``TIERS``) each hold what is kept there."""
        return (self.total <= self.capacity, self.offloaded_host <= self.host_capacity,
                self.offloaded_pool <= self.pool_capacity)

    @property
    def fits(self) -> Any:
        """Every tier holds what is kept there."""
        hbm, host, pool = self.tier_fits()
        return ops.logical_and(hbm, ops.logical_and(host, pool))

    def fits_leaving(self, headroom: float | None) -> Any:
        """It fits, leaving ``headroom`` (a share of HBM; 0 or None: none) free."""
        if not headroom:
            return self.fits
        return ops.logical_and(self.fits, self.total <= self.capacity * (1.0 - headroom))

    def full_tiers(self) -> list[str]:
        """The tiers (one scenario's) that do not hold what is kept there, HBM first."""
        return [name for name, ok in zip(TIERS, self.tier_fits(), strict=True) if not ok]

    def verdict(self) -> str:
        """One scenario's out-of-memory note naming each full tier with its need and capacity
        ("" when it fits).
        """
        needs = {"HBM": (self.total, self.capacity), "host DRAM": (self.offloaded_host, self.host_capacity),
                 "the CXL pool": (self.offloaded_pool, self.pool_capacity)}
        full = self.full_tiers()
        if not full:
            return ""
        return "does not fit: " + "; ".join(f"{needs[t][0] / GIB:.1f} GiB needed of {needs[t][1] / GIB:.1f} GiB {t}"
                                            for t in full)

    def as_gib(self) -> dict[str, float]:
        """Each category in GiB."""
        return {
            "weights_gib": self.weights / GIB, "gradients_gib": self.gradients / GIB,
            "optimizer_gib": self.optimizer / GIB, "activations_gib": self.activations / GIB,
            "logits_gib": self.logits / GIB, "runtime_gib": self.runtime / GIB,
            "total_gib": self.total / GIB, "capacity_gib": self.capacity / GIB,
            "offloaded_gib": self.offloaded / GIB, "offloaded_host_gib": self.offloaded_host / GIB,
            "host_capacity_gib": self.host_capacity / GIB,
        }


# Which of (weights, gradients, optimizer state) a sharding scheme shards over the
# data-parallel group, with FSDP's reshard_after_forward off / on (ZeRO §5: ZeRO-1 (and
# Megatron's distributed optimizer) shards the optimizer state, ZeRO-2 also the gradients,
# ZeRO-3 also the weights; PyTorch FSDP without resharding after forward keeps the
# gathered weights, i.e. ZeRO-2, with resharding it is ZeRO-3).
_SHARDED: dict[str, tuple[tuple[bool, bool, bool], tuple[bool, bool, bool]]] = {
    "none": ((False, False, False),) * 2,
    "distributed_optimizer": ((False, False, True),) * 2,
    "zero1": ((False, False, True),) * 2,
    "zero2": ((False, True, True),) * 2,
    "zero3": ((True, True, True),) * 2,
    "fsdp": ((False, True, True), (True, True, True)),
}


def shard_flags(sharding: Any, reshard: Any) -> tuple[Any, Any, Any]:
    """Whether (weights, gradients, optimizer state) are sharded over the data-parallel group."""
    if not ops.is_batch(sharding, reshard):
        return _SHARDED[sharding][1 if reshard else 0]
    names, codes = (sharding.categories, np.asarray(sharding)) if isinstance(sharding, ops.Labels) else \
        np.unique(np.asarray(sharding), return_inverse=True)
    table = np.asarray([_SHARDED[str(nm)] for nm in names])            # (names, reshard, 3)
    flags = table[np.reshape(codes, -1), np.asarray(reshard, np.int64).reshape(-1)]
    return flags[:, 0], flags[:, 1], flags[:, 2]


def weights_sharded(plan: Any) -> Any:
    """ZeRO-3, or FSDP resharding after forward: weights are sharded and gathered every micro-batch."""
    return shard_flags(plan.optimizer_sharding, plan.fsdp_reshard_after_forward)[0]


def shard_factors(sharding: Any, reshard: Any, dp_shard: Any) -> tuple[Any, Any, Any]:
    """Divisors of (weights, gradients, optimizer) under a sharding scheme (ZeRO §5)."""
    weights, grads, optim = shard_flags(sharding, reshard)
    return (ops.where(weights, dp_shard, 1.0), ops.where(grads, dp_shard, 1.0), ops.where(optim, dp_shard, 1.0))


@dataclass(frozen=True, slots=True)
class StateDivisors:
    """Over how many GPUs each model state is sharded (dense and expert parameters)."""

    weights: Any
    gradients: Any
    optimizer: Any
    expert_weights: Any
    expert_gradients: Any
    expert_optimizer: Any


def state_divisors(plan: Any, dp: Any) -> StateDivisors:
    """The sharding divisors of a plan: dense states over the data-parallel group with context
    parallelism (dp*cp, or ``plan.dp_shard`` of them with hybrid sharding), expert states over
    the expert-data-parallel group.
    """
    w_sh, g_sh, o_sh = shard_flags(plan.optimizer_sharding, plan.fsdp_reshard_after_forward)
    dp_shard = ops.where(plan.dp_shard > 0, plan.dp_shard, dp * plan.cp)  # hybrid sharding: k ranks
    edp = ops.maximum(1, plan.tp * plan.cp * dp // (plan.ep * plan.expert_tp))
    return StateDivisors(ops.where(w_sh, dp_shard, 1.0), ops.where(g_sh, dp_shard, 1.0), ops.where(o_sh, dp_shard, 1.0),
                         ops.where(w_sh, edp, 1.0), ops.where(g_sh, edp, 1.0), ops.where(o_sh, edp, 1.0))


def _low_precision(precision: Any) -> Any:
    return ops.isin(precision, ("fp8", "fp4"))


def activation_bytes_per_token_layer(plan: Any, model: Model, w: Workload, flash: Any) -> Any:
    """Stored activation bytes per token (per micro-batch token on this GPU) per layer,
    for a layer that is not fully recomputed.

    GEMM inputs kept for the weight-gradient GEMM are stored in FP8 when training in FP8
    (Transformer Engine's Linear/LayerNormLinear save the FP8-cast input for backward);
    everything else stays 16-bit.
    """
    tp = plan.tp
    h = model.hidden
    h_sp = ops.where(plan.sp, h / tp, h)
    g_in = ops.where(_low_precision(plan.precision), 1.0, ACT_BYTES)  # bytes of a saved GEMM input
    b = ACT_BYTES
    mult = 3 if model.gated_mlp else 2  # fc1 output width in units of ffn (gated: two halves)
    # Selective recomputation's modules (Megatron-Core recompute_modules; "output-discarding"
    # checkpoints drop the module's output and recompute it from its stored input):
    # layernorm drops each norm's output (the next GEMM's input), mla_up_proj the MLA
    # up-projections' q/k/v (their latent inputs are kept instead), moe_act the expert
    # activation's output (fc2's input). Under DeepSeek's FP8 recipe ("blockwise") the
    # cached activation input is FP8 too (DeepSeek-V3 report §3.3.3, "Inputs of the SwiGLU
    # operator in MoE ... stored in FP8").
    norm_out = ops.where(recompute_module(plan, "layernorm"), 0.0, g_in * h_sp)
    total: Any = 0.0
    for kind, count in w.counts.items():
        if kind == "attention":
            a, g, d = model.heads, model.kv_head_count, model.head_size
            qkv = b * (a + 2 * ops.maximum(g, tp)) * d / tp
            mla = model.mla
            if model.attention == "mla" and mla is not None:
                up = recompute_module(plan, "mla_up_proj")
                if ops.any_(up):
                    latents = g_in * ((mla.q_lora_rank or 0) + mla.kv_lora_rank) + b * mla.qk_rope_head_dim
                    qkv = ops.where(up, latents, qkv)
            # norm input, QKV GEMM input, q/k/v for attention backward, output (proj input)
            per = b * h_sp + norm_out + qkv + g_in * a * d / tp
            # The score matrix of unfused attention, unless recomputed (core_attn) or the layer
            # is fully recomputed.
            stored = ops.logical_or(plan.recompute == "none", ops.logical_and(
                plan.recompute == "selective", ops.logical_not(recompute_module(plan, "core_attn"))))
            unfused = ops.logical_and(ops.logical_not(flash), stored)
            if ops.any_(unfused):
                # scores, softmax, dropout (5as/h term)
                per = ops.where(unfused, per + b * 2.5 * a * model.seq_len / plan.cp / tp, per)
        elif kind == "mlp":
            f = model.ffn_size
            # norm input, fc1 input, fc1 output (activation input), activation output (fc2 input);
            # recomputed (module mlp: Megatron-Core checkpoints the MLP on its input), the norm
            # input and the MLP's input only.
            per = b * h_sp + norm_out + ops.where(recompute_module(plan, "mlp"), 0.0,
                                                  b * (mult - 1) * f / tp + g_in * f / tp)
        elif kind == "moe":
            moe = model.moe
            assert moe is not None
            fe = moe.expert_ffn / plan.expert_tp
            inner = moe.latent_size or h
            # Copies per token of w.tokens held by one GPU: tokens*etp/tp with sequence
            # parallelism (workload._moe), on the busiest rank (MoE.busiest_load).
            routed = moe.top_k * moe.busiest_load * ops.where(plan.sp, plan.expert_tp / tp, 1.0)
            act_in, act_out = b * (mult - 1) * fe, g_in * fe
            recomputed_act = recompute_module(plan, "moe_act")
            if ops.any_(recomputed_act):
                fp8_cache = ops.logical_and(plan.precision == "fp8", plan.recipe == "blockwise")
                act_in = ops.where(ops.logical_and(recomputed_act, fp8_cache), 1.0 * (mult - 1) * fe, act_in)
                act_out = ops.where(recomputed_act, 0.0, act_out)
            inside = routed * (g_in * inner + act_in + act_out)
            if moe.shared_experts:
                fs = (moe.shared_expert_ffn or moe.expert_ffn) * moe.shared_experts / tp
                inside += b * (mult - 1) * fs + g_in * fs
            # Module moe checkpoints the whole MoE layer (shared experts included) on its input.
            per = b * h_sp + norm_out + ops.where(recompute_module(plan, "moe"), 0.0, inside)
        else:  # mamba: norm input, in_proj input, in_proj output, conv/scan output (out_proj input)
            hy = model.hybrid
            assert hy is not None
            d_in = hy.mamba_heads * hy.mamba_head_dim
            per = b * h_sp + g_in * h_sp + b * 2 * d_in / tp + g_in * d_in / tp
        total += per * count
    return total / w.layers


@dataclass(frozen=True, slots=True)
class ActivationTerms:
    """The activation memory of the first stage, split by how it scales with micro-batches."""

    per_microbatch: Any      # stored bytes of one micro-batch in flight (all layers of the stage)
    recompute_live: Any      # one layer's full activations, live while it is recomputed
    stored_per_token: Any    # bytes per token of a layer that is not recomputed
    per_token: Any           # bytes per token and layer, recomputed layers counted at their input


def activation_terms(plan: Any, model: Model, w: Workload, flash: Any) -> ActivationTerms:
    """Activation bytes of the most loaded (first) stage that do not depend on m or v."""
    layers_stage = first_stage_layers(model.layers, plan.pp, plan.pp_first_layers, plan.pp_last_layers)
    stored = activation_bytes_per_token_layer(plan, model, w, flash)
    checkpoint = ACT_BYTES * ops.where(plan.sp, model.hidden / plan.tp, model.hidden)  # a recomputed layer's input
    recomputed = recomputed_layers(plan.recompute, plan.recompute_layers, layers_stage)
    per_token = (stored * (layers_stage - recomputed) + checkpoint * recomputed) / ops.maximum(layers_stage, 1)
    live = ops.where(recomputed > 0, stored * w.tokens, 0.0)
    return ActivationTerms(per_microbatch=per_token * w.tokens * layers_stage, recompute_live=live,
                           stored_per_token=stored, per_token=per_token)


def in_flight_microbatches(pp: Any, vp: Any, m: Any, schedule: Any = "auto") -> Any:
    """Micro-batches whose activations the first stage holds under ``schedule``
    (``twin.core.pipelines.in_flight``: 1F1B min(p, m); interleaving adds (p-1)/(p*v) of a
    micro-batch per chunk, Narayanan et al. 2021 §2.2.2; ZB-H2 2p-1, DualPipe p+1, ...).
    """
    return pipelines.in_flight(pp, vp, m, schedule)


@dataclass(frozen=True, slots=True)
class ModelStates:
    """Bytes per GPU of the model states before any offloading, and what they were built from.

    They depend on the plan's degrees and sharding, not on the micro-batch count or the
    interleaving depth.
    """

    weights: Any
    gradients: Any
    optimizer: Any
    weight_bytes: Any        # bytes per weight (16-bit, + an FP8 copy when training in FP8)
    divisors: StateDivisors


def model_states(plan: Any, model: Model, w: Workload, dp: Any, params_gpu: Any, expert_params_gpu: Any,
                 divisors: StateDivisors | None = None, master_weights: bool = True) -> ModelStates:
    """Weights, gradients and optimizer state of the most loaded GPU (ZeRO §3, §5).

    ``master_weights`` (the stack's ``Software.master_weights``): mixed-precision Adam with
    an fp32 master copy and fp32 moments (12 B a parameter) and fp32 main gradients when
    they are reduced in fp32; off, 16-bit parameters whose optimizer moments and gradients
    share their dtype (``PURE_16BIT_ADAM_BYTES``, 2-byte gradients).
    """
    d = divisors if divisors is not None else state_divisors(plan, dp)
    dense = params_gpu - expert_params_gpu
    weight_bytes = 2.0 + ops.where(_low_precision(plan.precision), 1.0, 0.0)  # + fp8 weight copy
    grad_bytes = ops.where(plan.grad_reduce_dtype == "fp32", 4.0, 2.0) if master_weights else 2.0
    adam_bytes = ADAM_STATE_BYTES if master_weights else PURE_16BIT_ADAM_BYTES
    weights = weight_bytes * (dense / d.weights + expert_params_gpu / d.expert_weights)
    # FSDP/ZeRO-3 gathers about two layers at a time (current + prefetch)
    weights = ops.where(d.weights > 1, weights + weight_bytes * 2 * params_gpu / ops.maximum(1.0, w.layers / plan.pp),
                        weights)
    lora = plan.trainable == "lora"
    trainable = lora_trainable_fraction(model, plan) * params_gpu
    grads = ops.where(lora, grad_bytes * trainable,
                      grad_bytes * (dense / d.gradients + expert_params_gpu / d.expert_gradients))
    optim = ops.where(lora, adam_bytes * trainable,
                      adam_bytes * (dense / d.optimizer + expert_params_gpu / d.expert_optimizer))
    return ModelStates(weights=weights, gradients=grads, optimizer=optim, weight_bytes=weight_bytes, divisors=d)


def memory_per_gpu(plan: Any, model: Model, w: Workload, dp: Any, m: Any, params_gpu: Any,
                   expert_params_gpu: Any, capacity: Any, pool_capacity: Any, flash: Any,
                   act: ActivationTerms | None = None, states: ModelStates | None = None,
                   host_capacity: Any = 0.0) -> MemoryBreakdown:
    """Memory of the most loaded GPU (first or last pipeline stage).

    ``act`` and ``states``: the activation terms and model states when already known
    (neither depends on m or v). ``capacity``, ``host_capacity`` and ``pool_capacity``: what
    HBM, host DRAM and the CXL pool hold for this GPU; each offloaded state is counted in the
    tier its ``plan.offload`` target names.
    """
    p = plan.pp
    if states is None:
        states = model_states(plan, model, w, dp, params_gpu, expert_params_gpu)
    weights, grads, optim = states.weights, states.gradients, states.optimizer
    if act is None:
        act = activation_terms(plan, model, w, flash)
    activations = act.per_microbatch * in_flight_microbatches(p, plan.vp, m, plan.schedule) + act.recompute_live
    logits = (ACT_BYTES + 4.0) * w.tokens * model.vocab / plan.tp  # bf16 logits + fp32 softmax (last stage)
    if ops.any_(p > 1):
        # Pipelined, the logits live on the last stage only, which holds fewer micro-batches
        # in flight than the first: one under 1F1B, 1 + (v-1)p/v with interleaving (its
        # warm-up, Narayanan et al. 2021 §2.2.2). The most loaded of the two is counted.
        first_l, _, last_l = stage_layers(model.layers, p, plan.pp_first_layers, plan.pp_last_layers)
        in_flight_last = ops.minimum(m, 1.0 + (plan.vp - 1) * p / plan.vp)
        last = act.per_microbatch * last_l / ops.maximum(first_l, 1) * in_flight_last + act.recompute_live
        last_heavier = ops.logical_and(p > 1, last + logits > activations)
        # ZB-V, DualPipe and DualPipeV keep the LM head on the first rank (twin.core.pipelines):
        # its logits add to the first rank's activations.
        on_first = pipelines.both_ends_on_first(plan)
        if ops.any_(on_first):
            last_heavier = ops.logical_and(last_heavier, ops.logical_not(on_first))
            activations = ops.where(last_heavier, last, activations)
            logits = ops.where(ops.logical_or(ops.logical_or(p == 1, last_heavier), on_first), logits, 0.0)
        else:
            activations = ops.where(last_heavier, last, activations)
            logits = ops.where(ops.logical_or(p == 1, last_heavier), logits, 0.0)
    offloaded: Any = 0.0
    host: Any = 0.0
    o = plan.offload
    off_opt, off_par, off_act = o.optimizer != "none", o.params != "none", o.activations != "none"
    if ops.any_(off_opt):
        offloaded = ops.where(off_opt, offloaded + optim, offloaded)
        host = ops.where(o.optimizer == "host", host + optim, host)
        optim = ops.where(off_opt, 0.0, optim)
    if ops.any_(off_par):
        offloaded = ops.where(off_par, offloaded + weights, offloaded)
        host = ops.where(o.params == "host", host + weights, host)
        layers_stage = first_stage_layers(model.layers, p, plan.pp_first_layers, plan.pp_last_layers)
        weights = ops.where(off_par, states.weight_bytes * 2 * params_gpu / ops.maximum(1.0, layers_stage), weights)
    if ops.any_(off_act):
        # Each micro-batch in flight keeps its last layer in HBM (never offloaded: twin.core.offload)
        # and one layer is in transit; the rest of what they saved is in the tier.
        layer, in_flight = act.per_token * w.tokens, in_flight_microbatches(p, plan.vp, m, plan.schedule)
        sent = ops.maximum(activations - act.recompute_live - layer * in_flight, 0.0)
        offloaded = ops.where(off_act, offloaded + sent, offloaded)
        host = ops.where(o.activations == "host", host + sent, host)
        activations = ops.where(off_act, ops.minimum(activations, layer * (in_flight + 1) + act.recompute_live),
                                activations)
    live = weights + grads + optim + activations + logits
    runtime = RUNTIME_RESERVED_BYTES + FRAGMENTATION * live
    return MemoryBreakdown(
        weights=weights, gradients=grads, optimizer=optim, activations=activations, logits=logits,
        runtime=runtime, offloaded=offloaded, capacity=capacity, pool_capacity=pool_capacity, offloaded_host=host,
        host_capacity=host_capacity)


def recomputed_layers(recompute: Any, requested: Any, layers_stage: Any) -> Any:
    """Layers of a stage that are fully recomputed (Megatron --recompute-num-layers).

    ``requested`` None (or 0 in a batch column) means all layers of the stage.
    """
    full = recompute == "full"
    if not ops.is_batch(full, requested, layers_stage):
        if not full:
            return 0.0
        return float(layers_stage) if requested is None else float(min(requested, layers_stage))
    req = np.asarray(0 if requested is None else requested)
    layers = np.asarray(layers_stage, dtype=np.float64)
    return np.where(full, np.where(req > 0, np.minimum(req, layers), layers), 0.0)


def stage_layers(layers: int, pp: Any, first_given: Any = None, last_given: Any = None) -> tuple[Any, Any, Any]:
    """Layers on the (first, middle, last) pipeline stages.

    Even when ``pp`` divides ``layers`` (Megatron-Core's default split). Otherwise the
    stages one layer short are the last and the first, which also hold the LM head and
    the most in-flight activations (Llama 3 paper §3.3.2: "one fewer layer on the first
    and the last stage"). ``first_given`` / ``last_given`` (None, or 0 in a batch: not
    set) are Megatron-Core's uneven layout (--decoder-first-pipeline-num-layers,
    --decoder-last-pipeline-num-layers): the other stages split the rest evenly.
    """
    if not ops.is_batch(pp, first_given, last_given):
        return _stage_layers_one(layers, pp, first_given or 0, last_given or 0)
    base, extra = divmod(layers, pp)
    even = extra == 0
    short = pp - extra
    first = ops.where(ops.logical_or(even, short >= 2), base, base + 1)
    middle = ops.where(even, base, base + 1)
    last: Any = base
    f = 0 if first_given is None else first_given
    last_n = 0 if last_given is None else last_given
    if ops.any_(ops.logical_or(f > 0, last_n > 0)):
        rest_stages = pp - (f > 0) - (last_n > 0)
        per = (layers - f - last_n) // ops.maximum(rest_stages, 1)
        uneven = ops.logical_or(f > 0, last_n > 0)
        first = ops.where(uneven, ops.where(f > 0, f, per), first)
        last = ops.where(uneven, ops.where(last_n > 0, last_n, per), last)
        middle = ops.where(uneven, per, middle)
    return first, middle, last


def _stage_layers_one(layers: int, pp: int, f: int, last_n: int) -> tuple[int, int, int]:
    """:func:`stage_layers` of one scenario, in plain integers (it runs on every evaluation)."""
    if f or last_n:
        per = (layers - f - last_n) // max(pp - (f > 0) - (last_n > 0), 1)
        return (f or per), per, (last_n or per)
    base, extra = divmod(layers, pp)
    if extra == 0:
        return base, base, base
    return (base if pp - extra >= 2 else base + 1), base + 1, base


def first_stage_layers(layers: int, pp: Any, first_given: Any = None, last_given: Any = None) -> Any:
    """Layers on the first pipeline stage (see :func:`stage_layers`)."""
    return stage_layers(layers, pp, first_given, last_given)[0]
