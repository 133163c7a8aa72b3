"""NVLink / NVSwitch scale-up domains (8-GPU HGX boards, 72-GPU NVL72 racks).

Per generation: per-link bandwidth and links per GPU (NVIDIA NVLink/NVSwitch product
pages), the fraction of it NCCL achieves, NVLS (NVLink SHARP) in-switch all-reduce on
third-generation NVSwitch and later, and the domain size.
"""

from __future__ import annotations

import math
from typing import Any

from twin.api import (
    Cluster,
    ComponentGroup,
    Condition,
    FailureMode,
    Hierarchy,
    Impact,
    MetricMapping,
    ScaleUpFabric,
    Scenario,
    SpecError,
    Tier,
    hookimpl,
)

# generation -> (GB/s per link per direction, links per GPU, source)
GENERATIONS: dict[int, tuple[float, int, str]] = {
    1: (20.0, 4, "NVLink 1 (P100): 4 links x 20 GB/s per direction"),
    2: (25.0, 6, "NVLink 2 (V100): 6 links x 25 GB/s per direction = 300 GB/s bidirectional"),
    3: (25.0, 12, "NVLink 3 (A100): 12 links x 25 GB/s = 600 GB/s bidirectional"),
    4: (25.0, 18, "NVLink 4 (H100): 18 links x 25 GB/s = 900 GB/s bidirectional"),
    5: (50.0, 18, "NVLink 5 (B200/GB200): 18 links x 50 GB/s = 1.8 TB/s bidirectional"),
    6: (100.0, 18, "NVLink 6 (Rubin): 3.6 TB/s bidirectional per GPU (NVIDIA Vera Rubin announcement)"),
}
# Ring bus bandwidth NCCL achieves as a fraction of the per-direction link bandwidth.
ACHIEVABLE = {
    2: (0.80, "assumption: A100-like ratio (no V100 figure in validation/reference)"),
    3: (0.775, "nccl-tests#175: DGX A100 single-node all-reduce 232.5 GB/s of 300"),
    4: (0.82, "NVIDIA/nccl#1442 (sjeaugey): 370 GB/s app-level per direction of 450"),
    5: (0.82, "assumption: same ratio as NVLink 4 (no B200 nccl-tests figure in validation/reference)"),
    6: (0.82, "assumption: same ratio as NVLink 4"),
}
# NVLS all-reduce algorithm bandwidth / link bandwidth: NVIDIA/nccl#1455, 8x H100,
# NCCL_ALGO=NVLS algbw ~273 GB/s of 450 (busbw 480 GB/s).
NVLS_ALGBW_FRACTION = 273.0 / 450.0
# NVLS efficiency per GPU generation relative to Hopper's: NCCL's tuner (src/graph/tuning.cc,
# 2.23+, nvlsEfficiency: Hopper 0.85, Blackwell 0.74, "busBw *= nvlsEfficiency") scales the
# NVLS bandwidth down on Blackwell's NVSwitch; the measured Hopper fraction is scaled alike.
NVLS_EFFICIENCY = {4: 0.85, 5: 0.74}


def nvls_fraction(gen: int) -> float:
    """NVLS all-reduce algbw / per-GPU link bandwidth on NVLink ``gen`` (4 = measured H100)."""
    eff = NVLS_EFFICIENCY.get(gen, NVLS_EFFICIENCY[max(NVLS_EFFICIENCY)] if gen > 4 else NVLS_EFFICIENCY[4])
    return NVLS_ALGBW_FRACTION * eff / NVLS_EFFICIENCY[4]
# All-to-all (expert dispatch) over NVLink: DeepEP (deepseek-ai/DeepEP README, H800)
# 153-158 GB/s bottleneck bandwidth of 200 GB/s per direction.
A2A_FRACTION = 155.0 / 200.0
# NVSwitch chips per domain (for inventories): HGX A100 6, HGX H100 4 (NVSwitch gen3),
# GB200 NVL72 18 (9 switch trays x 2); DGX-2 12.
NVSWITCH_CHIPS = {(2, 16): 12, (3, 8): 6, (4, 8): 4, (5, 8): 2, (5, 72): 18}


