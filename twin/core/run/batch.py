"""The driver's batch half: a point set through the step's functions over numpy arrays.

``evaluate_points`` codes the points that break a rule (the same rules, in the same order, as
one scenario's validation), builds each distinct cluster's facts and hierarchy once, the work
of each distinct plan shape once (``batch_work``, remembered across batches in the driver's
``stage rows`` memo), drops the points that do not fit, optionally prunes the points that
cannot be among a search's fastest (``twin.core.run.pruning``), and assembles the step of the
rest with ``TwinModel.assemble`` (``run_points``). A point the arrays cannot compute (an
extreme input) falls back to one-by-one evaluation, which gives its exact outcome.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core import energy as energy_model
from twin.core import ops
from twin.core.collectives import CollectiveCost, collective_cost
from twin.core.conditions import NOMINAL, Conditions, degrade_cluster
from twin.core.errors import _PARENS, SpecError, TwinError
from twin.core.facts import ClusterFacts
from twin.core.interfaces import EvalContext, stride_of
from twin.core.pipelines import pairs_end_stages, rank0_params
from twin.core.point_set import ColumnView, PointSet, model_rows
from twin.core.results import (
    HEADROOM,
    INTERVAL_COLUMNS,
    MEMORY_PARTS,
    MEMORY_REFUSALS,
    PRUNED,
    PointResults,
    Refusal,
    Refusals,
    arithmetic,
    estimate_columns,
    full_tier,
    zero_missing_exposed,
)
from twin.core.run.columns import (
    Driver,
    FactColumns,
    Groups,
    device_batch,
    factorize,
    group_columns,
    rows_context,
    take_points,
    take_tree,
)
from twin.core.run.pruning import PRUNE_FIRST, Pruner
from twin.core.run.stage_rows import stage_rows
from twin.core.specs import GPU, Rule, _categories, plan_rules, validate_cluster, validate_model, validate_software
from twin.core.step import DIMENSIONS, Work, context, model_fwd_flops, step_lower_bound, work
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch, place_group
from twin.core.units import GIB
from twin.core.workload import build_workload

if TYPE_CHECKING:
    from twin.core.interfaces import Strategy
    from twin.core.specs import Cluster, Model, Scenario

_BATCH_STATS = ("evaluated", "scalar_points", "groups")


def evaluate_points(model: Driver, points: PointSet, *, memory_headroom: float = 0.0, require_fit: bool = True,
                    validate: bool = True, prune: Pruner | None = None, sparse: bool = False,
                    conditions: Conditions = NOMINAL) -> PointResults:
    """Predict every point of ``points`` (one model; any mix of plans, sizes, clusters).

    A point that breaks a rule, does not fit in memory (leaving ``memory_headroom`` of HBM
    free; with ``require_fit=False`` it is evaluated anyway, and ``fits`` says), or cannot be
    evaluated gets a refusal instead of numbers. The numbers of a feasible point are those
    ``TwinModel.evaluate`` gives for it (under the same ``conditions``). ``prune``: a search
    for the ``prune.top`` fastest points (carried across calls); points that cannot be among
    them get ``PRUNED`` instead (:class:`~twin.core.run.pruning.Pruner`). ``sparse``:
    ``columns`` stay empty and a feasible point's numbers are read with
    ``PointResults.values_at`` (no full-length column per number when few points are
    evaluated); a feasible point's exposed time of a dimension none of its strategies reported
    is then NaN (0 in ``columns``).
    """
    coded = Refusals()
    out = PointResults.empty(len(points), coded, {"points": len(points), **dict.fromkeys(_BATCH_STATS, 0)})
    if sparse:
        out._pending = {}
    if len(points) == 0:
        return out
    with np.errstate(all="ignore"):
        _evaluate(model, _under(points, conditions), memory_headroom if require_fit else None, validate, coded, out,
                  prune, conditions)
    if not sparse:
        zero_missing_exposed(out)
    return out


def evaluate_many(model: Driver, scenarios: Sequence[Scenario | None], *, memory_headroom: float = 0.0,
                  require_fit: bool = True, errors: Sequence[str | Refusal | None] | None = None,
                  conditions: Conditions = NOMINAL) -> PointResults:
    """Predict every scenario (any mix of models, clusters and plans) on the batch path.

    Scenarios are grouped by model structure (models that differ in sequence length only
    share a batch), software stack and strategy selection (the structure a batch shares); the
    result has one row per scenario, in order. ``None`` entries (with their reason in
    ``errors``) are points that could not be built and keep that reason.
    """
    n = len(scenarios)
    coded = Refusals()
    out = PointResults.empty(n, coded, {"points": n, **dict.fromkeys(_BATCH_STATS, 0), "batches": 0})
    by_structure: dict[tuple[int, int, int], list[int]] = {}
    # The group of each (model, software, strategies) object triple, computed once per triple
    # (the objects are held by ``scenarios``, so their ids stay theirs during the call).
    by_ids: dict[tuple[int, int, int], list[int]] = {}
    for i, scn in enumerate(scenarios):
        if scn is None:
            err = errors[i] if errors is not None else None
            refusal = err if isinstance(err, Refusal) else Refusal("", err or "scenario: could not be built")
            out.reason_ix[i] = coded.code(refusal)
            continue
        ids = (id(scn.model), id(scn.software), id(scn.strategies))
        group = by_ids.get(ids)
        if group is None:
            group = by_ids[ids] = by_structure.setdefault(
                (model.structure_key(scn.model), model.key(scn.software), model.key(scn.strategies)), [])
        group.append(i)
    for idx in by_structure.values():
        out.stats["batches"] += 1  # point sets evaluated over arrays, each one structure
        rows = np.asarray(idx, np.int64)
        part = evaluate_points(model, PointSet.from_scenarios([scenarios[i] for i in idx]),  # type: ignore[misc]
                               memory_headroom=memory_headroom, require_fit=require_fit, conditions=conditions)
        codes = np.asarray([coded.code(r) for r in part.refusals] + [-1], np.int64)
        out.reason_ix[rows] = codes[part.reason_ix]
        for name, col in part.columns.items():
            out.put(name, rows, col)
        out.microbatches[rows] = part.microbatches
        out.dp[rows] = part.dp
        out.fits[rows] = part.fits
        for k, v in part.stats.items():
            if k != "points":
                out.stats[k] = out.stats.get(k, 0) + v
    zero_missing_exposed(out)
    return out


def _under(ps: PointSet, conditions: Conditions) -> PointSet:
    """The points with ``conditions``' calibration and devices (``Conditions.scenario``)."""
    if conditions is NOMINAL:
        return ps
    if conditions.calibration is not None:
        ps = dataclasses.replace(ps, calibrations=[conditions.calibration] * len(ps.calibrations))
    if conditions.devices:
        ps = dataclasses.replace(ps, clusters=[degrade_cluster(c, conditions.impact)  # type: ignore[arg-type]
                                               for c in ps.clusters])
    return ps


