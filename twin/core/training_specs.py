"""The training run's specs: the model, the parallel plan, the calibration, the software
stack, the strategy selection, and the :class:`Scenario` that joins them to a cluster
(:mod:`twin.core.cluster_specs`).

Specs are frozen dataclasses, loaded strictly by :mod:`twin.core.schema` (unknown keys,
wrong types and out-of-range numbers are errors naming the field) and then checked by the
rules of :mod:`twin.core.spec_rules` and :mod:`twin.core.plan_rule_table` for what spans
fields (``tp*pp*cp*dp == num_gpus`` ...). Units are in the field names (see
:mod:`twin.core.units`). :mod:`twin.core.specs` gathers every spec and rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from twin.core import ops
from twin.core.cluster_specs import MAX_GPUS, Cluster, Precision
from twin.core.schema import spec_field

# Low-precision training recipes (NVIDIA Transformer Engine 2.x recipes; DeepSeek-V3 report
# §3.3 for blockwise): "auto" is the stack's default for the precision and GPU (FP8:
# delayed scaling on Hopper, MXFP8 on Blackwell; FP4: NVFP4).
Recipe = Literal["auto", "delayed", "current", "blockwise", "mxfp8", "nvfp4"]
FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8")
Recompute = Literal["none", "selective", "full"]
# What selective recomputation recomputes (Megatron-Core TransformerConfig.recompute_modules,
# the modules the twin's memory model tells apart): the attention core (the default), the
# layer norms, MLA's up-projections, the MoE activation function, the dense MLP sub-layer and
# the whole MoE layer (router, dispatch, experts, combine).
RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe"]
DEFAULT_RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = ("core_attn",)
Sharding = Literal["none", "distributed_optimizer", "zero1", "zero2", "zero3", "fsdp"]
OffloadTarget = Literal["none", "cxl", "host"]
# Pipeline schedules (``twin.core.pipelines`` has each one's bubble, activations in flight
# and parameter copies, with their sources): "auto" is interleaved when vp > 1, else 1F1B.
Schedule = Literal["auto", "1f1b", "interleaved", "zero_bubble_h1", "zero_bubble_h2", "zero_bubble_v", "dualpipe",
                   "dualpipev"]


# ------------------------------------------------------------------------- model
@dataclass(frozen=True, slots=True)
class MoE:
    """Mixture-of-experts layers."""

    experts: int = spec_field(ge=1)
    top_k: int = spec_field(ge=1)
    expert_ffn: int = spec_field(ge=1)
    shared_experts: int = spec_field(0, ge=0)
    shared_expert_ffn: int | None = spec_field(None, ge=1)
    moe_layers: int | None = spec_field(None, ge=0)
    dense_layers: int = spec_field(0, ge=0)
    latent_size: int | None = spec_field(None, ge=1)
    capacity_factor: float | None = spec_field(
        None, gt=0, doc="tokens an expert takes, as a multiple of its balanced share; overflow is dropped "
                        "(None: dropless)")
    # Default 1.0 (balanced): no published per-rank, per-micro-batch measurement of a
    # production router's skew was found to take a default from. Wang et al. 2024
    # ("Auxiliary-Loss-Free Load Balancing", DeepSeek) report MaxVio = max load / mean - 1
    # per batch; set this to 1 + MaxVio of the run. Benchmarks with a forced balanced gate
    # (NeMo AutoModel ``fake_balanced_gate``, Megatron ``--moe-router-force-load-balancing``)
    # are 1.0 by construction. For dropless Megatron-Core runs with a trained-style router,
    # ~1.7: the Megatron MoE Model Zoo's Qwen3-235B on 256 H100 (EP8, 16 experts per rank)
    # runs 1.25x to 1.09x slower dropless than forced-balanced from 16K to 128K tokens, which
    # the twin reproduces with 1.7 at every length (tests/validation/test_moe_imbalance_ab.py).
    load_imbalance: float = spec_field(
        1.0, ge=1, le=1000, doc="token-expert assignments of the busiest expert rank over the mean (>= 1); "
                                "it sets the layer time")
    pad_to_capacity: bool = spec_field(
        False, doc="pad every expert's input to its capacity (Megatron moe_pad_expert_input_to_capacity; "
                   "needs capacity_factor)")
    # How a token's top-k experts are laid out (twin.core.moe_routing): "random", k distinct
    # experts drawn uniformly (balanced routing); "contiguous", experts (t*k + j) mod E, as
    # NeMo AutoModel's FakeBalancedGate (fake_balanced_gate: true) assigns them, so a token
    # reaches only the few ranks its consecutive experts span.
    routing: Literal["random", "contiguous"] = "random"

    @property
    def kept_fraction(self) -> float:
        """Share of token-expert assignments that reach an expert (the mean rank).

        An expert takes at most ``capacity_factor`` x its balanced share of tokens and drops
        the rest (Switch Transformer, Fedus et al. 2022 §2.2; Megatron-Core
        ``moe_expert_capacity_factor`` without padding). On the mean rank only a factor
        below 1 drops tokens.
        """
        return 1.0 if self.capacity_factor is None else min(1.0, self.capacity_factor)

    @property
    def busiest_load(self) -> float:
        """Assignments the busiest expert rank computes and receives, over the balanced share.

        Dropless: ``load_imbalance``. With a capacity factor the busiest expert is capped
        at its capacity: ``min(load_imbalance, capacity_factor)``. Padded to capacity
        (Megatron-Core ``moe_pad_expert_input_to_capacity``, ``moe_utils.permute`` with
        ``drop_and_pad``: every expert's buffer holds exactly ``get_capacity`` =
        ceil(tokens*top_k/experts * capacity_factor) rows, dropped or not), every rank
        computes ``capacity_factor`` x its balanced share, whatever the router did.
        """
        if self.capacity_factor is None:
            return self.load_imbalance
        if self.pad_to_capacity:
            return self.capacity_factor
        return min(self.load_imbalance, self.capacity_factor)


@dataclass(frozen=True, slots=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3) projection ranks and head dims."""

    q_lora_rank: int | None = spec_field(None, ge=1)
    kv_lora_rank: int = spec_field(512, ge=1)
    qk_nope_head_dim: int = spec_field(128, ge=1)
    qk_rope_head_dim: int = spec_field(64, ge=1)
    v_head_dim: int = spec_field(128, ge=1)


