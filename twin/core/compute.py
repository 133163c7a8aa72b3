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

import functools
from dataclasses import dataclass
from typing import Any

from twin.core import ops
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


@dataclass(frozen=True, slots=True)
class Device:
    """The numbers of one GPU that compute timing needs (hashable, for caching).

    For a batch each field is an array with one entry per point (see ``DEVICE_FIELDS``).
    """

    peak_flops: Any          # dense, for the GEMM precision
    attn_peak_flops: Any     # 16-bit peak (fused attention runs in bf16/fp16)
    gemm_eff: Any
    attn_fwd_eff: Any
    attn_bwd_eff: Any
    hbm_Bps: Any
    sm_count: Any
    kernel_min_s: Any
    flash: Any
    in_bytes: Any            # bytes per GEMM input element
    fp8_casts: Any


DEVICE_FIELDS = tuple(Device.__dataclass_fields__)


def device_for(gpu: GPU, precision: str, eff: ComputeEfficiency, scale: float = 1.0) -> Device:
    """Timing parameters of ``gpu`` for a GEMM ``precision`` (``scale``: calibration)."""
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    gemm_eff = eff.gemm.get(precision) or eff.gemm.get(half, 0.75)
    sustained = eff.sustained * scale
    return Device(
        peak_flops=gpu.peak_tflops[precision] * 1e12,
        attn_peak_flops=gpu.peak_tflops[half] * 1e12,
        gemm_eff=min(1.0, gemm_eff * sustained),
        # Fused attention is one long kernel per layer: its efficiency is already the
        # end-to-end figure, so the sustained factor (launch gaps etc.) does not apply.
        attn_fwd_eff=min(1.0, eff.attention_fwd * scale),
        attn_bwd_eff=min(1.0, eff.attention_bwd * scale),
        hbm_Bps=gpu.hbm_TBps * 1e12 * eff.hbm * min(1.0, sustained),
        sm_count=gpu.sm_count,
        kernel_min_s=eff.kernel_min_us * 1e-6,
        flash=eff.flash_attention,
        in_bytes=BYTES_PER_ELEMENT.get(precision, 2.0),
        fp8_casts=precision in ("fp8", "fp4"),
    )


def shape_efficiency(m: Any, n: Any, sm_count: Any, groups: Any = 1) -> Any:
    """Best tile/wave utilisation over the tile shapes cuBLAS can pick.

    ``groups`` equal (m x n) problems in one grouped kernel: tile utilisation per problem,
    waves over all ``groups`` problems' tiles (CUTLASS grouped GEMM schedules the tiles of
    every problem over the SMs as one grid).
    """
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
    return _entry_time(dev, g, g.m, g.n, g.k)


def gemm_pass_times(dev: Device, g: Gemm, frozen: Any = False) -> tuple[Any, Any, Any]:
    """(forward, data-gradient, weight-gradient) seconds for ``g`` (all ``count`` instances).

    Forward (m,n,k); dgrad (m,k,n); wgrad (k,n,m): same FLOPs, different shapes. Frozen
    weights (LoRA's base model) need no weight gradient.
    """
    fwd = _entry_time(dev, g, g.m, g.n, g.k)
    dgrad = _entry_time(dev, g, g.m, g.k, g.n)
    if g.frozen_weights or ops.all_(frozen):
        return fwd, dgrad, 0.0
    wgrad = _entry_time(dev, g, g.k, g.n, g.m)
    return fwd, dgrad, ops.where(frozen, 0.0, wgrad)


def attention_times(dev: Device, sl: SubLayer) -> tuple[Any, Any]:
    """(forward, backward) seconds of the attention core of one sub-layer."""
    if not ops.any_(sl.attn_flops > 0):
        return 0.0, 0.0
    fwd = bwd = 0.0
    flash = dev.flash
    if ops.any_(flash):
        ramp = sl.attn_kv_len / (sl.attn_kv_len + _ATTN_HALF_KV)
        fwd = sl.attn_flops / (dev.attn_peak_flops * dev.attn_fwd_eff * ramp)
        bwd = ATTN_BWD_FLOP_RATIO * sl.attn_flops / (dev.attn_peak_flops * dev.attn_bwd_eff * ramp)
    if not ops.all_(flash):
        # Unfused: the full (unmasked) score matrix as batched GEMMs, plus softmax traffic.
        t_gemm = sl.attn_flops_dense / (dev.attn_peak_flops * dev.gemm_eff * 0.8)
        t_mem = sl.attn_scores * _UNFUSED_SCORE_BYTES / dev.hbm_Bps
        fwd = ops.where(flash, fwd, t_gemm + t_mem)
        bwd = ops.where(flash, bwd, 2.0 * (t_gemm + t_mem))
    if ops.is_batch(sl.attn_flops):
        return ops.where(sl.attn_flops > 0, fwd, 0.0), ops.where(sl.attn_flops > 0, bwd, 0.0)
    return fwd, bwd


def sublayer_times(dev: Device, sl: SubLayer, frozen: Any = False) -> tuple[Any, Any, Any, Any]:
    """(forward, backward, attention-core forward, attention-core backward) seconds of one sub-layer."""
    fwd = bwd = 0.0
    cast: Any = 0.0
    casts = dev.fp8_casts
    for g in sl.gemms:
        f, dg, wg = gemm_pass_times(dev, g, frozen)
        fwd += f
        bwd += dg + wg
        if ops.any_(casts):
            # cast each activation input: read bf16, write fp8
            cast = ops.where(casts, cast + 3.0 * g.m * g.k * g.count, cast)
    a_fwd, a_bwd = attention_times(dev, sl)
    if ops.any_(sl.ssm_flops):
        s_fwd, s_bwd = ssd_times(dev, sl)
        a_fwd, a_bwd = a_fwd + s_fwd, a_bwd + s_bwd
    mem_fwd = (sl.elementwise_bytes + cast) / dev.hbm_Bps
    k_fwd, k_bwd = kernel_times(dev, sl.kernels)
    fwd += a_fwd + mem_fwd + k_fwd
    bwd += a_bwd + 2.0 * mem_fwd + k_bwd
    return fwd, bwd, a_fwd, a_bwd


def kernel_times(dev: Device, kernels: tuple[MemKernel, ...]) -> tuple[Any, Any]:
    """(forward, backward) seconds of small memory-bound kernels, each at least ``kernel_min_s``.

    A kernel that moves few bytes still costs a launch and a ramp: cuBLAS/TE kernels on
    Hopper take a few microseconds at minimum (the device's ``kernel_min_us``).
    """
    fwd: Any = 0.0
    bwd: Any = 0.0
    for kn in kernels:
        one = ops.maximum(kn.bytes_each / dev.hbm_Bps, dev.kernel_min_s)
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
    tensor = sl.ssm_flops / (dev.attn_peak_flops * dev.gemm_eff * ops.where(eff > 0, eff, 1.0))
    memory = sl.ssm_bytes / dev.hbm_Bps
    fwd = ops.maximum(ops.maximum(tensor, memory), SSD_FWD_KERNELS * dev.kernel_min_s)
    bwd = ops.maximum(ops.maximum(2.0 * tensor, 2.0 * memory), SSD_BWD_KERNELS * dev.kernel_min_s)
    return fwd, bwd
