"""The domain model: cluster, model, plan and scenario specs.

Specs are frozen dataclasses, loaded strictly by :mod:`twin.core.schema` (unknown keys,
wrong types and out-of-range numbers are errors naming the field) and then checked by
``validate_*`` for rules that span fields (``tp*pp*cp*dp == num_gpus`` ...).
Units are in the field names (see :mod:`twin.core.units`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from twin.core import ops
from twin.core.errors import SpecError
from twin.core.schema import spec_field

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "fp4"]
# Low-precision training recipes (NVIDIA Transformer Engine 2.x recipes; DeepSeek-V3 report
# §3.3 for blockwise): "auto" is the stack's default for the precision and GPU (FP8:
# delayed scaling on Hopper, MXFP8 on Blackwell; FP4: NVFP4).
Recipe = Literal["auto", "delayed", "current", "blockwise", "mxfp8", "nvfp4"]
FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8")
Generation = Literal["volta", "ampere", "hopper", "blackwell"]
# The hosts' CPU vendor, as NCCL's tuning model tells them apart (tuning.cc: getNetOverhead, llMaxBws).
HostCpu = Literal["intel", "amd", "other"]
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

# Largest cluster the twin accepts: 10 million GPUs is ~100x today's largest training
# clusters; anything beyond is a typo (or hostile input) and is rejected by name.
MAX_GPUS = 10_000_000

_GENERATION_ORDER = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
# The first GPU generation whose tensor cores run each precision (NVIDIA architecture
# whitepapers: Volta fp16; Ampere bf16/tf32; Hopper fp8; Blackwell fp4).
PRECISION_MIN_GENERATION = {"fp32": "volta", "fp16": "volta", "tf32": "ampere", "bf16": "ampere",
                            "fp8": "hopper", "fp4": "blackwell"}


# --------------------------------------------------------------------------- GPU
@dataclass(frozen=True, slots=True)
class ComputeEfficiency:
    """Achievable fractions of the datasheet peaks (calibration targets, see presets).

    ``gemm`` maps precision -> fraction of the dense peak a large, well-shaped GEMM reaches;
    ``attention_fwd``/``attention_bwd`` the fraction of the 16-bit peak fused (flash)
    attention reaches at long sequence; ``hbm`` the fraction of the datasheet HBM bandwidth
    that streaming kernels reach; ``kernel_min_us`` the floor on any kernel's duration.
    GEMM and HBM figures are kernel-level; ``sustained`` is the fraction of them a whole
    training step sustains (clocks under the power cap, launch gaps, framework work
    between kernels). Attention figures are end-to-end already (one fused kernel per
    layer). ``sustained`` and the attention figures are fitted to the reference runs.
    ``cudnn_attention_fwd``/``cudnn_attention_bwd``: what cuDNN 9's fused attention
    reaches on this generation, measured at the kernel, where it differs from the fitted
    figures (a stack with ``Software.attention_kernel = "cudnn"`` runs it); None: the
    fitted figures are that kernel's already (the generation's runs all use it).
    """

    gemm: dict[str, float]
    attention_fwd: float = spec_field(ge=0.01, le=1)
    attention_bwd: float = spec_field(ge=0.01, le=1)
    hbm: float = spec_field(ge=0.01, le=1)
    sustained: float = spec_field(1.0, ge=0.01, le=1)
    kernel_min_us: float = spec_field(4.0, ge=0, le=1e4)
    flash_attention: bool = True
    cudnn_attention_fwd: float | None = spec_field(None, ge=0.01, le=1)
    cudnn_attention_bwd: float | None = spec_field(None, ge=0.01, le=1)
    source: str = ""

    def attention_figures(self, kernel: str) -> tuple[float, float]:
        """(forward, backward) fraction of the 16-bit peak that fused attention reaches with
        ``kernel`` (``Software.attention_kernel``): the measured cuDNN pair for "cudnn" where
        this profile has one, else the fitted pair.
        """
        if kernel == "cudnn" and self.cudnn_attention_fwd is not None and self.cudnn_attention_bwd is not None:
            return self.cudnn_attention_fwd, self.cudnn_attention_bwd
        return self.attention_fwd, self.attention_bwd


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator model. Peaks are dense (no sparsity), per GPU."""

    name: str
    generation: Generation
    peak_tflops: dict[str, float]
    hbm_gib: float = spec_field(ge=0.001, le=1e5)
    hbm_TBps: float = spec_field(ge=0.001, le=1e3)
    sm_count: int = spec_field(ge=1, le=100_000)
    nvlink_GBps: float = spec_field(0.0, ge=0, le=1e6, doc="NVLink bandwidth per GPU per direction")
    tdp_w: float = spec_field(700.0, ge=1, le=1e5)
    sfu_exp_per_clk: float = spec_field(
        16.0, ge=1, le=1024,
        doc="exponentials per clock per SM (MUFU.EX2; CUDA C++ Programming Guide throughput table: 16)")
    efficiency: ComputeEfficiency | None = None
    source: str = ""

    def supports(self, precision: str) -> bool:
        """Whether this GPU's tensor cores run ``precision`` natively."""
        need = PRECISION_MIN_GENERATION.get(precision)
        return need is not None and _GENERATION_ORDER[self.generation] >= _GENERATION_ORDER[need] \
            and precision in self.peak_tflops