def link_bandwidth_GBps(cluster: Cluster) -> float:
    """Per-GPU, per-direction NVLink bandwidth: stated, else the GPU's, else the generation's."""
    up = cluster.scale_up
    if up.link_GBps:
        return up.link_GBps
    if cluster.gpu.nvlink_GBps:
        return cluster.gpu.nvlink_GBps
    gen = up.generation or 4
    per_link, links, _ = GENERATIONS[gen]
    return per_link * links


def links_per_gpu(cluster: Cluster) -> int:
    """NVLink links per GPU: its bandwidth over the generation's per-link rate (``GENERATIONS``;
    e.g. 450 / 25 = 18 on H100, 200 / 25 = 8 on H800), at least one.
    """
    per_link = GENERATIONS.get(generation_of(cluster), GENERATIONS[4])[0]
    return max(1, round(link_bandwidth_GBps(cluster) / per_link))


def generation_of(cluster: Cluster) -> int:
    """NVLink generation: stated, else inferred from the GPU generation."""
    if cluster.scale_up.generation:
        return cluster.scale_up.generation
    return NVLINK_OF_GPU[cluster.gpu.generation]


# The NVLink generation of each NVIDIA GPU generation (GENERATIONS above).
NVLINK_OF_GPU = {"volta": 2, "ampere": 3, "hopper": 4, "blackwell": 5}


def _check_generation(cluster: Cluster, path: str) -> None:
    """A stated NVLink generation must be the GPU's own: an NVIDIA GPU has one NVLink generation
    (H100/H800 NVLink 4, B200/GB200 NVLink 5; ``NVLINK_OF_GPU``), and the twin takes the per-GPU
    bandwidth from the GPU (``link_bandwidth_GBps``), so another generation would change only
    NCCL's NVLS efficiency row while the links stayed the GPU's: refused, naming what to state.
    """
    gen = cluster.scale_up.generation
    own = NVLINK_OF_GPU.get(cluster.gpu.generation)
    if gen is None or own is None or gen == own:
        return
    raise SpecError(f"{path}.scale_up.generation",
                    f"a {cluster.gpu.generation} GPU has NVLink {own}, not {gen} (its links are the GPU's); for a "
                    f"what-if of faster links state scale_up.link_GBps (got {gen})")


# One hop through an NVSwitch, the tier's latency where a hop is asked for (the failure model's
# round trip): ~1 us port to port and back through the GPU's NVLink (the twin's figure since the
# tier's first version). Collective steps are costed with NCCL's own NVLink step latencies.
NVSWITCH_HOP_S = 1.0e-6


