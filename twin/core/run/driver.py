"""The driver: runs the pure step (``twin.core.step``) for one scenario or a batch of points.

:class:`TwinModel` holds the fabric models and the strategies (and a plugin's collective-cost
hook), decides which strategies a scenario runs (``twin.core.strategy_set``, in one place),
applies the network's conditions (``twin.core.conditions``: failures, other jobs' traffic,
another calibration) to the hierarchy and the devices, and remembers what is expensive and
shared by value, each in a :class:`~twin.core.run.memo.Memo` (bounded, counted:
:meth:`TwinModel.cache_stats`). One scenario (:meth:`TwinModel.evaluate`) runs the step's
functions on Python numbers; a batch (:meth:`TwinModel.evaluate_points`,
``twin.core.run.batch``) runs the very same functions on numpy arrays. Both assemble the step
with :meth:`TwinModel.assemble`: the strategies' terms, their traffic sharing links in flight
(``twin.core.contention``), the schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import energy as energy_model
from twin.core import facts as fact
from twin.core import ops
from twin.core.collectives import CollectiveCost, collective_cost, link_seconds_per_byte
from twin.core.conditions import NOMINAL, Conditions
from twin.core.contention import Flow, contended, link_loads, shares_of, traffic_profile
from twin.core.errors import PluginError, SpecError
from twin.core.estimate import Breakdown, Estimate, LinkLoad
from twin.core.facts import ClusterFacts, FabricSet
from twin.core.host import host_layer_s
from twin.core.interfaces import EvalContext, Fabric, StageTimes, Strategy, Terms, stride_of
from twin.core.intervals import IntervalFactors, IntervalTable, scenario_features
from twin.core.memory import activation_terms
from twin.core.pipelines import pairs_end_stages, rank0_params
from twin.core.point_set import PointSet, model_structure
from twin.core.results import PointResults
from twin.core.run import batch
from twin.core.run.columns import (
    GROUP_SCALARS,
    WORK_FIELDS,
    Groups,
    distinct_rows,
    expand_terms,
    merge_terms,
    point_context,
)
from twin.core.run.memo import DEFAULT_LIMIT, Memo, SpecTokens
from twin.core.run.pruning import Pruner
from twin.core.schedule import stage_params, stage_times
from twin.core.schema import freeze
from twin.core.specs import (
    GPU,
    Calibration,
    Cluster,
    Model,
    Scenario,
    Software,
    Strategies,
    validate_scenario,
)
from twin.core.step import (
    DIMENSIONS,
    PHASES,
    Flows,
    Work,
    attention_kernel_note,
    context,
    finish,
    flow_record,
    flows,
    group_shared,
    model_fwd_flops,
    strategy_terms,
    traffic_of,
    work,
)
from twin.core.strategy_set import StrategyTable
from twin.core.topology import GroupSpan, Hierarchy, place_group
from twin.core.workload import build_workload

CostOverride = Callable[[str, float, GroupSpan, Hierarchy, "str | None", Scenario], "CollectiveCost | None"]
# Where a hierarchy's memo dict keeps the driver's memos of it (collectives' own keys are (kind, tag, group)).
_HMEMOS = ("twin.core.run.driver", "hierarchy memos")
_NOT_YET = object()


def hierarchy_memos(h: Hierarchy) -> tuple[Memo[Any, Any], Memo[Any, Any]]:
    """(group spans by degrees, collective costs and link profiles by group) of ``h`` and its
    share views (``Hierarchy.with_shares`` keeps the memo dict): they live and die with it.
    """
    memo = h._memo
    got = memo.get(_HMEMOS)
    if got is None:
        got = memo[_HMEMOS] = (Memo("group spans"), Memo("collective costs", 8 * DEFAULT_LIMIT))
    return got  # type: ignore[no-any-return]


class _Costing:
    """A hierarchy view's collective costing (``EvalContext.cost_fn``): ``collective_cost``,
    remembered by value with the view's shares. Made per evaluation and not kept.
    """

    __slots__ = ("_costs", "_hierarchy", "_shares")

    def __init__(self, hierarchy: Hierarchy) -> None:
        self._hierarchy = hierarchy
        self._costs = hierarchy_memos(hierarchy)[1]
        self._shares = hierarchy.shares

    def __call__(self, op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
        key = (span._key if span._key is not None else span, op, size, algorithm, self._shares)
        costs = self._costs
        # Memo.get inlined: the hottest lookup of an evaluation (a call per collective).
        got = costs._data.get(key)
        if got is not None:
            costs.hits += 1
            return got  # type: ignore[no-any-return]
        costs.misses += 1
        return costs.put(key, collective_cost(op, size, span, self._hierarchy, algorithm))  # type: ignore[no-any-return]


@dataclass(slots=True)
class _Group:
    """What one scenario's group (the same everything but gbs and vp) shares, filled as met:
    its set-up, model states and strategies' terms, flows and link loads by batch size.
    """

    setup: tuple[Any, ...]
    shared: Any
    terms: dict[Any, Any]


class TwinModel:
    """The performance model's driver: fabrics + strategies (+ an optional collective-cost hook)."""

    def __init__(self, fabrics: FabricSet, strategies: Iterable[Strategy],
                 cost_override: CostOverride | None = None, *, builtin: Iterable[str] | None = None,
                 origins: Mapping[str, str] | None = None, intervals: IntervalTable | None = None) -> None:
        """``builtin``: the names of the built-in strategies, each its dimension's default (None:
        all of ``strategies``); the others are alternatives a scenario selects
        (``twin.core.strategy_set``). ``origins``: the plugin of each strategy, for errors.
        ``intervals``: the prediction-interval table (``twin.core.intervals``; None: estimates
        carry no interval).
        """
        self.fabrics = fabrics
        order = {p: i for i, p in enumerate(PHASES)}
        strategies = list(strategies)
        names = [s.name for s in strategies]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PluginError(f"strategy {dup[0]!r} is registered twice")
        for s in strategies:
            if s.phase not in order:
                raise PluginError(f"strategy {s.name!r} has phase {s.phase!r}; expected one of {PHASES}")
            if not s.dimension:
                raise PluginError(f"strategy {s.name!r} needs a dimension (the breakdown entry it reports)")
        self.strategies: Sequence[Strategy] = sorted(strategies, key=lambda s: order[s.phase])
        self._order = order
        self.table = StrategyTable.of(self.strategies, builtin, origins)
        self.cost_override = cost_override
        self.intervals = intervals
        self._token = SpecTokens()
        limit = DEFAULT_LIMIT
        self.memos: dict[str, Memo[Any, Any]] = {m.name: m for m in (
            Memo("strategy sets"), Memo("hierarchies"), Memo("degraded hierarchies"), Memo("devices"),
            Memo("cluster facts"), Memo("power"), Memo("fabric reports"), Memo("static rules"),
            Memo("model structures"), Memo("stages", 16 * limit), Memo("set-ups", 16 * limit),
            Memo("groups", 16 * limit, admit_second=True), Memo("stage rows", 64 * limit), Memo("intervals"))}
        m = self.memos
        self._sets, self._hierarchies, self._degraded = m["strategy sets"], m["hierarchies"], m["degraded hierarchies"]
        self._devices, self._facts, self._power = m["devices"], m["cluster facts"], m["power"]
        self._reports, self._static, self._structures = m["fabric reports"], m["static rules"], m["model structures"]
        self._stages, self._setups, self._groups = m["stages"], m["set-ups"], m["groups"]
        # Stage numbers of a batch's work keys: (block, row) into stage_blocks, columns computed together.
        self.stage_rows = m["stage rows"]
        self.stage_blocks: list[tuple[Any, ...]] = []
        self._batches = 0  # batch evaluations under way (spec tokens are renewed outside them only)

    # ---------------------------------------------------------------- bookkeeping
    def key(self, obj: Any) -> int:
        """The value token of a spec object (equal specs, equal tokens)."""
        return self._token(obj)

    def fresh(self) -> None:
        """Between evaluations: when the spec tokens are full, forget them and every memo keyed by them."""
        if self._token.full():
            self._token.reset()
            for memo in self.memos.values():
                memo.clear()
            self.stage_blocks.clear()

    def cache_stats(self) -> dict[str, dict[str, int]]:
        """Per memo: entries, limit, hits, misses, clears (the hierarchies' own memos summed)."""
        out = {name: memo.stats() for name, memo in self.memos.items()}
        for name, index in (("group spans", 0), ("collective costs", 1)):
            total = dict.fromkeys(("entries", "limit", "hits", "misses", "clears"), 0)
            for h in (*self._hierarchies._data.values(), *self._degraded._data.values()):
                memos = h._memo.get(_HMEMOS)
                if memos is not None:
                    for k, v in memos[index].stats().items():
                        total[k] += v
            out[name] = total
        return out

    # ---------------------------------------------------------------- structure
    def validate(self, scenario: Scenario) -> None:
        """Every rule: spec cross-field rules, then each fabric's own, then the strategy selection."""
        validate_scenario(scenario)
        for fab in self.cluster_fabrics(scenario.cluster):
            fab.validate(scenario.cluster, "cluster")
        if scenario.cluster.power.switch_w:  # the one power rule that needs the fabric's tiers
            self.power_facts(scenario.cluster)
        self.strategy_set(scenario.strategies)

    def strategy_set(self, selection: Strategies) -> tuple[Strategy, ...]:
        """The strategies a scenario with ``selection`` runs, in phase order (remembered by value).

        Raises ``SpecError`` naming the ``strategies`` field for a selection the registered
        strategies cannot satisfy (``twin.core.strategy_set``).
        """
        key = self._token(selection)
        sets = self._sets
        hit = sets._data.get(key)  # Memo.get inlined: asked on every evaluation
        if hit is not None:
            sets.hits += 1
        else:
            sets.misses += 1
            try:
                hit = self.table.resolve(selection, self._order)
            except SpecError as err:
                hit = err
            self._sets.put(key, hit)
        if isinstance(hit, SpecError):
            raise SpecError(hit.field, hit.rule)
        return hit  # type: ignore[no-any-return]

    def cluster_fabrics(self, cluster: Cluster) -> list[Fabric]:
        """The fabric models ``cluster`` uses (scale-up, scale-out, optics, memory pool)."""
        return fact.cluster_fabrics(self.fabrics, cluster)

    def hierarchy(self, scenario: Scenario, conditions: Conditions = NOMINAL) -> Hierarchy:
        """The tier hierarchy ``scenario`` is evaluated on under ``conditions``."""
        cal = conditions.calibration or scenario.calibration
        return self.hierarchy_of(scenario.cluster, cal, conditions)

    def hierarchy_of(self, cluster: Cluster, calibration: Calibration, conditions: Conditions = NOMINAL) -> Hierarchy:
        """The tier hierarchy of ``cluster`` with ``calibration``'s bandwidth factors, degraded by
        ``conditions``' failures (remembered by value; the capacity shares are not applied here).
        """
        cal = calibration
        key = (self._token(cluster), cal.scale_up_bandwidth, cal.scale_out_bandwidth)
        h = self._hierarchies.get(key)
        if h is None:
            h = self._hierarchies.put(key, fact.build_hierarchy(self.fabrics, cluster, cal))
        if not conditions.network:
            return h  # type: ignore[no-any-return]
        dkey = (key, conditions.key)
        degraded = self._degraded.get(dkey)
        if degraded is None:
            degraded = self._degraded.put(dkey, conditions.hierarchy(h))
        return degraded  # type: ignore[no-any-return]

    def fabric_report(self, scenario: Scenario, hierarchy: Hierarchy) -> dict[str, object]:
        """Facts each fabric model reports (power, switches, tiers), remembered per cluster and hierarchy."""
        key = (self._token(scenario.cluster), id(hierarchy))
        reports = self._reports
        hit = reports._data.get(key)  # Memo.get inlined: asked on every evaluation with a report
        if hit is not None and hit[0] is hierarchy:
            reports.hits += 1
        else:
            reports.misses += 1
            report = freeze(fact.cluster_report(self.fabrics, scenario.cluster, hierarchy))
            hit = self._reports.put(key, (hierarchy, report))
        return hit[1]  # type: ignore[no-any-return]  # read-only (schema.freeze): shared by its estimates

    def cluster_report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, object]:
        """Facts each fabric model of ``cluster`` reports (power, switches, tiers)."""
        return fact.cluster_report(self.fabrics, cluster, hierarchy)

    def optical_links(self, cluster: Cluster) -> int | None:
        """Scale-out links over optics the fabric counts itself (``twin.core.facts.optical_links``)."""
        return fact.optical_links(self.fabrics, cluster)

    def power_facts(self, cluster: Cluster) -> energy_model.PowerFacts:
        """What ``cluster``'s components draw (``twin.core.energy``; remembered by value)."""
        key = self._token(cluster)
        power = self._power
        hit = power._data.get(key)  # Memo.get inlined: asked on every evaluation
        if hit is not None:
            power.hits += 1
        else:
            power.misses += 1
            hierarchy = self.hierarchy_of(cluster, Calibration())
            hit = self._power.put(key, fact.power_facts(self.fabrics, cluster, hierarchy))
        return hit  # type: ignore[no-any-return]

    def cluster_facts(self, cluster: Cluster) -> ClusterFacts:
        """Capacity, offload bandwidth and peaks of ``cluster`` (remembered by value)."""
        key = self._token(cluster)
        hit = self._facts.get(key)
        if hit is None:
            hit = self._facts.put(key, fact.cluster_facts(self.fabrics, cluster))
        return hit  # type: ignore[no-any-return]

    def device(self, gpu: GPU, precision: str, scale: float, recipe: str = "auto", flash: bool = True,
               attention_kernel: str = "profile") -> Any:
        """Timing parameters of ``gpu`` (``twin.core.facts.device``; remembered by value)."""
        key = (self._token(gpu), precision, scale, recipe, flash, attention_kernel)
        hit = self._devices.get(key)
        if hit is None:
            hit = self._devices.put(key, fact.device(gpu, precision, scale, recipe, flash, attention_kernel))
        return hit

    def interval_factors(self, generation: str, moe: bool, stack: str, precision: str,
                         num_gpus: int) -> IntervalFactors:
        """A scenario's interval bounds as multiples of its step time (``twin.core.intervals``),
        remembered by its class features; needs ``intervals``.
        """
        assert self.intervals is not None
        table = self.intervals
        key = (generation, moe, stack, precision, num_gpus > table.max_gpus)
        memo = self.memos["intervals"]
        got = memo._data.get(key)  # Memo.get inlined: asked on every evaluation
        if got is not None:
            memo.hits += 1
            return got  # type: ignore[no-any-return]
        memo.misses += 1
        return memo.put(key, table.factors(scenario_features(generation, moe, stack, precision), num_gpus))  # type: ignore[no-any-return]

    def structure_key(self, model: Model) -> int:
        """The token of ``model``'s structure (``model_structure``): equal for models that differ in
        sequence length only, which share a batch.
        """
        key = self._token(model)
        hit = self._structures.get(key)
        if hit is None:
            hit = self._structures.put(key, self._token(model_structure(model)))
        return hit  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- costing
    def spans(self, h: Hierarchy, plan: Any, dp: int) -> dict[str, GroupSpan]:
        """Where each parallel dimension's group sits (remembered per hierarchy and degrees)."""
        memo = hierarchy_memos(h)[0]
        key = (plan.tp, plan.cp, plan.ep, plan.expert_tp, dp, plan.pp, plan.rank_order, plan.dp_shard)
        got = memo.get(key)
        if got is None:
            got = memo.put(key, {dim: place_group(*stride_of(plan, dp, dim), h) for dim in DIMENSIONS})
        return got  # type: ignore[no-any-return]

    def cost_fn(self, scenario: Scenario, hierarchy: Hierarchy) -> Callable[..., CollectiveCost]:
        """One scenario's collective costing on ``hierarchy``: the cost hook first, when a plugin has one."""
        override = self.cost_override
        if override is None:
            return _Costing(hierarchy)

        def with_override(op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
            if span.n > 1 and size > 0:
                got = override(op, size, span, hierarchy, algorithm, scenario)
                if got is not None:
                    return got
            return collective_cost(op, size, span, hierarchy, algorithm)
        return with_override

    def profile(self, span: GroupSpan, h: Hierarchy, pattern: str) -> Any:
        """``collectives.link_seconds_per_byte`` of a group, remembered with the hierarchy's costs
        (keyed by the view's shares too: a fleet's capacity view prices the links otherwise).
        """
        costs = hierarchy_memos(h)[1]
        key = (span._key if span._key is not None else span, "profile", pattern, h.shares)
        got = costs.get(key)
        if got is None:
            got = costs.put(key, link_seconds_per_byte(span, h, pattern))
        return got

    def _point(self, ctx: EvalContext, i: int) -> EvalContext:
        """Point ``i`` of a batch context as one scenario's, costed by this driver (a plugin's cost
        hook included): how a scalar-only strategy is evaluated on a batch (``step.strategy_terms``).
        """
        return point_context(ctx, i, self.cost_fn)

    # ---------------------------------------------------------------- the work of one scenario
    def stage(self, plan: Any, model: Model, dev: Any, w: Any, sw: Software) -> tuple[StageTimes, Any, Any, Any]:
        """(stage times, parameters, expert parameters, activation terms) of the bottleneck stage,
        remembered by the work of a micro-batch (degrees, micro-batch, recomputation, precision,
        device, software stack, and the schedule, which places stages on ranks).
        """
        key = (self._token(dev), self._token(model), self._token(sw), plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep,
               plan.expert_tp, plan.pp, plan.recompute, plan.recompute_layers, plan.trainable, plan.precision,
               plan.bf16_layers_start, plan.bf16_layers_end, plan.pp_first_layers, plan.pp_last_layers,
               plan.recompute_modules, plan.recipe, plan.moe_dispatcher, pairs_end_stages(plan.schedule))
        hit = self._stages.get(key)
        if hit is None:
            stage = stage_times(plan, model, dev, w, sw)
            params, expert = stage_params(plan, w, stage.layers)
            hit = self._stages.put(key, (stage, params, expert, activation_terms(plan, model, w, dev.flash)))
        return hit  # type: ignore[no-any-return]

    def setup(self, scenario: Scenario, conditions: Conditions = NOMINAL) -> tuple[Any, ...]:
        """What one scenario's evaluation needs before its batch size and sharding matter:
        cluster facts, device, workload, the bottleneck stage (times, parameters, activation
        terms), hierarchy, group spans, precision peak and model FLOPs. Remembered by value.
        """
        plan, cluster, cal, model = scenario.plan, scenario.cluster, scenario.calibration, scenario.model
        key = (self._token(cluster), self._token(model), self._token(cal), self._token(scenario.software),
               WORK_FIELDS(plan), pairs_end_stages(plan.schedule), conditions.key)
        hit = self._setups.get(key)
        if hit is None:
            hit = self._setups.put(key, self._build_setup(scenario, conditions))
        return hit  # type: ignore[no-any-return]

    def _build_setup(self, scenario: Scenario, conditions: Conditions) -> tuple[Any, ...]:
        plan, cluster, cal, model = scenario.plan, scenario.cluster, scenario.calibration, scenario.model
        facts = self.cluster_facts(cluster)
        dev = self.device(cluster.gpu, plan.precision, cal.compute_efficiency, plan.recipe,
                          scenario.software.flash_attention, scenario.software.attention_kernel)
        w = build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
        stage, params, expert, act = self.stage(plan, model, dev, w, scenario.software)
        hierarchy = self.hierarchy_of(cluster, cal, conditions)
        spans = self.spans(hierarchy, plan, scenario.dp)
        return (facts, dev, w, stage, params, expert, act, hierarchy, spans, facts.peak_tflops[plan.precision],
                model_fwd_flops(model))

    def _group(self, scenario: Scenario, conditions: Conditions) -> _Group | None:
        """The memo of ``scenario``'s group (None where nothing may be shared: a cost hook sees
        the whole scenario; a capacity view prices its own links), built on its second request.
        """
        if self.cost_override is not None or conditions.shared:
            return None
        plan, tok = scenario.plan, self._token
        gkey = (tok(scenario.model), tok(scenario.cluster), tok(scenario.calibration), tok(scenario.software),
                tok(scenario.strategies), GROUP_SCALARS(plan), tok(plan.overlap), tok(plan.offload), conditions.key)
        groups = self._groups
        group = groups._data.get(gkey)  # Memo.get inlined: asked on every evaluation
        if group is not None:
            groups.hits += 1
            return group  # type: ignore[no-any-return]
        groups.misses += 1
        if groups.admits(gkey):
            setup = self.setup(scenario, conditions)
            facts, dev, w, _stage, params, expert = setup[:6]
            group = groups.put(gkey, _Group(setup, group_shared(plan, scenario.model, scenario.dp, dev, w, facts,
                                                                 params, expert, scenario.software), {}))
        return group  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- one scenario
    def evaluate(self, scenario: Scenario, *, validate: bool = True, report: bool = True,
                 conditions: Conditions = NOMINAL) -> Estimate:
        """Predict one training step of ``scenario`` (the batch of one) under ``conditions``.

        ``report=False`` skips the fabric report (switch counts, power) and the link loads,
        which sweeps do not need. ``conditions``: the network as it differs from the design
        (failed or degraded parts, other jobs' traffic, another calibration;
        ``twin.core.conditions``).
        """
        tokens = self._token
        if tokens.size >= tokens.limit and not self._batches:  # (SpecTokens.full, inlined)
            self.fresh()  # between evaluations only: a batch's fallback evaluates inside one
        if validate:
            self.validate(scenario)
        if conditions is not NOMINAL:
            scenario = conditions.scenario(scenario)
        plan = scenario.plan
        group = self._group(scenario, conditions)
        setup = group.setup if group is not None else self.setup(scenario, conditions)
        facts, dev, w, stage, params, expert, act, hierarchy, spans, prec_peak, fwd_flops = setup
        params, expert = rank0_params(plan, params, expert, w)
        if conditions.shared:
            hierarchy = hierarchy.with_shares(conditions.capacity)
        wk = work(plan, scenario.model, scenario.dp, dev, w, stage, facts, prec_peak, scenario.cluster.num_gpus,
                  fwd_flops, params, expert, act, group.shared if group is not None else None, scenario.software)
        ctx = context(wk, scenario.model, scenario.cluster, scenario.calibration, hierarchy, spans,
                      self.cost_fn(scenario, hierarchy), 0, scenario, software=scenario.software)
        memo = group.terms if group is not None else None
        st = self.assemble(ctx, wk, self.strategy_set(scenario.strategies), memo=memo,
                           rehome=lambda h: self.cost_fn(scenario, h), alone=report)
        return self._estimate(scenario, wk, st, hierarchy, memo, report)

    def _estimate(self, scenario: Scenario, wk: Work, st: Any, hierarchy: Hierarchy,
                  memo: dict[Any, Any] | None, report: bool) -> Estimate:
        """One scenario's :class:`Estimate` from its assembled step."""
        plan, model, cluster = scenario.plan, scenario.model, scenario.cluster
        links: tuple[LinkLoad, ...] = ()
        if report:  # remembered by the group per batch size and interleaving
            links = memo.get(("links", plan.gbs, plan.vp)) if memo is not None else None
            if links is None:
                links = _link_loads(st, hierarchy, memo, plan)
        notes = st.notes + list(hierarchy.notes) + _notes(scenario, wk)
        n = cluster.num_gpus
        tokens = plan.gbs * model.seq_len
        step = st.step_s
        breakdown = Breakdown(compute_s=st.compute_s, recompute_s=st.recompute_s, exposed_comm_s=st.exposed,
                              bubble_s=st.bubble_s, optimizer_s=st.optimizer_s, offload_s=st.offload_s,
                              overlap_interference_s=st.interference_s)
        flops = wk.flops
        busy = st.compute_s + st.recompute_s + st.optimizer_s + st.interference_s
        energy, cost = energy_model.step_energy(self.power_facts(cluster), step, busy, tokens)
        return Estimate(
            scenario=scenario.name, step_time_s=step, breakdown=breakdown, memory=wk.mem,
            tokens_per_s=tokens / step, tokens_per_s_per_gpu=tokens / step / n,
            model_tflops_per_gpu=flops / step / n / 1e12,
            mfu=flops / step / n / (wk.half_peak * 1e12),
            mfu_at_precision_peak=flops / step / n / (wk.prec_peak * 1e12),
            model_flops_per_step=flops, microbatches=wk.m, dp=wk.dp, comm_issued_s=st.issued,
            bytes_per_step=st.nbytes, algorithms=st.algorithms, details=st.details,
            fabric=self.fabric_report(scenario, hierarchy) if report else {}, notes=tuple(notes),
            links=links,
            contention_s=max(0.0, step - st.alone_step_s) if report and st.alone_step_s is not None else 0.0,
            energy=energy, cost=cost, interval=None if self.intervals is None else self.interval_factors(
                cluster.gpu.generation, scenario.model.moe is not None, scenario.software.name, plan.precision,
                cluster.num_gpus).at(step))

    # ---------------------------------------------------------------- the assembly (both paths)
    def assemble(self, ctx: EvalContext, wk: Work, strategies: Sequence[Strategy], groups: Groups | None = None,
                 memo: dict[Any, Any] | None = None, rehome: Callable[[Any], Any] | None = None,
                 alone: bool = False) -> Any:
        """The step (``step.Step``) from the terms of ``strategies`` (the scenario's set, in phase
        order): the schedule, per-step terms, interference.

        A strategy that does not read the schedule (``reads_schedule = False``) gives the same
        terms to every point of a group of points that differ only in the global batch and the
        interleaving depth. ``groups``: for a batch, a context with one row per group and each
        point's group: such strategies are evaluated once per group. ``memo``: for one
        scenario, its group's terms from earlier scenarios (filled here). ``rehome``: the
        costing of a hierarchy seen with contention shares; given, traffic that shares links in
        flight is costed again with its share (``twin.core.contention``). ``alone``: also give
        the step with every strategy costed alone.
        """
        parts: list[tuple[Strategy, Terms]] = []
        for strat in strategies:
            if groups is not None and not strat.reads_schedule and strat.vectorized:
                terms = strategy_terms(strat, groups.ctx, self._point)
                if terms is not None:
                    terms = expand_terms(terms, groups.inverse)
            elif memo is not None and not strat.reads_schedule:
                terms = memo.get(strat.name, _NOT_YET)
                if terms is _NOT_YET:
                    terms = memo[strat.name] = strategy_terms(strat, ctx, self._point)
            else:
                terms = strategy_terms(strat, ctx, self._point)
            if terms is not None:
                parts.append((strat, terms))
        flow_set: Flows = ((), ())
        first = parts
        if rehome is not None and parts:
            parts, flow_set = self._contend(ctx, parts, rehome, memo, groups)
        st = finish(ctx, wk, parts, flow_set)
        if alone:
            if parts is first:
                st.alone_step_s = st.step_s
            else:
                # Determined by the group and its batch size / interleaving, like the stretches.
                key = ("alone", ctx.plan.gbs, ctx.plan.vp)
                got = memo.get(key) if memo is not None else None
                if got is None:
                    got = finish(ctx, wk, first, flow_set, breakdown=False)
                    if memo is not None:
                        memo[key] = got
                st.alone_step_s = got
        return st

    def _contend(self, ctx: EvalContext, parts: list[tuple[Strategy, Terms]], rehome: Callable[[Any], Any],
                 memo: dict[Any, Any] | None = None,
                 groups: Groups | None = None) -> tuple[list[tuple[Strategy, Terms]], Flows]:
        """The strategies' terms with traffic in flight together sharing its links
        (``twin.core.contention``): contended strategies costed again with their share.
        ``memo``: one scenario's group memo (its link profiles and, per batch size and
        interleaving, the stretches). ``groups``: a batch's groups (see :meth:`assemble`).
        """
        key = ("contention", ctx.plan.gbs, ctx.plan.vp)
        got = memo.get(key) if memo is not None else None
        if got is None:
            got = flows(ctx, parts, self._profiles(ctx, parts, memo, groups))
            if memo is not None:  # kept as plain tuples (see step.Flows)
                memo[key] = (tuple(map(flow_record, got[0])), got[1], got[2])
        flow_list, stretch, where = got
        if len(flow_list) < 2:
            return parts, (flow_list, stretch)
        if ctx.batch:
            return self._recost_batch(ctx, parts, stretch, where, rehome, groups), (flow_list, stretch)
        return self._recost_one(ctx, parts, stretch, where, rehome, memo), (flow_list, stretch)

    def _recost_one(self, ctx: EvalContext, parts: list[tuple[Strategy, Terms]], stretch: Sequence[Any],
                    where: Sequence[int], rehome: Callable[[Any], Any],
                    memo: dict[Any, Any] | None) -> list[tuple[Strategy, Terms]]:
        """One scenario's contended strategies costed again on the hierarchy seen with their shares."""
        out = list(parts)
        h, cost_fn = ctx.hierarchy, ctx.cost_fn
        try:
            for i, s in zip(where, stretch, strict=True):
                hit = contended(s)
                if not hit:
                    continue
                strat = parts[i][0]
                shares = shares_of(s, hit)
                tkey = ("terms", strat.name, shares)
                terms = memo.get(tkey, _NOT_YET) if memo is not None and not strat.reads_schedule else _NOT_YET
                if terms is _NOT_YET:
                    # The context is re-pointed, not copied: strategies read it only while evaluated.
                    ctx.hierarchy = h.with_shares(shares)  # type: ignore[union-attr]
                    ctx.cost_fn = rehome(ctx.hierarchy)
                    terms = strategy_terms(strat, ctx, self._point)
                    if memo is not None and not strat.reads_schedule:
                        memo[tkey] = terms
                if terms is not None:
                    out[i] = (strat, terms)
        finally:
            ctx.hierarchy, ctx.cost_fn = h, cost_fn
        return out

    def _recost_batch(self, ctx: EvalContext, parts: list[tuple[Strategy, Terms]], stretch: Sequence[Any],
                      where: Sequence[int], rehome: Callable[..., Any],
                      groups: Groups | None) -> list[tuple[Strategy, Terms]]:
        """A batch's contended points of each strategy costed again with their shares; the
        others keep their terms alone. A strategy that does not read the schedule gives the
        points of a group the same terms on the same view, so with ``groups`` it is costed once
        per distinct (group, shares) of the contended points, on the groups' rows.
        """
        out = list(parts)
        for i, s in zip(where, stretch, strict=True):
            hit = contended(s)
            if not hit.any():
                continue
            strat, terms = parts[i]
            shares = shares_of(s, hit)
            if groups is not None and not strat.reads_schedule and strat.vectorized:
                idx = np.flatnonzero(hit)
                first, inverse = distinct_rows(groups.inverse[idx], shares[idx])
                sel = idx[first]
                got = strategy_terms(strat, groups.rehome(groups.inverse[sel], shares[sel]), self._point)
                new = terms if got is None else merge_terms(terms, got, idx, inverse, ctx.points)
            elif hit.mean() > 0.5:  # most points: costing them all beats taking the few out
                got = strategy_terms(strat, rehome(ctx.hierarchy.with_shares(shares), None), self._point)
                new = terms if got is None else got
            else:
                idx = np.flatnonzero(hit)
                got = strategy_terms(strat, rehome(ctx.hierarchy.take(idx).with_shares(shares[idx]), idx), self._point)
                new = terms if got is None else merge_terms(terms, got, idx, None, ctx.points)
            out[i] = (strat, new)
        return out

    def _profiles(self, ctx: EvalContext, parts: Sequence[tuple[Strategy, Terms]], memo: dict[Any, Any] | None,
                  groups: Groups | None) -> list[Any]:
        """Each part's link profile (``contention.traffic_profile``; None: no traffic), remembered in
        one scenario's group memo; a batch's groups share their groups' spans and links.
        """
        profile_fn = link_seconds_per_byte if ctx.batch else self.profile
        out = []
        for strat, _ in parts:
            pkey = ("profile", strat.name)
            profile = memo.get(pkey, _NOT_YET) if memo is not None else _NOT_YET
            if profile is _NOT_YET:
                traffic = traffic_of(strat)
                if not traffic:
                    profile = None
                elif groups is not None:
                    profile = traffic_profile(traffic, groups.ctx.spans, groups.ctx.hierarchy, profile_fn)
                    profile = None if profile is None else ops.gather(profile, groups.inverse)
                else:
                    profile = traffic_profile(traffic, ctx.spans, ctx.hierarchy, profile_fn)
                if memo is not None:
                    memo[pkey] = profile
            out.append(profile)
        return out

    # ---------------------------------------------------------------- a batch
    def evaluate_points(self, points: PointSet, *, memory_headroom: float = 0.0, require_fit: bool = True,
                        validate: bool = True, prune: Pruner | None = None, sparse: bool = False,
                        conditions: Conditions = NOMINAL) -> PointResults:
        """Predict every point of ``points`` (one model; any mix of plans, sizes, clusters) under
        ``conditions``. See ``twin.core.run.batch.evaluate_points``.
        """
        self.fresh()
        self._batches += 1
        try:
            return batch.evaluate_points(self, points, memory_headroom=memory_headroom, require_fit=require_fit,
                                         validate=validate, prune=prune, sparse=sparse, conditions=conditions)
        finally:
            self._batches -= 1

    def evaluate_many(self, scenarios: Sequence[Scenario | None], *, memory_headroom: float = 0.0,
                      require_fit: bool = True, errors: Sequence[str | None] | None = None,
                      conditions: Conditions = NOMINAL) -> PointResults:
        """Predict every scenario (any mix of models, clusters and plans) on the batch path.
        See ``twin.core.run.batch.evaluate_many``.
        """
        self.fresh()
        self._batches += 1
        try:
            return batch.evaluate_many(self, scenarios, memory_headroom=memory_headroom, require_fit=require_fit,
                                       errors=errors, conditions=conditions)
        finally:
            self._batches -= 1


def _link_loads(st: Any, hierarchy: Hierarchy, memo: dict[Any, Any] | None, plan: Any) -> tuple[LinkLoad, ...]:
    """How the step's flows load each link class (remembered by the group per batch size)."""
    lkey = ("links", plan.gbs, plan.vp)
    links = memo.get(lkey) if memo is not None else None
    if links is None:
        flow_list, stretch = st.flows
        flow_list = [f if type(f) is Flow else Flow(*f) for f in flow_list]
        links = tuple(LinkLoad(**d) for d in link_loads(flow_list, stretch, hierarchy))
        if memo is not None:
            memo[lkey] = links
    return links  # type: ignore[no-any-return]


def _notes(scenario: Scenario, wk: Work) -> list[str]:
    """One scenario's own notes: host-bound, the attention kernel assumed, does not fit."""
    notes = []
    host_f, _ = host_layer_s(scenario.software, wk.w)
    if 0 < host_f >= wk.stage.layer_fwd_s:
        notes.append(f"host-bound on {scenario.software.name}: issuing a layer's forward takes "
                     f"{host_f * 1e3:.3f} ms, longer than the GPU runs it")
    kernel_note = attention_kernel_note(scenario, wk.stage)
    if kernel_note:
        notes.append(kernel_note)
    verdict = wk.mem.verdict()  # names each full tier: HBM, host DRAM, the CXL pool
    if verdict:
        notes.append(verdict)
    return notes
