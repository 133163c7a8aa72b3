"""The per-point columns a sweep produces, and which way each metric is better.

Every feasible point gets the float columns below (seconds, GiB, rates); the step-time
parts add up to ``step_time_s`` exactly as :class:`twin.core.estimate.Breakdown` does.
The energy columns are the step model's (``twin.core.energy``): ``energy_j`` and its
components ``energy_<gpu|nic|switch|optics|host|cxl|facility>_j`` (they add up to it),
``joules_per_token``, ``tokens_per_joule``, and ``power_kw``, the average power over the
step (``energy_j / step_time_s``, facility PUE included). A component the cluster gives no
power figure for is 0. ``cost_usd_per_step`` and ``usd_per_million_tokens`` come only from
the cluster's prices (NaN without them). ``step_time_p80_low_s`` .. ``step_time_p95_high_s``
are the prediction interval's bounds (``twin.core.intervals``: where 80% and 95% of real
runs of the scenario's class land, from the twin's own held-out errors); a sweep can rank by
the pessimistic bound (``step_time_p80_high_s``).
"""

from __future__ import annotations

from typing import Any

from twin.core.errors import reason_of
from twin.core.results import MEMORY_REASON

# reason_of and MEMORY_REASON are the core's; the sweep names infeasible points with them.
__all__ = ["DETAIL_COLUMNS", "EXPOSED_DIMS", "FAILURE_METRICS", "FLEET_METRICS", "FLOAT_COLUMNS", "INT_COLUMNS",
           "MEMORY_REASON",
           "METRICS", "MODEL_COLUMNS", "as_python", "default_order", "reason_of"]

# Float columns the performance model gives a feasible point, in output order.
MODEL_COLUMNS = (
    "step_time_s", "compute_s", "recompute_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_dp_s",
    "exposed_pp_s", "exposed_other_s", "bubble_s", "optimizer_s", "offload_s", "interference_s", "memory_gib",
    "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "mfu_at_precision_peak", "power_kw",
    "tokens_per_joule", "energy_j", "energy_gpu_j", "energy_nic_j", "energy_switch_j", "energy_optics_j",
    "energy_host_j", "energy_cxl_j", "energy_facility_j", "joules_per_token", "cost_usd_per_step",
    "usd_per_million_tokens", "step_time_p80_low_s", "step_time_p80_high_s", "step_time_p95_low_s",
    "step_time_p95_high_s",
)
INT_COLUMNS = ("microbatches", "dp")
# The rest of a feasible point's estimate (``twin.core.results.estimate_of_row``), so that a
# kept row is a whole estimate (the service streams kept rows as estimates from these numbers):
# communication issued per dimension (hidden or not), memory by category, the step's model
# FLOPs, and the energy's and cost's details. Only where rows are kept (a sweep that keeps
# only its best pays nothing for them).
DETAIL_COLUMNS = (
    "issued_tp_s", "issued_cp_s", "issued_ep_s", "issued_dp_s", "issued_pp_s", "issued_other_s",
    "memory_weights_bytes", "memory_gradients_bytes", "memory_optimizer_bytes", "memory_activations_bytes",
    "memory_logits_bytes", "memory_runtime_bytes", "memory_offloaded_bytes", "memory_capacity_bytes",
    "memory_pool_capacity_bytes", "memory_offloaded_host_bytes", "memory_host_capacity_bytes",
    "model_flops_per_step", "average_power_w", "gpu_busy_s", "gpu_wait_s", "pue", "hardware_usd", "electricity_usd",
)
# Exposed-communication dimensions with their own column; any other goes to exposed_other_s.
EXPOSED_DIMS = ("tp", "cp", "ep", "dp", "pp")
# Metrics a sweep can rank by, with the better direction.
METRICS: dict[str, str] = {
    "step_time_s": "min", "tokens_per_s": "max", "tokens_per_s_per_gpu": "max", "mfu": "max",
    "mfu_at_precision_peak": "max",
    "model_tflops_per_gpu": "max", "memory_gib": "min", "power_kw": "min", "tokens_per_joule": "max",
    "energy_j": "min", "joules_per_token": "min", "cost_usd_per_step": "min", "usd_per_million_tokens": "min",
    "bubble_s": "min", "compute_s": "min",
    "interruptions_per_day": "min", "effective_training_time_pct": "max", "goodput_tokens_per_s": "max",
    "step_time_shared_s": "min", "fleet_slowdown": "min",
    # The pessimistic bound of the prediction interval: a plan ranked by what it takes at worst.
    "step_time_p80_high_s": "min", "step_time_p95_high_s": "min",
}
# Failure figures (twin.sweep.failmetrics): NaN unless the sweep asks for them.
FAILURE_METRICS = ("interruptions_per_day", "effective_training_time_pct", "goodput_tokens_per_s")
# Fleet figures (twin.sweep.fleetmetrics): NaN unless the sweep has base.fleet.
FLEET_METRICS = ("step_time_shared_s", "fleet_slowdown")
FLOAT_COLUMNS = MODEL_COLUMNS + FAILURE_METRICS + FLEET_METRICS


def default_order(metric: str) -> str:
    """'min' or 'max': which way ``metric`` is better."""
    return METRICS.get(metric, "min")


def as_python(value: Any) -> Any:
    """Numpy scalars -> Python scalars (for JSON and tables)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
