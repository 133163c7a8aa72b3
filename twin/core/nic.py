"""What a scenario may state about its scale-out links, and the defaults where it does not.

NIC efficiency, the fraction of a scale-out NIC's line rate a collective achieves: shared by
every NIC-based scale-out fabric (InfiniBand, RoCE, third-party fabrics built on the same
NICs); a scenario may state it (``scale_out.achievable_fraction``), otherwise it follows the
NIC's speed class. Hop latency, the time a message takes through one hop of the scale-out
(NIC, cable and switch): a scenario may state it (``scale_out.latency_us``), otherwise each
fabric's own figure holds (its plugin names the source).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin.core.specs import Cluster

# Fraction of the NIC line rate NCCL achieves per NIC: NDR 400G 46-48 GB/s of 50
# (NVIDIA/nccl-tests#290, maintainer), HDR 200G 192 GB/s per 8 NICs of 200
# (NVIDIA/nccl#812, maintainer).
NIC_EFFICIENCY = {400: 0.94, 200: 0.96}


def hop_latency_s(cluster: Cluster, default_s: float) -> float:
    """One hop's latency through the scale-out, seconds: ``scale_out.latency_us`` if stated,
    else the fabric's ``default_s``. A fabric's tiers pay it per hop a step crosses (a fat tree
    2i+1 hops for tier i+1, a dragonfly's global tier its routing's hops, a torus per link).
    """
    so = cluster.scale_out
    assert so is not None
    return so.latency_us * 1e-6 if so.latency_us is not None else default_s


def nic_efficiency(cluster: Cluster) -> float:
    """Achievable fraction of the NIC line rate (stated or by speed class)."""
    so = cluster.scale_out
    assert so is not None
    if so.achievable_fraction:
        return so.achievable_fraction
    return NIC_EFFICIENCY[400] if so.nic_gbps >= 400 else NIC_EFFICIENCY[200]
