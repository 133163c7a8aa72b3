"""The contract between the core and its plugins: fabric models and parallelism strategies.

Plugins (built-in ones under ``plugins/`` and third-party packages alike) subclass these
and return instances from the ``twin_fabrics`` / ``twin_strategies`` hooks
(``twin/hookspecs.py``); they import them from ``twin.api``. Everything here is plain
Python so a plugin can be unit-tested without pluggy, grpc or ray.

Strategies are evaluated for one scenario or for a batch of points at once: every
per-point value a strategy reads from its :class:`EvalContext` (plan degrees, stage
times, group spans, collective costs) is then a numpy array, and the strategy's
arithmetic, written with operators and ``twin.core.ops`` (``where``, ``maximum``, ...),
works on both. A strategy that can only handle Python numbers sets
``vectorized = False``; the core then evaluates it point by point (slower, same result).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from twin.core import ops
from twin.core.collectives import CollectiveCost
from twin.core.errors import SpecError
from twin.core.specs import DEFAULT_SOFTWARE, Software
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch, Tier

if TYPE_CHECKING:
    from twin.core.compute import Device
    from twin.core.specs import Cluster, Model, Scenario
    from twin.core.workload import Workload


# ------------------------------------------------------------------------ fabrics
class Fabric:
    """Base of every fabric model. ``kind`` is the name scenarios use (``fabric: roce``)."""

    kind: ClassVar[str] = ""
    role: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def validate(self, cluster: Cluster, path: str) -> None:
        """Raise ``SpecError`` naming the field if this fabric's part of ``cluster`` is invalid."""

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Extra facts for the estimate (power, switch counts, ...); plain data."""
        return {}


class ScaleUpFabric(Fabric):
    """A scale-up domain model (NVLink/NVSwitch, ...): builds tier 0."""

    role: ClassVar[str] = "scale_up"

    def tier(self, cluster: Cluster) -> Tier:
        """Tier 0 of the hierarchy for ``cluster``."""
        raise NotImplementedError


class ScaleOutFabric(Fabric):
    """A scale-out network model (InfiniBand, RoCE, ...): builds tiers 1 and up."""

    role: ClassVar[str] = "scale_out"

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        """Tiers above the scale-up domain. ``radix``: switch radix forced by the optics model."""
        raise NotImplementedError

    def optical_links(self, cluster: Cluster) -> int | None:
        """How many of this fabric's links run over optics (an optical interface at each end).

        None (the default): the fabric is a fat tree sized from its switch radix, and the
        optics model counts its links (``fat_tree_report``). A direct or hierarchical network
        (torus, dragonfly) gives its own count, which the optics model prices instead.
        """
        return None


class OpticsModel(Fabric):
    """Optics of the scale-out fabric (pluggable transceivers, co-packaged optics)."""

    role: ClassVar[str] = "optics"

    def switch_radix(self, cluster: Cluster) -> int | None:
        """The switch radix this optics technology implies (None: keep the fabric's)."""
        return None

    def links_report(self, cluster: Cluster, hierarchy: Hierarchy, links: int) -> dict[str, Any]:
        """The report for a scale-out fabric that is not a fat tree and counts its own
        ``links`` over optics (``ScaleOutFabric.optical_links``): energy and failures of
        those links. The default, for optics models that predate it, is :meth:`report`.
        """
        return self.report(cluster, hierarchy)


class MemoryFabric(Fabric):
    """A memory tier outside HBM (host DRAM, a CXL pool) that plans can offload to.

    The core prices offload traffic from these figures (``twin.core.offload``): a pool is
    reached over the GPU's host link, so its path is the slower of the two and its latency the
    link's round trip with the pool's latency in place of local DRAM's.
    """

    role: ClassVar[str] = "memory"

    def bandwidth_per_gpu_Bps(self, cluster: Cluster) -> float:
        """Sustained bandwidth one GPU gets to the tier, per direction."""
        raise NotImplementedError

    def latency_s(self, cluster: Cluster) -> float:
        """Latency of one access: the host link's DMA round trip (host memory), the memory's
        load-to-use latency (a pool). Charged once per copy and bounding a read stream's rate
        (``twin.core.offload``).
        """
        raise NotImplementedError

    def capacity_per_gpu_bytes(self, cluster: Cluster) -> float:
        """Pool capacity available to one GPU."""
        raise NotImplementedError


# --------------------------------------------------------------------- strategies
@dataclass(slots=True)
class Terms:
    """What one strategy adds to a training step (numbers, or arrays for a batch).

    Per micro-batch (the core multiplies by the micro-batch count and owns the schedule):
    ``exposed_per_microbatch_s`` is on the critical path of every micro-batch of the
    bottleneck stage, so it also lengthens the pipeline's fill and drain;
    ``issued_per_microbatch_s`` is all communication issued per micro-batch, hidden or
    not; ``bytes_per_microbatch`` what one GPU sends for it.
    Per step: ``exposed_per_step_s`` is paid once per step (e.g. the last gradient
    bucket), ``issued_per_step_s`` and ``bytes_per_step`` as above.
    ``algorithm`` names the collective algorithm mostly used (diagnostics); ``details``
    is plain data for one scenario, reported under the strategy's dimension in
    ``Estimate.details`` (leave it empty for a batch).
    """

    exposed_per_microbatch_s: Any = 0.0
    issued_per_microbatch_s: Any = 0.0
    bytes_per_microbatch: Any = 0.0
    exposed_per_step_s: Any = 0.0
    issued_per_step_s: Any = 0.0
    bytes_per_step: Any = 0.0
    algorithm: Any = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StageTimes:
    """Per-micro-batch compute of the bottleneck pipeline stage (one GPU).

    ``attn_*_s`` are the attention-core parts (all layers of the stage), ``layer_*_s`` the
    mean per layer, ``gemm_fwd_s`` the forward GEMM time of a mean layer, ``avg_stage_s``
    the mean stage's forward + backward (+ recompute) per micro-batch, ``avg_fwd_s`` and
    ``avg_wgrad_s`` its forward and the weight-gradient GEMMs of its backward (the W that
    zero-bubble and DualPipe schedules move into the bubble). Every pass is
    already the larger of its device and its host time (``twin.core.schedule``);
    ``host_step_s`` is the host time of the step's tail (grad-norm and inf-check syncs,
    optimizer launches), which the optimizer step cannot be shorter than.
    """

    fwd_s: Any
    bwd_s: Any
    recompute_s: Any
    attn_fwd_s: Any
    attn_bwd_s: Any
    layers: Any
    layer_fwd_s: Any
    layer_bwd_s: Any
    gemm_fwd_s: Any
    avg_stage_s: Any
    host_step_s: Any = 0.0
    avg_fwd_s: Any = 0.0        # the mean stage's forward per micro-batch
    avg_wgrad_s: Any = 0.0      # the weight-gradient part of its backward (zero-bubble schedules' W)

    @property
    def total_s(self) -> Any:
        """Forward + backward + recomputation."""
        return self.fwd_s + self.bwd_s + self.recompute_s


CostFn = Callable[[str, Any, GroupSpan, "str | None"], CollectiveCost]


@dataclass(slots=True)
class EvalContext:
    """Everything a strategy may read while the twin evaluates one scenario or a batch.

    ``points`` is 0 for one scenario; for a batch it is the number of points, and every
    per-point value below is an array of that length (``plan`` is then a
    :class:`~twin.core.point_set.PlanColumns` with the fields of a :class:`Plan`, ``cluster``
    a column view of the clusters; ``model`` and ``software`` (the framework stack) are
    shared by the batch). ``scenario`` is set for one scenario only.
    """

    plan: Any
    model: Model
    cluster: Any
    calibration: Any
    dp: Any
    microbatches: Any
    device: Device
    workload: Workload
    hierarchy: Hierarchy | HierarchyBatch
    spans: dict[str, GroupSpan]
    stage: StageTimes
    params_per_gpu: Any
    expert_params_per_gpu: Any
    tp_overlap: Any
    cost_fn: CostFn
    memory_tiers: Any = None         # twin.core.offload.MemoryTiers: host DRAM and the CXL pool
    activation_bytes: Any = 0.0      # a value, or a function giving it (computed when first read)
    points: int = 0
    scenario: Scenario | None = None
    notes: list[str] = field(default_factory=list)
    software: Software = DEFAULT_SOFTWARE

    @property
    def activation_bytes_per_microbatch(self) -> Any:
        """Activation bytes one micro-batch saves for its backward on the first stage (all its
        layers; what activation offload moves, whether or not it is offloaded).
        """
        v = self.activation_bytes
        if callable(v):
            v = self.activation_bytes = v()
        return v

    @property
    def batch(self) -> bool:
        """Whether this context holds a batch of points (arrays) rather than one scenario."""
        return self.points > 0

    def cost(self, op: str, size_bytes: Any, dimension: str, algorithm: str | None = None) -> CollectiveCost:
        """Cost of ``op`` on ``size_bytes`` per rank over the group of ``dimension``."""
        return self.cost_fn(op, size_bytes, self.spans[dimension], algorithm)


class Strategy:
    """A parallelism strategy: what it sends, and how much of it the schedule hides.

    ``dimension`` is the breakdown entry its exposed time is reported under ("tp", "cp",
    "ep", "dp", "pp", or a plugin's own; "offload" is traffic to a memory pool, reported
    as ``offload_s``). ``phase`` says when its communication runs: "microbatch" (inside
    each micro-batch's forward/backward), "pipeline" (between pipeline stages) or "step"
    (once per step, around the optimizer); strategies are evaluated in that order.
    ``interferes``: whether its hidden communication slows the compute it overlaps (NCCL
    kernels occupy SMs; copy-engine and DMA traffic such as pipeline p2p and offload do
    not). ``vectorized``: whether ``active``/``evaluate`` handle batch contexts.
    ``reads_schedule``: whether they read the micro-batch count (``ctx.microbatches``),
    ``plan.gbs``, ``plan.vp`` or ``ctx.activation_bytes_per_microbatch``; a strategy that
    does not is evaluated once per group of points that differ only in those (a sweep's
    batch sizes and interleaving depths), which is several times faster.
    ``traffic``: the groups its communication runs over and how it loads their links, as
    ``(dimension, pattern)`` pairs (patterns: ``twin.core.collectives.PATTERNS``; None: its
    own ``dimension`` with that dimension's usual pattern; empty: no network traffic).
    ``overlapped``: whether its communication runs asynchronously to the compute stream
    (bucketed gradient reduction, prefetch, p2p), so it shares links with the other
    traffic in flight; blocking collectives between kernels (False) only meet overlapped
    traffic (``twin.core.contention``).
    """

    name: ClassVar[str] = ""
    dimension: ClassVar[str] = ""
    phase: ClassVar[str] = "microbatch"
    summary: ClassVar[str] = ""
    interferes: ClassVar[bool] = True
    vectorized: ClassVar[bool] = True
    reads_schedule: ClassVar[bool] = True
    traffic: ClassVar[tuple[tuple[str, str], ...] | None] = None
    overlapped: ClassVar[bool] = True

    def active(self, ctx: EvalContext) -> Any:
        """Whether this strategy takes part (a bool, or one per point for a batch)."""
        return True

    def configure(self, config: Mapping[str, Any], path: str) -> Strategy:
        """The strategy configured by the scenario's block (``strategies.<dimension>.config``).

        Return a strategy that applies ``config`` (a new instance; never change ``self``,
        which every scenario shares), or raise ``SpecError`` naming the field under
        ``path`` (``strategies.pp.config.bits``) and the rule. Called once per distinct
        block; the result is what the scenario's points are evaluated with. The default
        takes no configuration: an empty block gives ``self``, any key is an error.
        """
        for key in config:
            raise SpecError(f"{path}.{key}", f"unknown field: strategy {self.name!r} takes no configuration")
        return self

    def evaluate(self, ctx: EvalContext) -> Terms:
        """The strategy's terms for the step."""
        raise NotImplementedError


def stride_of(plan: Any, dp: Any, dimension: str) -> tuple[Any, Any]:
    """(group size, rank stride) of ``dimension`` under the plan's rank order
    (``plan.rank_order``; Megatron-Core's tp-cp-ep-dp-pp by default).

    Dense data-parallel gradients reduce over dp*cp ranks (Megatron's data-parallel group
    with context parallelism); experts over the expert-data-parallel group. With the
    tp-cp-pp-dp order (data parallel outermost) the dp*cp group is cp ranks tp apart, in
    dp blocks tp*cp*pp apart: placed as dp*cp ranks tp*pp apart, which spans the same GPUs
    and puts as many of them under every switch at least tp*cp*pp GPUs wide.
    """
    tp, cp, pp, ep = plan.tp, plan.cp, plan.pp, plan.ep
    etp = plan.expert_tp
    outer_dp = plan.rank_order == "tp-cp-pp-dp"
    if dimension == "tp":
        return tp, 1
    if dimension == "cp":
        return cp, tp
    if dimension == "ep":
        return ep, etp
    if dimension in ("dp", "dpr"):
        # Hybrid sharding (plan.dp_shard = k): "dp" is the k neighbouring ranks a state is
        # sharded over, "dpr" the dp*cp/k replicas of one shard, k groups apart.
        group, stride = dp * cp, ops.where(outer_dp, tp * pp, tp)
        shard = ops.where(plan.dp_shard > 0, plan.dp_shard, group)
        if dimension == "dp":
            return shard, stride
        return ops.maximum(1, group // shard), stride * shard
    if dimension == "edp":
        return ops.maximum(1, tp * cp * dp // (ep * etp)), ops.where(outer_dp, tp * pp, ep * etp)
    if dimension == "pp":
        return pp, ops.where(outer_dp, tp * cp, tp * cp * dp)
    raise KeyError(dimension)
