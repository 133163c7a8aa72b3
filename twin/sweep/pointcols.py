"""Sweep columns computed point by point from each feasible point's scenario mapping.

Failure figures (``failmetrics``) and fleet figures (``fleetmetrics``) both rebuild a
point's mapping (the base with every axis value set), evaluate it with a slower analysis
(milliseconds a point), cache identical points per worker, and turn a point whose analysis
fails into an infeasible one with the reason. This is that loop, written once.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core.errors import TwinError
from twin.core.results import Refusal
from twin.sweep.sweep_spec import SweepSpec, set_path

if TYPE_CHECKING:
    from twin.engine import Engine
    from twin.sweep.evaluator import Evaluated
    from twin.sweep.sweep_points import PointBatch, SweepSource


class PointColumns:
    """Fills some float columns of an evaluated batch (feasible points only); subclasses say
    how one point's mapping becomes its values (:meth:`compute`).
    """

    # Prefix of the reason a failed analysis gives its point ("" for none).
    reason_prefix = ""

    def __init__(self, engine: Engine, spec: SweepSpec, source: SweepSource) -> None:
        self.engine = engine
        self.spec = spec
        self.source = source
        self._cache: dict[str, dict[str, float] | str] = {}

    def mapping(self, codes: list[np.ndarray], i: int) -> dict[str, Any]:
        """Point ``i``'s scenario mapping: the base with every axis value set."""
        data = copy.deepcopy(dict(self.spec.base))
        for a, axis in enumerate(self.spec.axes):
            set_path(data, axis.path.split("."), self.source.value(a, codes[a][i]), self.engine.catalog)
        return data

    def compute(self, mapping: dict[str, Any]) -> dict[str, float]:
        """The columns of one point (raises TwinError when it cannot be analysed)."""
        raise NotImplementedError

    def fill(self, batch: PointBatch, ev: Evaluated) -> None:
        """Analyse each feasible point; a point whose analysis fails becomes infeasible."""
        codes = self.source.codes(batch.ids)
        for i in np.flatnonzero(ev.reason_ix < 0):
            mapping = self.mapping(codes, int(i))
            key = json.dumps(mapping, sort_keys=True, default=str)
            got = self._cache.get(key)
            if got is None:
                try:
                    got = self.compute(mapping)
                except TwinError as err:
                    refusal = Refusal.of(err)
                    got = dataclasses.replace(refusal, message=self.reason_prefix + refusal.message)
                self._cache[key] = got
            if isinstance(got, Refusal):
                if got.message not in ev.reasons:
                    ev.reasons.append(got.message)
                    ev.refusals[got.message] = got
                ev.reason_ix[i] = ev.reasons.index(got.message)
                continue
            for col, value in got.items():
                ev.floats[col][i] = value