# ----------------------------------------------------------------------- fabrics
@dataclass(frozen=True, slots=True)
class ScaleUp:
    """The scale-up domain (NVLink/NVSwitch): GPUs that reach each other over one switch hop."""

    fabric: str = "nvlink"
    generation: int | None = spec_field(None, ge=1, le=100)
    domain_gpus: int = spec_field(8, ge=1, le=1_000_000)
    link_GBps: float | None = spec_field(None, ge=0.001, le=1e6, doc="per GPU per direction; None: from generation")
    achievable_fraction: float | None = spec_field(None, ge=0.01, le=1)
    nvls: bool | None = None
    latency_us: float | None = spec_field(None, ge=0, le=1e6)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """The scale-out network between scale-up domains (InfiniBand, RoCE, ...)."""

    fabric: str = "infiniband"
    nics_per_node: int | None = spec_field(None, ge=1, le=1024, doc="None: one NIC per GPU (rail design)")
    nic_gbps: float = spec_field(400.0, ge=0.001, le=1e6)
    topology: Literal["fat_tree", "rail_optimized"] = "rail_optimized"
    switch_radix: int = spec_field(64, ge=4, le=100_000)
    tiers: int | None = spec_field(None, ge=1, le=5)
    oversubscription: tuple[float, ...] = spec_field(
        default_factory=tuple, ge=1, le=1000,
        doc="down:up ratio of the uplinks of each switch tier, leaf first (1 = non-blocking)")
    gpus_per_leaf: int | None = spec_field(
        None, ge=1, le=MAX_GPUS, doc="GPUs under one leaf switch; below the cluster, a tier above it; None: from radix")
    tier_spans: tuple[int, ...] = spec_field(
        default_factory=tuple, ge=1, le=MAX_GPUS,
        doc="GPUs under one switch of each tier, leaf first; empty: from radix")
    sharp: bool = False
    adaptive_routing: bool | None = None
    achievable_fraction: float | None = spec_field(None, ge=0.01, le=1)
    latency_us: float | None = spec_field(
        None, ge=0, le=1e6, doc="one hop's latency (NIC, cable, switch), us; each tier pays it per hop crossed; "
                                "None: the fabric's own figure")
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Optics:
    """Optical interconnect of the scale-out fabric: pluggable transceivers or co-packaged."""

    kind: Literal["pluggable", "cpo"] = "pluggable"
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemoryPool:
    """A CXL-attached memory pool shared by the GPUs of a node."""

    fabric: str = "cxl"
    capacity_gib_per_node: float = spec_field(1024.0, ge=0.001, le=1e7)
    bandwidth_GBps_per_node: float = spec_field(256.0, ge=0.001, le=1e6)
    latency_ns: float = spec_field(250.0, ge=0, le=1e9)
    devices_per_node: int = spec_field(4, ge=1, le=1024)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


# One year of amortisation: the Julian year, 365.25 days (a definition, used by the cost model).
YEAR_S = 365.25 * 86400.0


