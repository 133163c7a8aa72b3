"""The host (the framework stack, :class:`~twin.core.training_specs.Software`): how long the host
takes to issue a layer pass, and what a layer pass costs when host and device both work on it.

The host issues kernels asynchronously: a layer pass costs the larger of its device time and the
host time to issue it (kernels x host cost per kernel, or one graph replay per captured sub-layer)
while the host can queue work ahead of the device. Two things of MoE layers change that:

- **Expert GEMMs launched one per local expert.** Transformer Engine's ``GroupedLinear`` runs its
  grouped GEMM as one cuBLAS(Lt) GEMM per expert on several streams (NVIDIA/TransformerEngine PR
  #853, "Grouped GEMM via multi-stream cuBLAS"; issue #1386: no batched/grouped cuBLAS call), and
  the ``grouped_gemm`` package behind Megatron-Core's legacy ``GroupedMLP`` and NeMo AutoModel's
  default ``gmm`` experts loops ``cublasGemmEx`` over the experts on Hopper
  (fanshiqing/grouped_gemm csrc/grouped_gemm.cu: "Use cuBLAS for SM90 until CUTLASS supports
  SM90-optimized grouped-gemm"; the weight gradient loops the same way). So the host issues
  ``Software.expert_fwd_ops`` / ``expert_bwd_ops`` launches per local expert and pass (fc1 and fc2
  forward; their data and weight gradients backward); a single-kernel grouped GEMM
  (``torch._grouped_mm``, CUTLASS) issues none per expert. NVIDIA's DeepSeek-V3 GB200 log names
  the consequence: a larger EP "can reduce the number of local experts, thereby reducing
  quantization and other overheads" (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization,
  §3.1).
- **The dropless dispatcher's device-to-host sync.** A dropless MoE layer needs the tokens per
  expert on the host before its all-to-all (Megatron-Core ``MoEAlltoAllTokenDispatcher.preprocess``:
  "A synchronization is needed before expert parallel AlltoAll communication to get the
  `input_splits` and `output_splits` CPU values", ``cuda_sync_point = "before_ep_alltoall"``; none
  when padded to capacity, whose sizes are static), DeepEP's normal-mode dispatch waits on the CPU
  for the received counts, and ``grouped_gemm`` takes the batch sizes on the CPU. The DeepSeek-V3
  GB200 log (§2.3, §3.1) keeps the routed experts out of CUDA graphs for it ("the device-host
  sync in the MoE model (its purpose is to get the tokens per expert information)"). At the sync
  the device drains and the host has no lead: the kernels the host issues after it, up to the
  next sync, start from an empty queue. Taking a layer's forward pass as two blocks in issue
  order, the MoE layer's post-sync part (host time H1, device D1) then the rest up to the next
  layer's sync (H2, D2), each block's kernels running as soon as they are issued, the pass ends
  at max(H1 + H2, H1 + D2, D1 + D2) (a two-stage flow shop, host then device, in one order;
  Johnson 1954): the post-sync host time is serialised ahead of the rest's device time where
  it exceeds its own device time. The forward and a recomputed forward sync; the backward
  reuses the forward's split sizes (no sync), so it keeps max(device, host).

Written once for one scenario and for a batch (``twin.core.ops``): the local experts may be a
batch's column.
"""

from __future__ import annotations

from typing import Any

from twin.core import ops
from twin.core.training_specs import Software
from twin.core.workload import Workload


def _expert_launches(sw: Software, w: Workload) -> tuple[Any, Any]:
    """(forward, backward) expert-GEMM launches per MoE sub-layer pass (0, 0 without MoE)."""
    sl = w.sublayers.get("moe")
    if sl is None or not (sw.expert_fwd_ops or sw.expert_bwd_ops):
        return 0.0, 0.0
    return sw.expert_fwd_ops * sl.local_experts, sw.expert_bwd_ops * sl.local_experts


def host_layer_s(sw: Software, w: Workload) -> tuple[Any, Any]:
    """(forward, backward) host seconds to issue one mean layer of ``w`` on ``sw``.

    Each sub-layer costs its kernels x the host cost per kernel, or one graph replay when the
    stack captures that kind in a CUDA graph; an MoE sub-layer adds its expert-GEMM launches
    per local expert (module docstring).
    """
    local = w.sublayers["moe"].local_experts if "moe" in w.sublayers else 0.0
    key = None if ops.is_batch(local) else (sw, tuple(w.counts.items()), w.layers, local)
    hit = _HOST_LAYER.get(key) if key is not None else None
    if hit is not None:
        return hit
    fwd: Any = 0.0
    bwd: Any = 0.0
    for kind, count in w.counts.items():
        if sw.cuda_graphs and kind in sw.graphed:
            f: Any = sw.graph_launch_us
            b: Any = sw.graph_launch_us
        else:
            f, b = sw.fwd_ops(kind) * sw.dispatch_us, sw.bwd_ops(kind) * sw.dispatch_us
            if kind == "moe":
                e_f, e_b = _expert_launches(sw, w)
                f, b = f + e_f * sw.dispatch_us, b + e_b * sw.dispatch_us
        fwd = fwd + f * count
        bwd = bwd + b * count
    got = (fwd / w.layers * 1e-6, bwd / w.layers * 1e-6)
    if key is not None:
        if len(_HOST_LAYER) > 4096:
            _HOST_LAYER.clear()
        _HOST_LAYER[key] = got
    return got


# host_layer_s by (stack, sub-layer counts, layers, local experts): one scenario asks it on every evaluation.
_HOST_LAYER: dict[Any, tuple[Any, Any]] = {}


def post_sync_host_s(sw: Software, w: Workload) -> Any:
    """Host seconds per mean layer's forward issued after the MoE dispatcher's device-to-host
    sync (its post-sync kernels and expert-GEMM launches); 0 where nothing syncs: no MoE layer,
    a stack without the sync, or an MoE padded to capacity (static sizes).
    """
    sl = w.sublayers.get("moe")
    if sl is None or not sw.moe_host_sync or not sl.host_sync:
        return 0.0
    e_f, _ = _expert_launches(sw, w)
    return (sw.moe_post_sync_ops + e_f) * sw.dispatch_us * 1e-6 * w.counts["moe"] / w.layers


def layer_pass_s(sw: Software, w: Workload, dev_fwd: Any, dev_bwd: Any, moe_dev_fwd: Any) -> tuple[Any, Any]:
    """(forward, backward) seconds of one mean layer pass: ``dev_fwd`` / ``dev_bwd`` the device
    time of a mean layer, ``moe_dev_fwd`` the MoE sub-layers' share of ``dev_fwd``.

    Backward: max(device, host). Forward: max(host, device, post-sync host + the rest's device)
    (module docstring), which is max(device, host) where nothing syncs.
    """
    host_f, host_b = host_layer_s(sw, w)
    t_f = ops.maximum(dev_fwd, host_f)
    post = post_sync_host_s(sw, w)
    if ops.any_(post):
        t_f = ops.maximum(t_f, post + dev_fwd - moe_dev_fwd)
    return t_f, ops.maximum(dev_bwd, host_b)
