"""The per-point columns a sweep produces, and which way each metric is better.

Every feasible point gets the float columns below (seconds, GiB, rates); the step-time
parts add up to ``step_time_s`` exactly as :class:`twin.core.estimate.Breakdown` does.
``power_kw`` is GPU board power (TDP from the GPU preset, each with its datasheet source)
times the GPU count plus the optics power the optics model reports (pJ/bit x link rate,
``plugins/optics.py``); NICs, switches and cooling are not counted.
"""

from __future__ import annotations

import re
from typing import Any

from twin.core.errors import NotFoundError, SpecError, TwinError

# Float columns the performance model gives a feasible point, in output order.
MODEL_COLUMNS = (
    "step_time_s", "compute_s", "recompute_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_dp_s",
    "exposed_pp_s", "exposed_other_s", "bubble_s", "optimizer_s", "offload_s", "interference_s", "memory_gib",
    "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "mfu_at_precision_peak", "power_kw",
    "tokens_per_joule",
)
INT_COLUMNS = ("microbatches", "dp")
# Exposed-communication dimensions with their own column; any other goes to exposed_other_s.
EXPOSED_DIMS = ("tp", "cp", "ep", "dp", "pp")
# Metrics a sweep can rank by, with the better direction.
METRICS: dict[str, str] = {
    "step_time_s": "min", "tokens_per_s": "max", "tokens_per_s_per_gpu": "max", "mfu": "max",
    "mfu_at_precision_peak": "max",
    "model_tflops_per_gpu": "max", "memory_gib": "min", "power_kw": "min", "tokens_per_joule": "max",
    "bubble_s": "min", "compute_s": "min",
    "interruptions_per_day": "min", "effective_training_time_pct": "max", "goodput_tokens_per_s": "max",
}
# Failure figures (twin.sweep.failmetrics): NaN unless the sweep asks for them.
FAILURE_METRICS = ("interruptions_per_day", "effective_training_time_pct", "goodput_tokens_per_s")
FLOAT_COLUMNS = MODEL_COLUMNS + FAILURE_METRICS
MEMORY_REASON = "memory: does not fit in HBM"
_PARENS = re.compile(r"\s*\([^()]*\)")


def default_order(metric: str) -> str:
    """'min' or 'max': which way ``metric`` is better."""
    return METRICS.get(metric, "min")


def reason_of(err: Exception) -> str:
    """A point-independent infeasibility reason: the field and the rule, numbers dropped.

    ``plan.tp: tp*pp*cp (24) must divide num_gpus (1000)`` -> ``plan.tp: tp*pp*cp must
    divide num_gpus``, so points failing the same rule count together.
    """
    if isinstance(err, SpecError):
        return f"{err.field}: {_PARENS.sub('', err.rule)}" if err.field else _PARENS.sub("", err.rule)
    if isinstance(err, NotFoundError):
        return f"{err.field}: unknown name {err.name!r}"
    if isinstance(err, TwinError):
        return _PARENS.sub("", str(err))
    return f"{type(err).__name__}: {err}"


def as_python(value: Any) -> Any:
    """Numpy scalars -> Python scalars (for JSON and tables)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
