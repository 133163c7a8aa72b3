"""Default failure rates, detection and repair times, each with its source.

The default rates are the Llama 3 405B pre-training interruptions by cause
(``validation/reference/failures.yaml``, from Dubey et al. 2024, "The Llama 3 Herd of
Models", §3.3.4 and Table 5): 419 unexpected interruptions in 54 days on 16,384 H100
GPUs in 2,048 hosts. Each cause becomes a rate per unit per year of the component it
names, assuming every unit was exposed for all 54 days (the reference file's own
``derived.rate_per_gpu_per_year_at_16384`` uses the same convention):

    rate per unit-year = count / (units in the Llama 3 cluster x 54/365)

Units: GPU causes per GPU; host causes and software (bugs, dependencies, NCCL watchdog
timeouts) per host, as node-local crashes dominate and Kokolis et al. 2025 model
MTTF = 1 / (N_nodes x r_f) (case ``meta-rsc-reliability``); NIC per NIC (one 400G NIC per
GPU). The published "Network Switch/Cable" count (35) is one number for two kinds of
parts: it is split over the switches and cables of the Llama 3 fabric as the twin sizes
it, weighted by Alibaba HPN's per-unit rates (NIC-ToR link 0.057 %/month, ToR switch
0.051 %/month, case ``alibaba-hpn-failure-rates``). The resulting per-link rate
(~0.65 %/year) lands close to Alibaba's own 0.68 %/year, a cross-check between fleets.

Counts are the published ones; the paper's percentage for "Faulty GPU" (30.1 %) is
inconsistent with its count (148 of 419 = 35.3 %); the counts add up to 419, so they win.
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE_FILE = "validation/reference/failures.yaml"
LLAMA3_SOURCE = "Llama 3 405B, 54 days on 16,384 H100 (Dubey et al. 2024 §3.3.4, Table 5)"
LLAMA3_PERIOD_DAYS = 54.0          # case llama3-405b-54day-summary: period_days
LLAMA3_GPUS = 16384                # the same case: 16,384 GPUs exposed for the whole period
LLAMA3_HOSTS = 2048                # Grand Teton: 8 H100 per host (systems.yaml Meta-RoCE-H100)
LLAMA3_NICS = 16384                # one 400 Gb/s RoCE NIC per GPU (same system preset)
LLAMA3_UNEXPECTED = 419            # case llama3-405b-54day-summary: unexpected
LLAMA3_PLANNED = 47                # the same case: planned (firmware/kernel upgrades)
# The Llama 3 fabric as the twin sizes it from examples/llama3-405b-16k-roce.yaml
# (3-tier Clos: 1,024 ToR + 512 aggregation + 37 core switches; 16,384 NIC-ToR,
# 16,384 ToR-aggregation and 2,341 aggregation-core links). A test re-derives these from
# the inventory so they cannot drift from the model.
LLAMA3_SWITCHES = 1573
LLAMA3_LINKS = 35109
# Alibaba HPN (SIGCOMM 2024 §2.3; case alibaba-hpn-failure-rates), per unit per month.
ALIBABA_LINK_PCT_PER_MONTH = 0.057
ALIBABA_SWITCH_PCT_PER_MONTH = 0.051
# Meta RSC clusters (Kokolis et al., HPCA 2025; case meta-rsc-reliability): failures per
# 1,000 node-days, for the alternative rate sets.
META_RSC_FAILURES_PER_1000_NODE_DAYS = {"meta-rsc1": 6.5, "meta-rsc2": 2.34}

# Detection: a crash (Xid error, host down) is noticed within seconds by health checks;
# ByteRobust reports 30 s to detect network issues (case bytedance-byterobust-incidents:
# network_issue_detection_s 30). A hang is only noticed when the collective watchdog
# fires: ~10 min default (same case: default_timeout_min ~10; PyTorch ProcessGroupNCCL's
# default timeout is 10 minutes).
DETECTION_CRASH_S = 30.0
DETECTION_HANG_S = 600.0
DETECTION_SOURCE = "case bytedance-byterobust-incidents (detection 30 s; watchdog timeout ~10 min)"

# Repair times. No repair-time figure is in validation/reference; these are modelling
# assumptions (override with failures.repair_h): a cable or transceiver is swapped
# within a shift, a switch replaced within a working day, a node returned from repair
# (diagnosis, RMA of the GPU/board) within two days.
REPAIR_H = {"link": 4.0, "transceiver": 4.0, "laser_source": 4.0, "switch": 8.0, "nic": 48.0, "gpu": 48.0,
            "host": 48.0, "nvswitch": 48.0, "nvlink_link": 48.0, "cxl_device": 48.0, "software": 0.0,
            "fabric": 0.0}
REPAIR_SOURCE = "assumption (no repair-time figure in validation/reference/failures.yaml); override failures.repair_h"


@dataclass(frozen=True, slots=True)
class PublishedCause:
    """One row of Llama 3's Table 5 and the component/mode the twin maps it to."""

    case_id: str
    count: int
    component: str
    mode: str
    hang: bool = False


