"""NIC efficiency: the fraction of a scale-out NIC's line rate a collective achieves.

Shared by every NIC-based scale-out fabric (InfiniBand, RoCE, third-party fabrics built
on the same NICs): a scenario may state it (``scale_out.achievable_fraction``), otherwise
it follows the NIC's speed class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin.core.specs import Cluster

# Fraction of the NIC line rate NCCL achieves per NIC: NDR 400G 46-48 GB/s of 50
# (NVIDIA/nccl-tests#290, maintainer), HDR 200G 192 GB/s per 8 NICs of 200
# (NVIDIA/nccl#812, maintainer).
NIC_EFFICIENCY = {400: 0.94, 200: 0.96}


def nic_efficiency(cluster: Cluster) -> float:
    """Achievable fraction of the NIC line rate (stated or by speed class)."""
    so = cluster.scale_out
    assert so is not None
    if so.achievable_fraction:
        return so.achievable_fraction
    return NIC_EFFICIENCY[400] if so.nic_gbps >= 400 else NIC_EFFICIENCY[200]