# ------------------------------------------------------------------ rules, facts, memory
def _evaluate(model: Driver, ps: PointSet, headroom: float | None, validate: bool, coded: Refusals,
              out: PointResults, prune: Pruner | None, conditions: Conditions) -> None:
    """``headroom`` None: points that do not fit are evaluated too (``out.fits`` says)."""
    strategies, unresolved = _strategies(model, ps, validate)
    bad = np.zeros(len(ps), bool)
    if validate:
        out.reason_ix[:] = _rule_codes(model, ps, coded, unresolved)
        bad = out.reason_ix >= 0
    facts, power, hierarchies, pairs = _cluster_rows(model, ps, coded, out, bad, conditions)
    idx = np.flatnonzero(~bad)
    if len(idx) == 0:
        return
    sub = ps.take(idx) if len(idx) < len(ps) else ps
    wk = batch_work(model, sub, facts)
    total = wk.mem.total
    odd = ~np.isfinite(total)
    if odd.any():
        # Where plain Python would have raised (an extreme input), the scalar path gives the
        # exact outcome of the point.
        _per_point(model, sub.take(np.flatnonzero(odd)), idx[odd], coded, out, headroom, conditions)
    fits = wk.mem.fits_leaving(headroom) & ~odd
    out.fits[idx] = fits
    if headroom is None:
        fits = ~odd
    else:
        # The refusal names the tier that is full; one that fits every tier but not the headroom
        # left free is refused for the headroom.
        tier = full_tier(wk.mem, None)
        for k, refusal in enumerate(MEMORY_REFUSALS):
            where = ~fits & ~odd & (tier == k)
            if where.any():
                out.reason_ix[idx[where]] = coded.code(refusal)
        tight = ~fits & ~odd & (tier < 0)
        if tight.any():
            out.reason_ix[idx[tight]] = coded.code(HEADROOM)
    keep = np.flatnonzero(fits)
    if len(keep) == 0:
        return
    if len(keep) < len(idx):
        sub, wk = take_points(sub, wk, keep)
        idx = idx[keep]
    run = _Run(model, hierarchies, pairs, strategies, coded, out, headroom, power, conditions)
    if prune is None:
        run(sub, wk, idx)
    else:
        _prune_and_run(run, sub, wk, idx, prune)


