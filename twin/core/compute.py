"""Time of the work in ``workload.py`` on one GPU.

GEMMs: roofline (Williams et al. 2009) of tensor-core throughput against HBM traffic,
times a shape efficiency for tile and wave quantization (NVIDIA Deep Learning
Performance Guide, "Matrix Multiplication Background": a GEMM runs as tiles over the
SMs; partial tiles and a partial last wave waste throughput), floored by a minimum
kernel duration. Fused attention: FLOPs over the GPU's attention efficiency with a ramp
for short key ranges (FlashAttention-2/3 papers report lower throughput at short
sequence lengths). Element-wise kernels are HBM-bound.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from twin.core.specs import GPU, ComputeEfficiency
from twin.core.units import BYTES_PER_ELEMENT
from twin.core.workload import Gemm, SubLayer

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
    """The numbers of one GPU that compute timing needs (hashable, for caching)."""

    peak_flops: float        # dense, for the GEMM precision
    attn_peak_flops: float   # 16-bit peak (fused attention runs in bf16/fp16)
    gemm_eff: float
    attn_fwd_eff: float
    attn_bwd_eff: float
    hbm_Bps: float
    sm_count: int
    kernel_min_s: float
    flash: bool
    in_bytes: float          # bytes per GEMM input element
    fp8_casts: bool


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


def shape_efficiency(m: int, n: int, sm_count: int) -> float:
    """Best tile/wave utilisation over the tile shapes cuBLAS can pick."""
    best = 0.0
    for tm, tn, tile_eff in _TILES:
        tiles_m, tiles_n = -(-m // tm), -(-n // tn)
        util = (m * n) / (tiles_m * tm * tiles_n * tn)
        waves = tiles_m * tiles_n / sm_count
        if waves < 1.0:
            wave_eff = waves
        else:
            full = math.ceil(waves)
            wave_eff = 1.0 - (1.0 - waves / full) * (1.0 - _WAVE_RECOVERY)
        best = max(best, util * wave_eff * tile_eff)
    return best


@functools.lru_cache(maxsize=65536)
def gemm_time(dev: Device, m: int, n: int, k: int) -> float:
    """Seconds for one (m x k) @ (k x n) GEMM."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k
    t_compute = flops / (dev.peak_flops * dev.gemm_eff * shape_efficiency(m, n, dev.sm_count))
    t_memory = ((m * k + k * n) * dev.in_bytes + m * n * 2.0) / dev.hbm_Bps
    return max(t_compute, t_memory, dev.kernel_min_s)


def gemm_fwd_time(dev: Device, g: Gemm) -> float:
    """Forward seconds of one GEMM entry (all ``count`` instances)."""
    return gemm_time(dev, g.m, g.n, g.k) * g.count


def gemm_pass_times(dev: Device, g: Gemm, frozen: bool = False) -> tuple[float, float, float]:
    """(forward, data-gradient, weight-gradient) seconds for ``g`` (all ``count`` instances).

    Forward (m,n,k); dgrad (m,k,n); wgrad (k,n,m): same FLOPs, different shapes. Frozen
    weights (LoRA's base model) need no weight gradient.
    """
    c = g.count
    fwd = gemm_time(dev, g.m, g.n, g.k) * c
    dgrad = gemm_time(dev, g.m, g.k, g.n) * c
    wgrad = 0.0 if (frozen or g.frozen_weights) else gemm_time(dev, g.k, g.n, g.m) * c
    return fwd, dgrad, wgrad


def attention_times(dev: Device, sl: SubLayer) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core of one sub-layer."""
    if sl.attn_flops <= 0:
        return 0.0, 0.0
    if dev.flash:
        ramp = sl.attn_kv_len / (sl.attn_kv_len + _ATTN_HALF_KV)
        fwd = sl.attn_flops / (dev.attn_peak_flops * dev.attn_fwd_eff * ramp)
        bwd = ATTN_BWD_FLOP_RATIO * sl.attn_flops / (dev.attn_peak_flops * dev.attn_bwd_eff * ramp)
        return fwd, bwd
    # Unfused: the full (unmasked) score matrix as batched GEMMs, plus softmax traffic.
    t_gemm = sl.attn_flops_dense / (dev.attn_peak_flops * dev.gemm_eff * 0.8)
    t_mem = sl.attn_scores * _UNFUSED_SCORE_BYTES / dev.hbm_Bps
    return t_gemm + t_mem, 2.0 * (t_gemm + t_mem)


def sublayer_times(dev: Device, sl: SubLayer, frozen: bool = False) -> tuple[float, float, float, float]:
    """(forward, backward, attention-core forward, attention-core backward) seconds of one sub-layer."""
    fwd = bwd = 0.0
    cast = 0.0
    for g in sl.gemms:
        f, dg, wg = gemm_pass_times(dev, g, frozen)
        fwd += f
        bwd += dg + wg
        if dev.fp8_casts:
            cast += 3.0 * g.m * g.k * g.count  # cast each activation input: read bf16, write fp8
    a_fwd, a_bwd = attention_times(dev, sl)
    if sl.ssm_flops:
        a_fwd += sl.ssm_flops / (dev.attn_peak_flops * dev.attn_fwd_eff)
        a_bwd += 2.0 * sl.ssm_flops / (dev.attn_peak_flops * dev.attn_bwd_eff)
    mem_fwd = (sl.elementwise_bytes + cast) / dev.hbm_Bps
    fwd += a_fwd + mem_fwd
    bwd += a_bwd + 2.0 * mem_fwd
    return fwd, bwd, a_fwd, a_bwd
