"""How the network differs from the scenario's design for one evaluation: an input, not a model.

The step model evaluates a scenario on its cluster as designed. The same scenario on a changed
network is the same evaluation with :class:`Conditions`:

- ``impact``: failed or degraded parts (an :class:`Impact`: tier bandwidth factors, switch
  uplinks lost, in-switch reduction gone, a slower GPU or HBM, a smaller memory pool), with
  ``spare_uplinks`` that absorb uplink losses (``twin.core.failures`` derives impacts from
  failure modes);
- ``capacity``: other jobs' traffic, as the capacity this job gets per link class relative to
  its GPUs' own share (``twin.core.fleet_shares``; above 1: idle neighbours' links it may use);
- ``calibration``: another calibration than the scenario's (live telemetry's fitted and live
  factors).

The driver (``twin.core.run.driver``) applies them in one place: the hierarchy it evaluates on
is the designed one, degraded (:func:`degrade_hierarchy`), seen with the capacity shares; the
devices are the slowest GPU's (:func:`degrade_scenario`). Strategy selection never changes.

Interconnect failures become a degraded tier hierarchy (bandwidth factors, or
oversubscription raised by the uplinks lost at a switch: traffic re-routes over the remaining
uplinks, so a switch that lost 1 of 4 uplinks offers 3/4 of its up-capacity to the traffic
that crosses it). The collective model then slows exactly the collectives whose groups cross
the degraded tier, by the worst link of their ring or tree, and the synchronous step waits for
them (every rank waits for the slowest at the next collective).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from twin.core.specs import Calibration, Cluster, Scenario
from twin.core.topology import Hierarchy, Tier


def ecmp_max_load(flows: float, links: float) -> float:
    """Expected flows on the busiest of ``links`` links when ``flows`` flows hash onto them.

    Balls into bins (Raab & Steger 1998, "Balls into bins — a simple and tight
    analysis"): the fullest of U bins holding c balls on average carries about
    c + sqrt(2 c ln U); the RoCE plugin's ECMP efficiency is c over that.
    """
    if links <= 1:
        return flows
    c = flows / links
    return c + math.sqrt(2.0 * c * math.log(links))


@dataclass(frozen=True, slots=True)
class UplinkLoss:
    """Uplinks of one switch that no longer carry (all of) their share of traffic.

    ``tier``: the first hierarchy tier whose traffic crosses these links (a leaf's uplinks
    carry traffic that reaches tier 2, the spine). ``uplinks``: uplinks of that switch.
    ``lost``: links lost; a degraded link under adaptive routing counts as the fraction of
    its capacity lost.

    Adaptive routing spreads traffic over what is left: the switch offers
    ``capacity_fraction`` of its up-capacity, i.e. its oversubscription rises by the
    inverse. Static ECMP hashing (``hashed_flows`` > 0 flows over these uplinks) instead
    re-hashes the lost links' flows onto the others: the busiest link carries more flows
    and every flow on it slows by the ratio of busiest-link loads (``hash_factor``); a
    degraded link that stays in the hashed group (``worst_link`` < 1) slows the flows
    hashed onto it to its speed, and a collective runs at its slowest flow.
    """

    tier: int
    uplinks: float
    lost: float
    hashed_flows: float = 0.0
    worst_link: float = 1.0

    def capacity_fraction(self, spare_uplinks: float = 0.0) -> float:
        """Fraction of the switch's nominal up-capacity still available (spares absorb losses)."""
        if self.uplinks <= 0:
            return 1.0
        left = self.uplinks + spare_uplinks - self.lost
        return max(0.0, min(1.0, left / self.uplinks))

    @property
    def hashed(self) -> bool:
        """Whether flows are pinned to links by ECMP hashing (no adaptive re-balancing)."""
        return self.hashed_flows > 0 or self.worst_link < 1.0

    def hash_factor(self, spare_uplinks: float = 0.0) -> float:
        """Bandwidth kept by the slowest hashed flow (1.0 when nothing is hashed).

        ``spare_uplinks`` extra links in the group absorb losses; the nominal tier
        bandwidth already carries the busiest-link loss of ``uplinks`` links, so a better
        spread than nominal is not a gain here (capped at 1).
        """
        if not self.hashed:
            return 1.0
        factor = self.worst_link
        if self.hashed_flows > 0 and self.lost > 0:
            left = max(1.0, self.uplinks + spare_uplinks - self.lost)
            factor *= ecmp_max_load(self.hashed_flows, self.uplinks) / ecmp_max_load(self.hashed_flows, left)
        return min(1.0, factor)


@dataclass(frozen=True, slots=True)
class Impact:
    """What the slowest rank sees while a failure lasts. Factors multiply; 1.0 = unchanged.

    ``tier_bw``: (hierarchy tier index, bandwidth factor) pairs; ``uplinks``: switch
    uplink losses (re-routed over the remaining uplinks); ``compute``/``hbm``: peak
    compute and HBM bandwidth of the slowest GPU; ``pool``: bandwidth and capacity of the
    memory pool of the affected node; ``nvls``: in-switch reduction still available;
    ``stall_s``: a one-off pause (routing convergence, a congestion watchdog).
    """

    tier_bw: tuple[tuple[int, float], ...] = ()
    uplinks: tuple[UplinkLoss, ...] = ()
    compute: float = 1.0
    hbm: float = 1.0
    pool: float = 1.0
    nvls: bool = True
    stall_s: float = 0.0
    note: str = ""

    @property
    def is_identity(self) -> bool:
        """Whether this impact changes nothing."""
        return (not self.uplinks and all(f == 1.0 for _, f in self.tier_bw) and self.compute == 1.0
                and self.hbm == 1.0 and self.pool == 1.0 and self.nvls and self.stall_s == 0.0)

    def combine(self, other: Impact) -> Impact:
        """Both at once, placed where they hurt most.

        Per-rank factors (a tier's bandwidth, compute, HBM, pool) take the worse of the
        two: the slowest rank paces the step, and two failures of the very same rank are
        rare. Uplink losses add up (both at the same switch); stalls add up.
        """
        bw: dict[int, float] = {}
        for tier, factor in self.tier_bw + other.tier_bw:
            bw[tier] = min(bw.get(tier, 1.0), factor)
        return Impact(tier_bw=tuple(sorted(bw.items())), uplinks=self.uplinks + other.uplinks,
                      compute=min(self.compute, other.compute), hbm=min(self.hbm, other.hbm),
                      pool=min(self.pool, other.pool), nvls=self.nvls and other.nvls,
                      stall_s=self.stall_s + other.stall_s,
                      note="; ".join(n for n in (self.note, other.note) if n))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"tier_bw": [list(t) for t in self.tier_bw],
                "uplinks": [{"tier": u.tier, "uplinks": u.uplinks, "lost": u.lost, "hashed_flows": u.hashed_flows,
                             "worst_link": u.worst_link} for u in self.uplinks],
                "compute": self.compute, "hbm": self.hbm, "pool": self.pool, "nvls": self.nvls,
                "stall_s": self.stall_s, "note": self.note}


