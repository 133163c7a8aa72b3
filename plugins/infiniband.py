"""InfiniBand scale-out: NICs/rails per node, fat-tree tiers from switch radix,
oversubscription per tier, SHARP in-network reduction and adaptive routing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from twin.api import (
    HOUR_S,
    Cluster,
    ComponentGroup,
    Condition,
    FailureMode,
    Hierarchy,
    MetricMapping,
    ScaleOutFabric,
    Scenario,
    SpecError,
    Tier,
    check_scale_out_params,
    fat_tree_components,
    fat_tree_failure_modes,
    fat_tree_report,
    hookimpl,
    nic_efficiency,
    read_param,
    scale_out_tiers,
)

# Switch port-to-port latency: Quantum-2 NDR ~130 ns (NVIDIA Quantum-2 datasheet); cable
# and NIC add ~0.5 us per hop.
HOP_LATENCY_S = 0.6e-6
# Static (destination-mod-k) routing on a fat tree is contention-free for the shift
# permutations rings use (Zahavi et al. 2010), so losses only appear for irregular
# patterns; adaptive routing removes most of the rest.
STATIC_ROUTING_EFFICIENCY = 0.95
PARAMS = {"static_routing_efficiency"}


class InfiniBandFabric(ScaleOutFabric):
    """InfiniBand fat tree (rail-optimised by default) with optional SHARP."""

    kind = "infiniband"
    summary = "InfiniBand fat tree: rails, tiers from radix, oversubscription, SHARP, adaptive routing"

    def validate(self, cluster: Cluster, path: str) -> None:
        check_scale_out_params(cluster, path, PARAMS, self.kind)
        so = cluster.scale_out
        assert so is not None
        if "static_routing_efficiency" in so.params and so.adaptive_routing is not False:
            raise SpecError(f"{path}.scale_out.params.static_routing_efficiency",
                            "applies to static (destination-mod-k) routing only: adaptive routing (the default on "
                            "InfiniBand, adaptive_routing unset or true) spreads flows over every uplink; set "
                            "scale_out.adaptive_routing: false to price static routing")
        read_param(so.params, f"{path}.scale_out.params.static_routing_efficiency", STATIC_ROUTING_EFFICIENCY,
                   minimum=0.01, maximum=1.0)
        rail = so.topology == "rail_optimized"
        if so.nics_per_node is not None and rail and so.nics_per_node > cluster.gpus_per_node:
            raise SpecError(f"{path}.scale_out.nics_per_node",
                            f"a rail-optimised node has at most one rail per GPU ({cluster.gpus_per_node})")

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        so = cluster.scale_out
        assert so is not None
        eff = nic_efficiency(cluster)
        adaptive = True if so.adaptive_routing is None else so.adaptive_routing
        routing = 1.0 if adaptive else float(so.params.get("static_routing_efficiency", STATIC_ROUTING_EFFICIENCY))
        tiers, _ = scale_out_tiers(cluster, radix or so.switch_radix, self.kind, (eff, eff * routing),
                                   HOP_LATENCY_S, reduction="sharp" if so.sharp else "")
        return tiers

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        so = cluster.scale_out
        assert so is not None
        out = fat_tree_report(cluster, so.switch_radix, self.kind)
        out.update(sharp=so.sharp, adaptive_routing=True if so.adaptive_routing is None else so.adaptive_routing,
                   nic_efficiency=nic_efficiency(cluster))
        return out


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register the InfiniBand fabric."""
    return [InfiniBandFabric()]


# ------------------------------------------------------------------ failure scenarios
@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """NICs, switches and cables of an InfiniBand fat tree (sized like its tiers)."""
    so = scenario.cluster.scale_out
    if so is None or so.fabric != InfiniBandFabric.kind:
        return None
    adaptive = True if so.adaptive_routing is None else so.adaptive_routing
    groups = fat_tree_components(scenario, hierarchy, switch_radix or so.switch_radix, so.fabric)
    # Adaptive routing re-balances around a slow link; static (D-mod-k) routes are
    # recomputed by the subnet manager when a link goes down, so no hashed collisions.
    return [dataclasses.replace(g, attrs={**g.attrs, "adaptive_routing": adaptive, "hashed_flows_per_uplink": 0.0})
            if g.kind == "link" else g for g in groups]


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """NIC, cable and switch failures of the fat tree and how the job rides them out."""
    so = scenario.cluster.scale_out
    if so is None or component.fabric != InfiniBandFabric.kind or so.fabric != InfiniBandFabric.kind:
        return None
    return fat_tree_failure_modes(component, scenario, hierarchy, switch_radix or so.switch_radix)


