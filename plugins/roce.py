"""RoCE (RDMA over Converged Ethernet) and other Ethernet scale-out fabrics.

Same fat-tree topology model as InfiniBand, plus Ethernet's two losses as an explicit
efficiency model with its parameters exposed:
- ECMP hash collisions: flows hash onto a leaf's uplinks like balls into bins; a
  collective runs at the pace of its most loaded link (Raab & Steger 1998: the fullest of
  U bins holding c balls on average carries about c + sqrt(2 c ln U));
- congestion control (PFC pause, ECN marking, DCQCN rate control) throughput loss under
  load, a single stated factor.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from twin.api import (
    HOUR_S,
    Cluster,
    ComponentGroup,
    Condition,
    FailureMode,
    Hierarchy,
    Impact,
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
    reject_scale_out_fields,
    scale_out_tiers,
)

PARAMS = {"ecmp_flows_per_pair", "congestion_control", "congestion_efficiency", "packet_spraying"}
# Knobs earlier versions accepted without any effect; no published measurement gives them
# one, so they are refused with what to use instead (no accepted-but-ignored input).
UNMODELLED = {
    "pfc": "PFC is assumed on (lossless RoCE); its cost under load is part of congestion_efficiency",
    "ecn": "ECN marking is part of congestion_control (dcqcn needs it; 'none' runs without)",
    "deep_buffer_spine": "no published effect to model; state its measured gain as congestion_efficiency",
}
# Throughput kept under load by each congestion-control regime. Modelling assumptions
# (no published per-regime figure in validation/reference): DCQCN keeps queues short at a
# few % loss (Zhu et al., SIGCOMM 2015, "Congestion Control for Large-Scale RDMA
# Deployments"); PFC-only fabrics with deep-buffer spines (the Llama 3 design) lose a
# little more to pause propagation.
CONGESTION_EFFICIENCY = {"dcqcn": 0.95, "none": 0.93, "swift": 0.96, "hpcc": 0.96}
# Flows (queue pairs) each NIC keeps busy by default: NCCL opens one connection per
# channel per peer (NCCL_IB_QPS_PER_CONNECTION=1) and runs ~2-4 ring channels per NIC on
# 8-NIC nodes; Llama 3's E-ECMP raised this to 16 per GPU pair.
DEFAULT_FLOWS_PER_NIC = 4
# Ethernet hop latency: ~0.8 us per switch (Broadcom Tomahawk-class cut-through) + NIC.
HOP_LATENCY_S = 0.9e-6


def ecmp_efficiency(flows: float, uplinks: int) -> float:
    """Mean/max load when ``flows`` flows hash onto ``uplinks`` links (balls into bins)."""
    if uplinks <= 1 or flows <= 0:
        return 1.0
    c = flows / uplinks
    worst = c + math.sqrt(2.0 * c * math.log(uplinks))
    return min(1.0, c / worst)


class RoCEFabric(ScaleOutFabric):
    """RoCEv2 fat tree with ECMP and PFC/ECN/DCQCN congestion control."""

    kind = "roce"
    summary = "RoCE fat tree: ECMP collision and congestion-control (PFC/ECN/DCQCN) efficiency model"
    spraying_default = False
    params = PARAMS

    def validate(self, cluster: Cluster, path: str) -> None:
        so = cluster.scale_out
        assert so is not None
        for key, why in UNMODELLED.items():
            if key in so.params:
                raise SpecError(f"{path}.scale_out.params.{key}", f"is not modelled ({why})")
        reject_scale_out_fields(cluster, path, self.kind, {
            "sharp": "SHARP in-network reduction needs InfiniBand (Quantum) switches"})
        check_scale_out_params(cluster, path, self.params, self.kind)
        cc = so.params.get("congestion_control", "dcqcn")
        if cc not in CONGESTION_EFFICIENCY:
            raise SpecError(f"{path}.scale_out.params.congestion_control",
                            f"must be one of {', '.join(sorted(CONGESTION_EFFICIENCY))} (got {cc!r})")
        flows = so.params.get("ecmp_flows_per_pair", 1)
        if not isinstance(flows, (int, float)) or flows < 1:
            raise SpecError(f"{path}.scale_out.params.ecmp_flows_per_pair", f"must be >= 1 (got {flows!r})")
        ce = so.params.get("congestion_efficiency")
        if ce is not None and not (isinstance(ce, (int, float)) and 0 < ce <= 1):
            raise SpecError(f"{path}.scale_out.params.congestion_efficiency", f"must be in (0, 1] (got {ce!r})")

    def efficiencies(self, cluster: Cluster, radix: int) -> tuple[float, float, dict[str, float]]:
        """(leaf-local efficiency, efficiency beyond the leaf, the factors)."""
        so = cluster.scale_out
        assert so is not None
        nic = nic_efficiency(cluster)
        cc = so.params.get("congestion_control", "dcqcn")
        congestion = float(so.params.get("congestion_efficiency", CONGESTION_EFFICIENCY[cc]))
        spraying = bool(so.params.get("packet_spraying", self.spraying_default)) or bool(so.adaptive_routing)
        if spraying:
            ecmp = 1.0
        else:
            over = so.oversubscription[0] if so.oversubscription else 1.0
            uplinks = max(1, int(radix / (1 + over)))
            flows_per_nic = float(so.params.get("ecmp_flows_per_pair", DEFAULT_FLOWS_PER_NIC))
            ecmp = ecmp_efficiency(flows_per_nic * uplinks * over, uplinks)
        return nic * congestion, nic * congestion * ecmp, {"nic": nic, "congestion": congestion, "ecmp": ecmp}

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        so = cluster.scale_out
        assert so is not None
        r = radix or so.switch_radix
        local, beyond, _ = self.efficiencies(cluster, r)
        tiers, _ = scale_out_tiers(cluster, r, self.kind, (local, beyond), HOP_LATENCY_S)
        return tiers

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        so = cluster.scale_out
        assert so is not None
        out = fat_tree_report(cluster, so.switch_radix, self.kind)
        _, _, factors = self.efficiencies(cluster, so.switch_radix)
        out.update({f"{k}_efficiency": v for k, v in factors.items()})
        out["congestion_control"] = so.params.get("congestion_control", "dcqcn")
        return out


# EFA as NCCL drives it through the aws-ofi-nccl plugin (aws/aws-ofi-nccl):
# - per network step, 20 us (OFI_NCCL_TUNER_NET_LATENCY's default, "Latency in usecs") plus
#   3 us for the Simple protocol's completion ("With EFA, we expect a ~2usec cost in the device
#   and ~1usec cost to write that completion up to the host stack", TUNER_NET_COMP_OVERHEAD):
#   include/nccl_ofi_param.h, the figures of the plugin's own EFA cost model
#   (src/tuner/nccl_ofi_model.c). Only Simple runs by default (below), so the step costs 23 us.
# - LL and LL128 only where the EFA endpoint delivers 128-byte stores in order
#   (FI_OPT_EFA_*_IN_ORDER_ALIGNED_128_BYTES); otherwise the plugin sets NCCL_PROTO=simple
#   (src/platform-aws.c, configure_nccl_proto: "whenever we know that the LL/LL128 protocols
#   are not safe, such as on P4d/P4e"). ``params.ll_protocols: true`` states such an endpoint.
EFA_STEP_LATENCY_S = (20.0 + 3.0) * 1e-6
EFA_PARAMS = PARAMS | {"ll_protocols"}


class EFAFabric(RoCEFabric):
    """AWS Elastic Fabric Adapter: SRD sprays packets over all paths, so no ECMP collisions;
    NCCL runs over it through aws-ofi-nccl (its per-step latency, Simple protocol only unless
    ``params.ll_protocols``).
    """

    kind = "efa"
    summary = "AWS EFA via aws-ofi-nccl (SRD multipath spraying, 23 us per network step, Simple protocol)"
    spraying_default = True
    params = EFA_PARAMS

    def validate(self, cluster: Cluster, path: str) -> None:
        super().validate(cluster, path)
        so = cluster.scale_out
        assert so is not None
        ll = so.params.get("ll_protocols", False)
        if not isinstance(ll, bool):
            raise SpecError(f"{path}.scale_out.params.ll_protocols", f"must be true or false (got {ll!r})")

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        so = cluster.scale_out
        assert so is not None
        simple_only = not bool(so.params.get("ll_protocols", False))
        return [dataclasses.replace(t, latency_s=max(t.latency_s, EFA_STEP_LATENCY_S), simple_only=simple_only)
                for t in super().tiers(cluster, radix)]


class EthernetFabric(RoCEFabric):
    """Generic lossless Ethernet (treated as RoCE)."""

    kind = "ethernet"
    summary = "Generic Ethernet with RDMA (modelled as RoCE)"


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register RoCE, EFA and generic Ethernet fabrics."""
    return [RoCEFabric(), EFAFabric(), EthernetFabric()]


