"""Components every cluster has (GPUs, hosts, the job's software) and their failure modes.

Fabric components (NVLink links and NVSwitch chips, NICs, switches, cables, optics, CXL
devices) come from the fabric plugins through the ``twin_components`` /
``twin_failure_modes`` hooks; the adapter (``twin.failure_analyzer``) merges both.

Stragglers are GPU failure modes that do not crash the job: the synchronous step runs at
the pace of the slowest rank until the GPU is drained or recovers. No per-GPU straggler
rate is in validation/reference (ByteDance reports 42.5 % of jobs straggling, case
``bytedance-stragglers-osdi25``, but not a rate per GPU), so they carry no default rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.core.failures.components import ComponentGroup, FailureMode, Impact
from twin.core.failures.failure_rates import REPAIR_H, REPAIR_SOURCE, detection_s, llama3_modes

if TYPE_CHECKING:
    from twin.core.specs import Scenario
    from twin.core.topology import Hierarchy

# Throttled GPU: an H100 SXM5 held at its base clock instead of boost (1,590 of 1,980
# MHz; NVIDIA H100 Tensor Core GPU datasheet/whitepaper) keeps ~80 % of its throughput.
THERMAL_THROTTLE_FRACTION = 1590.0 / 1980.0
# Slow HBM (memory clock reduced on an HBM temperature or ECC event): modelling
# assumption, 75 % of the datasheet bandwidth (override with the injection's fraction).
SLOW_HBM_FRACTION = 0.75
# How long a straggler lasts before it is drained at the next checkpoint: NVIDIA
# Resiliency Extension's straggler detection reports per reporting interval; modelling
# assumption: one hour (override failures.repair_h.straggler).
STRAGGLER_H = 1.0


def base_components(scenario: Scenario, hierarchy: Hierarchy) -> list[ComponentGroup]:
    """GPUs, hosts and the job's software (one instance per host)."""
    c = scenario.cluster
    return [
        ComponentGroup("gpu", "gpu", c.num_gpus, "core", tier=0,
                       attrs={"model": c.gpu.name, "per_node": c.gpus_per_node}, source="cluster.num_gpus"),
        ComponentGroup("host", "host", c.num_nodes, "core", attrs={"gpus": c.gpus_per_node},
                       source="cluster.num_gpus / gpus_per_node"),
        ComponentGroup("software", "software", c.num_nodes, "core",
                       attrs={"what": "framework, dependencies and collective-library hangs, counted per host"},
                       source="Kokolis et al. 2025: MTTF = 1/(N_nodes x r_f) (failures.yaml: meta-rsc-reliability)"),
    ]


def base_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy) -> list[FailureMode]:
    """Failure modes of the groups made by :func:`base_components`."""
    if component.name == "gpu":
        modes = [FailureMode("gpu", mode, "down", rate, src, interrupts=True, nodes_lost=1, degraded=None,
                             detection_s=detection_s(hang), repair_h=REPAIR_H["gpu"], repair_source=REPAIR_SOURCE,
                             description="the GPU is lost; its node cannot run the plan")
                 for mode, rate, src, hang in llama3_modes("gpu")]
        modes.append(FailureMode(
            "gpu", "thermal_throttle", "straggler", None, "no published per-GPU rate (set failures.rates)",
            interrupts=False, nodes_lost=1, degraded=Impact(compute=THERMAL_THROTTLE_FRACTION,
                                                            note="one GPU at base clock"),
            detection_s=0.0, repair_h=STRAGGLER_H, repair_source="assumption: drained within an hour",
            description="thermal throttle: one GPU slows every synchronous step"))
        modes.append(FailureMode(
            "gpu", "slow_hbm", "straggler", None, "no published per-GPU rate (set failures.rates)",
            interrupts=False, nodes_lost=1, degraded=Impact(hbm=SLOW_HBM_FRACTION, note="one GPU with slow HBM"),
            detection_s=0.0, repair_h=STRAGGLER_H, repair_source="assumption: drained within an hour",
            description="slow HBM: one GPU's memory-bound kernels slow every step"))
        return modes
    if component.name == "host":
        return [FailureMode("host", mode, "down", rate, src, interrupts=True, nodes_lost=1, degraded=None,
                            detection_s=detection_s(hang), repair_h=REPAIR_H["host"], repair_source=REPAIR_SOURCE,
                            description="the host is lost")
                for mode, rate, src, hang in llama3_modes("host")]
    if component.name == "software":
        # The job restarts on the same nodes and runs at full speed again.
        return [FailureMode("software", mode, "down", rate, src, interrupts=True, nodes_lost=0, degraded=Impact(),
                            detection_s=detection_s(hang), repair_h=0.0, repair_source="restart clears it",
                            description="software/dependency failure or collective hang")
                for mode, rate, src, hang in llama3_modes("software")]
    return []
