"""The step, pure: from a micro-batch's work and the strategies' terms to a training step.

    step = pipeline_time + per-step exposed communication + optimizer step + offload
           + overlap interference, where
    pipeline_time = m * t_mb + bubble (``schedule.pipeline_time``), and
    t_mb = forward + backward + recompute + the communication every strategy exposes per
    micro-batch on the bottleneck stage.

Each parallel dimension's strategy plugin decides what it sends and how much of it hides
behind compute (its :class:`~twin.core.interfaces.Terms`); the core multiplies
per-micro-batch terms by the micro-batch count and owns the schedule.

Every function here is plain arithmetic over one scenario (Python numbers) or a batch of
points (numpy arrays, dispatched through ``twin.core.ops``): one scenario is the batch of one,
and both run these very functions. Nothing here remembers anything, reads a flag or knows a
plugin manager; the driver (``twin.core.run.driver``) decides what to compute once and
remembers it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.compute import Device
from twin.core.contention import DEFAULT_PATTERNS, Flow, stretches
from twin.core.errors import SpecError
from twin.core.interfaces import EvalContext, StageTimes, Strategy, Terms
from twin.core.memory import (
    ActivationTerms,
    MemoryBreakdown,
    ModelStates,
    StateDivisors,
    activation_terms,
    memory_per_gpu,
    model_states,
)
from twin.core.offload import MemoryTiers, TierPath, tier_of
from twin.core.pipelines import rank0_params
from twin.core.schedule import pipeline_time, stage_params
from twin.core.specs import DEFAULT_SOFTWARE, Model, Scenario, Software
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch
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
PHASES = ("microbatch", "pipeline", "step")
DIMENSIONS = ("tp", "cp", "ep", "dp", "dpr", "edp", "pp")
TERM_FIELDS = ("exposed_per_microbatch_s", "issued_per_microbatch_s", "bytes_per_microbatch",
               "exposed_per_step_s", "issued_per_step_s", "bytes_per_step")
# Relative slack of the lower bound: covers the few roundings by which the bound and the
# step, the same sums of non-negative terms in another order, can differ (a double has
# 2**-53 ~ 1.1e-16 per rounding).
_BOUND_SLACK = 1e-12

# The flows of a step, ``Flow`` objects or their field tuples (``flow_record``: plain values,
# which the cyclic collector stops tracking), and per flow the stretch of each link class
# (``twin.core.contention``).
Flows = tuple[Sequence[Any], Sequence[Any]]
# A one-point context of a batch context (``twin.core.run.columns.point_context``).
PointContext = Callable[[EvalContext, int], EvalContext]


@dataclass(slots=True)
class Work:
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
    tiers: MemoryTiers    # host DRAM and the CXL pool (``twin.core.offload``)
    tp_overlap_default: Any
    half_peak: Any
    prec_peak: Any
    num_gpus: Any


@dataclass(slots=True)
class Shared:
    """What the points of a group (the same everything but gbs and vp) share before the
    strategies: model states, the memory tiers outside HBM, the optimizer step, the passes.
    """

    states: ModelStates
    tiers: MemoryTiers
    optimizer_s: Any
    passes: Any           # 3 (forward, data grad, weight grad); 2 for LoRA's frozen base


@dataclass(slots=True)
class Step:
    """The assembled step of one scenario or of a batch (built positionally in
    :func:`finish`: keywords cost twice as much; field order is the call's).
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
    flows: Flows = ((), ())
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    alone_step_s: Any = None


# ------------------------------------------------------------------ the work of a point
def optimizer_time(plan: Any, params_gpu: Any, expert_gpu: Any, divisors: StateDivisors, tiers: MemoryTiers,
                   hbm_Bps: Any, master_weights: bool = True) -> Any:
    """The optimizer step: the local (sharded) optimizer state streamed through HBM once.

    Zero for LoRA's frozen base (the adapters are negligible) and when the optimizer state
    lives off HBM (the offload strategy charges that step against the tier's path).
    ``divisors``: how the states are sharded (``memory.state_divisors``).
    """
    local = (params_gpu - expert_gpu) / divisors.optimizer + expert_gpu / divisors.expert_optimizer
    t = local * (OPTIMIZER_BYTES_PER_PARAM if master_weights else PURE_16BIT_OPTIMIZER_BYTES_PER_PARAM) / hbm_Bps
    target = plan.offload.optimizer
    offloaded = ops.logical_and(target != "none", tier_of(tiers, target)[0] > 0)
    return ops.where(ops.logical_or(plan.trainable == "lora", offloaded), 0.0, t)


def shared(plan: Any, model: Model, w: Workload, dp: Any, dev: Device, facts: Any, params: Any, expert: Any,
           software: Software = DEFAULT_SOFTWARE) -> Shared:
    """:class:`Shared` of one scenario or of a batch (``facts``: see :func:`work`): host memory
    and the pool are separate tiers, each target priced on its own.
    """
    host_bw = facts.host_bw_Bps
    o = plan.offload
    host = ops.logical_or(ops.logical_or(o.optimizer == "host", o.params == "host"), o.activations == "host")
    if ops.any_(host):
        # An accelerator whose host link is not published (TPU v5p, Trainium: plugins/host_memory.py)
        # has no host offload target: refused (a batch's such points are NaN, then refused one by one).
        nowhere = ops.logical_and(host, host_bw == 0)
        if not ops.is_batch(nowhere):
            if nowhere:
                raise SpecError("plan.offload", "offloading to 'host' needs the accelerator's host link, which is "
                                                "not published for this one (plugins/host_memory.py)")
        elif nowhere.any():
            host_bw = np.where(nowhere, np.nan, host_bw)
    tiers = MemoryTiers(TierPath(host_bw, facts.host_latency_s, facts.host_capacity_bytes),
                        TierPath(facts.pool_bw_Bps, facts.pool_latency_s, facts.pool_capacity_bytes))
    states = model_states(plan, model, w, dp, params, expert, master_weights=software.master_weights)
    opt_s = optimizer_time(plan, params, expert, states.divisors, tiers, dev.hbm_Bps, software.master_weights)
    # Positionally (states, tiers, optimizer_s, passes): as work().
    return Shared(states, tiers, opt_s, ops.where(plan.trainable == "lora", 2.0, 3.0))


def work(plan: Any, model: Model, dp: Any, dev: Device, w: Workload, stage: StageTimes, facts: Any,
         prec_peak: Any, num_gpus: Any, fwd_flops: float, params: Any = None, expert: Any = None,
         act: ActivationTerms | None = None, group: Shared | None = None,
         software: Software = DEFAULT_SOFTWARE) -> Work:
    """The memory and the derived numbers of one scenario or of a batch.

    ``facts`` holds the cluster facts (a :class:`~twin.core.facts.ClusterFacts`, or per-point
    arrays of its fields for a batch); ``group`` what the scenario's group shares, when known.
    """
    if params is None:
        params, expert = stage_params(plan, w, stage.layers)
    m = plan.gbs // (plan.mbs * dp)
    if act is None:
        act = activation_terms(plan, model, w, dev.flash)
    if group is None:
        group = shared(plan, model, w, dp, dev, facts, params, expert, software)
    states = group.states
    tiers = group.tiers
    mem = memory_per_gpu(plan, model, w, dp, m, params, expert, facts.capacity_bytes, tiers.pool.capacity_bytes,
                         dev.flash, act, states, tiers.host.capacity_bytes)
    # Positionally, in Work's field order: keywords cost about twice as much (timeit), and
    # every evaluation builds one.
    return Work(plan, dp, m, dev, w, stage, params, expert, act, mem, states.divisors, group.optimizer_s,
                group.passes * fwd_flops * plan.gbs, facts.capacity_bytes, tiers, facts.tp_overlap_default,
                facts.half_peak_tflops, prec_peak, num_gpus)


def group_shared(plan: Any, model: Model, dp: Any, dev: Device, w: Workload, facts: Any, params: Any, expert: Any,
                 software: Software) -> Shared:
    """:func:`shared` with rank 0's parameters (``pipelines.rank0_params``): what one scenario's
    group of points (the same everything but gbs and vp) shares.
    """
    params, expert = rank0_params(plan, params, expert, w)
    return shared(plan, model, w, dp, dev, facts, params, expert, software)


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


# ------------------------------------------------------------------ the strategies' context
def context(wk: Work, model: Model, cluster: Any, calibration: Any, hierarchy: Hierarchy | HierarchyBatch,
            spans: dict[str, GroupSpan], cost_fn: Callable[..., Any], points: int,
            scenario: Scenario | None, *, schedule: bool = True,
            software: Software = DEFAULT_SOFTWARE) -> EvalContext:
    """The strategies' context. ``schedule=False``: one row per group of points that differ
    only in the global batch and the interleaving depth, which it does not hold (reading
    ``microbatches``, ``plan.gbs``, ``plan.vp`` or the per-micro-batch activations fails).
    """
    plan = wk.plan
    tp_comm = plan.overlap.tp_comm
    # Unset: on where both the GPU (Hopper+, TE userbuffers) and the stack support it.
    default = ops.logical_and(wk.tp_overlap_default, software.tp_comm_overlap)
    if points:
        tp_overlap = np.where(tp_comm < 0, default, tp_comm == 1)
    else:
        tp_overlap = default if tp_comm is None else tp_comm
    # The activations one micro-batch saves for its backward (what activation offload moves).
    act = wk.act
    if schedule:
        saved = act.per_microbatch
        m = wk.m
    else:
        plan, saved, m = dataclasses.replace(plan, gbs=None, vp=None), None, None
    # Positionally, in EvalContext's field order (notes: a fresh list, as its default): as Work.
    return EvalContext(plan, model, cluster, calibration, wk.dp, m, wk.dev, wk.w, hierarchy, spans, wk.stage,
                       wk.params, wk.expert, tp_overlap, cost_fn, wk.tiers, saved, points, scenario, [],
                       software)


# ------------------------------------------------------------------ the strategies' terms
def strategy_terms(strat: Strategy, ctx: EvalContext, point: PointContext | None = None) -> Terms | None:
    """The strategy's terms (None if it takes no part); a batch's are zero where inactive.

    A strategy that handles one scenario at a time (``vectorized = False``) is evaluated
    point by point on a batch, each point in its own one-scenario context (``point``).
    """
    if not ctx.batch:
        if not strat.active(ctx):
            return None
        return strat.evaluate(ctx)
    if not strat.vectorized:
        assert point is not None, "a batch with a scalar-only strategy needs its points' contexts"
        return terms_point_by_point(strat, ctx, point)
    active = strat.active(ctx)
    if not ops.any_(active):
        return None
    t = strat.evaluate(ctx)
    if type(active) is np.ndarray and not active.all():
        return Terms(*(np.where(active, getattr(t, f), 0.0) for f in TERM_FIELDS), algorithm=None)
    return t


def terms_point_by_point(strat: Strategy, ctx: EvalContext, point: PointContext) -> Terms | None:
    """A scalar-only strategy's terms in a batch: each point in its own context."""
    n = ctx.points
    vals = {f: np.zeros(n) for f in TERM_FIELDS}
    anyone = False
    for i in range(n):
        one = point(ctx, i)
        if not strat.active(one):
            continue
        anyone = True
        t = strat.evaluate(one)
        for f in TERM_FIELDS:
            vals[f][i] = getattr(t, f)
    if not anyone:
        return None
    return Terms(**vals)


# ------------------------------------------------------------------ flows in flight together
def traffic_of(strat: Strategy) -> tuple[tuple[str, str], ...]:
    """The (dimension, pattern) pairs a strategy's traffic runs over (its own dimension with
    that dimension's usual pattern when it does not say; empty: no network traffic).
    """
    traffic = strat.traffic
    if traffic is None:
        pattern = DEFAULT_PATTERNS.get(strat.dimension)
        traffic = ((strat.dimension, pattern),) if pattern else ()
    return traffic


def flows(ctx: EvalContext, parts: Sequence[tuple[Strategy, Terms]],
          profiles: Sequence[Any]) -> tuple[list[Flow], tuple[Any, ...], tuple[int, ...]]:
    """(the strategies' flows, their stretches, their index in ``parts``), from each part's
    link profile (``contention.traffic_profile``; None: no traffic).
    """
    m, stage = ctx.microbatches, ctx.stage
    step_window = stage.fwd_s + stage.bwd_s
    # Blocking collectives hold the step up: the micro-batches span their time too.
    blocking: Any = 0.0
    for strat, t in parts:
        if not strat.overlapped:
            blocking = blocking + t.exposed_per_microbatch_s * m + t.exposed_per_step_s
    microbatch_window = m * stage.total_s + blocking
    out: list[Flow] = []
    where: list[int] = []
    for i, (strat, t) in enumerate(parts):
        profile = profiles[i]
        if profile is None:
            continue
        issued = t.issued_per_microbatch_s * m + t.issued_per_step_s
        nbytes = t.bytes_per_microbatch * m + t.bytes_per_step
        window = ops.maximum(issued, step_window if strat.phase == "step" else microbatch_window)
        out.append(Flow(strat.name, profile, nbytes, issued, window, strat.phase, strat.overlapped))
        where.append(i)
    if len(out) < 2:  # nothing to share with: every link class as alone
        return out, tuple(unstretched(f.profile) for f in out), tuple(where)
    return out, tuple(stretches(out)), tuple(where)


def flow_record(f: Flow) -> tuple[Any, ...]:
    """A flow's fields as a plain tuple (``Flow(*record)`` makes it again)."""
    return (f.name, f.profile, f.nbytes, f.issued_s, f.window_s, f.phase, f.overlapped)


def unstretched(profile: Any) -> Any:
    """A stretch of 1 on every link class of ``profile`` (tuple or points x classes)."""
    return tuple(1.0 for _ in profile) if isinstance(profile, tuple) else np.ones_like(profile)


# ------------------------------------------------------------------ the step
def finish(ctx: EvalContext, wk: Work, parts: Sequence[tuple[Strategy, Terms]], flow_set: Flows,
           breakdown: bool = True) -> Any:
    """The step (a :class:`Step`) from the strategies' terms: the schedule, per-step terms,
    interference. ``breakdown=False``: the step time only (the step alone, next to the
    contended one: no per-dimension exposed, issued, bytes, algorithms, and no Step, whose
    building took ~40 % of this call, measured).
    """
    m = ctx.microbatches
    stage = ctx.stage
    exposed_mb: Any = 0.0
    for _, terms in parts:
        exposed_mb = exposed_mb + terms.exposed_per_microbatch_s
    t_mb = stage.total_s + exposed_mb
    pipe, bubble = pipeline_time(ctx.plan, m, t_mb, stage.avg_stage_s + exposed_mb, stage)
    # The optimizer step is no shorter than the host's step tail (grad-norm and inf-check
    # syncs, optimizer launches: Software.step_us), which it overlaps.
    opt_s = ops.maximum(wk.optimizer_s, stage.host_step_s)
    if not breakdown:
        offload_step, per_step, interference = _step_terms(parts, m)
        return pipe + per_step + opt_s + offload_step + interference
    exposed, issued, nbytes, algorithms, details, sums = _dimensions(parts, m, ctx.batch)
    offload_s, offload_step, per_step, interference = sums
    # The offload stalls of the micro-batches are in ``pipe`` already (their t_mb); the breakdown
    # reports them under offload_s, the step adds only the per-step part.
    step = pipe + per_step + opt_s + offload_step + interference
    return Step(step, m * (stage.fwd_s + stage.bwd_s), m * stage.recompute_s, exposed, issued, nbytes, bubble,
                opt_s, offload_s, interference, algorithms, list(ctx.notes), flow_set, details)


def _step_terms(parts: Sequence[tuple[Strategy, Terms]], m: Any) -> tuple[Any, Any, Any]:
    """(offload's per-step stall, per-step exposed communication, interference) of the strategies'
    terms (the per-micro-batch stalls are in the pipeline's time).
    """
    offload_s: Any = 0.0
    per_step: Any = 0.0
    hidden: Any = 0.0
    for strat, t in parts:
        if strat.dimension == "offload":
            offload_s = offload_s + t.exposed_per_step_s
        else:
            per_step = per_step + t.exposed_per_step_s
        if strat.interferes:
            total = t.issued_per_microbatch_s * m + t.issued_per_step_s
            hidden = hidden + ops.maximum(0.0, total - t.exposed_per_microbatch_s * m - t.exposed_per_step_s)
    return offload_s, per_step, OVERLAP_INTERFERENCE * hidden


def _dimensions(parts: Sequence[tuple[Strategy, Terms]], m: Any, batch: bool) -> tuple[Any, ...]:
    """Per dimension: exposed, issued, bytes (one scenario only), algorithms and details (one
    scenario only); and (offload's whole stall, its per-step part, per-step exposed, interference),
    the last three as :func:`_step_terms`.
    """
    exposed: dict[str, Any] = {}
    issued: dict[str, Any] = {}
    nbytes: dict[str, Any] = {}
    algorithms: dict[str, str] = {}
    details: dict[str, dict[str, Any]] = {}
    offload_s: Any = 0.0
    offload_step: Any = 0.0
    per_step: Any = 0.0
    hidden: Any = 0.0
    for strat, t in parts:
        dim = strat.dimension
        if dim == "offload":
            offload_s = offload_s + (t.exposed_per_microbatch_s * m + t.exposed_per_step_s)
            offload_step = offload_step + t.exposed_per_step_s
        else:
            e = t.exposed_per_microbatch_s * m + t.exposed_per_step_s
            if batch or e > 0 or dim not in exposed:
                exposed[dim] = exposed.get(dim, 0.0) + e
        total = t.issued_per_microbatch_s * m + t.issued_per_step_s
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
    return exposed, issued, nbytes, algorithms, details, (offload_s, offload_step, per_step,
                                                          OVERLAP_INTERFERENCE * hidden)


def step_lower_bound(plan: Any, m: Any, stage: StageTimes, optimizer_s: Any) -> Any:
    """A step time no plan's step is below: ``m`` micro-batches of the bottleneck stage's
    compute, its schedule's bubble with no communication exposed, and the optimizer step.

    The step (:func:`finish`) adds exposed communication to the micro-batch and to the mean
    stage's time the bubble is computed from, and only non-negative terms after that
    (per-step communication, offload, interference); every schedule's bubble
    (``twin.core.pipelines.bubble``) grows with that time, so leaving the communication out
    gives a bound from below, less ``_BOUND_SLACK`` for rounding.
    """
    pipe, _ = pipeline_time(plan, m, stage.total_s, stage.avg_stage_s, stage)
    return (pipe + ops.maximum(optimizer_s, stage.host_step_s)) * (1.0 - _BOUND_SLACK)


# ------------------------------------------------------------------ notes of one scenario
# Above this share of a stage's compute the fused-attention kernel a stack runs moves the step
# by several percent (the profile's fitted and cuDNN figures differ by 1.5-1.7x on Hopper), so
# the estimate says which one it assumed.
ATTENTION_NOTE_SHARE = 0.25


def attention_kernel_note(scenario: Scenario, stage: Any) -> str:
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
