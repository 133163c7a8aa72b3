"""A pipeline-parallel strategy from a third party: compressed stage-to-stage transfers.

AQ-SGD (Wang et al., "Fine-tuning Language Models over Slow Networks using Activation
Compression with Guarantees", NeurIPS 2022) quantizes what pipeline stages exchange: the
forward activations (their change since the sample was last seen) to 2-4 bits and the
backward activation gradients to 4-8 bits in the paper's runs, so a pipeline over a slow
network sends a fraction of the bytes. This example models only those bytes: the same
transfers as twin's built-in pipeline strategy (each stage boundary once forward and once
backward per micro-batch and chunk; with p2p overlap only the fill and drain chain is
exposed), each direction at its own width. The quantization kernels' own time is not
modelled. At 16 bits both ways it is the built-in's arithmetic exactly.

It claims dimension "pp", which has a built-in, so it is an *alternative*: installed, it
changes nothing until a scenario selects it::

    strategies:
      pp: {name: example-compressed-pp, config: {forward_bits: 4, backward_bits: 8}}

and then it replaces the built-in pipeline strategy for that scenario (never both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twin.api import ACT_BYTES, EvalContext, SpecError, Strategy, Terms, ops, resolved_schedule

# The uncompressed width: twin's activation element, 16-bit (twin.api.ACT_BYTES bytes).
FULL_BITS = int(ACT_BYTES * 8)
FIELDS = ("forward_bits", "backward_bits")


class CompressedPipeline(Strategy):
    """Stage-to-stage transfers of a pipeline with the activations and their gradients quantized."""

    name = "example-compressed-pp"
    dimension = "pp"
    phase = "pipeline"
    # Point-to-point copies run on the copy engines / RDMA, not on the SMs (as the built-in's).
    interferes = False
    summary = "Example (third-party): pipeline p2p with quantized activations / gradients (AQ-SGD, Wang et al. 2022)"

    def __init__(self, forward_bits: int = FULL_BITS, backward_bits: int = FULL_BITS) -> None:
        self.forward_bits = forward_bits
        self.backward_bits = backward_bits

    def configure(self, config: Mapping[str, Any], path: str) -> CompressedPipeline:
        """``{forward_bits, backward_bits}``: integers from 1 to 16 (unset: 16, no compression)."""
        for key in config:
            if key not in FIELDS:
                raise SpecError(f"{path}.{key}", f"unknown field; expected one of: {', '.join(FIELDS)}")
        bits = {}
        for key in FIELDS:
            value = config.get(key, FULL_BITS)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= FULL_BITS:
                raise SpecError(f"{path}.{key}", f"must be an integer from 1 to {FULL_BITS} (got {value!r})")
            bits[key] = value
        return CompressedPipeline(**bits)

    def active(self, ctx: EvalContext) -> Any:
        return ctx.plan.pp > 1

    def evaluate(self, ctx: EvalContext) -> Terms:
        plan, w = ctx.plan, ctx.workload
        p, v, m = plan.pp, plan.vp, ctx.microbatches
        # One activation tensor of a micro-batch (divided over tp with sequence parallelism).
        elements = w.tokens * ctx.model.hidden / ops.where(plan.sp, plan.tp, 1)
        fwd_bytes = elements * self.forward_bits / 8
        bwd_bytes = elements * self.backward_bits / 8
        fwd = ctx.cost("send_recv", fwd_bytes, "pp")
        bwd = ctx.cost("send_recv", bwd_bytes, "pp")
        both = fwd.time_s + bwd.time_s
        exposed = (p - 1) * both
        serial = ops.logical_not(plan.overlap.p2p)
        if ops.any_(serial):
            exposed = ops.where(serial, exposed + m * v * both, exposed)
        details = {} if ctx.batch else {"schedule": resolved_schedule(plan.schedule, v),
                                        "forward_bits": self.forward_bits, "backward_bits": self.backward_bits}
        return Terms(exposed_per_step_s=exposed, issued_per_step_s=m * v * both,
                     bytes_per_step=m * v * (fwd_bytes + bwd_bytes), algorithm=fwd.algorithm, details=details)