LLAMA3_CAUSES: tuple[PublishedCause, ...] = (
    PublishedCause("llama3-405b-interruptions-faulty-gpu", 148, "gpu", "faulty_gpu"),
    PublishedCause("llama3-405b-interruptions-gpu-hbm3-memory", 72, "gpu", "hbm3"),
    PublishedCause("llama3-405b-interruptions-gpu-sram-memory", 19, "gpu", "sram"),
    PublishedCause("llama3-405b-interruptions-gpu-system-processor", 17, "gpu", "system_processor"),
    PublishedCause("llama3-405b-interruptions-silent-data-corruption", 6, "gpu", "silent_data_corruption",
                   hang=True),
    PublishedCause("llama3-405b-interruptions-gpu-thermal-interface-plus-sensor", 6, "gpu", "thermal_interface"),
    PublishedCause("llama3-405b-interruptions-software-bug", 54, "software", "bug"),
    PublishedCause("llama3-405b-interruptions-dependency", 2, "software", "dependency"),
    PublishedCause("llama3-405b-interruptions-nccl-watchdog-timeouts", 7, "software", "nccl_watchdog", hang=True),
    PublishedCause("llama3-405b-interruptions-host-maintenance", 32, "host", "unplanned_maintenance"),
    PublishedCause("llama3-405b-interruptions-ssd", 3, "host", "ssd"),
    PublishedCause("llama3-405b-interruptions-power-supply", 3, "host", "power_supply"),
    PublishedCause("llama3-405b-interruptions-server-chassis", 2, "host", "server_chassis"),
    PublishedCause("llama3-405b-interruptions-io-expansion-board", 2, "host", "io_expansion_board"),
    PublishedCause("llama3-405b-interruptions-cpu", 2, "host", "cpu"),
    PublishedCause("llama3-405b-interruptions-system-memory", 2, "host", "system_memory"),
    PublishedCause("llama3-405b-interruptions-nic", 7, "nic", "down"),
    PublishedCause("llama3-405b-interruptions-network-switch-cable", 35, "network", "switch_cable"),
)
_UNITS = {"gpu": LLAMA3_GPUS, "host": LLAMA3_HOSTS, "software": LLAMA3_HOSTS, "nic": LLAMA3_NICS}
_YEARS = LLAMA3_PERIOD_DAYS / 365.0
NODE_COMPONENTS = ("gpu", "host", "software", "nic")


def _cite(cause: PublishedCause, units: str) -> str:
    return f"{LLAMA3_SOURCE}: {cause.count} interruptions / ({units} x 54 d) ({REFERENCE_FILE}: {cause.case_id})"


def network_rates() -> tuple[float, float, str]:
    """(per link-year, per switch-year, source) from Llama 3's 35 switch/cable interruptions."""
    cause = next(c for c in LLAMA3_CAUSES if c.component == "network")
    ratio = ALIBABA_SWITCH_PCT_PER_MONTH / ALIBABA_LINK_PCT_PER_MONTH
    per_link = cause.count / _YEARS / (LLAMA3_LINKS + ratio * LLAMA3_SWITCHES)
    source = (f"{LLAMA3_SOURCE}: 35 switch/cable interruptions over the twin's {LLAMA3_LINKS:,} links and "
              f"{LLAMA3_SWITCHES:,} switches of that fabric, split by Alibaba HPN's per-unit link:switch ratio "
              f"{ALIBABA_LINK_PCT_PER_MONTH}:{ALIBABA_SWITCH_PCT_PER_MONTH} %/month ({REFERENCE_FILE}: "
              f"{cause.case_id}, alibaba-hpn-failure-rates)")
    return per_link, per_link * ratio, source


def llama3_modes(component: str) -> list[tuple[str, float, str, bool]]:
    """(mode, rate per unit-year, source, hang?) for a node-level component (gpu, host, software, nic)."""
    units = _UNITS[component]
    label = {"gpu": "16,384 GPUs", "host": "2,048 hosts", "software": "2,048 hosts", "nic": "16,384 NICs"}[component]
    return [(c.mode, c.count / units / _YEARS, _cite(c, label), c.hang)
            for c in LLAMA3_CAUSES if c.component == component]


def llama3_node_failures_per_1000_node_days() -> float:
    """Interruptions attributed to nodes (everything but the network) per 1,000 node-days."""
    node = sum(c.count for c in LLAMA3_CAUSES if c.component in NODE_COMPONENTS)
    return node / (LLAMA3_HOSTS * LLAMA3_PERIOD_DAYS) * 1000.0


def rate_set_scale(rate_set: str) -> float:
    """Multiplier on node-level rates for an alternative fleet (1.0 for ``llama3``)."""
    if rate_set == "llama3":
        return 1.0
    return META_RSC_FAILURES_PER_1000_NODE_DAYS[rate_set] / llama3_node_failures_per_1000_node_days()


def planned_per_day() -> tuple[float, str]:
    """Planned interruptions (maintenance) per day for one job, and the source."""
    return (LLAMA3_PLANNED / LLAMA3_PERIOD_DAYS,
            f"{LLAMA3_SOURCE}: 47 planned interruptions in 54 days ({REFERENCE_FILE}: llama3-405b-54day-summary)")


def detection_s(hang: bool) -> float:
    """Seconds until a failure is noticed: a watchdog timeout for hangs, seconds for crashes."""
    return DETECTION_HANG_S if hang else DETECTION_CRASH_S
