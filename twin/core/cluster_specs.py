"""The cluster's specs: GPU and its achievable efficiencies, scale-up and scale-out fabrics,
optics, CXL memory pool, power draw and prices.

Specs are frozen dataclasses, loaded strictly by :mod:`twin.core.schema` (unknown keys,
wrong types and out-of-range numbers are errors naming the field) and then checked by
the rules of :mod:`twin.core.spec_rules` for what spans fields. Units are in the field
names (see :mod:`twin.core.units`). :mod:`twin.core.specs` gathers every spec and rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from twin.core.accelerator_generations import GENERATIONS
from twin.core.schema import spec_field

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "fp4"]
# Every value has a row in twin.core.accelerator_generations.GENERATIONS (what the model reads of it).
Generation = Literal["volta", "ampere", "hopper", "blackwell", "cdna3", "cdna4", "tpu_v5p", "tpu_v6e", "trainium",
                     "trainium2", "gaudi2", "gaudi3"]
# The hosts' CPU vendor, as NCCL's tuning model tells them apart (tuning.cc: getNetOverhead, llMaxBws).
HostCpu = Literal["intel", "amd", "other"]


# Largest cluster the twin accepts: 10 million GPUs is ~100x today's largest training
# clusters; anything beyond is a typo (or hostile input) and is rejected by name.
MAX_GPUS = 10_000_000

_GENERATION_ORDER = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
# The first GPU generation whose tensor cores run each precision (NVIDIA architecture
# whitepapers: Volta fp16; Ampere bf16/tf32; Hopper fp8; Blackwell fp4).
PRECISION_MIN_GENERATION = {"fp32": "volta", "fp16": "volta", "tf32": "ampere", "bf16": "ampere",
                            "fp8": "hopper", "fp4": "blackwell"}


# --------------------------------------------------------------------------- GPU
@dataclass(frozen=True, slots=True)
class ComputeEfficiency:
    """Achievable fractions of the datasheet peaks (calibration targets, see presets).

    ``gemm`` maps precision -> fraction of the dense peak a large, well-shaped GEMM reaches;
    ``attention_fwd``/``attention_bwd`` the fraction of the 16-bit peak fused (flash)
    attention reaches at long sequence; ``hbm`` the fraction of the datasheet HBM bandwidth
    that streaming kernels reach; ``kernel_min_us`` the floor on any kernel's duration.
    GEMM and HBM figures are kernel-level; ``sustained`` is the fraction of them a whole
    training step sustains (clocks under the power cap, launch gaps, framework work
    between kernels). Attention figures are end-to-end already (one fused kernel per
    layer). ``sustained`` and the attention figures are fitted to the reference runs.
    ``cudnn_attention_fwd``/``cudnn_attention_bwd``: what cuDNN 9's fused attention
    reaches on this generation, measured at the kernel, where it differs from the fitted
    figures (a stack with ``Software.attention_kernel = "cudnn"`` runs it); None: the
    fitted figures are that kernel's already (the generation's runs all use it).
    """

    gemm: dict[str, float]
    attention_fwd: float = spec_field(ge=0.01, le=1)
    attention_bwd: float = spec_field(ge=0.01, le=1)
    hbm: float = spec_field(ge=0.01, le=1)
    sustained: float = spec_field(1.0, ge=0.01, le=1)
    kernel_min_us: float = spec_field(4.0, ge=0, le=1e4)
    flash_attention: bool = True
    cudnn_attention_fwd: float | None = spec_field(None, ge=0.01, le=1)
    cudnn_attention_bwd: float | None = spec_field(None, ge=0.01, le=1)
    source: str = ""

    def attention_figures(self, kernel: str) -> tuple[float, float]:
        """(forward, backward) fraction of the 16-bit peak that fused attention reaches with
        ``kernel`` (``Software.attention_kernel``): the measured cuDNN pair for "cudnn" where
        this profile has one, else the fitted pair.
        """
        if kernel == "cudnn" and self.cudnn_attention_fwd is not None and self.cudnn_attention_bwd is not None:
            return self.cudnn_attention_fwd, self.cudnn_attention_bwd
        return self.attention_fwd, self.attention_bwd


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator model. Peaks are dense (no sparsity), per GPU."""

    name: str
    generation: Generation
    peak_tflops: dict[str, float]
    hbm_gib: float = spec_field(ge=0.001, le=1e5)
    hbm_TBps: float = spec_field(ge=0.001, le=1e3)
    sm_count: int = spec_field(ge=1, le=100_000)
    nvlink_GBps: float = spec_field(0.0, ge=0, le=1e6, doc="NVLink bandwidth per GPU per direction")
    tdp_w: float | None = spec_field(
        700.0, ge=1, le=1e5, doc="board power at full load, W; None: not published (the GPUs' energy is not counted)")
    sfu_exp_per_clk: float = spec_field(
        16.0, ge=1, le=1024,
        doc="exponentials per clock per SM (MUFU.EX2; CUDA C++ Programming Guide throughput table: 16)")
    efficiency: ComputeEfficiency | None = None
    source: str = ""

    def supports(self, precision: str) -> bool:
        """Whether this GPU's matrix units run ``precision`` natively (its generation's row in
        ``twin.core.accelerator_generations``) and its preset gives a peak for it.
        """
        return precision in GENERATIONS[self.generation].precisions and precision in self.peak_tflops