_KINDS = (RoCEFabric.kind, EFAFabric.kind, EthernetFabric.kind)


# ------------------------------------------------------------------ failure scenarios
# Congestion episodes (no published rates: they are for "what if" injections).
# PFC pause storm: a NIC stuck sending PAUSE frames halts its upstream ports and the
# pauses spread through the fabric until a PFC watchdog breaks them (Guo et al., SIGCOMM
# 2016, "RDMA over Commodity Ethernet at Scale", §4: NIC PFC pause-frame storms).
# Bandwidth kept and duration are modelling assumptions (override fraction/duration_s).
PFC_STORM_FRACTION = 0.25
PFC_STORM_S = 60.0
# ECMP collision episode: flows collapse to one per GPU pair (hash polarisation, or a
# collective library without Llama 3's 16-flow E-ECMP), so the balls-into-bins loss of
# ecmp_efficiency() with one flow per NIC applies. Duration: assumption (one job phase).
ECMP_EPISODE_S = 600.0


def _hashing(cluster: Cluster, radix: int) -> tuple[bool, float]:
    """(adaptive/sprayed?, ECMP flows per leaf uplink) as the tier model assumes them."""
    so = cluster.scale_out
    assert so is not None
    spraying = bool(so.params.get("packet_spraying", False)) or bool(so.adaptive_routing)
    if spraying:
        return True, 0.0
    over = so.oversubscription[0] if so.oversubscription else 1.0
    flows_per_nic = float(so.params.get("ecmp_flows_per_pair", DEFAULT_FLOWS_PER_NIC))
    return False, flows_per_nic * over