@dataclass(frozen=True, slots=True)
class Power:
    """What the cluster's components draw, and the facility overhead (``twin.core.energy``).

    Per unit, in watts. A figure left unset (None) has no published default shipped with
    the twin: that component is not counted, and the estimate lists it as such. System
    presets set the figures their datasheets give (``twin/presets/systems.yaml``).
    """

    gpu_busy_fraction: float = spec_field(
        1.0, gt=0, le=1, doc="GPU power while it computes, as a fraction of gpu.tdp_w (training's compute "
                             "phases reach TDP: Patel et al., ASPLOS 2024)")
    gpu_idle_w: float | None = spec_field(
        None, ge=0, le=1e5, doc="GPU power while it waits (exposed communication, pipeline bubble, offload), W; "
                                "None: as while busy (an upper bound: no published figure shipped)")
    nic_w: float | None = spec_field(None, ge=0, le=1e4, doc="power of one scale-out NIC, W")
    switch_w: tuple[float, ...] = spec_field(
        default_factory=tuple, ge=0, le=1e6,
        doc="power of one scale-out switch, W: one entry for every tier, or one per switch tier (leaf first)")
    host_w: float | None = spec_field(
        None, ge=0, le=1e6, doc="power of one node besides its GPUs, NICs and CXL devices (CPUs, DRAM, "
                                "baseboard switches, fans, storage, power-supply losses), W")
    cxl_device_w: float | None = spec_field(None, ge=0, le=1e4, doc="power of one CXL memory device, W")
    pue: float = spec_field(
        1.0, ge=1, le=5, doc="facility power usage effectiveness (total facility / IT power); 1: IT energy only")
    source: str = ""


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices the user supplies for the cost of a step (none set: no cost is reported).

    ``usd_per_gpu_hour``: what one GPU-hour costs (a rental price, everything included
    unless electricity is billed on top); or ``capex_usd_per_gpu`` spread evenly over
    ``amortisation_years`` (straight-line); plus ``usd_per_kwh`` on the facility's energy.
    """

    usd_per_gpu_hour: float | None = spec_field(None, ge=0, le=1e6, doc="price of one GPU-hour, USD")
    capex_usd_per_gpu: float | None = spec_field(
        None, ge=0, le=1e9, doc="purchase cost of the cluster per GPU (its share of hosts, network, facility), USD")
    amortisation_years: float | None = spec_field(
        None, gt=0, le=100, doc="years over which capex_usd_per_gpu is spread evenly")
    usd_per_kwh: float | None = spec_field(None, ge=0, le=1e4, doc="electricity price, USD per kWh")

    @property
    def priced(self) -> bool:
        """Whether any price is given."""
        return (self.usd_per_gpu_hour is not None or self.capex_usd_per_gpu is not None
                or self.usd_per_kwh is not None)


@dataclass(frozen=True, slots=True)
class Cluster:
    """A training cluster: GPUs, nodes, scale-up domains, scale-out network, optics, CXL, power and prices."""

    gpu: GPU
    num_gpus: int = spec_field(ge=1, le=MAX_GPUS)
    gpus_per_node: int = spec_field(8, ge=1, le=1024)
    name: str = ""
    scale_up: ScaleUp = dataclasses.field(default_factory=ScaleUp)
    scale_out: ScaleOut | None = dataclasses.field(default_factory=ScaleOut)
    optics: Optics | None = None
    memory_pool: MemoryPool | None = None
    power: Power = dataclasses.field(default_factory=Power)
    prices: Prices = dataclasses.field(default_factory=Prices)
    host_cpu: HostCpu | None = spec_field(  # noqa: RUF009 - dataclasses.field with metadata
        None, doc="CPU vendor of the hosts, which NCCL's cost model reads across nodes (network post overhead, "
                  "LL bandwidth cap); None: not stated, NCCL's Intel/other figures")

    @property
    def num_nodes(self) -> int:
        """Nodes in use (a partial node counts as one)."""
        return max(1, -(-self.num_gpus // self.gpus_per_node))

    @property
    def nics_per_node(self) -> int:
        """NICs per node, one per GPU unless stated."""
        if self.scale_out is None:
            return 0
        return self.scale_out.nics_per_node or self.gpus_per_node


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
    moe_fwd_ops: int = spec_field(26, ge=0, le=100_000, doc="kernels per MoE sub-layer forward")
    moe_bwd_ops: int = spec_field(36, ge=0, le=100_000, doc="kernels per MoE sub-layer backward")
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
    # Which strategy models each parallel dimension (empty: the defaults; twin.core.evaluate resolves it).
    strategies: Strategies = DEFAULT_STRATEGIES

    @property
    def dp(self) -> int:
        """Data-parallel degree (stated or derived)."""
        return self.plan.dp or self.cluster.num_gpus // (self.plan.tp * self.plan.pp * self.plan.cp)

    @property
    def microbatches(self) -> int:
        """Micro-batches per pipeline per step: gbs / (mbs * dp)."""
        return self.plan.gbs // (self.plan.mbs * self.dp)


# ---------------------------------------------------------------- cross-field rules
def _divides(a: int, b: int) -> bool:
    return b % a == 0


def validate_model(model: Model, path: str = "model") -> None:
    """Rules spanning model fields."""
    if model.kv_head_count > model.heads:
        raise SpecError(f"{path}.kv_heads", f"must be <= heads ({model.heads}) (got {model.kv_head_count})")
    if not _divides(model.kv_head_count, model.heads):
        raise SpecError(f"{path}.kv_heads", f"must divide heads ({model.heads}) (got {model.kv_head_count})")
    if model.attention == "mla" and model.mla is None:
        raise SpecError(f"{path}.mla", "is required when attention is 'mla'")
    # An MLA block under another attention would be ignored (only attention: mla reads it).
    if model.mla is not None and model.attention != "mla":
        raise SpecError(f"{path}.mla", f"applies only with attention: mla (got attention {model.attention!r})")
    if model.packed_doc_tokens is not None and model.packed_doc_tokens > model.seq_len:
        raise SpecError(f"{path}.packed_doc_tokens",
                        f"must be <= seq_len ({model.seq_len}): a packed document fits in its sequence "
                        f"(got {model.packed_doc_tokens})")
    if model.moe is not None:
        moe = model.moe
        if moe.top_k > moe.experts:
            raise SpecError(f"{path}.moe.top_k", f"must be <= experts ({moe.experts}) (got {moe.top_k})")
        if moe.shared_expert_ffn is not None and moe.shared_experts == 0:
            raise SpecError(f"{path}.moe.shared_expert_ffn", "applies only with moe.shared_experts > 0")
        if moe.pad_to_capacity and moe.capacity_factor is None:
            raise SpecError(f"{path}.moe.pad_to_capacity",
                            "needs moe.capacity_factor (Megatron-Core pads expert inputs to a capacity)")
        if model.hybrid is None and moe.moe_layers is not None and moe.moe_layers + moe.dense_layers > model.layers:
            raise SpecError(f"{path}.moe.moe_layers",
                            f"moe_layers + dense_layers must be <= layers ({model.layers})")
        if model.hybrid is None and moe.moe_layers is None and moe.dense_layers > model.layers:
            raise SpecError(f"{path}.moe.dense_layers", f"must be <= layers ({model.layers})")
    if model.hybrid is not None:
        hy = model.hybrid
        bad = sorted(set(hy.pattern) - set("M*E-"))
        if bad:
            raise SpecError(f"{path}.hybrid.pattern", f"may only contain M, *, E, - (got {''.join(bad)!r})")
        if len(hy.pattern) != model.layers:
            raise SpecError(f"{path}.hybrid.pattern",
                            f"must have one symbol per layer ({model.layers}) (got {len(hy.pattern)})")
        if hy.count("E") and model.moe is None:
            raise SpecError(f"{path}.moe", "is required when the hybrid pattern has MoE layers (E)")
        for name, symbol in (("mamba_layers", "M"), ("attention_layers", "*"), ("moe_layers", "E")):
            stated = getattr(hy, name)
            if stated is not None and stated != hy.count(symbol):
                raise SpecError(f"{path}.hybrid.{name}",
                                f"must equal the count of {symbol!r} in pattern ({hy.count(symbol)}) (got {stated})")


def validate_cluster(cluster: Cluster, path: str = "cluster") -> None:
    """Rules spanning cluster fields."""
    n, per_node = cluster.num_gpus, cluster.gpus_per_node
    if n > per_node and n % per_node:
        raise SpecError(f"{path}.num_gpus", f"must be a multiple of gpus_per_node ({per_node}) (got {n})")
    dom = cluster.scale_up.domain_gpus
    if dom % per_node and per_node % dom:
        raise SpecError(f"{path}.scale_up.domain_gpus",
                        f"must divide or be a multiple of gpus_per_node ({per_node}) (got {dom})")
    if cluster.scale_out is not None:
        so = cluster.scale_out
        if so.tiers is not None and len(so.oversubscription) > max(0, so.tiers - 1):
            raise SpecError(f"{path}.scale_out.oversubscription",
                            f"has {len(so.oversubscription)} entries but a {so.tiers}-tier fabric has "
                            f"{max(0, so.tiers - 1)} uplink tiers")
        if so.tiers is not None and so.tier_spans and len(so.tier_spans) != so.tiers:
            raise SpecError(f"{path}.scale_out.tier_spans",
                            f"must have one entry per tier ({so.tiers}) (got {len(so.tier_spans)})")
        if any(b < a for a, b in zip(so.tier_spans, so.tier_spans[1:], strict=False)):
            raise SpecError(f"{path}.scale_out.tier_spans", "must not decrease from leaf to top")
    elif n > dom:
        raise SpecError(f"{path}.scale_out", f"is required when num_gpus ({n}) exceeds the scale-up domain ({dom})")
    validate_efficiency(cluster.gpu.efficiency, f"{path}.gpu.efficiency")
    validate_power(cluster, path)


def validate_power(cluster: Cluster, path: str = "cluster") -> None:
    """Rules of ``cluster.power`` and ``cluster.prices``: a figure must apply to something
    the cluster has, and the prices must name one way of paying for the hardware.
    """
    pw, pr = cluster.power, cluster.prices
    busy = cluster.gpu.tdp_w * pw.gpu_busy_fraction
    if pw.gpu_idle_w is not None and pw.gpu_idle_w > busy:
        raise SpecError(f"{path}.power.gpu_idle_w",
                        f"must be <= the GPU's busy power (gpu.tdp_w x gpu_busy_fraction = {busy:g} W) "
                        f"(got {pw.gpu_idle_w:g})")
    if cluster.scale_out is None:
        if pw.nic_w is not None:
            raise SpecError(f"{path}.power.nic_w", "applies to scale-out NICs; the cluster has no scale_out")
        if pw.switch_w:
            raise SpecError(f"{path}.power.switch_w", "applies to scale-out switches; the cluster has no scale_out")
    if pw.cxl_device_w is not None and cluster.memory_pool is None:
        raise SpecError(f"{path}.power.cxl_device_w", "applies to CXL devices; the cluster has no memory_pool")
    if (pr.capex_usd_per_gpu is None) != (pr.amortisation_years is None):
        given, missing = ("capex_usd_per_gpu", "amortisation_years") if pr.amortisation_years is None else \
            ("amortisation_years", "capex_usd_per_gpu")
        raise SpecError(f"{path}.prices.{missing}", f"is required with prices.{given}")
    if pr.usd_per_gpu_hour is not None and pr.capex_usd_per_gpu is not None:
        raise SpecError(f"{path}.prices.capex_usd_per_gpu",
                        "cannot be combined with usd_per_gpu_hour: both price the hardware (give one)")


RuleCheck = tuple[str, Any, str, "Callable[[], dict[str, Any]]"]


class Rule:
    """One broken cross-field rule of a plan: the field it names, where it is broken, and why.

    ``bad`` is a bool (one scenario) or a bool array (a batch); ``message`` formats
    ``template`` with ``values`` (numbers, or arrays for a batch) of one point.
    """

    __slots__ = ("bad", "field", "template", "values")

    def __init__(self, field: str, bad: Any, template: str, values: dict[str, Any] | None = None) -> None:
        self.field = field
        self.bad = bad
        self.template = template
        self.values = values or {}

    def message(self, i: int | None = None) -> str:
        """The rule's message for one scenario, or for point ``i`` of a batch."""
        if i is None:
            return self.template.format(**self.values)
        return self.template.format(**{k: _at(v, i) for k, v in self.values.items()})


