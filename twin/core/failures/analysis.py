"""Failure analysis of one scenario: per-class costs, fleet goodput, ranking, redundancy.

For every (component group, failure mode) class of the inventory: the rate (defaults
from ``rates.py``, overridable), the job's outcome and its cost per event (``impact.py``,
evaluated through the performance model once per class: identical components share one
evaluation by symmetry). From them:

- interruptions: Lambda = sum of the rates of the classes that crash the job;
  MTBI = 1/Lambda; the checkpoint interval is Daly's optimum for the blocking checkpoint
  write time (unless stated) and the effective training time of the checkpoint/restart
  cycle is Daly's (``goodput.py``) with the rate-weighted mean restart time;
- degraded running, shrunk running and planned maintenance cost further full-speed
  seconds per wall second: ETT = Daly's useful fraction x (1 - those fractions);
- the ranking orders component groups by expected lost job-hours per day;
- redundancy variants (an extra spine, hot spare nodes, co-packaged optics, elastic data
  parallelism) re-run the analysis to show which buys the most goodput;
- Monte-Carlo (``montecarlo.py``) follows spares and overlapping events over a horizon.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from twin.core.errors import SpecError, TwinError
from twin.core.failures import montecarlo
from twin.core.failures.components import ComponentGroup, FailureMode, merge_modes
from twin.core.failures.failure_rates import NODE_COMPONENTS, REPAIR_H, planned_per_day, rate_set_scale
from twin.core.failures.failure_spec import STORAGE_BYTES_PER_S_PER_GPU, FailureSpec, MonteCarloSpec
from twin.core.failures.goodput import cycle_breakdown, daly_interval, young_interval
from twin.core.failures.impact import (
    CostContext,
    DegradedRun,
    ImpactEvaluator,
    Outcome,
    StepModel,
    decide,
    link_headroom,
)
from twin.core.failures.injections import injection_mode, uplink_capacity
from twin.core.specs import Optics, Scenario
from twin.core.units import DAY_S, HOUR_S
from twin.core.workload import total_params

YEAR_S = 365.0 * DAY_S
# Interval used to cost injected failures when no failure class has a rate (nothing to
# optimise against): one hour, a common production setting (stated, override
# failures.checkpoint.interval_s).
FALLBACK_INTERVAL_S = HOUR_S


@dataclass(frozen=True, slots=True)
class Inventory:
    """Component groups and their failure modes, as the plugins and the core describe them."""

    groups: tuple[ComponentGroup, ...]
    modes: tuple[FailureMode, ...]
    notes: tuple[str, ...] = ()


Collector = Callable[[Scenario], Inventory]


@dataclass(slots=True)
class FailureClass:
    """One (component group, failure mode) class: its rate and the job's outcome."""

    group: ComponentGroup
    mode: FailureMode
    annual_rate: float | None
    rate_source: str
    repair_s: float
    outcome: Outcome | None = None

    @property
    def events_per_s(self) -> float:
        """Events per second over all members of the group (0 without a rate)."""
        return self.group.count * (self.annual_rate or 0.0) / YEAR_S

    @property
    def cost_s(self) -> float:
        """Full-speed seconds lost per event."""
        return self.outcome.chosen.cost_s if self.outcome else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        out: dict[str, Any] = {"component": self.group.name, "mode": self.mode.name, "effect": self.mode.effect,
                               "count": self.group.count, "annual_rate_per_unit": self.annual_rate,
                               "rate_source": self.rate_source, "events_per_day": self.events_per_s * DAY_S,
                               "repair_h": self.repair_s / HOUR_S,
                               "expected_cost_h_per_day": self.events_per_s * DAY_S * self.cost_s / HOUR_S}
        if self.outcome is not None:
            out.update(self.outcome.to_dict())
        return out


