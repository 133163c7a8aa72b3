"""Time of the work in ``workload.py`` on one GPU.

GEMMs: roofline (Williams et al. 2009) of tensor-core throughput against HBM traffic,
times a shape efficiency for tile and wave quantization (NVIDIA Deep Learning
Performance Guide, "Matrix Multiplication Background": a GEMM runs as tiles over the
SMs; partial tiles and a partial last wave waste throughput), floored by a minimum
kernel duration. Fused attention: FLOPs over the GPU's attention efficiency with a ramp
for short key ranges (FlashAttention-2/3 papers report lower throughput at short
sequence lengths). Element-wise kernels are HBM-bound.

Written once for one scenario and for a batch (``twin.core.ops``): a :class:`Device` and
GEMM shapes may hold one value per point.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.accelerator_generations import GENERATIONS
from twin.core.power_clock import power_clock_factor
from twin.core.specs import GPU, ComputeEfficiency
from twin.core.units import BYTES_PER_ELEMENT
from twin.core.workload import SSD_BWD_KERNELS, SSD_FWD_KERNELS, Gemm, MemKernel, SubLayer

# CUTLASS/cuBLAS tile shapes considered, with the fraction of the large-tile throughput
# each sustains (smaller tiles re-read operands more often; CUTLASS profiler tables).
_TILES = ((128, 256, 1.0), (256, 128, 1.0), (128, 128, 0.92), (64, 128, 0.80), (64, 64, 0.65))
# Stream-K / split-K scheduling in cuBLAS on Ampere+ recovers part of the tail wave
# (Osama et al. 2023, "Stream-K"); model it as recovering half of the quantization loss.
_WAVE_RECOVERY = 0.5
# Key range at which fused attention reaches half its long-sequence efficiency (FA2 paper
# Fig. 4-5: A100 throughput at 512 keys is roughly half the 8K-16K plateau).
_ATTN_HALF_KV = 256.0
# FlashAttention backward does 2.5x the forward FLOPs (5 matmuls vs 2; Dao 2023 §3.2).
ATTN_BWD_FLOP_RATIO = 2.5
# Unfused attention (Megatron fused softmax + batched GEMMs): bytes per score element
# forward (write scores, read + write probabilities, dropout mask); backward 2x.
_UNFUSED_SCORE_BYTES = 8.0


# Dense 16-bit tensor-core FLOPs per clock per SM (architecture whitepapers: Volta 8 tensor
# cores x 64 FMA; Ampere 4 x 256 FMA; Hopper 4 x 512 FMA; Blackwell twice Hopper per SM).
# With the datasheet peak it gives the clock the peak assumes (H100 SXM: 989.4 TFLOP/s /
# (132 SMs x 4096) = 1.83 GHz, the whitepaper's boost clock), which the SFU runs at too.
# (twin.core.accelerator_generations holds them, one row per generation, with the other vendors'.)
TENSOR_FLOPS_PER_CLK_SM = {g: f.tensor_flops_per_clk_unit for g, f in GENERATIONS.items()
                           if f.tensor_flops_per_clk_unit is not None}


def softmax_exp_per_s(gpu: GPU, peak16: float) -> float:
    """Softmax exponentials per second: SMs x exponentials per clock x the clock the 16-bit peak
    assumes (``TENSOR_FLOPS_PER_CLK_SM``); unbounded (the bound not modelled) for a generation
    without a published transcendental rate per compute unit.
    """
    per_clk = TENSOR_FLOPS_PER_CLK_SM.get(gpu.generation)
    return peak16 * gpu.sfu_exp_per_clk / per_clk if per_clk else math.inf

# Extra HBM bytes per element of each low-precision GEMM input (activation in forward,
# output gradient in backward) over a plain 16-bit flow, per recipe (Transformer Engine 2.x
# recipes and kernels; NVIDIA "Pretraining LLMs with NVFP4", 2025):
# - delayed (tensorwise, scale from the amax history): the cast is fused into the
#   producing kernel (TE LayerNormLinear / activation writes FP8 instead of BF16), plus one
#   transposed FP8 copy for the other GEMM operand layout (TE cast_transpose): 1 byte;
# - current (tensorwise, scale from this tensor's amax): the amax is known only after the
#   producer ran, so a separate quantize reads BF16 (2) and writes rowwise + columnwise FP8 (2);
# - blockwise (1x128 / 128x128 scales, DeepSeek-V3 §3.3): a separate quantize for the two
#   block directions, 2 + 2 bytes, scales 8 bytes per 128 (~0.06);
# - mxfp8 (1x32 E8M0 scales): rowwise and columnwise copies are quantized separately (a
#   transposed MXFP8 tensor needs its own scales): 2 + 2, scales 2 x 1/32;
# - nvfp4 (1x16 E4M3 scales + a per-tensor FP32 scale): an amax pass (2), then the quantize
#   reads 2 and writes two 4-bit copies (0.5 + 0.5) with 2 x 1/16 scale bytes; the random
#   Hadamard transform on the wgrad operands is fused in that kernel.
QUANT_BYTES = {"delayed": 1.0, "current": 4.0, "blockwise": 4.0 + 8.0 / 128, "mxfp8": 4.0 + 2.0 / 32,
               "nvfp4": 2.0 + 2.0 + 1.0 + 2.0 / 16}

# Scale-factor bytes each block-scaled GEMM reads beside each input element (the GEMM's own
# HBM traffic, in its memory roofline): MXFP8 one E8M0 byte per 32 elements (OCP Microscaling
# Formats spec v1.0, block size 32); NVFP4 one E4M3 byte per 16 (NVIDIA, "Introducing NVFP4",
# 2025; the per-tensor FP32 scale is negligible); blockwise one FP32 scale per 128 activation
# elements (DeepSeek-V3 report section 3.3, 1x128 tiles; its 128x128 weight blocks add ~0).
# Tensorwise recipes carry one scale per tensor: nothing per element.
SCALE_BYTES = {"mxfp8": 1.0 / 32, "nvfp4": 1.0 / 16, "blockwise": 4.0 / 128}


def resolve_recipe(precision: str, recipe: str, generation: str) -> str:
    """The recipe in effect: ``auto`` is the stack's default (TE: delayed scaling on
    Hopper, MXFP8 on Blackwell; NVFP4 for FP4); 16-bit precisions have none ("").
    """
    if precision == "fp4":
        return "nvfp4"
    if precision != "fp8":
        return ""
    if recipe != "auto":
        return recipe
    return "mxfp8" if generation == "blackwell" else "delayed"


@dataclass(frozen=True, slots=True)
class Device:
    """The numbers of one GPU that compute timing needs (hashable, for caching).

    For a batch each field is an array with one entry per point (see ``DEVICE_FIELDS``).
    """

    peak_flops: Any          # dense, for the GEMM precision
    attn_peak_flops: Any     # 16-bit peak (fused attention, kept-in-bf16 GEMMs)
    gemm_eff: Any
    gemm16_eff: Any          # the 16-bit GEMM efficiency (kept-in-bf16 GEMMs)
    attn_fwd_eff: Any
    attn_bwd_eff: Any
    hbm_Bps: Any
    sm_count: Any
    kernel_min_s: Any
    flash: Any
    in_bytes: Any            # bytes per GEMM input element
    quant_bytes: Any         # extra bytes per quantized GEMM input element (QUANT_BYTES)
    exp_per_s: Any           # softmax exponentials per second (SFU)


DEVICE_FIELDS = tuple(Device.__dataclass_fields__)


def device_for(gpu: GPU, precision: str, eff: ComputeEfficiency, scale: float = 1.0,
               recipe: str = "auto", attention_kernel: str = "profile") -> Device:
    """Timing parameters of ``gpu`` for a GEMM ``precision`` and recipe (``scale``: calibration);
    ``attention_kernel``: the stack's fused-attention kernel (``Software.attention_kernel``).

    The tensor cores (GEMMs, fused attention, the SFU beside them) run at the SKU's datasheet
    peaks times the clock its power limit sustains (``twin.core.power_clock``); HBM does not slow.
    """
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    gemm16 = eff.gemm.get(half, 0.75)
    gemm_eff = eff.gemm.get(precision) or gemm16
    sustained = eff.sustained * scale
    resolved = resolve_recipe(precision, recipe, gpu.generation)
    clock = power_clock_factor(gpu, gemm16)
    peak16 = gpu.peak_tflops[half] * 1e12 * clock
    attn_fwd, attn_bwd = eff.attention_figures(attention_kernel)
    return Device(
        peak_flops=gpu.peak_tflops[precision] * 1e12 * clock,
        attn_peak_flops=peak16,
        gemm_eff=min(1.0, gemm_eff * sustained),
        gemm16_eff=min(1.0, gemm16 * sustained),
        # Fused attention is one long kernel per layer: its efficiency is already the
        # end-to-end figure, so the sustained factor (launch gaps etc.) does not apply.
        attn_fwd_eff=min(1.0, attn_fwd * scale),
        attn_bwd_eff=min(1.0, attn_bwd * scale),
        hbm_Bps=gpu.hbm_TBps * 1e12 * eff.hbm * min(1.0, sustained),
        sm_count=gpu.sm_count,
        kernel_min_s=eff.kernel_min_us * 1e-6,
        flash=eff.flash_attention,
        in_bytes=BYTES_PER_ELEMENT.get(precision, 2.0) + SCALE_BYTES.get(resolved, 0.0),
        quant_bytes=QUANT_BYTES.get(resolved, 0.0),
        # SMs x exponentials per clock x the clock of the 16-bit peak (TENSOR_FLOPS_PER_CLK_SM).
        exp_per_s=softmax_exp_per_s(gpu, peak16),
    )


@functools.lru_cache(maxsize=4096)
def _high_precision_one(dev: Device) -> Device:
    return dataclasses.replace(dev, peak_flops=dev.attn_peak_flops, gemm_eff=dev.gemm16_eff, in_bytes=2.0,
                               quant_bytes=0.0)


def high_precision(dev: Device) -> Device:
    """``dev`` for the GEMMs a low-precision recipe keeps in 16 bits (the same device if it is 16-bit)."""
    if ops.is_batch(dev.peak_flops):
        return dataclasses.replace(dev, peak_flops=dev.attn_peak_flops, gemm_eff=dev.gemm16_eff,
                                   in_bytes=np.full(np.shape(dev.in_bytes), 2.0),
                                   quant_bytes=np.zeros(np.shape(dev.quant_bytes)))
    return _high_precision_one(dev)


def shape_efficiency(m: Any, n: Any, sm_count: Any, groups: Any = 1) -> Any:
    """Best tile/wave utilisation over the tile shapes cuBLAS can pick.

    ``groups`` equal (m x n) problems in one grouped kernel: tile utilisation per problem,
    waves over all ``groups`` problems' tiles (CUTLASS grouped GEMM schedules the tiles of
    every problem over the SMs as one grid). A batch is computed once per distinct shape
    (``ops.on_distinct_rows``): a plan search's shapes repeat (it was 4.4 of the DeepSeek-V3 16K
    search's 11.7 s under cProfile, 1.1 s after).
    """
    if ops.is_batch(m, n, sm_count, groups):
        return ops.on_distinct_rows(_shape_efficiency, m, n, sm_count, groups)
    return _shape_efficiency(m, n, sm_count, groups)


def _shape_efficiency(m: Any, n: Any, sm_count: Any, groups: Any = 1) -> Any:
    best = 0.0
    for tm, tn, tile_eff in _TILES:
        tiles_m, tiles_n = -(-m // tm), -(-n // tn)
        util = (m * n) / (tiles_m * tm * tiles_n * tn)
        waves = groups * tiles_m * tiles_n / sm_count
        full = ops.ceil(waves)
        wave_eff = ops.where(waves < 1.0, waves, 1.0 - (1.0 - waves / ops.maximum(full, 1)) * (1.0 - _WAVE_RECOVERY))
        best = ops.maximum(best, util * wave_eff * tile_eff)
    return best


def gemm_time(dev: Device, m: Any, n: Any, k: Any) -> Any:
    """Seconds for one (m x k) @ (k x n) GEMM (cached by value for one scenario)."""
    if ops.is_batch(m, n, k, dev.peak_flops):
        return _gemm_time(dev, m, n, k)
    return _cached_gemm_time(dev, m, n, k)


def _gemm_time(dev: Device, m: Any, n: Any, k: Any) -> Any:
    if ops.is_batch(m, n, k):
        # Shapes as float64: products of dimensions must not wrap around in int64.
        m, n, k = (x.astype(float) if type(x) is ops.ndarray else float(x) for x in (m, n, k))
    elif m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k
    eff = shape_efficiency(m, n, dev.sm_count)
    t_compute = flops / (dev.peak_flops * dev.gemm_eff * ops.where(eff > 0, eff, 1.0))
    t_memory = ((m * k + k * n) * dev.in_bytes + m * n * 2.0) / dev.hbm_Bps
    t = ops.maximum(ops.maximum(t_compute, t_memory), dev.kernel_min_s)
    if ops.is_batch(m, n, k):
        return ops.where((m > 0) & (n > 0) & (k > 0), t, 0.0)
    return t


_cached_gemm_time = functools.lru_cache(maxsize=65536)(_gemm_time)


def grouped_gemm_time(dev: Device, m: Any, n: Any, k: Any, groups: Any) -> Any:
    """Seconds for ``groups`` equal (m x k) @ (k x n) GEMMs run as one grouped GEMM.

    The local experts' GEMMs run as one kernel (Megatron-Core ``GroupedMLP`` /
    ``TEGroupedMLP`` over TE ``GroupedLinear``; CUTLASS grouped GEMM, NVIDIA CUTLASS
    ``examples/24_gemm_grouped``): per-problem tile utilisation as for one GEMM, but the
    waves are over all problems' tiles and the minimum kernel duration applies once. For
    ``groups == 1`` this is :func:`gemm_time`.
    """
    if ops.is_batch(m, n, k, groups, dev.peak_flops):
        return _grouped_gemm_time(dev, m, n, k, groups)
    return _cached_grouped_gemm_time(dev, m, n, k, groups)


def _grouped_gemm_time(dev: Device, m: Any, n: Any, k: Any, groups: Any) -> Any:
    if ops.is_batch(m, n, k, groups):
        m, n, k, groups = (x.astype(float) if type(x) is ops.ndarray else float(x) for x in (m, n, k, groups))
    elif m <= 0 or n <= 0 or k <= 0 or groups <= 0:
        return 0.0
    flops = 2.0 * m * n * k * groups
    eff = shape_efficiency(m, n, dev.sm_count, groups)
    t_compute = flops / (dev.peak_flops * dev.gemm_eff * ops.where(eff > 0, eff, 1.0))
    t_memory = ((m * k + k * n) * dev.in_bytes + m * n * 2.0) * groups / dev.hbm_Bps
    t = ops.maximum(ops.maximum(t_compute, t_memory), dev.kernel_min_s)
    if ops.is_batch(m, n, k, groups):
        return ops.where((m > 0) & (n > 0) & (k > 0) & (groups > 0), t, 0.0)
    return t


_cached_grouped_gemm_time = functools.lru_cache(maxsize=65536)(_grouped_gemm_time)


def _entry_time(dev: Device, g: Gemm, m: Any, n: Any, k: Any) -> Any:
    """Seconds of all ``count`` instances of a GEMM entry of shape (m, n, k)."""
    if g.grouped:
        return grouped_gemm_time(dev, m, n, k, g.count)
    return gemm_time(dev, m, n, k) * g.count


def gemm_fwd_time(dev: Device, g: Gemm) -> Any:
    """Forward seconds of one GEMM entry (all ``count`` instances)."""
    return _entry_time(high_precision(dev) if g.high_precision else dev, g, g.m, g.n, g.k)


def gemm_pass_times(dev: Device, g: Gemm, frozen: Any = False) -> tuple[Any, Any, Any]:
    """(forward, data-gradient, weight-gradient) seconds for ``g`` (all ``count`` instances).

    Forward (m,n,k); dgrad (m,k,n); wgrad (k,n,m): same FLOPs, different shapes. Frozen
    weights (LoRA's base model) need no weight gradient.
    """
    if g.high_precision:
        dev = high_precision(dev)
    fwd = _entry_time(dev, g, g.m, g.n, g.k)
    dgrad = _entry_time(dev, g, g.m, g.k, g.n)
    if g.frozen_weights or ops.all_(frozen):
        return fwd, dgrad, 0.0
    wgrad = _entry_time(dev, g, g.k, g.n, g.m)
    return fwd, dgrad, ops.where(frozen, 0.0, wgrad)


def sublayer_wgrad_time(dev: Device, sl: SubLayer, frozen: Any = False) -> Any:
    """Seconds of the weight-gradient GEMMs of one sub-layer (part of its backward): the W
    pass that zero-bubble schedules run apart from the input gradient (Qi et al. 2024 §2).
    """
    total: Any = 0.0
    for g in sl.gemms:
        total = total + gemm_pass_times(dev, g, frozen)[2]
    return total


def attention_times(dev: Device, sl: SubLayer) -> tuple[Any, Any]:
    """(forward, backward) seconds of the attention core of one sub-layer."""
    if not ops.any_(sl.attn_flops > 0):
        return 0.0, 0.0
    fwd = bwd = 0.0
    flash = dev.flash
    if ops.any_(flash):
        ramp = sl.attn_kv_len / (sl.attn_kv_len + _ATTN_HALF_KV)
        # Tensor cores and the SFU work in parallel (FlashAttention-3/4 warp specialisation):
        # the pass takes the longer of the matmuls and the softmax exponentials, one per
        # score forward and one per recomputed probability backward. Small heads on
        # Blackwell are exponential-bound; Blackwell Ultra doubles the SFU rate.
        exp_s = sl.attn_exps / dev.exp_per_s
        fwd = ops.maximum(sl.attn_flops / (dev.attn_peak_flops * dev.attn_fwd_eff * ramp), exp_s)
        bwd = ops.maximum(ATTN_BWD_FLOP_RATIO * sl.attn_flops / (dev.attn_peak_flops * dev.attn_bwd_eff * ramp), exp_s)
    if not ops.all_(flash):
        # Unfused: the full (unmasked) score matrix as batched GEMMs, plus softmax traffic.
        t_gemm = sl.attn_flops_dense / (dev.attn_peak_flops * dev.gemm_eff * 0.8)
        t_mem = sl.attn_scores * _UNFUSED_SCORE_BYTES / dev.hbm_Bps
        fwd = ops.where(flash, fwd, t_gemm + t_mem)
        bwd = ops.where(flash, bwd, 2.0 * (t_gemm + t_mem))
    if ops.is_batch(sl.attn_flops):
        return ops.where(sl.attn_flops > 0, fwd, 0.0), ops.where(sl.attn_flops > 0, bwd, 0.0)
    return fwd, bwd


def sublayer_times(dev: Device, sl: SubLayer, frozen: Any = False,
                   dispatcher: Any = "deepep") -> tuple[Any, Any, Any, Any]:
    """(forward, backward, attention-core forward, attention-core backward) seconds of one
    sub-layer (``dispatcher``: the plan's MoE token dispatcher, see :func:`kernel_times`).
    """
    fwd = bwd = 0.0
    # Elements quantized for the low-precision GEMMs: each activation input in forward,
    # each output gradient in backward (weights are quantized once per step: not here).
    q_fwd: Any = 0.0
    q_bwd: Any = 0.0
    for g in sl.gemms:
        f, dg, wg = gemm_pass_times(dev, g, frozen)
        fwd += f
        bwd += dg + wg
        if not g.high_precision:
            q_fwd = q_fwd + g.m * g.k * g.count
            q_bwd = q_bwd + g.m * g.n * g.count
    a_fwd, a_bwd = attention_times(dev, sl)
    if ops.any_(sl.ssm_flops):
        s_fwd, s_bwd = ssd_times(dev, sl)
        a_fwd, a_bwd = a_fwd + s_fwd, a_bwd + s_bwd
    mem_fwd = sl.elementwise_bytes / dev.hbm_Bps
    k_fwd, k_bwd = kernel_times(dev, sl.kernels, dispatcher)
    fwd += a_fwd + mem_fwd + k_fwd + dev.quant_bytes * q_fwd / dev.hbm_Bps
    bwd += a_bwd + 2.0 * mem_fwd + k_bwd + dev.quant_bytes * q_bwd / dev.hbm_Bps
    return fwd, bwd, a_fwd, a_bwd


def kernel_times(dev: Device, kernels: tuple[MemKernel, ...], dispatcher: Any = "deepep") -> tuple[Any, Any]:
    """(forward, backward) seconds of small memory-bound kernels, each at least ``kernel_min_s``.

    A kernel that moves few bytes still costs a launch and a ramp: cuBLAS/TE kernels on
    Hopper take a few microseconds at minimum (the device's ``kernel_min_us``). A kernel of
    some MoE dispatchers only (``MemKernel.dispatchers``) runs where ``dispatcher`` (the
    plan's ``moe_dispatcher``, one per point in a batch) is one of them.
    """
    fwd: Any = 0.0
    bwd: Any = 0.0
    for kn in kernels:
        one = ops.maximum(kn.bytes_each / dev.hbm_Bps, dev.kernel_min_s)
        if kn.dispatchers:
            one = ops.where(ops.isin(dispatcher, kn.dispatchers), one, 0.0)
        fwd = fwd + kn.count * one
        bwd = bwd + kn.bwd_count * one
    return fwd, bwd


def ssd_times(dev: Device, sl: SubLayer) -> tuple[Any, Any]:
    """(forward, backward) seconds of the Mamba-2 SSD chunked scan of one sub-layer.

    Dao & Gu 2024 ("Transformers are SSMs", §6): the intra-chunk work and the chunk states
    are batched matmuls on tensor cores (16-bit; Triton kernels), the inter-chunk state
    passing is a memory-bound recurrence. Each pass is the larger of its tensor time (at
    the GEMM efficiency times the tile/wave utilisation of its (Q x P) chunk matmuls over
    chunks x heads) and its HBM time, and each of its kernels (5 forward, ~12 backward,
    ``workload.SSD_*_KERNELS``) takes at least the minimum kernel duration. Backward: 2x
    the matmul FLOPs (two gradients per matmul) and 2x the bytes (gradients of x, B, C,
    dt and the states written as well as read).
    """
    rows, cols, batches = sl.ssm_tile
    eff = shape_efficiency(rows, cols, dev.sm_count, batches)
    tensor = sl.ssm_flops / (dev.attn_peak_flops * dev.gemm16_eff * ops.where(eff > 0, eff, 1.0))
    memory = sl.ssm_bytes / dev.hbm_Bps
    fwd = ops.maximum(ops.maximum(tensor, memory), SSD_FWD_KERNELS * dev.kernel_min_s)
    bwd = ops.maximum(ops.maximum(2.0 * tensor, 2.0 * memory), SSD_BWD_KERNELS * dev.kernel_min_s)
    return fwd, bwd
