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
# Kernels of the Mamba-2 SSD chunked scan (state-spaces/mamba ``ssd_combined.py``):
# forward ``_chunk_cumsum_fwd``, ``_chunk_state_fwd``, ``_state_passing_fwd``,
# ``_bmm_chunk_fwd``, ``_chunk_scan_fwd`` (5); backward recomputes the states and runs the
# dstates / state-passing / dx / dC / dB / dCB / dt-cumsum kernels (about 12).
SSD_FWD_KERNELS, SSD_BWD_KERNELS = 5, 12
# Router score bytes per (token, expert) over the router's kernels (Megatron-Core with
# ``--moe-router-fusion``, TE fused kernels): ``fused_topk_with_score_function`` reads the
# fp32 logits and writes fp32 probs + a bool routing map (9), ``fused_compute_score_for_moe_aux_loss``
# reads logits, writes fp32 scores (8), ``fused_moe_aux_loss`` reads scores (4), the
# tokens-per-expert count reads the map (1): ~22, taken as 24 with the aux-loss write-back.
ROUTER_SCORE_BYTES = 24.0
# Router kernels per MoE layer and pass (the four above; their backward kernels, one each).
ROUTER_KERNELS = 4


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
    # The ``count`` instances run as one grouped GEMM (one kernel over all their tiles):
    # Megatron-Core ``GroupedMLP`` / TE ``GroupedLinear``, CUTLASS grouped GEMM.
    grouped: bool = False
    # An MLA up-projection (latent -> heads): what recompute module ``mla_up_proj`` recomputes.
    up_projection: bool = False

    @property
    def flops(self) -> float:
        """Forward FLOPs of all ``count`` instances."""
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True, slots=True)
class MemKernel:
    """``count`` memory-bound kernels per forward pass, each moving ``bytes_each`` bytes.

    Each runs for at least the device's minimum kernel duration; the backward pass runs
    ``bwd_count`` kernels of the same size (the gradient of a gather is a scatter).
    """

    bytes_each: Any
    count: int = 1
    bwd_count: int = 1
    # The MoE token dispatchers (``Plan.moe_dispatcher``) that launch it; empty: all of them.
    dispatchers: tuple[str, ...] = ()


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
    ssm_bytes: Any = 0.0             # HBM bytes of the SSD scan kernels, forward
    ssm_tile: tuple[Any, Any, Any] = (1, 1, 1)  # (rows, cols, instances) of its chunk matmuls
    elementwise_bytes: Any = 0.0
    kernels: tuple[MemKernel, ...] = ()  # small memory-bound kernels, each with a duration floor
    model_flops: Any = 0.0           # forward, MFU convention
    params: Any = 0.0                # parameters of this sub-layer on this GPU
    params_total: Any = 0.0          # parameters of this sub-layer in the whole model
    expert_params: Any = 0.0         # share of ``params`` that are expert weights
    local_experts: Any = 0.0         # experts on this GPU (an MoE sub-layer's expert-GEMM launches, twin.core.host)
    host_sync: bool = False          # its dispatcher syncs tokens per expert to the host (dropless; twin.core.host)


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
            gemms.append(Gemm(tokens, ops.trunc(heads_gpu * qk), mla.q_lora_rank, up_projection=True))  # q up
            q_params = h * mla.q_lora_rank + mla.q_lora_rank * a * qk
        else:
            gemms.append(Gemm(tokens, ops.trunc(heads_gpu * qk), h))
            q_params = h * a * qk
        gemms.append(Gemm(tokens, mla.kv_lora_rank + mla.qk_rope_head_dim, h))     # kv down (replicated)
        gemms.append(Gemm(tokens, ops.trunc(heads_gpu * (mla.qk_nope_head_dim + vd)), mla.kv_lora_rank,
                          up_projection=True))                                                 # kv up
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
    kv_len = (s + 1) / 2.0
    doc = s
    if model.packed_doc_tokens is not None:
        # Packed documents of mean length l attend within themselves (causal mask per
        # document, TE THD/cu_seqlens): s/l documents of l(l+1)/2 pairs = s(l+1)/2, and a
        # query sees (l+1)/2 keys on average. Equal lengths assumed: a spread of lengths
        # adds pairs (sum l_i^2 >= n mean^2), so this is the least attention packing leaves.
        doc = model.packed_doc_tokens
        full_pairs = s * (doc + 1) / 2.0
        kv_len = (doc + 1) / 2.0
    pairs = full_pairs
    if model.sliding_window is not None:
        w = ops.minimum(model.sliding_window.window, doc)  # doc: per row in a batch of sequence lengths
        win_pairs = s * w - (s / doc) * w * (w - 1) / 2.0     # per document: l*w - w(w-1)/2
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
    # Tokens whose expert work one GPU shares, by conservation (Megatron-Core ``MoELayer``
    # with sequence parallelism, which it requires for MoE with TP > 1): each TP rank
    # routes its own tokens/tp; the dispatcher gathers them over the expert-TP group (etp
    # ranks), and each GPU computes 1/etp of every local expert for etp*tokens/tp tokens.
    # Per GPU: tokens*top_k*etp/tp assignments x ffn/etp = tokens*top_k*ffn/tp, whatever
    # etp. The expert-parallel all-to-all moves assignments between ranks and conserves
    # their number (balanced routing: a rank receives as many as it sends). Without
    # sequence parallelism every TP rank holds all tokens.
    t_exp = ops.where(sp, tokens * etp / tp, tokens)
    mean_routed = t_exp * moe.top_k * moe.kept_fraction   # token-expert assignments, mean rank
    # The busiest rank sets the layer time (every rank waits for it at the combine):
    # load imbalance, capped by a capacity, or padded to it (MoE.busiest_load).
    routed = t_exp * moe.top_k * moe.busiest_load
    inner = moe.latent_size or h
    per_expert_tokens = ops.where(local_experts >= 1, ops.maximum(1, ops.trunc(routed / local_experts)), routed)
    f_e = moe.expert_ffn / etp
    router = Gemm(t_sp, moe.experts, h, high_precision=True)             # router logits of this rank's own tokens
    gemms = [router,
             Gemm(per_expert_tokens, ops.trunc(mult * f_e), inner, count=local_experts, grouped=True),  # fc1
             Gemm(per_expert_tokens, inner, ops.trunc(f_e), count=local_experts, grouped=True)]         # fc2
    # MFU convention: the balanced, kept assignments (imbalance and padding are waste).
    model_flops = router.flops + 2.0 * mean_routed * inner * f_e * (mult + 1)
    params_total = moe.experts * inner * moe.expert_ffn * (mult + 1) + h * moe.experts
    expert_gpu = local_experts * inner * moe.expert_ffn * (mult + 1) / etp
    params_gpu = expert_gpu + h * moe.experts
    if moe.latent_size:
        lat = [Gemm(tokens, moe.latent_size, h), Gemm(tokens, h, moe.latent_size)]
        gemms += lat
        model_flops += sum(gm.flops for gm in lat)
        params_total += 2 * h * moe.latent_size
        params_gpu += 2 * h * moe.latent_size / tp
    act = (3.0 if model.gated_mlp else 2.0) * f_e * routed
    if moe.shared_experts:
        f_s = (moe.shared_expert_ffn or moe.expert_ffn) * moe.shared_experts
        shared = [Gemm(tokens, ops.trunc(mult * f_s / tp), h), Gemm(tokens, h, ops.trunc(f_s / tp))]
        gemms += shared
        model_flops += sum(gm.flops for gm in shared)
        params_total += h * f_s * (mult + 1)
        params_gpu += h * f_s * (mult + 1) / tp
        act += (3.0 if model.gated_mlp else 2.0) * f_s / tp * tokens
    elementwise = ACT_BYTES * (NORM_RESIDUAL_UNITS * h * t_sp + act)
    # Router, permute and unpermute as the kernels they are (Megatron-Core ``TopKRouter``
    # and ``moe_utils.permute``/``unpermute``/``sort_chunks_by_idxs`` with TE fusions):
    # the four router kernels over the [tokens, experts] scores, then per dispatcher:
    # - alltoall (``MoEAlltoAllTokenDispatcher``): ``fused_permute_with_probs`` before the
    #   all-to-all and ``fused_unpermute`` after it, each reading and writing one row per
    #   sent copy (padded rows too with drop_and_pad); with more than one local expert
    #   behind an all-to-all, ``fused_sort_chunks_by_index`` regroups the received copies
    #   by expert on dispatch and back on combine (the busiest rank's copies);
    # - deepep (``MoEFlexTokenDispatcher`` / ``_DeepepManager``, the same code in NeMo
    #   AutoModel's moe/megatron/token_dispatcher.py): DeepEP's dispatch kernel lays the
    #   send buffers out itself ("permute tokens and perform all-to-all communication in
    #   single step"), so only ``get_permuted_hidden_states_by_experts`` (one permute of
    #   the received copies) and its ``unpermute`` before the fused combine remain.
    sent = moe.capacity_factor if moe.pad_to_capacity else moe.kept_fraction
    regroup = ops.where(ops.logical_and(ep > 1, local_experts > 1), 2, 0)
    kernels = (MemKernel(ROUTER_SCORE_BYTES / ROUTER_KERNELS * t_sp * moe.experts, ROUTER_KERNELS,
                         ROUTER_KERNELS - 1),
               MemKernel(2.0 * ACT_BYTES * inner * t_sp * moe.top_k * sent, 2, 2, dispatchers=("alltoall",)),
               MemKernel(2.0 * ACT_BYTES * inner * routed, regroup, regroup, dispatchers=("alltoall",)),
               MemKernel(2.0 * ACT_BYTES * inner * routed, 2, 2, dispatchers=("deepep",)))
    # Dropless routing syncs the tokens per expert to the host before the all-to-all; padded to
    # capacity, the sizes are static and nothing syncs (Megatron-Core ``preprocess``, twin.core.host).
    return SubLayer(kind="moe", gemms=tuple(gemms), elementwise_bytes=elementwise, kernels=kernels,
                    model_flops=model_flops, params=params_gpu + h,
                    params_total=params_total + h, expert_params=expert_gpu,
                    local_experts=ops.maximum(1.0, local_experts), host_sync=not moe.pad_to_capacity)


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
    # Its HBM traffic (forward): read x, B, C, dt and write y in bf16; per chunk the fp32
    # states (heads x P x N) are written by the chunk-state kernel, read and rewritten by
    # state passing and read by the chunk scan (4 passes; Dao & Gu 2024 §6, ssd_combined.py).
    ssm_bytes = tokens / tp * (ACT_BYTES * (2 * d_in + 2 * groups * n_state + heads)
                               + 4 * 4.0 * heads * p * n_state / q)
    # The chunk matmuls are (Q x P) outputs per chunk and head (Q x Q scores per group are the
    # other shape), run as batched tiles over chunks x heads.
    chunks = ops.maximum(1.0, tokens / q)
    ssm_tile = (q, p, chunks * heads / tp)
    # Causal depthwise conv1d over x, B, C (width 4; Dao-AILab causal-conv1d): one
    # memory-bound kernel reading and writing the conv channels, forward and backward.
    conv_ch = (d_in + 2 * groups * n_state) / tp
    kernels = (MemKernel(2.0 * ACT_BYTES * conv_ch * tokens, 1, 1),)
    # Gated RMSNorm before out_proj (reads y and z, writes its output: 3 x d_in) and the
    # layer's norm + residual.
    elementwise = ACT_BYTES * (NORM_RESIDUAL_UNITS * h * t_sp + 3.0 * d_in / tp * tokens)
    params_total = h * in_out + d_in * h + 4 * (d_in + 2 * groups * n_state) + h
    model_ssm = 7.0 * tokens * d_in * n_state / tp    # Megatron-Core mamba_layer_flops scan term
    return SubLayer(kind="mamba", gemms=gemms, ssm_flops=ssm, ssm_bytes=ssm_bytes, ssm_tile=ssm_tile,
                    elementwise_bytes=elementwise, kernels=kernels,
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
    gemms = head.gemms + tuple(Gemm(g.m, g.n, g.k, g.count * n, g.frozen_weights, high_precision=g.high_precision,
                                    grouped=g.grouped) for g in one_gemms)
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
        kernels=head.kernels + tuple(MemKernel(k.bytes_each, k.count * n, k.bwd_count * n, k.dispatchers)
                                     for sl in block for k in sl.kernels),
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
