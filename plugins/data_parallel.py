"""Data parallelism: gradient reduction once per step, bucketed and overlapped with the
backward pass (PyTorch DDP, Li et al. VLDB 2020; Megatron-Core DDP), and for sharded
optimizers (distributed optimizer / ZeRO-1/2, FSDP without resharding) a reduce-scatter
of gradients plus an all-gather of updated parameters overlapped with the next forward.

Exposed time: gradient reduction hides behind the last micro-batch's backward except for
the last bucket; parameter gathers hide behind the first micro-batch's forward except for
the first bucket.
"""

from __future__ import annotations

from twin.core.api import Contribution, EvalContext, Strategy
from twin.core.collectives import bus_factor
from twin.core.memory import lora_trainable_fraction
from twin.hookimpl import hookimpl

# Megatron-Core DDP bucket size: max(40M, 1M * dp) parameters (distributed_data_parallel_config).
BUCKET_PARAMS = 40e6
BUCKET_PARAMS_PER_RANK = 1e6


def per_microbatch_sharding(ctx: EvalContext) -> bool:
    """ZeRO-3 / FSDP with resharding: weights are gathered every micro-batch."""
    plan = ctx.plan
    return plan.optimizer_sharding == "zero3" or (plan.optimizer_sharding == "fsdp" and plan.fsdp_reshard_after_forward)


class DataParallel(Strategy):
    """Per-step gradient all-reduce / reduce-scatter (+ parameter all-gather)."""

    name = "data"
    phase = "step"
    summary = "Data parallel (+ distributed optimizer / ZeRO-1/2): bucketed grad reduce overlapped with backward"

    def active(self, ctx: EvalContext) -> bool:
        return ctx.dp * ctx.plan.cp > 1 and not per_microbatch_sharding(ctx)

    def _reduce(self, ctx: EvalContext, params: float, dim: str) -> tuple[float, float, float, float, str]:
        """(issued s, exposed grad-reduce s, exposed param-gather s, bytes) for one group."""
        plan, stage = ctx.plan, ctx.stage
        n = ctx.spans[dim].n
        if n <= 1 or params <= 0:
            return 0.0, 0.0, 0.0, 0.0, "none"
        grad_bytes = 4.0 if plan.grad_reduce_dtype == "fp32" else 2.0
        bucket = min(params, max(BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK * n))
        sharded = plan.optimizer_sharding != "none"
        if sharded:
            rs = ctx.cost("reduce_scatter", params * grad_bytes, dim)
            ag = ctx.cost("all_gather", params * 2.0, dim)
            rs_last = ctx.cost("reduce_scatter", bucket * grad_bytes, dim).time_s
            ag_first = ctx.cost("all_gather", bucket * 2.0, dim).time_s
            t_red, t_gather, algo = rs.time_s, ag.time_s, rs.algorithm
            nbytes = params * (grad_bytes + 2.0) * bus_factor("all_gather", n)
        else:
            ar = ctx.cost("all_reduce", params * grad_bytes, dim)
            rs_last = ctx.cost("all_reduce", bucket * grad_bytes, dim).time_s
            t_red, t_gather, ag_first, algo = ar.time_s, 0.0, 0.0, ar.algorithm
            nbytes = params * grad_bytes * bus_factor("all_reduce", n)
        if plan.overlap.grad_reduce:
            exp_red = max(t_red - stage.bwd_s, rs_last)
        else:
            exp_red = t_red
        if sharded and plan.overlap.param_gather:
            exp_gather = max(t_gather - stage.fwd_s, ag_first)
        else:
            exp_gather = t_gather
        return t_red + t_gather, exp_red, exp_gather, nbytes, algo

    def evaluate(self, ctx: EvalContext) -> Contribution:
        plan = ctx.plan
        dense = ctx.params_per_gpu - ctx.expert_params_per_gpu
        experts = ctx.expert_params_per_gpu
        if plan.trainable == "lora":
            share = lora_trainable_fraction(ctx.model, plan)
            dense, experts = dense * share, experts * share
        d_issued, d_red, d_gather, d_bytes, algo = self._reduce(ctx, dense, "dp")
        e_issued, e_red, e_gather, e_bytes, _ = self._reduce(ctx, experts, "edp")
        return Contribution(dimension="dp", exposed_per_step_s=d_red + d_gather + e_red + e_gather,
                            comm_per_step_s=d_issued + e_issued, bytes_per_step=d_bytes + e_bytes,
                            details={"algorithm": algo, "grad_reduce_exposed_s": d_red + e_red,
                                     "param_gather_exposed_s": d_gather + e_gather})


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register data parallelism."""
    return [DataParallel()]
