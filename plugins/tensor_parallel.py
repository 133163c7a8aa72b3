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

from twin.core.api import Contribution, EvalContext, Strategy
from twin.core.collectives import bus_factor
from twin.core.workload import ACT_BYTES
from twin.hookimpl import hookimpl


class TensorParallel(Strategy):
    """Megatron tensor + sequence parallelism inside each layer."""

    name = "tensor"
    phase = "microbatch"
    summary = "Tensor parallel (+ sequence parallel, TP-comm overlap): per-layer AR or AG+RS of activations"

    def active(self, ctx: EvalContext) -> bool:
        return ctx.plan.tp > 1

    def evaluate(self, ctx: EvalContext) -> Contribution:
        plan, w, stage = ctx.plan, ctx.workload, ctx.stage
        tp = plan.tp
        size = w.tokens * ctx.model.hidden * ACT_BYTES
        if plan.sp:
            ag = ctx.cost("all_gather", size, "tp")
            rs = ctx.cost("reduce_scatter", size, "tp")
            per_collective = ag.time_s + rs.time_s
            algo = ag.algorithm
        else:
            ar = ctx.cost("all_reduce", size, "tp")
            per_collective = ar.time_s
            algo = ar.algorithm
        sublayers = stage.layers * sum(w.counts.values()) / w.layers
        passes = 2.0 + (1.0 if plan.recompute == "full" else 0.0)
        # + the vocab-parallel embedding's all-reduce, forward and backward
        comm = per_collective * (sublayers * passes + 2.0)
        # Userbuffer comm-GEMM overlap moves data with NVLink peer copies: a TP group that
        # leaves the NVLink domain (TE's tp_comm_overlap is intra-domain only) gets none.
        overlap = ctx.tp_overlap and ctx.spans["tp"].m == 1
        if overlap:
            gemm_window = stage.gemm_fwd_s * stage.layers * passes * 1.0
            exposed = comm / tp + max(0.0, comm * (1.0 - 1.0 / tp) - gemm_window)
        else:
            exposed = comm
        nbytes = size * bus_factor("all_reduce", tp) * (sublayers * passes + 2.0) * ctx.microbatches
        return Contribution(dimension="tp", exposed_per_microbatch_s=exposed,
                            comm_per_step_s=comm * ctx.microbatches, bytes_per_step=nbytes,
                            details={"algorithm": algo, "per_microbatch_s": comm, "overlap": overlap})


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register tensor parallelism."""
    return [TensorParallel()]
