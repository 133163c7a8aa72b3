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
al. 2021 §2.2.2).
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.core.specs import Model, Plan, Scenario
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


def lora_trainable_fraction(model: Model, plan: Plan) -> float:
    """Share of a layer's weights that LoRA adapters train.

    A rank-r adapter on a d x k weight trains r(d + k) parameters (Hu et al. 2021 §4);
    for the hidden-sized projections that dominate a layer that is 2r/h of the weight.
    """
    return min(1.0, 2.0 * plan.lora_rank / model.hidden)


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per GPU by category, the capacity and the verdict."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    runtime: float
    offloaded: float
    capacity: float
    pool_capacity: float

    @property
    def total(self) -> float:
        """Bytes that must live in HBM."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.runtime

    @property
    def fits(self) -> bool:
        """HBM holds it, and the offload target holds what was sent there."""
        return self.total <= self.capacity and self.offloaded <= self.pool_capacity

    def as_gib(self) -> dict[str, float]:
        """Each category in GiB."""
        return {
            "weights_gib": self.weights / GIB, "gradients_gib": self.gradients / GIB,
            "optimizer_gib": self.optimizer / GIB, "activations_gib": self.activations / GIB,
            "logits_gib": self.logits / GIB, "runtime_gib": self.runtime / GIB,
            "total_gib": self.total / GIB, "capacity_gib": self.capacity / GIB,
            "offloaded_gib": self.offloaded / GIB,
        }


def shard_factors(sharding: str, reshard: bool, dp_shard: int) -> tuple[float, float, float]:
    """Divisors of (weights, gradients, optimizer) under a sharding scheme (ZeRO §5)."""
    if sharding in ("distributed_optimizer", "zero1"):
        return 1.0, 1.0, dp_shard
    if sharding == "zero2" or (sharding == "fsdp" and not reshard):
        return 1.0, dp_shard, dp_shard
    if sharding in ("zero3", "fsdp"):
        return dp_shard, dp_shard, dp_shard
    return 1.0, 1.0, 1.0


def _activation_bytes_per_token_layer(scn: Scenario, w: Workload) -> float:
    """Stored activation bytes per token (per micro-batch token on this GPU) per layer,
    for a layer that is not fully recomputed.

    GEMM inputs kept for the weight-gradient GEMM are stored in FP8 when training in FP8
    (Transformer Engine's Linear/LayerNormLinear save the FP8-cast input for backward);
    everything else stays 16-bit.
    """
    plan, model = scn.plan, scn.model
    tp = plan.tp
    h = model.hidden
    h_sp = h / tp if plan.sp else h
    g_in = 1.0 if plan.precision in ("fp8", "fp4") else ACT_BYTES  # bytes of a saved GEMM input
    b = ACT_BYTES
    mult = 3 if model.gated_mlp else 2  # fc1 output width in units of ffn (gated: two halves)
    total = 0.0
    for kind, count in w.counts.items():
        if kind == "attention":
            a, g, d = model.heads, model.kv_head_count, model.head_size
            # norm input, QKV GEMM input, q/k/v for attention backward, output (proj input)
            per = b * h_sp + g_in * h_sp + b * (a + 2 * max(g, tp)) * d / tp + g_in * a * d / tp
            if not _flash(scn) and plan.recompute == "none":
                per += b * 2.5 * a * model.seq_len / plan.cp / tp  # scores, softmax, dropout (5as/h term)
        elif kind == "mlp":
            f = model.ffn_size
            # norm input, fc1 input, fc1 output (activation input), activation output (fc2 input)
            per = b * h_sp + g_in * h_sp + b * (mult - 1) * f / tp + g_in * f / tp
        elif kind == "moe":
            moe = model.moe
            assert moe is not None
            fe = moe.expert_ffn / plan.expert_tp
            inner = moe.latent_size or h
            routed = moe.top_k * moe.kept_fraction
            per = b * h_sp + g_in * h_sp + routed * (g_in * inner + b * (mult - 1) * fe + g_in * fe)
            if moe.shared_experts:
                fs = (moe.shared_expert_ffn or moe.expert_ffn) * moe.shared_experts / tp
                per += b * (mult - 1) * fs + g_in * fs
        else:  # mamba: norm input, in_proj input, in_proj output, conv/scan output (out_proj input)
            hy = model.hybrid
            assert hy is not None
            d_in = hy.mamba_heads * hy.mamba_head_dim
            per = b * h_sp + g_in * h_sp + b * 2 * d_in / tp + g_in * d_in / tp
        total += per * count
    return total / w.layers


def _flash(scn: Scenario) -> bool:
    eff = scn.cluster.gpu.efficiency
    return True if eff is None else eff.flash_attention


def memory_per_gpu(scn: Scenario, w: Workload, dp: int, m: int, params_gpu: float,
                   expert_params_gpu: float, pool_capacity: float) -> MemoryBreakdown:
    """Memory of the most loaded GPU (first or last pipeline stage)."""
    plan, model = scn.plan, scn.model
    p, v = plan.pp, plan.vp
    dp_shard = dp * plan.cp
    edp = max(1, plan.tp * plan.cp * dp // (plan.ep * plan.expert_tp))
    dense = params_gpu - expert_params_gpu
    wdiv, gdiv, odiv = shard_factors(plan.optimizer_sharding, plan.fsdp_reshard_after_forward, dp_shard)
    ewdiv, egdiv, eodiv = shard_factors(plan.optimizer_sharding, plan.fsdp_reshard_after_forward, edp)
    weight_bytes = 2.0 + (1.0 if plan.precision in ("fp8", "fp4") else 0.0)  # + fp8 weight copy
    grad_bytes = 4.0 if plan.grad_reduce_dtype == "fp32" else 2.0
    weights = weight_bytes * (dense / wdiv + expert_params_gpu / ewdiv)
    if wdiv > 1:  # FSDP/ZeRO-3 gathers about two layers at a time (current + prefetch)
        weights += weight_bytes * 2 * params_gpu / max(1.0, w.layers / p)
    if plan.trainable == "lora":
        trainable = lora_trainable_fraction(model, plan) * params_gpu
        grads = grad_bytes * trainable
        optim = ADAM_STATE_BYTES * trainable
    else:
        grads = grad_bytes * (dense / gdiv + expert_params_gpu / egdiv)
        optim = ADAM_STATE_BYTES * (dense / odiv + expert_params_gpu / eodiv)
    layers_stage = first_stage_layers(model.layers, p)
    stored = _activation_bytes_per_token_layer(scn, w)
    checkpoint = ACT_BYTES * (model.hidden / plan.tp if plan.sp else model.hidden)  # a recomputed layer's input
    recomputed = recomputed_layers(plan.recompute, plan.recompute_layers, layers_stage)
    per_token = (stored * (layers_stage - recomputed) + checkpoint * recomputed) / max(layers_stage, 1)
    if p > 1:
        in_flight = min(p, m) * (1.0 + ((p - 1) / (p * v) if v > 1 else 0.0))
    else:
        in_flight = 1.0
    activations = per_token * w.tokens * layers_stage * in_flight
    if recomputed:  # one layer's full activations are live during its recompute
        activations += stored * w.tokens
    logits = (ACT_BYTES + 4.0) * w.tokens * model.vocab / plan.tp  # bf16 logits + fp32 softmax (last stage)
    offloaded = 0.0
    if plan.offload.optimizer != "none":
        offloaded += optim
        optim = 0.0
    if plan.offload.params != "none":
        offloaded += weights
        weights = weight_bytes * 2 * params_gpu / max(1.0, layers_stage)
    if plan.offload.activations != "none":
        offloaded += activations
        activations = per_token * w.tokens * 2  # two layers staged in HBM
    live = weights + grads + optim + activations + logits
    runtime = RUNTIME_RESERVED_BYTES + FRAGMENTATION * live
    return MemoryBreakdown(
        weights=weights, gradients=grads, optimizer=optim, activations=activations, logits=logits,
        runtime=runtime, offloaded=offloaded, capacity=scn.cluster.gpu.hbm_gib * GIB,
        pool_capacity=pool_capacity)


def recomputed_layers(recompute: str, requested: int | None, layers_stage: float) -> float:
    """Layers of a stage that are fully recomputed (Megatron --recompute-num-layers)."""
    if recompute != "full":
        return 0.0
    if requested is None:
        return float(layers_stage)
    return float(min(requested, layers_stage))


def first_stage_layers(layers: int, pp: int) -> int:
    """Layers on the first pipeline stage (see ``evaluate.stage_layers``)."""
    base, extra = divmod(layers, pp)
    if extra == 0:
        return base
    return base if pp - extra >= 2 else base + 1