def degrade_hierarchy(h: Hierarchy, impact: Impact, spare_uplinks: float = 0.0) -> Hierarchy:
    """``h`` with ``impact`` applied (see the module docstring)."""
    if impact.is_identity:
        return h
    tiers: list[Tier] = list(h.tiers)
    for index, factor in impact.tier_bw:
        if 0 <= index < len(tiers) and factor != 1.0:
            t = tiers[index]
            tiers[index] = dataclasses.replace(t, bw_Bps=t.bw_Bps * factor, nvls_bw_Bps=t.nvls_bw_Bps * factor,
                                               a2a_bw_Bps=t.a2a_bw_Bps * factor)
    for loss in impact.uplinks:
        if loss.hashed:  # flows pinned by ECMP: the busiest (or slow) link paces them
            over, bw = 1.0, loss.hash_factor(spare_uplinks)
        else:  # adaptive routing: less up-capacity for the traffic that crosses
            over, bw = 1.0 / max(1e-3, loss.capacity_fraction(spare_uplinks)), 1.0
        for j in range(max(1, loss.tier), len(tiers)):
            t = tiers[j]
            tiers[j] = dataclasses.replace(t, oversubscription=t.oversubscription * over, bw_Bps=t.bw_Bps * bw)
    if not impact.nvls and tiers[0].reduction == "nvls":
        tiers[0] = dataclasses.replace(tiers[0], reduction="", nvls_bw_Bps=0.0)
    note = f"degraded: {impact.note}" if impact.note else "degraded"
    return Hierarchy(tiers=tuple(tiers), gpus_per_node=h.gpus_per_node, nic_share=h.nic_share,
                     notes=(*h.notes, note), ring_plateau=h.ring_plateau, ll_max_bw=h.ll_max_bw,
                     nvls_channels=h.nvls_channels, nvls_channels_multi=h.nvls_channels_multi,
                     collnet_direct_bw=h.collnet_direct_bw, net_overhead_us=h.net_overhead_us,
                     ll_max_bw_two_nodes=h.ll_max_bw_two_nodes, ll_max_bw_more_nodes=h.ll_max_bw_more_nodes,
                     p2p_channels=h.p2p_channels, p2p_peer_channels=h.p2p_peer_channels,
                     p2p_channel_bw=h.p2p_channel_bw)