@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """NICs, switches and cables of a RoCE/Ethernet fat tree, plus the fabric (congestion)."""
    so = scenario.cluster.scale_out
    if so is None or so.fabric not in _KINDS:
        return None
    radix = switch_radix or so.switch_radix
    adaptive, per_uplink = _hashing(scenario.cluster, radix)
    if so.fabric == EFAFabric.kind:
        adaptive, per_uplink = True, 0.0  # SRD sprays packets over all paths
    groups = [dataclasses.replace(g, attrs={**g.attrs, "adaptive_routing": adaptive,
                                            "hashed_flows_per_uplink": per_uplink})
              if g.kind == "link" else g for g in fat_tree_components(scenario, hierarchy, radix, so.fabric)]
    groups.append(ComponentGroup("scale_out", "fabric", 1, so.fabric, tier=1,
                                 attrs={"congestion_control": so.params.get("congestion_control", "dcqcn"),
                                        "ecmp": not adaptive}, source="the scale-out network as a whole"))
    return groups


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """Fat-tree failures (re-hashed ECMP flows collide) and RoCE congestion episodes."""
    cluster = scenario.cluster
    so = cluster.scale_out
    if so is None or component.fabric not in _KINDS or so.fabric not in _KINDS:
        return None
    radix = switch_radix or so.switch_radix
    adaptive, per_uplink = _hashing(cluster, radix)
    if component.name != "scale_out":
        return fat_tree_failure_modes(component, scenario, hierarchy, radix, 0.0 if adaptive else per_uplink)
    scale_out_tiers = tuple(range(1, len(hierarchy.tiers)))
    beyond_leaf = tuple(range(2, len(hierarchy.tiers)))
    over = so.oversubscription[0] if so.oversubscription else 1.0
    uplinks = max(1, int(radix / (1 + over)))
    now = ecmp_efficiency(per_uplink * uplinks, uplinks) if not adaptive else 1.0
    collided = ecmp_efficiency(1.0 * uplinks * over, uplinks)
    ecmp_factor = min(1.0, collided / now)
    no_rate = "no published rate (an injection; set failures.rates to include it)"
    return [
        FailureMode("scale_out", "pfc_storm", "congestion", None, no_rate, interrupts=False,
                    degraded=Impact(tier_bw=tuple((t, PFC_STORM_FRACTION) for t in scale_out_tiers),
                                    note=f"PFC pause storm: {PFC_STORM_FRACTION:.0%} of scale-out bandwidth"),
                    detection_s=0.0, repair_h=PFC_STORM_S / HOUR_S,
                    repair_source="assumption: until the PFC watchdog breaks the storm",
                    description="PFC pause-frame storm spreading from a stuck NIC"),
        FailureMode("scale_out", "ecmp_collision", "congestion", None, no_rate, interrupts=False,
                    degraded=Impact(tier_bw=tuple((t, ecmp_factor) for t in beyond_leaf),
                                    note=f"ECMP collisions with one flow per pair: {ecmp_factor:.0%} beyond the leaf"),
                    detection_s=0.0, repair_h=ECMP_EPISODE_S / HOUR_S, repair_source="assumption",
                    description="ECMP hash collisions (flows collapse to one per GPU pair)"),
    ]


