"""What one GPU computes for one micro-batch: GEMM shapes, attention work, memory traffic.

Per sub-layer (attention, MLP, MoE, Mamba) and per GPU, for the forward pass of one
micro-batch of ``mbs`` sequences, after tensor (``tp``), context (``cp``) and expert
(``ep``/``etp``) parallel splits. Backward and recomputation are derived in
``compute.py``.

FLOP conventions (MODELING.md; Narayanan et al. 2021 appendix; Megatron-Core
``num_floating_point_operations``): a GEMM of (M x K) by (K x N) is 2*M*N*K FLOPs;
attention scores and values are 2*s*d each per query per head; backward = 2x forward.
``model_flops`` follows the Megatron/PaLM MFU convention (no causal discount, no
recompute); the *time* model uses the work actually done (flash attention skips the
masked half of causal attention).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from twin.core import ops
from twin.core.specs import Model

ACT_BYTES = 2.0  # activations travel in bf16/fp16 between kernels
# Element-wise traffic per token, in units of hidden*ACT_BYTES, of one sub-layer's
# norm + residual add in the forward pass: layer norm reads and writes h (2), the
# residual add reads two and writes one (3). Korthikanti et al. 2022 §4 list the same
# tensors when counting stored activations.
NORM_RESIDUAL_UNITS = 5.0
# Fused vocab-parallel cross entropy: logits written in bf16, then fp32 softmax passes;
# ~10 bytes per logit forward (Megatron-Core fused_vocab_parallel_cross_entropy).
LOGIT_BYTES = 10.0
# Mamba-2 SSD chunk length (state-spaces/mamba Mamba2 default chunk_size=256).
SSD_CHUNK = 256


@dataclass(frozen=True, slots=True)
class Gemm:
    """A forward GEMM on one GPU: (m x k) @ (k x n), ``count`` times per micro-batch."""

    m: Any
    n: Any
    k: Any
    count: Any = 1.0
    frozen_weights: bool = False
    # Kept in 16 bits under a low-precision recipe: the LM head (Megatron-Core's output layer
    # is not a Transformer Engine module) and the MoE router (DeepSeek-V3 report §3.3.1
    # keeps embedding, output head and gating in their original precision).
    high_precision: bool = False

    @property
    def flops(self) -> float:
        """Forward FLOPs of all ``count`` instances."""
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True, slots=True)
class SubLayer:
    """Forward work of one sub-layer on one GPU for one micro-batch."""

    kind: str
    gemms: tuple[Gemm, ...] = ()
    attn_flops: Any = 0.0            # actual fused-attention FLOPs (causal/window aware)
    attn_kv_len: Any = 0.0           # mean keys per query (flash efficiency ramp)
    attn_scores: Any = 0.0           # score-matrix elements (unfused attention traffic)
    attn_flops_dense: Any = 0.0      # unmasked attention FLOPs (what unfused kernels compute)
    attn_exps: Any = 0.0             # softmax exponentials (one per computed score)
    ssm_flops: Any = 0.0
    elementwise_bytes: Any = 0.0
    model_flops: Any = 0.0           # forward, MFU convention
    params: Any = 0.0                # parameters of this sub-layer on this GPU
    params_total: Any = 0.0          # parameters of this sub-layer in the whole model
    expert_params: Any = 0.0         # share of ``params`` that are expert weights


@dataclass(frozen=True, slots=True)
class Workload:
    """The model as sub-layer kinds and how many of each each layer slot holds."""

    sublayers: dict[str, SubLayer]
    counts: dict[str, int]           # sub-layers of each kind in the whole model
    layers: int
    embedding: SubLayer
    head: SubLayer
    tokens: Any                      # tokens per GPU per micro-batch in GEMMs (mbs*s/cp)
    extra: dict[str, float] = field(default_factory=dict)

    def per_layer(self, attr: str) -> float:
        """Mean of ``attr`` summed over one layer's sub-layers."""
        total = sum(getattr(self.sublayers[k], attr) * c for k, c in self.counts.items())
        return total / self.layers


