"""The twin's answer for one scenario: step time and where it goes, memory, MFU."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from twin.core.memory import MemoryBreakdown


# Result objects are plain slotted dataclasses, not frozen ones: a frozen dataclass sets
# each field through object.__setattr__, which made building an Estimate (17 fields) the
# single largest cost of a one-scenario evaluation after the model itself.
@dataclass(slots=True)
class Breakdown:
    """Step time by cause, in seconds. The parts add up to the step time.

    ``compute_s``: forward + backward kernels of the bottleneck stage (all micro-batches);
    ``recompute_s``: activation recomputation; ``exposed_comm_s``: communication not hidden
    behind compute, per parallel dimension; ``bubble_s``: pipeline fill and drain;
    ``optimizer_s``: the optimizer step; ``offload_s``: exposed traffic to a memory pool;
    ``overlap_interference_s``: compute slowed by communication kernels running alongside
    it (hidden communication is not free: it occupies SMs and memory bandwidth).
    """

    compute_s: float
    recompute_s: float
    exposed_comm_s: dict[str, float]
    bubble_s: float
    optimizer_s: float
    offload_s: float
    overlap_interference_s: float = 0.0

    @property
    def total_s(self) -> float:
        """Sum of every part (== the step time). The exposed communication is summed exactly
        (``math.fsum``), so the total does not depend on the order of the dimensions (a map
        on the wire has none).
        """
        return (self.compute_s + self.recompute_s + math.fsum(self.exposed_comm_s.values()) + self.bubble_s
                + self.optimizer_s + self.offload_s + self.overlap_interference_s)


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """How one class of links is loaded during a step (per GPU; ``twin.core.contention``).

    ``tier``: the hierarchy tier whose incoming links these are (0: the GPU's NVLink ports;
    1: the NIC links; 2: the leaf uplinks, ...); ``capacity_GBps``: their capacity per GPU
    per direction with no other traffic; ``utilisation``: per strategy, the fraction of
    that capacity its traffic would keep busy alone over its window; ``stretch``: per
    strategy, how much slower its traffic on these links runs with the others in flight
    (1: unaffected).
    """

    tier: int
    name: str
    capacity_GBps: float
    utilisation: dict[str, float]
    stretch: dict[str, float]


@dataclass(slots=True)
class Energy:
    """Energy of one step by component, joules (``twin.core.energy``). The components add
    up to ``total_j``: GPUs (busy ``gpu_busy_s``, waiting ``gpu_wait_s`` of the step), NICs,
    switches, optics, hosts, CXL devices, and the facility's overhead ((PUE - 1) x the IT
    energy). ``not_counted``: components the cluster has but gives no power figure for;
    ``assumed``: what stands in for a figure not given.
    """

    gpu_j: float
    nic_j: float
    switch_j: float
    optics_j: float
    host_j: float
    cxl_j: float
    facility_j: float
    total_j: float
    joules_per_token: float
    tokens_per_joule: float
    average_power_w: float
    gpu_busy_s: float
    gpu_wait_s: float
    pue: float
    not_counted: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()

    @property
    def parts_j(self) -> dict[str, float]:
        """The components, joules, in the order they are summed."""
        return {"gpu": self.gpu_j, "nic": self.nic_j, "switch": self.switch_j, "optics": self.optics_j,
                "host": self.host_j, "cxl": self.cxl_j, "facility": self.facility_j}

    @property
    def network_j(self) -> float:
        """NICs, switches and optics together, joules."""
        return self.nic_j + self.switch_j + self.optics_j


@dataclass(slots=True)
class Cost:
    """Cost of one step from the prices the scenario gives (``cluster.prices``), USD.

    ``hardware_usd``: GPU-hours at the given price, or the capex amortised over the step;
    ``electricity_usd``: the step's energy (facility, PUE included) at the given price.
    """

    usd_per_step: float
    usd_per_million_tokens: float
    hardware_usd: float
    electricity_usd: float


@dataclass(slots=True)
class StepInterval:
    """How sure the twin is of a step time (``twin.core.intervals``): the step time lies in
    [``p80_low_s``, ``p80_high_s``] with 80% probability and in [``p95_low_s``, ``p95_high_s``]
    with 95%, by the errors of the twin on the ``runs`` published runs (of ``families``
    families) most like this scenario (``basis``); ``widened``: the features of the scenario
    outside what those runs cover, for which the interval was made wider.
    """

    p80_low_s: float
    p80_high_s: float
    p95_low_s: float
    p95_high_s: float
    basis: str = ""
    runs: int = 0
    families: int = 0
    widened: tuple[str, ...] = ()


@dataclass(slots=True)
class Estimate:
    """Predicted behaviour of one training step."""

    scenario: str
    step_time_s: float
    breakdown: Breakdown
    memory: MemoryBreakdown
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    mfu_at_precision_peak: float
    model_flops_per_step: float
    microbatches: int
    dp: int
    comm_issued_s: dict[str, float] = field(default_factory=dict)
    bytes_per_step: dict[str, float] = field(default_factory=dict)
    algorithms: dict[str, str] = field(default_factory=dict)
    # What each dimension's strategy reports about itself (``Terms.details``: the pipeline
    # schedule it ran, the exposed share of the gradient reduction...), plain data.
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    fabric: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    links: tuple[LinkLoad, ...] = ()
    # Step time lost to traffic sharing links (with it, minus each strategy costed alone).
    contention_s: float = 0.0
    energy: Energy | None = None
    cost: Cost | None = None    # None: the scenario gives no prices
    interval: StepInterval | None = None   # None: the engine has no interval table

    @property
    def fits(self) -> bool:
        """Whether the plan fits in memory."""
        return self.memory.fits

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        bd = asdict(self.breakdown)
        bd["total_s"] = self.breakdown.total_s
        return {
            "scenario": self.scenario,
            "step_time_s": self.step_time_s,
            "breakdown": bd,
            "memory": {**self.memory.as_gib(), "fits": self.memory.fits},
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_at_precision_peak": self.mfu_at_precision_peak,
            "model_flops_per_step": self.model_flops_per_step,
            "microbatches": self.microbatches,
            "dp": self.dp,
            "comm_issued_s": dict(self.comm_issued_s),
            "bytes_per_step": dict(self.bytes_per_step),
            "algorithms": dict(self.algorithms),
            "details": {k: dict(v) for k, v in self.details.items()},
            "fabric": dict(self.fabric),
            "notes": list(self.notes),
            "links": [asdict(link) for link in self.links],
            "contention_s": self.contention_s,
            "energy": None if self.energy is None else {**asdict(self.energy),
                                                        "not_counted": list(self.energy.not_counted),
                                                        "assumed": list(self.energy.assumed)},
            "cost": None if self.cost is None else asdict(self.cost),
            "interval": None if self.interval is None else {**asdict(self.interval),
                                                            "widened": list(self.interval.widened)},
        }
