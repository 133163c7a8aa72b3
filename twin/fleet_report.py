"""Several training jobs on one fabric: each job's step alone and under the others' traffic.

    from twin.engine import Engine
    from twin.fleet_report import evaluate_fleet

    report = evaluate_fleet(Engine(), "examples/fleets/two-jobs-roce.yaml")
    for job in report.jobs:
        print(job.name, job.alone.step_time_s, job.shared.step_time_s, job.contended)

A fleet file names the shared cluster and its jobs::

    name: two-jobs
    cluster: {system: Meta-RoCE-H100, num_gpus: 8192}
    jobs:
      - {name: a, gpus: 4096, model: llama3.1-70b, plan: {tp: 8, pp: 4, gbs: 1024}}
      - {name: b, gpus: 4096, first_gpu: 4096, model: llama3.1-8b, plan: {tp: 1, gbs: 2048}}

A job may instead name its nodes (``nodes: [0-255:2]``) or a policy (``placement: spread``,
``{policy: random, seed: 7}``): ``twin.core.fleet_placement``.

Each job runs on its GPUs of the shared cluster (``twin.core.fleet_shares``: placement and the
link capacity each gets). The fabric's switch sizes are the shared cluster's, so a job
sees the same leaves and spines it would in the fleet. What a job's neighbours cost it is
the difference between its step alone (neighbours idle: their links' capacity is the
job's to use) and shared (each neighbour keeps its own utilisation of the links they
share, from its own estimate; two rounds, so each job's load is the one it has under the
others).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core.conditions import Conditions
from twin.core.contention import link_name
from twin.core.errors import SpecError
from twin.core.estimate import Estimate
from twin.core.fleet_shares import Placement, capacity, job_tier_spans, neighbours, placements_of
from twin.core.scenario_io import read_mapping, resolve_cluster
from twin.core.specs import Scenario
from twin.core.topology import Hierarchy
from twin.engine import Engine

MAX_JOBS = 256
_JOB_KEYS = {"name", "gpus", "first_gpu", "nodes", "placement", "model", "plan", "software", "calibration",
             "strategies"}
_FLEET_KEYS = {"name", "description", "cluster", "jobs"}
# Rounds of "each job's load under the others": the first uses the loads alone.
ROUNDS = 2


@dataclass(slots=True)
class JobResult:
    """One job of a fleet: where it runs and its step on its own share, alone and shared."""

    name: str
    placement: Placement
    own_share: Estimate
    alone: Estimate
    shared: Estimate
    contended: list[dict[str, Any]] = field(default_factory=list)

    @property
    def slowdown(self) -> float:
        """Shared step over the step alone on the fabric (>= 1)."""
        return self.shared.step_time_s / self.alone.step_time_s

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"name": self.name, "first_gpu": self.placement.first, "gpus": self.placement.gpus,
                "nodes": list(self.placement.nodes),
                "step_time_own_share_s": self.own_share.step_time_s, "step_time_alone_s": self.alone.step_time_s,
                "step_time_shared_s": self.shared.step_time_s, "slowdown": self.slowdown,
                "contended": self.contended, "shared": self.shared.to_dict()}


@dataclass(slots=True)
class FleetReport:
    """Every job of a fleet."""

    name: str
    jobs: list[JobResult]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        return {"name": self.name, "jobs": [j.to_dict() for j in self.jobs], "notes": list(self.notes)}


def _check(data: Any) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
    if not isinstance(data, Mapping):
        raise SpecError("", f"a fleet must be a mapping (got {type(data).__name__})")
    for key in data:
        if key not in _FLEET_KEYS:
            raise SpecError(str(key), f"unknown field; expected one of: {', '.join(sorted(_FLEET_KEYS))}")
    if "cluster" not in data:
        raise SpecError("cluster", "is required (the shared cluster)")
    jobs = data.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise SpecError("jobs", "must be a non-empty list of jobs")
    if len(jobs) > MAX_JOBS:
        raise SpecError("jobs", f"at most {MAX_JOBS} jobs (got {len(jobs)})")
    names: set[str] = set()
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise SpecError(f"jobs[{i}]", f"must be a mapping (got {type(job).__name__})")
        for key in job:
            if key not in _JOB_KEYS:
                raise SpecError(f"jobs[{i}].{key}", f"unknown field; expected one of: {', '.join(sorted(_JOB_KEYS))}")
        for key in ("gpus", "model", "plan"):
            if key not in job:
                raise SpecError(f"jobs[{i}].{key}", "is required")
        gpus = job["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise SpecError(f"jobs[{i}].gpus", f"must be a positive integer (got {gpus!r})")
        start = job.get("first_gpu")
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise SpecError(f"jobs[{i}].first_gpu", f"must be a non-negative integer (got {start!r})")
        name = str(job.get("name") or f"job{i}")
        if name in names:
            raise SpecError(f"jobs[{i}].name", f"{name!r} names two jobs")
        names.add(name)
    cluster = data["cluster"]
    if not isinstance(cluster, Mapping):
        raise SpecError("cluster", "must be a mapping (a system preset with num_gpus, or a full cluster)")
    return cluster, jobs


def _pinned(cluster: Mapping[str, Any], placement: Placement, hierarchy: Hierarchy) -> dict[str, Any]:
    """The shared cluster's mapping for the job at ``placement``: its switch sizes the fleet's,
    and under each switch as many of its GPUs as its placement puts there (``job_tier_spans``).
    """
    out = dict(cluster)
    gpus = placement.gpus
    out["num_gpus"] = gpus
    so = out.get("scale_out")
    if so is None and "scale_out" in out:
        return out
    spans = job_tier_spans(hierarchy, placement)
    pinned = dict(so or {})
    pinned.update(tiers=len(spans), tier_spans=spans)
    out["scale_out"] = pinned
    return out


def _utilisation(est: Estimate, width: int) -> list[float]:
    """A job's busy fraction of each link class (its strategies together, at most 1)."""
    out = [0.0] * width
    for link in est.links:
        if link.tier < width:
            out[link.tier] = min(1.0, sum(link.utilisation.values()))
    return out


