"""Components and failure modes of a fat-tree scale-out fabric (helpers for fabric plugins).

The InfiniBand and RoCE plugins (and third-party fat-tree fabrics) describe their NICs,
switches and cables with these (through ``twin.api``), the way they build their tiers with
``scale_out_tiers`` (``twin.core.fattree``): the inventory is sized by the same fat tree, so
switch counts and spans match the hierarchy the performance model evaluates.

Consequences (what the job sees), from the topology:
- a NIC, its cable to the leaf, or (rail-optimised) a leaf switch: the GPUs behind it lose
  their only path: the job crashes. It can restart on a replacement node, or on the same
  node with the remaining NICs: NCCL maps two GPUs onto one surviving NIC (its
  GPU-to-NIC affinity), so the worst rank gets 1/ceil(g/(n-1)) of a NIC instead of n/g;
- a switch above the leaf or a switch-to-switch cable: routing moves its traffic to the
  remaining uplinks (adaptive routing / ECMP next-hop removal); the transport's
  retransmission budget hides the convergence (NCCL's defaults: NCCL_IB_TIMEOUT=20, i.e.
  4.096 us x 2^20 = 4.3 s per retry, NCCL_IB_RETRY_CNT=7), so the job continues with less
  up-capacity at that switch until the repair.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from twin.core.failures.components import ComponentGroup, FailureMode, Impact, UplinkLoss
from twin.core.failures.failure_rates import DETECTION_CRASH_S, REPAIR_H, REPAIR_SOURCE, llama3_modes, network_rates
from twin.core.fattree import LEVEL_NAMES, FatTree, scale_out_tiers

if TYPE_CHECKING:
    from twin.core.specs import Cluster, Scenario
    from twin.core.topology import Hierarchy

# Stall while routing converges around a failed switch or cable. Modelling assumption:
# well inside the transport retry budget above (subnet-manager re-sweep or ECMP next-hop
# removal take well under a second to seconds).
REROUTE_STALL_S = 1.0


def fat_tree_of(cluster: Cluster, radix: int) -> FatTree:
    """The fat tree (one rail's, for rail-optimised fabrics) the hierarchy is built from."""
    _, tree = scale_out_tiers(cluster, radix, "inventory", (1.0,), 0.0)
    return tree


def nic_share_factor(gpus_per_node: int, nics: int) -> float | None:
    """Scale-out bandwidth the worst GPU keeps when its node loses one of ``nics`` NICs."""
    if nics <= 1:
        return None
    before = nics / gpus_per_node                       # NICs per GPU
    after = 1.0 / math.ceil(gpus_per_node / (nics - 1))  # worst GPU's share of one NIC
    return min(1.0, after / before)


def _scale_out_tiers(hierarchy: Hierarchy) -> range:
    return range(1, len(hierarchy.tiers))


def fat_tree_components(scenario: Scenario, hierarchy: Hierarchy, radix: int, fabric: str) -> list[ComponentGroup]:
    """NICs, switches per tier and cables per tier of ``scenario``'s fat-tree fabric."""
    cluster = scenario.cluster
    so = cluster.scale_out
    assert so is not None
    tree = fat_tree_of(cluster, radix)
    rail = so.topology == "rail_optimized"
    nics = cluster.nics_per_node
    copies = nics if rail else 1
    nodes = cluster.num_nodes
    src = f"{fabric} fat tree sized from radix {radix} (twin.core.fattree; Al-Fares et al. 2008)"
    groups = [
        ComponentGroup("nic", "nic", nodes * nics, fabric, tier=1,
                       attrs={"per_node": nics, "gbps": so.nic_gbps}, source=src),
        ComponentGroup("link.nic-leaf", "link", tree.endpoints * copies, fabric, tier=1,
                       attrs={"lower": "nic", "upper": "leaf", "gbps": so.nic_gbps}, source=src),
    ]
    for i, level in enumerate(tree.levels):
        name = LEVEL_NAMES[i]
        per_switch_up = level.up_links / level.switches if level.switches else 0.0
        pods_above = 1
        if i + 1 < len(tree.levels):
            pods_above = math.ceil(tree.endpoints / tree.levels[i + 1].span_endpoints)
        groups.append(ComponentGroup(
            f"switch.{name}", "switch", level.switches * copies, fabric, tier=i + 1,
            attrs={"level": i, "radix": radix, "uplinks_per_switch": per_switch_up,
                   "downlinks_per_switch": level.down_links / level.switches,
                   "span_gpus": hierarchy.tiers[min(i + 1, len(hierarchy.tiers) - 1)].span_gpus,
                   "oversubscription": level.oversubscription, "rails": copies if rail else 0},
            source=src))
        if level.up_links:
            upper = LEVEL_NAMES[i + 1]
            up_level = tree.levels[i + 1]
            groups.append(ComponentGroup(
                f"link.{name}-{upper}", "link", level.up_links * copies, fabric, tier=i + 2,
                attrs={"lower": name, "upper": upper, "level": i, "uplinks_per_switch": per_switch_up,
                       "upper_switches_per_pod": max(1.0, up_level.switches / pods_above), "gbps": so.nic_gbps},
                source=src))
    return groups


def fat_tree_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy, radix: int,
                           hashed_flows_per_uplink: float = 0.0) -> list[FailureMode]:
    """Failure modes of the fat-tree groups made by :func:`fat_tree_components`.

    ``hashed_flows_per_uplink`` > 0 for ECMP-hashed fabrics (RoCE without spraying): flows
    of a lost uplink re-hash onto the others and collide.
    """
    cluster = scenario.cluster
    so = cluster.scale_out
    assert so is not None
    tree = fat_tree_of(cluster, radix)
    gpn, nics = cluster.gpus_per_node, cluster.nics_per_node
    rail = so.topology == "rail_optimized"
    tiers = _scale_out_tiers(hierarchy)
    share = nic_share_factor(gpn, nics)
    lose_nic = None if share is None else Impact(tier_bw=tuple((t, share) for t in tiers),
                                                 note=f"node runs on {nics - 1} of {nics} NICs")
    per_link, per_switch, net_src = network_rates()
    name = component.name
    repair = REPAIR_H.get(component.kind, 4.0)
    if name == "nic":
        return [FailureMode(name, mode, "down", rate, src, interrupts=True, nodes_lost=1, degraded=lose_nic,
                            detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["nic"], repair_source=REPAIR_SOURCE,
                            description="NIC fails: its GPUs lose the scale-out path")
                for mode, rate, src, _ in llama3_modes("nic")]
    if name == "link.nic-leaf":
        return [FailureMode(name, "down", "down", per_link, net_src, interrupts=True, nodes_lost=1,
                            degraded=lose_nic, detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["link"],
                            repair_source=REPAIR_SOURCE, description="NIC-to-leaf cable or transceiver fails")]
    level = int(component.attrs.get("level", 0))
    if component.kind == "switch" and level == 0:
        per_leaf = tree.levels[0].span_endpoints
        if rail:
            nodes_lost, degraded = per_leaf, lose_nic
            what = f"one rail of {per_leaf} nodes is cut"
        else:
            nodes_lost = max(1, per_leaf // max(1, nics))
            degraded = None if per_leaf >= nics else lose_nic
            what = f"{nodes_lost} node(s) lose their NICs' leaf"
        return [FailureMode(name, "down", "down", per_switch, net_src, interrupts=True, nodes_lost=nodes_lost,
                            degraded=degraded, detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["switch"],
                            repair_source=REPAIR_SOURCE, description=f"leaf switch fails: {what}")]
    if component.kind == "switch":
        below = tree.levels[level - 1]
        up_below = below.up_links / below.switches
        pods = math.ceil(tree.endpoints / tree.levels[level].span_endpoints)
        lost = up_below * min(1.0, pods / tree.levels[level].switches)
        impact = Impact(uplinks=(UplinkLoss(tier=level + 1, uplinks=up_below, lost=max(1.0, lost),
                                            hashed_flows=hashed_flows_per_uplink * up_below),),
                        stall_s=REROUTE_STALL_S,
                        note=_switch_down_note(tree, level, pods, lost, up_below, rail))
        return [FailureMode(name, "down", "down", per_switch, net_src, interrupts=False, degraded=impact,
                            detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["switch"], repair_source=REPAIR_SOURCE,
                            description=f"{LEVEL_NAMES[level]} switch fails: traffic re-routes over the others")]
    if component.kind == "link":
        up = float(component.attrs.get("uplinks_per_switch", 1.0))
        impact = Impact(uplinks=(UplinkLoss(tier=level + 2, uplinks=up, lost=1.0,
                                            hashed_flows=hashed_flows_per_uplink * up),),
                        stall_s=REROUTE_STALL_S, note=f"a {LEVEL_NAMES[level]} loses 1 of {up:g} uplinks")
        return [FailureMode(name, "down", "down", per_link, net_src, interrupts=False, degraded=impact,
                            detection_s=DETECTION_CRASH_S, repair_h=repair, repair_source=REPAIR_SOURCE,
                            description="switch-to-switch cable or transceiver fails: re-routed")]
    return []


def _switch_down_note(tree: FatTree, level: int, pods: int, lost: float, up_below: float, rail: bool) -> str:
    """What one switch of ``level`` down means, read the way the fabric is built: the count is of one
    tree (a rail-optimised fabric has a tree per rail, so "one of 16 spines" is one of a rail's 2).
    """
    upper, lower = LEVEL_NAMES[level], LEVEL_NAMES[level - 1]
    per_tree = tree.levels[level].switches
    under = max(1, math.ceil(tree.levels[level - 1].switches / max(1, pods)))
    tree_of = "its rail's tree" if rail else ("its pod" if pods > 1 else "the fabric")
    left = max(0.0, 1.0 - max(1.0, lost) / up_below) if up_below > 0 else 0.0
    lowers = "leaves" if lower == "leaf" else f"{lower}s"
    return (f"one {upper} down of the {per_tree} in {tree_of}: each of the {under} {lowers} under it loses "
            f"{max(1.0, lost):g} of its {up_below:g} uplinks ({left:.0%} of its up-capacity left)")


def link_degraded_impact(component: ComponentGroup, hierarchy: Hierarchy, factor: float,
                         adaptive: bool, hashed_flows_per_uplink: float = 0.0) -> Impact:
    """A scale-out link running at ``factor`` of its rate (fewer lanes, lower speed, retransmits).

    An endpoint (NIC-to-leaf) link is its GPUs' only path: the worst rank's scale-out
    bandwidth drops to ``factor``. A switch-to-switch link under adaptive routing loses
    ``1 - factor`` of its capacity to the re-balanced traffic; under ECMP hashing it stays
    in the group and the flows hashed onto it run at its speed (the ring's worst link).
    """
    if component.name == "link.nic-leaf" or component.attrs.get("lower") == "nic":
        return Impact(tier_bw=tuple((t, factor) for t in _scale_out_tiers(hierarchy)),
                      note=f"one NIC link at {factor:.0%} of its rate")
    level = int(component.attrs.get("level", 0))
    up = float(component.attrs.get("uplinks_per_switch", 1.0))
    if adaptive:
        loss = UplinkLoss(tier=level + 2, uplinks=up, lost=1.0 - factor)
    else:
        loss = UplinkLoss(tier=level + 2, uplinks=up, lost=0.0, hashed_flows=hashed_flows_per_uplink * up,
                          worst_link=factor)
    return Impact(uplinks=(loss,), note=f"one of {up:g} uplinks at {factor:.0%} of its rate")


def go_back_n_efficiency(ber: float, packet_bytes: float, window_packets: float) -> float:
    """Goodput fraction of a go-back-N transport at a post-FEC bit-error rate.

    Packet error rate p = 1 - (1 - BER)^(8 x bytes); go-back-N efficiency
    (1 - p) / (1 + (W - 1) p) for a window of W packets in flight (Bertsekas & Gallager,
    "Data Networks", §2.4 ARQ). InfiniBand and RoCE reliable connections retransmit
    go-back-N from the lost packet sequence number (IBTA spec, RC transport).
    """
    if ber <= 0:
        return 1.0
    p = 1.0 - (1.0 - ber) ** (8.0 * packet_bytes)
    return max(0.0, (1.0 - p) / (1.0 + (max(1.0, window_packets) - 1.0) * p))