def degrade_cluster(cluster: Cluster, impact: Impact) -> Cluster:
    """``cluster`` with the slowest GPU's compute/HBM and the memory pool scaled by ``impact``.

    One slow GPU slows its pipeline stage for every micro-batch; the step model prices the
    whole job at its pace (synchronous training waits for the slowest rank).
    """
    gpu = cluster.gpu
    if impact.compute != 1.0:
        gpu = dataclasses.replace(gpu, peak_tflops={k: v * impact.compute for k, v in gpu.peak_tflops.items()})
    if impact.hbm != 1.0:
        gpu = dataclasses.replace(gpu, hbm_TBps=gpu.hbm_TBps * impact.hbm)
    pool = cluster.memory_pool
    if pool is not None and impact.pool != 1.0:
        devices = max(1, round(pool.devices_per_node * impact.pool))
        pool = dataclasses.replace(pool, capacity_gib_per_node=pool.capacity_gib_per_node * impact.pool,
                                   bandwidth_GBps_per_node=pool.bandwidth_GBps_per_node * impact.pool,
                                   devices_per_node=devices)
    if gpu is cluster.gpu and pool is cluster.memory_pool:
        return cluster
    return dataclasses.replace(cluster, gpu=gpu, memory_pool=pool)


def degrade_scenario(scn: Scenario, impact: Impact) -> Scenario:
    """``scn`` on its cluster degraded by ``impact`` (:func:`degrade_cluster`)."""
    cluster = degrade_cluster(scn.cluster, impact)
    return scn if cluster is scn.cluster else dataclasses.replace(scn, cluster=cluster)


@dataclass(frozen=True, slots=True)
class Conditions:
    """How the network differs from the scenario's design for one evaluation (module docstring).

    ``network``, ``devices`` and ``shared`` say which parts differ (the hierarchy, the
    devices, the job's share of some link class); ``key`` is the network's part as a value
    (None when the hierarchy is the designed one), for what the driver remembers.
    """

    impact: Impact | None = None
    spare_uplinks: float = 0.0
    capacity: tuple[float, ...] = ()
    calibration: Calibration | None = None
    network: bool = field(init=False, default=False)
    devices: bool = field(init=False, default=False)
    shared: bool = field(init=False, default=False)
    key: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        i = self.impact
        network = i is not None and bool(i.tier_bw or i.uplinks or not i.nvls)
        object.__setattr__(self, "capacity", tuple(float(c) for c in self.capacity))
        object.__setattr__(self, "network", network)
        object.__setattr__(self, "devices", i is not None and (i.compute != 1.0 or i.hbm != 1.0 or i.pool != 1.0))
        object.__setattr__(self, "shared", any(c != 1.0 for c in self.capacity))
        object.__setattr__(self, "key", (i, self.spare_uplinks) if network else None)

    def scenario(self, scn: Scenario) -> Scenario:
        """``scn`` with this calibration and these devices."""
        if self.calibration is not None and self.calibration != scn.calibration:
            scn = dataclasses.replace(scn, calibration=self.calibration)
        return degrade_scenario(scn, self.impact) if self.devices else scn  # type: ignore[arg-type]

    def hierarchy(self, h: Hierarchy) -> Hierarchy:
        """The designed hierarchy ``h`` degraded by this impact (without the capacity shares)."""
        return degrade_hierarchy(h, self.impact, self.spare_uplinks) if self.network else h  # type: ignore[arg-type]


NOMINAL = Conditions()
