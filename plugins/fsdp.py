"""Fully sharded data parallelism: ZeRO-3 (Rajbhandari et al. 2020) and PyTorch FSDP
(Zhao et al. VLDB 2023) with resharding after forward.

Every micro-batch all-gathers each layer's weights before its forward and again before
its backward (resharded in between) and reduce-scatters its gradients after backward.
Gathers are prefetched one layer ahead, so communication hides behind layer compute
except the first layer's gather and any excess of communication over compute. With
hybrid sharding (HSDP, ``plan.dp_shard``) gathers and reduce-scatters run within the
shard group, and each gradient shard is all-reduced across the replicas once per step.
"""

from __future__ import annotations

from typing import Any

from twin.api import EvalContext, Strategy, Terms, bus_factor, hookimpl, lora_trainable_fraction, ops, weights_sharded

# Compute that prefetched communication can hide behind (FSDP's rate limiter and the
# copy-out of gathered weights keep it from being perfect).
PREFETCH_EFFICIENCY = 0.9


class FullySharded(Strategy):
    """ZeRO-3 / FSDP per-micro-batch parameter gathers and gradient reduce-scatters."""

    name = "fsdp"
    dimension = "dp"
    phase = "microbatch"
    traffic = (("dp", "ring"), ("dpr", "ring"), ("edp", "ring"))
    # Its terms do not depend on the micro-batch count or the interleaving depth.
    reads_schedule = False
    summary = "ZeRO-3 / FSDP: per-layer weight all-gather (fwd + bwd) and grad reduce-scatter, prefetched"

    def active(self, ctx: EvalContext) -> Any:
        return ops.logical_and(ctx.dp * ctx.plan.cp > 1, weights_sharded(ctx.plan))

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan, stage = ctx.plan, ctx.stage
        grad_bytes = ops.where(plan.grad_reduce_dtype == "fp32", 4.0, 2.0)
        issued: Any = 0.0
        exposed: Any = 0.0
        nbytes: Any = 0.0
        algo: Any = "none"
        step: tuple[Any, Any, Any] = (0.0, 0.0, 0.0)
        share = ops.where(plan.trainable == "lora", lora_trainable_fraction(ctx.model, plan), 1.0)
        for dim, params in (("dp", ctx.params_per_gpu - ctx.expert_params_per_gpu),
                            ("edp", ctx.expert_params_per_gpu)):
            n = ctx.spans[dim].n
            present = ops.logical_and(n > 1, params > 0)
            if not ops.any_(present):
                continue
            grads = params * share
            ag = ctx.cost("all_gather", params * 2.0, dim)
            rs = ctx.cost("reduce_scatter", grads * grad_bytes, dim)
            comm = 2.0 * ag.time_s + rs.time_s
            first_layer = ag.time_s / ops.maximum(stage.layers, 1.0)
            exposed = ops.where(present, exposed + (first_layer + ops.maximum(
                0.0, comm - PREFETCH_EFFICIENCY * stage.total_s)), exposed)
            issued = ops.where(present, issued + comm, issued)
            sent = (2.0 * params * 2.0 + grads * grad_bytes) * bus_factor("all_gather", n)
            nbytes = ops.where(present, nbytes + sent, nbytes)
            algo = ops.where(present, ag.algorithm, algo)
            if dim == "dp":
                step = self._replicas(ctx, grads * grad_bytes / ops.maximum(n, 1), rs.time_s)
        details = {} if ctx.batch else {"sharding": plan.optimizer_sharding}
        return Terms(exposed_per_microbatch_s=exposed, issued_per_microbatch_s=issued, bytes_per_microbatch=nbytes,
                     exposed_per_step_s=step[0], issued_per_step_s=step[1], bytes_per_step=step[2],
                     algorithm=algo, details=details)

    @staticmethod
    def _replicas(ctx: EvalContext, shard_bytes: Any, rs_s: Any) -> tuple[Any, Any, Any]:
        """Hybrid sharding (HSDP): each rank's gradient shard all-reduced across the replicas once
        per step, under the last backward (which its own reduce-scatters already use), one
        layer's share always exposed (exposed s, issued s, bytes).
        """
        replicas = ctx.spans["dpr"].n
        hybrid = replicas > 1
        if not ops.any_(hybrid):
            return 0.0, 0.0, 0.0
        ar = ctx.cost("all_reduce", shard_bytes, "dpr")
        stage = ctx.stage
        exposed = ops.maximum(ar.time_s / ops.maximum(stage.layers, 1.0),
                              ar.time_s + rs_s - PREFETCH_EFFICIENCY * stage.bwd_s)
        return (ops.where(hybrid, exposed, 0.0), ops.where(hybrid, ar.time_s, 0.0),
                ops.where(hybrid, shard_bytes * bus_factor("all_reduce", replicas), 0.0))


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register ZeRO-3 / FSDP."""
    return [FullySharded()]
