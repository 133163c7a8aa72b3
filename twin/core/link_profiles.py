"""Where a group's bytes go and what each link class costs them: the traffic patterns
(``PATTERNS``), seconds per byte at the busiest link class above a domain
(``net_seconds_per_byte``), per link class (``link_seconds_per_byte``, which the contention
model weighs traffic by) and as a fraction of the bottleneck (``link_profile``); the
bandwidth a group gets across domains and the fabric's own step latency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.core import ops
from twin.core.collective_memo import _by_batch_view, _fixed
from twin.core.collective_types import AnyHierarchy
from twin.core.scale_up_shapes import group_up_bw
from twin.core.topology import GroupSpan, HierarchyBatch
from twin.core.units import US

# How a group's traffic loads the links above its domains (``topology``: link classes).
# Per GPU and per byte the group's algorithm moves, the bytes on the NIC link and on the
# uplinks into tier j (j = 2..top), where ``below`` is the group's ranks under one switch
# of tier j-1 (Leiserson 1985: a fat tree's capacity at each level is what crosses it):
# - "ring": rings (and NVLS/ring hybrids) cross a subtree boundary once per ring edge
#   leaving it, so of a domain's k NICs' traffic 1/below leaves each tier-(j-1) subtree;
# - "tree": NCCL's double binary tree spreads its edges over the whole node range, so all
#   of a node's tree traffic may cross (the conservative bound NCCL's tuning model uses);
# - "sharp": in-network reduction aggregates at every switch level, so a subtree sends one
#   reduced copy up: 1/(k*below) of the per-GPU traffic (Graham et al., COMHPC 2016, SHARP);
# - "a2a": every rank sends 1/n of its buffer to each rank, so the share leaving a subtree
#   is (n - below)/n (and (n - k)/n leaves the domain through the NIC);
# - "p2p": one partner per rank (pipeline stages): the partner is across tier j-1 for
#   1/below of the ranks.
PATTERNS = ("ring", "tree", "sharp", "a2a", "p2p")


def _nic_coeff(pattern: str, span: GroupSpan) -> Any:
    return 1.0 / span.k if pattern in ("ring", "tree", "sharp") else 1.0


def _uplink_coeff(pattern: str, span: GroupSpan, below: Any) -> Any:
    if pattern in ("ring", "p2p"):
        return 1.0 / below
    if pattern == "tree":
        return 1.0 / span.k
    if pattern == "sharp":
        return 1.0 / (span.k * below)
    return (span.n - below) / ops.maximum(span.n - span.k, 1)  # a2a


def _net_fixed(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """One scenario's link classes above the domain for ``pattern``: (NIC coefficient, NIC
    bandwidth, per uplink tier 2..top (tier, coefficient x oversubscription, bandwidth)).
    """
    return (_nic_coeff(pattern, span), h.bw_at(1),
            tuple((j, _uplink_coeff(pattern, span, span.per_tier[j - 1]) * h.oversubscription_at(j), h.bw_at(j))
                  for j in range(2, span.top + 1)))


def _nic_fixed(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """A batch's NIC link class for ``pattern``: (coefficient, bandwidth) per point."""
    return _nic_coeff(pattern, span), h.bw_at(np.ones_like(np.asarray(span.top)))


def _uplink_fixed(span: GroupSpan, h: Any, pattern: str) -> Any:
    """A batch's uplink classes for ``pattern`` (points x tiers): coefficient x
    oversubscription, bandwidth, and which tiers (2..top) the group's traffic crosses.
    """
    j = np.arange(h.width)
    below = np.empty_like(span.per_tier)
    below[:, 1:] = span.per_tier[:, :-1]
    below[:, 0] = 1
    c = _uplink_coeff(pattern, _broadcast_span(span), below)
    crossed = (j[None, :] >= 2) & (j[None, :] <= np.asarray(span.top)[:, None])
    return c * h.oversubscription_table(), h.bw_table(), crossed


