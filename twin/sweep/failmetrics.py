"""Failure figures as sweep columns: axes over ``failures.*`` and goodput objectives.

A sweep asks for them when its base has a ``failures:`` section, an axis sets a
``failures.*`` path (spare nodes, checkpoint storage bandwidth, a component's failure
rate, ...) or its objective is one of :data:`~twin.sweep.metrics.FAILURE_METRICS`. Every
feasible point is then analysed with :func:`twin.failure_analyzer.failure_metrics` (inventory,
rates, Young/Daly checkpointing, restart costs through the performance model), which costs
tens of milliseconds a point rather than microseconds: failure sweeps are for thousands
of points, not millions. Identical points (same assignment) are analysed once per worker.
"""

from __future__ import annotations

from typing import Any

from twin.sweep.metrics import FAILURE_METRICS
from twin.sweep.pointcols import PointColumns
from twin.sweep.sweep_spec import SweepSpec

# failure_metrics keys -> sweep columns
_COLUMNS = {"expected_interruptions_per_day": "interruptions_per_day",
            "effective_training_time_pct": "effective_training_time_pct",
            "goodput_tokens_per_s": "goodput_tokens_per_s"}


def wants_failures(spec: SweepSpec) -> bool:
    """Whether ``spec`` needs failure figures."""
    return ("failures" in spec.base or any(a.path.split(".")[0] == "failures" for a in spec.axes)
            or spec.objective.metric in FAILURE_METRICS)


class FailureColumns(PointColumns):
    """Fills the failure columns of an evaluated batch (feasible points only)."""

    def compute(self, mapping: dict[str, Any]) -> dict[str, float]:
        """The failure analysis of one point."""
        from twin.failure_analyzer import failure_metrics

        row = failure_metrics(self.engine, mapping)
        return {col: float(row[k]) for k, col in _COLUMNS.items()}
