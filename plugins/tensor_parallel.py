"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) with sequence parallelism
(Korthikanti et al. 2022) and TP-communication overlap.

Per sub-layer and micro-batch: forward one all-reduce of the b*s*h activations (with SP:
an all-gather before the column-parallel GEMM and a reduce-scatter after the row-parallel
one, the same bytes); backward the same again; full recomputation repeats the forward.
With overlap (Transformer Engine userbuffers), each GEMM is split into tp chunks whose
communication runs under the neighbouring chunk's compute: the first chunk's transfer is
exposed, the rest hides behind GEMM time (Wang et al. 2022, "Overlap Communication with
Dependent Computation via Decomposition"; NVIDIA TE comm-gemm overlap). The overlap
needs NVLink peer access, so a TP group spanning NVLink domains is fully exposed.
"""

from __future__ import annotations

from typing import Any

from twin.api import ACT_BYTES, EvalContext, Strategy, Terms, bus_factor, hookimpl, ops


class TensorParallel(Strategy):
    """Megatron tensor + sequence parallelism inside each layer."""

    name = "tensor"
    dimension = "tp"
    phase = "microbatch"
    # Blocking collectives between the layer's kernels (one after another on a GPU).
    overlapped = False
    # Its terms do not depend on the micro-batch count or the interleaving depth.
    reads_schedule = False
    summary = "Tensor parallel (+ sequence parallel, TP-comm overlap): per-layer AR or AG+RS of activations"

    def active(self, ctx: EvalContext) -> Any:
        return ctx.plan.tp > 1

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan, w, stage = ctx.plan, ctx.workload, ctx.stage
        tp, sp = plan.tp, plan.sp
        size = w.tokens * ctx.model.hidden * ACT_BYTES
        per_collective: Any = 0.0
        algo: Any = None
        if ops.any_(sp):
            ag = ctx.cost("all_gather", size, "tp")
            rs = ctx.cost("reduce_scatter", size, "tp")
            per_collective, algo = ag.time_s + rs.time_s, ag.algorithm
        if not ops.all_(sp):
            ar = ctx.cost("all_reduce", size, "tp")
            per_collective, algo = ops.where(sp, per_collective, ar.time_s), ops.where(sp, algo, ar.algorithm)
        sublayers = stage.layers * sum(w.counts.values()) / w.layers
        passes = 2.0 + ops.where(plan.recompute == "full", 1.0, 0.0)
        # + the vocab-parallel embedding's all-reduce, forward and backward
        comm = per_collective * (sublayers * passes + 2.0)
        # Userbuffer comm-GEMM overlap moves data with NVLink peer copies: a TP group that
        # leaves the NVLink domain (TE's tp_comm_overlap is intra-domain only) gets none.
        overlap = ops.logical_and(ctx.tp_overlap, ctx.spans["tp"].m == 1)
        gemm_window = stage.gemm_fwd_s * stage.layers * passes * 1.0
        exposed = ops.where(overlap, comm / tp + ops.maximum(0.0, comm * (1.0 - 1.0 / tp) - gemm_window), comm)
        nbytes = size * bus_factor("all_reduce", tp) * (sublayers * passes + 2.0)
        return Terms(exposed_per_microbatch_s=exposed, issued_per_microbatch_s=comm, bytes_per_microbatch=nbytes,
                     algorithm=algo, details={} if ctx.batch else {"per_microbatch_s": comm, "overlap": overlap})


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register tensor parallelism."""
    return [TensorParallel()]