# ----------------------------------------------------------------------- fabrics
@dataclass(frozen=True, slots=True)
class ScaleUp:
    """The scale-up domain (NVLink/NVSwitch): GPUs that reach each other over one switch hop."""

    fabric: str = "nvlink"
    generation: int | None = spec_field(None, ge=1, le=100)
    domain_gpus: int = spec_field(8, ge=1, le=1_000_000)
    link_GBps: float | None = spec_field(None, ge=0.001, le=1e6, doc="per GPU per direction; None: from generation")
    achievable_fraction: float | None = spec_field(None, ge=0.01, le=1)
    nvls: bool | None = None
    latency_us: float | None = spec_field(None, ge=0, le=1e6)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """The scale-out network between scale-up domains (InfiniBand, RoCE, ...)."""

    fabric: str = "infiniband"
    nics_per_node: int | None = spec_field(None, ge=1, le=1024, doc="None: one NIC per GPU (rail design)")
    nic_gbps: float = spec_field(400.0, ge=0.001, le=1e6)
    topology: Literal["fat_tree", "rail_optimized"] = "rail_optimized"
    switch_radix: int = spec_field(64, ge=4, le=100_000)
    tiers: int | None = spec_field(None, ge=1, le=5)
    oversubscription: tuple[float, ...] = spec_field(
        default_factory=tuple, ge=1, le=1000,
        doc="down:up ratio of the uplinks of each switch tier, leaf first (1 = non-blocking)")
    gpus_per_leaf: int | None = spec_field(
        None, ge=1, le=MAX_GPUS, doc="GPUs under one leaf switch; below the cluster, a tier above it; None: from radix")
    tier_spans: tuple[int, ...] = spec_field(
        default_factory=tuple, ge=1, le=MAX_GPUS,
        doc="GPUs under one switch of each tier, leaf first; empty: from radix")
    sharp: bool = False
    adaptive_routing: bool | None = None
    achievable_fraction: float | None = spec_field(None, ge=0.01, le=1)
    latency_us: float | None = spec_field(
        None, ge=0, le=1e6, doc="one hop's latency (NIC, cable, switch), us; each tier pays it per hop crossed; "
                                "None: the fabric's own figure")
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Optics:
    """Optical interconnect of the scale-out fabric: pluggable transceivers or co-packaged."""

    kind: Literal["pluggable", "cpo"] = "pluggable"
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemoryPool:
    """A CXL-attached memory pool shared by the GPUs of a node, reached over each GPU's host
    link: a tier of its own, apart from host DRAM (``plan.offload.<what>: cxl``; ``twin.core.offload``).
    """

    fabric: str = "cxl"
    capacity_gib_per_node: float = spec_field(1024.0, ge=0.001, le=1e7, doc="pool capacity per node, GiB")
    bandwidth_GBps_per_node: float = spec_field(256.0, ge=0.001, le=1e6,
                                                doc="pool bandwidth per node and direction, GB/s")
    latency_ns: float = spec_field(
        250.0, ge=0, le=1e9, doc="load-to-use latency of the pool's memory, ns (CXL 2.0 devices: 170-250; Sun et "
                                 "al., MICRO 2023): paid once per copy, and reads run at no more than the "
                                 "outstanding-request window over the round trip")
    devices_per_node: int = spec_field(4, ge=1, le=1024)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


