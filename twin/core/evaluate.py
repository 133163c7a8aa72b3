"""Assemble a step-time estimate from compute, the strategies' communication and the schedule.

step = pipeline_time + per-step exposed communication + optimizer step + offload, where
pipeline_time = m * t_mb + bubble (pipeline strategy) or m * t_mb without pipelining,
and t_mb = forward + backward + recompute + exposed per-micro-batch communication of
the bottleneck stage. Each parallel dimension's strategy plugin decides what it sends and
how much of it hides behind compute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from twin.core.api import (
    Contribution,
    EvalContext,
    Fabric,
    MemoryFabric,
    OpticsModel,
    ScaleOutFabric,
    ScaleUpFabric,
    StageTimes,
    Strategy,
    stride_of,
)
from twin.core.collectives import CollectiveCost, collective_cost
from twin.core.compute import Device, device_for, gemm_fwd_time, sublayer_times
from twin.core.errors import NotFoundError, PluginError
from twin.core.estimate import Breakdown, Estimate
from twin.core.memory import memory_per_gpu, recomputed_layers, shard_factors
from twin.core.specs import Calibration, Cluster, ComputeEfficiency, Scenario, validate_scenario
from twin.core.topology import GroupSpan, Hierarchy, Tier, place_group
from twin.core.workload import Workload, build_workload

# Fused Adam (multi-tensor apply) per parameter: read fp32 master, m, v and grad (16 B),
# write master, m, v (12 B) and the 16-bit weight (2 B) = 30 B (MODELING.md: optimizer
# step is memory-bound); grad-norm clipping reads the gradient once more (4 B).
OPTIMIZER_BYTES_PER_PARAM = 34.0
# Compute slowdown per second of communication hidden under it: NCCL runs one CTA per
# channel and uses up to ~32 channels on NVLink systems (NCCL_MAX_NCHANNELS), i.e. ~20-25%
# of an H100's 132 SMs, which the overlapped GEMMs lose for that time.
OVERLAP_INTERFERENCE = 0.2
# When no efficiency profile is attached to a GPU spec (inline GPUs in tests).
DEFAULT_EFFICIENCY = ComputeEfficiency(gemm={"bf16": 0.75, "fp16": 0.75, "fp8": 0.65, "fp4": 0.55,
                                             "tf32": 0.7, "fp32": 0.9},
                                       attention_fwd=0.55, attention_bwd=0.42, hbm=0.85,
                                       source="generic defaults; attach a preset profile for fidelity")

CostOverride = Callable[[str, float, GroupSpan, Hierarchy, "str | None", Scenario], "CollectiveCost | None"]
PHASES = ("microbatch", "pipeline", "step")


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


class TwinModel:
    """The performance model: fabrics + strategies (+ an optional collective-cost override)."""

    def __init__(self, fabrics: FabricSet, strategies: Iterable[Strategy],
                 cost_override: CostOverride | None = None) -> None:
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
        self.strategies: Sequence[Strategy] = sorted(strategies, key=lambda s: order[s.phase])
        self.cost_override = cost_override
        # Clusters are immutable and sweeps reuse them: remember the last hierarchies built.
        self._hierarchies: dict[tuple[int, Calibration], tuple[Cluster, Hierarchy]] = {}

    # ---------------------------------------------------------------- structure
    def validate(self, scenario: Scenario) -> None:
        """Every rule: spec cross-field rules, then each fabric's own."""
        validate_scenario(scenario)
        for fab in self._cluster_fabrics(scenario):
            fab.validate(scenario.cluster, "cluster")

    def _cluster_fabrics(self, scenario: Scenario) -> list[Fabric]:
        c = scenario.cluster
        fabs: list[Fabric] = [self.fabrics.get("scale_up", c.scale_up.fabric, "cluster.scale_up.fabric")]
        if c.scale_out is not None:
            fabs.append(self.fabrics.get("scale_out", c.scale_out.fabric, "cluster.scale_out.fabric"))
        if c.optics is not None:
            fabs.append(self.fabrics.get("optics", c.optics.kind, "cluster.optics.kind"))
        if c.memory_pool is not None:
            fabs.append(self.fabrics.get("memory", c.memory_pool.fabric, "cluster.memory_pool.fabric"))
        return fabs

    def hierarchy(self, scenario: Scenario) -> Hierarchy:
        """The tier hierarchy of ``scenario``'s cluster, calibration applied (cached)."""
        key = (id(scenario.cluster), scenario.calibration)
        hit = self._hierarchies.get(key)
        if hit is not None and hit[0] is scenario.cluster:
            return hit[1]
        h = self._build_hierarchy(scenario)
        if len(self._hierarchies) > 256:
            self._hierarchies.clear()
        self._hierarchies[key] = (scenario.cluster, h)
        return h

    def _build_hierarchy(self, scenario: Scenario) -> Hierarchy:
        c, cal = scenario.cluster, scenario.calibration
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
        return Hierarchy(tiers=tuple(tiers), gpus_per_node=c.gpus_per_node, notes=tuple(notes))

    def fabric_report(self, scenario: Scenario, hierarchy: Hierarchy) -> dict[str, object]:
        """Facts each fabric model reports (power, switches, tiers)."""
        report: dict[str, object] = {
            "tiers": [{"name": t.name, "fabric": t.fabric, "span_gpus": t.span_gpus,
                       "bw_GBps_per_gpu": t.bw_Bps / 1e9, "latency_us": t.latency_s * 1e6,
                       "oversubscription": t.oversubscription, "in_network_reduction": t.reduction}
                      for t in hierarchy.tiers]}
        for fab in self._cluster_fabrics(scenario):
            extra = fab.report(scenario.cluster, hierarchy)
            if extra:
                report[fab.role] = extra
        return report

    # ---------------------------------------------------------------- evaluation
    def _cost_fn(self, scenario: Scenario, hierarchy: Hierarchy) -> Callable[..., CollectiveCost]:
        override = self.cost_override

        def cost(op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
            if override is not None and span.n > 1 and size > 0:
                got = override(op, size, span, hierarchy, algorithm, scenario)
                if got is not None:
                    return got
            return collective_cost(op, size, span, hierarchy, algorithm)

        return cost

    def _stage_times(self, scenario: Scenario, dev: Device, w: Workload) -> StageTimes:
        plan, model = scenario.plan, scenario.model
        frozen = plan.trainable == "lora"
        fwd_l = bwd_l = attn_l = attn_bl = 0.0
        for kind, count in w.counts.items():
            f, b, a, ab = sublayer_times(dev, w.sublayers[kind], frozen)
            fwd_l += f * count
            bwd_l += b * count
            attn_l += a * count
            attn_bl += ab * count
        ef, eb, _, _ = sublayer_times(dev, w.embedding, frozen)
        hf, hb, _, _ = sublayer_times(dev, w.head, frozen)
        L, p = model.layers, plan.pp
        t_layer_f, t_layer_b, t_attn = fwd_l / L, bwd_l / L, attn_l / L
        per_layer = t_layer_f + t_layer_b
        if p == 1:
            layers = float(L)
            fwd = L * t_layer_f + ef + hf
            bwd = L * t_layer_b + eb + hb
            avg = fwd + bwd
        else:
            head, emb = hf + hb, ef + eb
            first_layers, middle_layers, last_layers = stage_layers(L, p)
            candidates = [(first_layers * per_layer + emb, first_layers, ef, eb),
                          (last_layers * per_layer + head, last_layers, hf, hb)]
            if p > 2:
                candidates.append((middle_layers * per_layer, middle_layers, 0.0, 0.0))
            _, n_layers, extra_f, extra_b = max(candidates, key=lambda c: c[0])
            layers, fwd, bwd = float(n_layers), n_layers * t_layer_f + extra_f, n_layers * t_layer_b + extra_b
            avg = (L * per_layer + head + emb) / p
        if plan.recompute == "full":
            recompute = recomputed_layers("full", plan.recompute_layers, layers) * t_layer_f
        elif plan.recompute == "selective":
            recompute = layers * t_attn
        else:
            recompute = 0.0
        gemm_f = sum(sum(gemm_fwd_time(dev, g) for g in w.sublayers[k].gemms) * c for k, c in w.counts.items()) / L
        return StageTimes(fwd_s=fwd, bwd_s=bwd, recompute_s=recompute, attn_fwd_s=t_attn * layers,
                          attn_bwd_s=attn_bl / L * layers,
                          layers=layers, layer_fwd_s=t_layer_f, layer_bwd_s=t_layer_b, gemm_fwd_s=gemm_f,
                          avg_stage_s=avg + (recompute if p > 1 else 0.0))

    def evaluate(self, scenario: Scenario, *, validate: bool = True, report: bool = True) -> Estimate:
        """Predict one training step of ``scenario``.

        ``report=False`` skips the fabric report (switch counts, power), which sweeps do not need.
        """
        if validate:
            self.validate(scenario)
        plan, model, cluster = scenario.plan, scenario.model, scenario.cluster
        dp = scenario.dp
        m = scenario.microbatches
        eff = cluster.gpu.efficiency or DEFAULT_EFFICIENCY
        dev = device_for(cluster.gpu, plan.precision, eff, scenario.calibration.compute_efficiency)
        w = build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
        hierarchy = self.hierarchy(scenario)
        spans = {dim: place_group(*stride_of(plan, dp, dim), hierarchy)
                 for dim in ("tp", "cp", "ep", "dp", "edp", "pp")}
        stage = self._stage_times(scenario, dev, w)
        params_gpu = sum(w.sublayers[k].params * c for k, c in w.counts.items()) / model.layers * stage.layers
        expert_gpu = sum(w.sublayers[k].expert_params * c for k, c in w.counts.items()) / model.layers * stage.layers
        params_gpu += max(w.embedding.params, w.head.params) if plan.pp > 1 else w.embedding.params + w.head.params
        tp_overlap = plan.overlap.tp_comm
        if tp_overlap is None:
            tp_overlap = cluster.gpu.generation in ("hopper", "blackwell")
        offload_bw = 0.0
        pool_capacity = 0.0
        if cluster.memory_pool is not None:
            mem_fab = self.fabrics.get("memory", cluster.memory_pool.fabric, "cluster.memory_pool.fabric")
            assert isinstance(mem_fab, MemoryFabric)
            offload_bw = mem_fab.bandwidth_per_gpu_Bps(cluster)
            pool_capacity = mem_fab.capacity_per_gpu_bytes(cluster)
        if "host" in (plan.offload.optimizer, plan.offload.params, plan.offload.activations):
            # Host DRAM over PCIe Gen5 x16 (~55 GB/s achieved of 64 GB/s per direction).
            offload_bw = offload_bw or 55e9
            pool_capacity = pool_capacity or 1024 * 2**30 / cluster.gpus_per_node * 2
        ctx = EvalContext(scenario=scenario, dp=dp, microbatches=m, device=dev, workload=w, hierarchy=hierarchy,
                          spans=spans, stage=stage, params_per_gpu=params_gpu, expert_params_per_gpu=expert_gpu,
                          tp_overlap=tp_overlap, cost_fn=self._cost_fn(scenario, hierarchy),
                          offload_bw_Bps=offload_bw)
        contributions: list[Contribution] = []
        pipeline: Contribution | None = None
        for strat in self.strategies:
            if strat.phase == "pipeline" and ctx.microbatch_time_s == 0.0:
                ctx.microbatch_time_s = stage.total_s + ctx.exposed_per_microbatch_s
            if not strat.active(ctx):
                continue
            contrib = strat.evaluate(ctx)
            contributions.append(contrib)
            if strat.phase == "microbatch":
                ctx.exposed_per_microbatch_s += contrib.exposed_per_microbatch_s
            elif strat.phase == "pipeline" and contrib.pipeline_time_s is not None:
                pipeline = contrib
        t_mb = stage.total_s + ctx.exposed_per_microbatch_s
        pipe_time = pipeline.pipeline_time_s if pipeline is not None else m * t_mb
        bubble = pipeline.bubble_s if pipeline is not None else 0.0
        opt_s = self._optimizer_time(scenario, ctx, params_gpu, expert_gpu, dp)
        exposed: dict[str, float] = {}
        issued: dict[str, float] = {}
        nbytes: dict[str, float] = {}
        offload_s = 0.0
        for c in contributions:
            e = c.exposed_per_microbatch_s * m + c.exposed_per_step_s
            if c.dimension == "offload":
                offload_s += e
            elif e > 0 or c.dimension not in exposed:
                exposed[c.dimension] = exposed.get(c.dimension, 0.0) + e
            issued[c.dimension] = issued.get(c.dimension, 0.0) + c.comm_per_step_s
            nbytes[c.dimension] = nbytes.get(c.dimension, 0.0) + c.bytes_per_step
        per_step = sum(c.exposed_per_step_s for c in contributions if c.dimension != "offload")
        hidden = sum(max(0.0, c.comm_per_step_s - c.exposed_per_microbatch_s * m - c.exposed_per_step_s)
                     for c in contributions if c.dimension not in ("offload", "pp"))
        interference = OVERLAP_INTERFERENCE * hidden
        step = pipe_time + per_step + opt_s + offload_s + interference
        compute = m * (stage.fwd_s + stage.bwd_s)
        breakdown = Breakdown(compute_s=compute, recompute_s=m * stage.recompute_s, exposed_comm_s=exposed,
                              bubble_s=bubble, optimizer_s=opt_s, offload_s=offload_s,
                              overlap_interference_s=interference)
        mem = memory_per_gpu(scenario, w, dp, m, params_gpu, expert_gpu, pool_capacity)
        model_flops = model_flops_per_step(scenario)
        n = cluster.num_gpus
        half = "bf16" if "bf16" in cluster.gpu.peak_tflops else "fp16"
        tokens = plan.gbs * model.seq_len
        notes = list(ctx.notes) + list(hierarchy.notes)
        if not mem.fits:
            notes.append(f"does not fit: {mem.total / 2**30:.1f} GiB needed of {mem.capacity / 2**30:.1f} GiB HBM")
        algos = {c.dimension: str(c.details.get("algorithm")) for c in contributions if c.details.get("algorithm")}
        return Estimate(
            scenario=scenario.name, step_time_s=step, breakdown=breakdown, memory=mem,
            tokens_per_s=tokens / step, tokens_per_s_per_gpu=tokens / step / n,
            model_tflops_per_gpu=model_flops / step / n / 1e12,
            mfu=model_flops / step / n / (cluster.gpu.peak_tflops[half] * 1e12),
            mfu_at_precision_peak=model_flops / step / n / (cluster.gpu.peak_tflops[plan.precision] * 1e12),
            model_flops_per_step=model_flops, microbatches=m, dp=dp, comm_issued_s=issued, bytes_per_step=nbytes,
            algorithms=algos, fabric=self.fabric_report(scenario, hierarchy) if report else {}, notes=tuple(notes))

    def _optimizer_time(self, scenario: Scenario, ctx: EvalContext, params_gpu: float, expert_gpu: float,
                        dp: int) -> float:
        plan = scenario.plan
        if plan.trainable == "lora":
            return 0.0
        _, _, odiv = shard_factors(plan.optimizer_sharding, plan.fsdp_reshard_after_forward, dp * plan.cp)
        edp = max(1, plan.tp * plan.cp * dp // (plan.ep * plan.expert_tp))
        _, _, eodiv = shard_factors(plan.optimizer_sharding, plan.fsdp_reshard_after_forward, edp)
        local = (params_gpu - expert_gpu) / odiv + expert_gpu / eodiv
        if plan.offload.optimizer != "none" and ctx.offload_bw_Bps > 0:
            return 0.0  # the offload strategy charges the step against the pool's bandwidth
        return local * OPTIMIZER_BYTES_PER_PARAM / ctx.device.hbm_Bps


def stage_layers(layers: int, pp: int) -> tuple[int, int, int]:
    """Layers on the (first, middle, last) pipeline stages.

    Even when ``pp`` divides ``layers`` (Megatron-Core's default split). Otherwise the
    stages one layer short are the last and the first, which also hold the LM head and
    the most in-flight activations (Llama 3 paper §3.3.2: "one fewer layer on the first
    and the last stage").
    """
    base, extra = divmod(layers, pp)
    if extra == 0:
        return base, base, base
    short = pp - extra
    last = base
    first = base if short >= 2 else base + 1
    return first, base + 1, last


def model_flops_per_step(scenario: Scenario) -> float:
    """Model FLOPs of one step (MFU convention: no recompute, no causal discount).

    3 passes (forward, data grad, weight grad) for full training; LoRA's frozen base needs
    no weight gradient, so 2 passes (plus negligible adapter work).
    """
    model, plan = scenario.model, scenario.plan
    w = build_workload(model, 1, 1, 1, False, 1, 1)
    fwd = sum(w.sublayers[k].model_flops * c for k, c in w.counts.items()) + w.head.model_flops
    passes = 2.0 if plan.trainable == "lora" else 3.0
    return passes * fwd * plan.gbs
