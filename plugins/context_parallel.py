"""Context parallelism (ring attention: Liu et al. 2023; Megatron-Core CP).

The sequence is split over cp ranks (load-balanced into 2*cp chunks). How the ranks
exchange keys and values is ``plan.cp_comm_type`` (Megatron-Core ``--cp-comm-type``):

- "p2p" (ring attention, the default): in every attention sub-layer each rank passes its
  key/value block around the ring cp-1 times in the forward pass; the backward pass moves
  keys/values and their gradients (2x). Each transfer overlaps with the attention of the
  block already present, so only the excess of a transfer over one block's attention is
  exposed.
- "all_gather" (Llama 3 paper §3.3.2): each rank all-gathers the whole sequence's keys and
  values before its attention ("the all-gather communication latency is exposed in the
  critical path"); backward gathers them again and reduce-scatters their gradients to their
  owners, all on the critical path. The gathered K/V are not kept between the passes: Llama
  3's 128K stage ran an interleaved pipeline that keeping them (cp-1 more K/V per token and
  layer) would not have let fit.
- "a2a" (DeepSpeed-Ulysses, Jacobs et al. 2023 §3): all-to-alls of Q, K and V before
  attention, so each rank attends over the whole sequence for heads/cp of its heads, and
  of the output after; backward mirrors them. All-to-alls between the layer's kernels:
  exposed.

The link-sharing model (``twin.core.contention``) counts this strategy's traffic as in flight
through its window, as the ring's is, whichever exchange a plan uses.
"""

from __future__ import annotations

from typing import Any

from twin.api import ACT_BYTES, EvalContext, Strategy, Terms, bus_factor, hookimpl, ops


class ContextParallel(Strategy):
    """Ring-attention context parallelism."""

    name = "context"
    dimension = "cp"
    phase = "microbatch"
    # Its terms do not depend on the micro-batch count or the interleaving depth.
    reads_schedule = False
    summary = ("Context parallel: ring attention (K/V blocks circulate cp-1 times per layer, overlapped), "
               "K/V all-gather or Ulysses all-to-all (exposed)")

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
        attn_layers = stage.layers * w.counts["attention"] / w.layers
        passes_f = 1.0 + ops.where(plan.recompute == "full", 1.0, 0.0)
        kind = plan.cp_comm_type
        exposed: Any = 0.0
        comm: Any = 0.0
        nbytes: Any = 0.0
        algo: Any = "ring"
        ring = kind == "p2p"
        if ops.any_(ring):
            fwd_step = ctx.cost("send_recv", kv_bytes, "cp")
            bwd_step = ctx.cost("send_recv", 2.0 * kv_bytes, "cp")
            attn_f = stage.attn_fwd_s / ops.maximum(attn_layers, 1e-9)   # per attention sub-layer
            attn_b = stage.attn_bwd_s / ops.maximum(attn_layers, 1e-9)
            steps = cp - 1
            exposed = attn_layers * steps * (passes_f * ops.maximum(0.0, fwd_step.time_s - attn_f / cp)
                                             + ops.maximum(0.0, bwd_step.time_s - attn_b / cp))
            comm = attn_layers * steps * (passes_f * fwd_step.time_s + bwd_step.time_s)
            nbytes = attn_layers * steps * (passes_f + 2.0) * kv_bytes
        gather = kind == "all_gather"
        if ops.any_(gather):
            # The whole sequence's K/V gathered (an all-gather's size is its output) in each
            # forward and again in backward, their gradients reduce-scattered back: all exposed.
            ag = ctx.cost("all_gather", kv_bytes * cp, "cp")
            rs = ctx.cost("reduce_scatter", kv_bytes * cp, "cp")
            t = attn_layers * ((passes_f + 1.0) * ag.time_s + rs.time_s)
            sent = attn_layers * (passes_f + 2.0) * kv_bytes * cp * bus_factor("all_gather", cp)
            exposed, comm = ops.where(gather, t, exposed), ops.where(gather, t, comm)
            nbytes, algo = ops.where(gather, sent, nbytes), ops.where(gather, ag.algorithm, algo)
        ulysses = kind == "a2a"
        if ops.any_(ulysses):
            # Q, K and V in, the output out (forward); their gradients the other way (backward).
            q_bytes = w.tokens * model.heads / plan.tp * model.head_size * ACT_BYTES
            qkv = ctx.cost("all_to_all", q_bytes + kv_bytes, "cp")
            out = ctx.cost("all_to_all", q_bytes, "cp")
            t = attn_layers * (passes_f + 1.0) * (qkv.time_s + out.time_s)
            sent = attn_layers * (passes_f + 1.0) * (2.0 * q_bytes + kv_bytes) * bus_factor("all_to_all", cp)
            exposed, comm = ops.where(ulysses, t, exposed), ops.where(ulysses, t, comm)
            nbytes, algo = ops.where(ulysses, sent, nbytes), ops.where(ulysses, qkv.algorithm, algo)
        details = {} if ctx.batch else {"kv_block_bytes": kv_bytes, "comm_type": kind}
        return Terms(exposed_per_microbatch_s=exposed, issued_per_microbatch_s=comm, bytes_per_microbatch=nbytes,
                     algorithm=algo, details=details)


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register context parallelism."""
    return [ContextParallel()]
