"""Pipeline parallelism: 1F1B (Narayanan et al. 2019, PipeDream-Flush) and interleaved
virtual stages (Narayanan et al. 2021, SC'21).

Pipeline time = m * t_mb(bottleneck stage) + bubble, bubble = (p-1)/v * t_mb(mean stage)
(the fill/drain fraction (p-1)/(m*v) of the ideal time). Activations cross each stage
boundary once forward and once backward per micro-batch (v times with interleaving); with
p2p overlap only the fill/drain chain of transfers is on the critical path.
"""

from __future__ import annotations

from twin.core.api import Contribution, EvalContext, Strategy
from twin.core.workload import ACT_BYTES
from twin.hookimpl import hookimpl


class PipelineParallel(Strategy):
    """1F1B / interleaved pipeline schedule."""

    name = "pipeline"
    phase = "pipeline"
    summary = "Pipeline parallel (1F1B, interleaved virtual stages): bubble (p-1)/(m*v), p2p activations"

    def active(self, ctx: EvalContext) -> bool:
        return ctx.plan.pp > 1

    def evaluate(self, ctx: EvalContext) -> Contribution:
        plan, w = ctx.plan, ctx.workload
        p, v, m = plan.pp, plan.vp, ctx.microbatches
        size = w.tokens * ctx.model.hidden * ACT_BYTES / (plan.tp if plan.sp else 1)
        p2p = ctx.cost("send_recv", size, "pp")
        t_mb = ctx.microbatch_time_s
        t_avg = ctx.stage.avg_stage_s + ctx.exposed_per_microbatch_s
        bubble = (p - 1) / v * t_avg
        exposed = 2.0 * (p - 1) * p2p.time_s
        if not plan.overlap.p2p:
            exposed += 2.0 * m * v * p2p.time_s
        return Contribution(dimension="pp", pipeline_time_s=m * t_mb + bubble, bubble_s=bubble,
                            exposed_per_step_s=exposed, comm_per_step_s=2.0 * m * v * p2p.time_s,
                            bytes_per_step=2.0 * m * v * size,
                            details={"algorithm": p2p.algorithm, "schedule": "interleaved" if v > 1 else "1f1b",
                                     "bubble_fraction": bubble / (m * t_mb + bubble)})


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register pipeline parallelism."""
    return [PipelineParallel()]