# One year of amortisation: the Julian year, 365.25 days (a definition, used by the cost model).
YEAR_S = 365.25 * 86400.0


@dataclass(frozen=True, slots=True)
class Power:
    """What the cluster's components draw, and the facility overhead (``twin.core.energy``).

    Per unit, in watts. A figure left unset (None) has no published default shipped with
    the twin: that component is not counted, and the estimate lists it as such. System
    presets set the figures their datasheets give (``twin/presets/systems.yaml``).
    """

    gpu_busy_fraction: float = spec_field(
        1.0, gt=0, le=1, doc="GPU power while it computes, as a fraction of gpu.tdp_w (training's compute "
                             "phases reach TDP: Patel et al., ASPLOS 2024)")
    gpu_idle_w: float | None = spec_field(
        None, ge=0, le=1e5, doc="GPU power while it waits (exposed communication, pipeline bubble, offload), W; "
                                "None: as while busy (an upper bound: no published figure shipped)")
    nic_w: float | None = spec_field(None, ge=0, le=1e4, doc="power of one scale-out NIC, W")
    switch_w: tuple[float, ...] = spec_field(
        default_factory=tuple, ge=0, le=1e6,
        doc="power of one scale-out switch, W: one entry for every tier, or one per switch tier (leaf first)")
    host_w: float | None = spec_field(
        None, ge=0, le=1e6, doc="power of one node besides its GPUs, NICs and CXL devices (CPUs, DRAM, "
                                "baseboard switches, fans, storage, power-supply losses), W")
    cxl_device_w: float | None = spec_field(None, ge=0, le=1e4, doc="power of one CXL memory device, W")
    pue: float = spec_field(
        1.0, ge=1, le=5, doc="facility power usage effectiveness (total facility / IT power); 1: IT energy only")
    source: str = ""


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices the user supplies for the cost of a step (none set: no cost is reported).

    ``usd_per_gpu_hour``: what one GPU-hour costs (a rental price, everything included
    unless electricity is billed on top); or ``capex_usd_per_gpu`` spread evenly over
    ``amortisation_years`` (straight-line); plus ``usd_per_kwh`` on the facility's energy.
    """

    usd_per_gpu_hour: float | None = spec_field(None, ge=0, le=1e6, doc="price of one GPU-hour, USD")
    capex_usd_per_gpu: float | None = spec_field(
        None, ge=0, le=1e9, doc="purchase cost of the cluster per GPU (its share of hosts, network, facility), USD")
    amortisation_years: float | None = spec_field(
        None, gt=0, le=100, doc="years over which capex_usd_per_gpu is spread evenly")
    usd_per_kwh: float | None = spec_field(None, ge=0, le=1e4, doc="electricity price, USD per kWh")

    @property
    def priced(self) -> bool:
        """Whether any price is given."""
        return (self.usd_per_gpu_hour is not None or self.capex_usd_per_gpu is not None
                or self.usd_per_kwh is not None)


@dataclass(frozen=True, slots=True)
class Cluster:
    """A training cluster: GPUs, nodes, scale-up domains, scale-out network, optics, CXL, power and prices."""

    gpu: GPU
    num_gpus: int = spec_field(ge=1, le=MAX_GPUS)
    gpus_per_node: int = spec_field(8, ge=1, le=1024)
    name: str = ""
    scale_up: ScaleUp = dataclasses.field(default_factory=ScaleUp)
    scale_out: ScaleOut | None = dataclasses.field(default_factory=ScaleOut)
    optics: Optics | None = None
    memory_pool: MemoryPool | None = None
    power: Power = dataclasses.field(default_factory=Power)
    prices: Prices = dataclasses.field(default_factory=Prices)
    host_cpu: HostCpu | None = spec_field(  # noqa: RUF009 - dataclasses.field with metadata
        None, doc="CPU vendor of the hosts, which NCCL's cost model reads across nodes (network post overhead, "
                  "LL bandwidth cap); None: not stated, NCCL's Intel/other figures")

    @property
    def num_nodes(self) -> int:
        """Nodes in use (a partial node counts as one)."""
        return max(1, -(-self.num_gpus // self.gpus_per_node))

    @property
    def nics_per_node(self) -> int:
        """NICs per node, one per GPU unless stated."""
        if self.scale_out is None:
            return 0
        return self.scale_out.nics_per_node or self.gpus_per_node
