"""Fast evaluation of many points with results identical to ``TwinModel.evaluate``.

Why it is fast (``benchmarks/bench_sweep.py``; ``TwinModel.evaluate`` alone does ~3,000
evaluations/s per core):

- **groups**: points that differ only in the global batch (gbs) and the virtual-pipeline
  degree (vp) share everything the model computes before the schedule: workload, stage
  times, group placement, every collective, each strategy's contribution, the optimizer
  step and the memory of model states. That is computed once per group;
- **numpy** over the points of a group: micro-batch count, pipeline bubble, in-flight
  activations, the assembly of the step, MFU and tokens/s;
- **memoisation** across groups: devices, workloads, placements, stage times and every
  collective cost (per op, size, group span and hierarchy) are cached for the process;
- **cheap rejection**: the cross-field rules are checked once per group; per point only
  the two rules that involve gbs and vp run, vectorised; the memory of all points of a
  group is known before any communication is costed, so out-of-memory groups cost little;
- no fabric report (switch counts, power) per point.

How it stays identical: each group is evaluated by the real strategy plugins on a
representative scenario with one micro-batch and no interleaving. For the built-in
strategies the per-point values follow exactly from it: tensor, context, expert and
FSDP contributions scale their issued time and bytes by the micro-batch count as their
last operation; data parallelism does not depend on it; the pipeline schedule and the
assembly of the step are re-stated below in the same operation order as
``twin/core/evaluate.py`` and ``plugins/pipeline_parallel.py`` (so floats match bit for
bit). Constants are imported from those modules. Anything else (a third-party strategy,
a collective-cost hook, offloading) runs through the scalar path: the real
``TwinModel.evaluate`` with memoised collectives and stage times.

Guards: at m=1 the re-stated memory must equal ``memory_per_gpu`` exactly, and every
``check_every``-th group one point is re-evaluated with the real model; a mismatch
(the model changed under this module) logs a warning and switches the evaluator to the
scalar path for the rest of the run. ``tests/sweep/test_fastpath.py`` compares both
paths with ``TwinModel.evaluate`` on thousands of random points.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from twin_plugins.context_parallel import ContextParallel
from twin_plugins.cxl import OffloadStrategy
from twin_plugins.data_parallel import DataParallel
from twin_plugins.expert_parallel import ExpertParallel
from twin_plugins.fsdp import FullySharded
from twin_plugins.pipeline_parallel import PipelineParallel
from twin_plugins.tensor_parallel import TensorParallel

from twin.core import memory as core_memory
from twin.core.api import EvalContext, MemoryFabric, StageTimes, stride_of
from twin.core.collectives import CollectiveCost, collective_cost
from twin.core.compute import Device, device_for
from twin.core.errors import SpecError, TwinError
from twin.core.estimate import Estimate
from twin.core.evaluate import DEFAULT_EFFICIENCY, OVERLAP_INTERFERENCE, TwinModel, model_flops_per_step
from twin.core.memory import FRAGMENTATION, RUNTIME_RESERVED_BYTES, memory_per_gpu
from twin.core.specs import Cluster, Offload, Plan, Scenario, validate_cluster, validate_model, validate_plan
from twin.core.topology import GroupSpan, Hierarchy, place_group
from twin.core.units import GIB
from twin.core.workload import ACT_BYTES, Workload, build_workload
from twin.sweep.metrics import EXPOSED_DIMS, FLOAT_COLUMNS, INT_COLUMNS, MEMORY_REASON, reason_of
from twin.sweep.points import GroupSpec, PointBatch

if TYPE_CHECKING:
    from twin.engine import Engine

log = logging.getLogger(__name__)

# How each built-in strategy's contribution depends on the micro-batch count m:
# "m": issued time and bytes are (value at m=1) * m, exposed time does not depend on m;
# "1": nothing depends on m; "pipeline": re-stated below; "inactive": must not take part.
_KNOWN: dict[type, str] = {TensorParallel: "m", ContextParallel: "m", ExpertParallel: "m", FullySharded: "m",
                           DataParallel: "1", PipelineParallel: "pipeline", OffloadStrategy: "inactive"}
_NO_OFFLOAD = Offload()
ARITHMETIC_REASON = "scenario: some value is outside the numeric range the model can compute"
_DIMS = ("tp", "cp", "ep", "dp", "pp", "edp")


# ----------------------------------------------------------------- scalar path
class CachedModel(TwinModel):
    """``TwinModel`` with memoised collectives and stage times (same results, fewer repeats).

    Collective costs are cached per (hierarchy, op, size, span, algorithm) only when no
    plugin overrides collective costing (an override sees the whole scenario).
    """

    def __init__(self, base: TwinModel) -> None:
        super().__init__(base.fabrics, base.strategies, base.cost_override)
        self._costs: dict[int, tuple[Hierarchy, dict[tuple[Any, ...], CollectiveCost]]] = {}
        self._stages: dict[tuple[Any, ...], tuple[Workload, StageTimes]] = {}

    def _cost_fn(self, scenario: Scenario, hierarchy: Hierarchy) -> Callable[..., CollectiveCost]:
        if self.cost_override is not None:
            return super()._cost_fn(scenario, hierarchy)
        hit = self._costs.get(id(hierarchy))
        if hit is None or hit[0] is not hierarchy:
            if len(self._costs) > 4096:
                self._costs.clear()
            hit = (hierarchy, {})
            self._costs[id(hierarchy)] = hit
        cache = hit[1]

        def cost(op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
            key = (op, size, span, algorithm)
            got = cache.get(key)
            if got is None:
                got = collective_cost(op, size, span, hierarchy, algorithm)
                cache[key] = got
            return got

        return cost

    def _stage_times(self, scenario: Scenario, dev: Device, w: Workload) -> StageTimes:
        plan = scenario.plan
        key = (dev, id(w), work_key(plan))
        hit = self._stages.get(key)
        if hit is None or hit[0] is not w:
            if len(self._stages) > 65536:
                self._stages.clear()
            hit = (w, super()._stage_times(scenario, dev, w))
            self._stages[key] = hit
        return hit[1]


def estimate_columns(est: Estimate, power_kw: float) -> dict[str, float]:
    """The sweep's float columns of one :class:`Estimate` (the reference the fast path matches)."""
    bd = est.breakdown
    ex = bd.exposed_comm_s
    other = 0.0
    for k, v in ex.items():
        if k not in EXPOSED_DIMS:
            other += v
    return {
        "step_time_s": est.step_time_s, "compute_s": bd.compute_s, "recompute_s": bd.recompute_s,
        "exposed_tp_s": ex.get("tp", 0.0), "exposed_cp_s": ex.get("cp", 0.0), "exposed_ep_s": ex.get("ep", 0.0),
        "exposed_dp_s": ex.get("dp", 0.0), "exposed_pp_s": ex.get("pp", 0.0), "exposed_other_s": other,
        "bubble_s": bd.bubble_s, "optimizer_s": bd.optimizer_s, "offload_s": bd.offload_s,
        "interference_s": bd.overlap_interference_s, "memory_gib": est.memory.total / GIB,
        "tokens_per_s": est.tokens_per_s, "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": est.model_tflops_per_gpu, "mfu": est.mfu,
        "mfu_at_precision_peak": est.mfu_at_precision_peak, "power_kw": power_kw,
        "tokens_per_joule": est.tokens_per_s / (power_kw * 1e3),
    }


