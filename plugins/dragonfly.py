"""Dragonfly scale-out fabric (Kim, Dally, Scott, Abts, ISCA 2008, "Technology-Driven,
Highly-Scalable Dragonfly Topology"; HPE Slingshot, Cray Cascade).

Routers of radix k = p + (a - 1) + h: p NIC ports, a - 1 local links (all-to-all inside
a group of a routers) and h global links to other groups. A group holds a x p NICs and
has a x h global links, so at most g = a h + 1 groups, one global link between each pair
(Kim et al. §3.1). Defaults (``params`` absent): the balanced design a = 2p = 2h, which
loads local and global channels evenly under uniform traffic (§3.1), with the largest h
the router radix allows: h = (k + 1) // 4. (Slingshot's 64-port Rosetta: p = 16, 31 local
links in a 32-router group, 17 global; De Sensi et al., SC20.)

Tiers (bandwidth per GPU per direction, NIC rate x ``nic_efficiency``):
- ``router``: the p NICs of one router, one hop.
- ``group``: one group; down:up ratio p / (a - 1) of a router's NIC ports to its local links.
- ``global``: the machine; down:up ratio p / h of a group's NIC ports to its global links
  (on top of the group's), and the routing factor (``params.routing``) on the bandwidth:
  ``minimal`` takes one global hop (local-global-local); ``valiant`` sends every packet
  through a random intermediate group, two global hops, halving the global bandwidth a
  packet gets (50% throughput under uniform traffic, §4.1); ``ugal`` picks per packet the
  minimal or a Valiant path by queue occupancy, so on benign (uniform-like) traffic, which
  the tiers assume as the fat-tree tiers do, it runs as minimal (§4.2), while protecting
  against adversarial patterns the tier model does not express.

Switch latency ~350 ns per Rosetta hop (De Sensi et al., SC20, "An In-Depth Analysis of
the Slingshot Interconnect"): 1 hop in a router, 2 in a group, 3 minimal and 5 Valiant
(local-global-local-global-local) across groups; a collective's network step pays it
where it exceeds NCCL's own per-step network latency (rarely: NCCL's floor is 2.7-14 us).
"""

from __future__ import annotations

import math
from typing import Any

from twin.api import (
    DETECTION_CRASH_S,
    REPAIR_H,
    REPAIR_SOURCE,
    REROUTE_STALL_S,
    Cluster,
    ComponentGroup,
    FailureMode,
    Hierarchy,
    Impact,
    ScaleOutFabric,
    Scenario,
    SpecError,
    Tier,
    check_scale_out_params,
    fat_tree_failure_modes,
    gbps_to_bytes_per_s,
    hookimpl,
    hop_latency_s,
    network_rates,
    nic_efficiency,
    nic_share_factor,
    read_param,
    reject_scale_out_fields,
)

PARAMS = {"routers_per_group", "nics_per_router", "global_links_per_router", "routing"}
# Global bandwidth a packet gets per routing (module docstring, Kim et al. 2008 §4).
ROUTING_GLOBAL_FACTOR = {"minimal": 1.0, "ugal": 1.0, "valiant": 0.5}
ROUTING_GLOBAL_HOPS = {"minimal": 3, "ugal": 3, "valiant": 5}
HOP_LATENCY_S = 0.35e-6            # De Sensi et al., SC20 (Rosetta)
NOT_MODELLED = {
    "tiers": "a dragonfly has three tiers: router, group, global",
    "oversubscription": "the dragonfly's tapers follow from params (nics_per_router over local and global links)",
    "tier_spans": "tier spans follow from params (nics_per_router, routers_per_group)",
    "gpus_per_leaf": "set params.nics_per_router",
    "sharp": "in-network reduction is not modelled for dragonfly",
    "adaptive_routing": "set params.routing (minimal, valiant or ugal)",
}


def _global_links(s: dict[str, int]) -> int:
    """Global links of a dragonfly of shape ``s``: each router's h, two ends a link (none in one group)."""
    return s["groups"] * s["a"] * s["h"] // 2 if s["groups"] > 1 else 0


