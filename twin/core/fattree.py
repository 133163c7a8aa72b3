"""Folded-Clos (fat-tree) sizing from switch radix: tiers, spans, switches and links.

Standard results (Al-Fares et al., SIGCOMM 2008, "A Scalable, Commodity Data Center
Network Architecture"; Leiserson 1985): with radix-R switches a non-blocking tree
connects R endpoints in one tier, R^2/2 in two tiers and R^3/4 in three (R^(t)/2^(t-1)).
A leaf with down:up oversubscription o uses R*o/(1+o) ports down and R/(1+o) up.

Rail-optimised designs (NVIDIA DGX SuperPOD reference architecture) build one such tree
per NIC rail; the leaf of rail r joins the r-th NIC of every node in its group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twin.core.errors import SpecError
from twin.core.nic import hop_latency_s as hop_latency_s_of
from twin.core.units import gbps_to_bytes_per_s

if TYPE_CHECKING:
    from twin.core.specs import Cluster
    from twin.core.topology import Tier

# Names of the switch tiers, leaf first (the hierarchy's tiers 1.. and the failure
# inventory's ``switch.<name>`` groups use the same names).
LEVEL_NAMES = ("leaf", "spine", "core", "super-core", "tier5", "tier6")


@dataclass(frozen=True, slots=True)
class FatTreeLevel:
    """One switch tier: how many switches, endpoints under one switch, link counts."""

    switches: int
    span_endpoints: int
    down_links: int
    up_links: int
    oversubscription: float


@dataclass(frozen=True, slots=True)
class FatTree:
    """A fat tree (per rail for rail-optimised fabrics)."""

    radix: int
    levels: tuple[FatTreeLevel, ...]
    endpoints: int

    @property
    def tiers(self) -> int:
        """Number of switch tiers."""
        return len(self.levels)

    @property
    def switches(self) -> int:
        """Switches in all tiers."""
        return sum(lv.switches for lv in self.levels)

    @property
    def links(self) -> int:
        """Cables: endpoint links plus switch-to-switch links."""
        return self.endpoints + sum(lv.up_links for lv in self.levels)


def tiers_needed(endpoints: int, radix: int) -> int:
    """Fewest tiers of a non-blocking tree of radix ``radix`` that reach ``endpoints``."""
    t = 1
    while radix ** t / 2 ** (t - 1) < endpoints and t < 6:
        t += 1
    return t


def build_fat_tree(endpoints: int, radix: int, tiers: int | None = None,
                   oversubscription: tuple[float, ...] = (), spans: tuple[int, ...] = ()) -> FatTree:
    """Size a fat tree for ``endpoints`` NIC ports.

    ``oversubscription[i]`` is the down:up ratio of tier ``i+1``'s uplinks (leaf first).
    ``spans`` (optional) forces the endpoints under one switch of each tier.
    """
    endpoints = max(1, endpoints)
    t = tiers or tiers_needed(endpoints, radix)
    if not tiers and spans:
        # A stated span below the whole fabric needs a tier above it (a 16-GPU leaf on 256 GPUs
        # is under a spine however large the radix).
        t = max(t, max((i + 2 for i, s in enumerate(spans) if s < endpoints), default=t))
    levels: list[FatTreeLevel] = []
    for i in range(t):
        o = oversubscription[i] if i < len(oversubscription) else 1.0
        top = i == t - 1
        if top:
            span = endpoints
        elif spans and i < len(spans):
            span = min(spans[i], endpoints)
        elif i == 0:
            span = min(endpoints, max(1, int(radix * o / (1 + o))))
        else:
            span = min(endpoints, levels[-1].span_endpoints * max(1, radix // 2))
        down = endpoints if i == 0 else levels[-1].up_links
        if i == 0:
            n_sw = math.ceil(endpoints / span)
        else:  # enough switches to terminate every uplink of the tier below
            ports_down = radix if top else radix / 2
            n_sw = max(math.ceil(endpoints / span), math.ceil(down / ports_down))
        up = 0 if top else math.ceil(down / o)
        levels.append(FatTreeLevel(switches=n_sw, span_endpoints=span, down_links=down, up_links=up,
                                   oversubscription=o))
    return FatTree(radix=radix, levels=tuple(levels), endpoints=endpoints)


def check_oversubscription(oversubscription: tuple[float, ...], tiers: int, radix: int, gpus: int,
                           path: str = "cluster.scale_out.oversubscription") -> None:
    """Refuse a taper the tree has no links for: entry ``i`` is the down:up ratio of tier
    ``i+1``'s uplinks, so a tree of ``tiers`` tiers uses the first ``tiers - 1`` entries (the
    top tier has no uplinks). A further entry other than 1 would be accepted and ignored, so it
    is an error naming how to build the tier it describes (``tiers`` or ``tier_spans``).
    """
    extra = [(i, o) for i, o in enumerate(oversubscription) if i >= tiers - 1 and o != 1.0]
    if extra:
        i, o = extra[0]
        raise SpecError(f"{path}[{i}]",
                        f"tapers the uplinks of tier {i + 1}, but the fabric for {gpus} GPUs has {tiers} tier(s) "
                        f"(radix {radix}), whose top has no uplinks; state scale_out.tiers or tier_spans to build "
                        f"the tier above, or drop the entry (got {o:g})")


def scale_out_tiers(cluster: Cluster, radix: int, fabric: str, efficiency: list[float] | tuple[float, ...],
                    hop_latency_s: float, reduction: str = "") -> tuple[list[Tier], FatTree]:
    """Tiers 1.. of a fat-tree scale-out fabric for ``cluster`` (helper for fabric plugins).

    ``efficiency[i]`` is the achievable fraction of NIC bandwidth for traffic that reaches
    tier ``i+1`` (NIC efficiency times routing/congestion losses; the last entry repeats).
    Spans convert NIC endpoints to GPUs: a rail-optimised leaf joins one NIC of each of its
    nodes, a plain fat-tree leaf joins every NIC of fewer nodes.
    """
    from twin.core.topology import Tier

    so = cluster.scale_out
    assert so is not None
    nics = cluster.nics_per_node
    nodes = cluster.num_nodes
    rail = so.topology == "rail_optimized"
    endpoints = nodes if rail else nodes * nics
    gpn = cluster.gpus_per_node
    if so.tier_spans:  # stated in GPUs; convert to NIC endpoints under one switch
        spans = tuple(max(1, s // gpn if rail else s * nics // gpn) for s in so.tier_spans)
    elif so.gpus_per_leaf:
        per = so.gpus_per_leaf // gpn if rail else so.gpus_per_leaf * nics // gpn
        spans = (max(1, per),)
    else:
        spans = ()
    tree = build_fat_tree(endpoints, radix, so.tiers, so.oversubscription, spans)
    check_oversubscription(so.oversubscription, tree.tiers, radix, cluster.num_gpus)
    hop_latency_s = hop_latency_s_of(cluster, hop_latency_s)
    nic_Bps = gbps_to_bytes_per_s(so.nic_gbps)
    per_gpu = nic_Bps * nics / gpn
    tiers: list[Tier] = []
    cum_over = 1.0
    for i, level in enumerate(tree.levels):
        if i > 0:
            cum_over *= tree.levels[i - 1].oversubscription
        eff = efficiency[min(i, len(efficiency) - 1)]
        span_gpus = level.span_endpoints * gpn if rail else level.span_endpoints * gpn // nics
        tiers.append(Tier(name=LEVEL_NAMES[i], fabric=fabric, span_gpus=max(span_gpus, gpn),
                          bw_Bps=per_gpu * eff, latency_s=hop_latency_s * (2 * i + 1),
                          oversubscription=cum_over, reduction=reduction))
    # The top tier always reaches the whole cluster.
    last = tiers[-1]
    if last.span_gpus < cluster.num_gpus:
        tiers[-1] = Tier(name=last.name, fabric=last.fabric, span_gpus=cluster.num_gpus, bw_Bps=last.bw_Bps,
                         latency_s=last.latency_s, oversubscription=last.oversubscription, reduction=last.reduction)
    return tiers, tree


def fat_tree_report(cluster: Cluster, radix: int, kind: str) -> dict[str, Any]:
    """Switches, links and tiers of ``cluster``'s fat-tree fabric (per rail, summed over rails).

    Plain data for a fabric's ``report`` (and for the optics model, which prices every
    link): ``switches``/``links`` count all rails, ``switch_to_switch_links`` the links
    above the NICs, ``switches_per_tier`` leaf first.
    """
    so = cluster.scale_out
    assert so is not None
    rail = so.topology == "rail_optimized"
    nodes = cluster.num_nodes
    nics = cluster.nics_per_node
    tree = build_fat_tree(nodes if rail else nodes * nics, radix, so.tiers, so.oversubscription)
    copies = nics if rail else 1
    return {"kind": kind, "topology": so.topology, "tiers": tree.tiers, "switch_radix": radix,
            "switches": tree.switches * copies, "links": tree.links * copies, "nics": nodes * nics,
            "switch_to_switch_links": (tree.links - tree.endpoints) * copies,
            "switches_per_tier": [lv.switches * copies for lv in tree.levels]}
