"""Fleet figures as sweep columns: the swept job beside fixed neighbours on one fabric.

A sweep whose base has a ``fleet:`` section (``cluster_gpus``: the shared cluster's GPUs,
``first_gpu``: where the swept job starts, ``neighbours``: the other jobs, as in a fleet
file) evaluates every feasible point as the first job of that fleet
(:func:`twin.fleet_report.evaluate_fleet`): ``step_time_shared_s`` is its step under the
neighbours' traffic and ``fleet_slowdown`` that over its step alone on the fabric. Like
failure figures this costs milliseconds a point: fleet sweeps are for thousands of points.
Identical points are evaluated once per worker.
"""

from __future__ import annotations

import copy
from typing import Any

from twin.sweep.pointcols import PointColumns


class FleetColumns(PointColumns):
    """Fills the fleet columns of an evaluated batch (feasible points only)."""

    reason_prefix = "fleet: "

    def compute(self, mapping: dict[str, Any]) -> dict[str, float]:
        """The point as the first job of its fleet: its step under the neighbours, and the slowdown."""
        from twin.fleet_report import evaluate_fleet

        fleet = self.spec.fleet
        assert fleet is not None
        cluster = mapping["cluster"]
        cluster = dict(cluster) if isinstance(cluster, dict) else {"system": cluster}
        job = {"name": mapping.get("name") or "swept", "gpus": int(cluster.get("num_gpus", 0)),
               "first_gpu": fleet["first_gpu"], "model": mapping["model"], "plan": mapping["plan"]}
        for key in ("software", "calibration", "strategies"):
            if mapping.get(key) is not None:
                job[key] = mapping[key]
        first = evaluate_fleet(self.engine, {"name": self.spec.name,
                                             "cluster": {**cluster, "num_gpus": fleet["cluster_gpus"]},
                                             "jobs": [job, *copy.deepcopy(fleet["neighbours"])]}).jobs[0]
        return {"step_time_shared_s": first.shared.step_time_s, "fleet_slowdown": first.slowdown}
