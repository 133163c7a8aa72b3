"""What a failure does to the job: degraded step time, memory after resharding, outcome.

The degraded step time comes from the performance model itself, not a separate formula:

- interconnect failures become a degraded tier hierarchy (``twin.core.conditions``: bandwidth
  factors, or oversubscription raised by the uplinks lost at a switch), evaluated by the same
  driver with the failure as an input (``Conditions(impact=...)``): the collective model then
  slows exactly the collectives whose groups cross the degraded tier, by the worst link of
  their ring or tree, and the synchronous step waits for them (every rank waits for the
  slowest at the next collective); the scenario's strategies are the ones that run;
- device failures (a throttled GPU, slow HBM, a smaller CXL pool) become the slowest GPU's
  peaks (``twin.core.conditions.degrade_cluster``). One slow GPU slows its
  pipeline stage for every micro-batch, but not the pipeline fill and drain of the other
  stages, so the straggler step keeps the nominal bubble (Narayanan et al. 2021: the
  steady state runs at the pace of the slowest stage);
- shrinking (elastic data parallelism) drops the data-parallel replicas that contain the
  lost nodes and re-evaluates the smaller job, memory included: ZeRO/FSDP shards grow
  as dp falls, and the plan may no longer fit.

The outcome is the cheapest feasible option in expected lost full-speed seconds:
continue degraded, restart on a replacement, restart degraded on the same hardware,
shrink, or wait for the repair (a job restarts from its last checkpoint whenever the
failure crashes it: on average half a checkpoint interval of work is lost).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from twin.core.conditions import Conditions, degrade_hierarchy
from twin.core.contention import link_name
from twin.core.errors import TwinError
from twin.core.estimate import Estimate
from twin.core.failures.components import FailureMode, Impact
from twin.core.specs import Scenario
from twin.core.topology import Hierarchy
from twin.core.units import HOUR_S


@dataclass(frozen=True, slots=True)
class DegradedRun:
    """One evaluation of the job under an impact."""

    step_time_s: float
    slowdown: float
    tokens_per_s: float
    fits: bool
    memory_gib: float
    breakdown: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"step_time_s": self.step_time_s, "slowdown": self.slowdown, "tokens_per_s": self.tokens_per_s,
                "memory_fits": self.fits, "memory_gib": self.memory_gib, "breakdown": self.breakdown}


def _breakdown(est: Estimate) -> dict[str, Any]:
    bd = est.breakdown
    return {"compute_s": bd.compute_s, "exposed_comm_s": dict(bd.exposed_comm_s), "bubble_s": bd.bubble_s,
            "optimizer_s": bd.optimizer_s, "offload_s": bd.offload_s}


class StepModel(Protocol):
    """What failure analysis needs of the step model: the driver (``TwinModel``) or the facade
    (``twin.engine.Engine``), which have these methods.
    """

    def evaluate(self, scenario: Scenario, *, validate: bool = True, report: bool = True,
                 conditions: Conditions = ...) -> Estimate:
        """One step of ``scenario`` under ``conditions``."""

    def validate(self, scenario: Scenario) -> None:
        """Raise the first rule ``scenario`` breaks."""

    def hierarchy(self, scenario: Scenario, conditions: Conditions = ...) -> Hierarchy:
        """The tier hierarchy ``scenario`` is evaluated on."""


class ImpactEvaluator:
    """Evaluates impacts against one nominal scenario (memoised: symmetric classes share results)."""

    def __init__(self, model: StepModel, scenario: Scenario, spare_uplinks: float = 0.0) -> None:
        self.model = model
        self.scenario = scenario
        self.spare_uplinks = spare_uplinks
        self.nominal = model.evaluate(scenario, validate=False, report=False)
        self._cache: dict[Impact, DegradedRun] = {}
        self._shrink: dict[int, tuple[DegradedRun | None, str]] = {}
        self.evaluations = 1

    def nominal_run(self) -> DegradedRun:
        """The healthy job."""
        est = self.nominal
        return DegradedRun(est.step_time_s, 1.0, est.tokens_per_s, est.fits, est.memory.total / 2**30,
                           _breakdown(est))

    def run(self, impact: Impact) -> DegradedRun:
        """Step time, slowdown and memory of the job under ``impact``."""
        if impact.is_identity or impact == Impact(stall_s=impact.stall_s, note=impact.note):
            return self.nominal_run()
        hit = self._cache.get(impact)
        if hit is not None:
            return hit
        est = self.model.evaluate(self.scenario, validate=False, report=False,
                                  conditions=Conditions(impact=impact, spare_uplinks=self.spare_uplinks))
        self.evaluations += 1
        step = est.step_time_s
        if impact.compute != 1.0 or impact.hbm != 1.0:
            # One slow GPU: the pipeline's steady state runs at its pace, the fill/drain of
            # the other stages does not (see the module docstring).
            step -= max(0.0, est.breakdown.bubble_s - self.nominal.breakdown.bubble_s)
        nominal = self.nominal.step_time_s
        tokens = self.nominal.tokens_per_s * nominal / step
        run = DegradedRun(step, step / nominal, tokens, est.fits, est.memory.total / 2**30, _breakdown(est))
        self._cache[impact] = run
        return run

    def shrink(self, nodes_lost: float) -> tuple[DegradedRun | None, str]:
        """The job without the data-parallel replicas holding ``nodes_lost`` nodes (elastic DP)."""
        key = math.ceil(nodes_lost)
        if key in self._shrink:
            return self._shrink[key]
        result = self._shrink_uncached(key)
        self._shrink[key] = result
        return result

    def _shrink_uncached(self, nodes: int) -> tuple[DegradedRun | None, str]:
        scn = self.scenario
        plan, cluster = scn.plan, scn.cluster
        replica = plan.tp * plan.pp * plan.cp
        dp = scn.dp
        per_node = max(1, cluster.gpus_per_node // (plan.tp * plan.cp))
        lost = min(dp, nodes * per_node)
        dp2 = dp - lost
        if dp2 < 1:
            return None, f"losing {nodes} node(s) leaves no data-parallel replica (dp={dp})"
        gbs = plan.gbs
        note = ""
        if gbs % (plan.mbs * dp2):
            gbs = scn.microbatches * plan.mbs * dp2
            note = f"; global batch {plan.gbs} -> {gbs} (same micro-batches per replica)"
        plan2 = dataclasses.replace(plan, dp=None if plan.dp is None else dp2, gbs=gbs)
        scn2 = dataclasses.replace(scn, cluster=dataclasses.replace(cluster, num_gpus=dp2 * replica), plan=plan2)
        try:
            self.model.validate(scn2)
            est = self.model.evaluate(scn2, validate=False, report=False)
        except TwinError as err:
            return None, f"the shrunk plan is invalid: {err}"
        self.evaluations += 1
        tokens = est.tokens_per_s
        run = DegradedRun(est.step_time_s, self.nominal.tokens_per_s / tokens, tokens, est.fits,
                          est.memory.total / 2**30, _breakdown(est))
        if not est.fits:
            return None, (f"dp {dp} -> {dp2}: does not fit after resharding "
                          f"({run.memory_gib:.1f} GiB of {est.memory.capacity / 2**30:.0f} GiB)")
        return run, f"dp {dp} -> {dp2} ({lost} replica(s) dropped), {run.memory_gib:.1f} GiB per GPU{note}"


@dataclass(frozen=True, slots=True)
class CostContext:
    """Checkpointing and restart figures every option is costed with."""

    interval_s: float
    write_s: float
    load_s: float
    detection_s: float | None
    reschedule_s: float
    hot_spare_s: float
    init_s: float
    spare_nodes: int | None
    elastic: bool

    def detection(self, mode: FailureMode) -> float:
        """Detection time of ``mode`` (a scenario-wide override wins)."""
        return mode.detection_s if self.detection_s is None else self.detection_s

    def restart_same_s(self, mode: FailureMode) -> float:
        """Restart on the same nodes: detect, initialise, load the checkpoint."""
        return self.detection(mode) + self.init_s + self.load_s

    def restart_replace_s(self, mode: FailureMode) -> float:
        """Restart on a replacement: a hot spare when the job holds some, else the pool."""
        swap = self.hot_spare_s if self.spare_nodes else self.reschedule_s
        return self.detection(mode) + swap + self.init_s + self.load_s

    def replacement_available(self, nodes: float) -> bool:
        """Whether replacements exist (closed form: spares are assumed back from repair)."""
        return self.spare_nodes is None or self.spare_nodes >= math.ceil(nodes)

    @property
    def planned_restart_s(self) -> float:
        """A planned restart: checkpoint, then relaunch (nothing to detect, nothing lost)."""
        return self.write_s + self.init_s + self.load_s


@dataclass(frozen=True, slots=True)
class Option:
    """One way the job can go on after a failure, and what it costs.

    ``downtime_s``: wall time not training (detection + restart, or waiting for a repair);
    ``lost_work_s``: work redone since the last checkpoint; ``slow_s``: wall time at
    ``throughput`` of full speed afterwards; ``extra_s``: a planned restart to return to
    full capability (checkpoint + relaunch); ``stall_s``: a one-off pause.
    """

    name: str
    downtime_s: float = 0.0
    lost_work_s: float = 0.0
    slow_s: float = 0.0
    throughput: float = 1.0
    extra_s: float = 0.0
    stall_s: float = 0.0
    detail: str = ""
    run: DegradedRun | None = None

    @property
    def after_s(self) -> float:
        """Full-speed seconds lost after the job resumes (slow period + planned restart)."""
        return self.slow_s * (1.0 - self.throughput) + self.extra_s

    @property
    def cost_s(self) -> float:
        """Expected full-speed seconds lost per event."""
        return self.downtime_s + self.lost_work_s + self.after_s + self.stall_s

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        out: dict[str, Any] = {"option": self.name, "cost_s": self.cost_s, "downtime_s": self.downtime_s,
                               "lost_work_s": self.lost_work_s, "slow_s": self.slow_s,
                               "throughput_fraction": self.throughput, "extra_s": self.extra_s,
                               "stall_s": self.stall_s, "detail": self.detail}
        if self.run is not None:
            out["step_time_s"] = self.run.step_time_s
            out["memory_fits"] = self.run.fits
        return out


@dataclass(frozen=True, slots=True)
class Outcome:
    """The chosen option for one failure, the alternatives, and why others were out."""

    mode: FailureMode
    interrupts: bool
    chosen: Option
    options: tuple[Option, ...]
    infeasible: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def slowdown(self) -> float:
        """Step-time ratio while the job runs after the event (1.0: full speed)."""
        return 1.0 / self.chosen.throughput if self.chosen.throughput > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"outcome": self.chosen.name, "interrupts": self.interrupts, "cost_per_event_s": self.chosen.cost_s,
                "restart_s": self.chosen.downtime_s, "lost_work_s": self.chosen.lost_work_s,
                "slowdown": self.slowdown, "chosen": self.chosen.to_dict(),
                "options": [o.to_dict() for o in self.options],
                "not_possible": [{"option": n, "why": w} for n, w in self.infeasible]}


def decide(mode: FailureMode, ev: ImpactEvaluator, ctx: CostContext, repair_s: float) -> Outcome:
    """Cost every feasible option for one event of ``mode`` and pick the cheapest."""
    options: list[Option] = []
    infeasible: list[tuple[str, str]] = []
    nodes = mode.nodes_lost
    if mode.interrupts:
        lost = ctx.interval_s / 2.0
        same = ctx.restart_same_s(mode)
        if nodes <= 0 and (mode.degraded is None or mode.degraded.is_identity):
            options.append(Option("restart", downtime_s=same, lost_work_s=lost, detail="restart on the same nodes"))
        if nodes > 0:
            if ctx.replacement_available(nodes):
                src = "hot spare" if ctx.spare_nodes else "the cluster's pool"
                options.append(Option("restart_replace", downtime_s=ctx.restart_replace_s(mode), lost_work_s=lost,
                                      detail=f"restart with {math.ceil(nodes)} node(s) from {src}"))
            else:
                infeasible.append(("restart_replace", f"needs {math.ceil(nodes)} spare node(s), "
                                                      f"the job holds {ctx.spare_nodes}"))
        if mode.degraded is not None and not (nodes <= 0 and mode.degraded.is_identity):
            run = ev.run(mode.degraded)
            if run.fits:
                options.append(Option("restart_degraded", downtime_s=same, lost_work_s=lost, slow_s=repair_s,
                                      throughput=1.0 / run.slowdown, extra_s=ctx.planned_restart_s if repair_s else 0,
                                      detail=f"restart on the same hardware, {mode.degraded.note or 'degraded'}",
                                      run=run))
            else:
                infeasible.append(("restart_degraded", "does not fit in memory degraded"))
        elif nodes > 0:
            infeasible.append(("restart_degraded", "the affected nodes cannot run the plan"))
        if nodes > 0:
            if ctx.elastic:
                run, why = ev.shrink(nodes)
                if run is not None:
                    options.append(Option("shrink", downtime_s=same, lost_work_s=lost, slow_s=repair_s,
                                          throughput=1.0 / run.slowdown, extra_s=ctx.planned_restart_s,
                                          detail=why, run=run))
                else:
                    infeasible.append(("shrink", why))
            else:
                infeasible.append(("shrink", "elastic data parallelism is off (failures.elastic)"))
            options.append(Option("restart_after_repair", downtime_s=repair_s + same, lost_work_s=lost,
                                  detail=f"wait {repair_s / HOUR_S:.1f} h for the repair, then restart"))
    else:
        impact = mode.degraded or Impact()
        run = ev.run(impact)
        if run.fits:
            options.append(Option("continue_degraded", slow_s=repair_s, throughput=1.0 / run.slowdown,
                                  stall_s=impact.stall_s, detail=impact.note or "continue", run=run))
        else:
            infeasible.append(("continue_degraded", "does not fit in memory degraded"))
        if nodes > 0 and ctx.replacement_available(nodes):
            # Drain the node at the next checkpoint (half an interval away on average).
            wait = min(repair_s, ctx.interval_s / 2.0)
            options.append(Option("drain_and_replace", slow_s=wait, throughput=1.0 / run.slowdown,
                                  extra_s=ctx.write_s + ctx.restart_replace_s(mode) - ctx.detection(mode),
                                  stall_s=impact.stall_s, run=run,
                                  detail="drain at the next checkpoint, restart on a replacement"))
        if not options:
            options.append(Option("restart_after_repair", downtime_s=repair_s + ctx.restart_same_s(mode),
                                  lost_work_s=ctx.interval_s / 2.0, detail="cannot run degraded: wait for the repair"))
    chosen = min(options, key=lambda o: o.cost_s)
    # A non-crashing failure the job cannot run with (it no longer fits) ends in a restart too.
    return Outcome(mode=mode, interrupts=mode.interrupts or chosen.lost_work_s > 0, chosen=chosen,
                   options=tuple(options), infeasible=tuple(infeasible))


def link_headroom(model: StepModel, scenario: Scenario, impact: Impact, spare_uplinks: float = 0.0) -> dict[str, Any]:
    """What ``impact`` does to the links this job loads, through the contention model: per
    link class whose capacity it cuts, the capacity kept, how busy the job keeps those links,
    and what the step pays; ``note`` says in words why it costs nothing when it does not
    (no traffic crosses them, or the job's load there fits in what is left).
    """
    nominal = model.evaluate(scenario, validate=False)
    # The links only: the same impact without what it does to the devices.
    links_only = dataclasses.replace(impact, compute=1.0, hbm=1.0, pool=1.0)
    degraded = model.evaluate(scenario, validate=False,
                              conditions=Conditions(impact=links_only, spare_uplinks=spare_uplinks))
    h0 = model.hierarchy(scenario)
    h1 = degrade_hierarchy(h0, impact, spare_uplinks)
    busy = {link.tier: min(1.0, sum(link.utilisation.values())) for link in nominal.links}
    links = []
    for j in range(len(h0.tiers)):
        kept = h1.link_capacity(j) / h0.link_capacity(j) if h0.link_capacity(j) > 0 else 1.0
        if kept >= 1.0 - 1e-12:
            continue
        links.append({"tier": j, "links": link_name(h0, j), "capacity_kept": kept, "busy": busy.get(j, 0.0)})
    cost = degraded.step_time_s - nominal.step_time_s
    if not links:
        note = "no link capacity lost"
    elif cost > 1e-9 * nominal.step_time_s:
        worst = max(links, key=lambda x: x["busy"] / max(x["capacity_kept"], 1e-12))
        note = (f"costs {cost:.4g} s per step: {worst['links']} keep {100 * worst['capacity_kept']:.0f}% of their "
                f"capacity and this job keeps them {100 * worst['busy']:.0f}% busy")
    elif all(x["busy"] == 0.0 for x in links):
        note = "no cost: none of this job's traffic crosses " + ", ".join(x["links"] for x in links)
    else:
        note = "no cost: headroom: " + "; ".join(
            f"{x['links']} keep {100 * x['capacity_kept']:.0f}% of their capacity, this job keeps them "
            f"{100 * x['busy']:.0f}% busy" for x in links if x["busy"] > 0)
    return {"links": links, "step_cost_s": cost, "note": note}
