"""A parallelism strategy from a third party: the global gradient-norm all-reduce.

Gradient clipping needs the norm of the whole model's gradient, so every step, before the
optimizer runs, each rank all-reduces its squared partial norm (one fp32 number) over the
data-parallel group (Megatron-Core ``clip_grad_norm_fp32``; PyTorch
``torch.nn.utils.clip_grad_norm_`` under FSDP). The optimizer waits for it, so the
all-reduce is exposed; at one float it costs the collective's latency, which is what a
latency-bound collective over thousands of GPUs adds to every step.

The arithmetic below is plain operators and ``ctx.cost``: it works for one scenario and,
unchanged, for a batch of points (every value is then an array), so this strategy runs on
the twin's batch path. Registered explicitly (``engine_with(GradientNormAllReduce())``,
or an entry point of your own package), not through this package's entry point: the
suite's other tests keep the built-in step model.
"""

from __future__ import annotations

from typing import Any

from twin.api import EvalContext, Strategy, Terms, bus_factor, hookimpl, ops

# The squared norm travels as one fp32 number (Megatron-Core clip_grads.py: a
# torch.cuda.FloatTensor([total_norm]) all-reduced with op=SUM).
NORM_BYTES = 4.0


class GradientNormAllReduce(Strategy):
    """One fp32 all-reduce of the gradient norm over the data-parallel group per step."""

    name = "gradnorm"
    dimension = "gradnorm"
    phase = "step"
    # Nothing here depends on the micro-batch count or plan.vp: in a batch the twin may
    # evaluate it once per group of points that differ only in those.
    reads_schedule = False
    summary = "Global gradient-norm all-reduce for clipping (one fp32 per step, exposed)"

    def active(self, ctx: EvalContext) -> Any:
        # A bool for one scenario, a bool array for a batch: both come from the same expression.
        return ops.logical_and(ctx.dp * ctx.plan.cp > 1, ctx.plan.trainable == "full")

    def evaluate(self, ctx: EvalContext) -> Terms:
        ar = ctx.cost("all_reduce", NORM_BYTES, "dp")
        return Terms(exposed_per_step_s=ar.time_s, issued_per_step_s=ar.time_s,
                     bytes_per_step=NORM_BYTES * bus_factor("all_reduce", ctx.spans["dp"].n),
                     algorithm=ar.algorithm)


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register the gradient-norm all-reduce."""
    return [GradientNormAllReduce()]
