"""Data parallelism: gradient reduction once per step, bucketed and overlapped with the
backward pass (PyTorch DDP, Li et al. VLDB 2020; Megatron-Core DDP), and for sharded
optimizers (distributed optimizer / ZeRO-1/2, FSDP without resharding) a reduce-scatter
of gradients plus an all-gather of updated parameters overlapped with the next forward;
with hybrid sharding (``plan.dp_shard``) both run within the shard group and each
gradient shard is all-reduced across the replicas.

Exposed time: gradient reduction hides behind the last micro-batch's backward except for
the last bucket; parameter gathers hide behind the first micro-batch's forward except for
the first bucket.
"""

from __future__ import annotations

from typing import Any

from twin.api import EvalContext, Strategy, Terms, bus_factor, hookimpl, lora_trainable_fraction, ops, weights_sharded

# Megatron-Core DDP bucket size: max(40M, 1M * dp) parameters (distributed_data_parallel_config).
BUCKET_PARAMS = 40e6
BUCKET_PARAMS_PER_RANK = 1e6


class DataParallel(Strategy):
    """Per-step gradient all-reduce / reduce-scatter (+ parameter all-gather)."""

    name = "data"
    dimension = "dp"
    phase = "step"
    traffic = (("dp", "ring"), ("dpr", "ring"), ("edp", "ring"))
    # Its terms do not depend on the micro-batch count or the interleaving depth.
    reads_schedule = False
    summary = "Data parallel (+ distributed optimizer / ZeRO-1/2): bucketed grad reduce overlapped with backward"

    def active(self, ctx: EvalContext) -> Any:
        return ops.logical_and(ctx.dp * ctx.plan.cp > 1, ops.logical_not(weights_sharded(ctx.plan)))

    def _reduce(self, ctx: EvalContext, params: Any, dim: str) -> tuple[Any, Any, Any, Any, Any]:
        """(issued s, exposed grad-reduce s, exposed param-gather s, bytes, algorithm) for one group."""
        plan, stage = ctx.plan, ctx.stage
        n = ctx.spans[dim].n
        present = ops.logical_and(n > 1, params > 0)
        if not ops.any_(present):
            return 0.0, 0.0, 0.0, 0.0, "none"
        grad_bytes = ops.where(plan.grad_reduce_dtype == "fp32", 4.0, 2.0)
        bucket = ops.minimum(params, ops.maximum(BUCKET_PARAMS, BUCKET_PARAMS_PER_RANK * n))
        sharded = plan.optimizer_sharding != "none"
        t_red: Any = 0.0
        t_gather: Any = 0.0
        last: Any = 0.0
        first: Any = 0.0
        nbytes: Any = 0.0
        algo: Any = "none"
        if ops.any_(sharded):
            rs = ctx.cost("reduce_scatter", params * grad_bytes, dim)
            ag = ctx.cost("all_gather", params * 2.0, dim)
            t_red, t_gather, algo = rs.time_s, ag.time_s, rs.algorithm
            last = ctx.cost("reduce_scatter", bucket * grad_bytes, dim).time_s
            first = ctx.cost("all_gather", bucket * 2.0, dim).time_s
            nbytes = params * (grad_bytes + 2.0) * bus_factor("all_gather", n)
            if dim == "dp":
                # Hybrid sharding: each rank's gradient shard is then all-reduced across the
                # replicas (Megatron-Core partial distributed optimizer; FSDP HYBRID_SHARD).
                replicas = ctx.spans["dpr"].n
                hybrid = replicas > 1
                if ops.any_(hybrid):
                    shard_bytes = params * grad_bytes / n
                    ar = ctx.cost("all_reduce", shard_bytes, "dpr")
                    t_red = ops.where(hybrid, t_red + ar.time_s, t_red)
                    last = ops.where(hybrid, last + ctx.cost("all_reduce", bucket * grad_bytes / n, "dpr").time_s,
                                     last)
                    nbytes = ops.where(hybrid, nbytes + shard_bytes * bus_factor("all_reduce", replicas), nbytes)
        if not ops.all_(sharded):
            ar = ctx.cost("all_reduce", params * grad_bytes, dim)
            t_red, algo = ops.where(sharded, t_red, ar.time_s), ops.where(sharded, algo, ar.algorithm)
            t_gather, first = ops.where(sharded, t_gather, 0.0), ops.where(sharded, first, 0.0)
            last = ops.where(sharded, last, ctx.cost("all_reduce", bucket * grad_bytes, dim).time_s)
            nbytes = ops.where(sharded, nbytes, params * grad_bytes * bus_factor("all_reduce", n))
        # Hidden behind the backward only where the plan asks and the stack can (Software).
        overlap = ops.logical_and(plan.overlap.grad_reduce, ctx.software.grad_reduce_overlap)
        exp_red = ops.where(overlap, ops.maximum(t_red - stage.bwd_s, last), t_red)
        exp_gather = ops.where(ops.logical_and(sharded, plan.overlap.param_gather),
                               ops.maximum(t_gather - stage.fwd_s, first), t_gather)
        issued = t_red + t_gather
        if ops.all_(present):
            return issued, exp_red, exp_gather, nbytes, algo
        return (ops.where(present, issued, 0.0), ops.where(present, exp_red, 0.0),
                ops.where(present, exp_gather, 0.0), ops.where(present, nbytes, 0.0),
                ops.where(present, algo, "none"))

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan = ctx.plan
        dense = ctx.params_per_gpu - ctx.expert_params_per_gpu
        experts = ctx.expert_params_per_gpu
        lora = plan.trainable == "lora"
        if ops.any_(lora):
            share = lora_trainable_fraction(ctx.model, plan)
            dense, experts = ops.where(lora, dense * share, dense), ops.where(lora, experts * share, experts)
        d_issued, d_red, d_gather, d_bytes, algo = self._reduce(ctx, dense, "dp")
        e_issued, e_red, e_gather, e_bytes, _ = self._reduce(ctx, experts, "edp")
        details = {} if ctx.batch else {"grad_reduce_exposed_s": d_red + e_red,
                                        "param_gather_exposed_s": d_gather + e_gather}
        return Terms(exposed_per_step_s=d_red + d_gather + e_red + e_gather, issued_per_step_s=d_issued + e_issued,
                     bytes_per_step=d_bytes + e_bytes, algorithm=algo, details=details)


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register data parallelism."""
    return [DataParallel()]
