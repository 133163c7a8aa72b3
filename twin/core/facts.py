"""What the step model needs of a cluster, from its fabric models: pure functions.

Each function takes the registered fabric models (a :class:`FabricSet`) and a cluster, and
returns one fact: the tier hierarchy (``build_hierarchy``: scale-up tier from the scale-up
fabric, scale-out tiers from the scale-out fabric at the optics model's switch radix, NCCL's
per-generation tuning constants from ``twin.core.nccl_tuning``), capacities and offload
bandwidth (``cluster_facts``), power (``power_facts``) and the fabric reports. Nothing here
remembers anything: the driver (``twin.core.run.driver``) memoizes these by value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from twin.core import energy as energy_model
from twin.core.accelerator_generations import generation_facts, nccl_tuning_key
from twin.core.compute import Device, device_for
from twin.core.errors import NotFoundError, PluginError
from twin.core.interfaces import Fabric, MemoryFabric, OpticsModel, ScaleOutFabric, ScaleUpFabric
from twin.core.nccl_tuning import (
    LL_MAX_BW_MULTI_NODE_GBPS,
    LL_MAX_BW_ONE_NODE_GBPS,
    NET_OVERHEAD_US_BY_CPU,
    NVLINK_BW_PER_LINK_GBPS,
    NVLS_CHANNELS,
    P2P_CHANNELS_PER_NVLINK,
    RING_PLATEAU,
    collnet_direct_bw,
    p2p_channels,
)
from twin.core.offload import NO_TIERS, MemoryTiers, TierPath, path_to_pool
from twin.core.specs import GPU, Calibration, Cluster, ComputeEfficiency
from twin.core.topology import Hierarchy, Tier
from twin.core.units import GIB

# When no efficiency profile is attached to a GPU spec (inline GPUs in tests).
DEFAULT_EFFICIENCY = ComputeEfficiency(gemm={"bf16": 0.75, "fp16": 0.75, "fp8": 0.65, "fp4": 0.55,
                                             "tf32": 0.7, "fp32": 0.9},
                                       attention_fwd=0.55, attention_bwd=0.42, hbm=0.85,
                                       source="generic defaults; attach a preset profile for fidelity")


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


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the step model needs of a cluster besides its hierarchy (one per cluster)."""

    capacity_bytes: float
    # The tiers outside HBM as one GPU reaches them (``twin.core.offload``): host memory (the
    # "host" memory fabric) and a CXL pool over the host link (0 bandwidth: none).
    pool_bw_Bps: float
    pool_capacity_bytes: float
    pool_latency_s: float
    host_bw_Bps: float
    host_capacity_bytes: float
    host_latency_s: float
    tp_overlap_default: bool
    half_peak_tflops: float
    peak_tflops: dict[str, float]


def cluster_fabrics(fabrics: FabricSet, cluster: Cluster) -> list[Fabric]:
    """The fabric models ``cluster`` uses (scale-up, scale-out, optics, memory pool)."""
    c = cluster
    fabs: list[Fabric] = [fabrics.get("scale_up", c.scale_up.fabric, "cluster.scale_up.fabric")]
    if c.scale_out is not None:
        fabs.append(fabrics.get("scale_out", c.scale_out.fabric, "cluster.scale_out.fabric"))
    if c.optics is not None:
        fabs.append(fabrics.get("optics", c.optics.kind, "cluster.optics.kind"))
    if c.memory_pool is not None:
        fabs.append(fabrics.get("memory", c.memory_pool.fabric, "cluster.memory_pool.fabric"))
    return fabs


def scaled_tier(tier: Tier, factor: float) -> Tier:
    """``tier`` with every bandwidth (ring, NVLS, all-to-all) times ``factor``."""
    if factor == 1.0:
        return tier
    return dataclasses.replace(tier, bw_Bps=tier.bw_Bps * factor, nvls_bw_Bps=tier.nvls_bw_Bps * factor,
                               a2a_bw_Bps=tier.a2a_bw_Bps * factor)


