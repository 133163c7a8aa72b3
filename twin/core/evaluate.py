"""Assemble a step-time estimate from compute, the strategies' communication and the schedule.

step = pipeline_time + per-step exposed communication + optimizer step + offload
       + overlap interference, where
pipeline_time = m * t_mb + bubble (``schedule.pipeline_time``), and
t_mb = forward + backward + recompute + the communication every strategy exposes per
micro-batch on the bottleneck stage. Each parallel dimension's strategy plugin decides
what it sends and how much of it hides behind compute (its :class:`~twin.core.interfaces.Terms`);
the core multiplies per-micro-batch terms by the micro-batch count and owns the schedule.

One implementation serves one scenario (:meth:`TwinModel.evaluate`, Python numbers, the
batch of one) and a batch of points (:meth:`TwinModel.evaluate_points`, numpy arrays; see
``twin.core.ops``): both run the functions below. What points share (the model, a
cluster's hierarchy, a device) is computed once; the work of each distinct
(model, degrees, micro-batch, recompute, device) is computed once per batch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core import energy as energy_model
from twin.core import ops
from twin.core.collectives import CollectiveCost, collective_cost, link_seconds_per_byte
from twin.core.compute import DEVICE_FIELDS, Device, device_for
from twin.core.contention import (
    DEFAULT_PATTERNS,
    SHARE_STEPS,
    Flow,
    contended,
    link_loads,
    shares_of,
    stretches,
    traffic_profile,
)
from twin.core.errors import _PARENS, NotFoundError, PluginError, SpecError, TwinError, reason_of
from twin.core.estimate import Breakdown, Estimate, LinkLoad
from twin.core.interfaces import (
    EvalContext,
    Fabric,
    MemoryFabric,
    OpticsModel,
    ScaleOutFabric,
    ScaleUpFabric,
    StageTimes,
    Strategy,
    Terms,
    stride_of,
)
from twin.core.memory import (
    ActivationTerms,
    MemoryBreakdown,
    ModelStates,
    StateDivisors,
    activation_terms,
    in_flight_microbatches,
    memory_per_gpu,
    model_states,
)
from twin.core.nccl_tuning import (
    LL_MAX_BW_MULTI_NODE_GBPS,
    LL_MAX_BW_ONE_NODE_GBPS,
    NET_OVERHEAD_US_BY_CPU,
    NVLINK_BW_PER_LINK_GBPS,
    NVLS_CHANNELS,
    P2P_CHANNELS_PER_NVLINK,
    RING_PLATEAU,
    collnet_direct_bw,
    p2p_channels,
)
from twin.core.pipelines import pairs_end_stages, rank0_params
from twin.core.point_set import ColumnView, PlanColumns, PointSet, model_rows, model_structure, take_model_rows
from twin.core.schedule import host_layer_s, pipeline_time, stage_params, stage_times
from twin.core.schema import freeze
from twin.core.specs import (
    DEFAULT_SOFTWARE,
    GPU,
    Calibration,
    Cluster,
    ComputeEfficiency,
    Model,
    Plan,
    Rule,
    Scenario,
    Software,
    Strategies,
    _categories,
    plan_rules,
    validate_cluster,
    validate_model,
    validate_scenario,
    validate_software,
)
from twin.core.strategy_set import StrategyTable
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch, Tier, place_group
from twin.core.units import GIB
from twin.core.workload import Workload, build_workload

# Fused Adam (multi-tensor apply) per parameter: read fp32 master, m, v and grad (16 B),
# write master, m, v (12 B) and the 16-bit weight (2 B) = 30 B (MODELING.md: optimizer
# step is memory-bound); grad-norm clipping reads the gradient once more (4 B).
OPTIMIZER_BYTES_PER_PARAM = 34.0
# The same on 16-bit parameters without a master copy (Software.master_weights off): read
# weight, m, v and grad (8 B), write weight, m, v (6 B), and the clipping read (2 B) = 16 B.
PURE_16BIT_OPTIMIZER_BYTES_PER_PARAM = 16.0
# Compute slowdown per second of communication hidden under it: NCCL runs one CTA per
# channel and uses up to ~32 channels on NVLink systems (NCCL_MAX_NCHANNELS), i.e. ~20-25%
# of an H100's 132 SMs, which the overlapped GEMMs lose for that time.
OVERLAP_INTERFERENCE = 0.2
# When no efficiency profile is attached to a GPU spec (inline GPUs in tests).
DEFAULT_EFFICIENCY = ComputeEfficiency(gemm={"bf16": 0.75, "fp16": 0.75, "fp8": 0.65, "fp4": 0.55,
                                             "tf32": 0.7, "fp32": 0.9},
                                       attention_fwd=0.55, attention_bwd=0.42, hbm=0.85,
                                       source="generic defaults; attach a preset profile for fidelity")
# Reason a batch gives a point whose numbers leave the computable range.
ARITHMETIC_REASON = "scenario: some value is outside the numeric range the model can compute"
MEMORY_REASON = "memory: does not fit in HBM"
PRUNED_REASON = "pruned: its step without communication already exceeds the best plans' step time"
# Points a search costs in full before it has a bar to prune by (at least 4 x its top).
_PRUNE_FIRST = 64

# The flows of a step, ``Flow`` objects or, from a scenario's group memo, their field tuples
# (plain values: the collector stops tracking them), and per flow the stretch of each link
# class (``twin.core.contention``).
_Flows = tuple[Sequence[Any], Sequence[Any]]
CostOverride = Callable[[str, float, GroupSpan, Hierarchy, "str | None", Scenario], "CollectiveCost | None"]
PHASES = ("microbatch", "pipeline", "step")
DIMENSIONS = ("tp", "cp", "ep", "dp", "dpr", "edp", "pp")
_CACHE_LIMIT = 4096


@dataclass
class FabricSet:
    """Fabric models by role and kind."""

    by_role: dict[str, dict[str, Fabric]] = field(default_factory=dict)

    def add(self, fabric: Fabric, origin: str = "") -> None:
        """Register ``fabric``; a duplicate (role, kind) is an error."""
        if not fabric.kind or fabric.role not in ("scale_up", "scale_out", "optics", "memory"):
            raise PluginError(f"fabric {type(fabric).__name__} from {origin or '?'} needs a kind and a role")
        table = self.by_role.setdefault(fabric.role, {})
        if fabric.kind in table:
            raise PluginError(f"{fabric.role} fabric kind {fabric.kind!r} is registered twice "
                              f"({type(table[fabric.kind]).__module__} and {origin or type(fabric).__module__})")
        table[fabric.kind] = fabric

    def get(self, role: str, kind: str, field_path: str) -> Fabric:
        """The fabric model of ``kind`` in ``role``; NotFoundError naming the field."""
        table = self.by_role.get(role, {})
        fab = table.get(kind)
        if fab is None:
            raise NotFoundError(field_path, kind, list(table))
        return fab

    def kinds(self) -> dict[str, list[str]]:
        """Registered kinds per role."""
        return {role: sorted(table) for role, table in self.by_role.items()}


def _scaled(tier: Tier, factor: float) -> Tier:
    if factor == 1.0:
        return tier
    return dataclasses.replace(tier, bw_Bps=tier.bw_Bps * factor, nvls_bw_Bps=tier.nvls_bw_Bps * factor,
                               a2a_bw_Bps=tier.a2a_bw_Bps * factor)


def spec_key(obj: Any) -> Any:
    """A hashable key equal for equal spec objects (dataclasses, dicts, lists, scalars).

    (``schema.value_key`` keys the plain-data *input* a spec is loaded from; this keys the
    loaded objects, e.g. a :class:`Cluster` built in code.)
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, *(spec_key(getattr(obj, f.name)) for f in dataclasses.fields(obj)))
    if isinstance(obj, dict):
        return ("{}", *sorted((k, spec_key(v)) for k, v in obj.items()))
    if isinstance(obj, list | tuple):
        return ("[]", *(spec_key(v) for v in obj))
    return obj


class _Doorkeeper:
    """Which cache keys were asked for before: a value-keyed cache admits an entry on its
    key's second request, so that a scenario seen once (what a service mostly gets) leaves
    nothing behind. A kept entry is an object the cyclic collector tracks and traverses on
    every full collection while it lives; on a large heap that costs more than a one-hit
    entry saves (never-seen scenarios one by one: 17 tracked objects kept and ~84 us of
    collector work per evaluation without admission on the group memo, ~6 and ~26 us with it;
    ``benchmarks/bench_evaluate.py``'s collector line). The keys kept here are tuples of
    plain values, which the collector stops tracking. The "doorkeeper" of TinyLFU
    (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy",
    ACM Transactions on Storage 13(4), 2017). Bounded: forgets every key when full.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[Any] = set()

    def admit(self, key: Any) -> bool:
        """Whether ``key`` was asked for before (and so its entry should be kept)."""
        seen = self._seen
        if key in seen:
            return True
        if len(seen) > 16 * _CACHE_LIMIT:
            seen.clear()
        seen.add(key)
        return False


class _KeyCache:
    """A small int per distinct spec value (equal objects get the same one), computed once
    per object and kept alive while cached: caches key on it instead of hashing the spec
    (a frozen dataclass re-hashes all its nested fields on every lookup).
    """

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, int]] = {}
        self._by_value: dict[Any, int] = {}

    def __call__(self, obj: Any) -> int:
        hit = self._by_id.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        key = spec_key(obj)
        token = self._by_value.get(key)
        if token is None:
            token = self._by_value[key] = len(self._by_value)
        if len(self._by_id) > 8 * _CACHE_LIMIT:
            self._by_id.clear()
        self._by_id[id(obj)] = (obj, token)
        return token


class _HierarchyCache:
    """Value-keyed caches of one hierarchy and its share views (``Hierarchy.with_shares``),
    kept in the hierarchy's own memo (``Hierarchy._memo``): group spans by degrees; per
    group, collective costs by (op, size, algorithm, shares) and link profiles by
    ("profile", pattern, shares). Keys below a group are plain values, so the collector
    stops tracking them; bounded: cleared when full. Every cost is kept: admitting one on
    its second request (:class:`_Doorkeeper`) cost never-seen scenarios more in costs
    computed twice than it saved the collector (cachegrind, ~3,000 never-seen scenarios one
    by one: -5.2% instructions with the group memo's admission alone, +2.2% with costs
    admitted too; most costs are asked for again).
    """

    __slots__ = ("by_group", "entries", "spans")

    def __init__(self) -> None:
        self.spans: dict[Any, dict[str, GroupSpan]] = {}
        self.by_group: dict[Any, dict[Any, Any]] = {}
        self.entries = 0

    def cost(self, span: GroupSpan, key: Any, build: Callable[..., Any], *args: Any) -> Any:
        """``build(*args)``, remembered under ``span`` (by its fields) and ``key``."""
        group = span._key if span._key is not None else span
        mine = self.by_group.get(group)
        if mine is None:
            mine = self.by_group[group] = {}
        got = mine.get(key)
        if got is None:
            got = build(*args)
            if self.entries >= 8 * _CACHE_LIMIT:
                self.by_group.clear()
                self.entries = 0
                mine = self.by_group[group] = {}
            mine[key] = got
            self.entries += 1
        return got


# Where a hierarchy's memo keeps the engine's caches (collectives' own keys are (kind, tag, group)).
_HCACHE = ("twin.core.evaluate", "hierarchy caches")


def _hcache(h: Hierarchy) -> _HierarchyCache:
    """The caches of ``h`` and its share views."""
    memo = h._memo
    hit = memo.get(_HCACHE)
    if hit is None:
        hit = memo[_HCACHE] = _HierarchyCache()
    return hit  # type: ignore[no-any-return]


class _Costing:
    """A hierarchy view's collective costing for one evaluation (``EvalContext.cost_fn``):
    ``collective_cost``, remembered by value in the hierarchy's cache with the view's
    shares. Made per evaluation and not kept (no closure per view outlives it).
    """

    __slots__ = ("_cache", "_hierarchy", "_shares")

    def __init__(self, hierarchy: Hierarchy, cache: _HierarchyCache) -> None:
        self._hierarchy = hierarchy
        self._cache = cache
        self._shares = hierarchy.shares

    def __call__(self, op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
        cache = self._cache
        mine = cache.by_group.get(span._key if span._key is not None else span)
        if mine is not None:
            got = mine.get((op, size, algorithm, self._shares))
            if got is not None:
                return got  # type: ignore[no-any-return]
        return cache.cost(span, (op, size, algorithm, self._shares), collective_cost, op, size, span,
                          self._hierarchy, algorithm)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the step model needs of a cluster besides its hierarchy (one per cluster)."""

    capacity_bytes: float
    offload_bw_Bps: float
    pool_capacity_bytes: float
    host_bw_Bps: float          # host memory as an offload target (the "host" memory fabric)
    host_capacity_bytes: float
    tp_overlap_default: bool
    half_peak_tflops: float
    peak_tflops: dict[str, float]


