"""Pipeline parallelism's communication: activations across stage boundaries.

Activations cross each stage boundary once forward and once backward per micro-batch (v
times with interleaving or a V-shaped schedule's two chunks; Narayanan et al. 2021,
SC'21). With p2p overlap only the fill/drain chain of transfers, 2(p-1), is on the
critical path; without it every transfer is. The schedule itself (``plan.schedule``: 1F1B,
interleaved, zero-bubble, DualPipe; its bubble and memory) is the core's
(``twin.core.pipelines``).
"""

from __future__ import annotations

from typing import Any

from twin.api import ACT_BYTES, EvalContext, Strategy, Terms, hookimpl, ops, resolved_schedule


class PipelineParallel(Strategy):
    """Stage-to-stage activation transfers of a pipeline (any ``plan.schedule``)."""

    name = "pipeline"
    dimension = "pp"
    phase = "pipeline"
    # Point-to-point copies run on the copy engines / RDMA, not on the SMs.
    interferes = False
    summary = ("Pipeline parallel (1F1B, interleaved, zero-bubble ZB-H1/H2/V, DualPipe/V: plan.schedule): "
               "p2p activations")

    def active(self, ctx: EvalContext) -> Any:
        return ctx.plan.pp > 1

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan, w = ctx.plan, ctx.workload
        p, v, m = plan.pp, plan.vp, ctx.microbatches
        size = w.tokens * ctx.model.hidden * ACT_BYTES / ops.where(plan.sp, plan.tp, 1)
        p2p = ctx.cost("send_recv", size, "pp")
        exposed = 2.0 * (p - 1) * p2p.time_s
        serial = ops.logical_not(plan.overlap.p2p)
        if ops.any_(serial):
            exposed = ops.where(serial, exposed + 2.0 * m * v * p2p.time_s, exposed)
        details = {} if ctx.batch else {"schedule": resolved_schedule(plan.schedule, v)}
        return Terms(exposed_per_step_s=exposed, issued_per_step_s=2.0 * m * v * p2p.time_s,
                     bytes_per_step=2.0 * m * v * size, algorithm=p2p.algorithm, details=details)


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register pipeline parallelism."""
    return [PipelineParallel()]
