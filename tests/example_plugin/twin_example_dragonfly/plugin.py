"""An example dragonfly scale-out fabric (Kim et al., ISCA 2008; HPE Slingshot).

An example of a third-party plugin, kept deliberately small; twin's own ``dragonfly``
fabric (plugins/dragonfly.py) models routers, groups and routing in full. Its kind,
``example-dragonfly``, must not clash with a built-in one: duplicate kinds are an error.

Groups of switches are all-to-all connected inside (one hop) and joined to every other
group by global links. Traffic inside a group runs at NIC speed; traffic between groups
shares the global links, whose bandwidth relative to the group's injection bandwidth is
the taper (``global_taper``; 2 means the global links carry half of what the group's
NICs can inject).
"""

from __future__ import annotations

from typing import Any

from twin.api import (
    Cluster,
    Hierarchy,
    ScaleOutFabric,
    SpecError,
    Strategy,
    Tier,
    check_scale_out_params,
    gbps_to_bytes_per_s,
    hookimpl,
)
from twin_example_dragonfly.compressed_pp import CompressedPipeline

PARAMS = {"gpus_per_group", "global_taper"}
# Example values, not fitted to a measurement: the group size and taper are the defaults
# of this example; the NIC efficiency assumes 23 of 25 GB/s per 200G NIC, in line with the
# 0.94-0.96 of InfiniBand NICs (twin.api.NIC_EFFICIENCY); the hop latency assumes ~350 ns
# per Rosetta switch (the 64-port 200G Slingshot switch: De Sensi et al., SC20, "An
# In-Depth Analysis of the Slingshot Interconnect").
DEFAULT_GPUS_PER_GROUP = 256
DEFAULT_GLOBAL_TAPER = 2.0
NIC_EFFICIENCY = 0.92
HOP_LATENCY_S = 0.35e-6


class DragonflyFabric(ScaleOutFabric):
    """Dragonfly: a group tier at full bandwidth, a global tier tapered."""

    kind = "example-dragonfly"
    summary = "Example dragonfly (third-party plugin): full bandwidth inside a group, tapered global links"

    def validate(self, cluster: Cluster, path: str) -> None:
        """Reject unknown parameters (naming the field) and non-positive values."""
        check_scale_out_params(cluster, path, PARAMS, self.kind)
        so = cluster.scale_out
        assert so is not None
        for key, value in so.params.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise SpecError(f"{path}.scale_out.params.{key}", f"must be a number > 0 (got {value!r})")

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        """Tier 1: one group (one switch hop inside); tier 2: the whole machine over global links."""
        so = cluster.scale_out
        assert so is not None
        group = int(so.params.get("gpus_per_group", DEFAULT_GPUS_PER_GROUP))
        taper = float(so.params.get("global_taper", DEFAULT_GLOBAL_TAPER))
        per_gpu = gbps_to_bytes_per_s(so.nic_gbps) * cluster.nics_per_node / cluster.gpus_per_node * NIC_EFFICIENCY
        return [Tier(name="group", fabric=self.kind, span_gpus=max(group, cluster.gpus_per_node), bw_Bps=per_gpu,
                     latency_s=2 * HOP_LATENCY_S),
                Tier(name="global", fabric=self.kind, span_gpus=max(cluster.num_gpus, group), bw_Bps=per_gpu,
                     latency_s=3 * HOP_LATENCY_S, oversubscription=max(1.0, taper))]

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Plain facts for the estimate: how many groups the cluster spans."""
        so = cluster.scale_out
        assert so is not None
        group = int(so.params.get("gpus_per_group", DEFAULT_GPUS_PER_GROUP))
        return {"kind": self.kind, "groups": max(1, -(-cluster.num_gpus // group))}


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register the example dragonfly fabric."""
    return [DragonflyFabric()]


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register the example compressed pipeline: an alternative for "pp", run only where a scenario selects it."""
    return [CompressedPipeline()]
