"""Fleet figures as sweep columns: the swept job beside fixed neighbours on one fabric.

A sweep whose base has a ``fleet:`` section (``cluster_gpus``: the shared cluster's GPUs,
``first_gpu``: where the swept job starts, ``neighbours``: the other jobs, as in a fleet
file) evaluates every feasible point as the first job of that fleet
(:func:`twin.fleet.evaluate_fleet`): ``step_time_shared_s`` is its step under the
neighbours' traffic and ``fleet_slowdown`` that over its step alone on the fabric. Like
failure figures this costs milliseconds a point: fleet sweeps are for thousands of points.
Identical points are evaluated once per worker.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core.errors import TwinError
from twin.sweep.metrics import reason_of
from twin.sweep.spec import SweepSpec, set_path

if TYPE_CHECKING:
    from twin.engine import Engine
    from twin.sweep.evaluator import Evaluated
    from twin.sweep.points import PointBatch, SweepSource


class FleetColumns:
    """Fills the fleet columns of an evaluated batch (feasible points only)."""

    def __init__(self, engine: Engine, spec: SweepSpec, source: SweepSource) -> None:
        assert spec.fleet is not None
        self.engine = engine
        self.spec = spec
        self.source = source
        self._cache: dict[str, tuple[float, float] | str] = {}

    def _fleet(self, codes: list[np.ndarray], i: int) -> dict[str, Any]:
        point = copy.deepcopy(dict(self.spec.base))
        for a, axis in enumerate(self.spec.axes):
            set_path(point, axis.path.split("."), self.source.value(a, codes[a][i]), self.engine.catalog)
        fleet = self.spec.fleet
        assert fleet is not None
        cluster = point["cluster"]
        cluster = dict(cluster) if isinstance(cluster, dict) else {"system": cluster}
        gpus = int(cluster.get("num_gpus", 0))
        job = {"name": point.get("name") or "swept", "gpus": gpus, "first_gpu": fleet["first_gpu"],
               "model": point["model"], "plan": point["plan"]}
        for key in ("software", "calibration"):
            if point.get(key) is not None:
                job[key] = point[key]
        return {"name": self.spec.name, "cluster": {**cluster, "num_gpus": fleet["cluster_gpus"]},
                "jobs": [job, *copy.deepcopy(fleet["neighbours"])]}

    def fill(self, batch: PointBatch, ev: Evaluated) -> None:
        """Evaluate each feasible point in its fleet; one whose fleet fails becomes infeasible."""
        from twin.fleet import evaluate_fleet

        codes = self.source.codes(batch.ids)
        for i in np.flatnonzero(ev.reason_ix < 0):
            fleet = self._fleet(codes, int(i))
            key = json.dumps(fleet, sort_keys=True, default=str)
            got = self._cache.get(key)
            if got is None:
                try:
                    job = evaluate_fleet(self.engine, fleet).jobs[0]
                    got = (job.shared.step_time_s, job.slowdown)
                except TwinError as err:
                    got = "fleet: " + reason_of(err)
                self._cache[key] = got
            if isinstance(got, str):
                if got not in ev.reasons:
                    ev.reasons.append(got)
                ev.reason_ix[i] = ev.reasons.index(got)
                continue
            ev.floats["step_time_shared_s"][i], ev.floats["fleet_slowdown"][i] = got