# ----------------------------------------------------------------- results
@dataclass
class Evaluated:
    """Per-point results of one batch: reason index (-1 = feasible) and metric columns."""

    reason_ix: np.ndarray
    reasons: list[str]
    floats: dict[str, np.ndarray]
    ints: dict[str, np.ndarray]
    stats: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> Evaluated:
        """All points feasible with NaN metrics (filled by the evaluator)."""
        return cls(reason_ix=np.full(n, -1, dtype=np.int32), reasons=[],
                   floats={c: np.full(n, np.nan) for c in FLOAT_COLUMNS},
                   ints={c: np.full(n, -1, dtype=np.int64) for c in INT_COLUMNS},
                   stats={"groups": 0, "vector_groups": 0, "scalar_points": 0, "checks": 0})


@dataclass
class _Group:
    """What the evaluator knows about one group (cached per GroupSpec)."""

    spec: GroupSpec
    reason: str | None                  # first failing rule not involving gbs/vp (or the build error)
    rep: Scenario | None = None         # the group at gbs = mbs*dp (one micro-batch), vp = 1
    mbs_dp: int = 0
    probes: dict[str, str | None] = field(default_factory=dict)
    mem: tuple[float, float, float, float, float] | None = None   # act_base, recompute extra, wgo, logits, capacity
    has_full: bool = False
    vector: bool = True
    step: dict[str, Any] | None = None
    slots: list[tuple[bool, float, float, float]] | None = None  # per strategy: active, emb, est, comm@m=1
    checked: bool = False