@dataclass(frozen=True, slots=True)
class Hybrid:
    """A hybrid Mamba/attention/MLP stack. ``pattern``: M=Mamba-2, *=attention, E=MoE, -=MLP."""

    pattern: str
    mamba_heads: int = spec_field(128, ge=1)
    mamba_head_dim: int = spec_field(64, ge=1)
    mamba_state_dim: int = spec_field(128, ge=1)
    mamba_groups: int = spec_field(8, ge=1)
    mamba_layers: int | None = spec_field(None, ge=0)
    attention_layers: int | None = spec_field(None, ge=0)
    moe_layers: int | None = spec_field(None, ge=0)
    legend: str = ""

    def count(self, symbol: str) -> int:
        """How many entries of the pattern are ``symbol``."""
        return self.pattern.count(symbol)


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """Sliding-window attention on some layers (e.g. GPT-OSS: every other layer, 128 tokens)."""

    window: int = spec_field(ge=1)
    every_other_layer: bool = False


@dataclass(frozen=True, slots=True)
class Model:
    """A decoder-only transformer (dense, MoE, MLA or hybrid Mamba)."""

    layers: int = spec_field(ge=1, le=100_000)
    hidden: int = spec_field(ge=1, le=10_000_000)
    heads: int = spec_field(ge=1, le=1_000_000)
    vocab: int = spec_field(ge=1, le=100_000_000)
    seq_len: int = spec_field(ge=1, le=1_000_000_000)
    name: str = ""
    ffn: int | None = spec_field(None, ge=1, le=100_000_000, doc="None: 4*hidden")
    kv_heads: int | None = spec_field(None, ge=1, le=1_000_000, doc="None: heads (MHA)")
    head_dim: int | None = spec_field(None, ge=1, le=1_000_000, doc="None: hidden/heads")
    gated_mlp: bool = False
    # "mla" selects multi-head latent attention (with ``mla``); "mha" and "gqa" name the others, whose
    # grouping the KV head count sets (kv_heads below heads is GQA whatever the name).
    attention: Literal["mha", "gqa", "mla"] = "mha"
    moe: MoE | None = None
    mla: MLA | None = None
    hybrid: Hybrid | None = None
    sliding_window: SlidingWindow | None = None
    mtp_layers: int = spec_field(
        0, ge=0, le=1_000, doc="multi-token-prediction modules on the last pipeline stage (DeepSeek-V3 §2.2)")
    tied_embeddings: bool = False
    # Sequence packing (fine-tuning on short examples): each seq_len-token sequence holds
    # several documents of this mean length, and fused attention attends within each
    # document only (Transformer Engine THD format with cu_seqlens; NeMo "Sequence Packing
    # for SFT/PEFT"). None: one document per sequence.
    packed_doc_tokens: int | None = spec_field(
        None, ge=1, le=1_000_000_000, doc="mean tokens per packed document (None: no packing)")

    @property
    def ffn_size(self) -> int:
        """Dense MLP inner size."""
        return self.ffn or 4 * self.hidden

    @property
    def kv_head_count(self) -> int:
        """Key/value heads (== heads for MHA)."""
        return self.kv_heads or self.heads

    @property
    def head_size(self) -> int:
        """Per-head dimension."""
        return self.head_dim or self.hidden // self.heads

    @property
    def moe_layer_count(self) -> int:
        """How many layers carry an MoE MLP."""
        if self.hybrid is not None:
            return self.hybrid.count("E")
        if self.moe is None:
            return 0
        if self.moe.moe_layers is not None:
            return self.moe.moe_layers
        return self.layers - self.moe.dense_layers