def _strategies(model: Driver, ps: PointSet, validate: bool) -> tuple[tuple[Strategy, ...], Refusal | None]:
    """(the strategies the batch runs, the refusal of a selection that cannot be resolved)."""
    try:
        return model.strategy_set(ps.strategies), None
    except SpecError as err:
        if not validate:
            raise
        return (), Refusal.of(err)


def _rule_codes(model: Driver, ps: PointSet, coded: Refusals, unresolved: Refusal | None) -> np.ndarray:
    """Per point the code of the first rule it breaks (-1: none), in ``validate_scenario``'s
    order: the stack's rule, the cluster's and model's, the plan's, each fabric's, the
    selection.
    """
    n = len(ps)
    cix = ps.cluster_ix
    stack = None
    try:  # the stack is the batch's, and its rule comes first (validate_scenario)
        validate_software(ps.software)
    except SpecError as err:
        stack = Refusal.of(err)
    # Per (cluster, model) pair: the points' models differ in sequence length at most.
    models = ps.models or (ps.model,)
    pair = cix if ps.model_ix is None else cix * len(models) + ps.model_ix
    statics = [static_refusals(model, c, m) for c in ps.clusters for m in models]
    before = np.asarray([-1 if s[0] is None else coded.code(s[0]) for s in statics], np.int64)[pair]
    after = np.asarray([-1 if s[1] is None else coded.code(s[1]) for s in statics], np.int64)[pair]
    code = before.copy() if stack is None else np.full(n, coded.code(stack), np.int64)
    open_ = code < 0  # points no rule has coded yet (kept as rules code them, not recomputed per rule)
    view = ColumnView(ps.clusters, cix)
    for field_path, broken, template, values in plan_rules(ps.plan, ps.model_rows(), view):
        fresh = np.asarray(broken, bool) & open_
        if ops.any_(fresh):
            _code_rule(Rule(field_path, broken, template, values()), fresh, code, coded)
            open_ &= ~fresh
    code = np.where(code < 0, after, code)
    if unresolved is not None:  # the selection is the batch's: every point still valid gets it
        code = np.where(code < 0, coded.code(unresolved), code)
    return code


def static_refusals(model: Driver, cluster: Cluster, m: Model) -> tuple[Refusal | None, Refusal | None]:
    """(the first cluster/model rule broken, the first fabric rule broken) of a pair (remembered)."""
    memo = model.memos["static rules"]
    key = (model.key(cluster), model.key(m))
    hit = memo.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    before = after = None
    try:
        validate_cluster(cluster)
        validate_model(m)
    except TwinError as err:
        before = Refusal.of(err)
    if before is None:
        try:
            for fab in model.cluster_fabrics(cluster):
                fab.validate(cluster, "cluster")
            if cluster.power.switch_w:
                model.power_facts(cluster)
        except TwinError as err:
            after = Refusal.of(err)
    return memo.put(key, (before, after))  # type: ignore[no-any-return]


