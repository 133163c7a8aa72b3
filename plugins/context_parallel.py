"""Context parallelism (ring attention: Liu et al. 2023; Megatron-Core CP).

The sequence is split over cp ranks (load-balanced into 2*cp chunks). In every attention
sub-layer each rank passes its key/value block around the ring cp-1 times in the forward
pass; the backward pass moves keys/values and their gradients (2x). Each transfer
overlaps with the attention of the block already present, so only the excess of a
transfer over one block's attention is exposed.
"""

from __future__ import annotations

from typing import Any

from twin.api import ACT_BYTES, EvalContext, Strategy, Terms, hookimpl, ops


class ContextParallel(Strategy):
    """Ring-attention context parallelism."""

    name = "context"
    dimension = "cp"
    phase = "microbatch"
    # Its terms do not depend on the micro-batch count or the interleaving depth.
    reads_schedule = False
    summary = "Context parallel (ring attention): K/V blocks circulate cp-1 times per layer, overlapped"

    def active(self, ctx: EvalContext) -> Any:
        return ops.logical_and(ctx.plan.cp > 1, "attention" in ctx.workload.counts)

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan, model, w, stage = ctx.plan, ctx.model, ctx.workload, ctx.stage
        cp = plan.cp
        if model.attention == "mla" and model.mla is not None:
            kv_dim = model.heads / plan.tp * (model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
                                              + model.mla.v_head_dim)
        else:
            kv_dim = 2.0 * ops.maximum(1.0, model.kv_head_count / plan.tp) * model.head_size
        kv_bytes = w.tokens * kv_dim * ACT_BYTES
        fwd_step = ctx.cost("send_recv", kv_bytes, "cp")
        bwd_step = ctx.cost("send_recv", 2.0 * kv_bytes, "cp")
        attn_layers = stage.layers * w.counts["attention"] / w.layers
        attn_f = stage.attn_fwd_s / ops.maximum(attn_layers, 1e-9)   # per attention sub-layer
        attn_b = stage.attn_bwd_s / ops.maximum(attn_layers, 1e-9)
        steps = cp - 1
        passes_f = 1.0 + ops.where(plan.recompute == "full", 1.0, 0.0)
        exposed = attn_layers * steps * (passes_f * ops.maximum(0.0, fwd_step.time_s - attn_f / cp)
                                         + ops.maximum(0.0, bwd_step.time_s - attn_b / cp))
        comm = attn_layers * steps * (passes_f * fwd_step.time_s + bwd_step.time_s)
        nbytes = attn_layers * steps * (passes_f + 2.0) * kv_bytes
        details = {} if ctx.batch else {"kv_block_bytes": kv_bytes}
        return Terms(exposed_per_microbatch_s=exposed, issued_per_microbatch_s=comm, bytes_per_microbatch=nbytes,
                     algorithm="ring", details=details)


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register context parallelism."""
    return [ContextParallel()]