# -------------------------------------------------------------------------- plan
@dataclass(frozen=True, slots=True)
class Overlap:
    """Which communication overlaps with compute (Megatron-Core switch names).

    ``tp_comm`` None means the default of the GPU generation's performance recipes:
    on for Hopper and newer (NeMo/Megatron-Core enable userbuffer TP overlap there), off before.
    ``ep_comm``: expert all-to-all overlapped with another micro-batch's compute
    (DeepSeek-V3 DualPipe, Megatron-Core --overlap-moe-expert-parallel-comm); off by default.
    """

    grad_reduce: bool = True
    param_gather: bool = True
    tp_comm: bool | None = None
    p2p: bool = True
    ep_comm: bool = False


@dataclass(frozen=True, slots=True)
class Offload:
    """What is kept outside HBM, and where (a CXL pool or host DRAM)."""

    optimizer: OffloadTarget = "none"
    params: OffloadTarget = "none"
    activations: OffloadTarget = "none"


# LoRA's adapter rank where a plan does not state one: the twin's default, an assumption, not a
# published figure (a plan should state its rank). A plan that is not LoRA must leave it here
# (plan_rules: it would be ignored).
DEFAULT_LORA_RANK = 16


@dataclass(frozen=True, slots=True)
class Plan:
    """A parallel training plan. ``dp`` None: derived as num_gpus/(tp*pp*cp).

    ``moe_dispatcher``: "alltoall" sends one copy of a token per selected expert (Megatron-
    Core's all-to-all dispatcher); "deepep" sends one copy per destination NVLink domain and
    forwards inside it over NVLink (DeepEP; Megatron-Core's flex dispatcher).
    ``cp_comm_type``: how context parallelism exchanges keys and values (Megatron-Core
    ``--cp-comm-type``): "p2p", ring attention with each block's transfer overlapped (the
    default); "all_gather", each rank gathers the whole sequence's K/V before its attention
    and reduce-scatters their gradients after, on the critical path (Llama 3 paper §3.3.2);
    "a2a", DeepSpeed-Ulysses (Jacobs et al. 2023): all-to-alls of Q/K/V before attention and
    of the output after, each rank attending over the whole sequence for heads/cp heads.
    ``rank_order``: how ranks map to GPUs, innermost dimension first: Megatron-Core's
    default "tp-cp-ep-dp-pp" (pipeline stages farthest apart), or "tp-cp-pp-dp" (data
    parallel outermost, as Llama 3 was trained: Llama 3 paper §3.3.2, "[TP, CP, PP, DP]").
    ``recompute_modules``: with ``recompute: selective``, what is recomputed (Megatron-Core
    ``recompute_modules``): the attention core (``core_attn``, the default; Korthikanti et
    al. 2022), the layer norms (``layernorm``), MLA's up-projections (``mla_up_proj``), the
    MoE activation (``moe_act``), the dense MLP sub-layers (``mlp``) and the whole MoE layer
    with its expert all-to-all (``moe``); DeepSeek-V3 recomputes layernorm, mla_up_proj and
    moe_act (report §3.2.3, §3.3.3; ``twin.core.memory``).
    ``schedule``: the pipeline schedule (``twin.core.pipelines``): 1F1B, interleaved, the
    zero-bubble schedules ZB-H1 / ZB-H2 / ZB-V (Qi et al. 2024) or DualPipe / DualPipeV
    (DeepSeek-V3); "auto" keeps the choice by vp (interleaved when vp > 1, else 1F1B).
    ``dp_shard``: with a sharded optimizer or FSDP, over how many data-parallel ranks (of
    the dp*cp group) each model state is sharded; 0 (the default): all of them. A divisor k
    of dp*cp shards within groups of k neighbouring data-parallel ranks and replicates
    across the dp*cp/k groups: hybrid sharding (PyTorch FSDP ``HYBRID_SHARD`` and FSDP2's
    2-D device mesh, Zhao et al. VLDB 2023 §3.2.2; MiCS, Zhang et al. VLDB 2022; Megatron-
    Core's ``num_distributed_optimizer_instances`` = dp*cp/k). Gradients are then
    reduce-scattered and weights gathered within the k ranks, and each shard's gradients
    all-reduced across the replicas.
    """

    gbs: int = spec_field(ge=1, le=1_000_000_000, doc="global batch in sequences")
    tp: int = spec_field(1, ge=1, le=MAX_GPUS)
    pp: int = spec_field(1, ge=1, le=MAX_GPUS)
    vp: int = spec_field(1, ge=1, le=100_000, doc="virtual pipeline chunks per pp rank (interleaving)")
    schedule: Schedule = "auto"  # pipeline schedule; "auto": interleaved when vp > 1, else 1f1b
    pp_first_layers: int | None = spec_field(
        None, ge=1, le=100_000, doc="layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers)")
    pp_last_layers: int | None = spec_field(
        None, ge=1, le=100_000, doc="layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers)")
    dp: int | None = spec_field(None, ge=1, le=MAX_GPUS)
    cp: int = spec_field(1, ge=1, le=MAX_GPUS)
    ep: int = spec_field(1, ge=1, le=MAX_GPUS)
    etp: int | None = spec_field(None, ge=1, le=MAX_GPUS, doc="expert tensor parallel; None: tp")
    mbs: int = spec_field(1, ge=1, le=1_000_000, doc="micro-batch in sequences")
    sequence_parallel: bool | None = None
    recompute: Recompute = "none"
    recompute_layers: int | None = spec_field(
        None, ge=1, doc="with recompute 'full': layers per pipeline stage recomputed (None: all)")
    # with recompute "selective": what is recomputed (Megatron-Core --recompute-modules)
    recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES
    precision: Precision = "bf16"
    recipe: Recipe = "auto"  # low-precision recipe (fp8: delayed/current/blockwise/mxfp8; fp4: nvfp4)
    bf16_layers_start: int = spec_field(0, ge=0, le=100_000, doc="with fp8/fp4: first layers kept in bf16")
    bf16_layers_end: int = spec_field(0, ge=0, le=100_000, doc="with fp8/fp4: last layers kept in bf16")
    optimizer_sharding: Sharding = "distributed_optimizer"
    fsdp_reshard_after_forward: bool = True
    dp_shard: int = spec_field(0, ge=0, le=MAX_GPUS, doc="ranks each state is sharded over (hybrid sharding); "
                                                         "0: the whole dp*cp group")
    grad_reduce_dtype: Literal["fp32", "bf16"] = "fp32"
    overlap: Overlap = dataclasses.field(default_factory=Overlap)
    offload: Offload = dataclasses.field(default_factory=Offload)
    moe_dispatcher: Literal["alltoall", "deepep"] = "deepep"
    cp_comm_type: Literal["p2p", "all_gather", "a2a"] = "p2p"
    rank_order: Literal["tp-cp-ep-dp-pp", "tp-cp-pp-dp"] = "tp-cp-ep-dp-pp"
    trainable: Literal["full", "lora"] = "full"
    lora_rank: int = spec_field(DEFAULT_LORA_RANK, ge=1, le=1_000_000,
                                doc="with trainable 'lora': adapter rank on every projection")

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect (default: on whenever tp > 1)."""
        return self.tp > 1 if self.sequence_parallel is None else (self.sequence_parallel and self.tp > 1)

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel degree inside each expert."""
        return self.etp or self.tp