class FastEvaluator:
    """Evaluates :class:`PointBatch` es: vector path for built-in models, scalar otherwise."""

    def __init__(self, engine: Engine, *, check_every: int = 256, vector: bool = True,
                 memory_headroom: float = 0.0) -> None:
        if not 0.0 <= memory_headroom < 1.0:
            raise SpecError("memory_headroom", f"must be in [0, 1) (got {memory_headroom!r})")
        self.engine = engine
        # Fraction of HBM a plan must leave free to count as fitting (0: the model's own verdict).
        self.headroom = memory_headroom
        self.scalar = CachedModel(engine.model)
        self.check_every = max(1, check_every)
        self.vector = vector and self._vector_supported()
        self.strategies = list(self.scalar.strategies)
        self._seq = -1
        self._dev: dict[tuple[Any, ...], tuple[Any, Device]] = {}
        self._wl: dict[tuple[Any, ...], tuple[Any, Workload]] = {}
        self._spans: dict[int, tuple[Hierarchy, dict[tuple[int, int], GroupSpan]]] = {}
        self._cluster: dict[int, tuple[Cluster, dict[str, float]]] = {}
        self._mf: dict[tuple[Any, ...], tuple[Any, float]] = {}
        self._groups: dict[int, _Group] = {}
        self._act: dict[tuple[Any, ...], tuple[Workload, tuple[float, float | None]]] = {}
        self._par: dict[tuple[Any, ...], tuple[Workload, tuple[float, float]]] = {}
        self._static: dict[tuple[int, int], tuple[Cluster, Any, tuple[str | None, str | None]]] = {}

    def _vector_supported(self) -> bool:
        model = self.engine.model
        if model.cost_override is not None:
            return False
        return all(type(s) in _KNOWN for s in model.strategies)

    # ------------------------------------------------------------ caches
    def _device(self, cluster: Cluster, precision: str, scale: float) -> Device:
        gpu = cluster.gpu
        key = (id(gpu), precision, scale)
        hit = self._dev.get(key)
        if hit is None or hit[0] is not gpu:
            eff = gpu.efficiency or DEFAULT_EFFICIENCY
            hit = (gpu, device_for(gpu, precision, eff, scale))
            self._dev[key] = hit
        return hit[1]

    def _workload(self, scn: Scenario) -> Workload:
        plan, model = scn.plan, scn.model
        key = (id(model), plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
        hit = self._wl.get(key)
        if hit is None or hit[0] is not model:
            if len(self._wl) > 65536:
                self._wl.clear()
            hit = (model, build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp))
            self._wl[key] = hit
        return hit[1]

    def _span(self, n: int, stride: int, h: Hierarchy) -> GroupSpan:
        hit = self._spans.get(id(h))
        if hit is None or hit[0] is not h:
            if len(self._spans) > 4096:
                self._spans.clear()
            hit = (h, {})
            self._spans[id(h)] = hit
        got = hit[1].get((n, stride))
        if got is None:
            got = place_group(n, stride, h)
            hit[1][(n, stride)] = got
        return got

    def cluster_facts(self, scn: Scenario) -> dict[str, float]:
        """Per-cluster constants: power (GPU TDP x GPUs + optics), pool bandwidth/capacity."""
        cluster = scn.cluster
        hit = self._cluster.get(id(cluster))
        if hit is not None and hit[0] is cluster:
            return hit[1]
        facts = {"power_kw": cluster.gpu.tdp_w * cluster.num_gpus / 1e3, "offload_bw": 0.0, "pool_capacity": 0.0}
        if cluster.optics is not None:
            try:
                report = self.scalar.fabric_report(scn, self.scalar.hierarchy(scn))
                facts["power_kw"] += float((report.get("optics") or {}).get("optics_power_kw", 0.0))
            except (TwinError, KeyError, TypeError, ValueError):
                pass
        if cluster.memory_pool is not None:
            fab = self.scalar.fabrics.get("memory", cluster.memory_pool.fabric, "cluster.memory_pool.fabric")
            assert isinstance(fab, MemoryFabric)
            facts["offload_bw"] = fab.bandwidth_per_gpu_Bps(cluster)
            facts["pool_capacity"] = fab.capacity_per_gpu_bytes(cluster)
        if len(self._cluster) > 4096:
            self._cluster.clear()
        self._cluster[id(cluster)] = (cluster, facts)
        return facts

    def _model_flops_1(self, scn: Scenario) -> float:
        """Model FLOPs of one step at gbs=1 (the per-sequence factor, exactly)."""
        key = (id(scn.model), work_key(scn.plan))
        hit = self._mf.get(key)
        if hit is None or hit[0] is not scn.model:
            one = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, gbs=1))
            hit = (scn.model, model_flops_per_step(one))
            self._mf[key] = hit
        return hit[1]

    def _params(self, scn: Scenario, w: Workload, stage: StageTimes) -> tuple[float, float]:
        key = (id(w), stage.layers, scn.plan.pp > 1)
        hit = self._par.get(key)
        if hit is None or hit[0] is not w:
            if len(self._par) > 65536:
                self._par.clear()
            hit = (w, _params(scn, w, stage))
            self._par[key] = hit
        return hit[1]

    # ------------------------------------------------------------ validity
    def _check(self, scn: Scenario) -> str | None:
        """``TwinModel.validate``'s first failing rule: cluster, model, plan, then each fabric's own.

        The cluster, model and fabric rules do not depend on the plan, so they are checked
        once per cluster/model object; only the plan rules run per group.
        """
        cluster, model = scn.cluster, scn.model
        key = (id(cluster), id(model))
        hit = self._static.get(key)
        if hit is None or hit[0] is not cluster or hit[1] is not model:
            try:
                validate_cluster(cluster)
                validate_model(model)
                static: tuple[str | None, str | None] = (None, None)
            except TwinError as err:
                static = (reason_of(err), None)
            if static[0] is None:
                try:
                    for fab in self.scalar._cluster_fabrics(scn):
                        fab.validate(cluster, "cluster")
                except TwinError as err:
                    static = (None, reason_of(err))
            if len(self._static) > 4096:
                self._static.clear()
            hit = (cluster, model, static)
            self._static[key] = hit
        before, after = hit[2]
        if before is not None:
            return before
        try:
            validate_plan(scn.plan, model, cluster)
        except TwinError as err:
            return reason_of(err)
        return after

    def _group(self, g: GroupSpec) -> _Group:
        hit = self._groups.get(id(g))
        if hit is not None and hit.spec is g:
            return hit
        if g.error is not None:
            info = _Group(spec=g, reason=g.error)
        else:
            plan, cluster = g.plan, g.cluster
            assert plan is not None and cluster is not None and g.model is not None
            mp = plan.tp * plan.pp * plan.cp
            dp = plan.dp if plan.dp is not None else cluster.num_gpus // mp
            mbs_dp = plan.mbs * dp
            if plan.gbs != max(1, mbs_dp) or plan.vp != 1:
                plan = dataclasses.replace(plan, gbs=max(1, mbs_dp), vp=1)
            rep = Scenario(cluster=cluster, model=g.model, calibration=g.calibration, plan=plan)
            info = _Group(spec=g, reason=self._check(rep), rep=rep, mbs_dp=mbs_dp,
                          vector=self.vector and plan.offload == _NO_OFFLOAD)
        if len(self._groups) > 262144:
            self._groups.clear()
        self._groups[id(g)] = info
        return info

    def _probe(self, info: _Group, what: str) -> str | None:
        """The first failing rule with gbs (or vp) made invalid: where the group's rule sits."""
        if what not in info.probes:
            rep = info.rep
            assert rep is not None
            if what == "gbs":
                bad = dataclasses.replace(rep, plan=dataclasses.replace(rep.plan, gbs=info.mbs_dp + 1))
            else:
                bad = dataclasses.replace(rep, plan=dataclasses.replace(rep.plan, vp=rep.model.layers + 1))
            info.probes[what] = self._check(bad) or f"plan.{what}"
        return info.probes[what]

    # ------------------------------------------------------------ evaluation
    def evaluate(self, batch: PointBatch) -> Evaluated:
        """Results of every point of ``batch``."""
        n = len(batch)
        out = Evaluated.empty(n)
        if n == 0:
            return out
        try:
            self._evaluate(batch, out)
        except _Mismatch:
            out = Evaluated.empty(n)
            self._evaluate(batch, out)
        return out

    def _evaluate(self, batch: PointBatch, out: Evaluated) -> None:
        codes: dict[str, int] = {}

        def code(reason: str | None) -> int:
            return -1 if reason is None else codes.setdefault(reason, len(codes))

        infos = [self._group(g) for g in batch.groups]
        G = len(infos)
        out.stats["groups"] += G
        gix = batch.gix
        gbs = batch.gbs if batch.gbs is not None else np.asarray([g.gbs for g in batch.groups], np.int64)[gix]
        vp = batch.vp if batch.vp is not None else np.asarray([g.vp for g in batch.groups], np.int64)[gix]
        g_reason = np.asarray([code(i.reason) for i in infos], np.int64)
        g_err = np.asarray([i.rep is None for i in infos])
        g_mbsdp = np.asarray([i.mbs_dp for i in infos], np.int64)
        g_pp = np.asarray([i.rep.plan.pp if i.rep is not None else 1 for i in infos], np.int64)
        g_layers = np.asarray([i.rep.model.layers if i.rep is not None else 1 for i in infos], np.int64)
        # validate_plan's two rules that involve per-point fields (gbs first, then vp)
        mbsdp = g_mbsdp[gix]
        gbs_bad = (mbsdp > 1) & (gbs % np.maximum(mbsdp, 1) != 0)
        pp = g_pp[gix]
        vp_bad = (vp > 1) & ((pp == 1) | (pp * vp > g_layers[gix]))
        any_gbs = np.bincount(gix[gbs_bad], minlength=G) > 0
        any_vp = np.bincount(gix[vp_bad], minlength=G) > 0
        g_gcode = np.full(G, -1, np.int64)
        g_vcode = np.full(G, -1, np.int64)
        g_before_gbs = g_err.copy()
        g_before_vp = g_err.copy()
        for k, info in enumerate(infos):
            if info.rep is None:
                continue
            if any_gbs[k]:
                g_gcode[k] = code(self._probe(info, "gbs"))
                g_before_gbs[k] = info.reason is not None and g_gcode[k] == g_reason[k]
            if any_vp[k]:
                g_vcode[k] = code(self._probe(info, "vp"))
                g_before_vp[k] = info.reason is not None and g_vcode[k] == g_reason[k]
            else:
                g_before_vp[k] = True
        R, GC, VC = g_reason[gix], g_gcode[gix], g_vcode[gix]
        bg, bv = g_before_gbs[gix], g_before_vp[gix]
        with_r = np.where(bg, R, np.where(gbs_bad, GC, np.where(bv, R, np.where(vp_bad, VC, R))))
        without = np.where(gbs_bad, GC, np.where(vp_bad, VC, -1))
        reason = np.where(R >= 0, with_r, without)
        valid = reason < 0
        memory_code = code(MEMORY_REASON)
        # memory of the valid points (vector groups), else the scalar path
        has_valid = np.bincount(gix[valid], minlength=G) > 0
        vec = np.zeros(G, dtype=bool)
        g_mem = np.zeros((G, 5))
        g_full = np.zeros(G, dtype=bool)
        scalar_groups: list[int] = []
        for k in np.flatnonzero(has_valid):
            info = infos[k]
            if info.vector and info.mem is None:
                try:
                    self._prep_memory(info)
                except ArithmeticError:  # an extreme input: the scalar path reports it per point
                    info.vector = False
            if info.vector and info.mem is not None:
                vec[k] = True
                g_mem[k] = info.mem
                g_full[k] = info.has_full
            else:
                scalar_groups.append(int(k))
        out.stats["vector_groups"] += int(vec.sum())
        pv = np.flatnonzero(valid & vec[gix])
        gv = gix[pv]
        m = gbs[pv] // g_mbsdp[gv]
        p = g_pp[gv]
        vpv = vp[pv]
        # memory_per_gpu (twin/core/memory.py): the terms that depend on m and v
        with np.errstate(all="ignore"):
            frac = np.where(vpv > 1, (p - 1) / (p * vpv), 0.0)
            in_flight = np.where(p > 1, np.minimum(p, m) * (1.0 + frac), 1.0)
            mem = g_mem[gv]
            act = mem[:, 0] * in_flight
            act = np.where(g_full[gv], act + mem[:, 1], act)
            live = mem[:, 2] + act + mem[:, 3]
            total = live + (RUNTIME_RESERVED_BYTES + FRAGMENTATION * live)
            fits = total <= mem[:, 4] if self.headroom == 0.0 else total <= mem[:, 4] * (1.0 - self.headroom)
        reason[pv[~fits]] = memory_code
        pv, gv, m, p, vpv, total = pv[fits], gv[fits], m[fits], p[fits], vpv[fits], total[fits]
        # strategies of the groups with fitting points, once per group
        for k in np.unique(gv):
            info = infos[k]
            try:
                stepped = info.step is not None or self._prep_step(info)
            except ArithmeticError:
                stepped = False
            if not stepped:
                info.vector = False
        ok_g = np.asarray([i.step is not None and i.vector for i in infos])
        unstepped = ~ok_g[gv]
        if unstepped.any():
            scalar_groups.extend(int(k) for k in np.unique(gv[unstepped]) if int(k) not in scalar_groups)
            keep = ~unstepped
            pv, gv, m, p, vpv, total = pv[keep], gv[keep], m[keep], p[keep], vpv[keep], total[keep]
        with np.errstate(all="ignore"):
            self._tail(infos, pv, gv, m, p, vpv, gbs[pv], total, out)
        # A step that is not finite is where plain Python would have raised (a division by
        # zero at an extreme input): let the scalar path give that point its exact outcome.
        odd = pv[~np.isfinite(out.floats["step_time_s"][pv])] if len(pv) else pv
        out.reason_ix[:] = reason
        redo = np.flatnonzero(valid & np.isin(gix, np.asarray(scalar_groups, np.int64)))
        redo = np.concatenate([redo, odd]) if len(odd) else redo
        if len(redo):
            redo = redo[np.argsort(gix[redo], kind="stable")]
            for pts in np.split(redo, np.flatnonzero(np.diff(gix[redo])) + 1):
                if len(pts):
                    self._scalar(infos[int(gix[pts[0]])], pts, gbs[pts], vp[pts], out, code)
        if len(odd):
            keep = ~np.isin(pv, odd)
            pv, gv = pv[keep], gv[keep]
        self._self_check(infos, pv, gv, gbs, vp, out)
        out.reasons = list(codes)

    # ------------------------------------------------------------ vector path
    def _prep_memory(self, info: _Group) -> None:
        """Memory terms of the group at m=1; not vector if the re-stated formula disagrees."""
        scn = info.rep
        assert scn is not None
        plan, model = scn.plan, scn.model
        facts = self.cluster_facts(scn)
        dev = self._device(scn.cluster, plan.precision, scn.calibration.compute_efficiency)
        w = self._workload(scn)
        stage = self.scalar._stage_times(scn, dev, w)
        params_gpu, expert_gpu = self._params(scn, w, stage)
        mem1 = memory_per_gpu(scn, w, scn.dp, 1, params_gpu, expert_gpu, facts["pool_capacity"])
        flash = True if scn.cluster.gpu.efficiency is None else scn.cluster.gpu.efficiency.flash_attention
        akey = (id(w), id(model), work_key(plan), flash)
        hit = self._act.get(akey)
        if hit is None or hit[0] is not w:
            if len(self._act) > 65536:
                self._act.clear()
            try:
                hit = (w, activation_terms(scn, w))
            except (AttributeError, TypeError) as err:  # the memory model changed shape
                log.warning("fast path: memory model changed (%s); scalar path", err)
                info.vector = False
                return
            self._act[akey] = hit
        act_base, extra = hit[1]
        act1 = act_base * 1.0
        if extra is not None:
            act1 = act1 + extra
        wgo = mem1.weights + mem1.gradients + mem1.optimizer
        live = wgo + act1 + mem1.logits
        total1 = live + (RUNTIME_RESERVED_BYTES + FRAGMENTATION * live)
        if act1 != mem1.activations or total1 != mem1.total or mem1.offloaded != 0.0 or mem1.pool_capacity < 0:
            log.warning("fast path: memory model changed (m=1 mismatch); scalar path for this group")
            info.vector = False
            return
        info.mem = (act_base, extra or 0.0, wgo, mem1.logits, mem1.capacity)
        info.has_full = extra is not None

    def _prep_step(self, info: _Group) -> bool:
        """Strategy contributions of the group at m=1 (False: not expressible here)."""
        scn = info.rep
        assert scn is not None
        plan, model, cluster = scn.plan, scn.model, scn.cluster
        dp = scn.dp
        facts = self.cluster_facts(scn)
        dev = self._device(cluster, plan.precision, scn.calibration.compute_efficiency)
        w = self._workload(scn)
        hierarchy = self.scalar.hierarchy(scn)
        spans = {dim: self._span(*stride_of(plan, dp, dim), hierarchy) for dim in _DIMS}
        stage = self.scalar._stage_times(scn, dev, w)
        params_gpu, expert_gpu = self._params(scn, w, stage)
        tp_overlap = plan.overlap.tp_comm
        if tp_overlap is None:
            tp_overlap = cluster.gpu.generation in ("hopper", "blackwell")
        ctx = EvalContext(scenario=scn, dp=dp, microbatches=1, device=dev, workload=w, hierarchy=hierarchy,
                          spans=spans, stage=stage, params_per_gpu=params_gpu, expert_params_per_gpu=expert_gpu,
                          tp_overlap=tp_overlap, cost_fn=self.scalar._cost_fn(scn, hierarchy),
                          offload_bw_Bps=facts["offload_bw"])
        slots: list[tuple[bool, float, float, float]] = []
        step: dict[str, Any] = {"pp_active": False, "t_avg": 0.0, "pp_est": 0.0, "p2p": 0.0,
                                "p2p_overlap": plan.overlap.p2p}
        for strat in self.strategies:
            if strat.phase == "pipeline" and ctx.microbatch_time_s == 0.0:
                ctx.microbatch_time_s = stage.total_s + ctx.exposed_per_microbatch_s
            if not strat.active(ctx):
                slots.append((False, 0.0, 0.0, 0.0))
                continue
            kind = _KNOWN[type(strat)]
            if kind == "inactive":
                return False
            if kind == "pipeline":
                # plugins/pipeline_parallel.py, per point in _tail: bubble (p-1)/v * t_avg, p2p chain
                size = w.tokens * model.hidden * ACT_BYTES / (plan.tp if plan.sp else 1)
                p2p = ctx.cost("send_recv", size, "pp")
                step.update(pp_active=True, p2p=p2p.time_s, t_avg=stage.avg_stage_s + ctx.exposed_per_microbatch_s,
                            pp_est=2.0 * (plan.pp - 1) * p2p.time_s)
                slots.append((True, 0.0, 0.0, 0.0))
                continue
            c = strat.evaluate(ctx)
            if c.dimension != _DIM_OF[type(strat)]:
                return False
            slots.append((True, c.exposed_per_microbatch_s, c.exposed_per_step_s, c.comm_per_step_s))
            if strat.phase == "microbatch":
                ctx.exposed_per_microbatch_s += c.exposed_per_microbatch_s
        half = "bf16" if "bf16" in cluster.gpu.peak_tflops else "fp16"
        step.update(t_mb=stage.total_s + ctx.exposed_per_microbatch_s,
                    opt=self.scalar._optimizer_time(scn, ctx, params_gpu, expert_gpu, dp),
                    fb=stage.fwd_s + stage.bwd_s, rc=stage.recompute_s, mf1=self._model_flops_1(scn),
                    peak=cluster.gpu.peak_tflops[half] * 1e12, peak_prec=cluster.gpu.peak_tflops[plan.precision] * 1e12,
                    power=facts["power_kw"], n=cluster.num_gpus,
                    seq=model.seq_len, dp=dp)
        info.slots = slots
        info.step = step
        return True

    def _tail(self, infos: list[_Group], pv: np.ndarray, gv: np.ndarray, m: np.ndarray, p: np.ndarray,
              vp: np.ndarray, gbs: np.ndarray, total: np.ndarray, out: Evaluated) -> None:
        """TwinModel.evaluate (twin/core/evaluate.py) from the contributions on: same operation order."""
        if len(pv) == 0:
            return
        G = len(infos)

        def col(key: str, dtype: Any = np.float64) -> np.ndarray:
            return np.asarray([i.step[key] if i.step is not None else 0 for i in infos], dtype)[gv]

        ppa = col("pp_active", bool)
        t_mb, t_avg = col("t_mb"), col("t_avg")
        bubble = np.where(ppa, (p - 1) / vp * t_avg, 0.0)
        pipe = np.where(ppa, m * t_mb + bubble, m * t_mb)
        pp_est = col("pp_est")
        pp_est = np.where(ppa & ~col("p2p_overlap", bool), pp_est + 2.0 * m * vp * col("p2p"), pp_est)
        pp_est = np.where(ppa, pp_est, 0.0)
        S = len(self.strategies)
        slot = np.zeros((G, S, 4))
        for k, i in enumerate(infos):
            if i.slots is not None:
                slot[k] = i.slots
        slot = slot[gv]
        exposed: dict[str, np.ndarray] = {}
        seen: dict[str, np.ndarray] = {}
        per_step: Any = 0.0
        hidden: Any = 0.0
        for s, strat in enumerate(self.strategies):
            kind = _KNOWN[type(strat)]
            if kind == "inactive":
                continue
            act = slot[:, s, 0] > 0
            if not act.any():
                continue
            dim = _DIM_OF[type(strat)]
            emb, est = slot[:, s, 1], slot[:, s, 2]
            est_v = pp_est if kind == "pipeline" else est
            e = emb * m + est_v
            if dim in exposed:
                new = np.where(seen[dim], np.where(e > 0, exposed[dim] + e, exposed[dim]), 0.0 + e)
                exposed[dim] = np.where(act, new, exposed[dim])
                seen[dim] = seen[dim] | act
            else:
                exposed[dim] = np.where(act, 0.0 + e, 0.0)
                seen[dim] = act
            per_step = np.where(act, per_step + est_v, per_step)
            if kind != "pipeline":
                comm = slot[:, s, 3] * m if kind == "m" else slot[:, s, 3]
                hidden = np.where(act, hidden + np.maximum(0.0, comm - emb * m - est), hidden)
        interference = OVERLAP_INTERFERENCE * hidden
        step = pipe + per_step + col("opt") + 0.0 + interference
        n = col("n")
        tokens = gbs * col("seq", np.int64)
        tps = tokens / step
        model_flops = col("mf1") * gbs
        power = col("power")
        zeros = np.zeros(len(pv))
        cols = {
            "step_time_s": step, "compute_s": m * col("fb"), "recompute_s": m * col("rc"), "bubble_s": bubble,
            "optimizer_s": col("opt"), "offload_s": zeros, "interference_s": interference + zeros,
            "memory_gib": total / GIB, "tokens_per_s": tps, "tokens_per_s_per_gpu": tokens / step / n,
            "model_tflops_per_gpu": model_flops / step / n / 1e12, "mfu": model_flops / step / n / col("peak"),
            "mfu_at_precision_peak": model_flops / step / n / col("peak_prec"),
            "power_kw": power, "tokens_per_joule": tps / (power * 1e3), "exposed_other_s": zeros,
        }
        for dim in EXPOSED_DIMS:
            cols[f"exposed_{dim}_s"] = exposed.get(dim, zeros) + zeros
        for name, arr in cols.items():
            out.floats[name][pv] = arr
        out.ints["microbatches"][pv] = m
        out.ints["dp"][pv] = col("dp", np.int64)

    def _self_check(self, infos: list[_Group], pv: np.ndarray, gv: np.ndarray, gbs: np.ndarray, vp: np.ndarray,
                    out: Evaluated) -> None:
        """Re-evaluate one point of every ``check_every``-th group with the real model."""
        if len(pv) == 0:
            return
        first = {}
        for j, k in zip(pv.tolist(), gv.tolist(), strict=True):
            first.setdefault(k, j)
        for k, j in first.items():
            info = infos[k]
            if info.checked:
                continue
            info.checked = True
            self._seq += 1
            if self._seq % self.check_every:
                continue
            out.stats["checks"] += 1
            rep = info.rep
            assert rep is not None
            scn = dataclasses.replace(rep, plan=dataclasses.replace(rep.plan, gbs=int(gbs[j]), vp=int(vp[j])))
            est = TwinModel.evaluate(self.scalar, scn, validate=False, report=False)
            ref = estimate_columns(est, self.cluster_facts(scn)["power_kw"])
            for name, want in ref.items():
                got = float(out.floats[name][j])
                if not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15):
                    log.warning("fast path disagrees with TwinModel.evaluate on %s (%r vs %r); switching to the "
                                "scalar path", name, got, want)
                    self.vector = False
                    self._groups.clear()
                    raise _Mismatch

    # ------------------------------------------------------------ scalar path
    def _scalar(self, info: _Group, pts: np.ndarray, gbs: np.ndarray, vp: np.ndarray, out: Evaluated,
                code: Callable[[str | None], int]) -> None:
        rep = info.rep
        assert rep is not None
        facts = self.cluster_facts(rep)
        for k, j in enumerate(pts.tolist()):
            scn = dataclasses.replace(rep, plan=dataclasses.replace(rep.plan, gbs=int(gbs[k]), vp=int(vp[k])))
            out.stats["scalar_points"] += 1
            try:
                self.scalar.validate(scn)
                est = self.scalar.evaluate(scn, validate=False, report=False)
            except TwinError as err:
                out.reason_ix[j] = code(reason_of(err))
                continue
            except ArithmeticError as err:  # as twin.server.guard: out of the computable range
                out.reason_ix[j] = code(f"{ARITHMETIC_REASON} ({type(err).__name__})")
                continue
            if not est.fits or (self.headroom and est.memory.total > est.memory.capacity * (1.0 - self.headroom)):
                out.reason_ix[j] = code(MEMORY_REASON)
                continue
            out.reason_ix[j] = -1
            for name, value in estimate_columns(est, facts["power_kw"]).items():
                out.floats[name][j] = value
            out.ints["microbatches"][j] = est.microbatches
            out.ints["dp"][j] = est.dp