@dataclass(slots=True)
class _Work:
    """Per point (or one scenario): everything the timing needs, before communication."""

    plan: Any
    dp: Any
    m: Any
    dev: Device
    w: Workload
    stage: StageTimes
    params: Any
    expert: Any
    act: ActivationTerms
    mem: MemoryBreakdown
    divisors: StateDivisors
    optimizer_s: Any
    flops: Any            # model FLOPs of the step
    capacity: Any
    offload_bw: Any
    pool_capacity: Any
    tp_overlap_default: Any
    half_peak: Any
    prec_peak: Any
    num_gpus: Any


@dataclass(slots=True)
class _Shared:
    """What the points of a group (the same everything but gbs and vp) share before the
    strategies: model states, the offload link and pool, the optimizer step, the passes.
    """

    states: ModelStates
    offload_bw: Any
    pool_capacity: Any
    optimizer_s: Any
    passes: Any           # 3 (forward, data grad, weight grad); 2 for LoRA's frozen base


@dataclass(slots=True)
class _GroupMemo:
    """What one scenario's group (same everything but gbs and vp) shares, filled as met."""

    setup: tuple[Any, ...]   # TwinModel._setup's
    shared: _Shared
    terms: dict[str, Terms | None]


@dataclass(slots=True)
class _Step:
    """The assembled step of one scenario or of a batch (built positionally in ``_finish``:
    keywords cost twice as much; field order is the call's).
    """

    step_s: Any
    compute_s: Any
    recompute_s: Any
    exposed: dict[str, Any]
    issued: dict[str, Any]
    nbytes: dict[str, Any]
    bubble_s: Any
    optimizer_s: Any
    offload_s: Any
    interference_s: Any
    algorithms: dict[str, str]
    notes: list[str]
    flows: _Flows = ((), ())
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    alone_step_s: Any = None


@dataclass(slots=True)
class _Groups:
    """A batch's groups of points that differ only in the global batch and the interleaving
    depth, which strategies that do not read the schedule are evaluated on: a context with
    one row per group (``schedule=False``), each point's group, and ``rehome(rows, shares)``:
    the context of the groups ``rows`` on a view of their hierarchies with ``shares``.
    """

    ctx: EvalContext
    inverse: np.ndarray
    rehome: Callable[[np.ndarray, np.ndarray], EvalContext]