@dataclass(slots=True)
class FailureReport:
    """Everything ``twin failures`` reports for one scenario."""

    scenario: str
    num_gpus: int
    nominal: DegradedRun
    inventory: Inventory
    classes: list[FailureClass]
    checkpoint: dict[str, Any]
    figures: dict[str, Any]
    injections: list[dict[str, Any]] = field(default_factory=list)
    ranking: list[dict[str, Any]] | None = None
    pairs: list[dict[str, Any]] | None = None
    redundancy: list[dict[str, Any]] | None = None
    monte_carlo: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    evaluations: int = 0
    elapsed_s: float = 0.0

    @property
    def effective_training_time_pct(self) -> float:
        """Effective training time, percent."""
        return float(self.figures["effective_training_time_pct"])

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        out: dict[str, Any] = {"scenario": self.scenario, "num_gpus": self.num_gpus,
                               "step_time_s": self.nominal.step_time_s, "tokens_per_s": self.nominal.tokens_per_s}
        out.update(self.figures)
        out["checkpoint"] = dict(self.checkpoint)
        out["inventory"] = [g.to_dict() for g in self.inventory.groups]
        out["classes"] = [c.to_dict() for c in self.classes]
        out["injections"] = list(self.injections)
        for key in ("ranking", "pairs", "redundancy", "monte_carlo"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out["notes"] = list(self.notes)
        out["evaluations"] = self.evaluations
        out["elapsed_s"] = self.elapsed_s
        return out


# --------------------------------------------------------------------------- rates
def _check_rate_keys(spec: FailureSpec, groups: Sequence[ComponentGroup], modes: Sequence[FailureMode]) -> None:
    names = {g.name for g in groups}
    mode_keys = {m.key for m in modes}
    for key in spec.rates:
        if ":" in key:
            if key not in mode_keys:
                comp = key.split(":", 1)[0]
                own = sorted(m.name for m in modes if m.component == comp)
                hint = f"modes of {comp}: {', '.join(own)}" if own else f"components: {', '.join(sorted(names))}"
                raise SpecError(f"failures.rates.{key}", f"unknown component:mode; {hint}")
        elif key not in names:
            raise SpecError(f"failures.rates.{key}", f"unknown component; one of: {', '.join(sorted(names))}")


def _rates(spec: FailureSpec, groups: Sequence[ComponentGroup],
           modes: Sequence[FailureMode]) -> dict[tuple[str, str], tuple[float | None, str]]:
    kinds = {g.name: g.kind for g in groups}
    node_scale = rate_set_scale(spec.rate_set)
    out: dict[tuple[str, str], tuple[float | None, str]] = {}
    for m in modes:
        rate = m.annual_rate
        src = m.rate_source
        if rate is not None:
            rate *= spec.rate_scale
            if kinds.get(m.component) in NODE_COMPONENTS and node_scale != 1.0:
                rate *= node_scale
                src = f"{src}; scaled to {spec.rate_set} ({node_scale:.2f}x)"
            if spec.rate_scale != 1.0:
                src = f"{src}; x{spec.rate_scale} (failures.rate_scale)"
        out[(m.component, m.name)] = (rate, src)
    for key, value in spec.rates.items():
        if ":" in key:
            comp, name = key.split(":", 1)
            out[(comp, name)] = (value, f"failures.rates.{key}")
            continue
        own = [m for m in modes if m.component == key]
        known = [m for m in own if out[(key, m.name)][0]]
        total = sum(out[(key, m.name)][0] or 0.0 for m in known)
        if total > 0:
            for m in known:
                out[(key, m.name)] = ((out[(key, m.name)][0] or 0.0) * value / total,
                                      f"failures.rates.{key} (split like the defaults)")
        else:
            targets = [m for m in own if m.effect == "down"] or own
            for m in targets:
                out[(key, m.name)] = (value / len(targets), f"failures.rates.{key}")
    return out


def _repair_s(spec: FailureSpec, group: ComponentGroup, mode: FailureMode) -> float:
    for key in (mode.key, group.name, group.kind, mode.effect):
        if key in spec.repair_h:
            return spec.repair_h[key] * HOUR_S
    return mode.repair_h * HOUR_S


# --------------------------------------------------------------------------- checkpoint
def checkpoint_figures(scenario: Scenario, spec: FailureSpec) -> dict[str, Any]:
    """Checkpoint size, blocking write time, background write time and load time."""
    cp = spec.checkpoint
    n = scenario.cluster.num_gpus
    params = total_params(scenario.model)
    size = cp.size_bytes or params * cp.bytes_per_param
    storage = cp.storage_GBps * 1e9 if cp.storage_GBps else STORAGE_BYTES_PER_S_PER_GPU * n
    read = cp.read_GBps * 1e9 if cp.read_GBps else storage
    write = size / storage
    plan = scenario.plan
    # Sharded states (distributed optimizer, ZeRO, FSDP): every GPU writes 1/N; otherwise
    # one data-parallel replica writes them.
    writers = n if plan.optimizer_sharding != "none" else plan.tp * plan.pp * plan.cp
    blocking = size / writers / (cp.host_copy_GBps * 1e9) if cp.asynchronous else write
    return {"parameters": params, "size_bytes": size, "size_tb": size / 1e12, "bytes_per_param": size / params,
            "storage_GBps": storage / 1e9, "write_s": write, "blocking_write_s": blocking,
            "load_s": size / read, "asynchronous": cp.asynchronous,
            "source": "parameters x 14 B (fp32 master + Adam m, v + 16-bit weights; failures.yaml "
                      "bloom-176b-checkpoint) over storage at 2 TB/s per 16,384 GPUs (llama3-checkpoint-storage)"}


# --------------------------------------------------------------------------- analysis
def _cost_context(spec: FailureSpec, ckpt: dict[str, Any], interval: float) -> CostContext:
    r = spec.restart
    return CostContext(interval_s=interval, write_s=ckpt["blocking_write_s"], load_s=ckpt["load_s"],
                       detection_s=r.detection_s, reschedule_s=r.reschedule_s, hot_spare_s=r.hot_spare_s,
                       init_s=r.init_s, spare_nodes=spec.spare_nodes, elastic=spec.elastic)


def _interval(spec: FailureSpec, ckpt: dict[str, Any], step_s: float,
              rate: float) -> tuple[float, float, float]:
    """(interval used, optimal interval, Young) for interruption rate ``rate`` per second.

    The optimum is Daly's, rounded to whole steps (checkpoints are taken between steps)
    and, for asynchronous checkpoints, no shorter than the background write (the next
    checkpoint waits for the previous one to reach storage).
    """
    write = ckpt["blocking_write_s"]
    mtbi = 1.0 / rate if rate > 0 else math.inf
    daly, young = daly_interval(write, mtbi), young_interval(write, mtbi)
    best = daly
    if math.isfinite(daly):
        floor = max(step_s, ckpt["write_s"] if ckpt["asynchronous"] else 0.0)
        best = max(1, round(max(daly, floor) / step_s)) * step_s
    used = spec.checkpoint.interval_s or (best if math.isfinite(best) else FALLBACK_INTERVAL_S)
    return used, best, young


def _decide_all(classes: Sequence[FailureClass], ev: ImpactEvaluator, ctx: CostContext) -> None:
    for c in classes:
        c.outcome = decide(c.mode, ev, ctx, c.repair_s)


def analyze(model: StepModel, scenario: Scenario, spec: FailureSpec, collect: Collector, *, rank: bool = False,
            pairs: bool = False, redundancy: bool = False, monte_carlo: MonteCarloSpec | None = None,
            mapper: montecarlo.Mapper | None = None) -> FailureReport:
    """Analyse ``scenario`` under ``spec``. See the module docstring."""
    t0 = time.perf_counter()
    inv = collect(scenario)
    modes, mode_notes = merge_modes(list(inv.modes))
    groups = {g.name: g for g in inv.groups}
    notes = list(inv.notes) + mode_notes
    _check_rate_keys(spec, inv.groups, modes)
    rates = _rates(spec, inv.groups, modes)
    ev = ImpactEvaluator(model, scenario, spec.spare_uplinks)
    ckpt = checkpoint_figures(scenario, spec)
    classes = [FailureClass(groups[m.component], m, *rates[(m.component, m.name)],
                            repair_s=_repair_s(spec, groups[m.component], m))
               for m in modes if m.component in groups]
    skipped = sorted({m.component for m in modes if m.component not in groups})
    if skipped:
        notes.append(f"failure modes for components not in the inventory ignored: {', '.join(skipped)}")

    # Outcomes depend on the interval (lost work) and the interval on which classes
    # interrupt: two passes settle it (a class flips only if degraded running stops fitting).
    step = ev.nominal.step_time_s
    crash_rate = sum(c.events_per_s for c in classes if c.mode.interrupts)
    interval, daly, young = _interval(spec, ckpt, step, crash_rate)
    ctx = _cost_context(spec, ckpt, interval)
    _decide_all(classes, ev, ctx)
    rate = sum(c.events_per_s for c in classes if c.outcome and c.outcome.interrupts)
    if abs(rate - crash_rate) > 1e-12 * max(rate, 1e-30):
        interval, daly, young = _interval(spec, ckpt, step, rate)
        ctx = _cost_context(spec, ckpt, interval)
        _decide_all(classes, ev, ctx)
    if not math.isfinite(daly) and not spec.checkpoint.interval_s:
        notes.append(f"no interrupting failure has a rate: injected failures are costed with a "
                     f"{FALLBACK_INTERVAL_S:.0f} s checkpoint interval")
    if spec.checkpoint.asynchronous and ckpt["write_s"] > interval:
        notes.append(f"asynchronous checkpoint writes ({ckpt['write_s']:.0f} s) take longer than the interval "
                     f"({interval:.0f} s): storage is the bottleneck")
    figures = _closed_form(classes, spec, ckpt, interval, daly, young, ctx, ev.nominal_run())
    raw = daly_interval(ckpt["blocking_write_s"], 1.0 / rate) if rate > 0 else math.inf
    ckpt.update(interval_s=interval, optimal_interval_s=daly, young_interval_s=young, daly_interval_s=raw,
                interval_steps=interval / step)
    report = FailureReport(scenario=scenario.name, num_gpus=scenario.cluster.num_gpus, nominal=ev.nominal_run(),
                           inventory=Inventory(tuple(inv.groups), tuple(modes), tuple(inv.notes)), classes=classes,
                           checkpoint=ckpt, figures=figures, notes=notes)
    for i, inj in enumerate(spec.inject):
        group, mode = injection_mode(inj, i, inv.groups, modes, scenario, model.hierarchy(scenario),
                                     {**REPAIR_H, **spec.repair_h})
        # Degradation injections carry their own duration; failures repair like their class.
        episode = inj.kind in ("link_degraded", "congestion", "straggler")
        repair = mode.repair_h * HOUR_S if episode else _repair_s(spec, group, mode)
        report.injections.append(_injection_result(inj.label(), group, mode, ev, ctx, spec, repair))
    if rank:
        report.ranking = ranking(classes, scenario.cluster.num_gpus)
    if pairs:
        report.pairs = pair_ranking(classes, ev)
    if redundancy:
        report.redundancy = redundancy_variants(model, scenario, spec, collect, report)
    mc = monte_carlo or spec.monte_carlo
    if mc is not None:
        report.monte_carlo = _monte_carlo(classes, spec, ckpt, interval, ctx, ev, mc, mapper, figures)
    report.evaluations = ev.evaluations
    report.elapsed_s = time.perf_counter() - t0
    return report


def _closed_form(classes: Sequence[FailureClass], spec: FailureSpec, ckpt: dict[str, Any], interval: float,
                 daly: float, young: float, ctx: CostContext, nominal: DegradedRun) -> dict[str, Any]:
    crashing = [c for c in classes if c.outcome and c.outcome.interrupts and c.events_per_s > 0]
    rate = sum(c.events_per_s for c in crashing)
    mtbi = 1.0 / rate if rate > 0 else math.inf
    restart = sum(c.events_per_s * c.outcome.chosen.downtime_s for c in crashing) / rate if rate else 0.0
    cycle = cycle_breakdown(interval, ckpt["blocking_write_s"], restart, mtbi)
    after = sum(c.events_per_s * (c.outcome.chosen.after_s + c.outcome.chosen.stall_s)
                for c in classes if c.outcome and c.events_per_s > 0)
    planned_day, planned_src = planned_per_day()
    if spec.planned_per_day is not None:
        planned_day, planned_src = spec.planned_per_day, "failures.planned_per_day"
    planned = planned_day / DAY_S * ctx.planned_restart_s
    ett = cycle.useful * max(0.0, 1.0 - after - planned)
    degraded_rate = sum(c.events_per_s for c in classes if c.outcome and not c.outcome.interrupts)
    scale = cycle.useful
    return {
        "expected_interruptions_per_day": rate * DAY_S,
        "mean_time_between_interruptions_h": mtbi / HOUR_S,
        "effective_training_time_pct": 100.0 * ett,
        "optimal_checkpoint_interval_s": daly,
        "checkpoint_interval_s": interval,
        "young_checkpoint_interval_s": young,
        "mean_restart_s": restart,
        "lost_work_per_interruption_s": interval / 2.0,
        "degraded_events_per_day": degraded_rate * DAY_S,
        "planned_interruptions_per_day": planned_day,
        "planned_source": planned_src,
        "goodput_tokens_per_s": nominal.tokens_per_s * ett,
        "time_lost_pct": {"checkpointing": 100.0 * cycle.checkpointing, "lost_work": 100.0 * cycle.lost_work,
                          "restart": 100.0 * cycle.restart, "degraded": 100.0 * scale * after,
                          "planned": 100.0 * scale * planned},
        "formula": "Daly 2006 (checkpoint/restart cycle) x (1 - degraded - planned fractions)",
    }


def _injection_result(label: str, group: ComponentGroup, mode: FailureMode, ev: ImpactEvaluator, ctx: CostContext,
                      spec: FailureSpec, repair_s: float) -> dict[str, Any]:
    outcome = decide(mode, ev, ctx, repair_s)
    nominal = ev.nominal_run()
    out: dict[str, Any] = {"injection": label, "component": group.name, "mode": mode.name, "effect": mode.effect,
                           "description": mode.description, "nominal_step_time_s": nominal.step_time_s}
    out.update(outcome.to_dict())
    if mode.degraded is not None:
        run = ev.run(mode.degraded)
        out["degraded"] = {**run.to_dict(), "impact": mode.degraded.to_dict()}
        cap = uplink_capacity(mode.degraded, spec.spare_uplinks)
        if cap is not None:
            out["uplink_capacity_fraction"] = cap
        if mode.degraded.tier_bw or mode.degraded.uplinks:
            out["links"] = link_headroom(ev.model, ev.scenario, mode.degraded, spec.spare_uplinks)
    out["step_time_s"] = outcome.chosen.run.step_time_s if outcome.chosen.run else nominal.step_time_s
    return out


# --------------------------------------------------------------------------- ranking
def ranking(classes: Sequence[FailureClass], num_gpus: int) -> list[dict[str, Any]]:
    """Component groups by expected lost job-hours per day (all their modes together)."""
    by_group: dict[str, list[FailureClass]] = {}
    for c in classes:
        by_group.setdefault(c.group.name, []).append(c)
    total = sum(c.events_per_s * c.cost_s for c in classes) or 1.0
    rows = []
    for name, cs in by_group.items():
        g = cs[0].group
        rate = sum(c.events_per_s for c in cs)
        cost = sum(c.events_per_s * c.cost_s for c in cs)
        rated = [c for c in cs if c.events_per_s > 0]
        worst = max(cs, key=lambda c: c.cost_s)
        dominant = max(rated, key=lambda c: c.events_per_s * c.cost_s) if rated else worst
        known = any(c.annual_rate is not None for c in cs)
        assert dominant.outcome is not None
        rows.append({
            "component": name, "kind": g.kind, "fabric": g.fabric, "count": g.count,
            "events_per_day": rate * DAY_S if known else None,
            "expected_cost_h_per_day": cost * DAY_S / HOUR_S if known else None,
            "expected_cost_gpu_h_per_day": cost * DAY_S / HOUR_S * num_gpus if known else None,
            "share_pct": 100.0 * cost / total if known else None,
            "cost_per_event_s": cost / rate if rate else worst.cost_s,
            "outcome": dominant.outcome.chosen.name, "slowdown": dominant.outcome.slowdown,
            "worst_mode": worst.mode.name,
            "modes": [{"mode": c.mode.name, "events_per_day": c.events_per_s * DAY_S if c.annual_rate is not None
                       else None, "cost_per_event_s": c.cost_s,
                       "outcome": c.outcome.chosen.name if c.outcome else None,
                       "slowdown": c.outcome.slowdown if c.outcome else 1.0, "rate_source": c.rate_source}
                      for c in cs],
        })
    rows.sort(key=lambda r: (r["expected_cost_h_per_day"] is None, -(r["expected_cost_h_per_day"] or 0.0),
                             -r["cost_per_event_s"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def pair_ranking(classes: Sequence[FailureClass], ev: ImpactEvaluator, top: int = 20) -> list[dict[str, Any]]:
    """Two degradations at once, placed on the same rank's path (worst case).

    Eligible: classes the job runs degraded through (re-routed links and switches,
    stragglers, degraded restarts), those with a rate when at least two have one.
    Co-occurrences per year of independent events that overlap: lambda_a lambda_b
    (D_a + D_b); extra cost per overlap: the combined slowdown beyond the worse single
    one, over the mean overlap D_a D_b / (D_a + D_b).
    """
    eligible = [c for c in classes if c.outcome and c.outcome.chosen.slow_s > 0 and c.mode.degraded is not None
                and c.outcome.chosen.throughput < 1.0]
    rated = [c for c in eligible if c.events_per_s > 0]
    if len(rated) >= 2:  # pairs of failures that happen; else show what-if pairs of all
        eligible = rated
    rows = []
    for i, a in enumerate(eligible):
        for b in eligible[i:]:
            ia, ib = a.mode.degraded, b.mode.degraded
            assert ia is not None and ib is not None and a.outcome and b.outcome
            run = ev.run(ia.combine(ib))
            sa, sb = a.outcome.slowdown, b.outcome.slowdown
            da, db = a.outcome.chosen.slow_s, b.outcome.chosen.slow_s
            la, lb = a.events_per_s, b.events_per_s
            overlaps = la * lb * (da + db) * (0.5 if a is b else 1.0)
            dur = da * db / (da + db) if da + db > 0 else 0.0
            extra = max(0.0, (1.0 - 1.0 / run.slowdown) - max(1.0 - 1.0 / sa, 1.0 - 1.0 / sb)) * dur
            rows.append({"pair": [f"{a.group.name}:{a.mode.name}", f"{b.group.name}:{b.mode.name}"],
                         "slowdown": run.slowdown, "slowdowns_alone": [sa, sb], "memory_fits": run.fits,
                         "overlaps_per_year": overlaps * YEAR_S,
                         "expected_extra_cost_h_per_day": overlaps * extra * DAY_S / HOUR_S})
    rows.sort(key=lambda r: (-r["expected_extra_cost_h_per_day"], -r["slowdown"]))
    return rows[:top]


# --------------------------------------------------------------------------- redundancy
def redundancy_variants(model: StepModel, scenario: Scenario, spec: FailureSpec, collect: Collector,
                        base: FailureReport) -> list[dict[str, Any]]:
    """Which redundancy buys the most goodput: re-run the analysis per variant."""
    variants: list[tuple[str, str, Scenario, FailureSpec, dict[str, Any]]] = []
    gpn = scenario.cluster.gpus_per_node
    leaf_links = [g for g in base.inventory.groups if g.kind == "link" and g.attrs.get("level") == 0]
    spines = [g for g in base.inventory.groups if g.kind == "switch" and g.attrs.get("level") == 1]
    if leaf_links and spines:
        g = leaf_links[0]
        per_upper = float(g.attrs.get("upper_switches_per_pod", 1.0))
        spare = math.ceil(float(g.attrs.get("uplinks_per_switch", 1.0)) / per_upper)
        added = max(1, round(spines[0].count / per_upper))
        variants.append(("extra_spine", f"one more {spines[0].name.split('.', 1)[1]} per pod: {spare:g} spare "
                                        f"uplink(s) per switch absorb a link or switch loss",
                         scenario, dataclasses.replace(spec, spare_uplinks=spec.spare_uplinks + spare),
                         {"switches_added": added}))
    node_rate = sum(c.events_per_s * c.mode.nodes_lost for c in base.classes
                    if c.outcome and c.outcome.chosen.name == "restart_replace")
    in_repair = sum(c.events_per_s * c.mode.nodes_lost * c.repair_s for c in base.classes
                    if c.outcome and c.outcome.chosen.name == "restart_replace")
    if node_rate > 0 and not spec.spare_nodes:
        k = math.ceil(in_repair) + 1  # Little's law: mean nodes in repair, plus one
        variants.append(("hot_spares", f"{k} hot spare node(s) (Little's law: {in_repair:.1f} nodes in repair on "
                                       "average): no rescheduling wait on a node failure",
                         scenario, dataclasses.replace(spec, spare_nodes=k), {"gpus_added": k * gpn}))
    c = scenario.cluster
    if c.scale_out is not None and (c.optics is None or c.optics.kind != "cpo"):
        cpo = dataclasses.replace(scenario, cluster=dataclasses.replace(c, optics=Optics(kind="cpo")))
        try:
            model.validate(cpo)
            variants.append(("cpo", "co-packaged optics instead of pluggable transceivers (switch radix and link "
                                    "failure rate from the optics plugin)", cpo, spec, {}))
        except TwinError as err:
            base.notes.append(f"redundancy variant cpo skipped: {err}")
    if not spec.elastic:
        variants.append(("elastic", "elastic data parallelism: shrink instead of waiting when no replacement exists",
                         scenario, dataclasses.replace(spec, elastic=True), {}))
    rows = []
    base_ett = base.effective_training_time_pct
    base_good = base.figures["goodput_tokens_per_s"]
    for name, what, scn, sp, cost in variants:
        rep = analyze(model, scn, dataclasses.replace(sp, inject=(), monte_carlo=None), collect)
        good = rep.figures["goodput_tokens_per_s"]
        owned = scn.cluster.num_gpus + cost.get("gpus_added", 0)
        rows.append({"variant": name, "description": what, "cost": cost,
                     "effective_training_time_pct": rep.effective_training_time_pct,
                     "delta_ett_pct_points": rep.effective_training_time_pct - base_ett,
                     "expected_interruptions_per_day": rep.figures["expected_interruptions_per_day"],
                     "step_time_s": rep.nominal.step_time_s, "goodput_tokens_per_s": good,
                     "goodput_gain_pct": 100.0 * (good / base_good - 1.0) if base_good else 0.0,
                     "goodput_per_gpu_owned_gain_pct": 100.0 * (good / owned / (base_good / scn.cluster.num_gpus)
                                                                - 1.0) if base_good else 0.0})
    rows.sort(key=lambda r: -r["goodput_per_gpu_owned_gain_pct"])
    return rows


# --------------------------------------------------------------------------- Monte-Carlo
def simulation_spec(classes: Iterable[FailureClass], spec: FailureSpec, ckpt: dict[str, Any], interval: float,
                    ctx: CostContext, ev: ImpactEvaluator, horizon_s: float) -> montecarlo.SimulationSpec:
    """The event classes of the simulation (primary outcome with a spare, fallback without)."""
    events = []
    finite_spares = spec.spare_nodes is not None
    no_spare_ctx = dataclasses.replace(ctx, spare_nodes=0)
    for c in classes:
        if c.events_per_s <= 0 or c.outcome is None:
            continue
        ch = c.outcome.chosen
        nodes = math.ceil(c.mode.nodes_lost) if ch.name in ("restart_replace", "drain_and_replace") else 0
        fb = decide(c.mode, ev, no_spare_ctx, c.repair_s).chosen if finite_spares and nodes else ch
        events.append(montecarlo.EventClass(
            name=f"{c.group.name}:{c.mode.name}", rate_per_s=c.events_per_s, interrupts=c.outcome.interrupts,
            downtime_s=ch.downtime_s + ch.extra_s, slow_s=ch.slow_s, throughput=ch.throughput, stall_s=ch.stall_s,
            nodes=nodes if finite_spares else 0, repair_s=c.repair_s,
            fallback_downtime_s=fb.downtime_s + fb.extra_s, fallback_slow_s=fb.slow_s,
            fallback_throughput=fb.throughput))
    planned_day = spec.planned_per_day if spec.planned_per_day is not None else planned_per_day()[0]
    if planned_day > 0:
        events.append(montecarlo.EventClass("planned", planned_day / DAY_S, interrupts=False,
                                            downtime_s=ctx.planned_restart_s, planned=True))
    return montecarlo.SimulationSpec(classes=tuple(events), interval_s=interval, write_s=ckpt["blocking_write_s"],
                                     horizon_s=horizon_s, spare_nodes=spec.spare_nodes)


def _monte_carlo(classes: Sequence[FailureClass], spec: FailureSpec, ckpt: dict[str, Any], interval: float,
                 ctx: CostContext, ev: ImpactEvaluator, mc: MonteCarloSpec, mapper: montecarlo.Mapper | None,
                 figures: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    sim = simulation_spec(classes, spec, ckpt, interval, ctx, ev, mc.horizon_days * DAY_S)
    result = montecarlo.run(sim, mc.trials, mc.batch_trials, mc.seed, mapper)
    out = result.summary()
    out["closed_form_effective_training_time_pct"] = figures["effective_training_time_pct"]
    out["spare_nodes"] = spec.spare_nodes
    out["elapsed_s"] = time.perf_counter() - t0
    return out