def shape(cluster: Cluster, path: str = "cluster", radix: int | None = None) -> dict[str, int]:
    """p, a, h, the groups g and the NICs of ``cluster``'s dragonfly (checked); ``radix``: the
    router radix the optics force (co-packaged optics), else the fabric's own.
    """
    so = cluster.scale_out
    assert so is not None
    base = f"{path}.scale_out.params"
    h0 = max(1, ((radix or so.switch_radix) + 1) // 4)
    h = read_param(so.params, f"{base}.global_links_per_router", h0, integer=True, minimum=1)
    p = read_param(so.params, f"{base}.nics_per_router", h, integer=True, minimum=1)
    a = read_param(so.params, f"{base}.routers_per_group", 2 * p, integer=True, minimum=1)
    nics = cluster.num_nodes * cluster.nics_per_node
    return {"p": p, "a": a, "h": h, "nics": nics, "groups": max(1, math.ceil(nics / (a * p)))}


def _routing(cluster: Cluster, path: str = "cluster") -> str:
    so = cluster.scale_out
    assert so is not None
    return str(read_param(so.params, f"{path}.scale_out.params.routing", "minimal",
                          choices=tuple(ROUTING_GLOBAL_FACTOR)))


class DragonflyFabric(ScaleOutFabric):
    """Dragonfly: routers, all-to-all groups, global links; minimal, Valiant or UGAL routing."""

    kind = "dragonfly"
    summary = "Dragonfly (Kim et al. 2008; Slingshot): router, group and global tiers, minimal/Valiant/UGAL routing"

    def validate(self, cluster: Cluster, path: str) -> None:
        """Known parameters; the router radix holds p + (a - 1) + h ports; g <= a h + 1 groups."""
        check_scale_out_params(cluster, path, PARAMS, self.kind)
        reject_scale_out_fields(cluster, path, self.kind, NOT_MODELLED)
        _routing(cluster, path)
        s = shape(cluster, path)
        so = cluster.scale_out
        assert so is not None
        ports = s["p"] + s["a"] - 1 + s["h"]
        if ports > so.switch_radix:
            raise SpecError(f"{path}.scale_out.switch_radix",
                            f"a dragonfly router needs nics_per_router + routers_per_group - 1 + "
                            f"global_links_per_router = {ports} ports (got radix {so.switch_radix})")
        if s["groups"] > s["a"] * s["h"] + 1:
            raise SpecError(f"{path}.scale_out.params.global_links_per_router",
                            f"{s['groups']} groups of {s['a'] * s['p']} NICs need more global links: a group's "
                            f"a x h = {s['a'] * s['h']} links reach at most {s['a'] * s['h'] + 1} groups")

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        """Router, group and global tiers (module docstring)."""
        so = cluster.scale_out
        assert so is not None
        s = shape(cluster, radix=radix)
        routing = _routing(cluster)
        gpn, nics = cluster.gpus_per_node, cluster.nics_per_node
        per_gpu = gbps_to_bytes_per_s(so.nic_gbps) * nics / gpn * nic_efficiency(cluster)
        local = max(1.0, s["p"] / max(1, s["a"] - 1))
        every = max(cluster.num_gpus, gpn)

        def span(endpoints: int) -> int:
            return min(every, max(gpn, endpoints * gpn // nics))

        hop = hop_latency_s(cluster, HOP_LATENCY_S)  # scale_out.latency_us where stated
        tiers = [Tier("router", self.kind, span(s["p"]), per_gpu, hop),
                 Tier("group", self.kind, span(s["a"] * s["p"]), per_gpu, 2 * hop, oversubscription=local)]
        if s["groups"] > 1:
            tiers.append(Tier("global", self.kind, every, per_gpu * ROUTING_GLOBAL_FACTOR[routing],
                              ROUTING_GLOBAL_HOPS[routing] * hop,
                              oversubscription=local * max(1.0, s["p"] / s["h"])))
        tiers[-1] = Tier(tiers[-1].name, self.kind, every, tiers[-1].bw_Bps, tiers[-1].latency_s,
                         oversubscription=tiers[-1].oversubscription)
        return tiers

    def optical_links(self, cluster: Cluster) -> int | None:
        """The global links: the dragonfly's long channels run over optics, its short local
        and NIC channels over electrical cables inside a group's cabinets (Kim et al. 2008 §2,
        the design's premise; Slingshot: copper inside a group, optical global links, De Sensi
        et al. SC20 §II).
        """
        return _global_links(shape(cluster))

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """The dragonfly's shape and routing."""
        s = shape(cluster)
        return {"kind": self.kind, "routing": _routing(cluster), "nics_per_router": s["p"],
                "routers_per_group": s["a"], "global_links_per_router": s["h"], "groups": s["groups"],
                "max_groups": s["a"] * s["h"] + 1, "routers": s["groups"] * s["a"],
                "switches_per_tier": [s["groups"] * s["a"]],  # one tier of routers (for the energy model)
                "global_links": _global_links(s)}


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register the dragonfly fabric."""
    return [DragonflyFabric()]


# ------------------------------------------------------------------ failure scenarios
@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """NICs, NIC cables, routers, local and global links (the router is the dragonfly's leaf)."""
    cluster = scenario.cluster
    so = cluster.scale_out
    if so is None or so.fabric != DragonflyFabric.kind:
        return None
    s = shape(cluster, radix=switch_radix)
    g, a = s["groups"], s["a"]
    src = f"dragonfly of {g} group(s) x {a} routers (plugins/dragonfly.py; Kim et al. 2008)"
    kind = DragonflyFabric.kind
    groups = [ComponentGroup("nic", "nic", s["nics"], kind, tier=1,
                             attrs={"per_node": cluster.nics_per_node, "gbps": so.nic_gbps}, source=src),
              ComponentGroup("link.nic-leaf", "link", s["nics"], kind, tier=1,
                             attrs={"lower": "nic", "upper": "router", "gbps": so.nic_gbps, "medium": "electrical"},
                             source=src),
              ComponentGroup("switch.router", "switch", g * a, kind, tier=1,
                             attrs={"nics_per_router": s["p"], "radix": switch_radix or so.switch_radix},
                             source=src)]
    if a > 1:
        groups.append(ComponentGroup("link.local", "link", g * a * (a - 1) // 2, kind, tier=2,
                                     attrs={"per_router": a - 1, "gbps": so.nic_gbps, "medium": "electrical"},
                                     source=src))
    if g > 1:
        groups.append(ComponentGroup("link.global", "link", _global_links(s), kind, tier=3,
                                     attrs={"per_group": a * s["h"], "gbps": so.nic_gbps, "medium": "optical"},
                                     source=src))
    return groups


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """NIC and NIC-cable failures as on a fat tree; routers crash their nodes; links re-route.

    A router takes its p NICs with it: their nodes cannot run the plan (crash). A local
    or global link failing re-routes its traffic over the others (non-minimal paths through
    another router or group, as Valiant's), costing that share of the tier's links: local
    (a - 2)/(a - 1) of a router's local capacity, global (a h - 1)/(a h) of a group's.
    Rates: the per-switch and per-link rates of the Llama 3 fabric (no published Slingshot
    figure in validation/reference).
    """
    cluster = scenario.cluster
    so = cluster.scale_out
    if so is None or component.fabric != DragonflyFabric.kind or so.fabric != DragonflyFabric.kind:
        return None
    if component.name in ("nic", "link.nic-leaf"):
        return fat_tree_failure_modes(component, scenario, hierarchy, so.switch_radix)
    s = shape(cluster, radix=switch_radix)
    per_link, per_switch, src = network_rates()
    top = len(hierarchy.tiers) - 1
    if component.name == "switch.router":
        nics = cluster.nics_per_node
        share = nic_share_factor(cluster.gpus_per_node, nics)
        lost = max(1, s["p"] // max(1, nics))
        degraded = None if s["p"] >= nics or share is None else Impact(
            tier_bw=tuple((t, share) for t in range(1, top + 1)), note=f"node runs on {nics - 1} of {nics} NICs")
        return [FailureMode(component.name, "down", "down", per_switch, src, interrupts=True, nodes_lost=lost,
                            degraded=degraded, detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["switch"],
                            repair_source=REPAIR_SOURCE,
                            description=f"router fails: its {s['p']} NICs lose their path")]
    if component.name == "link.local":
        keep, tiers = (s["a"] - 2) / max(1, s["a"] - 1), range(2, top + 1)
    elif component.name == "link.global":
        keep, tiers = (s["a"] * s["h"] - 1) / (s["a"] * s["h"]), range(3, top + 1)
    else:
        return None
    impact = Impact(tier_bw=tuple((t, keep) for t in tiers), stall_s=REROUTE_STALL_S,
                    note=f"{component.name} lost: {keep:.0%} of its tier's links left, traffic re-routed")
    return [FailureMode(component.name, "down", "down", per_link, src, interrupts=False, degraded=impact,
                        detection_s=DETECTION_CRASH_S, repair_h=REPAIR_H["link"], repair_source=REPAIR_SOURCE,
                        description=f"{component.name.split('.')[1]} link fails: re-routed non-minimally")]
