"""The contract between the core and its plugins: fabric models and parallelism strategies.

Plugins (built-in ones under ``plugins/`` and third-party packages alike) subclass these
and return instances from the ``twin_fabrics`` / ``twin_strategies`` hooks
(``twin/hookspecs.py``). Everything here is plain Python so a plugin can be unit-tested
without pluggy, grpc or ray.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from twin.core.collectives import CollectiveCost
from twin.core.topology import GroupSpan, Hierarchy, Tier

if TYPE_CHECKING:
    from twin.core.compute import Device
    from twin.core.specs import Cluster, Model, Plan, Scenario
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


class OpticsModel(Fabric):
    """Optics of the scale-out fabric (pluggable transceivers, co-packaged optics)."""

    role: ClassVar[str] = "optics"

    def switch_radix(self, cluster: Cluster) -> int | None:
        """The switch radix this optics technology implies (None: keep the fabric's)."""
        return None


class MemoryFabric(Fabric):
    """A memory tier outside HBM (CXL pool) that plans can offload to."""

    role: ClassVar[str] = "memory"

    def bandwidth_per_gpu_Bps(self, cluster: Cluster) -> float:
        """Sustained bandwidth one GPU gets to the pool, per direction."""
        raise NotImplementedError

    def latency_s(self, cluster: Cluster) -> float:
        """Load-to-use latency of the pool."""
        raise NotImplementedError

    def capacity_per_gpu_bytes(self, cluster: Cluster) -> float:
        """Pool capacity available to one GPU."""
        raise NotImplementedError


# --------------------------------------------------------------------- strategies
@dataclass(slots=True)
class Contribution:
    """What one strategy adds to the step.

    ``exposed_per_microbatch_s`` lengthens every micro-batch of the bottleneck stage;
    ``exposed_per_step_s`` is paid once per step; ``pipeline_time_s`` (pipeline strategies
    only) replaces ``microbatches * microbatch_time`` and is micro-batch work plus
    ``bubble_s``, the idle fill/drain (its own exposed transfers go in ``exposed_per_step_s``).
    ``comm_per_step_s`` is all communication issued, hidden or not (diagnostics);
    ``bytes_per_step`` the bytes one GPU sends for this dimension.
    """

    dimension: str
    exposed_per_microbatch_s: float = 0.0
    exposed_per_step_s: float = 0.0
    pipeline_time_s: float | None = None
    bubble_s: float = 0.0
    comm_per_step_s: float = 0.0
    bytes_per_step: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StageTimes:
    """Per-micro-batch compute of the bottleneck pipeline stage (one GPU).

    ``attn_*_s`` are the attention-core parts (all layers of the stage), ``layer_*_s`` the
    mean per layer, ``gemm_fwd_s`` the forward GEMM time of a mean layer, ``avg_stage_s``
    the mean stage's forward + backward (+ recompute) per micro-batch.
    """

    fwd_s: float
    bwd_s: float
    recompute_s: float
    attn_fwd_s: float
    attn_bwd_s: float
    layers: float
    layer_fwd_s: float
    layer_bwd_s: float
    gemm_fwd_s: float
    avg_stage_s: float

    @property
    def total_s(self) -> float:
        """Forward + backward + recomputation."""
        return self.fwd_s + self.bwd_s + self.recompute_s


@dataclass(slots=True)
class EvalContext:
    """Everything a strategy may read while the twin evaluates one scenario."""

    scenario: Scenario
    dp: int
    microbatches: int
    device: Device
    workload: Workload
    hierarchy: Hierarchy
    spans: dict[str, GroupSpan]
    stage: StageTimes
    params_per_gpu: float
    expert_params_per_gpu: float
    tp_overlap: bool
    cost_fn: Callable[[str, float, GroupSpan, str | None], CollectiveCost]
    exposed_per_microbatch_s: float = 0.0
    microbatch_time_s: float = 0.0
    offload_bw_Bps: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        """The scenario's plan."""
        return self.scenario.plan

    @property
    def model(self) -> Model:
        """The scenario's model."""
        return self.scenario.model

    @property
    def cluster(self) -> Cluster:
        """The scenario's cluster."""
        return self.scenario.cluster

    def cost(self, op: str, size_bytes: float, dimension: str, algorithm: str | None = None) -> CollectiveCost:
        """Cost of ``op`` on ``size_bytes`` per rank over the group of ``dimension``."""
        return self.cost_fn(op, size_bytes, self.spans[dimension], algorithm)


class Strategy:
    """A parallelism strategy: what it sends, and how much of it the schedule hides.

    ``phase`` orders evaluation: "microbatch" strategies run first (their exposed time
    lengthens each micro-batch), then "pipeline" (turns micro-batch time into pipeline
    time), then "step" (once-per-step work such as gradient reduction).
    """

    name: ClassVar[str] = ""
    phase: ClassVar[str] = "microbatch"
    summary: ClassVar[str] = ""

    def active(self, ctx: EvalContext) -> bool:
        """Whether this strategy takes part in ``ctx``'s plan."""
        return True

    def evaluate(self, ctx: EvalContext) -> Contribution:
        """The strategy's contribution to the step."""
        raise NotImplementedError


def stride_of(plan: Plan, dp: int, dimension: str) -> tuple[int, int]:
    """(group size, rank stride) of ``dimension`` under Megatron-Core's tp-cp-ep-dp-pp order.

    Dense data-parallel gradients reduce over dp*cp ranks (Megatron's data-parallel group
    with context parallelism); experts over the expert-data-parallel group.
    """
    tp, cp, pp, ep = plan.tp, plan.cp, plan.pp, plan.ep
    etp = plan.expert_tp
    if dimension == "tp":
        return tp, 1
    if dimension == "cp":
        return cp, tp
    if dimension == "ep":
        return ep, etp
    if dimension == "dp":
        return dp * cp, tp
    if dimension == "edp":
        return max(1, tp * cp * dp // (ep * etp)), ep * etp
    if dimension == "pp":
        return pp, tp * cp * dp
    raise KeyError(dimension)