@dataclass(frozen=True, slots=True)
class Calibration:
    """Multiplicative corrections fitted from observation (bounded; 1.0 = as designed)."""

    compute_efficiency: float = spec_field(1.0, ge=0.05, le=2)
    scale_up_bandwidth: float = spec_field(1.0, ge=0.05, le=2)
    scale_out_bandwidth: float = spec_field(1.0, ge=0.05, le=2)
    source: str = ""


SubLayerKind = Literal["attention", "mlp", "moe", "mamba"]
# Which fused-attention kernel a stack runs: "profile", the GPU profile's fitted figures (the
# kernels of the stacks its runs used); "cudnn", cuDNN 9's fused attention, which Transformer
# Engine selects on Hopper and later ("Disabling FlashAttention to give FusedAttention
# preference on Hopper+ for performance reasons": TE get_attention_backend) at the figures
# measured for it (ComputeEfficiency.cudnn_attention_fwd / _bwd).
AttentionKernel = Literal["profile", "cudnn"]


@dataclass(frozen=True, slots=True)
class Software:
    """The framework stack that drives the GPU: how much host time its passes cost.

    A layer pass on the GPU costs the larger of its device time and the host time the
    framework needs to issue it (kernels per pass x host cost per kernel): the host queues
    kernels asynchronously, so whichever is slower sets the pace. Kernel counts are per
    sub-layer kind and per pass (forward, backward) on one GPU, collectives included; the
    defaults are the ``megatron-core-te`` preset (``twin/presets/software.yaml``, where
    every number has its source). With ``cuda_graphs`` the sub-layers in ``graphed`` cost
    one graph launch each instead of their kernels (TE ``make_graphed_callables`` per layer).
    """

    name: str = "megatron-core-te"
    attention_fwd_ops: int = spec_field(12, ge=0, le=100_000, doc="kernels per attention sub-layer forward")
    attention_bwd_ops: int = spec_field(18, ge=0, le=100_000, doc="kernels per attention sub-layer backward")
    mlp_fwd_ops: int = spec_field(8, ge=0, le=100_000, doc="kernels per dense MLP sub-layer forward")
    mlp_bwd_ops: int = spec_field(12, ge=0, le=100_000, doc="kernels per dense MLP sub-layer backward")
    moe_fwd_ops: int = spec_field(
        46, ge=0, le=100_000, doc="kernels per MoE sub-layer forward, besides its expert-GEMM launches")
    moe_bwd_ops: int = spec_field(
        32, ge=0, le=100_000, doc="kernels per MoE sub-layer backward, besides its expert-GEMM launches")
    # Expert GEMMs issued one per local expert (TE GroupedLinear's multi-stream cuBLAS, the
    # grouped_gemm package on Hopper): launches per local expert and pass; 0 where one grouped
    # kernel runs every expert (torch._grouped_mm, CUTLASS). twin.core.host has the sources.
    expert_fwd_ops: int = spec_field(
        2, ge=0, le=10_000, doc="expert-GEMM launches per local expert in an MoE sub-layer forward (fc1, fc2)")
    expert_bwd_ops: int = spec_field(
        4, ge=0, le=10_000, doc="expert-GEMM launches per local expert in an MoE sub-layer backward")
    # The dropless dispatcher copies the tokens per expert to the host before its all-to-all
    # and waits for them (Megatron-Core, DeepEP normal mode, grouped_gemm's CPU batch sizes):
    # what the host issues after it cannot be queued ahead (twin.core.host.layer_pass_s).
    moe_host_sync: bool = True
    moe_post_sync_ops: int = spec_field(
        11, ge=0, le=100_000, doc="of moe_fwd_ops, the kernels issued after the tokens-per-expert sync")
    mamba_fwd_ops: int = spec_field(14, ge=0, le=100_000, doc="kernels per Mamba-2 sub-layer forward")
    mamba_bwd_ops: int = spec_field(24, ge=0, le=100_000, doc="kernels per Mamba-2 sub-layer backward")
    edge_fwd_ops: int = spec_field(
        10, ge=0, le=100_000, doc="kernels of embedding + final norm + LM head + loss, forward")
    edge_bwd_ops: int = spec_field(
        10, ge=0, le=100_000, doc="kernels of embedding + final norm + LM head + loss, backward")
    dispatch_us: float = spec_field(
        10.0, ge=0, le=1e5, doc="host time per kernel issued eagerly (framework dispatch + launch), us")
    # Fused (flash) attention (Dao et al. 2022); off: the stack's attention is batched GEMMs
    # around a fused softmax kernel, storing the score matrix (Megatron-LM before 2023).
    flash_attention: bool = True
    # The fused-attention kernel (AttentionKernel): "cudnn" runs at the GPU profile's measured
    # cuDNN 9 figures where it has them; needs flash_attention.
    attention_kernel: AttentionKernel = "profile"
    # Tensor-parallel communication overlapped with the GEMMs by default on Hopper and later
    # (Transformer Engine userbuffers, --tp-comm-overlap in NVIDIA's recipes); off: the
    # stack issues TP collectives between its GEMMs (PyTorch DTensor TP without async-TP,
    # Megatron-LM before TE). plan.overlap.tp_comm overrides it either way.
    tp_comm_overlap: bool = True
    # Model states in mixed precision (ZeRO §3.1): 16-bit weights, fp32 main gradients and an
    # fp32 master copy with fp32 Adam moments (K = 12), as Megatron and Apex/TE optimizers keep
    # them. Off: the parameters themselves are 16-bit and the optimizer keeps its moments in
    # their dtype (torch.optim.Adam's exp_avg/exp_avg_sq are zeros_like(param)); FSDP2 casts
    # each reduced gradient back to the parameter's dtype, so gradients are 16-bit too (K = 4).
    master_weights: bool = True
    # Data-parallel gradient reduction overlapped with the backward (Megatron-Core
    # --overlap-grad-reduce, Apex DistributedFusedAdam overlap_grad_sync, PyTorch DDP/FSDP
    # buckets). Off: the stack all-reduces after the backward (Megatron-LM's local DDP before
    # Megatron-Core: train_step calls model.allreduce_gradients() once the backward is done).
    # plan.overlap.grad_reduce false turns the overlap off on any stack.
    grad_reduce_overlap: bool = True
    cuda_graphs: bool = False
    graph_launch_us: float = spec_field(
        20.0, ge=0, le=1e5, doc="host time of one captured sub-layer's graph replay, us")
    graphed: tuple[SubLayerKind, ...] = ("attention", "mlp", "mamba")
    microbatch_us: float = spec_field(
        150.0, ge=0, le=1e7, doc="host time per micro-batch outside the layers (batch fetch, schedule), us")
    p2p_us: float = spec_field(
        100.0, ge=0, le=1e7, doc="host time per micro-batch of the pipeline's send/recv launches and sync, us")
    step_us: float = spec_field(
        1500.0, ge=0, le=1e8, doc="host time per step of the step's tail (grad-norm, inf check, "
                                  "optimizer launches, zero-grad), us")
    optimizer_us_per_layer: float = spec_field(
        5.0, ge=0, le=1e7, doc="host time of the optimizer step per transformer layer on a GPU, us")
    source: str = ""

    def fwd_ops(self, kind: str) -> int:
        """Kernels of one forward pass of a sub-layer of ``kind``."""
        return int(getattr(self, f"{kind}_fwd_ops", 0))

    def bwd_ops(self, kind: str) -> int:
        """Kernels of one backward pass of a sub-layer of ``kind``."""
        return int(getattr(self, f"{kind}_bwd_ops", 0))


