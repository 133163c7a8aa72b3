"""Memory tiers outside HBM and the traffic offloading sends over them: pure functions.

Two tiers, each as one GPU sees it (:class:`MemoryTiers`): host DRAM behind the GPU's host link
(PCIe x16 on x86 hosts, NVLink-C2C on Grace; ``plugins/host_memory.py``) and a CXL memory pool
(``plugins/cxl.py``), which hangs off the host and is reached over that same link, so its path
is the slower of the pool's share and the link, and its latency the link's round trip with the
pool's load-to-use latency in place of local DRAM's (``path_to_pool``). ``plan.offload.<what>:
host`` uses the host tier, ``cxl`` the pool, whether or not the other exists.

Access patterns (what a transfer costs, :func:`transfer_s`): every copy pays the path's round
trip once (a copy engine starts the next copy of its stream when this one has landed), then
its bytes at the path's rate: latency-bound for small copies, bandwidth-bound for large ones
(the alpha-beta model, Hockney 1994). Writes to the tier (device to host) are PCIe posted
writes, which wait for no completion; reads (host to device) are non-posted requests, of which
a requester keeps a bounded number outstanding, so a read stream runs at no more than that
window over the round trip (Little's law): at the 250 ns of a CXL 2.0 device the window is
never the limit, at tens of microseconds it is.

Overlap (:func:`offload_terms`), as Transformer Engine's CPU offloading schedules it (Megatron-
Core ``--cpu-offloading``, TE ``get_cpu_offload_context``, ``cpu_offload_v1.py``): the saved
activations of a layer are copied out on a device-to-host stream while the following layers'
forward runs, and copied back on a host-to-device stream while the later layers' backward runs;
the compute stream waits for a layer group's copy at the end of its window, so a copy the
window cannot hide stalls that pass. TE offloads at most all layers but the last
(``num_layers`` < the model's layers), and the first layer's copy starts after its forward, so
the window of a pass is the compute of all its layers but one. The two directions of the link
run at once (PCIe and C2C are full duplex), so a pass is held up by the slower direction only.
The stall is paid by every micro-batch of the bottleneck stage (``exposed_per_microbatch_s``),
so with a pipeline it also lengthens the fill and drain. Parameters are fetched for the forward
and again for the backward, prefetched one layer ahead (ZeRO-Infinity, Rajbhandari et al. SC'21,
§6: overlap-centric design); an offloaded optimizer step streams its state in and out once a
step with nothing to hide behind (ZeRO-Offload, Ren et al. ATC'21, §4: the step sits between
backward and the next forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twin.core import ops
from twin.core.interfaces import EvalContext, Terms
from twin.core.memory import ADAM_STATE_BYTES

# The reads a PCIe requester may keep outstanding: 768 non-posted requests with 10-bit tags
# (PCIe 4.0 base specification, 10-Bit Tag Requester; Intel R-Tile PCIe IP user guide §4.4.1.5:
# "up to 768 outstanding Non-Posted Requests"), each of a 512-byte Max_Read_Request_Size (the
# usual setting; the specification allows 128 B to 4 KiB). An upper bound on what a GPU's copy
# engine keeps in flight: no GPU measurement of it is in validation/reference.
READ_WINDOW_BYTES = 768 * 512
# Load-to-use latency of local DRAM, which the host link's round trip already includes and a CXL
# pool's own latency replaces (Sun et al., MICRO 2023, "Demystifying CXL Memory with Genuine
# CXL-Ready Systems and Devices": ~100 ns local DDR5 against 170-250 ns for CXL memory).
LOCAL_DRAM_LATENCY_S = 100e-9
# Tensors a layer saves for its backward, one copy each (TE's ``bulk_offload_group`` copies the
# saved tensors of a layer one by one): the tensors ``memory.activation_bytes_per_token_layer``
# counts. Attention: norm input, norm output (QKV input), q, k, v, core output (proj input);
# MLP: norm input, norm output, fc1 output, activation output; MoE: norm input, norm output,
# the routed tokens, fc1 output, activation output; Mamba: norm input, in_proj input, in_proj
# output, scan output. A fully recomputed layer saves its input only.
SAVED_TENSORS = {"attention": 6, "mlp": 4, "moe": 5, "mamba": 4}
# Weight tensors of a sub-layer (one copy each when fetched): attention norm, QKV, proj; MLP
# norm, fc1, fc2; Mamba norm, in_proj, conv1d, out_proj; an MoE layer's norm and router, plus
# fc1 and fc2 per local expert (TE GroupedLinear keeps a weight per expert).
WEIGHT_TENSORS = {"attention": 3, "mlp": 3, "mamba": 4}
MOE_SHARED_TENSORS, MOE_TENSORS_PER_EXPERT = 2, 2
# 16-bit weights fetched per parameter for a pass.
PARAM_FETCH_BYTES = 2.0
# The optimizer state streamed in and out per parameter when it lives off HBM: the fp32 master
# weight, Adam's m and v (ZeRO §3.1, K = 12) read, updated and written back; the gradient and the
# 16-bit weight it updates stay in HBM (only the optimizer state is offloaded:
# ``memory.memory_per_gpu``). Megatron's distributed optimizer keeps each as a flat shard: three
# large copies a direction (streaming, bandwidth-bound).
OPTIMIZER_STATE_BYTES = ADAM_STATE_BYTES
OPTIMIZER_COPIES = 3


@dataclass(frozen=True, slots=True)
class TierPath:
    """One memory tier as one GPU reaches it (numbers, or arrays for a batch; 0 bandwidth: none).

    ``bw_Bps``: sustained bytes per second per direction over the whole path; ``latency_s``:
    one access's round trip over it; ``capacity_bytes``: what this GPU may keep there.
    """

    bw_Bps: Any
    latency_s: Any
    capacity_bytes: Any


@dataclass(frozen=True, slots=True)
class MemoryTiers:
    """The tiers outside HBM: host DRAM (``offload: host``) and the CXL pool (``offload: cxl``)."""

    host: TierPath
    pool: TierPath


NO_TIERS = MemoryTiers(TierPath(0.0, 0.0, 0.0), TierPath(0.0, 0.0, 0.0))


def path_to_pool(pool_bw: float, pool_latency: float, pool_capacity: float, host: TierPath) -> TierPath:
    """The pool as a GPU reaches it, through its host link (``host``; 0 bandwidth: not published,
    then the pool's own figures): the slower of the two, and the link's round trip with the
    pool's latency in place of local DRAM's (``LOCAL_DRAM_LATENCY_S``).
    """
    if host.bw_Bps <= 0:
        return TierPath(pool_bw, pool_latency, pool_capacity)
    return TierPath(min(pool_bw, host.bw_Bps), max(0.0, host.latency_s - LOCAL_DRAM_LATENCY_S) + pool_latency,
                    pool_capacity)


def tier_of(tiers: MemoryTiers, target: Any) -> tuple[Any, Any]:
    """(bandwidth, latency) of the tier ``target`` names ("cxl": the pool, else host)."""
    pool = target == "cxl"
    return ops.where(pool, tiers.pool.bw_Bps, tiers.host.bw_Bps), ops.where(pool, tiers.pool.latency_s,
                                                                           tiers.host.latency_s)


def read_rate(bw: Any, latency: Any) -> Any:
    """A read stream's rate: the path's bandwidth, or the outstanding-read window over the round
    trip where that is less (Little's law; ``READ_WINDOW_BYTES``).
    """
    return bw / ops.maximum(1.0, bw * latency / READ_WINDOW_BYTES)


def transfer_s(nbytes: Any, copies: Any, bw: Any, latency: Any, read: bool) -> Any:
    """Seconds to move ``nbytes`` in ``copies`` copies over a path (module docstring): a round trip
    per copy, then the bytes at the bandwidth (writes) or the read rate (reads). A path of 0
    bandwidth takes its bytes at 1 B/s (a caller refuses such a target; NaN stays NaN).
    """
    bw = ops.where(bw == 0, 1.0, bw)
    rate = read_rate(bw, latency) if read else bw
    return copies * latency + nbytes / rate


def saved_tensors_per_layer(ctx: EvalContext) -> Any:
    """Copies one offloaded layer's saved activations take (``SAVED_TENSORS``, averaged over the
    model's sub-layers; 1 a sub-layer where the plan recomputes every layer in full).
    """
    w = ctx.workload
    per = sum(SAVED_TENSORS.get(kind, 4) * count for kind, count in w.counts.items()) / w.layers
    full = ctx.plan.recompute == "full"
    sublayers = sum(w.counts.values()) / w.layers
    return ops.where(full, sublayers, per)


def weight_tensors_per_layer(ctx: EvalContext) -> Any:
    """Weight tensors of a mean layer on this GPU (``WEIGHT_TENSORS``)."""
    w, model = ctx.workload, ctx.model
    total: Any = 0.0
    for kind, count in w.counts.items():
        if kind == "moe" and model.moe is not None:
            local = ops.maximum(1, model.moe.experts // ctx.plan.ep)
            total = total + (MOE_SHARED_TENSORS + MOE_TENSORS_PER_EXPERT * local) * count
        else:
            total = total + WEIGHT_TENSORS.get(kind, 3) * count
    return total / w.layers


def offload_terms(ctx: EvalContext) -> Terms:
    """The offload traffic of a plan and what of it the schedule cannot hide (module docstring).

    Per micro-batch: the activations of all layers of the stage but one written out in the
    forward and read back in the backward; parameters fetched for each pass. Per step: the
    optimizer state read and written once. Each priced on its tier (``ctx.memory_tiers``).
    """
    o, plan, stage = ctx.plan.offload, ctx.plan, ctx.stage
    tiers: MemoryTiers = ctx.memory_tiers
    layers = stage.layers
    lead = ops.maximum(layers - 1, 0) / ops.maximum(layers, 1)   # a pass's window: all layers but one
    fwd_window, bwd_window = stage.fwd_s * lead, (stage.bwd_s + stage.recompute_s) * lead
    fwd_out: Any = 0.0    # device-to-host seconds in the forward
    fwd_in: Any = 0.0     # host-to-device seconds in the forward
    bwd_in: Any = 0.0     # host-to-device seconds in the backward
    nbytes: Any = 0.0
    acts = o.activations != "none"
    if ops.any_(acts):
        bw, lat = tier_of(tiers, o.activations)
        moved = ctx.activation_bytes_per_microbatch * lead
        copies = saved_tensors_per_layer(ctx) * ops.maximum(layers - 1, 0)
        fwd_out = ops.where(acts, transfer_s(moved, copies, bw, lat, read=False), 0.0)
        bwd_in = ops.where(acts, transfer_s(moved, copies, bw, lat, read=True), 0.0)
        nbytes = ops.where(acts, 2.0 * moved, 0.0)
    params = o.params != "none"
    if ops.any_(params):
        bw, lat = tier_of(tiers, o.params)
        fetched = PARAM_FETCH_BYTES * ctx.params_per_gpu
        t = ops.where(params, transfer_s(fetched, weight_tensors_per_layer(ctx) * layers, bw, lat, read=True), 0.0)
        fwd_in, bwd_in = fwd_in + t, bwd_in + t
        nbytes = nbytes + ops.where(params, 2.0 * fetched, 0.0)
    exposed_mb = (ops.maximum(0.0, ops.maximum(fwd_out, fwd_in) - fwd_window)
                  + ops.maximum(0.0, bwd_in - bwd_window))
    per_step: Any = 0.0
    step_bytes: Any = 0.0
    optimizer = ops.logical_and(o.optimizer != "none", plan.trainable == "full")
    if ops.any_(optimizer):
        bw, lat = tier_of(tiers, o.optimizer)
        shard = ops.where(plan.optimizer_sharding != "none", ctx.dp * plan.cp, 1)
        state = ctx.params_per_gpu / shard * OPTIMIZER_STATE_BYTES
        t = ops.maximum(transfer_s(state, OPTIMIZER_COPIES, bw, lat, read=True),
                        transfer_s(state, OPTIMIZER_COPIES, bw, lat, read=False))
        per_step = ops.where(optimizer, t, 0.0)
        step_bytes = ops.where(optimizer, 2.0 * state, 0.0)
    details = {} if ctx.batch else _details(ctx, {"fwd_out_s": fwd_out, "fwd_in_s": fwd_in, "bwd_in_s": bwd_in,
                                                  "fwd_window_s": fwd_window, "bwd_window_s": bwd_window,
                                                  "optimizer_s": per_step})
    return Terms(exposed_per_microbatch_s=exposed_mb, issued_per_microbatch_s=fwd_out + fwd_in + bwd_in,
                 bytes_per_microbatch=nbytes, exposed_per_step_s=per_step, issued_per_step_s=per_step,
                 bytes_per_step=step_bytes, details=details)


def _details(ctx: EvalContext, times: dict[str, Any]) -> dict[str, Any]:
    """One scenario's offload details: each tier a target names (GB/s per direction, round trip
    in microseconds) and the transfer times of a micro-batch's passes that are not zero.
    """
    o, tiers = ctx.plan.offload, ctx.memory_tiers
    out: dict[str, Any] = {}
    for name, tier in (("host", tiers.host), ("cxl", tiers.pool)):
        if name in (o.optimizer, o.params, o.activations):
            out[f"{name}_GBps"] = tier.bw_Bps / 1e9
            out[f"{name}_latency_us"] = tier.latency_s * 1e6
    out.update({k: v for k, v in times.items() if v})
    return out