@dataclass
class PointResults:
    """What a batch evaluation gives per point.

    ``reason_ix[i]`` is -1 for a feasible point, else an index into ``reasons`` (the first
    rule it breaks, ``MEMORY_REASON``, or why it could not be evaluated). ``columns``
    hold the estimate's numbers (NaN where infeasible): ``step_time_s``, ``compute_s``,
    ``recompute_s``, ``exposed_<dimension>_s`` for every dimension a strategy reported,
    ``bubble_s``, ``optimizer_s``, ``offload_s``, ``interference_s``, ``memory_gib``,
    ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``model_tflops_per_gpu``, ``mfu``,
    ``mfu_at_precision_peak``, the step's energy (``twin.core.energy``: ``energy_j`` and
    ``energy_<component>_j`` for gpu, nic, switch, optics, host, cxl, facility,
    ``joules_per_token``, ``tokens_per_joule``, ``average_power_w``) and its cost
    (``cost_usd_per_step``, ``usd_per_million_tokens``; NaN where the point gives no
    prices); ``microbatches`` and ``dp`` are ints (-1 where infeasible);
    ``fits``: whether the point's memory fits (also for points evaluated with
    ``require_fit=False``).
    """

    reason_ix: np.ndarray
    reasons: list[str]
    columns: dict[str, np.ndarray]
    microbatches: np.ndarray
    dp: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)
    fits: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # Writes not yet made into full-length columns (``TwinModel.evaluate_points(sparse=True)``):
    # per column, its (rows, values) in the order written; None: every write is made at once.
    _pending: dict[str, list[tuple[Any, Any]]] | None = field(default=None, init=False, repr=False, compare=False)
    # values_at's positions of one write's rows among the rows read, per (write rows, rows
    # read) object pair: a batch writes every number at the same rows, and is read the same
    # way (each entry holds both, so an id is never another object's).
    _at: dict[tuple[int, int], tuple[Any, Any, Any, Any]] = field(default_factory=dict, init=False, repr=False,
                                                                  compare=False)
    _written: dict[tuple[int, ...], tuple[Any, np.ndarray]] = field(default_factory=dict, init=False, repr=False,
                                                                    compare=False)

    def __post_init__(self) -> None:
        if len(self.fits) != len(self.reason_ix):
            self.fits = np.zeros(len(self.reason_ix), bool)

    def __len__(self) -> int:
        return len(self.reason_ix)

    @property
    def feasible(self) -> np.ndarray:
        """Bool per point: evaluated and fits in memory."""
        return self.reason_ix < 0

    def reason(self, i: int) -> str | None:
        """Why point ``i`` is infeasible (None if it is feasible)."""
        k = int(self.reason_ix[i])
        return None if k < 0 else self.reasons[k]

    def put(self, name: str, rows: Any, values: Any) -> None:
        """Write ``values`` into column ``name`` at ``rows`` (a new column starts as NaN)."""
        if self._pending is not None:
            self._pending.setdefault(name, []).append((rows, values))
            return
        col = self.columns.get(name)
        if col is None:
            col = self.columns[name] = np.full(len(self), np.nan)
        col[rows] = values

    def dense(self) -> None:
        """Make the pending writes (``sparse``) into full-length columns, as ``put`` would have."""
        pending, self._pending = self._pending, None
        for name, writes in (pending or {}).items():
            for rows, values in writes:
                self.put(name, rows, values)

    def names(self) -> list[str]:
        """The columns written so far (in ``columns`` or still pending)."""
        return [*self.columns, *(n for n in self._pending or () if n not in self.columns)]

    def written(self, name: str) -> np.ndarray:
        """The rows column ``name`` was written at (ascending): where its full-length column
        would hold something other than NaN's start.
        """
        pending = (self._pending or {}).get(name)
        if not pending:
            return np.flatnonzero(~np.isnan(self.columns[name]))
        key = tuple(id(where) for where, _ in pending)
        known = self._written.get(key)
        if known is not None and all(a is b for a, (b, _) in zip(known[0], pending, strict=True)):
            return known[1]  # type: ignore[no-any-return]
        rows = np.concatenate([np.atleast_1d(np.asarray(where, np.int64)) for where, _ in pending])
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # (one write at ascending rows: as they are)
            rows = ops.unique_ints(rows, len(self))[0]
        self._written[key] = (tuple(where for where, _ in pending), rows)
        return rows

    def values_at(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Column ``name`` at ``rows`` (NaN where never written), without making a
        full-length column of pending writes: a caller that reads a few points of many.
        """
        pending = (self._pending or {}).get(name)
        if not pending:
            return self.columns[name][rows]
        rows = np.asarray(rows)
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # each distinct row once, ascending
            distinct, inverse = np.unique(rows, return_inverse=True)
            return self.values_at(name, distinct)[inverse.reshape(-1)]
        out = np.full(len(rows), np.nan)
        if not len(rows):
            return out
        for where, values in pending:  # in the order written: a later write wins, as in put
            known = self._at.get((id(where), id(rows)))
            if known is not None and known[0] is where and known[1] is rows:
                at, hit = known[2], known[3]
            else:
                at = np.searchsorted(rows, where)
                inside = at < len(rows)
                hit = inside & (rows[np.where(inside, at, 0)] == where)
                if np.ndim(hit):
                    at = at[hit]
                    if len(at) == len(rows) and np.array_equal(where, rows):
                        at = hit = None  # written at exactly the rows read, in their order
                self._at[(id(where), id(rows))] = (where, rows, at, hit)
            if hit is None:
                out[:] = values  # (the usual read of a batch's results: no positions to gather)
                continue
            if np.ndim(hit) == 0:
                if hit:
                    out[at] = values
                continue
            out[at] = values if np.ndim(values) == 0 else np.asarray(values)[hit]
        return out


class _Reasons:
    """Distinct reasons, coded."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, reason: str) -> int:
        c = self._codes.get(reason)
        if c is None:
            c = self._codes[reason] = len(self.names)
            self.names.append(reason)
        return c


# Relative slack of the lower bound: covers the few roundings by which the bound and the
# step, the same sums of non-negative terms in another order, can differ (a double has
# 2**-53 ~ 1.1e-16 per rounding).
_BOUND_SLACK = 1e-12


def step_lower_bound(plan: Any, m: Any, stage: StageTimes, optimizer_s: Any) -> Any:
    """A step time no plan's step is below: ``m`` micro-batches of the bottleneck stage's
    compute, its schedule's bubble with no communication exposed, and the optimizer step.

    The step (``TwinModel._finish``) adds exposed communication to the micro-batch and to the
    mean stage's time the bubble is computed from, and only non-negative terms after that
    (per-step communication, offload, interference); every schedule's bubble
    (``twin.core.pipelines.bubble``) grows with that time, so leaving the communication out
    gives a bound from below, less ``_BOUND_SLACK`` for rounding.
    """
    pipe, _ = pipeline_time(plan, m, stage.total_s, stage.avg_stage_s, stage)
    return (pipe + ops.maximum(optimizer_s, stage.host_step_s)) * (1.0 - _BOUND_SLACK)


@dataclass
class Pruner:
    """Branch and bound for a search of the ``top`` fastest feasible points (step time, min).

    ``best``: the ``top`` smallest step times seen so far, ascending. A point's lower bound
    is :func:`step_lower_bound` (its step without communication; strategies' terms are
    >= 0, the conformance kit's rule). A point whose bound exceeds the ``top``-th best time
    is slower than ``top`` points already found and is never among the best.
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


class TwinModel:
    """The performance model: fabrics + strategies (+ an optional collective-cost override)."""

    def __init__(self, fabrics: FabricSet, strategies: Iterable[Strategy],
                 cost_override: CostOverride | None = None, *, builtin: Iterable[str] | None = None,
                 origins: Mapping[str, str] | None = None) -> None:
        """``builtin``: the names of the built-in strategies, each its dimension's default (None:
        all of ``strategies``); the others are alternatives a scenario selects
        (``twin.core.strategy_set``). ``origins``: the plugin of each strategy, for errors.
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
        # Resolved strategy sets by selection value (a SpecError is remembered as well).
        self._sets: dict[int, tuple[Strategy, ...] | SpecError] = {}
        self.cost_override = cost_override
        self._key = _KeyCache()
        self._hierarchies: dict[Any, Hierarchy] = {}
        self._devices: dict[Any, Device] = {}
        self._facts: dict[Any, ClusterFacts] = {}
        self._stages: dict[Any, StageTimes] = {}
        self._static: dict[Any, tuple[str | None, str | None]] = {}
        self._structures: dict[int, int] = {}  # model key -> its structure's key (model_structure)
        self._reports: dict[Any, tuple[Hierarchy, dict[str, object]]] = {}
        self._power: dict[Any, energy_model.PowerFacts] = {}
        self._groups_seen: dict[Any, _GroupMemo] = {}
        self._group_door = _Doorkeeper()
        self._setups: dict[Any, tuple[Any, ...]] = {}
        # Stage numbers per work key: (block, row) into _stage_blocks, columns computed together.
        self._stage_cache: dict[Any, tuple[int, int]] = {}
        self._stage_blocks: list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, dict[str, np.ndarray]]] = []

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
        """The strategies a scenario with ``selection`` runs, in phase order (cached by value).

        Raises ``SpecError`` naming the ``strategies`` field for a selection the registered
        strategies cannot satisfy (``twin.core.strategy_set``).
        """
        key = self._key(selection)
        hit = self._sets.get(key)
        if hit is None:
            try:
                hit = self.table.resolve(selection, self._order)
            except SpecError as err:
                hit = err
            if len(self._sets) > _CACHE_LIMIT:
                self._sets.clear()
            self._sets[key] = hit
        if isinstance(hit, SpecError):
            raise SpecError(hit.field, hit.rule)
        return hit

    def cluster_fabrics(self, cluster: Cluster) -> list[Fabric]:
        """The fabric models ``cluster`` uses (scale-up, scale-out, optics, memory pool)."""
        c = cluster
        fabs: list[Fabric] = [self.fabrics.get("scale_up", c.scale_up.fabric, "cluster.scale_up.fabric")]
        if c.scale_out is not None:
            fabs.append(self.fabrics.get("scale_out", c.scale_out.fabric, "cluster.scale_out.fabric"))
        if c.optics is not None:
            fabs.append(self.fabrics.get("optics", c.optics.kind, "cluster.optics.kind"))
        if c.memory_pool is not None:
            fabs.append(self.fabrics.get("memory", c.memory_pool.fabric, "cluster.memory_pool.fabric"))
        return fabs

    def hierarchy(self, scenario: Scenario) -> Hierarchy:
        """The tier hierarchy of ``scenario``'s cluster, calibration applied (cached by value)."""
        return self.hierarchy_of(scenario.cluster, scenario.calibration)

    def hierarchy_of(self, cluster: Cluster, calibration: Calibration) -> Hierarchy:
        """The tier hierarchy of ``cluster`` with ``calibration``'s bandwidth factors (cached by value)."""
        cal = calibration
        key = (self._key(cluster), cal.scale_up_bandwidth, cal.scale_out_bandwidth)
        hit = self._hierarchies.get(key)
        if hit is None:
            hit = self._build_hierarchy(cluster, cal)
            if len(self._hierarchies) > _CACHE_LIMIT:
                self._hierarchies.clear()
            self._hierarchies[key] = hit
        return hit

    def _build_hierarchy(self, c: Cluster, cal: Calibration) -> Hierarchy:
        up = self.fabrics.get("scale_up", c.scale_up.fabric, "cluster.scale_up.fabric")
        assert isinstance(up, ScaleUpFabric)
        tiers = [_scaled(up.tier(c), cal.scale_up_bandwidth)]
        notes: list[str] = []
        if c.scale_out is not None:
            out = self.fabrics.get("scale_out", c.scale_out.fabric, "cluster.scale_out.fabric")
            assert isinstance(out, ScaleOutFabric)
            radix = None
            if c.optics is not None:
                optics = self.fabrics.get("optics", c.optics.kind, "cluster.optics.kind")
                assert isinstance(optics, OpticsModel)
                radix = optics.switch_radix(c)
            tiers += [_scaled(t, cal.scale_out_bandwidth) for t in out.tiers(c, radix)]
        else:
            notes.append("no scale-out fabric: groups larger than the scale-up domain are not possible")
        cpu = c.host_cpu or "intel"  # not stated: NCCL's Intel/other figures
        gen = c.gpu.generation
        p2p, peer = p2p_channels(gen, tiers[0].nvlink_links)
        return Hierarchy(tiers=tuple(tiers), gpus_per_node=c.gpus_per_node, notes=tuple(notes),
                         ring_plateau=RING_PLATEAU[c.gpu.generation],
                         ll_max_bw=LL_MAX_BW_ONE_NODE_GBPS[c.gpu.generation] * 1e9,
                         nvls_channels=NVLS_CHANNELS[c.gpu.generation][0],
                         nvls_channels_multi=NVLS_CHANNELS[c.gpu.generation][1],
                         collnet_direct_bw=collnet_direct_bw(c.gpu.generation, c.gpus_per_node,
                                                             c.nics_per_node or c.gpus_per_node),
                         net_overhead_us=NET_OVERHEAD_US_BY_CPU[cpu],
                         ll_max_bw_two_nodes=LL_MAX_BW_MULTI_NODE_GBPS[cpu][0] * 1e9,
                         ll_max_bw_more_nodes=LL_MAX_BW_MULTI_NODE_GBPS[cpu][1] * 1e9,
                         # NCCL provisions P2P_CHANNELS_PER_NVLINK channels per link (nccl_tuning)
                         p2p_channels=p2p, p2p_peer_channels=peer,
                         p2p_channel_bw=NVLINK_BW_PER_LINK_GBPS[gen] * 1e9 / P2P_CHANNELS_PER_NVLINK if p2p else 0.0)

    def fabric_report(self, scenario: Scenario, hierarchy: Hierarchy) -> dict[str, object]:
        """Facts each fabric model reports (power, switches, tiers), cached per cluster and hierarchy."""
        key = (self._key(scenario.cluster), id(hierarchy))
        hit = self._reports.get(key)
        if hit is None or hit[0] is not hierarchy:
            if len(self._reports) > _CACHE_LIMIT:
                self._reports.clear()
            hit = self._reports[key] = (hierarchy, freeze(self.cluster_report(scenario.cluster, hierarchy)))
        return hit[1]  # read-only (schema.freeze): shared by every estimate of this cluster

    def cluster_report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, object]:
        """Facts each fabric model of ``cluster`` reports (power, switches, tiers)."""
        report: dict[str, object] = {
            "tiers": [{"name": t.name, "fabric": t.fabric, "span_gpus": t.span_gpus,
                       "bw_GBps_per_gpu": t.bw_Bps / 1e9, "latency_us": t.latency_s * 1e6,
                       "oversubscription": t.oversubscription, "in_network_reduction": t.reduction}
                      for t in hierarchy.tiers]}
        for role, extra in self._fabric_reports(cluster, hierarchy).items():
            if extra:
                report[role] = extra
        return report

    def _fabric_reports(self, cluster: Cluster, hierarchy: Hierarchy,
                        roles: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
        """Each fabric model's report (of ``roles``; None: all): the scale-out fabric as built
        (:meth:`as_built`), and the optics of the links it says run over optics when it is
        not a fat tree (``ScaleOutFabric.optical_links``).
        """
        out: dict[str, dict[str, Any]] = {}
        built = self.as_built(cluster)
        links = self.optical_links(cluster)
        for fab in self.cluster_fabrics(cluster):
            if roles is not None and fab.role not in roles:
                continue
            if isinstance(fab, ScaleOutFabric):
                out[fab.role] = fab.report(built, hierarchy)
            elif isinstance(fab, OpticsModel) and links is not None:
                out[fab.role] = fab.links_report(cluster, hierarchy, links)
            else:
                out[fab.role] = fab.report(cluster, hierarchy)
        return out

    def optical_links(self, cluster: Cluster) -> int | None:
        """How many scale-out links run over optics when the scale-out fabric counts them itself
        (``ScaleOutFabric.optical_links`` of the cluster as built); None: no optics, no scale-out
        fabric, or a fat tree whose links the optics model counts.
        """
        so = cluster.scale_out
        if so is None or cluster.optics is None:
            return None
        fabric = self.fabrics.get("scale_out", so.fabric, "cluster.scale_out.fabric")
        assert isinstance(fabric, ScaleOutFabric)
        return fabric.optical_links(self.as_built(cluster))

    def as_built(self, cluster: Cluster) -> Cluster:
        """``cluster`` with the switch radix its scale-out tiers are built with: the optics
        model's when it forces one (co-packaged optics switches carry 144 ports), so the
        scale-out fabric reports the tree the hierarchy has, not one at its own radix.
        """
        so = cluster.scale_out
        if so is None or cluster.optics is None:
            return cluster
        optics = self.fabrics.get("optics", cluster.optics.kind, "cluster.optics.kind")
        assert isinstance(optics, OpticsModel)
        radix = optics.switch_radix(cluster)
        if radix is None or radix == so.switch_radix:
            return cluster
        return dataclasses.replace(cluster, scale_out=dataclasses.replace(so, switch_radix=radix))

    def power_facts(self, cluster: Cluster) -> energy_model.PowerFacts:
        """What ``cluster``'s components draw (``twin.core.energy``; cached by value).

        Switch counts and optics power come from the scale-out fabric's and the optics
        model's reports (of the hierarchy without calibration: counts do not depend on it).
        """
        key = self._key(cluster)
        hit = self._power.get(key)
        if hit is None:
            hierarchy = self.hierarchy_of(cluster, Calibration())
            report = self._fabric_reports(cluster, hierarchy, ("scale_out", "optics"))
            hit = energy_model.power_facts(cluster, report)
            if len(self._power) > _CACHE_LIMIT:
                self._power.clear()
            self._power[key] = hit
        return hit

    def cluster_facts(self, cluster: Cluster) -> ClusterFacts:
        """Capacity, offload bandwidth and peaks of ``cluster`` (cached by value)."""
        key = self._key(cluster)
        hit = self._facts.get(key)
        if hit is not None:
            return hit
        offload_bw = pool_capacity = 0.0
        if cluster.memory_pool is not None:
            mem_fab = self.fabrics.get("memory", cluster.memory_pool.fabric, "cluster.memory_pool.fabric")
            assert isinstance(mem_fab, MemoryFabric)
            offload_bw = mem_fab.bandwidth_per_gpu_Bps(cluster)
            pool_capacity = mem_fab.capacity_per_gpu_bytes(cluster)
        host_bw = host_capacity = 0.0
        host = self.fabrics.by_role.get("memory", {}).get("host")
        if isinstance(host, MemoryFabric):
            host_bw, host_capacity = host.bandwidth_per_gpu_Bps(cluster), host.capacity_per_gpu_bytes(cluster)
        gpu = cluster.gpu
        half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
        hit = ClusterFacts(capacity_bytes=gpu.hbm_gib * GIB, offload_bw_Bps=offload_bw,
                           pool_capacity_bytes=pool_capacity, host_bw_Bps=host_bw, host_capacity_bytes=host_capacity,
                           tp_overlap_default=gpu.generation in ("hopper", "blackwell"),
                           half_peak_tflops=gpu.peak_tflops[half], peak_tflops=dict(gpu.peak_tflops))
        if len(self._facts) > _CACHE_LIMIT:
            self._facts.clear()
        self._facts[key] = hit
        return hit

    def device(self, gpu: GPU, precision: str, scale: float, recipe: str = "auto", flash: bool = True,
               attention_kernel: str = "profile") -> Device:
        """Timing parameters of ``gpu`` for ``precision``, its recipe and a compute calibration
        (cached); ``flash``: whether the software stack runs fused (flash) attention;
        ``attention_kernel``: which kernel (``Software.attention_kernel``).
        """
        key = (self._key(gpu), precision, scale, recipe, flash, attention_kernel)
        hit = self._devices.get(key)
        if hit is None:
            hit = device_for(gpu, precision, gpu.efficiency or DEFAULT_EFFICIENCY, scale, recipe, attention_kernel)
            if not flash:
                hit = dataclasses.replace(hit, flash=False)
            if len(self._devices) > _CACHE_LIMIT:
                self._devices.clear()
            self._devices[key] = hit
        return hit

    def _spans(self, h: Hierarchy, plan: Any, dp: int) -> dict[str, GroupSpan]:
        """Where each parallel dimension's group sits (cached per hierarchy and degrees)."""
        spans = _hcache(h).spans
        key = (plan.tp, plan.cp, plan.ep, plan.expert_tp, dp, plan.pp, plan.rank_order, plan.dp_shard)
        got = spans.get(key)
        if got is None:
            if len(spans) > _CACHE_LIMIT:
                spans.clear()
            got = spans[key] = {dim: place_group(*stride_of(plan, dp, dim), h) for dim in DIMENSIONS}
        return got

    def _cost_fn(self, scenario: Scenario, hierarchy: Hierarchy) -> Callable[..., CollectiveCost]:
        override = self.cost_override
        if override is not None:
            def with_override(op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
                if span.n > 1 and size > 0:
                    got = override(op, size, span, hierarchy, algorithm, scenario)
                    if got is not None:
                        return got
                return collective_cost(op, size, span, hierarchy, algorithm)
            return with_override
        return _Costing(hierarchy, _hcache(hierarchy))

    def _profile(self, span: GroupSpan, h: Hierarchy, pattern: str) -> Any:
        """``collectives.link_seconds_per_byte`` of a group (cached with the hierarchy's costs;
        keyed by the view's shares too: the costs are shared by a hierarchy's views, and a
        fleet's capacity view prices the links otherwise).
        """
        return _hcache(h).cost(span, ("profile", pattern, h.shares), link_seconds_per_byte, span, h, pattern)

    def _stage(self, plan: Any, model: Model, dev: Device, w: Workload,
               sw: Software = DEFAULT_SOFTWARE) -> tuple[StageTimes, Any, Any, ActivationTerms]:
        """(stage times, parameters, expert parameters, activation terms) of the bottleneck stage.

        They depend on the work of a micro-batch only (degrees, micro-batch, recomputation,
        precision, device, software stack, and the schedule, which places stages on ranks), not
        on the batch size or the sharding: cached by those.
        """
        key = (self._key(dev), self._key(model), self._key(sw), plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep,
               plan.expert_tp, plan.pp, plan.recompute, plan.recompute_layers, plan.trainable, plan.precision,
               plan.bf16_layers_start, plan.bf16_layers_end, plan.pp_first_layers, plan.pp_last_layers,
               plan.recompute_modules, plan.recipe, plan.moe_dispatcher, pairs_end_stages(plan.schedule))
        hit = self._stages.get(key)
        if hit is None:
            stage = stage_times(plan, model, dev, w, sw)
            params, expert = stage_params(plan, w, stage.layers)
            hit = (stage, params, expert, activation_terms(plan, model, w, dev.flash))
            if len(self._stages) > 16 * _CACHE_LIMIT:
                self._stages.clear()
            self._stages[key] = hit
        return hit

    def _setup(self, scenario: Scenario) -> tuple[Any, ...]:
        """What one scenario's evaluation needs before its batch size and sharding matter:
        cluster facts, device, workload, the bottleneck stage (times, parameters,
        activation terms), hierarchy, group spans, precision peak and model FLOPs. Cached by
        value: scenarios that share cluster, model, calibration and the work of a micro-batch
        share it.
        """
        plan, cluster, cal, model = scenario.plan, scenario.cluster, scenario.calibration, scenario.model
        key = (self._key(cluster), self._key(model), self._key(cal), self._key(scenario.software), _WORK_FIELDS(plan),
               pairs_end_stages(plan.schedule))
        hit = self._setups.get(key)
        if hit is None:
            facts = self.cluster_facts(cluster)
            dev = self.device(cluster.gpu, plan.precision, cal.compute_efficiency, plan.recipe,
                              scenario.software.flash_attention, scenario.software.attention_kernel)
            w = build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
            stage, params, expert, act = self._stage(plan, model, dev, w, scenario.software)
            hierarchy = self.hierarchy(scenario)
            spans = self._spans(hierarchy, plan, scenario.dp)
            hit = (facts, dev, w, stage, params, expert, act, hierarchy, spans, facts.peak_tflops[plan.precision],
                   model_fwd_flops(model))
            if len(self._setups) > 16 * _CACHE_LIMIT:
                self._setups.clear()
            self._setups[key] = hit
        return hit

    # ---------------------------------------------------------------- one scenario
    def evaluate(self, scenario: Scenario, *, validate: bool = True, report: bool = True,
                 capacity: tuple[float, ...] = ()) -> Estimate:
        """Predict one training step of ``scenario`` (the batch of one).

        ``report=False`` skips the fabric report (switch counts, power) and the link loads,
        which sweeps do not need. ``capacity``: per link class (tier index), the capacity
        this job gets relative to its GPUs' own share (above 1: idle neighbours' links it
        may use; ``twin.core.fleet_shares``); empty: its own share everywhere.
        """
        if validate:
            self.validate(scenario)
        plan, model, cluster, cal = scenario.plan, scenario.model, scenario.cluster, scenario.calibration
        # What points differing only in gbs and vp share (set-up, model states, strategies'
        # terms); a cost hook sees the whole scenario, so nothing is shared then.
        group = None
        if self.cost_override is None:
            gkey = (self._key(model), self._key(cluster), self._key(cal), self._key(scenario.software),
                    self._key(scenario.strategies), _GROUP_SCALARS(plan),
                    self._key(plan.overlap), self._key(plan.offload))
            group = self._groups_seen.get(gkey)
            if group is None and self._group_door.admit(gkey):
                setup = self._setup(scenario)
                facts, dev, w, stage, params, expert = setup[:6]
                params, expert = rank0_params(plan, params, expert, w)
                if len(self._groups_seen) > 16 * _CACHE_LIMIT:
                    self._groups_seen.clear()
                group = self._groups_seen[gkey] = _GroupMemo(
                    setup, _shared(plan, model, w, scenario.dp, dev, facts, cluster.gpus_per_node, params, expert,
                                   scenario.software), {})
        setup = group.setup if group is not None else self._setup(scenario)
        facts, dev, w, stage, params, expert, act, hierarchy, spans, prec_peak, fwd_flops = setup
        params, expert = rank0_params(plan, params, expert, w)
        if capacity and any(c != 1.0 for c in capacity):
            hierarchy = hierarchy.with_shares(capacity)
            group = None  # its terms differ from the scenario's on its own share
        work = _work(plan, model, scenario.dp, dev, w, stage, facts, prec_peak, cluster.num_gpus,
                     cluster.gpus_per_node, fwd_flops, params, expert, act,
                     group.shared if group is not None else None, scenario.software)
        ctx = _context(work, model, cluster, cal, hierarchy, spans, self._cost_fn(scenario, hierarchy), 0, scenario,
                       software=scenario.software)
        memo = group.terms if group is not None else None

        def rehome(h: Hierarchy) -> Callable[..., CollectiveCost]:
            return self._cost_fn(scenario, h)

        st = self._assemble(ctx, work, self.strategy_set(scenario.strategies), memo=memo, rehome=rehome,
                            alone=report)
        links: tuple[LinkLoad, ...] = ()
        if report:
            lkey = ("links", plan.gbs, plan.vp)
            links = memo.get(lkey) if memo is not None else None
            if links is None:
                flows, stretch = st.flows
                flows = [f if type(f) is Flow else Flow(*f) for f in flows]
                links = tuple(LinkLoad(**d) for d in link_loads(flows, stretch, hierarchy))
                if memo is not None:
                    memo[lkey] = links
        mem = work.mem
        notes = st.notes + list(hierarchy.notes)
        host_f, _ = host_layer_s(scenario.software, w)
        if 0 < host_f >= stage.layer_fwd_s:
            notes.append(f"host-bound on {scenario.software.name}: issuing a layer's forward takes "
                         f"{host_f * 1e3:.3f} ms, longer than the GPU runs it")
        kernel_note = _attention_kernel_note(scenario, stage)
        if kernel_note:
            notes.append(kernel_note)
        if not mem.fits:
            notes.append(f"does not fit: {mem.total / 2**30:.1f} GiB needed of {mem.capacity / 2**30:.1f} GiB HBM")
        n = cluster.num_gpus
        tokens = plan.gbs * model.seq_len
        step = st.step_s
        breakdown = Breakdown(compute_s=st.compute_s, recompute_s=st.recompute_s, exposed_comm_s=st.exposed,
                              bubble_s=st.bubble_s, optimizer_s=st.optimizer_s, offload_s=st.offload_s,
                              overlap_interference_s=st.interference_s)
        flops = work.flops
        busy = st.compute_s + st.recompute_s + st.optimizer_s + st.interference_s
        energy, cost = energy_model.step_energy(self.power_facts(cluster), step, busy, tokens)
        return Estimate(
            scenario=scenario.name, step_time_s=step, breakdown=breakdown, memory=mem,
            tokens_per_s=tokens / step, tokens_per_s_per_gpu=tokens / step / n,
            model_tflops_per_gpu=flops / step / n / 1e12,
            mfu=flops / step / n / (work.half_peak * 1e12),
            mfu_at_precision_peak=flops / step / n / (work.prec_peak * 1e12),
            model_flops_per_step=flops, microbatches=work.m, dp=work.dp, comm_issued_s=st.issued,
            bytes_per_step=st.nbytes, algorithms=st.algorithms, details=st.details,
            fabric=self.fabric_report(scenario, hierarchy) if report else {}, notes=tuple(notes),
            links=links,
            contention_s=max(0.0, step - st.alone_step_s) if report and st.alone_step_s is not None else 0.0,
            energy=energy, cost=cost)

    # ---------------------------------------------------------------- the assembly (both)
    def _assemble(self, ctx: EvalContext, work: _Work, strategies: Sequence[Strategy],
                  groups: _Groups | None = None,
                  memo: dict[Any, Any] | None = None,
                  rehome: Callable[[Any], Callable[..., CollectiveCost]] | None = None,
                  alone: bool = False) -> _Step:
        """The step from the terms of ``strategies`` (the scenario's set, in phase order):
        the schedule, per-step terms, interference.

        A strategy that does not read the schedule (``reads_schedule = False``) gives the
        same terms to every point of a group of points that differ only in the global batch
        and the interleaving depth. ``groups``: for a batch, a context with one row per
        group and each point's group: such strategies are evaluated once per group.
        ``memo``: for one scenario, its group's terms from earlier scenarios (filled here).
        ``rehome``: the costing of a hierarchy seen with contention shares; given, traffic
        that shares links in flight is costed again with its share (``twin.core.contention``).
        ``alone``: also give the step with every strategy costed alone.
        """
        parts: list[tuple[Strategy, Terms]] = []
        for strat in strategies:
            if groups is not None and not strat.reads_schedule and strat.vectorized:
                terms = self._terms(strat, groups.ctx)
                if terms is not None:
                    terms = _expand_terms(terms, groups.inverse)
            elif memo is not None and not strat.reads_schedule:
                terms = memo.get(strat.name, _NOT_YET)
                if terms is _NOT_YET:
                    terms = memo[strat.name] = self._terms(strat, ctx)
            else:
                terms = self._terms(strat, ctx)
            if terms is None:
                continue
            parts.append((strat, terms))
        flows: _Flows = ((), ())
        first = parts
        if rehome is not None and parts:
            parts, flows = self._contend(ctx, parts, rehome, memo, groups)
        st = self._finish(ctx, work, parts, flows)
        if alone:
            if parts is first:
                st.alone_step_s = st.step_s
            else:
                # Determined by the group and its batch size / interleaving, like the stretches.
                key = ("alone", ctx.plan.gbs, ctx.plan.vp)
                got = memo.get(key) if memo is not None else None
                if got is None:
                    got = self._finish(ctx, work, first, flows, breakdown=False)
                    if memo is not None:
                        memo[key] = got
                st.alone_step_s = got
        return st

    def _finish(self, ctx: EvalContext, work: _Work, parts: list[tuple[Strategy, Terms]], flows: _Flows,
                breakdown: bool = True) -> Any:
        """The step (a :class:`_Step`) from the strategies' terms (see :meth:`_assemble`);
        ``breakdown=False``: the step time only (the step alone, next to the contended one:
        no per-dimension exposed, issued, bytes, algorithms, and no _Step, whose building
        took ~40 % of this call, measured).
        """
        batch = ctx.batch
        m = ctx.microbatches
        stage = ctx.stage
        exposed_mb: Any = 0.0
        for _, terms in parts:
            exposed_mb = exposed_mb + terms.exposed_per_microbatch_s
        t_mb = stage.total_s + exposed_mb
        pipe, bubble = pipeline_time(ctx.plan, m, t_mb, stage.avg_stage_s + exposed_mb, stage)
        # The optimizer step is no shorter than the host's step tail (grad-norm and inf-check
        # syncs, optimizer launches: Software.step_us), which it overlaps.
        opt_s = ops.maximum(work.optimizer_s, stage.host_step_s)
        exposed: dict[str, Any] = {}
        issued: dict[str, Any] = {}
        nbytes: dict[str, Any] = {}
        algorithms: dict[str, str] = {}
        details: dict[str, dict[str, Any]] = {}
        offload_s: Any = 0.0
        per_step: Any = 0.0
        hidden: Any = 0.0
        for strat, t in parts:
            dim = strat.dimension
            if dim == "offload":
                offload_s = offload_s + (t.exposed_per_microbatch_s * m + t.exposed_per_step_s)
            elif breakdown:
                e = t.exposed_per_microbatch_s * m + t.exposed_per_step_s
                if batch or e > 0 or dim not in exposed:
                    exposed[dim] = exposed.get(dim, 0.0) + e
            if breakdown or strat.interferes:
                total = t.issued_per_microbatch_s * m + t.issued_per_step_s
            if breakdown:
                issued[dim] = issued.get(dim, 0.0) + total
                if not batch:  # bytes per dimension are reported for one scenario only
                    nbytes[dim] = nbytes.get(dim, 0.0) + (t.bytes_per_microbatch * m + t.bytes_per_step)
                    if t.algorithm:
                        algorithms[dim] = str(t.algorithm)
                    if t.details:
                        details.setdefault(dim, {}).update(t.details)
            if dim != "offload":
                per_step = per_step + t.exposed_per_step_s
            if strat.interferes:
                hidden = hidden + ops.maximum(0.0, total - t.exposed_per_microbatch_s * m - t.exposed_per_step_s)
        interference = OVERLAP_INTERFERENCE * hidden
        step = pipe + per_step + opt_s + offload_s + interference
        if not breakdown:
            return step
        return _Step(step, m * (stage.fwd_s + stage.bwd_s), m * stage.recompute_s, exposed, issued, nbytes, bubble,
                     opt_s, offload_s, interference, algorithms, list(ctx.notes), flows, details)

    def _contend(self, ctx: EvalContext, parts: list[tuple[Strategy, Terms]],
                 rehome: Callable[[Any], Callable[..., CollectiveCost]],
                 memo: dict[Any, Any] | None = None,
                 groups: _Groups | None = None) -> tuple[list[tuple[Strategy, Terms]], _Flows]:
        """The strategies' terms with traffic in flight together sharing its links
        (``twin.core.contention``): contended strategies costed again with their share.
        ``rehome``: the costing of a hierarchy seen with shares. ``memo``: one scenario's
        group memo (its link profiles and, per batch size and interleaving, the stretches).
        ``groups``: a batch's groups (see :meth:`_assemble`).
        """
        key = ("contention", ctx.plan.gbs, ctx.plan.vp)
        got = memo.get(key) if memo is not None else None
        if got is None:
            got = self._flows(ctx, parts, memo, groups)
            if memo is not None:  # kept as plain tuples (see _Flows)
                memo[key] = (tuple(map(_flow_record, got[0])), got[1], got[2])
        flows, stretch, where = got
        if len(flows) < 2:
            return parts, (flows, stretch)
        out = list(parts)
        if ctx.batch:
            for i, s in zip(where, stretch, strict=True):
                hit = contended(s)
                if hit.any():
                    out[i] = (parts[i][0], self._recost_points(parts[i], ctx, shares_of(s, hit), hit, rehome, groups))
            return out, (flows, stretch)
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
                    ctx.hierarchy = h.with_shares(shares)
                    ctx.cost_fn = rehome(ctx.hierarchy)
                    terms = self._terms(strat, ctx)
                    if memo is not None and not strat.reads_schedule:
                        memo[tkey] = terms
                if terms is not None:
                    out[i] = (strat, terms)
        finally:
            ctx.hierarchy, ctx.cost_fn = h, cost_fn
        return out, (flows, stretch)

    def _recost_points(self, part: tuple[Strategy, Terms], ctx: EvalContext, shares: np.ndarray, hit: np.ndarray,
                       rehome: Callable[..., Any], groups: _Groups | None = None) -> Terms:
        """A strategy's terms with the contended points (``hit``) costed again with their
        ``shares``; the others keep their terms alone (they are not re-evaluated).

        A strategy that does not read the schedule gives the points of a group the same terms
        on the same view (what ``groups`` are for), so with ``groups`` it is costed once per
        distinct (group, shares) of the contended points, on the groups' rows.
        """
        strat, terms = part
        if groups is not None and not strat.reads_schedule and strat.vectorized:
            idx = np.flatnonzero(hit)
            first, inverse = _distinct_rows(groups.inverse[idx], shares[idx])
            sel = idx[first]
            got = self._terms(strat, groups.rehome(groups.inverse[sel], shares[sel]))
            return terms if got is None else _merge_terms(terms, got, idx, inverse, ctx.points)
        if hit.mean() > 0.5:  # most points: costing them all beats taking the few out
            got = self._terms(strat, rehome(ctx.hierarchy.with_shares(shares), None))
            return terms if got is None else got
        idx = np.flatnonzero(hit)
        sub = rehome(ctx.hierarchy.take(idx).with_shares(shares[idx]), idx)
        got = self._terms(strat, sub)
        return terms if got is None else _merge_terms(terms, got, idx, None, ctx.points)

    def _flows(self, ctx: EvalContext, parts: list[tuple[Strategy, Terms]], memo: dict[Any, Any] | None,
               groups: _Groups | None = None) -> tuple[list[Flow], tuple[Any, ...], tuple[int, ...]]:
        """(the strategies' flows, their stretches, their index in ``parts``)."""
        m, stage, h = ctx.microbatches, ctx.stage, ctx.hierarchy
        profile_fn = link_seconds_per_byte if ctx.batch else self._profile
        step_window = stage.fwd_s + stage.bwd_s
        # Blocking collectives hold the step up: the micro-batches span their time too.
        blocking: Any = 0.0
        for strat, t in parts:
            if not strat.overlapped:
                blocking = blocking + t.exposed_per_microbatch_s * m + t.exposed_per_step_s
        microbatch_window = m * stage.total_s + blocking
        flows: list[Flow] = []
        where: list[int] = []
        for i, (strat, t) in enumerate(parts):
            pkey = ("profile", strat.name)
            profile = memo.get(pkey, _NOT_YET) if memo is not None else _NOT_YET
            if profile is _NOT_YET:
                traffic = strat.traffic
                if traffic is None:
                    pattern = DEFAULT_PATTERNS.get(strat.dimension)
                    traffic = ((strat.dimension, pattern),) if pattern else ()
                if not traffic:
                    profile = None
                elif groups is not None:  # a group's points share their groups' spans and links
                    profile = traffic_profile(traffic, groups.ctx.spans, groups.ctx.hierarchy, profile_fn)
                    profile = None if profile is None else ops.gather(profile, groups.inverse)
                else:
                    profile = traffic_profile(traffic, ctx.spans, h, profile_fn)
                if memo is not None:
                    memo[pkey] = profile
            if profile is None:
                continue
            issued = t.issued_per_microbatch_s * m + t.issued_per_step_s
            nbytes = t.bytes_per_microbatch * m + t.bytes_per_step
            window = ops.maximum(issued, step_window if strat.phase == "step" else microbatch_window)
            flows.append(Flow(strat.name, profile, nbytes, issued, window, strat.phase, strat.overlapped))
            where.append(i)
        if len(flows) < 2:  # nothing to share with: every link class as alone
            return flows, tuple(_unstretched(f.profile) for f in flows), tuple(where)
        return flows, tuple(stretches(flows)), tuple(where)

    def _terms(self, strat: Strategy, ctx: EvalContext) -> Terms | None:
        """The strategy's terms (None if it takes no part); a batch's are zero where inactive."""
        if not ctx.batch:
            if not strat.active(ctx):
                return None
            return strat.evaluate(ctx)
        if not strat.vectorized:
            return _per_point(strat, ctx, self)
        active = strat.active(ctx)
        if not ops.any_(active):
            return None
        t = strat.evaluate(ctx)
        if type(active) is np.ndarray and not active.all():
            return Terms(*(np.where(active, getattr(t, f), 0.0) for f in _TERM_FIELDS), algorithm=None)
        return t

    # ---------------------------------------------------------------- a batch
    def evaluate_points(self, points: PointSet, *, memory_headroom: float = 0.0, require_fit: bool = True,
                        validate: bool = True, prune: Pruner | None = None, sparse: bool = False) -> PointResults:
        """Predict every point of ``points`` (one model; any mix of plans, sizes, clusters).

        A point that breaks a rule, does not fit in memory (leaving ``memory_headroom`` of
        HBM free; with ``require_fit=False`` it is evaluated anyway, and ``fits`` says), or
        cannot be evaluated gets a reason instead of numbers. The numbers of a feasible point
        are those :meth:`evaluate` gives for it. ``prune``: a search for the ``prune.top``
        fastest points (carried across calls); points that cannot be among them get
        ``PRUNED_REASON`` instead (:class:`Pruner`). ``sparse``: ``columns`` stay empty and
        a feasible point's numbers are read with ``PointResults.values_at`` (no full-length
        column per number when few points are evaluated); a feasible point's exposed time of
        a dimension none of its strategies reported is then NaN (0 in ``columns``).
        """
        n = len(points)
        reasons = _Reasons()
        reason_ix = np.full(n, -1, np.int64)
        cols: dict[str, np.ndarray] = {}
        mb = np.full(n, -1, np.int64)
        dp_out = np.full(n, -1, np.int64)
        # evaluated: points through the batch path; groups: rows strategies that do not read
        # the schedule were evaluated on; scalar_points: points evaluated one by one
        stats = {"points": n, "evaluated": 0, "scalar_points": 0, "groups": 0}
        out = PointResults(reason_ix, reasons.names, cols, mb, dp_out, stats)
        if sparse:
            out._pending = {}
        if n == 0:
            return out
        with np.errstate(all="ignore"):
            self._evaluate_points(points, memory_headroom if require_fit else None, validate, reasons, out, prune)
        if not sparse:
            _zero_missing_exposed(out)
        return out

    def evaluate_many(self, scenarios: Sequence[Scenario | None], *, memory_headroom: float = 0.0,
                      require_fit: bool = True, errors: Sequence[str | None] | None = None) -> PointResults:
        """Predict every scenario (any mix of models, clusters and plans) on the batch path.

        Scenarios are grouped by model structure (models that differ in sequence length only
        share a batch), software stack and strategy selection (the structure a batch shares);
        the result has one row per scenario, in order. ``None`` entries (with their reason in ``errors``) are
        points that could not be built and keep that reason.
        """
        n = len(scenarios)
        reasons = _Reasons()
        out = PointResults(np.full(n, -1, np.int64), reasons.names, {}, np.full(n, -1, np.int64),
                           np.full(n, -1, np.int64),
                           {"points": n, "evaluated": 0, "scalar_points": 0, "groups": 0, "batches": 0})
        by_model: dict[tuple[int, int, int], list[int]] = {}
        # The group of each (model, software, strategies) object triple, computed once per
        # triple (the objects are shared between scenarios and held by ``scenarios``, so
        # their ids stay theirs during the call).
        by_ids: dict[tuple[int, int, int], list[int]] = {}
        for i, scn in enumerate(scenarios):
            if scn is None:
                reason = (errors[i] if errors is not None else None) or "scenario: could not be built"
                out.reason_ix[i] = reasons.code(reason)
                continue
            ids = (id(scn.model), id(scn.software), id(scn.strategies))
            group = by_ids.get(ids)
            if group is None:
                group = by_ids[ids] = by_model.setdefault(
                    (self._structure_key(scn.model), self._key(scn.software), self._key(scn.strategies)), [])
            group.append(i)
        for idx in by_model.values():
            out.stats["batches"] += 1  # point sets evaluated over arrays, each one structure
            rows = np.asarray(idx, np.int64)
            part = self.evaluate_points(PointSet.from_scenarios([scenarios[i] for i in idx]),  # type: ignore[misc]
                                        memory_headroom=memory_headroom, require_fit=require_fit)
            codes = np.asarray([reasons.code(r) for r in part.reasons] + [-1], np.int64)
            out.reason_ix[rows] = codes[part.reason_ix]
            for name, col in part.columns.items():
                out.put(name, rows, col)
            out.microbatches[rows] = part.microbatches
            out.dp[rows] = part.dp
            out.fits[rows] = part.fits
            for k, v in part.stats.items():
                if k != "points":
                    out.stats[k] = out.stats.get(k, 0) + v
        _zero_missing_exposed(out)
        return out

    def _structure_key(self, model: Model) -> int:
        """The key of ``model``'s structure (:func:`~twin.core.point_set.model_structure`): equal for
        models that differ in sequence length only, which share a batch.
        """
        key = self._key(model)
        hit = self._structures.get(key)
        if hit is None:
            if len(self._structures) > _CACHE_LIMIT:
                self._structures.clear()
            hit = self._structures[key] = self._key(model_structure(model))
        return hit

    def _static_reasons(self, cluster: Cluster, model: Model) -> tuple[str | None, str | None]:
        """(the first cluster/model rule broken, the first fabric rule broken) of a pair."""
        key = (self._key(cluster), self._key(model))
        hit = self._static.get(key)
        if hit is not None:
            return hit
        before = after = None
        try:
            validate_cluster(cluster)
            validate_model(model)
        except TwinError as err:
            before = reason_of(err)
        if before is None:
            try:
                for fab in self.cluster_fabrics(cluster):
                    fab.validate(cluster, "cluster")
                if cluster.power.switch_w:
                    self.power_facts(cluster)
            except TwinError as err:
                after = reason_of(err)
        if len(self._static) > _CACHE_LIMIT:
            self._static.clear()
        self._static[key] = (before, after)
        return before, after

    def _evaluate_points(self, ps: PointSet, headroom: float | None, validate: bool, reasons: _Reasons,
                         out: PointResults, prune: Pruner | None = None) -> None:
        """``headroom`` None: points that do not fit are evaluated too (``out.fits`` says)."""
        n = len(ps)
        cix = ps.cluster_ix
        plan = ps.plan
        view = ColumnView(ps.clusters, cix)
        bad = np.zeros(n, bool)
        try:
            strategies: tuple[Strategy, ...] = self.strategy_set(ps.strategies)
            unresolved = None
        except SpecError as err:
            if not validate:
                raise
            strategies, unresolved = (), reason_of(err)
        if validate:
            stack = None
            try:  # the stack is the batch's, and its rule comes first (validate_scenario)
                validate_software(ps.software)
            except SpecError as err:
                stack = reason_of(err)
            # Per (cluster, model) pair: the points' models differ in sequence length at most.
            models = ps.models or (ps.model,)
            pair = cix if ps.model_ix is None else cix * len(models) + ps.model_ix
            statics = [self._static_reasons(c, m) for c in ps.clusters for m in models]
            before = np.asarray([-1 if s[0] is None else reasons.code(s[0]) for s in statics], np.int64)[pair]
            after = np.asarray([-1 if s[1] is None else reasons.code(s[1]) for s in statics], np.int64)[pair]
            code = before.copy() if stack is None else np.full(n, reasons.code(stack), np.int64)
            open_ = code < 0  # points no rule has coded yet (kept as rules code them, not recomputed per rule)
            for field_path, broken, template, values in plan_rules(plan, ps.model_rows(), view):
                fresh = np.asarray(broken, bool) & open_
                if ops.any_(fresh):
                    _code_rule(Rule(field_path, broken, template, values()), fresh, code, reasons)
                    open_ &= ~fresh
            code = np.where(code < 0, after, code)
            if unresolved is not None:  # the selection is the batch's: every point still valid gets it
                code = np.where(code < 0, reasons.code(unresolved), code)
            out.reason_ix[:] = code
            bad = code >= 0
        # Clusters whose facts or hierarchy cannot be built: every point of theirs gets the reason.
        facts: list[ClusterFacts | None] = []
        power: list[energy_model.PowerFacts | None] = []
        for j, c in enumerate(ps.clusters):
            try:
                got = self.cluster_facts(c), self.power_facts(c)
                facts.append(got[0])
                power.append(got[1])
            except TwinError as err:
                facts.append(None)
                power.append(None)
                sel = (cix == j) & ~bad
                out.reason_ix[sel] = reasons.code(reason_of(err))
                bad |= sel
        pair = cix * len(ps.calibrations) + ps.calibration_ix
        pairs, pair_row = ops.unique_ints(pair, len(ps.clusters) * len(ps.calibrations))
        pair_row = pair_row.reshape(-1)
        hierarchies: list[Hierarchy | None] = []
        for k, p in enumerate(pairs.tolist()):
            c, cal = divmod(p, len(ps.calibrations))
            try:
                hierarchies.append(self.hierarchy_of(ps.clusters[c], ps.calibrations[cal]))
            except TwinError as err:
                hierarchies.append(None)
                sel = (pair_row == k) & ~bad
                out.reason_ix[sel] = reasons.code(reason_of(err))
                bad |= sel
        idx = np.flatnonzero(~bad)
        if len(idx) == 0:
            return
        sub = ps.take(idx) if len(idx) < n else ps
        work = self._batch_work(sub, facts)
        total = work.mem.total
        odd = ~np.isfinite(total)
        if odd.any():
            # Where plain Python would have raised (an extreme input), the scalar path gives
            # the exact outcome of the point.
            self._per_point(sub.take(np.flatnonzero(odd)), idx[odd], reasons, out, headroom)
        fits = work.mem.fits_leaving(headroom) & ~odd
        out.fits[idx] = fits
        if headroom is None:
            fits = ~odd
        else:
            out.reason_ix[idx[~fits & ~odd]] = reasons.code(MEMORY_REASON)
        keep = np.flatnonzero(fits)
        if len(keep) == 0:
            return
        if len(keep) < len(idx):
            sub, work = _take_points(sub, work, keep)
            idx = idx[keep]
        if prune is None:
            self._run_points(sub, work, idx, hierarchies, pairs, strategies, reasons, out, headroom, power)
            return
        # Branch and bound (a search for the fastest points): a point whose step without any
        # communication (step_lower_bound) already exceeds the prune.top fastest step times
        # seen cannot be among them, and is not costed further.
        bound = np.asarray(np.broadcast_to(step_lower_bound(work.plan, work.m, work.stage, work.optimizer_s),
                                           (len(idx),)), np.float64)
        order = np.argsort(bound, kind="stable")
        head = order[:0]
        if not math.isfinite(prune.threshold()):  # no bar yet: the most promising points set it
            head = order[:max(_PRUNE_FIRST, 4 * prune.top)]
            self._run_points(*_take_points(sub, work, head), idx[head], hierarchies, pairs, strategies,
                             reasons, out, headroom, power)
            prune.offer(out, idx[head])
        rest = order[len(head):]
        cut = rest[bound[rest] > prune.threshold()]
        if len(cut):
            out.reason_ix[idx[cut]] = reasons.code(PRUNED_REASON)
            out.stats["pruned"] = out.stats.get("pruned", 0) + len(cut)
        live = np.sort(rest[bound[rest] <= prune.threshold()])
        if len(live):
            self._run_points(*_take_points(sub, work, live), idx[live], hierarchies, pairs, strategies,
                             reasons, out, headroom, power)
            prune.offer(out, idx[live])

    def _run_points(self, sub: PointSet, work: _Work, idx: np.ndarray, hierarchies: Sequence[Hierarchy | None],
                    pairs: np.ndarray, strategies: Sequence[Strategy], reasons: _Reasons, out: PointResults,
                    headroom: float | None, power: Sequence[energy_model.PowerFacts | None]) -> None:
        """The step of the points ``idx`` (``sub``, their ``work``): strategies, schedule, results."""
        ps = sub
        model = sub.model_rows()  # with each point's sequence length where the points' lengths differ
        hb = self._hierarchy_batch(sub, hierarchies, pairs)
        groups = None
        first, inverse = _factorize(_group_columns(sub))
        if len(first) < len(idx) and any(not s.reads_schedule and s.vectorized for s in strategies):
            # Strategies that do not read the schedule, once per group of points differing only in gbs/vp.
            (grp, work_g), hb_g = _take_points(sub, work, first), hb.take(first)
            spans_g = {dim: place_group(*stride_of(grp.plan, work_g.dp, dim), hb_g) for dim in DIMENSIONS}
            ctx_g = _context(work_g, grp.model_rows(), ColumnView(grp.clusters, grp.cluster_ix),
                             ColumnView(grp.calibrations, grp.calibration_ix), hb_g, spans_g,
                             self._batch_cost(grp, hb_g), len(first), None, schedule=False,
                             software=ps.software)
            def rehome_groups(rows: np.ndarray, shares: np.ndarray) -> EvalContext:
                # The groups ``rows`` on a view of their hierarchies with ``shares`` (read lazily).
                h = hb_g.take(rows).with_shares(shares)
                cost = self._batch_cost(grp.take(rows) if self.cost_override is not None else grp, h)
                return _rows_context(ctx_g, rows, h, cost)

            groups = _Groups(ctx_g, inverse, rehome_groups)
            spans = {dim: ops.TakeView(v, inverse) for dim, v in spans_g.items()}  # read per point where needed
        else:
            spans = {dim: place_group(*stride_of(sub.plan, work.dp, dim), hb) for dim in DIMENSIONS}
        ctx = _context(work, model, ColumnView(sub.clusters, sub.cluster_ix),
                       ColumnView(sub.calibrations, sub.calibration_ix), hb, spans, self._batch_cost(sub, hb),
                       len(idx), None, software=ps.software)
        def rehome(h: HierarchyBatch, some: np.ndarray | None) -> EvalContext:
            # The points ``some`` (None: all) alone, on their view of the hierarchy.
            if some is None:
                return dataclasses.replace(ctx, hierarchy=h, cost_fn=self._batch_cost(sub, h))
            part, work_p = _take_points(sub, work, some)
            spans_p = {dim: _take_tree(v, some) for dim, v in spans.items()}
            return _context(work_p, part.model_rows(), ColumnView(part.clusters, part.cluster_ix),
                            ColumnView(part.calibrations, part.calibration_ix), h, spans_p,
                            self._batch_cost(part, h), len(some), None, software=ps.software)

        st = self._assemble(ctx, work, strategies, groups, rehome=rehome)
        out.stats["groups"] += len(first)
        self._fill(out, idx, work, st, sub, power)
        odd = ~np.isfinite(out.values_at("step_time_s", idx))
        if odd.any():
            self._per_point(sub.take(np.flatnonzero(odd)), idx[odd], reasons, out, headroom)
        out.stats["evaluated"] += len(idx)

    def _per_point(self, ps: PointSet, idx: np.ndarray, reasons: _Reasons, out: PointResults,
                   headroom: float | None) -> None:
        """Evaluate points one by one with :meth:`evaluate` (their exact outcome)."""
        for k, j in enumerate(idx.tolist()):
            out.stats["scalar_points"] += 1
            try:
                est = self.evaluate(ps.scenario(k), validate=False, report=False)
            except TwinError as err:
                out.reason_ix[j] = reasons.code(reason_of(err))
                continue
            except ArithmeticError as err:
                out.reason_ix[j] = reasons.code(f"{ARITHMETIC_REASON} ({type(err).__name__})")
                continue
            if not math.isfinite(est.step_time_s):
                out.reason_ix[j] = reasons.code(f"{ARITHMETIC_REASON} (non-finite step time)")
                continue
            mem = est.memory
            fits = bool(mem.fits_leaving(headroom))
            out.fits[j] = fits
            if not fits and headroom is not None:
                out.reason_ix[j] = reasons.code(MEMORY_REASON)
                continue
            out.reason_ix[j] = -1
            _fill_one(out, j, est)

    def _batch_work(self, ps: PointSet, facts: Sequence[ClusterFacts | None]) -> _Work:
        """Compute, work and memory of every point (the work of each distinct key once)."""
        plan, model, cix = ps.plan, ps.model, ps.cluster_ix
        models = ps.models or (model,)
        mix = ps.model_ix  # None: every point has ``model``
        n_gpus = np.asarray([c.num_gpus for c in ps.clusters], np.int64)[cix]
        dp = np.where(plan.dp > 0, plan.dp, n_gpus // (plan.tp * plan.pp * plan.cp))
        # Devices: one per distinct (GPU, precision, compute calibration).
        scale = np.asarray([c.compute_efficiency for c in ps.calibrations])[ps.calibration_ix]
        gpus: list[GPU] = []
        gpu_rows: dict[Any, int] = {}
        of_cluster = []
        for c in ps.clusters:
            row = gpu_rows.setdefault(self._key(c.gpu), len(gpus))
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
        drow = drow.reshape(-1)
        devs = []
        for k in dkeys.tolist():
            g, rest = divmod(k, n_pr * len(scales))
            pr, s = divmod(rest, len(scales))
            p, r = divmod(pr, len(recipes))
            devs.append(self.device(gpus[g], str(precs[p]), float(scales[s]), str(recipes[r]),
                                    ps.software.flash_attention, ps.software.attention_kernel))
        # Work of each distinct (degrees, micro-batch, recompute, device).
        sp = plan.sp
        etp = plan.expert_tp
        _, rc = _categories(plan.recompute)
        _, tr = _categories(plan.trainable)
        work_cols = [plan.tp, plan.cp, plan.mbs, sp.astype(np.int64), plan.ep, etp, plan.pp,
                     rc, plan.recompute_layers, tr, drow, plan.bf16_layers_start, plan.bf16_layers_end,
                     plan.pp_first_layers, plan.pp_last_layers, _categories(plan.recompute_modules)[1],
                     _categories(plan.moe_dispatcher)[1], np.asarray(pairs_end_stages(plan.schedule), np.int64)]
        if mix is not None:
            work_cols.append(mix)
        uniq, inv = _factorize(work_cols)
        u_plan = plan.take(uniq)
        u_dev = _device_batch(devs, drow[uniq])
        u_mix = np.zeros(len(uniq), np.int64) if mix is None else mix[uniq]
        u_model = model if mix is None else model_rows(model, ps.seq_len()[uniq])
        w_u = build_workload(u_model, u_plan.tp, u_plan.cp, u_plan.mbs, u_plan.sp, u_plan.ep, u_plan.expert_tp)
        stage_u, params_u, expert_u, act_u = self._stage_rows(u_plan, u_model, u_dev, w_u, devs, drow[uniq],
                                                              ps.software, models, u_mix)
        # Per point, expanded from the distinct rows where read (subsets compose the indices).
        w, stage, act = ops.TakeView(w_u, inv), ops.TakeView(stage_u, inv), ops.TakeView(act_u, inv)
        dev = ops.TakeView(_device_batch(devs, np.arange(len(devs))), drow)
        known = [f for f in facts if f is not None]
        proto = known[0]

        def fact(attr: str) -> np.ndarray:
            return np.asarray([getattr(f if f is not None else proto, attr) for f in facts])[cix]

        cluster_facts = _FactColumns(capacity_bytes=fact("capacity_bytes"), offload_bw_Bps=fact("offload_bw_Bps"),
                                     pool_capacity_bytes=fact("pool_capacity_bytes"),
                                     host_bw_Bps=fact("host_bw_Bps"), host_capacity_bytes=fact("host_capacity_bytes"),
                                     tp_overlap_default=fact("tp_overlap_default"),
                                     half_peak_tflops=fact("half_peak_tflops"))
        peaks = np.asarray([[(f or proto).peak_tflops.get(str(p), np.nan) for p in precs] for f in facts])
        gpn = np.asarray([c.gpus_per_node for c in ps.clusters], np.int64)[cix]
        params, expert = rank0_params(plan, params_u[inv], expert_u[inv], w)
        fwd_flops = model_fwd_flops(model) if mix is None else \
            np.asarray([model_fwd_flops(m) for m in models], np.float64)[mix]
        return _work(plan, ps.model_rows(), dp, dev, w, stage, cluster_facts, peaks[cix, pcode], n_gpus,  # type: ignore[arg-type]
                     gpn, fwd_flops, params=params, expert=expert, act=act,  # type: ignore[arg-type]
                     software=ps.software)

    def _stage_rows(self, plan: PlanColumns, model: Model, dev: Device, w: Workload, devs: Sequence[Device],
                    rows: np.ndarray, sw: Software = DEFAULT_SOFTWARE, models: Sequence[Model] = (),
                    model_rows_ix: np.ndarray | None = None,
                    ) -> tuple[StageTimes, np.ndarray, np.ndarray, ActivationTerms]:
        """:meth:`_stage`'s numbers for distinct work keys (one row each), remembered across batches.

        A sweep's batches share most of their work keys (the same degrees on other cluster
        sizes and fabrics): rows seen before come from the cache, the rest are computed over
        arrays together. ``model``: the rows' model (its sequence length per row where they
        differ: ``models[model_rows_ix[i]]`` is row i's own, which its key names).
        """
        sw_key = self._key(sw)
        if model_rows_ix is None or len(models) <= 1:
            m_keys = [(self._key(models[0] if models else model), sw_key)] * len(rows)
        else:
            by_model = [(self._key(m), sw_key) for m in models]
            m_keys = [by_model[k] for k in model_rows_ix.tolist()]
        d_keys = [self._key(d) for d in devs]
        cols = (plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp, plan.pp, plan.recompute_layers,
                plan.bf16_layers_start, plan.bf16_layers_end, plan.pp_first_layers, plan.pp_last_layers,
                np.asarray(pairs_end_stages(plan.schedule)))
        labels = (plan.recompute, plan.trainable, plan.precision, plan.recompute_modules, plan.recipe,
                  plan.moe_dispatcher)
        keys = [(m_key, d_keys[r], *vals, *names) for m_key, r, vals, names in zip(
            m_keys, rows.tolist(), zip(*(c.tolist() for c in cols), strict=True),
            zip(*(lab.names().tolist() for lab in labels), strict=True), strict=True)]
        cache = self._stage_cache
        blocks = self._stage_blocks
        miss = [i for i, k in enumerate(keys) if k not in cache]
        if miss:
            if len(cache) + len(miss) > 64 * _CACHE_LIMIT:
                cache.clear()
                blocks.clear()
                miss = list(range(len(keys)))
            mi = np.asarray(miss, np.int64)
            m_plan, m_dev = plan.take(mi), _take_tree(dev, mi)
            m_w = _take_tree(w, mi)
            m_model = take_model_rows(model, mi)
            stage = stage_times(m_plan, m_model, m_dev, m_w, sw)
            params, expert = stage_params(m_plan, m_w, stage.layers)
            act = activation_terms(m_plan, m_model, m_w, m_dev.flash)
            # One block of columns per computed set (a row per key): rows are gathered from
            # the blocks by index, never taken out one by one.
            k = len(mi)
            b = len(blocks)
            blocks.append(({f.name: _column(getattr(stage, f.name), k, np.float64)
                            for f in dataclasses.fields(StageTimes)},
                           _column(params, k, None), _column(expert, k, np.float64),
                           {f.name: _column(getattr(act, f.name), k, np.float64)
                            for f in dataclasses.fields(ActivationTerms)}))
            for j, i in enumerate(miss):
                cache.setdefault(keys[i], (b, j))
        where = np.asarray([cache[k] for k in keys], np.int64).reshape(-1, 2)
        n = len(keys)
        used = np.unique(where[:, 0])
        if len(used) == 1:  # one block: plain fancy indexing
            st, pa, ex, ac = blocks[int(used[0])]
            rows = where[:, 1]
            return (StageTimes(**{f: v[rows] for f, v in st.items()}), pa[rows], ex[rows],
                    ActivationTerms(**{f: v[rows] for f, v in ac.items()}))
        first = blocks[int(used[0])]
        st_out = {f: np.empty(n, np.float64) for f in first[0]}
        ac_out = {f: np.empty(n, np.float64) for f in first[3]}
        pa_out = np.empty(n, np.result_type(*(blocks[int(u)][1].dtype for u in used)))
        ex_out = np.empty(n, np.float64)
        for u in used.tolist():
            sel = np.flatnonzero(where[:, 0] == u)
            rows = where[sel, 1]
            st, pa, ex, ac = blocks[u]
            for f, v in st.items():
                st_out[f][sel] = v[rows]
            for f, v in ac.items():
                ac_out[f][sel] = v[rows]
            pa_out[sel] = pa[rows]
            ex_out[sel] = ex[rows]
        return StageTimes(**st_out), pa_out, ex_out, ActivationTerms(**ac_out)

    def _hierarchy_batch(self, ps: PointSet, hierarchies: Sequence[Hierarchy | None],
                         pairs: np.ndarray) -> HierarchyBatch:
        """The hierarchies of the batch's (cluster, calibration) pairs, one row per point."""
        pair = ps.cluster_ix * len(ps.calibrations) + ps.calibration_ix
        used, rows = ops.unique_ints(np.searchsorted(pairs, pair), len(pairs))
        hs = [hierarchies[int(k)] for k in used]
        assert all(h is not None for h in hs)
        return HierarchyBatch(hs, rows.reshape(-1))  # type: ignore[arg-type]

    def _batch_cost(self, ps: PointSet, hb: HierarchyBatch) -> Callable[..., CollectiveCost]:
        """Collective costing for the points of ``ps`` (asking a cost hook point by point)."""
        if self.cost_override is None:
            return lambda op, size, span, algorithm=None: collective_cost(op, size, span, hb, algorithm)

        def with_override(op: str, size: Any, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
            # The hook sees one scenario at a time: ask it point by point.
            base = collective_cost(op, size, span, hb, algorithm)
            fields = [np.array(np.broadcast_to(getattr(base, f.name), (len(ps),)), dtype=object if i in (1, 2)
                               else np.float64) for i, f in enumerate(dataclasses.fields(CollectiveCost))]
            sizes = np.broadcast_to(np.asarray(size, np.float64), (len(ps),))
            for i in range(len(ps)):
                one = span.point(i)
                if one.n <= 1 or sizes[i] <= 0:
                    continue
                got = self.cost_override(op, float(sizes[i]), one, hb.point(i), algorithm, ps.scenario(i))
                if got is not None:
                    for arr, f in zip(fields, dataclasses.fields(CollectiveCost), strict=True):
                        arr[i] = getattr(got, f.name)
            return CollectiveCost(*fields)

        return with_override

    def _fill(self, out: PointResults, idx: np.ndarray, work: _Work, st: _Step, ps: PointSet,
              power: Sequence[energy_model.PowerFacts | None]) -> None:
        def put(name: str, values: Any) -> None:
            out.put(name, idx, values)

        plan = ps.plan
        step = st.step_s
        tokens = plan.gbs * ps.seq_len()
        n = work.num_gpus
        flops = work.flops
        put("step_time_s", step)
        put("compute_s", st.compute_s)
        put("recompute_s", st.recompute_s)
        for dim, v in st.exposed.items():
            put(f"exposed_{dim}_s", v)
        put("bubble_s", st.bubble_s)
        put("optimizer_s", st.optimizer_s)
        put("offload_s", st.offload_s)
        put("interference_s", st.interference_s)
        put("memory_gib", work.mem.total / GIB)
        put("tokens_per_s", tokens / step)
        put("tokens_per_s_per_gpu", tokens / step / n)
        put("model_tflops_per_gpu", flops / step / n / 1e12)
        put("mfu", flops / step / n / (work.half_peak * 1e12))
        put("mfu_at_precision_peak", flops / step / n / (work.prec_peak * 1e12))
        proto = next(p for p in power if p is not None)
        facts = energy_model.stack([p if p is not None else proto for p in power], ps.cluster_ix)
        busy = st.compute_s + st.recompute_s + st.optimizer_s + st.interference_s
        for name, values in energy_model.step_columns(facts, step, busy, tokens).items():
            put(name, values)
        out.microbatches[idx] = work.m
        out.dp[idx] = work.dp


@dataclass(frozen=True, slots=True)
class _FactColumns:
    """:class:`ClusterFacts` per point (the fields a batch's work needs)."""

    capacity_bytes: np.ndarray
    offload_bw_Bps: np.ndarray
    pool_capacity_bytes: np.ndarray
    host_bw_Bps: np.ndarray
    host_capacity_bytes: np.ndarray
    tp_overlap_default: np.ndarray
    half_peak_tflops: np.ndarray


_TERM_FIELDS = ("exposed_per_microbatch_s", "issued_per_microbatch_s", "bytes_per_microbatch",
                "exposed_per_step_s", "issued_per_step_s", "bytes_per_step")


def _shared(plan: Any, model: Model, w: Workload, dp: Any, dev: Device, facts: Any, gpus_per_node: Any,
            params: Any, expert: Any, software: Software = DEFAULT_SOFTWARE) -> _Shared:
    """:class:`_Shared` of one scenario or of a batch (``facts``: see :func:`_work`)."""
    offload_bw, pool_capacity = facts.offload_bw_Bps, facts.pool_capacity_bytes
    o = plan.offload
    host = ops.logical_or(ops.logical_or(o.optimizer == "host", o.params == "host"), o.activations == "host")
    if ops.any_(host):
        # Host DRAM (the "host" memory fabric) when no pool is attached (a pool's own figures win).
        offload_bw = ops.where(host, ops.where(offload_bw != 0, offload_bw, facts.host_bw_Bps), offload_bw)
        pool_capacity = ops.where(host, ops.where(pool_capacity != 0, pool_capacity, facts.host_capacity_bytes),
                                  pool_capacity)
    states = model_states(plan, model, w, dp, params, expert, master_weights=software.master_weights)
    opt_s = optimizer_time(plan, params, expert, states.divisors, offload_bw, dev.hbm_Bps, software.master_weights)
    # Positionally (states, offload_bw, pool_capacity, optimizer_s, passes): as _work.
    return _Shared(states, offload_bw, pool_capacity, opt_s, ops.where(plan.trainable == "lora", 2.0, 3.0))


def _work(plan: Any, model: Model, dp: Any, dev: Device, w: Workload, stage: StageTimes, facts: Any,
          prec_peak: Any, num_gpus: Any, gpus_per_node: Any, fwd_flops: float, params: Any = None,
          expert: Any = None, act: ActivationTerms | None = None, shared: _Shared | None = None,
          software: Software = DEFAULT_SOFTWARE) -> _Work:
    """The memory and the derived numbers of one scenario or of a batch.

    ``facts`` holds the cluster facts (a :class:`ClusterFacts`, or per-point arrays of its
    fields for a batch); ``shared`` what the scenario's group shares, when already known.
    """
    if params is None:
        params, expert = stage_params(plan, w, stage.layers)
    m = plan.gbs // (plan.mbs * dp)
    if act is None:
        act = activation_terms(plan, model, w, dev.flash)
    if shared is None:
        shared = _shared(plan, model, w, dp, dev, facts, gpus_per_node, params, expert, software)
    states = shared.states
    mem = memory_per_gpu(plan, model, w, dp, m, params, expert, facts.capacity_bytes, shared.pool_capacity,
                         dev.flash, act, states)
    # Positionally, in _Work's field order: keywords cost about twice as much (timeit), and
    # every evaluation builds one.
    return _Work(plan, dp, m, dev, w, stage, params, expert, act, mem, states.divisors, shared.optimizer_s,
                 shared.passes * fwd_flops * plan.gbs, facts.capacity_bytes, shared.offload_bw, shared.pool_capacity,
                 facts.tp_overlap_default, facts.half_peak_tflops, prec_peak, num_gpus)


def optimizer_time(plan: Any, params_gpu: Any, expert_gpu: Any, divisors: StateDivisors, offload_bw: Any,
                   hbm_Bps: Any, master_weights: bool = True) -> Any:
    """The optimizer step: the local (sharded) optimizer state streamed through HBM once.

    Zero for LoRA's frozen base (the adapters are negligible) and when the optimizer state
    lives in a memory pool (the offload strategy charges that step against the pool link).
    ``divisors``: how the states are sharded (``memory.state_divisors``).
    """
    local = (params_gpu - expert_gpu) / divisors.optimizer + expert_gpu / divisors.expert_optimizer
    t = local * (OPTIMIZER_BYTES_PER_PARAM if master_weights else PURE_16BIT_OPTIMIZER_BYTES_PER_PARAM) / hbm_Bps
    offloaded = ops.logical_and(plan.offload.optimizer != "none", offload_bw > 0)
    return ops.where(ops.logical_or(plan.trainable == "lora", offloaded), 0.0, t)


def _context(work: _Work, model: Model, cluster: Any, calibration: Any, hierarchy: Hierarchy | HierarchyBatch,
             spans: dict[str, GroupSpan], cost_fn: Callable[..., Any], points: int,
             scenario: Scenario | None, *, schedule: bool = True,
             software: Software = DEFAULT_SOFTWARE) -> EvalContext:
    """The strategies' context. ``schedule=False``: one row per group of points that differ
    only in the global batch and the interleaving depth, which it does not hold (reading
    ``microbatches``, ``plan.gbs``, ``plan.vp`` or the per-micro-batch activations fails).
    """
    plan = work.plan
    tp_comm = plan.overlap.tp_comm
    # Unset: on where both the GPU (Hopper+, TE userbuffers) and the stack support it.
    default = ops.logical_and(work.tp_overlap_default, software.tp_comm_overlap)
    if points:
        tp_overlap = np.where(tp_comm < 0, default, tp_comm == 1)
    else:
        tp_overlap = default if tp_comm is None else tp_comm
    # The activations one micro-batch keeps in HBM (offloaded activations: the two staged layers).
    act = work.act
    if schedule:
        def in_hbm() -> Any:
            return ops.where(plan.offload.activations != "none", act.per_token * work.w.tokens * 2,
                             act.per_microbatch * in_flight_microbatches(plan.pp, plan.vp, 1, plan.schedule)
                             + act.recompute_live)
        m = work.m
    else:
        plan, in_hbm, m = dataclasses.replace(plan, gbs=None, vp=None), None, None
    # Positionally, in EvalContext's field order (notes: a fresh list, as its default): as _Work.
    return EvalContext(plan, model, cluster, calibration, work.dp, m, work.dev, work.w, hierarchy, spans, work.stage,
                       work.params, work.expert, tp_overlap, cost_fn, work.offload_bw, in_hbm, points, scenario, [],
                       software)


def _code_rule(rule: Any, fresh: np.ndarray, code: np.ndarray, reasons: _Reasons) -> None:
    """Give the points in ``fresh`` the reason of ``rule`` (formatted per distinct message)."""
    pts = np.flatnonzero(fresh)
    if not rule.values:
        code[pts] = reasons.code(reason_of(SpecError(rule.field, rule.message(int(pts[0])))))
        return
    done: dict[str, int] = {}
    for i in pts.tolist():
        text = reason_of(SpecError(rule.field, rule.message(i)))
        c = done.get(text)
        if c is None:
            c = done[text] = reasons.code(text)
        code[i] = c
        if len(done) == 1 and i == pts[0]:
            # Most rules' reasons do not depend on the point (numbers are in parentheses):
            # check once whether the last point's reason is the same, then fill the rest.
            last = reason_of(SpecError(rule.field, rule.message(int(pts[-1]))))
            if last == text and _reason_constant(rule):
                code[pts] = c
                return


def _reason_constant(rule: Any) -> bool:
    """Whether ``rule``'s reason can differ between points (values outside parentheses)."""
    stripped = _PARENS.sub("", rule.template)
    return not any("{" + k + "}" in stripped for k in rule.values)


def _factorize(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
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
_SCHEDULE_FIELDS = ("gbs", "vp")
# The plan fields a scenario's set-up (work of a micro-batch, group spans) depends on.
_WORK_FIELDS = operator.attrgetter("tp", "pp", "cp", "dp", "ep", "etp", "mbs", "sequence_parallel", "recompute",
                                   "recompute_layers", "recompute_modules", "precision", "recipe", "bf16_layers_start",
                                   "bf16_layers_end", "pp_first_layers", "pp_last_layers", "trainable",
                                   "rank_order", "dp_shard", "moe_dispatcher")
# The plan fields a group shares but the nested Overlap / Offload (keyed by their value tokens: not hashed).
_GROUP_SCALARS = operator.attrgetter(*(f.name for f in dataclasses.fields(Plan)
                                       if f.name not in (*_SCHEDULE_FIELDS, "overlap", "offload")))
_NOT_YET = object()


def _group_columns(ps: PointSet) -> list[np.ndarray]:
    """The columns whose distinct rows are the groups: every plan field but gbs and vp, cluster,
    calibration and, where the points' sequence lengths differ, the model.
    """
    plan = ps.plan
    cols = [ps.cluster_ix, ps.calibration_ix]
    if ps.model_ix is not None:
        cols.append(ps.model_ix)
    for f in dataclasses.fields(plan):
        if f.name in _SCHEDULE_FIELDS:
            continue
        v = getattr(plan, f.name)
        if dataclasses.is_dataclass(v):
            cols.extend(getattr(v, g.name) for g in dataclasses.fields(v))
        else:
            cols.append(v)
    return cols


# Above this share of a stage's compute the fused-attention kernel a stack runs moves the step
# by several percent (the profile's fitted and cuDNN figures differ by 1.5-1.7x on Hopper), so
# the estimate says which one it assumed.
ATTENTION_NOTE_SHARE = 0.25


def _attention_kernel_note(scenario: Scenario, stage: Any) -> str:
    """A note for a stack on the profile's fitted attention where the GPU's profile has measured
    cuDNN figures and attention is a large share of the compute (``ATTENTION_NOTE_SHARE``):
    which kernel was assumed and how to state the other (``Software.attention_kernel``); ""
    otherwise.
    """
    sw = scenario.software
    eff = scenario.cluster.gpu.efficiency
    if sw.attention_kernel != "profile" or not sw.flash_attention or eff is None:
        return ""
    fitted, cudnn = eff.attention_figures("profile"), eff.attention_figures("cudnn")
    busy = stage.fwd_s + stage.bwd_s
    share = (stage.attn_fwd_s + stage.attn_bwd_s) / busy if busy > 0 else 0.0
    if cudnn == fitted or share < ATTENTION_NOTE_SHARE:
        return ""
    return (f"attention is {share:.0%} of the compute, run at {scenario.cluster.gpu.name}'s fitted attention "
            f"({fitted[0]:g} / {fitted[1]:g} of the 16-bit peak); a Transformer Engine 2.x + cuDNN 9 stack runs it "
            f"at {cudnn[0]:g} / {cudnn[1]:g}: state software.attention_kernel: cudnn (preset megatron-core-te2)")


def _flow_record(f: Flow) -> tuple[Any, ...]:
    """A flow's fields as a plain tuple (``Flow(*record)`` makes it again)."""
    return (f.name, f.profile, f.nbytes, f.issued_s, f.window_s, f.phase, f.overlapped)


def _unstretched(profile: Any) -> Any:
    """A stretch of 1 on every link class of ``profile`` (tuple or points x classes)."""
    return tuple(1.0 for _ in profile) if isinstance(profile, tuple) else np.ones_like(profile)


def _expand_terms(t: Terms, inverse: np.ndarray) -> Terms:
    """A group's terms, one row per point."""
    return Terms(*(ops.gather(getattr(t, f), inverse) if isinstance(getattr(t, f), np.ndarray) else getattr(t, f)
                   for f in _TERM_FIELDS), algorithm=None)


def _distinct_rows(group: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    return _factorize([group, *shares.T])


def _rows_context(ctx: EvalContext, rows: np.ndarray, hierarchy: HierarchyBatch,
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
                       tp_overlap=take(ctx.tp_overlap), cost_fn=cost_fn, offload_bw_Bps=take(ctx.offload_bw_Bps),
                       activation_bytes=None, points=len(rows), scenario=None, software=ctx.software)


def _merge_terms(terms: Terms, got: Terms, idx: np.ndarray, rows: np.ndarray | None, n: int) -> Terms:
    """``terms`` of ``n`` points with the points ``idx`` taking ``got`` (row ``rows[j]`` of it
    for the j-th of them; None: row j).
    """
    merged = []
    for f in _TERM_FIELDS:
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


def _column(value: Any, n: int, dtype: Any) -> np.ndarray:
    """``value`` (a number or ``n`` values) as ``n`` values; ``dtype`` None: the values' own
    (as ``np.asarray`` of their Python numbers gives it).
    """
    arr = np.asarray(value)
    if dtype is None:
        dtype = np.asarray(arr.reshape(-1)[:1].tolist()).dtype if arr.size else np.float64
    return np.array(np.broadcast_to(arr, (n,)), dtype=dtype)


def _device_batch(devices: Sequence[Device], rows: np.ndarray) -> Device:
    """A :class:`Device` whose fields hold, per point, those of ``devices[rows]``."""
    return Device(**{f: np.asarray([getattr(d, f) for d in devices])[rows] for f in DEVICE_FIELDS})


def _take_tree(obj: Any, idx: Any) -> Any:
    """``obj`` with every array inside it (dataclass fields, dict values, tuples) indexed by ``idx``."""
    if isinstance(obj, ops.TakeView):
        base, rows = obj.source(idx)
        return _take_tree(base, rows) if np.ndim(rows) == 0 else ops.TakeView(base, rows)
    if isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            return obj
        if np.ndim(idx) == 0:
            row = obj[idx]
            return row.item() if np.ndim(row) == 0 else tuple(row.tolist())
        return ops.take_rows(obj, idx)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return type(obj)(**{f.name: _take_tree(getattr(obj, f.name), idx) for f in dataclasses.fields(obj)
                            if f.init})
    if isinstance(obj, dict):
        return {k: _take_tree(v, idx) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_take_tree(v, idx) for v in obj)
    return obj


def _take_points(ps: PointSet, work: _Work, idx: np.ndarray) -> tuple[PointSet, _Work]:
    """The points ``idx`` of ``ps`` and of its ``work``. The work's plan is the point set's
    (``_batch_work``), so its columns are taken once, for both.
    """
    part = ps.take(idx)
    return part, _take_work(work, idx, part.plan if work.plan is ps.plan else None)


def _take_work(work: _Work, idx: np.ndarray, plan: PlanColumns | None = None) -> _Work:
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
            kw[f.name] = _take_tree(v, idx) if isinstance(v, ops.TakeView) else ops.TakeView(v, idx)
        else:
            kw[f.name] = v
    return _Work(**kw)


def _per_point(strat: Strategy, ctx: EvalContext, model: TwinModel) -> Terms | None:
    """A scalar-only strategy's terms in a batch: evaluated point by point."""
    n = ctx.points
    vals = {f: np.zeros(n) for f in _TERM_FIELDS}
    anyone = False
    for i in range(n):
        one = _point_context(ctx, i)
        if not strat.active(one):
            continue
        anyone = True
        t = strat.evaluate(one)
        for f in _TERM_FIELDS:
            vals[f][i] = getattr(t, f)
    if not anyone:
        return None
    return Terms(**vals)


def _point_context(ctx: EvalContext, i: int) -> EvalContext:
    """Point ``i`` of a batch context as a one-scenario context."""
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
    spans = {k: _take_tree(v, i) for k, v in ctx.spans.items()}

    def cost(op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
        return collective_cost(op, size, span, h, algorithm)

    return EvalContext(plan=one_plan, model=model, cluster=scenario.cluster, calibration=scenario.calibration,
                       dp=_take_tree(ctx.dp, i), microbatches=_take_tree(ctx.microbatches, i),
                       device=_take_tree(ctx.device, i), workload=_take_tree(ctx.workload, i), hierarchy=h,
                       spans=spans, stage=_take_tree(ctx.stage, i), params_per_gpu=_take_tree(ctx.params_per_gpu, i),
                       expert_params_per_gpu=_take_tree(ctx.expert_params_per_gpu, i),
                       tp_overlap=bool(_take_tree(ctx.tp_overlap, i)), cost_fn=cost,
                       offload_bw_Bps=_take_tree(ctx.offload_bw_Bps, i),
                       activation_bytes=_take_tree(ctx.activation_bytes_per_microbatch, i),
                       points=0, scenario=scenario, software=ctx.software)


def _zero_missing_exposed(out: PointResults) -> None:
    """A feasible point shows 0 s for a dimension no strategy of its own exposed (NaN before)."""
    ok = out.reason_ix < 0
    for name, col in out.columns.items():
        if name.startswith("exposed_"):
            col[ok & np.isnan(col)] = 0.0


def _fill_one(out: PointResults, j: int, est: Estimate) -> None:
    """Point ``j``'s columns from a full :class:`Estimate`."""
    bd = est.breakdown
    values = {"step_time_s": est.step_time_s, "compute_s": bd.compute_s, "recompute_s": bd.recompute_s,
              **{f"exposed_{k}_s": v for k, v in bd.exposed_comm_s.items()},
              "bubble_s": bd.bubble_s, "optimizer_s": bd.optimizer_s, "offload_s": bd.offload_s,
              "interference_s": bd.overlap_interference_s, "memory_gib": est.memory.total / GIB,
              "tokens_per_s": est.tokens_per_s, "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
              "model_tflops_per_gpu": est.model_tflops_per_gpu, "mfu": est.mfu,
              "mfu_at_precision_peak": est.mfu_at_precision_peak, **energy_values(est)}
    for name, v in values.items():
        out.put(name, j, v)
    out.microbatches[j] = est.microbatches
    out.dp[j] = est.dp


def energy_values(est: Estimate) -> dict[str, float]:
    """The energy and cost columns (``PointResults.columns``) of one :class:`Estimate`."""
    e, c = est.energy, est.cost
    if e is None:
        return {}
    terms = {"energy_j": e.total_j, **{f"{k}_j": v for k, v in e.parts_j.items()},
             "joules_per_token": e.joules_per_token, "tokens_per_joule": e.tokens_per_joule,
             "average_power_w": e.average_power_w,
             "usd_per_step": math.nan if c is None else c.usd_per_step,
             "usd_per_million_tokens": math.nan if c is None else c.usd_per_million_tokens}
    return {name: terms[key] for name, key in {**energy_model.COLUMNS, **energy_model.COST_COLUMNS}.items()}


@functools.lru_cache(maxsize=1024)
def model_fwd_flops(model: Model) -> float:
    """Forward model FLOPs of one sequence (MFU convention: no recompute, no causal discount)."""
    w = build_workload(model, 1, 1, 1, False, 1, 1)
    return sum(w.sublayers[k].model_flops * c for k, c in w.counts.items()) + w.head.model_flops


def model_flops_per_step(scenario: Scenario) -> float:
    """Model FLOPs of one step (MFU convention: no recompute, no causal discount).

    3 passes (forward, data grad, weight grad) for full training; LoRA's frozen base needs
    no weight gradient, so 2 passes (plus negligible adapter work).
    """
    passes = 2.0 if scenario.plan.trainable == "lora" else 3.0
    return passes * model_fwd_flops(scenario.model) * scenario.plan.gbs
