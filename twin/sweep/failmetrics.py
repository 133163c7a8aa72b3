"""Failure figures as sweep columns: axes over ``failures.*`` and goodput objectives.

A sweep asks for them when its base has a ``failures:`` section, an axis sets a
``failures.*`` path (spare nodes, checkpoint storage bandwidth, a component's failure
rate, ...) or its objective is one of :data:`~twin.sweep.metrics.FAILURE_METRICS`. Every
feasible point is then analysed with :func:`twin.failures.failure_metrics` (inventory,
rates, Young/Daly checkpointing, restart costs through the performance model), which costs
tens of milliseconds a point rather than microseconds: failure sweeps are for thousands
of points, not millions. Identical points (same assignment) are analysed once per worker.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core.errors import TwinError
from twin.sweep.metrics import FAILURE_METRICS, reason_of
from twin.sweep.spec import SweepSpec, set_path

if TYPE_CHECKING:
    from twin.engine import Engine
    from twin.sweep.evaluator import Evaluated
    from twin.sweep.points import PointBatch, SweepSource

# failure_metrics keys -> sweep columns
_COLUMNS = {"expected_interruptions_per_day": "interruptions_per_day",
            "effective_training_time_pct": "effective_training_time_pct",
            "goodput_tokens_per_s": "goodput_tokens_per_s"}


def wants_failures(spec: SweepSpec) -> bool:
    """Whether ``spec`` needs failure figures."""
    return ("failures" in spec.base or any(a.path.split(".")[0] == "failures" for a in spec.axes)
            or spec.objective.metric in FAILURE_METRICS)


class FailureColumns:
    """Fills the failure columns of an evaluated batch (feasible points only)."""

    def __init__(self, engine: Engine, spec: SweepSpec, source: SweepSource) -> None:
        self.engine = engine
        self.spec = spec
        self.source = source
        self._cache: dict[str, dict[str, float] | str] = {}

    def _mapping(self, codes: list[np.ndarray], i: int) -> dict[str, Any]:
        data = copy.deepcopy(dict(self.spec.base))
        for a, axis in enumerate(self.spec.axes):
            set_path(data, axis.path.split("."), self.source.value(a, codes[a][i]), self.engine.catalog)
        return data

    def fill(self, batch: PointBatch, ev: Evaluated) -> None:
        """Analyse each feasible point; a point whose failure analysis fails becomes infeasible."""
        from twin.failures import failure_metrics

        codes = self.source.codes(batch.ids)
        for i in np.flatnonzero(ev.reason_ix < 0):
            mapping = self._mapping(codes, int(i))
            key = json.dumps(mapping, sort_keys=True, default=str)
            got = self._cache.get(key)
            if got is None:
                try:
                    row = failure_metrics(self.engine, mapping)
                    got = {col: float(row[k]) for k, col in _COLUMNS.items()}
                except TwinError as err:
                    got = reason_of(err)
                self._cache[key] = got
            if isinstance(got, str):
                if got not in ev.reasons:
                    ev.reasons.append(got)
                ev.reason_ix[i] = ev.reasons.index(got)
                continue
            for col, value in got.items():
                ev.floats[col][i] = value