def _net_seconds(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    coeff, bw, uplinks = _fixed("net", pattern, span, h, _net_fixed)
    if span.top >= 1 and h.nested_at(span.top):  # a direct network: the top tier holds them all
        return coeff / (h.bw_at(span.top) * h.share_at(span.top))
    nic = coeff / (bw * h.share_at(1))
    return max(nic, *[a / (b * h.share_at(j)) for j, a, b in uplinks], 0.0)


def net_seconds_per_byte(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Seconds per byte of a group's per-GPU traffic at the busiest link class above its
    domain: the NIC link (at the leaf tier's efficiency: NIC links are not hashed), or the
    uplinks into any tier up to the group's top (at that tier's efficiency, which carries the
    fabric's routing losses such as ECMP collisions, less taper and contention shares).
    Only meaningful where the group spans domains.
    """
    if not ops.is_batch(span.n, span.top):
        return _net_seconds(span, h, pattern)
    return _by_batch_view(pattern, span, h, _net_seconds_batch)  # type: ignore[arg-type]


def _net_seconds_batch(span: GroupSpan, h: HierarchyBatch, pattern: str) -> Any:
    got = _nic_seconds(span, h, pattern)
    if h.width > 2 and ops.any_(np.asarray(span.top) >= 2):
        got = np.maximum(got, ops.row_max(_uplink_seconds(span, h, pattern)))
    top = np.asarray(span.top)
    nested = h.nested_at(top) & (top >= 1)
    if nested.any():  # a direct network's top tier holds the links below it (_net_seconds)
        coeff, _ = _fixed("nic", pattern, span, h, _nic_fixed)
        got = np.where(nested, coeff / (h.bw_at(top) * h.share_at(top)), got)
    return got


def _nic_seconds(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Seconds per byte on the group's NIC links (link class 1)."""
    if not ops.is_batch(span.n, span.top):
        coeff, bw, _ = _fixed("net", pattern, span, h, _net_fixed)
    else:
        coeff, bw = _fixed("nic", pattern, span, h, _nic_fixed)
    return coeff / (bw * h.share_at(1))


def _uplink_seconds(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Seconds per byte on the uplinks into each tier 2..top: {tier: s} for one scenario,
    points x tiers (0 outside 2..top) for a batch.
    """
    if not ops.is_batch(span.n, span.top):
        _, _, uplinks = _fixed("net", pattern, span, h, _net_fixed)
        return {j: a / (b * h.share_at(j)) for j, a, b in uplinks}
    if type(h) is HierarchyBatch:  # asked by the group's costing and by its link profile
        return _by_batch_view(pattern, span, h, _uplink_seconds_batch)
    return _uplink_seconds_batch(span, h, pattern)


def _uplink_seconds_batch(span: GroupSpan, h: Any, pattern: str) -> Any:
    num, bw, crossed = _fixed("uplink", pattern, span, h, _uplink_fixed)
    shares = 1.0 if h.shares is None else h.shares
    return np.where(crossed, num / (bw * shares), 0.0)


def _broadcast_span(span: GroupSpan) -> GroupSpan:
    """``span`` with its per-point scalars as columns, to broadcast against per-tier tables."""
    col = [np.asarray(getattr(span, f))[:, None] for f in ("n", "k", "m", "top", "k_top", "nodes")]
    return GroupSpan(*col, per_tier=span.per_tier)


def link_profile(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Fraction of its bandwidth-bound time a group's traffic keeps each link class busy
    (tuple per tier; points x tiers for a batch): 1 on its bottleneck, less on the others,
    0 on tiers it never reaches.
    """
    times = link_seconds_per_byte(span, h, pattern)
    if isinstance(times, tuple):
        worst = max(times)
        return tuple(t / worst for t in times) if worst > 0 else times
    worst = times.max(axis=1, keepdims=True)
    return np.where(worst > 0, times / np.where(worst > 0, worst, 1.0), 0.0)


def link_seconds_per_byte(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Seconds each link class is busy per byte of the group's per-GPU traffic (what its
    strategy reports it sends), per tier (points x tiers for a batch); 0 on tiers it never
    reaches. The contention model (``twin.core.contention``) weighs traffic by it.
    """
    if not ops.is_batch(span.n, span.top):
        times = [0.0] * len(h.tiers)
        if span.n <= 1:
            return tuple(times)
        if span.k > 1:
            times[0] = 1.0 / group_up_bw(span, h)
        if span.m > 1:
            times[1] = _nic_seconds(span, h, pattern)
            for j, t in _uplink_seconds(span, h, pattern).items():
                times[j] = t
        return tuple(times)
    width = h.width
    times = np.zeros((len(np.asarray(span.n)), width))
    times[:, 0] = np.where(np.asarray(span.k) > 1, 1.0 / group_up_bw(span, h), 0.0)
    multi = np.asarray(span.m) > 1
    if multi.any() and width > 1:
        times[:, 1] = np.where(multi, _nic_seconds(span, h, pattern), 0.0)
        if width > 2:
            times[:, 2:] = np.where(multi[:, None], _uplink_seconds(span, h, pattern), 0.0)[:, 2:]
    return times


def _inter_bw(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Per-group bandwidth across domains: k members' NIC shares, less taper and sharing."""
    return 1.0 / net_seconds_per_byte(span, h, pattern)


def _cross_domain_bw(span: GroupSpan, h: AnyHierarchy) -> Any:
    """Bandwidth per GPU of all-to-all traffic that leaves the domain (less taper and sharing;
    at most what the top tier states for all-to-all, e.g. a torus's bisection bound).
    """
    return ops.minimum(1.0 / net_seconds_per_byte(span, h, "a2a"), h.a2a_cap_at(span.top))


def _net_latency_us(span: GroupSpan, h: AnyHierarchy) -> Any:
    """The fabric's own latency of a step across the group's top tier, us: NCCL's per-step
    network latency (``nccl_tuning.HW_LAT_NET``) is the floor; a fabric whose hops are slower (deep
    trees, kernel TCP stacks) states more in its tiers (``Tier.latency_s``).
    """
    return ops.where(span.m > 1, h.latency_at(span.top) / US, 0.0)

