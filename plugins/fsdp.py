"""Fully sharded data parallelism: ZeRO-3 (Rajbhandari et al. 2020) and PyTorch FSDP
(Zhao et al. VLDB 2023) with resharding after forward.

Every micro-batch all-gathers each layer's weights before its forward and again before
its backward (resharded in between) and reduce-scatters its gradients after backward.
Gathers are prefetched one layer ahead, so communication hides behind layer compute
except the first layer's gather and any excess of communication over compute.
"""

from __future__ import annotations

from twin_plugins.data_parallel import per_microbatch_sharding

from twin.core.api import Contribution, EvalContext, Strategy
from twin.core.collectives import bus_factor
from twin.core.memory import lora_trainable_fraction
from twin.hookimpl import hookimpl

# Compute that prefetched communication can hide behind (FSDP's rate limiter and the
# copy-out of gathered weights keep it from being perfect).
PREFETCH_EFFICIENCY = 0.9


class FullySharded(Strategy):
    """ZeRO-3 / FSDP per-micro-batch parameter gathers and gradient reduce-scatters."""

    name = "fsdp"
    phase = "microbatch"
    summary = "ZeRO-3 / FSDP: per-layer weight all-gather (fwd + bwd) and grad reduce-scatter, prefetched"

    def active(self, ctx: EvalContext) -> bool:
        return ctx.dp * ctx.plan.cp > 1 and per_microbatch_sharding(ctx)

    def evaluate(self, ctx: EvalContext) -> Contribution:
        plan, stage = ctx.plan, ctx.stage
        grad_bytes = 4.0 if plan.grad_reduce_dtype == "fp32" else 2.0
        issued = exposed = nbytes = 0.0
        algo = "none"
        for dim, params in (("dp", ctx.params_per_gpu - ctx.expert_params_per_gpu),
                            ("edp", ctx.expert_params_per_gpu)):
            n = ctx.spans[dim].n
            if n <= 1 or params <= 0:
                continue
            grads = params * (lora_trainable_fraction(ctx.model, plan) if plan.trainable == "lora" else 1.0)
            ag = ctx.cost("all_gather", params * 2.0, dim)
            rs = ctx.cost("reduce_scatter", grads * grad_bytes, dim)
            comm = 2.0 * ag.time_s + rs.time_s
            first_layer = ag.time_s / max(stage.layers, 1.0)
            exposed += first_layer + max(0.0, comm - PREFETCH_EFFICIENCY * stage.total_s)
            issued += comm
            nbytes += (2.0 * params * 2.0 + grads * grad_bytes) * bus_factor("all_gather", n)
            algo = ag.algorithm
        return Contribution(dimension="dp", exposed_per_microbatch_s=exposed,
                            comm_per_step_s=issued * ctx.microbatches, bytes_per_step=nbytes * ctx.microbatches,
                            details={"algorithm": algo, "sharding": plan.optimizer_sharding})


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register ZeRO-3 / FSDP."""
    return [FullySharded()]