def _code_rule(rule: Any, fresh: np.ndarray, code: np.ndarray, coded: Refusals) -> None:
    """Give the points in ``fresh`` the refusal of ``rule`` (formatted per distinct message)."""
    pts = np.flatnonzero(fresh)
    if not rule.values:
        code[pts] = coded.code_error(SpecError(rule.field, rule.message(int(pts[0]))))
        return
    done: dict[str, int] = {}
    for i in pts.tolist():
        refusal = Refusal.of(SpecError(rule.field, rule.message(i)))
        c = done.get(refusal.message)
        if c is None:
            c = done[refusal.message] = coded.code(refusal)
        code[i] = c
        if len(done) == 1 and i == pts[0]:
            # Most rules' reasons do not depend on the point (numbers are in parentheses):
            # check once whether the last point's reason is the same, then fill the rest.
            last = Refusal.of(SpecError(rule.field, rule.message(int(pts[-1]))))
            if last.message == refusal.message and _reason_constant(rule):
                code[pts] = c
                return


def _reason_constant(rule: Any) -> bool:
    """Whether ``rule``'s reason cannot differ between points (no values outside parentheses)."""
    stripped = _PARENS.sub("", rule.template)
    return not any("{" + k + "}" in stripped for k in rule.values)


def _cluster_rows(model: Driver, ps: PointSet, coded: Refusals, out: PointResults, bad: np.ndarray,
                  conditions: Conditions) -> tuple[list[Any], list[Any], list[Hierarchy | None], np.ndarray]:
    """Each distinct cluster's facts and power, each (cluster, calibration) pair's hierarchy;
    the points of one that cannot be built get its refusal (``bad`` is updated in place).
    """
    cix = ps.cluster_ix
    facts: list[ClusterFacts | None] = []
    power: list[energy_model.PowerFacts | None] = []
    for j, c in enumerate(ps.clusters):
        try:
            got = model.cluster_facts(c), model.power_facts(c)
        except TwinError as err:
            got = None, None
            sel = (cix == j) & ~bad
            out.reason_ix[sel] = coded.code_error(err)
            bad |= sel
        facts.append(got[0])
        power.append(got[1])
    pair = cix * len(ps.calibrations) + ps.calibration_ix
    pairs, pair_row = ops.unique_ints(pair, len(ps.clusters) * len(ps.calibrations))
    pair_row = pair_row.reshape(-1)
    hierarchies: list[Hierarchy | None] = []
    for k, p in enumerate(pairs.tolist()):
        c, cal = divmod(p, len(ps.calibrations))
        try:
            hierarchies.append(model.hierarchy_of(ps.clusters[c], ps.calibrations[cal], conditions))
        except TwinError as err:
            hierarchies.append(None)
            sel = (pair_row == k) & ~bad
            out.reason_ix[sel] = coded.code_error(err)
            bad |= sel
    return facts, power, hierarchies, pairs


def _prune_and_run(run: _Run, sub: PointSet, wk: Work, idx: np.ndarray, prune: Pruner) -> None:
    """Branch and bound (a search for the fastest points): a point whose step without any
    communication (``step_lower_bound``) already exceeds the ``prune.top`` fastest step times
    seen cannot be among them, and is not costed further.
    """
    out = run.out
    bound = np.asarray(np.broadcast_to(step_lower_bound(wk.plan, wk.m, wk.stage, wk.optimizer_s), (len(idx),)),
                       np.float64)
    order = np.argsort(bound, kind="stable")
    head = order[:0]
    if not math.isfinite(prune.threshold()):  # no bar yet: the most promising points set it
        head = order[:max(PRUNE_FIRST, 4 * prune.top)]
        run(*take_points(sub, wk, head), idx[head])
        prune.offer(out, idx[head])
    rest = order[len(head):]
    cut = rest[bound[rest] > prune.threshold()]
    if len(cut):
        out.reason_ix[idx[cut]] = run.coded.code(PRUNED)
        out.stats["pruned"] = out.stats.get("pruned", 0) + len(cut)
    live = np.sort(rest[bound[rest] <= prune.threshold()])
    if len(live):
        run(*take_points(sub, wk, live), idx[live])
        prune.offer(out, idx[live])