_DIM_OF: dict[type, str] = {TensorParallel: "tp", ContextParallel: "cp", ExpertParallel: "ep", FullySharded: "dp",
                            DataParallel: "dp", PipelineParallel: "pp", OffloadStrategy: "offload"}


class _Mismatch(Exception):
    """The vector path disagreed with the real model: redo the batch on the scalar path."""


# Plan fields that change neither the per-GPU work, the stage times nor the activation
# memory (they act through the micro-batch count, sharding divisors and the schedule).
# Caches of work-derived values key on every other plan field, so a field added to Plan
# later is part of the key by default.
_NOT_WORK = frozenset({"gbs", "vp", "dp", "optimizer_sharding", "fsdp_reshard_after_forward", "grad_reduce_dtype",
                       "overlap", "offload"})
_WORK_FIELDS = tuple(f.name for f in dataclasses.fields(Plan) if f.init and f.name not in _NOT_WORK)


def work_key(plan: Plan) -> tuple[Any, ...]:
    """The plan fields work-derived caches depend on (all but ``_NOT_WORK``)."""
    return tuple(getattr(plan, f) for f in _WORK_FIELDS)


def activation_terms(scn: Scenario, w: Workload) -> tuple[float, float | None]:
    """``memory_per_gpu``'s activation terms that do not depend on m or v, same expressions.

    Returns (per-token bytes x tokens x layers of the first stage, the extra layer live
    during recomputation or None). twin/core/memory.py multiplies the first by the
    in-flight micro-batches and adds the second.
    """
    plan, model = scn.plan, scn.model
    layers_stage = core_memory.first_stage_layers(model.layers, plan.pp)
    stored = core_memory._activation_bytes_per_token_layer(scn, w)
    checkpoint = ACT_BYTES * (model.hidden / plan.tp if plan.sp else model.hidden)
    recomputed = core_memory.recomputed_layers(plan.recompute, plan.recompute_layers, layers_stage)
    per_token = (stored * (layers_stage - recomputed) + checkpoint * recomputed) / max(layers_stage, 1)
    return per_token * w.tokens * layers_stage, (stored * w.tokens if recomputed else None)


def _params(scn: Scenario, w: Workload, stage: StageTimes) -> tuple[float, float]:
    """Parameters per GPU of the bottleneck stage (TwinModel.evaluate, same expression)."""
    model, plan = scn.model, scn.plan
    params_gpu = sum(w.sublayers[k].params * c for k, c in w.counts.items()) / model.layers * stage.layers
    expert_gpu = sum(w.sublayers[k].expert_params * c for k, c in w.counts.items()) / model.layers * stage.layers
    params_gpu += max(w.embedding.params, w.head.params) if plan.pp > 1 else w.embedding.params + w.head.params
    return params_gpu, expert_gpu