def _attention(model: Model, tp: int, cp: int, mbs: int, sp: bool, tokens: int) -> SubLayer:
    s, h = model.seq_len, model.hidden
    a, g, d = model.heads, model.kv_head_count, model.head_size
    heads_gpu = a / tp
    kv_gpu = ops.maximum(1.0, g / tp)
    t_sp = ops.where(sp, tokens / tp, tokens)
    gemms: list[Gemm]
    if model.attention == "mla" and model.mla is not None:
        mla = model.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        vd = mla.v_head_dim
        gemms = []
        if mla.q_lora_rank:
            gemms.append(Gemm(tokens, mla.q_lora_rank, h))                         # q down (replicated)
            gemms.append(Gemm(tokens, ops.trunc(heads_gpu * qk), mla.q_lora_rank))        # q up
            q_params = h * mla.q_lora_rank + mla.q_lora_rank * a * qk
        else:
            gemms.append(Gemm(tokens, ops.trunc(heads_gpu * qk), h))
            q_params = h * a * qk
        gemms.append(Gemm(tokens, mla.kv_lora_rank + mla.qk_rope_head_dim, h))     # kv down (replicated)
        gemms.append(Gemm(tokens, ops.trunc(heads_gpu * (mla.qk_nope_head_dim + vd)), mla.kv_lora_rank))
        gemms.append(Gemm(tokens, h, ops.trunc(heads_gpu * vd)))                          # out proj
        params_total = q_params + h * (mla.kv_lora_rank + mla.qk_rope_head_dim) \
            + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + vd) + a * vd * h
        replicated = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + (h * mla.q_lora_rank if mla.q_lora_rank else 0)
        params_gpu = (params_total - replicated) / tp + replicated
        qk_dim, v_dim = qk, vd
        rope_units = 2.0 * heads_gpu * qk / h
    else:
        gemms = [Gemm(tokens, ops.trunc((heads_gpu + 2 * kv_gpu) * d), h),                 # fused QKV
                 Gemm(tokens, h, ops.trunc(heads_gpu * d))]                                # out proj
        params_total = h * (a + 2 * g) * d + a * d * h
        params_gpu = h * (heads_gpu + 2 * kv_gpu) * d + heads_gpu * d * h
        qk_dim, v_dim = d, d
        rope_units = 2.0 * (heads_gpu + kv_gpu) * d / h                             # rotary on q and k
    # Query-key pairs per sequence: causal full attention s(s+1)/2; a sliding window w gives ~s*w.
    full_pairs = s * (s + 1) / 2.0
    pairs = full_pairs
    kv_len = (s + 1) / 2.0
    if model.sliding_window is not None:
        w = min(model.sliding_window.window, s)
        win_pairs = s * w - w * (w - 1) / 2.0
        frac = 0.5 if model.sliding_window.every_other_layer else 1.0
        pairs = (1 - frac) * full_pairs + frac * win_pairs
        kv_len = (1 - frac) * kv_len + frac * w
    seqs_gpu = mbs / cp
    attn_flops = 2.0 * pairs * seqs_gpu * heads_gpu * (qk_dim + v_dim)
    attn_exps = pairs * seqs_gpu * heads_gpu
    model_attn = 2.0 * s * s * seqs_gpu * heads_gpu * (qk_dim + v_dim)             # no causal discount
    elementwise = ACT_BYTES * (NORM_RESIDUAL_UNITS * h * t_sp + 2.0 * rope_units * h * tokens)
    norms = 2 * h
    return SubLayer(
        kind="attention", gemms=tuple(gemms), attn_flops=attn_flops, attn_kv_len=kv_len, attn_exps=attn_exps,
        attn_scores=mbs / cp * heads_gpu * s * s, attn_flops_dense=model_attn,
        elementwise_bytes=elementwise,
        model_flops=sum(gm.flops for gm in gemms) + model_attn,
        params=params_gpu + norms, params_total=params_total + norms)


def _mlp(model: Model, ffn: int, tp: int, sp: bool, tokens: int, kind: str = "mlp") -> SubLayer:
    h = model.hidden
    mult = 2 if model.gated_mlp else 1
    f_gpu = ffn / tp
    t_sp = ops.where(sp, tokens / tp, tokens)
    gemms = (Gemm(tokens, ops.trunc(mult * f_gpu), h), Gemm(tokens, h, ops.trunc(f_gpu)))
    act = (3.0 if model.gated_mlp else 2.0) * f_gpu * tokens
    elementwise = ACT_BYTES * (NORM_RESIDUAL_UNITS * h * t_sp + act)
    params_total = h * ffn * (mult + 1) + h
    return SubLayer(kind=kind, gemms=gemms, elementwise_bytes=elementwise,
                    model_flops=sum(gm.flops for gm in gemms), params=params_total / tp + h,
                    params_total=params_total)