DEFAULT_SOFTWARE = Software()


@dataclass(frozen=True, slots=True)
class StrategyChoice:
    """The strategy a scenario selects for one parallel dimension, and its own configuration.

    ``dimension`` is the breakdown entry the strategy reports ("pp", "dp", or a plugin's
    own), ``name`` the registered strategy (``Strategy.name``), ``config`` the scenario's
    configuration block for it, plain data as written (the strategy checks it:
    ``Strategy.configure``).
    """

    dimension: str
    name: str
    config: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Strategies:
    """The scenario's ``strategies`` section: the selected strategy per dimension.

    A dimension without a choice runs its built-in strategies (or the one plugin strategy
    that claims it); ``choices`` is ordered by dimension, so equal selections are equal values.
    """

    choices: tuple[StrategyChoice, ...] = ()

    def get(self, dimension: str) -> StrategyChoice | None:
        """The choice for ``dimension`` (None: its default)."""
        for c in self.choices:
            if c.dimension == dimension:
                return c
        return None

    def __bool__(self) -> bool:
        return bool(self.choices)


DEFAULT_STRATEGIES = Strategies()


@dataclass(frozen=True, slots=True)
class Scenario:
    """cluster + model + plan (+ calibration, software stack, strategy selection): one question to the twin."""

    cluster: Cluster
    model: Model
    plan: Plan
    name: str = ""
    calibration: Calibration = dataclasses.field(default_factory=Calibration)
    software: Software = DEFAULT_SOFTWARE
    # Which strategy models each parallel dimension (empty: the defaults; twin.core.strategy_set resolves it).
    strategies: Strategies = DEFAULT_STRATEGIES

    @property
    def dp(self) -> int:
        """Data-parallel degree (stated or derived)."""
        return self.plan.dp or self.cluster.num_gpus // (self.plan.tp * self.plan.pp * self.plan.cp)

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step: gbs / (mbs * dp)."""
        return self.plan.gbs // (self.plan.mbs * self.dp)


# ------------------------------------------------ recomputed modules (one plan, or a batch's)
def recompute_module(plan: Any, name: str) -> Any:
    """Whether ``plan`` recomputes module ``name`` (selective recomputation naming it).

    A batch's ``recompute_modules`` column holds each point's modules joined by commas
    (``twin.core.point_set``).
    """
    return ops.logical_and(plan.recompute == "selective", names_module(plan.recompute_modules, name))


def default_recompute_modules(modules: Any) -> Any:
    """Whether ``recompute_modules`` (a plan's, or a batch's column) is the default (core_attn)."""
    if isinstance(modules, ops.Labels):
        return np.asarray(modules) == modules.code(",".join(DEFAULT_RECOMPUTE_MODULES))
    return modules == DEFAULT_RECOMPUTE_MODULES


def names_module(modules: Any, name: str) -> Any:
    """Whether ``modules`` (a plan's, or a batch's column: a bool per point) names ``name``."""
    if isinstance(modules, ops.Labels):
        return np.isin(np.asarray(modules), [i for i, c in enumerate(modules.categories) if name in c.split(",")])
    return name in modules