# ------------------------------------------------------------------ the step of the points
class _Run:
    """The step of points (their work done): strategies, schedule, results (``__call__``)."""

    def __init__(self, model: Driver, hierarchies: Sequence[Hierarchy | None], pairs: np.ndarray,
                 strategies: Sequence[Strategy], coded: Refusals, out: PointResults, headroom: float | None,
                 power: Sequence[energy_model.PowerFacts | None], conditions: Conditions) -> None:
        self.model, self.hierarchies, self.pairs, self.strategies = model, hierarchies, pairs, strategies
        self.coded, self.out, self.headroom, self.power, self.conditions = coded, out, headroom, power, conditions

    def __call__(self, sub: PointSet, wk: Work, idx: np.ndarray) -> None:
        model, out = self.model, self.out
        hb = self._hierarchy_batch(sub)
        groups, spans, distinct = self._groups(sub, wk, hb, idx)
        ctx = _context(wk, sub, hb, spans, batch_cost(model, sub, hb), len(idx))

        def rehome(h: HierarchyBatch, some: np.ndarray | None) -> EvalContext:
            # The points ``some`` (None: all) alone, on their view of the hierarchy.
            if some is None:
                return dataclasses.replace(ctx, hierarchy=h, cost_fn=batch_cost(model, sub, h))
            part, work_p = take_points(sub, wk, some)
            spans_p = {dim: take_tree(v, some) for dim, v in spans.items()}
            return _context(work_p, part, h, spans_p, batch_cost(model, part, h), len(some))

        st = model.assemble(ctx, wk, self.strategies, groups, rehome=rehome)
        out.stats["groups"] += distinct
        fill(model, out, idx, wk, st, sub, self.power)
        odd = ~np.isfinite(out.values_at("step_time_s", idx))
        if odd.any():
            _per_point(model, sub.take(np.flatnonzero(odd)), idx[odd], self.coded, out, self.headroom,
                       self.conditions)
        out.stats["evaluated"] += len(idx)

    def _groups(self, sub: PointSet, wk: Work, hb: HierarchyBatch,
                idx: np.ndarray) -> tuple[Groups | None, dict[str, Any], int]:
        """The points' groups (None when every point is its own, or no strategy would use them),
        the points' group spans, and how many distinct groups the points form.
        """
        model = self.model
        first, inverse = factorize(group_columns(sub))
        if not (len(first) < len(idx) and any(not s.reads_schedule and s.vectorized for s in self.strategies)):
            return None, {dim: place_group(*stride_of(sub.plan, wk.dp, dim), hb) for dim in DIMENSIONS}, len(first)
        # Strategies that do not read the schedule, once per group of points differing only in gbs/vp.
        (grp, work_g), hb_g = take_points(sub, wk, first), hb.take(first)
        spans_g = {dim: place_group(*stride_of(grp.plan, work_g.dp, dim), hb_g) for dim in DIMENSIONS}
        ctx_g = context(work_g, grp.model_rows(), ColumnView(grp.clusters, grp.cluster_ix),
                        ColumnView(grp.calibrations, grp.calibration_ix), hb_g, spans_g, batch_cost(model, grp, hb_g),
                        len(first), None, schedule=False, software=sub.software)

        def rehome_groups(rows: np.ndarray, shares: np.ndarray) -> EvalContext:
            # The groups ``rows`` on a view of their hierarchies with ``shares`` (read lazily).
            h = hb_g.take(rows).with_shares(shares)
            cost = batch_cost(model, grp.take(rows) if model.cost_override is not None else grp, h)
            return rows_context(ctx_g, rows, h, cost)

        spans = {dim: ops.TakeView(v, inverse) for dim, v in spans_g.items()}  # read per point where needed
        return Groups(ctx_g, inverse, rehome_groups), spans, len(first)

    def _hierarchy_batch(self, ps: PointSet) -> HierarchyBatch:
        """The hierarchies of the batch's (cluster, calibration) pairs, one row per point, seen
        with the conditions' capacity shares.
        """
        pair = ps.cluster_ix * len(ps.calibrations) + ps.calibration_ix
        used, rows = ops.unique_ints(np.searchsorted(self.pairs, pair), len(self.pairs))
        hs = [self.hierarchies[int(k)] for k in used]
        assert all(h is not None for h in hs)
        hb = HierarchyBatch(hs, rows.reshape(-1))  # type: ignore[arg-type]
        capacity = self.conditions.capacity
        if not self.conditions.shared:
            return hb
        shares = np.ones((len(ps), hb.width))
        shares[:, :len(capacity)] = np.asarray(capacity[:hb.width], np.float64)
        return hb.with_shares(shares)