def _moe(model: Model, tp: int, ep: int, etp: int, sp: bool, tokens: int) -> SubLayer:
    moe = model.moe
    assert moe is not None
    h = model.hidden
    mult = 2 if model.gated_mlp else 1
    t_sp = ops.where(sp, tokens / tp, tokens)
    local_experts = moe.experts / ep
    routed = tokens * moe.top_k * moe.kept_fraction   # token-expert assignments per GPU (balanced)
    inner = moe.latent_size or h
    per_expert_tokens = ops.where(local_experts >= 1, ops.maximum(1, ops.trunc(routed / local_experts)), routed)
    f_e = moe.expert_ffn / etp
    gemms = [Gemm(tokens, moe.experts, h),                                          # router
             Gemm(per_expert_tokens, ops.trunc(mult * f_e), inner, count=local_experts),  # grouped fc1
             Gemm(per_expert_tokens, inner, ops.trunc(f_e), count=local_experts)]         # grouped fc2
    params_total = moe.experts * inner * moe.expert_ffn * (mult + 1) + h * moe.experts
    expert_gpu = local_experts * inner * moe.expert_ffn * (mult + 1) / etp
    params_gpu = expert_gpu + h * moe.experts
    if moe.latent_size:
        gemms += [Gemm(tokens, moe.latent_size, h), Gemm(tokens, h, moe.latent_size)]
        params_total += 2 * h * moe.latent_size
        params_gpu += 2 * h * moe.latent_size / tp
    act = (3.0 if model.gated_mlp else 2.0) * f_e * routed
    permute = 4.0 * inner * routed                   # permute + unpermute: read and write each copy
    if moe.shared_experts:
        f_s = (moe.shared_expert_ffn or moe.expert_ffn) * moe.shared_experts
        gemms += [Gemm(tokens, ops.trunc(mult * f_s / tp), h), Gemm(tokens, h, ops.trunc(f_s / tp))]
        params_total += h * f_s * (mult + 1)
        params_gpu += h * f_s * (mult + 1) / tp
        act += (3.0 if model.gated_mlp else 2.0) * f_s / tp * tokens
    elementwise = ACT_BYTES * (NORM_RESIDUAL_UNITS * h * t_sp + act + permute)
    return SubLayer(kind="moe", gemms=tuple(gemms), elementwise_bytes=elementwise,
                    model_flops=sum(gm.flops for gm in gemms), params=params_gpu + h,
                    params_total=params_total + h, expert_params=expert_gpu)


def _mamba(model: Model, tp: int, sp: bool, tokens: int) -> SubLayer:
    hy = model.hybrid
    assert hy is not None
    h = model.hidden
    d_in = hy.mamba_heads * hy.mamba_head_dim
    n_state, groups, heads = hy.mamba_state_dim, hy.mamba_groups, hy.mamba_heads
    in_out = 2 * d_in + 2 * groups * n_state + heads
    t_sp = ops.where(sp, tokens / tp, tokens)
    gemms = (Gemm(tokens, ops.trunc(in_out / tp), h), Gemm(tokens, h, ops.trunc(d_in / tp)))
    # Mamba-2 SSD (Dao & Gu 2024, §6): intra-chunk scores and outputs plus chunk states.
    q, p = SSD_CHUNK, hy.mamba_head_dim
    ssm = tokens * (2.0 * q * n_state * groups + 2.0 * q * p * heads + 4.0 * n_state * p * heads) / tp
    elementwise = ACT_BYTES * (NORM_RESIDUAL_UNITS * h * t_sp + 6.0 * d_in / tp * tokens)
    params_total = h * in_out + d_in * h + 4 * (d_in + 2 * groups * n_state) + h
    model_ssm = 7.0 * tokens * d_in * n_state / tp    # Megatron-Core mamba_layer_flops scan term
    return SubLayer(kind="mamba", gemms=gemms, ssm_flops=ssm, elementwise_bytes=elementwise,
                    model_flops=sum(gm.flops for gm in gemms) + model_ssm,
                    params=params_total / tp + h, params_total=params_total)


def _with_mtp(model: Model, head: SubLayer, sub: dict[str, SubLayer], tokens: int, tp: int) -> SubLayer:
    """The output head plus ``model.mtp_layers`` multi-token-prediction modules.

    Each module (DeepSeek-V3 report §2.2; Megatron-Core ``MultiTokenPredictionLayer``, on
    the last pipeline stage) projects [hidden; next-token embedding] (2h -> h, column
    parallel), runs one transformer block (attention plus the model's MoE or MLP) and the
    shared output head again. Embedding and head weights are shared, so only the block and
    projection add parameters. The block's tensor/expert-parallel communication and its
    stored activations are not priced: one layer next to the stage's ``layers/pp``.
    """
    h = model.hidden
    block = [sub[k] for k in ("attention", "moe" if "moe" in sub else "mlp") if k in sub]
    proj = Gemm(tokens, ops.trunc(h / tp), 2 * h)
    one_gemms: list[Gemm] = [proj, *head.gemms]
    for sl in block:
        one_gemms.extend(sl.gemms)
    n = model.mtp_layers
    gemms = head.gemms + tuple(Gemm(g.m, g.n, g.k, g.count * n, g.frozen_weights, g.high_precision)
                               for g in one_gemms)
    attn = [sl for sl in block if ops.any_(sl.attn_flops)]
    block_params = sum(sl.params for sl in block) + 2 * h * h / tp + 2 * h   # + projection, two norms
    block_total = sum(sl.params_total for sl in block) + 2 * h * h + 2 * h
    return SubLayer(
        kind="head", gemms=gemms,
        attn_flops=n * sum(sl.attn_flops for sl in attn), attn_exps=n * sum(sl.attn_exps for sl in attn),
        attn_kv_len=attn[0].attn_kv_len if attn else 0.0,
        attn_scores=n * sum(sl.attn_scores for sl in attn),
        attn_flops_dense=n * sum(sl.attn_flops_dense for sl in attn),
        elementwise_bytes=head.elementwise_bytes * (1 + n) + n * sum(sl.elementwise_bytes for sl in block),
        model_flops=head.model_flops * (1 + n) + n * (sum(sl.model_flops for sl in block) + proj.flops),
        params=head.params + n * block_params, params_total=head.params_total + n * block_total,
        expert_params=n * sum(sl.expert_params for sl in block))


