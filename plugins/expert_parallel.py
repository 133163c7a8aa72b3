"""Expert parallelism for MoE layers (GShard, Lepikhin et al. 2020; Megatron-Core
all-to-all token dispatcher; DeepEP).

Each MoE sub-layer dispatches every token to its top-k experts and combines the results:
two all-to-alls of tokens*top_k*hidden in the forward pass and two in the backward pass.
Where the expert group fits the NVLink domain the all-to-all runs over NVLink, otherwise
its off-domain share crosses the scale-out NICs (the placement decides; topology.py).
With the DeepEP dispatcher a token crosses the network once per destination domain.
Exposed unless the plan overlaps it with another micro-batch (DualPipe-style).
"""

from __future__ import annotations

from typing import Any

from twin.api import (
    ACT_BYTES,
    EvalContext,
    Strategy,
    Terms,
    bus_factor,
    dedup_dispatch_cost,
    dispatch_fanout,
    hookimpl,
    ops,
    recompute_module,
)

# Share of expert all-to-all that DualPipe-style overlap hides (DeepSeek-V3 report §3.2.1:
# "computation-communication overlap ... nearly full"); the rest is pipeline edges.
EP_OVERLAP_HIDDEN = 0.9


class ExpertParallel(Strategy):
    """All-to-all token dispatch and combine across the expert-parallel group."""

    name = "expert"
    dimension = "ep"
    phase = "microbatch"
    traffic = (("ep", "a2a"),)
    # Dispatch and combine block the layer's compute (one after another on a GPU).
    overlapped = False
    # Its terms do not depend on the micro-batch count or the interleaving depth.
    reads_schedule = False
    summary = "Expert parallel (MoE): all-to-all dispatch/combine per MoE layer, NVLink or NICs by placement"

    def active(self, ctx: EvalContext) -> Any:
        return ops.logical_and(ctx.plan.ep > 1, "moe" in ctx.workload.counts)

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan, model, w, stage = ctx.plan, ctx.model, ctx.workload, ctx.stage
        moe = model.moe
        assert moe is not None
        # The all-to-all ends when the busiest rank has received its copies (MoE.busiest_load:
        # the load imbalance, capped at a capacity, or the padded capacity buffers Megatron-Core
        # sends with drop_and_pad); balanced and dropping, only the kept copies travel.
        tokens = ops.where(plan.sp, w.tokens / plan.tp, w.tokens) * moe.busiest_load
        # Latent MoE (Nemotron-H/V3) routes tokens after projecting them to latent_size.
        token_bytes = (moe.latent_size or model.hidden) * ACT_BYTES
        size = tokens * moe.top_k * token_bytes
        deepep = plan.moe_dispatcher == "deepep"
        t: Any = 0.0
        busbw: Any = 0.0
        algo: Any = None
        if ops.any_(deepep):
            a2a = dedup_dispatch_cost(token_bytes, tokens, moe.top_k, ctx.spans["ep"], ctx.hierarchy,
                                      experts=moe.experts, routing=moe.routing)
            t, busbw, algo = a2a.time_s, a2a.busbw_Bps, a2a.algorithm
        if not ops.all_(deepep):
            a2a = ctx.cost("all_to_all", size, "ep")
            t, busbw = ops.where(deepep, t, a2a.time_s), ops.where(deepep, busbw, a2a.busbw_Bps)
            algo = ops.where(deepep, algo, a2a.algorithm)
        moe_layers = stage.layers * w.counts["moe"] / w.layers
        # Dispatch and combine forward and backward; recomputing the layer's forward (full
        # recomputation, or selective module moe, which checkpoints the whole MoE layer with its
        # dispatcher: Megatron-Core MoELayer) sends both once more.
        passes = 4.0 + ops.where(ops.logical_or(plan.recompute == "full", recompute_module(plan, "moe")), 2.0, 0.0)
        comm = t * moe_layers * passes
        exposed = ops.where(plan.overlap.ep_comm, comm * (1.0 - EP_OVERLAP_HIDDEN), comm)
        if ops.any_(deepep):
            # DeepEP sends a token once per destination rank (twin.core.moe_routing), not per expert.
            per_rank = dispatch_fanout(moe.experts, moe.top_k, ctx.spans["ep"].n, ctx.spans["ep"].k, moe.routing)[0]
            size = ops.where(deepep, tokens * per_rank * token_bytes, size)
        nbytes = size * bus_factor("all_to_all", plan.ep) * moe_layers * passes
        details = {} if ctx.batch else {"busbw_GBps": busbw / 1e9,
                                        "over": "nvlink" if ctx.spans["ep"].m == 1 else "scale-out"}
        return Terms(exposed_per_microbatch_s=exposed, issued_per_microbatch_s=comm, bytes_per_microbatch=nbytes,
                     algorithm=algo, details=details)


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register expert parallelism."""
    return [ExpertParallel()]