class NVLinkFabric(ScaleUpFabric):
    """NVLink + NVSwitch: one switch hop between any two GPUs of the domain."""

    kind = "nvlink"
    summary = "NVLink/NVSwitch scale-up domain (per-generation bandwidth, NVLS in-switch all-reduce)"

    def validate(self, cluster: Cluster, path: str) -> None:
        if cluster.gpu.generation not in NVLINK_OF_GPU:
            raise SpecError(f"{path}.scale_up.fabric", f"nvlink joins NVIDIA GPUs; a {cluster.gpu.generation} "
                                                       f"accelerator has its own scale-up fabric (twin plugins lists "
                                                       f"them: xgmi, ici, neuronlink, gaudi_roce, ualink, ...)")
        gen = cluster.scale_up.generation
        if gen is not None and gen not in GENERATIONS:
            raise SpecError(f"{path}.scale_up.generation",
                            f"must be one of {sorted(GENERATIONS)} for nvlink (got {gen})")
        if cluster.scale_up.nvls and generation_of(cluster) < 4:
            raise SpecError(f"{path}.scale_up.nvls", "NVLS needs NVLink 4 / NVSwitch gen3 or later")
        _check_generation(cluster, path)
        if cluster.scale_up.latency_us is not None:
            raise SpecError(f"{path}.scale_up.latency_us",
                            "is not modelled for nvlink: NCCL's per-step NVLink latencies (hwLat NVLINK per protocol, "
                            "twin.core.nccl_tuning) cost a switched domain's steps, as on UALink; a hop latency has no "
                            f"place in that model (got {cluster.scale_up.latency_us!r})")
        unknown = sorted(set(cluster.scale_up.params) - {"nvswitch_chips"})
        if unknown:
            raise SpecError(f"{path}.scale_up.params.{unknown[0]}",
                            "unknown parameter for nvlink; expected: nvswitch_chips")

    def tier(self, cluster: Cluster) -> Tier:
        up = cluster.scale_up
        gen = generation_of(cluster)
        link = link_bandwidth_GBps(cluster) * 1e9
        frac = up.achievable_fraction or ACHIEVABLE.get(gen, ACHIEVABLE[4])[0]
        nvls = up.nvls if up.nvls is not None else gen >= 4
        return Tier(name="nvlink", fabric=self.kind, span_gpus=max(1, min(up.domain_gpus, cluster.num_gpus)),
                    bw_Bps=link * frac, latency_s=NVSWITCH_HOP_S,
                    reduction="nvls" if nvls else "", nvls_bw_Bps=link * nvls_fraction(gen) if nvls else 0.0,
                    a2a_bw_Bps=link * A2A_FRACTION, nvlink_links=links_per_gpu(cluster))

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        gen = generation_of(cluster)
        domains = max(1, cluster.num_gpus // max(1, cluster.scale_up.domain_gpus))
        chips = cluster.scale_up.params.get("nvswitch_chips",
                                            NVSWITCH_CHIPS.get((gen, cluster.scale_up.domain_gpus), 0))
        return {"kind": self.kind, "generation": gen, "domain_gpus": cluster.scale_up.domain_gpus,
                "link_GBps_per_gpu": link_bandwidth_GBps(cluster), "domains": domains,
                "nvswitch_chips": chips * domains, "source": GENERATIONS.get(gen, ("", 0, ""))[2]}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the NVLink fabric."""
    return [NVLinkFabric()]


# ------------------------------------------------------------------ failure scenarios
# An NVSwitch chip or an NVLink link failing mid-step is a fatal fabric error for the
# CUDA jobs using it (Fabric Manager user guide: NVSwitch fatal SXid errors and NVLink
# errors require the GPUs to be reset), so the job crashes. On restart the GPUs can run
# over the remaining switch planes / links at reduced bandwidth (NVIDIA NMX partition
# health: "adaptive bandwidth mode" keeps a partition operational with missing links),
# or the node is swapped. No per-chip or per-link NVLink failure rate is published in
# validation/reference (Llama 3's GPU causes may include some), so no default rate.
NO_RATE = "no published per-unit rate in validation/reference/failures.yaml (set failures.rates)"


def _chips_per_domain(cluster: Cluster) -> int:
    gen = generation_of(cluster)
    return int(cluster.scale_up.params.get("nvswitch_chips",
                                           NVSWITCH_CHIPS.get((gen, cluster.scale_up.domain_gpus), 0)))


@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """NVSwitch chips and NVLink links of the scale-up domains."""
    cluster = scenario.cluster
    if cluster.scale_up.fabric != NVLinkFabric.kind:
        return None
    gen = generation_of(cluster)
    _, links, src = GENERATIONS[gen]
    domain = max(1, min(cluster.scale_up.domain_gpus, cluster.num_gpus))
    domains = max(1, -(-cluster.num_gpus // domain))
    chips = _chips_per_domain(cluster)
    groups = [ComponentGroup("nvlink_link", "nvlink_link", cluster.num_gpus * links, NVLinkFabric.kind, tier=0,
                             attrs={"links_per_gpu": links, "generation": gen}, source=src)]
    if chips:
        groups.append(ComponentGroup("nvswitch", "nvswitch", chips * domains, NVLinkFabric.kind, tier=0,
                                     attrs={"chips_per_domain": chips, "domain_gpus": domain, "links_per_gpu": links,
                                            "links_per_gpu_per_chip": math.ceil(links / chips)},
                                     source="NVSWITCH_CHIPS (HGX A100 6, HGX H100 4, NVL72 18 chips)"))
    return groups


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """NVSwitch chip and NVLink link failures: crash, then run over the remaining planes."""
    if component.fabric != NVLinkFabric.kind:
        return None
    cluster = scenario.cluster
    links = int(component.attrs.get("links_per_gpu", 18))
    domain = int(component.attrs.get("domain_gpus", cluster.scale_up.domain_gpus))
    nodes = max(1, domain // cluster.gpus_per_node)
    if component.name == "nvswitch":
        per_chip = int(component.attrs["links_per_gpu_per_chip"])
        keep = (links - per_chip) / links
        impact = Impact(tier_bw=((0, keep),), nvls=False,
                        note=f"domain runs on {links - per_chip} of {links} NVLink links per GPU, no NVLS")
        return [FailureMode("nvswitch", "down", "down", None, NO_RATE, interrupts=True, nodes_lost=nodes,
                            degraded=impact, detection_s=30.0, repair_h=48.0,
                            repair_source="assumption (a baseboard/tray swap)",
                            description="NVSwitch chip fails: fatal for the domain's jobs")]
    if component.name == "nvlink_link":
        impact = Impact(tier_bw=((0, (links - 1) / links),), note=f"one GPU on {links - 1} of {links} NVLink links")
        return [FailureMode("nvlink_link", "down", "down", None, NO_RATE, interrupts=True, nodes_lost=1,
                            degraded=impact, detection_s=30.0, repair_h=48.0,
                            repair_source="assumption (a baseboard swap)",
                            description="NVLink link fails: fatal for its GPU's jobs")]
    return None


# ----------------------------------------------------------------------- telemetry
# dcgm-exporter metric names (NVIDIA/dcgm-exporter etc/default-counters.csv and
# dcp-metrics-included.csv; field meanings from DCGM's dcgm_fields.h). Labels: gpu
# (index), UUID, device, modelName, Hostname. Per-link fields end in _L<link>.
_GPU = ("gpu|uuid|device",)
_XID_SRC = "NVIDIA XID catalog (docs.nvidia.com/deploy/xid-errors)"
NVLINK_MAPPINGS = [
    MetricMapping(("DCGM_FI_PROF_NVLINK_TX_BYTES",), "nvlink", "tx_Bps", identity=_GPU, tier="scale_up", unit="B/s",
                  source="dcp-metrics-included.csv: gauge, bytes/s transmitted over NVLink (no protocol headers)"),
    MetricMapping(("DCGM_FI_PROF_NVLINK_RX_BYTES",), "nvlink", "rx_Bps", identity=_GPU, tier="scale_up", unit="B/s",
                  source="dcp-metrics-included.csv: gauge, bytes/s received over NVLink"),
    MetricMapping(("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",), "nvlink", "bandwidth_Bps", kind="counter", identity=_GPU,
                  tier="scale_up", unit="B/s", scale=2**20,
                  source="default-counters.csv: counter of NVLink bandwidth over all lanes; DCGM counts it in MiB "
                         "(dcgm_fields.h, DCGM_FI_DEV_NVLINK_BANDWIDTH_L0..)"),
    MetricMapping(("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                   "DCGM_FI_DEV_NVLINK_COUNT_RX_ERRORS"),
                  "nvlink", "crc_errors_per_s", kind="counter", identity=_GPU, tier="scale_up", unit="1/s",
                  conditions=(Condition("degraded", ">", 100.0,
                                        "NVLink CRC error rate above DCGM's NVLink health-watch limit of 100/s"),),
                  source="dcgm_fields.h: CRC flit/data error counters (old) and NVLINK_COUNT_RX_ERRORS (DCGM 3.3+)"),
    MetricMapping(("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L{link}",
                   "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{link}"),
                  "nvlink", "crc_errors_per_s", kind="counter", identity=(*_GPU, "link"), tier="scale_up", unit="1/s",
                  conditions=(Condition("degraded", ">", 100.0,
                                        "NVLink CRC error rate above DCGM's NVLink health-watch limit of 100/s"),),
                  source="dcgm_fields.h per-link CRC counters"),
    MetricMapping(("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L{link}"),
                  "nvlink", "replay_errors_per_s", kind="counter", identity=_GPU, detail=("link",), tier="scale_up",
                  unit="1/s",
                  conditions=(Condition("info", ">", 0.0, "NVLink replays: retransmissions after CRC errors"),),
                  source="dcgm_fields.h: NVLink replay error counter"),
    MetricMapping(("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L{link}",
                   "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS"),
                  "nvlink", "recovery_errors_per_s", kind="counter", identity=_GPU, detail=("link",), tier="scale_up",
                  unit="1/s",
                  conditions=(Condition("degraded", ">", 0.0,
                                        "NVLink link recovery: the link retrained (DCGM health watch flags any)"),),
                  source="dcgm_fields.h: NVLink recovery error counter (old) / recovery failed events (DCGM 3.3+)"),
    # GPU health from the same exporter.
    MetricMapping(("DCGM_FI_DEV_XID_ERRORS",), "gpu", "xid", identity=_GPU, tier="compute", aggregate="max",
                  conditions=(Condition("down", "in", (48.0, 79.0, 95.0),
                                        f"XID 48 double-bit ECC / 79 fallen off the bus / 95 uncontained ECC: "
                                        f"GPU needs a reset ({_XID_SRC})"),
                              Condition("degraded", "in", (63.0, 64.0, 74.0, 92.0, 94.0, 119.0, 120.0),
                                        f"XID 63/64 row remap, 74 NVLink error, 92 high SBE rate, 94 contained "
                                        f"ECC, 119/120 GSP error ({_XID_SRC})")),
                  source="default-counters.csv: gauge, value of the last XID error"),
    MetricMapping(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"), "gpu", "ecc_dbe_per_s",
                  kind="counter", identity=_GPU, tier="compute", unit="1/s",
                  conditions=(Condition("degraded", ">", 0.0, "double-bit ECC errors: uncorrectable, page retired"),),
                  source="dcgm_fields.h: volatile/aggregate double-bit ECC errors"),
    MetricMapping(("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"), "gpu", "ecc_sbe_per_s",
                  kind="counter", identity=_GPU, tier="compute", unit="1/s",
                  conditions=(Condition("info", ">", 0.0, "single-bit ECC errors (corrected)"),),
                  source="dcgm_fields.h: volatile/aggregate single-bit ECC errors"),
    MetricMapping(("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), "gpu",
                  "row_remap_failures", identity=_GPU, tier="compute", aggregate="max",
                  conditions=(Condition("degraded", ">", 0.0,
                                        "HBM row remapping failed / uncorrectable rows: NVIDIA A100/H100 memory "
                                        "error management guide says the GPU needs service"),),
                  source="default-counters.csv"),
    MetricMapping(("DCGM_FI_DEV_GPU_UTIL",), "gpu", "utilization", identity=_GPU, tier="compute", scale=0.01,
                  source="default-counters.csv: percent (old metric)"),
    MetricMapping(("DCGM_FI_PROF_GR_ENGINE_ACTIVE",), "gpu", "utilization", identity=_GPU, tier="compute",
                  source="dcp-metrics-included.csv: ratio of time the graphics engine is active (new metric)"),
    MetricMapping(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), "gpu", "tensor_active", identity=_GPU, tier="compute",
                  source="dcp-metrics-included.csv: ratio of cycles the tensor pipe is active"),
    MetricMapping(("DCGM_FI_DEV_SM_CLOCK",), "gpu", "sm_clock_hz", identity=_GPU, tier="compute", scale=1e6,
                  unit="Hz", source="default-counters.csv: SM clock in MHz"),
    MetricMapping(("DCGM_FI_DEV_GPU_TEMP",), "gpu", "temperature_c", identity=_GPU, tier="compute", aggregate="max",
                  unit="C", source="default-counters.csv: GPU temperature in C"),
    MetricMapping(("DCGM_FI_DEV_POWER_USAGE",), "gpu", "power_w", identity=_GPU, tier="compute", unit="W",
                  source="default-counters.csv: power draw in W"),
    MetricMapping(("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), "gpu",
                  "clock_event_reasons", identity=_GPU, tier="compute", aggregate="max",
                  conditions=(Condition("degraded", "mask", float(0x08 | 0x20 | 0x40 | 0x80),
                                        "clocks slowed by HW slowdown (0x8), SW/HW thermal (0x20/0x40) or power "
                                        "brake (0x80) (NVML nvmlClocksEventReasons)"),
                              Condition("info", "mask", float(0x04), "clocks held at the power cap (0x4)")),
                  source="bitmask; renamed from CLOCK_THROTTLE_REASONS to CLOCKS_EVENT_REASONS in DCGM 3.3"),
]


@hookimpl
def twin_metric_mappings() -> list[MetricMapping]:
    """dcgm-exporter's NVLink and GPU-health metrics."""
    return list(NVLINK_MAPPINGS)