def _at(value: Any, i: int) -> Any:
    if isinstance(value, ops.Labels):
        return value.name(i)
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "ndim", 0) > 0:
        return value[i].item()
    return value


def _any_point(column: Any, test: Callable[[Any], Any]) -> bool:
    """Whether ``test`` holds for any point of a batch's plan column.

    The rules of a knob that only a value other than its default can break are skipped for
    a batch where no point sets one, as they are for one scenario: what no point can break
    needs no check per point (on the 1M-point benchmark sweep such checks took 70 of 144 ms of
    rule checks, ~7% of the sweep, measured). A constant column (``ops.uniform``) is read at
    its first row.
    """
    return ops.any_(test(column[:1] if ops.uniform(column) else column))


def _stated(column: Any, default: Any) -> bool:
    """Whether any point of a batch's plan column is set away from ``default`` (:func:`_any_point`)."""
    return _any_point(column, lambda values: values != default)


def plan_rules(plan: Any, model: Model, cluster: Any, path: str = "plan") -> Iterator[RuleCheck]:
    """The plan's cross-field rules in the order they are checked (divisibility of every degree):
    (field, where it is broken, message template, the template's values when asked).

    ``plan`` and ``cluster`` may be one scenario's or a batch's (``twin.core.point_set``);
    rules after a broken one are evaluated for a batch too (their points are already
    counted against the first broken rule). For one scenario only broken rules are yielded;
    the values are computed only for a broken rule.
    """
    n = cluster.num_gpus
    tp, pp, cp, vp, ep = plan.tp, plan.pp, plan.cp, plan.vp, plan.ep
    mp = tp * pp * cp
    batch = ops.is_batch(tp, n)
    if batch:
        given = plan.dp > 0
        bad = ops.logical_and(ops.logical_not(given), n % mp != 0)
        if batch or bad:
            yield f"{path}.tp", bad, "tp*pp*cp ({mp}) must divide num_gpus ({n})", lambda: {"mp": mp, "n": n}
        dp = ops.where(given, plan.dp, n // mp)
        bad = ops.logical_and(given, mp * dp != n)
        if batch or bad:
            yield (f"{path}.dp", bad, "tp*pp*cp*dp must equal num_gpus ({n}) (got {got})",
                   lambda: {"n": n, "got": mp * dp})
    elif plan.dp is None:
        bad = n % mp != 0
        if batch or bad:
            yield f"{path}.tp", bad, "tp*pp*cp ({mp}) must divide num_gpus ({n})", lambda: {"mp": mp, "n": n}
        dp = n // mp
    else:
        dp = plan.dp
        bad = mp * dp != n
        if batch or bad:
            yield (f"{path}.dp", bad, "tp*pp*cp*dp must equal num_gpus ({n}) (got {got})",
                   lambda: {"n": n, "got": mp * dp})
    mbs_dp = plan.mbs * dp
    bad = plan.gbs % ops.maximum(mbs_dp, 1) != 0
    if batch or bad:
        yield (f"{path}.gbs", bad, "must be a multiple of mbs*dp ({mbs_dp}) (got {gbs})",
               lambda: {"mbs_dp": mbs_dp, "gbs": plan.gbs})
    bad = model.heads % tp != 0
    if batch or bad:
        yield (f"{path}.tp", bad, "must divide the attention heads ({heads}) (got {tp})",
               lambda: {"heads": model.heads, "tp": tp})
    kv = model.kv_head_count
    bad = ops.logical_and(kv % tp != 0, tp % kv != 0)
    if batch or bad:
        yield (f"{path}.tp", bad, "must divide or be a multiple of kv_heads ({kv}) (got {tp})",
               lambda: {"kv": kv, "tp": tp})
    bad = pp > model.layers
    if batch or bad:
        yield f"{path}.pp", bad, "must be <= layers ({layers}) (got {pp})", lambda: {"layers": model.layers, "pp": pp}
    if (_stated(plan.pp_first_layers, 0) or _stated(plan.pp_last_layers, 0) if batch
            else plan.pp_first_layers or plan.pp_last_layers):
        yield from _layout_rules(plan, model, path, batch)
    interleaved = vp > 1
    bad = ops.logical_and(interleaved, pp == 1)
    if batch or bad:
        yield f"{path}.vp", bad, "interleaving (vp > 1) needs pipeline parallelism (pp > 1)", dict
    bad = ops.logical_and(interleaved, pp * vp > model.layers)
    if batch or bad:
        yield (f"{path}.vp", bad, "pp*vp ({ppvp}) must be <= the layers ({layers}): every virtual stage needs a layer",
               lambda: {"ppvp": pp * vp, "layers": model.layers})
    if _stated(plan.schedule, "auto") if batch else plan.schedule != "auto":
        yield from schedule_rules(plan, model, plan.gbs // ops.maximum(mbs_dp, 1), path, batch)
    bad = ops.logical_and(cp > 1, model.seq_len % (2 * cp) != 0)
    if batch or bad:
        yield (f"{path}.cp", bad, "2*cp ({cp2}) must divide seq_len ({seq})",
               lambda: {"cp2": 2 * cp, "seq": model.seq_len})
    if _stated(plan.cp_comm_type, "p2p") if batch else plan.cp_comm_type != "p2p":
        bad = ops.logical_and(plan.cp_comm_type != "p2p", cp == 1)
        if batch or bad:
            yield f"{path}.cp_comm_type", bad, "applies only with context parallelism (cp > 1)", dict
        bad = ops.logical_and(plan.cp_comm_type == "a2a", (model.heads // tp) % cp != 0)
        if batch or bad:
            yield (f"{path}.cp_comm_type", bad, "a2a splits the heads of a tensor-parallel rank ({heads}) over cp "
                                                "({cp}): cp must divide them",
                   lambda: {"heads": model.heads // tp, "cp": cp})
    bad = ops.logical_and(plan.sp, model.seq_len % (tp * cp) != 0)
    if batch or bad:
        yield (f"{path}.sequence_parallel", bad, "tp*cp ({tpcp}) must divide seq_len ({seq})",
               lambda: {"tpcp": tp * cp, "seq": model.seq_len})
    expert_parallel = ep > 1
    if model.moe is None:
        bad = expert_parallel
        if batch or bad:
            yield f"{path}.ep", bad, "expert parallelism needs an MoE model (model.moe)", dict
    else:
        experts = model.moe.experts
        bad = ops.logical_and(expert_parallel, experts % ep != 0)
        if batch or bad:
            yield (f"{path}.ep", bad, "must divide the experts ({experts}) (got {ep})",
                   lambda: {"experts": experts, "ep": ep})
    expert_group = ep * plan.expert_tp
    if (_any_point(plan.rank_order, lambda values: values == "tp-cp-pp-dp") if batch
            else plan.rank_order == "tp-cp-pp-dp"):
        bad = ops.logical_and(plan.rank_order == "tp-cp-pp-dp", ep > 1)
        if batch or bad:
            yield (f"{path}.rank_order", bad, "tp-cp-pp-dp places no expert-parallel groups: it needs ep = 1", dict)
    if _stated(plan.dp_shard, 0) if batch else plan.dp_shard > 0:
        hybrid = plan.dp_shard > 0
        bad = ops.logical_and(hybrid, (dp * cp) % ops.maximum(plan.dp_shard, 1) != 0)
        if batch or bad:
            yield (f"{path}.dp_shard", bad, "must divide dp*cp ({dpcp}) (got {k})",
                   lambda: {"dpcp": dp * cp, "k": plan.dp_shard})
        bad = ops.logical_and(hybrid, plan.optimizer_sharding == "none")
        if batch or bad:
            yield (f"{path}.dp_shard", bad, "hybrid sharding needs a sharded optimizer_sharding (got 'none')", dict)
    bad = (tp * cp * dp) % expert_group != 0
    if batch or bad:
        yield (f"{path}.ep", bad, "ep*etp ({group}) must divide tp*cp*dp ({tpcpdp})",
               lambda: {"group": expert_group, "tpcpdp": tp * cp * dp})
    gpu = cluster.gpu
    bad = ops.logical_not(gpu_supports(gpu, plan.precision))
    if batch or bad:
        yield (f"{path}.precision", bad, "{gpu} ({generation}) has no {precision} tensor cores",
               lambda: {"gpu": gpu.name, "generation": gpu.generation, "precision": plan.precision})
    # One scenario with the default recipe and no kept layers breaks none of these: skip them.
    if (_stated(plan.recipe, "auto") or _stated(plan.bf16_layers_start, 0) or _stated(plan.bf16_layers_end, 0)
            if batch else plan.recipe != "auto" or plan.bf16_layers_start or plan.bf16_layers_end):
        yield from _recipe_rules(plan, model, gpu, path, batch)
    requested = plan.recompute_layers > 0 if batch else plan.recompute_layers is not None
    bad = ops.logical_and(requested, plan.recompute != "full")
    if batch or bad:
        yield f"{path}.recompute_layers", bad, "applies only with recompute: full", dict
    # Knobs of one mode only: set away from their default elsewhere, they would be ignored.
    if _stated(plan.lora_rank, DEFAULT_LORA_RANK) if batch else plan.lora_rank != DEFAULT_LORA_RANK:
        bad = ops.logical_and(plan.lora_rank != DEFAULT_LORA_RANK, plan.trainable != "lora")
        if batch or bad:
            yield f"{path}.lora_rank", bad, "applies only with trainable: lora", dict
    if _stated(plan.fsdp_reshard_after_forward, True) if batch else not plan.fsdp_reshard_after_forward:
        bad = ops.logical_and(ops.logical_not(plan.fsdp_reshard_after_forward), plan.optimizer_sharding != "fsdp")
        if batch or bad:
            yield f"{path}.fsdp_reshard_after_forward", bad, "applies only with optimizer_sharding: fsdp", dict
    modules = plan.recompute_modules
    if (_any_point(modules, lambda values: ops.logical_not(default_recompute_modules(values))) if batch
            else modules != DEFAULT_RECOMPUTE_MODULES):
        yield from _recompute_module_rules(plan, model, path, batch)
    # A batch's view reads an optional section as a bool per point when only some clusters have it.
    pool = cluster.memory_pool
    no_pool = pool is None or (type(pool) is np.ndarray and ~pool)
    for what in ("optimizer", "params", "activations"):
        target = getattr(plan.offload, what)
        if not (_any_point(target, lambda values: values == "cxl") if batch else target == "cxl"):
            continue
        bad = ops.logical_and(target == "cxl", no_pool)
        if batch or bad:
            yield f"{path}.offload.{what}", bad, "offloading to 'cxl' needs cluster.memory_pool", dict


def recompute_module(plan: Any, name: str) -> Any:
    """Whether ``plan`` recomputes module ``name`` (selective recomputation naming it).

    A batch's ``recompute_modules`` column holds each point's modules joined by commas
    (``twin.core.point_set``).
    """
    return ops.logical_and(plan.recompute == "selective", _named(plan.recompute_modules, name))


def _recompute_module_rules(plan: Any, model: Model, path: str, batch: bool) -> Iterator[RuleCheck]:
    """``recompute_modules``' rules (see :func:`plan_rules`): it applies with selective
    recomputation only, names at least one module, ``mla_up_proj`` needs MLA, ``moe_act`` and
    ``moe`` an MoE model and ``mlp`` dense MLP layers (Megatron-Core TransformerConfig's
    checks; its ``mlp`` recomputes the dense MLP only, not an MoE layer).
    """
    modules = plan.recompute_modules
    default = default_recompute_modules(modules)
    empty = np.asarray(modules) == modules.code("") if isinstance(modules, ops.Labels) else len(modules) == 0
    field = f"{path}.recompute_modules"
    bad = ops.logical_and(ops.logical_not(default), plan.recompute != "selective")
    if batch or bad:
        yield field, bad, "applies only with recompute: selective", dict
    bad = empty
    if batch or bad:
        yield field, bad, "must name at least one module", dict
    bad = ops.logical_and(model.attention != "mla" or model.mla is None, _named(modules, "mla_up_proj"))
    if batch or bad:
        yield field, bad, "mla_up_proj needs multi-head latent attention (model.attention: mla)", dict
    bad = ops.logical_and(model.moe is None, _named(modules, "moe_act"))
    if batch or bad:
        yield field, bad, "moe_act needs an MoE model (model.moe)", dict
    bad = ops.logical_and(model.moe is None, _named(modules, "moe"))
    if batch or bad:
        yield field, bad, "moe needs an MoE model (model.moe)", dict
    bad = ops.logical_and(not has_dense_mlp(model), _named(modules, "mlp"))
    if batch or bad:
        yield field, bad, "mlp needs dense MLP layers (an MoE model with moe.dense_layers, or a dense one)", dict


def has_dense_mlp(model: Model) -> bool:
    """Whether ``model`` has dense MLP sub-layers (the ``mlp`` of ``twin.core.workload``)."""
    if model.hybrid is not None:
        return model.hybrid.count("-") > 0
    return model.moe_layer_count < model.layers


def default_recompute_modules(modules: Any) -> Any:
    """Whether ``recompute_modules`` (a plan's, or a batch's column) is the default (core_attn)."""
    if isinstance(modules, ops.Labels):
        return np.asarray(modules) == modules.code(",".join(DEFAULT_RECOMPUTE_MODULES))
    return modules == DEFAULT_RECOMPUTE_MODULES


def _named(modules: Any, name: str) -> Any:
    if isinstance(modules, ops.Labels):
        return np.isin(np.asarray(modules), [i for i, c in enumerate(modules.categories) if name in c.split(",")])
    return name in modules


def _recipe_rules(plan: Any, model: Model, gpu: Any, path: str, batch: bool) -> Iterator[RuleCheck]:
    """The low-precision recipe's rules (see :func:`plan_rules`)."""
    low = ops.logical_or(plan.precision == "fp8", plan.precision == "fp4")
    recipe = plan.recipe
    fp8_recipe = ops.logical_or(ops.logical_or(recipe == "delayed", recipe == "current"),
                                ops.logical_or(recipe == "blockwise", recipe == "mxfp8"))
    bad = ops.logical_and(fp8_recipe, plan.precision != "fp8")
    if batch or bad:
        yield (f"{path}.recipe", bad, "{recipe} is a recipe for fp8, not {precision}",
               lambda: {"recipe": plan.recipe, "precision": plan.precision})
    bad = ops.logical_and(recipe == "nvfp4", plan.precision != "fp4")
    if batch or bad:
        yield (f"{path}.recipe", bad, "nvfp4 is a recipe for fp4, not {precision}",
               lambda: {"precision": plan.precision})
    bad = ops.logical_and(ops.logical_or(recipe == "mxfp8", recipe == "nvfp4"),
                          ops.logical_not(gpu_supports(gpu, "fp4")))
    if batch or bad:
        yield (f"{path}.recipe", bad, "{recipe} needs microscaling tensor cores (Blackwell); {gpu} has none",
               lambda: {"recipe": plan.recipe, "gpu": gpu.name})
    kept = plan.bf16_layers_start + plan.bf16_layers_end
    bad = ops.logical_and(kept > 0, ops.logical_not(low))
    if batch or bad:
        yield f"{path}.bf16_layers_start", bad, "applies only with precision fp8 or fp4", dict
    bad = kept > model.layers
    if batch or bad:
        yield (f"{path}.bf16_layers_start", bad, "bf16_layers_start + bf16_layers_end ({kept}) must be <= layers "
               "({layers})", lambda: {"kept": kept, "layers": model.layers})


# Schedules that run one model chunk per pipeline rank, and those that run two in a V
# (rank i holds chunks i and 2p-1-i: ZB paper §6, "ZB-V"; deepseek-ai/DualPipe README, DualPipeV).
ONE_CHUNK_SCHEDULES = ("1f1b", "zero_bubble_h1", "zero_bubble_h2", "dualpipe")
V_SCHEDULES = ("zero_bubble_v", "dualpipev")


def schedule_rules(plan: Any, model: Model, m: Any, path: str, batch: bool) -> Iterator[RuleCheck]:
    """A stated pipeline schedule's rules (see :func:`plan_rules`); ``m``: micro-batches per step.

    - every schedule but "auto" is a pipeline schedule: pp > 1;
    - 1F1B, ZB-H1, ZB-H2 and DualPipe run one chunk per rank (vp 1), interleaved more
      (vp > 1), ZB-V and DualPipeV two in a V (vp 2);
    - interleaved: the micro-batches a multiple of pp (Megatron-Core
      ``forward_backward_pipelining_with_interleaving``: with the default
      microbatch_group_size_per_vp_stage = pp, a last group of fewer than pp micro-batches
      is refused);
    - ZB-V: each stage splits into two equal chunks (sail-sg/zero-bubble-pipeline-parallelism
      README: "ZBV schedule requires the number of layers per pipeline to be an even number");
    - DualPipe: an even pp and an even number of micro-batches, at least 2*pp; DualPipeV: at
      least 2*pp (deepseek-ai/DualPipe, ``DualPipe.step`` / ``DualPipeV.step`` assertions).
    """
    pp, vp, sched = plan.pp, plan.vp, plan.schedule
    stated = sched != "auto"
    bad = ops.logical_and(stated, pp == 1)
    if batch or bad:
        yield f"{path}.schedule", bad, "{schedule} is a pipeline schedule: it needs pp > 1", \
            lambda: {"schedule": sched}
    bad = ops.logical_and(ops.isin(sched, ONE_CHUNK_SCHEDULES), vp != 1)
    if batch or bad:
        yield (f"{path}.vp", bad, "{schedule} runs one model chunk per pipeline rank: vp must be 1 (got {vp})",
               lambda: {"schedule": sched, "vp": vp})
    interleaved = sched == "interleaved"
    bad = ops.logical_and(interleaved, vp == 1)
    if batch or bad:
        yield f"{path}.vp", bad, "interleaved needs vp > 1 (got 1)", dict
    bad = ops.logical_and(interleaved, m % pp != 0)
    if batch or bad:
        yield (f"{path}.gbs", bad, "interleaved needs the micro-batches per step ({m}) to be a multiple of pp "
               "({pp}) (Megatron-Core's interleaved schedule)", lambda: {"m": m, "pp": pp})
    bad = ops.logical_and(ops.isin(sched, V_SCHEDULES), vp != 2)
    if batch or bad:
        yield (f"{path}.vp", bad, "{schedule} puts two model chunks on each pipeline rank: vp must be 2 (got {vp})",
               lambda: {"schedule": sched, "vp": vp})
    bad = ops.logical_and(sched == "zero_bubble_v", model.layers % (2 * pp) != 0)
    if batch or bad:
        yield (f"{path}.pp", bad, "zero_bubble_v splits every stage into two equal chunks: 2*pp ({pp2}) must "
               "divide the layers ({layers})", lambda: {"pp2": 2 * pp, "layers": model.layers})
    dual = sched == "dualpipe"
    bad = ops.logical_and(dual, pp % 2 != 0)
    if batch or bad:
        yield f"{path}.pp", bad, "dualpipe needs an even pp (got {pp})", lambda: {"pp": pp}
    bad = ops.logical_and(dual, ops.logical_or(m % 2 != 0, m < 2 * pp))
    if batch or bad:
        yield (f"{path}.gbs", bad, "dualpipe needs an even number of micro-batches per step, at least 2*pp "
               "({pp2}) (got {m})", lambda: {"pp2": 2 * pp, "m": m})
    bad = ops.logical_and(sched == "dualpipev", m < 2 * pp)
    if batch or bad:
        yield (f"{path}.gbs", bad, "dualpipev needs at least 2*pp ({pp2}) micro-batches per step (got {m})",
               lambda: {"pp2": 2 * pp, "m": m})


def _layout_rules(plan: Any, model: Model, path: str, batch: bool) -> Iterator[RuleCheck]:
    """An uneven pipeline layout's rules (see :func:`plan_rules`)."""
    pp = plan.pp
    first_n = plan.pp_first_layers if batch else (plan.pp_first_layers or 0)
    last_n = plan.pp_last_layers if batch else (plan.pp_last_layers or 0)
    uneven = ops.logical_or(first_n > 0, last_n > 0)
    bad = ops.logical_and(uneven, pp == 1)
    if batch or bad:
        yield f"{path}.pp_first_layers", bad, "an uneven pipeline layout needs pipeline parallelism (pp > 1)", dict
    rest_stages = pp - (first_n > 0) - (last_n > 0)
    rest = model.layers - first_n - last_n
    bad = ops.logical_and(ops.logical_and(uneven, pp > 1), ops.where(
        rest_stages > 0, ops.logical_or(rest < rest_stages, rest % ops.maximum(rest_stages, 1) != 0), rest != 0))
    if batch or bad:
        yield (f"{path}.pp_first_layers", bad, "the other {stages} stage(s) must split the remaining {rest} of "
               "{layers} layers evenly (Megatron-Core's uneven layout)",
               lambda: {"stages": rest_stages, "rest": rest, "layers": model.layers})


def gpu_supports(gpu: Any, precision: Any) -> Any:
    """Whether ``gpu`` runs ``precision`` natively (see :meth:`GPU.supports`).

    For a batch ``gpu`` is a column view over the distinct GPUs (``distinct()`` gives
    them and each point's index) and the answer is one bool per point.
    """
    if isinstance(gpu, GPU) and not ops.is_batch(precision):
        return gpu.supports(precision)
    names, pcode = _categories(precision)
    if isinstance(gpu, GPU):
        return np.asarray([gpu.supports(str(p)) for p in names])[pcode]
    objects, index = gpu.distinct()
    # GPUs x precisions: a few of each, so a table indexed per point (no sort of the points)
    table = np.asarray([[o.supports(str(p)) for p in names] for o in objects], bool).reshape(len(objects), len(names))
    return table[index, np.broadcast_to(pcode, np.shape(index))]


def _categories(values: Any) -> tuple[Any, np.ndarray]:
    """(distinct names, each point's index among them) of a batch's string field."""
    if isinstance(values, ops.Labels):
        return values.categories, np.asarray(values, np.int64)
    if not ops.is_batch(values):
        return (values,), np.zeros(1, np.int64)
    names, inv = np.unique(values, return_inverse=True)
    return names, inv.reshape(-1)


def validate_plan(plan: Plan, model: Model, cluster: Cluster, path: str = "plan") -> None:
    """Rules spanning plan, model and cluster: divisibility of every degree."""
    for field_path, bad, template, values in plan_rules(plan, model, cluster, path):
        if bad:
            raise SpecError(field_path, Rule(field_path, bad, template, values()).message())


def validate_software(software: Software, path: str = "software") -> None:
    """Rules spanning software fields: a fused-attention kernel needs fused attention."""
    if software.attention_kernel != "profile" and not software.flash_attention:
        raise SpecError(f"{path}.attention_kernel",
                        f"{software.attention_kernel!r} is a fused-attention kernel, but the stack runs unfused "
                        "attention (flash_attention false)")


def validate_efficiency(eff: ComputeEfficiency | None, path: str = "cluster.gpu.efficiency") -> None:
    """Rules spanning efficiency fields: cuDNN attention figures come as a pair."""
    if eff is not None and (eff.cudnn_attention_fwd is None) != (eff.cudnn_attention_bwd is None):
        missing = "cudnn_attention_bwd" if eff.cudnn_attention_bwd is None else "cudnn_attention_fwd"
        raise SpecError(f"{path}.{missing}", "is required with its pair: cuDNN attention figures are given "
                        "forward and backward together")


def validate_scenario(scenario: Scenario) -> None:
    """Every cross-field rule of a scenario."""
    validate_software(scenario.software)
    validate_cluster(scenario.cluster)
    validate_model(scenario.model)
    validate_plan(scenario.plan, scenario.model, scenario.cluster)
