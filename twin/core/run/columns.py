"""The batch path's plumbing: columns of points taken, grouped, viewed and put back.

A batch computes what its points share once (the work of each distinct plan shape, the terms
of a group of points that differ only in the global batch and the interleaving depth) and
reads it per point through views (``ops.TakeView``). These helpers take points out of a
batch's work and contexts, find the distinct rows of columns, and merge the terms of the
points costed again back into the batch's. No arithmetic of the model lives here.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from twin.core import ops
from twin.core.collectives import CollectiveCost
from twin.core.compute import DEVICE_FIELDS, Device
from twin.core.conditions import Conditions
from twin.core.contention import SHARE_STEPS
from twin.core.estimate import Estimate
from twin.core.interfaces import EvalContext, Fabric, Strategy, Terms
from twin.core.point_set import ColumnView, PlanColumns, PointSet, take_model_rows
from twin.core.run.memo import Memo
from twin.core.specs import GPU, Calibration, Cluster, Model, Plan, Scenario, Strategies
from twin.core.step import TERM_FIELDS, Work
from twin.core.topology import Hierarchy, HierarchyBatch

# The costing of one scenario's collectives on a hierarchy (the driver's ``cost_fn``).
CostFor = Callable[[Scenario, Hierarchy], Callable[..., CollectiveCost]]


@dataclass(frozen=True, slots=True)
class FactColumns:
    """:class:`ClusterFacts` per point (the fields a batch's work needs)."""

    capacity_bytes: np.ndarray
    pool_bw_Bps: np.ndarray
    pool_capacity_bytes: np.ndarray
    pool_latency_s: np.ndarray
    host_bw_Bps: np.ndarray
    host_capacity_bytes: np.ndarray
    host_latency_s: np.ndarray
    tp_overlap_default: np.ndarray
    half_peak_tflops: np.ndarray


def factorize(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first point of each distinct row, each point's row) over ``columns``."""
    n = len(columns[0])
    key = np.zeros(n, np.int64)
    mult = 1
    fallback = False
    for column in columns:
        col = np.asarray(column)
        if col.dtype.kind == "b":
            col = col.astype(np.int64)
        if col.dtype.kind not in "iu":
            col = np.unique(col, return_inverse=True)[1].reshape(-1)
        lo, hi = int(np.minimum.reduce(col)), int(np.maximum.reduce(col))  # the ufuncs: no Python wrapper
        if lo == hi:
            continue  # the same for every point: no part of the key
        if col.dtype.kind in "iu" and lo >= 0 and hi < 1 << 20:
            codes, radix = col, hi + 1
        else:
            u, codes = np.unique(col, return_inverse=True)
            codes, radix = codes.reshape(-1), len(u)
        if mult * radix >= 1 << 62:
            fallback = True
            break
        key += codes.astype(np.int64) * mult
        mult *= max(radix, 1)
    if fallback:
        stacked = np.stack([np.asarray(c, np.float64) for c in columns], axis=1)
        _, first, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
        return first, inv.reshape(-1)
    _, first, inv = ops.unique_ints(key, mult, first=True)
    return first, inv.reshape(-1)


# Plan fields that vary between the points of one group (the schedule); all others define it.
SCHEDULE_FIELDS = ("gbs", "vp")
# The plan fields a scenario's set-up (work of a micro-batch, group spans) depends on.
WORK_FIELDS = operator.attrgetter("tp", "pp", "cp", "dp", "ep", "etp", "mbs", "sequence_parallel", "recompute",
                                   "recompute_layers", "recompute_modules", "precision", "recipe", "bf16_layers_start",
                                   "bf16_layers_end", "pp_first_layers", "pp_last_layers", "trainable",
                                   "rank_order", "dp_shard", "moe_dispatcher")
# The plan fields a group shares but the nested Overlap / Offload (keyed by their value tokens: not hashed).
GROUP_SCALARS = operator.attrgetter(*(f.name for f in dataclasses.fields(Plan)
                                       if f.name not in (*SCHEDULE_FIELDS, "overlap", "offload")))


def group_columns(ps: PointSet) -> list[np.ndarray]:
    """The columns whose distinct rows are the groups: every plan field but gbs and vp, cluster,
    calibration and, where the points' sequence lengths differ, the model.
    """
    plan = ps.plan
    cols = [ps.cluster_ix, ps.calibration_ix]
    if ps.model_ix is not None:
        cols.append(ps.model_ix)
    for f in dataclasses.fields(plan):
        if f.name in SCHEDULE_FIELDS:
            continue
        v = getattr(plan, f.name)
        if dataclasses.is_dataclass(v):
            cols.extend(getattr(v, g.name) for g in dataclasses.fields(v))
        else:
            cols.append(v)
    return cols


def expand_terms(t: Terms, inverse: np.ndarray) -> Terms:
    """A group's terms, one row per point."""
    return Terms(*(ops.gather(getattr(t, f), inverse) if isinstance(getattr(t, f), np.ndarray) else getattr(t, f)
                   for f in TERM_FIELDS), algorithm=None)


def distinct_rows(group: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a row of each distinct (group, shares row), each row's) over points' groups and shares.

    Shares below a whole link are steps of 1/``SHARE_STEPS`` (``contention.shares_of``), so
    they key as small integers; others (a view with shares of its own) as columns.
    """
    steps = shares * SHARE_STEPS
    codes = steps.astype(np.int64)
    radix = int(SHARE_STEPS) + 1
    if shares.shape[1] <= 4 and np.array_equal(codes, steps) and codes.min(initial=0) >= 0 \
            and codes.max(initial=0) < radix:
        key = group.astype(np.int64)
        for column in codes.T:
            key = key * radix + column
        # Any point of a distinct row stands for all of it (their inputs are the same): the
        # last one, which needs no stable sort (np.unique's return_index would).
        distinct, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.reshape(-1)
        first = np.empty(len(distinct), np.int64)
        first[inverse] = np.arange(len(key))
        return first, inverse
    return factorize([group, *shares.T])


def rows_context(ctx: EvalContext, rows: np.ndarray, hierarchy: HierarchyBatch,
                  cost_fn: Callable[..., Any]) -> EvalContext:
    """The rows ``rows`` of a batch context without the schedule (``_context(schedule=False)``)
    on ``hierarchy``: every per-row value is taken where a strategy reads it (``ops.TakeView``).
    """
    def take(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return ops.take_rows(v, rows) if v.ndim else v
        if isinstance(v, ColumnView):
            objects, index = v.distinct()
            return ColumnView(objects, index[rows])
        if isinstance(v, ops.TakeView) or (dataclasses.is_dataclass(v) and not isinstance(v, type)):
            return ops.TakeView(v, rows)
        return v

    return EvalContext(plan=ops.TakeView(ctx.plan, rows), model=take_model_rows(ctx.model, rows),
                       cluster=take(ctx.cluster), calibration=take(ctx.calibration), dp=take(ctx.dp), microbatches=None,
                       device=take(ctx.device), workload=take(ctx.workload), hierarchy=hierarchy,
                       spans={dim: ops.TakeView(v, rows) for dim, v in ctx.spans.items()}, stage=take(ctx.stage),
                       params_per_gpu=take(ctx.params_per_gpu), expert_params_per_gpu=take(ctx.expert_params_per_gpu),
                       tp_overlap=take(ctx.tp_overlap), cost_fn=cost_fn, memory_tiers=take(ctx.memory_tiers),
                       activation_bytes=None, points=len(rows), scenario=None, software=ctx.software)


def merge_terms(terms: Terms, got: Terms, idx: np.ndarray, rows: np.ndarray | None, n: int) -> Terms:
    """``terms`` of ``n`` points with the points ``idx`` taking ``got`` (row ``rows[j]`` of it
    for the j-th of them; None: row j).
    """
    merged = []
    for f in TERM_FIELDS:
        old, new = getattr(terms, f), getattr(got, f)
        if old is new and np.ndim(old) == 0:  # the same number both ways (a field left at 0.0): no column
            merged.append(old)
            continue
        full = np.array(np.broadcast_to(old, (n,)), dtype=np.float64)
        full[idx] = new if rows is None or np.ndim(new) == 0 else new[rows]
        merged.append(full)
    algo = terms.algorithm
    if algo is not None:
        algo = np.array(np.broadcast_to(algo, (n,)), dtype=object)
        new = got.algorithm
        if new is not None:
            algo[idx] = new if rows is None or np.ndim(new) == 0 else np.asarray(new)[rows]
    return Terms(*merged, algorithm=algo)


def column(value: Any, n: int, dtype: Any) -> np.ndarray:
    """``value`` (a number or ``n`` values) as ``n`` values; ``dtype`` None: the values' own
    (as ``np.asarray`` of their Python numbers gives it).
    """
    arr = np.asarray(value)
    if dtype is None:
        dtype = np.asarray(arr.reshape(-1)[:1].tolist()).dtype if arr.size else np.float64
    return np.array(np.broadcast_to(arr, (n,)), dtype=dtype)


def device_batch(devices: Sequence[Device], rows: np.ndarray) -> Device:
    """A :class:`Device` whose fields hold, per point, those of ``devices[rows]``."""
    return Device(**{f: np.asarray([getattr(d, f) for d in devices])[rows] for f in DEVICE_FIELDS})


def take_tree(obj: Any, idx: Any) -> Any:
    """``obj`` with every array inside it (dataclass fields, dict values, tuples) indexed by ``idx``."""
    if isinstance(obj, ops.TakeView):
        base, rows = obj.source(idx)
        return take_tree(base, rows) if np.ndim(rows) == 0 else ops.TakeView(base, rows)
    if isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            return obj
        if np.ndim(idx) == 0:
            row = obj[idx]
            return row.item() if np.ndim(row) == 0 else tuple(row.tolist())
        return ops.take_rows(obj, idx)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return type(obj)(**{f.name: take_tree(getattr(obj, f.name), idx) for f in dataclasses.fields(obj)
                            if f.init})
    if isinstance(obj, dict):
        return {k: take_tree(v, idx) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(take_tree(v, idx) for v in obj)
    return obj


def take_points(ps: PointSet, work: Work, idx: np.ndarray) -> tuple[PointSet, Work]:
    """The points ``idx`` of ``ps`` and of its ``work``. The work's plan is the point set's
    (``_batch_work``), so its columns are taken once, for both.
    """
    part = ps.take(idx)
    return part, take_work(work, idx, part.plan if work.plan is ps.plan else None)


def take_work(work: Work, idx: np.ndarray, plan: PlanColumns | None = None) -> Work:
    """The work of the points in ``idx``: its arrays taken, its structures viewed (taken where
    read); ``plan``: its plan's columns at ``idx`` when already taken.
    """
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(work):
        v = getattr(work, f.name)
        if f.name == "plan":
            kw[f.name] = v.take(idx) if plan is None else plan
        elif isinstance(v, np.ndarray):
            kw[f.name] = ops.take_rows(v, idx) if v.ndim else v
        elif isinstance(v, ops.TakeView) or dataclasses.is_dataclass(v):
            kw[f.name] = take_tree(v, idx) if isinstance(v, ops.TakeView) else ops.TakeView(v, idx)
        else:
            kw[f.name] = v
    return Work(**kw)


def point_context(ctx: EvalContext, i: int, cost_for: CostFor) -> EvalContext:
    """Point ``i`` of a batch context as a one-scenario context, costing its collectives with
    ``cost_for(scenario, hierarchy)`` (the driver's: a plugin's cost hook included).
    """
    plan: PlanColumns = ctx.plan
    one_plan = plan.plan(i)
    cluster = ctx.cluster.distinct()
    calib = ctx.calibration.distinct()
    model = ctx.model
    if type(model.seq_len) is np.ndarray:  # a batch whose points differ in sequence length
        model = dataclasses.replace(model, seq_len=int(model.seq_len[i]))
    scenario = Scenario(cluster=cluster[0][int(cluster[1][i])], model=model, plan=one_plan,
                        calibration=calib[0][int(calib[1][i])], software=ctx.software)
    hb = ctx.hierarchy
    assert isinstance(hb, HierarchyBatch)
    h = hb.point(i)
    spans = {k: take_tree(v, i) for k, v in ctx.spans.items()}

    return EvalContext(plan=one_plan, model=model, cluster=scenario.cluster, calibration=scenario.calibration,
                       dp=take_tree(ctx.dp, i), microbatches=take_tree(ctx.microbatches, i),
                       device=take_tree(ctx.device, i), workload=take_tree(ctx.workload, i), hierarchy=h,
                       spans=spans, stage=take_tree(ctx.stage, i), params_per_gpu=take_tree(ctx.params_per_gpu, i),
                       expert_params_per_gpu=take_tree(ctx.expert_params_per_gpu, i),
                       tp_overlap=bool(take_tree(ctx.tp_overlap, i)), cost_fn=cost_for(scenario, h),
                       memory_tiers=take_tree(ctx.memory_tiers, i),
                       activation_bytes=take_tree(ctx.activation_bytes_per_microbatch, i),
                       points=0, scenario=scenario, software=ctx.software)

@dataclass(slots=True)
class Groups:
    """A batch's groups of points that differ only in the global batch and the interleaving
    depth, which strategies that do not read the schedule are evaluated on: a context with
    one row per group (``schedule=False``), each point's group, and ``rehome(rows, shares)``:
    the context of the groups ``rows`` on a view of their hierarchies with ``shares``.
    """

    ctx: EvalContext
    inverse: np.ndarray
    rehome: Callable[[np.ndarray, np.ndarray], EvalContext]


class Driver(Protocol):
    """What the batch path (``twin.core.run.batch``, ``twin.core.run.stage_rows``) uses of the
    driver (``twin.core.run.driver.TwinModel``), which hands itself to it.
    """

    cost_override: Any
    intervals: Any
    memos: dict[str, Memo[Any, Any]]
    stage_rows: Memo[Any, Any]
    stage_blocks: list[tuple[Any, ...]]

    def key(self, obj: Any) -> int:
        """The value token of a spec object."""

    def structure_key(self, model: Model) -> int:
        """The token of a model's structure."""

    def strategy_set(self, selection: Strategies) -> tuple[Strategy, ...]:
        """The strategies a selection runs."""

    def cluster_fabrics(self, cluster: Cluster) -> list[Fabric]:
        """The fabric models a cluster uses."""

    def cluster_facts(self, cluster: Cluster) -> Any:
        """A cluster's facts."""

    def power_facts(self, cluster: Cluster) -> Any:
        """What a cluster's components draw."""

    def hierarchy_of(self, cluster: Cluster, calibration: Calibration, conditions: Conditions = ...) -> Hierarchy:
        """A cluster's hierarchy under conditions."""

    def device(self, gpu: GPU, precision: str, scale: float, recipe: str = ..., flash: bool = ...,
               attention_kernel: str = ...) -> Device:
        """A GPU's timing parameters."""

    def assemble(self, ctx: EvalContext, wk: Work, strategies: Sequence[Strategy], groups: Groups | None = None,
                 memo: dict[Any, Any] | None = None, rehome: Callable[..., Any] | None = None,
                 alone: bool = False) -> Any:
        """The step from the strategies' terms."""

    def evaluate(self, scenario: Scenario, *, validate: bool = True, report: bool = True,
                 conditions: Conditions = ...) -> Estimate:
        """One scenario (a batch's fallback)."""

    def interval_factors(self, generation: str, moe: bool, stack: str, precision: str, num_gpus: int) -> Any:
        """A scenario's interval bounds as multiples of its step time."""