def _context(wk: Work, ps: PointSet, hb: HierarchyBatch, spans: dict[str, Any], cost_fn: Callable[..., Any],
             points: int) -> EvalContext:
    """The strategies' context of the points of ``ps``."""
    return context(wk, ps.model_rows(), ColumnView(ps.clusters, ps.cluster_ix),
                   ColumnView(ps.calibrations, ps.calibration_ix), hb, spans, cost_fn, points, None,
                   software=ps.software)


def batch_cost(model: Driver, ps: PointSet, hb: HierarchyBatch) -> Callable[..., CollectiveCost]:
    """Collective costing for the points of ``ps`` (asking a cost hook point by point)."""
    override = model.cost_override
    if override is None:
        return lambda op, size, span, algorithm=None: collective_cost(op, size, span, hb, algorithm)

    def with_override(op: str, size: Any, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
        # The hook sees one scenario at a time: ask it point by point (each point's own span:
        # a span viewed through a batch's groups is read at the point's group).
        base = collective_cost(op, size, span, hb, algorithm)
        fields = [np.array(np.broadcast_to(getattr(base, f.name), (len(ps),)), dtype=object if i in (1, 2)
                           else np.float64) for i, f in enumerate(dataclasses.fields(CollectiveCost))]
        sizes = np.broadcast_to(np.asarray(size, np.float64), (len(ps),))
        for i in range(len(ps)):
            one = take_tree(span, i) if isinstance(span, ops.TakeView) else span.point(i)
            if one.n <= 1 or sizes[i] <= 0:
                continue
            got = override(op, float(sizes[i]), one, hb.point(i), algorithm, ps.scenario(i))
            if got is not None:
                for arr, f in zip(fields, dataclasses.fields(CollectiveCost), strict=True):
                    arr[i] = getattr(got, f.name)
        return CollectiveCost(*fields)

    return with_override


def _per_point(model: Driver, ps: PointSet, idx: np.ndarray, coded: Refusals, out: PointResults,
               headroom: float | None, conditions: Conditions) -> None:
    """Evaluate points one by one with ``TwinModel.evaluate`` (their exact outcome)."""
    for k, j in enumerate(idx.tolist()):
        out.stats["scalar_points"] += 1
        try:
            est = model.evaluate(ps.scenario(k), validate=False, report=False, conditions=conditions)
        except TwinError as err:
            out.reason_ix[j] = coded.code_error(err)
            continue
        except ArithmeticError as err:
            out.reason_ix[j] = coded.code(arithmetic(type(err).__name__))
            continue
        if not math.isfinite(est.step_time_s):
            out.reason_ix[j] = coded.code(arithmetic("non-finite step time"))
            continue
        fits = bool(est.memory.fits_leaving(headroom))
        out.fits[j] = fits
        if not fits and headroom is not None:
            tier = int(full_tier(est.memory, None))
            out.reason_ix[j] = coded.code(HEADROOM if tier < 0 else MEMORY_REFUSALS[tier])
            continue
        out.reason_ix[j] = -1
        for name, v in estimate_columns(est).items():
            out.put(name, j, v)
        out.microbatches[j] = est.microbatches
        out.dp[j] = est.dp


def fill(model: Driver, out: PointResults, idx: np.ndarray, wk: Work, st: Any, ps: PointSet,
         power: Sequence[energy_model.PowerFacts | None]) -> None:
    """The points ``idx``'s columns from their assembled step (``step.Step``) and work."""
    def put(name: str, values: Any) -> None:
        out.put(name, idx, values)

    step = st.step_s
    tokens = ps.plan.gbs * ps.seq_len()
    n = wk.num_gpus
    flops = wk.flops
    put("step_time_s", step)
    put("compute_s", st.compute_s)
    put("recompute_s", st.recompute_s)
    for dim, v in st.exposed.items():
        put(f"exposed_{dim}_s", v)
    for dim, v in st.issued.items():
        put(f"issued_{dim}_s", v)
    put("bubble_s", st.bubble_s)
    put("optimizer_s", st.optimizer_s)
    put("offload_s", st.offload_s)
    put("interference_s", st.interference_s)
    mem = wk.mem
    put("memory_gib", mem.total / GIB)
    for part in MEMORY_PARTS:
        put(f"memory_{part}_bytes", getattr(mem, part))
    put("tokens_per_s", tokens / step)
    put("tokens_per_s_per_gpu", tokens / step / n)
    put("model_tflops_per_gpu", flops / step / n / 1e12)
    put("model_flops_per_step", flops)
    put("mfu", flops / step / n / (wk.half_peak * 1e12))
    put("mfu_at_precision_peak", flops / step / n / (wk.prec_peak * 1e12))
    proto = next(p for p in power if p is not None)
    facts = energy_model.stack([p if p is not None else proto for p in power], ps.cluster_ix)
    busy = st.compute_s + st.recompute_s + st.optimizer_s + st.interference_s
    for name, values in energy_model.step_columns(facts, step, busy, tokens).items():
        put(name, values)
    if model.intervals is not None:
        for name, values in _interval_columns(model, ps, step).items():
            put(name, values)
    out.microbatches[idx] = wk.m
    out.dp[idx] = wk.dp


def _interval_columns(model: Driver, ps: PointSet, step: Any) -> dict[str, Any]:
    """The points' prediction intervals (``twin.core.intervals``): the factors of each distinct
    (cluster, precision) class, gathered per point, times the step.
    """
    precs, pcode = _categories(ps.plan.precision)
    moe, stack = ps.model.moe is not None, ps.software.name
    per = np.asarray([[tuple(getattr(model.interval_factors(c.gpu.generation, moe, stack, str(p), c.num_gpus), f)
                             for f in ("p80_low", "p80_high", "p95_low", "p95_high")) for p in precs]
                      for c in ps.clusters], np.float64)   # clusters x precisions x 4
    factors = per[ps.cluster_ix, np.asarray(pcode).reshape(-1)]
    return {name: factors[:, j] * step for j, name in enumerate(INTERVAL_COLUMNS)}


# ------------------------------------------------------------------ the work of the points
def batch_work(model: Driver, ps: PointSet, facts: Sequence[ClusterFacts | None]) -> Work:
    """Compute, work and memory of every point (the work of each distinct key once)."""
    plan, cix = ps.plan, ps.cluster_ix
    models = ps.models or (ps.model,)
    mix = ps.model_ix  # None: every point has ``model``
    n_gpus = np.asarray([c.num_gpus for c in ps.clusters], np.int64)[cix]
    dp = np.where(plan.dp > 0, plan.dp, n_gpus // (plan.tp * plan.pp * plan.cp))
    devs, drow, pcode, precs = _devices(model, ps)
    # Work of each distinct (degrees, micro-batch, recompute, device).
    work_cols = [plan.tp, plan.cp, plan.mbs, plan.sp.astype(np.int64), plan.ep, plan.expert_tp, plan.pp,
                 _categories(plan.recompute)[1], plan.recompute_layers, _categories(plan.trainable)[1], drow,
                 plan.bf16_layers_start, plan.bf16_layers_end, plan.pp_first_layers, plan.pp_last_layers,
                 _categories(plan.recompute_modules)[1], _categories(plan.moe_dispatcher)[1],
                 np.asarray(pairs_end_stages(plan.schedule), np.int64)]
    if mix is not None:
        work_cols.append(mix)
    uniq, inv = factorize(work_cols)
    u_plan = plan.take(uniq)
    u_dev = device_batch(devs, drow[uniq])
    u_mix = np.zeros(len(uniq), np.int64) if mix is None else mix[uniq]
    u_model = ps.model if mix is None else model_rows(ps.model, ps.seq_len()[uniq])
    w_u = build_workload(u_model, u_plan.tp, u_plan.cp, u_plan.mbs, u_plan.sp, u_plan.ep, u_plan.expert_tp)
    stage_u, params_u, expert_u, act_u = stage_rows(model, u_plan, u_model, u_dev, w_u, devs, drow[uniq],
                                                    ps.software, models, u_mix)
    # Per point, expanded from the distinct rows where read (subsets compose the indices).
    w, stage, act = ops.TakeView(w_u, inv), ops.TakeView(stage_u, inv), ops.TakeView(act_u, inv)
    dev = ops.TakeView(device_batch(devs, np.arange(len(devs))), drow)
    proto = next(f for f in facts if f is not None)

    def fact(attr: str) -> np.ndarray:
        return np.asarray([getattr(f if f is not None else proto, attr) for f in facts])[cix]

    cluster_facts = FactColumns(capacity_bytes=fact("capacity_bytes"), pool_bw_Bps=fact("pool_bw_Bps"),
                                pool_capacity_bytes=fact("pool_capacity_bytes"), pool_latency_s=fact("pool_latency_s"),
                                host_bw_Bps=fact("host_bw_Bps"), host_capacity_bytes=fact("host_capacity_bytes"),
                                host_latency_s=fact("host_latency_s"),
                                tp_overlap_default=fact("tp_overlap_default"),
                                half_peak_tflops=fact("half_peak_tflops"))
    peaks = np.asarray([[(f or proto).peak_tflops.get(str(p), np.nan) for p in precs] for f in facts])
    params, expert = rank0_params(plan, params_u[inv], expert_u[inv], w)
    fwd_flops = model_fwd_flops(ps.model) if mix is None else \
        np.asarray([model_fwd_flops(m) for m in models], np.float64)[mix]
    return work(plan, ps.model_rows(), dp, dev, w, stage, cluster_facts, peaks[cix, pcode], n_gpus,  # type: ignore[arg-type]
                fwd_flops, params=params, expert=expert, act=act, software=ps.software)  # type: ignore[arg-type]


def _devices(model: Driver, ps: PointSet) -> tuple[list[Any], np.ndarray, np.ndarray, Any]:
    """The distinct devices, one per (GPU, precision, recipe, compute calibration); per point the
    row of its own, and its precision's code among the batch's precisions (and those).
    """
    plan, cix = ps.plan, ps.cluster_ix
    scale = np.asarray([c.compute_efficiency for c in ps.calibrations])[ps.calibration_ix]
    gpus: list[GPU] = []
    gpu_rows: dict[Any, int] = {}
    of_cluster = []
    for c in ps.clusters:
        row = gpu_rows.setdefault(model.key(c.gpu), len(gpus))
        if row == len(gpus):
            gpus.append(c.gpu)
        of_cluster.append(row)
    gpu_ix = np.asarray(of_cluster, np.int64)[cix]
    precs, pcode = _categories(plan.precision)
    recipes, rcode = _categories(plan.recipe)
    scales, scode = np.unique(scale, return_inverse=True)
    n_pr = len(precs) * len(recipes)
    dkey = (gpu_ix * n_pr + pcode * len(recipes) + rcode) * len(scales) + scode.reshape(-1)
    dkeys, drow = ops.unique_ints(dkey, len(gpus) * n_pr * len(scales))
    devs = []
    for k in dkeys.tolist():
        g, rest = divmod(k, n_pr * len(scales))
        pr, s = divmod(rest, len(scales))
        p, r = divmod(pr, len(recipes))
        devs.append(model.device(gpus[g], str(precs[p]), float(scales[s]), str(recipes[r]),
                                 ps.software.flash_attention, ps.software.attention_kernel))
    return devs, drow.reshape(-1), pcode, precs
