"""A dragonfly scale-out fabric (Kim et al., ISCA 2008; HPE Slingshot).

Groups of switches are all-to-all connected inside (one hop) and joined to every other
group by global links. Traffic inside a group runs at NIC speed; traffic between groups
shares the global links, whose bandwidth relative to the group's injection bandwidth is
the taper (Slingshot systems are commonly built with ~1:2 global taper).
"""

from __future__ import annotations

from typing import Any

from twin.core.api import ScaleOutFabric
from twin.core.errors import SpecError
from twin.core.specs import Cluster
from twin.core.topology import Hierarchy, Tier
from twin.hookimpl import hookimpl

PARAMS = {"gpus_per_group", "global_taper"}
NIC_EFFICIENCY = 0.92       # Slingshot 200G NICs reach ~23 GB/s of 25 in MPI/NCCL benchmarks
HOP_LATENCY_S = 0.35e-6     # Rosetta switch port-to-port ~350 ns


class DragonflyFabric(ScaleOutFabric):
    """Dragonfly: a group tier at full bandwidth, a global tier tapered."""

    kind = "dragonfly"
    summary = "Dragonfly (Slingshot-style): full bandwidth inside a group, tapered global links"

    def validate(self, cluster: Cluster, path: str) -> None:
        so = cluster.scale_out
        assert so is not None
        for key, value in so.params.items():
            if key not in PARAMS:
                raise SpecError(f"{path}.scale_out.params.{key}",
                                f"unknown parameter for dragonfly; expected one of: {', '.join(sorted(PARAMS))}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise SpecError(f"{path}.scale_out.params.{key}", f"must be a number > 0 (got {value!r})")

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        so = cluster.scale_out
        assert so is not None
        group = int(so.params.get("gpus_per_group", 256))
        taper = float(so.params.get("global_taper", 2.0))
        per_gpu = so.nic_gbps * 1e9 / 8 * cluster.nics_per_node / cluster.gpus_per_node * NIC_EFFICIENCY
        return [Tier(name="group", fabric=self.kind, span_gpus=max(group, cluster.gpus_per_node), bw_Bps=per_gpu,
                     latency_s=2 * HOP_LATENCY_S),
                Tier(name="global", fabric=self.kind, span_gpus=max(cluster.num_gpus, group), bw_Bps=per_gpu,
                     latency_s=3 * HOP_LATENCY_S, oversubscription=max(1.0, taper))]

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        so = cluster.scale_out
        assert so is not None
        group = int(so.params.get("gpus_per_group", 256))
        return {"kind": self.kind, "groups": max(1, -(-cluster.num_gpus // group))}


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register the dragonfly fabric."""
    return [DragonflyFabric()]