def build_hierarchy(fabrics: FabricSet, c: Cluster, cal: Calibration) -> Hierarchy:
    """The tier hierarchy of ``c`` with ``cal``'s bandwidth factors, and NCCL's tuning constants
    of its GPU generation (the row ``twin.core.accelerator_generations`` names for it) and host
    CPU (``twin.core.nccl_tuning``).
    """
    up = fabrics.get("scale_up", c.scale_up.fabric, "cluster.scale_up.fabric")
    assert isinstance(up, ScaleUpFabric)
    tiers = [scaled_tier(up.tier(c), cal.scale_up_bandwidth)]
    notes: list[str] = []
    if c.scale_out is not None:
        out = fabrics.get("scale_out", c.scale_out.fabric, "cluster.scale_out.fabric")
        assert isinstance(out, ScaleOutFabric)
        radix = None
        if c.optics is not None:
            optics = fabrics.get("optics", c.optics.kind, "cluster.optics.kind")
            assert isinstance(optics, OpticsModel)
            radix = optics.switch_radix(c)
        tiers += [scaled_tier(t, cal.scale_out_bandwidth) for t in out.tiers(c, radix)]
    else:
        notes.append("no scale-out fabric: groups larger than the scale-up domain are not possible")
    cpu = c.host_cpu or "intel"  # not stated: NCCL's Intel/other figures
    gen = nccl_tuning_key(c.gpu.generation)  # the NCCL row its collective library is costed with
    p2p, peer = p2p_channels(gen, tiers[0].nvlink_links)
    return Hierarchy(tiers=tuple(tiers), gpus_per_node=c.gpus_per_node, notes=tuple(notes),
                     ring_plateau=RING_PLATEAU[gen],
                     ll_max_bw=LL_MAX_BW_ONE_NODE_GBPS[gen] * 1e9,
                     nvls_channels=NVLS_CHANNELS[gen][0],
                     nvls_channels_multi=NVLS_CHANNELS[gen][1],
                     collnet_direct_bw=collnet_direct_bw(gen, c.gpus_per_node, c.nics_per_node or c.gpus_per_node),
                     net_overhead_us=NET_OVERHEAD_US_BY_CPU[cpu],
                     ll_max_bw_two_nodes=LL_MAX_BW_MULTI_NODE_GBPS[cpu][0] * 1e9,
                     ll_max_bw_more_nodes=LL_MAX_BW_MULTI_NODE_GBPS[cpu][1] * 1e9,
                     # NCCL provisions P2P_CHANNELS_PER_NVLINK channels per link (nccl_tuning)
                     p2p_channels=p2p, p2p_peer_channels=peer,
                     p2p_channel_bw=NVLINK_BW_PER_LINK_GBPS[gen] * 1e9 / P2P_CHANNELS_PER_NVLINK if p2p else 0.0)


def as_built(fabrics: FabricSet, cluster: Cluster) -> Cluster:
    """``cluster`` with the switch radix its scale-out tiers are built with: the optics
    model's when it forces one (co-packaged optics switches carry 144 ports), so the
    scale-out fabric reports the tree the hierarchy has, not one at its own radix.
    """
    so = cluster.scale_out
    if so is None or cluster.optics is None:
        return cluster
    optics = fabrics.get("optics", cluster.optics.kind, "cluster.optics.kind")
    assert isinstance(optics, OpticsModel)
    radix = optics.switch_radix(cluster)
    if radix is None or radix == so.switch_radix:
        return cluster
    return dataclasses.replace(cluster, scale_out=dataclasses.replace(so, switch_radix=radix))


def optical_links(fabrics: FabricSet, cluster: Cluster) -> int | None:
    """How many scale-out links run over optics when the scale-out fabric counts them itself
    (``ScaleOutFabric.optical_links`` of the cluster as built); None: no optics, no scale-out
    fabric, or a fat tree whose links the optics model counts.
    """
    so = cluster.scale_out
    if so is None or cluster.optics is None:
        return None
    fabric = fabrics.get("scale_out", so.fabric, "cluster.scale_out.fabric")
    assert isinstance(fabric, ScaleOutFabric)
    return fabric.optical_links(as_built(fabrics, cluster))