# ----------------------------------------------------------------------- telemetry
# node_exporter's infiniband collector (prometheus/node_exporter collector/infiniband_linux.go,
# from /sys/class/infiniband/<device>/ports/<port>/): labels device, port. Both the
# Prometheus names (..._bytes_total) and the OTel Collector's normalised names (unit
# suffix dropped) are listed. Error thresholds: infiniband-diags ibqueryerrors defaults
# (SymbolErrorCounter 10, LinkErrorRecoveryCounter 10, PortRcvErrors 10), read per hour.
_PORT = ("device|hca|ca", "port")
_PER_HOUR_10 = 10.0 / HOUR_S
_IBQ = "above the ibqueryerrors default threshold of 10 (per hour)"
IB_MAPPINGS = [
    MetricMapping(("node_infiniband_port_data_transmitted_bytes_total", "node_infiniband_port_data_transmitted",
                   "node_infiniband_legacy_data_transmitted_bytes_total"),
                  "ib_port", "tx_Bps", kind="counter", identity=_PORT, tier="scale_out", unit="B/s",
                  source="node_exporter: PortXmitData x 4 (the counter is in 4-byte words)"),
    MetricMapping(("node_infiniband_port_data_received_bytes_total", "node_infiniband_port_data_received",
                   "node_infiniband_legacy_data_received_bytes_total"),
                  "ib_port", "rx_Bps", kind="counter", identity=_PORT, tier="scale_out", unit="B/s",
                  source="node_exporter: PortRcvData x 4"),
    MetricMapping(("node_infiniband_symbol_error_total", "node_infiniband_symbol_error"), "ib_port",
                  "symbol_errors_per_s", kind="counter", identity=_PORT, tier="scale_out", unit="1/s",
                  conditions=(Condition("degraded", ">", _PER_HOUR_10, f"symbol errors {_IBQ}"),),
                  source="node_exporter: SymbolErrorCounter"),
    MetricMapping(("node_infiniband_link_error_recovery_total", "node_infiniband_link_error_recovery"), "ib_port",
                  "link_recoveries_per_s", kind="counter", identity=_PORT, tier="scale_out", unit="1/s",
                  conditions=(Condition("degraded", ">", _PER_HOUR_10, f"link error recoveries {_IBQ}"),),
                  source="node_exporter: LinkErrorRecoveryCounter"),
    MetricMapping(("node_infiniband_link_downed_total", "node_infiniband_link_downed"), "ib_port",
                  "link_downed_per_s", kind="counter", identity=_PORT, tier="scale_out", unit="1/s",
                  conditions=(Condition("degraded", ">", 0.0, "the link went down and retrained (flapping)"),),
                  source="node_exporter: LinkDownedCounter"),
    MetricMapping(("node_infiniband_port_errors_received_total", "node_infiniband_port_errors_received"), "ib_port",
                  "rx_errors_per_s", kind="counter", identity=_PORT, tier="scale_out", unit="1/s",
                  conditions=(Condition("degraded", ">", _PER_HOUR_10, f"receive errors {_IBQ}"),),
                  source="node_exporter: PortRcvErrors"),
    MetricMapping(("node_infiniband_port_transmit_wait_total", "node_infiniband_port_transmit_wait"), "ib_port",
                  "transmit_wait_per_s", kind="counter", identity=_PORT, tier="scale_out", unit="ticks/s",
                  conditions=(Condition("info", ">", 0.0, "congestion: data waited for credits (PortXmitWait)"),),
                  source="node_exporter: PortXmitWait"),
    MetricMapping(("node_infiniband_state_id",), "ib_port", "state", identity=_PORT, tier="scale_out",
                  aggregate="min",
                  conditions=(Condition("down", "not_in", (4.0, 5.0),
                                        "logical port state not ACTIVE (IBTA: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE)"),),
                  source="node_exporter: /sys/class/infiniband/*/ports/*/state"),
    MetricMapping(("node_infiniband_physical_state_id",), "ib_port", "physical_state", identity=_PORT,
                  tier="scale_out", aggregate="min",
                  conditions=(Condition("down", "not_in", (5.0,),
                                        "physical state not LinkUp (IBTA: 2 Polling, 3 Disabled, 5 LinkUp)"),),
                  source="node_exporter: /sys/class/infiniband/*/ports/*/phys_state"),
    MetricMapping(("node_infiniband_rate_bytes_per_second", "node_infiniband_rate"), "ib_port", "rate_Bps",
                  identity=_PORT, tier="scale_out", aggregate="min", unit="B/s", capacity="ratio_to_peak",
                  source="node_exporter: negotiated link rate (width x speed); a drop means the link trained down"),
]


@hookimpl
def twin_metric_mappings() -> list[MetricMapping]:
    """node_exporter's InfiniBand port metrics."""
    return list(IB_MAPPINGS)