# ----------------------------------------------------------------------- telemetry
# RoCE congestion counters of NVIDIA/Mellanox mlx5 NICs: ethtool -S per-priority PFC
# counters (rx_prio<N>_pause, rx_prio<N>_pause_duration in microseconds, mlx5 ethtool
# counters documentation) and RDMA hw_counters (/sys/class/infiniband/<dev>/ports/<port>/
# hw_counters: np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled, out_of_sequence,
# Linux drivers/infiniband/hw/mlx5/counters.c). Exporters prefix them (node_exporter's
# ethtool collector: node_ethtool_<stat>; telegraf infiniband: rdma_...), hence {*}.
_NIC = ("device|interface|ifname",)
ROCE_MAPPINGS = [
    MetricMapping(("{*}rx_prio{prio}_pause_duration",), "roce_port", "paused_fraction", kind="counter",
                  identity=_NIC, detail=("prio",), aggregate="max", scale=1e-6, tier="scale_out",
                  capacity="one_minus",
                  conditions=(Condition("degraded", ">", 0.05,
                                        "paused by the peer more than 5% of the time: PFC pause time is transmit "
                                        "time lost (IEEE 802.1Qbb); twin threshold"),),
                  source="mlx5 ethtool: microseconds the port was paused on priority N"),
    MetricMapping(("{*}rx_prio{prio}_pause", "{*}rx_pause_ctrl_phy"), "roce_port", "pfc_rx_pause_per_s",
                  kind="counter", identity=_NIC, detail=("prio",), tier="scale_out", unit="frames/s",
                  conditions=(Condition("info", ">", 0.0, "PFC pause frames received (the peer is congested)"),),
                  source="mlx5 ethtool: pause frames received per priority / link-level"),
    MetricMapping(("{*}tx_prio{prio}_pause", "{*}tx_pause_ctrl_phy"), "roce_port", "pfc_tx_pause_per_s",
                  kind="counter", identity=_NIC, detail=("prio",), tier="scale_out", unit="frames/s",
                  conditions=(Condition("info", ">", 0.0, "PFC pause frames sent (this port is congested)"),),
                  source="mlx5 ethtool: pause frames sent"),
    MetricMapping(("{*}np_ecn_marked_roce_packets",), "roce_port", "ecn_marked_per_s", kind="counter",
                  identity=_NIC, tier="scale_out", unit="pkt/s",
                  conditions=(Condition("info", ">", 0.0, "ECN-marked RoCE packets received (DCQCN congestion)"),),
                  source="mlx5 hw_counters: CE-marked RoCE packets at the notification point"),
    MetricMapping(("{*}np_cnp_sent",), "roce_port", "cnp_sent_per_s", kind="counter", identity=_NIC,
                  tier="scale_out", unit="pkt/s", source="mlx5 hw_counters: CNPs sent"),
    MetricMapping(("{*}rp_cnp_handled",), "roce_port", "cnp_handled_per_s", kind="counter", identity=_NIC,
                  tier="scale_out", unit="pkt/s",
                  conditions=(Condition("info", ">", 0.0, "CNPs handled: DCQCN is throttling this sender"),),
                  source="mlx5 hw_counters: CNPs handled by the reaction point"),
    MetricMapping(("{*}out_of_sequence", "{*}packet_seq_err"), "roce_port", "out_of_sequence_per_s",
                  kind="counter", identity=_NIC, tier="scale_out", unit="pkt/s",
                  conditions=(Condition("degraded", ">", 1.0,
                                        "out-of-sequence packets on a lossless fabric mean drops and go-back-N "
                                        "retransmission (mlx5 counters documentation); twin threshold 1/s"),),
                  source="mlx5 hw_counters: out_of_sequence / packet_seq_err"),
    MetricMapping(("{*}local_ack_timeout_err",), "roce_port", "ack_timeouts_per_s", kind="counter",
                  identity=_NIC, tier="scale_out", unit="1/s",
                  conditions=(Condition("degraded", ">", 0.0, "RDMA ACK timeouts: packets lost in the fabric"),),
                  source="mlx5 hw_counters: local_ack_timeout_err"),
]


@hookimpl
def twin_metric_mappings() -> list[MetricMapping]:
    """mlx5 RoCE congestion counters (PFC, ECN, CNP, out-of-sequence)."""
    return list(ROCE_MAPPINGS)