def build_workload(model: Model, tp: Any, cp: Any, mbs: Any, sp: Any, ep: Any, etp: Any) -> Workload:
    """Per-GPU, per-micro-batch forward work of every sub-layer kind of ``model``.

    One scenario's workload is cached by value; a batch's (array degrees) is built anew.
    """
    if ops.is_batch(tp, cp, mbs, sp, ep, etp):
        return _build_workload(model, tp, cp, mbs, sp, ep, etp)
    return _cached_workload(model, tp, cp, mbs, sp, ep, etp)


def _build_workload(model: Model, tp: Any, cp: Any, mbs: Any, sp: Any, ep: Any, etp: Any) -> Workload:
    tokens = ops.maximum(1, mbs * model.seq_len // cp)
    h, v = model.hidden, model.vocab
    sub: dict[str, SubLayer] = {}
    counts: dict[str, int] = {}
    if model.hybrid is not None:
        hy = model.hybrid
        if hy.count("M"):
            sub["mamba"], counts["mamba"] = _mamba(model, tp, sp, tokens), hy.count("M")
        if hy.count("*"):
            sub["attention"], counts["attention"] = _attention(model, tp, cp, mbs, sp, tokens), hy.count("*")
        if hy.count("-"):
            sub["mlp"], counts["mlp"] = _mlp(model, model.ffn_size, tp, sp, tokens), hy.count("-")
        if hy.count("E"):
            sub["moe"], counts["moe"] = _moe(model, tp, ep, etp, sp, tokens), hy.count("E")
    else:
        sub["attention"], counts["attention"] = _attention(model, tp, cp, mbs, sp, tokens), model.layers
        n_moe = model.moe_layer_count
        n_dense = model.layers - n_moe
        if n_dense:
            sub["mlp"], counts["mlp"] = _mlp(model, model.ffn_size, tp, sp, tokens), n_dense
        if n_moe:
            sub["moe"], counts["moe"] = _moe(model, tp, ep, etp, sp, tokens), n_moe
    embed_params = v * h
    embedding = SubLayer(kind="embedding", elementwise_bytes=ACT_BYTES * 2 * h * tokens,
                         params=embed_params / tp, params_total=embed_params)
    head_gemm = Gemm(tokens, ops.trunc(v / tp), h, high_precision=True)
    head_params = 0 if model.tied_embeddings else v * h
    head = SubLayer(kind="head", gemms=(head_gemm,),
                    elementwise_bytes=LOGIT_BYTES * tokens * v / tp + ACT_BYTES * 2 * h * tokens,
                    model_flops=head_gemm.flops, params=head_params / tp + h, params_total=head_params + h)
    if model.mtp_layers:
        head = _with_mtp(model, head, sub, tokens, tp)
    return Workload(sublayers=sub, counts=counts, layers=model.layers, embedding=embedding, head=head,
                    tokens=tokens)


_cached_workload = functools.lru_cache(maxsize=4096)(_build_workload)


def total_params(model: Model) -> float:
    """Parameters of the whole model (embeddings included)."""
    w = build_workload(model, 1, 1, 1, False, 1, 1)
    return sum(w.sublayers[k].params_total * c for k, c in w.counts.items()) \
        + w.embedding.params_total + w.head.params_total


def active_params(model: Model) -> float:
    """Parameters one token touches (MoE counts top-k experts only)."""
    total = total_params(model)
    if model.moe is None:
        return total
    moe = model.moe
    inner = moe.latent_size or model.hidden
    mult = 3 if model.gated_mlp else 2
    idle = (moe.experts - moe.top_k) * inner * moe.expert_ffn * mult
    return total - idle * model.moe_layer_count
