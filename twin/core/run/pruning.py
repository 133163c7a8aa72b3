"""Branch and bound for a search of the fastest plans (``TwinModel.evaluate_points(prune=...)``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from twin.core.results import PointResults

# Points a search costs in full before it has a bar to prune by (at least 4 x its top).
PRUNE_FIRST = 64


@dataclass
class Pruner:
    """Branch and bound for a search of the ``top`` fastest feasible points (step time, min).

    ``best``: the ``top`` smallest step times seen so far, ascending. A point's lower bound
    is ``twin.core.step.step_lower_bound`` (its step without communication; strategies'
    terms are >= 0, the conformance kit's rule). A point whose bound exceeds the ``top``-th
    best time is slower than ``top`` points already found and is never among the best.
    """

    top: int
    best: list[float] = field(default_factory=list)

    def threshold(self) -> float:
        """The step time a point must not exceed to be among the best (inf until ``top`` are known)."""
        return self.best[-1] if len(self.best) >= self.top else math.inf

    def offer(self, out: PointResults, idx: np.ndarray) -> None:
        """Take the feasible step times of the points ``idx`` of ``out``."""
        t = out.values_at("step_time_s", idx)
        t = t[(out.reason_ix[idx] < 0) & np.isfinite(t)]
        if len(t):
            self.best = sorted([*self.best, *np.sort(t)[:self.top].tolist()])[:self.top]