def evaluate_fleet(engine: Engine, source: Mapping[str, Any] | str | Path) -> FleetReport:
    """Each job of the fleet ``source`` (a mapping or a YAML/JSON file): its step on its
    own share, alone on the fabric and under the other jobs, and the links it contends on.
    Errors name the field (``jobs[1].plan.tp``, ``cluster.num_gpus``...).
    """
    data = read_mapping(source) if isinstance(source, str | Path) else source
    cluster, jobs = _check(data)
    fleet_name = str(data.get("name") or "fleet")
    whole = resolve_cluster(cluster, engine.catalog)
    engine.check_cluster(whole)
    hierarchy = engine.hierarchy_of(whole)
    total, gpn = whole.num_gpus, whole.gpus_per_node
    placements = placements_of(jobs, gpn, total)
    notes: list[str] = []
    scenarios: list[Scenario] = []
    for i, job in enumerate(jobs):
        mapping = {"name": str(job.get("name") or f"job{i}"), "model": job["model"], "plan": job["plan"],
                   "cluster": _pinned(cluster, placements[i], hierarchy)}
        for key in ("software", "calibration", "strategies"):
            if job.get(key) is not None:
                mapping[key] = job[key]
        try:
            try:
                scenarios.append(engine.scenario(mapping))
            except SpecError as err:
                if not err.field.startswith("cluster.scale_out.tier"):
                    raise
                # A fabric that sizes itself otherwise (torus, dragonfly): the job's own sizes.
                scenarios.append(engine.scenario({**mapping, "cluster": {**cluster, "num_gpus": int(job["gpus"])}}))
                notes.append(f"{mapping['name']}: the fabric does not take switch sizes; "
                             "the job's fabric is sized for its own GPUs")
        except SpecError as err:
            raise SpecError(f"jobs[{i}].{err.field}" if err.field else f"jobs[{i}]", err.rule) from err
    width = len(hierarchy.tiers)
    own = [engine.evaluate(s, validate=False) for s in scenarios]
    alone = [engine.evaluate(s, validate=False, conditions=Conditions(capacity=capacity(hierarchy, placements, i)))
             for i, s in enumerate(scenarios)]
    shared = alone
    for _ in range(ROUNDS):
        util = [_utilisation(e, width) for e in shared]
        shared = [engine.evaluate(s, validate=False,
                                  conditions=Conditions(capacity=capacity(hierarchy, placements, i, util)))
                  for i, s in enumerate(scenarios)]
    util = [_utilisation(e, width) for e in shared]
    results = []
    for i, scn in enumerate(scenarios):
        results.append(JobResult(name=scn.name, placement=placements[i], own_share=own[i], alone=alone[i],
                                 shared=shared[i], contended=_contended(hierarchy, placements, i, alone[i], util,
                                                                        [s.name for s in scenarios])))
    if len(jobs) == 1:
        notes.append("one job: nothing shares its links")
    return FleetReport(name=fleet_name, jobs=results, notes=notes)


def _contended(hierarchy: Hierarchy, placements: list[Placement], job: int, est: Estimate,
               util: list[list[float]], names: list[str]) -> list[dict[str, Any]]:
    """The link classes job ``job`` loads that other jobs load too, and who they are."""
    mine = _utilisation(est, len(hierarchy.tiers))
    # Each a walk over the job's subtrees: once per job, not once per contended link class.
    alone, shared = capacity(hierarchy, placements, job), capacity(hierarchy, placements, job, util)
    out = []
    for j, beside in enumerate(neighbours(hierarchy, placements, job)):
        if mine[j] <= 0:
            continue
        others = {names[k]: util[k][j] for k in beside if k >= 0 and util[k][j] > 0}
        if others:
            out.append({"tier": j, "links": link_name(hierarchy, j), "busy": mine[j], "shared_with": others,
                        "capacity_alone": alone[j], "capacity_shared": shared[j]})
    return out