def fabric_reports(fabrics: FabricSet, cluster: Cluster, hierarchy: Hierarchy,
                   roles: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """Each fabric model's report (of ``roles``; None: all): the scale-out fabric as built
    (:func:`as_built`), and the optics of the links it says run over optics when it is not a
    fat tree (``ScaleOutFabric.optical_links``).
    """
    out: dict[str, dict[str, Any]] = {}
    built = as_built(fabrics, cluster)
    links = optical_links(fabrics, cluster)
    for fab in cluster_fabrics(fabrics, cluster):
        if roles is not None and fab.role not in roles:
            continue
        if isinstance(fab, ScaleOutFabric):
            out[fab.role] = fab.report(built, hierarchy)
        elif isinstance(fab, OpticsModel) and links is not None:
            out[fab.role] = fab.links_report(cluster, hierarchy, links)
        else:
            out[fab.role] = fab.report(cluster, hierarchy)
    return out


def cluster_report(fabrics: FabricSet, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, object]:
    """Facts each fabric model of ``cluster`` reports (power, switches, tiers)."""
    report: dict[str, object] = {
        "tiers": [{"name": t.name, "fabric": t.fabric, "span_gpus": t.span_gpus,
                   "bw_GBps_per_gpu": t.bw_Bps / 1e9, "latency_us": t.latency_s * 1e6,
                   "oversubscription": t.oversubscription, "in_network_reduction": t.reduction}
                  for t in hierarchy.tiers]}
    for role, extra in fabric_reports(fabrics, cluster, hierarchy).items():
        if extra:
            report[role] = extra
    return report


def power_facts(fabrics: FabricSet, cluster: Cluster, hierarchy: Hierarchy) -> energy_model.PowerFacts:
    """What ``cluster``'s components draw (``twin.core.energy``). Switch counts and optics power
    come from the scale-out fabric's and the optics model's reports of ``hierarchy`` (the one
    without calibration: counts do not depend on it).
    """
    return energy_model.power_facts(cluster, fabric_reports(fabrics, cluster, hierarchy, ("scale_out", "optics")))


def memory_tiers(fabrics: FabricSet, cluster: Cluster) -> MemoryTiers:
    """Host memory (the "host" memory fabric, when registered) and the cluster's memory pool as
    one GPU reaches them: the pool through the host link (``offload.path_to_pool``).
    """
    host = NO_TIERS.host
    fab = fabrics.by_role.get("memory", {}).get("host")
    if isinstance(fab, MemoryFabric):
        host = TierPath(fab.bandwidth_per_gpu_Bps(cluster), fab.latency_s(cluster), fab.capacity_per_gpu_bytes(cluster))
    pool = NO_TIERS.pool
    if cluster.memory_pool is not None:
        mem_fab = fabrics.get("memory", cluster.memory_pool.fabric, "cluster.memory_pool.fabric")
        assert isinstance(mem_fab, MemoryFabric)
        pool = path_to_pool(mem_fab.bandwidth_per_gpu_Bps(cluster), mem_fab.latency_s(cluster),
                            mem_fab.capacity_per_gpu_bytes(cluster), host)
    return MemoryTiers(host, pool)


def cluster_facts(fabrics: FabricSet, cluster: Cluster) -> ClusterFacts:
    """Capacity, the memory tiers outside HBM (``memory_tiers``) and peaks of ``cluster``."""
    tiers = memory_tiers(fabrics, cluster)
    host, pool = tiers.host, tiers.pool
    gpu = cluster.gpu
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    return ClusterFacts(capacity_bytes=gpu.hbm_gib * GIB, pool_bw_Bps=pool.bw_Bps,
                        pool_capacity_bytes=pool.capacity_bytes, pool_latency_s=pool.latency_s,
                        host_bw_Bps=host.bw_Bps, host_capacity_bytes=host.capacity_bytes,
                        host_latency_s=host.latency_s,
                        tp_overlap_default=generation_facts(gpu.generation).tp_comm_overlap,
                        half_peak_tflops=gpu.peak_tflops[half], peak_tflops=dict(gpu.peak_tflops))


def device(gpu: GPU, precision: str, scale: float, recipe: str = "auto", flash: bool = True,
           attention_kernel: str = "profile") -> Device:
    """Timing parameters of ``gpu`` for ``precision``, its recipe and a compute calibration
    (``twin.core.compute.device_for``); ``flash``: whether the software stack runs fused (flash)
    attention; ``attention_kernel``: which kernel (``Software.attention_kernel``).
    """
    dev = device_for(gpu, precision, gpu.efficiency or DEFAULT_EFFICIENCY, scale, recipe, attention_kernel)
    return dev if flash else dataclasses.replace(dev, flash=False)
