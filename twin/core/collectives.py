"""Cost of one collective on a tier hierarchy: algorithm x protocol, NCCL-style.

The model follows NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc): for each
algorithm (ring, tree, NVLS, CollNet/SHARP) and protocol (LL, LL128, Simple) the time is
``latency + bytes / algorithm_bandwidth`` and the fastest is chosen, unless an algorithm
is forced. Bandwidths come from the tiers (``topology.py``), which fabric plugins build.

Conventions (nccl-tests PERFORMANCE.md): ``size`` is the per-rank buffer in bytes;
busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for all-gather, reduce-scatter and
all-to-all, * 1 for broadcast and send/recv.

Written once for one scenario and for a batch (``twin.core.ops``): sizes, group spans and
hierarchies may hold one value per point; an algorithm a point cannot use costs it
``inf`` and is never chosen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import nccl_tuning as nccl
from twin.core import ops, p2p
from twin.core.errors import SpecError
from twin.core.moe_routing import dispatch_fanout, domains_per_token
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch
from twin.core.units import US

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("ring", "tree", "nvls", "sharp", "direct")

# NCCL's cost-model tables, all from one release (``twin.core.nccl_tuning``, which names each
# line); the tree-correction rows, with the trailing 1.0 from 512 MiB up, also as arrays.
_TREE_CORRECTION_ROWS = {p: (*row, 1.0) for p, row in nccl.TREE_CORRECTION.items()}
_TREE_CORRECTION_ARRAYS = {p: np.asarray(row) for p, row in _TREE_CORRECTION_ROWS.items()}
# All-to-all / send-recv latency: one message per peer, a per-operation base and a per-peer cost.
# Not NCCL's: tuning.cc costs collectives only (p2p operations never go through
# ncclTopoGetAlgoTime), and no source at hand gives these; the twin's own figures, a known gap
# (docs/fidelity.md). Their bandwidth side follows NCCL's p2p schedule (``twin.core.p2p``).
_P2P_BASE_US = 8.0
_P2P_PER_PEER_US = 0.5

AnyHierarchy = Hierarchy | HierarchyBatch
Option = tuple[Any, str, str, Any]  # (time s, algorithm, protocol, busbw B/s)


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """Time of one collective and how it was achieved (arrays for a batch)."""

    time_s: Any
    algorithm: Any
    protocol: Any
    busbw_Bps: Any
    bottleneck_bw_Bps: Any = 0.0


ZERO_COST = CollectiveCost(0.0, "none", "none", 0.0, 0.0)


def bus_factor(op: str, n: Any) -> Any:
    """Busbw / algbw for ``op`` on ``n`` ranks (nccl-tests PERFORMANCE.md)."""
    if isinstance(n, np.ndarray):  # ops.is_batch(n), without the call: every collective asks
        if op == "all_reduce":
            return np.where(n <= 1, 1.0, 2.0 * (n - 1) / np.maximum(n, 1))
        if op in ("all_gather", "reduce_scatter", "all_to_all"):
            return np.where(n <= 1, 1.0, (n - 1) / np.maximum(n, 1))
        return np.ones(np.shape(n))
    if n <= 1:
        return 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


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


# Most of a collective's cost does not depend on the shares of link capacity a view of the
# hierarchy gives its traffic (``Hierarchy.with_shares``: the contention model's views, a
# fleet's capacity views): its step latencies, protocol availability, bus factor, each link
# class's coefficient and bandwidth alone. Those parts are built once per (group, op or
# pattern) and kept for the hierarchy and all of its share views (``_fixed``); each costing
# works out only the bandwidths of its own view, with the same arithmetic in the same order
# as when it was built whole (so the times are bit-identical).
_MEMO_LIMIT = 8192
_MISSING = object()

Build = Callable[[GroupSpan, Any, str], Any]


def _fixed(kind: str, tag: str, span: GroupSpan, h: AnyHierarchy, build: Build) -> Any:
    """``build(span, h, tag)``: a part of a collective's cost that no link share changes.

    One scenario's are kept by value (``kind``, ``tag``, the group's fields) in the hierarchy's own memo,
    which its share views share (``Hierarchy._memo``; bounded: cleared when full); a batch's
    in the batch view's, which its share views share too (``HierarchyBatch._fixed_memo``).
    """
    if type(h) is HierarchyBatch:
        return _batch_fixed(tag, span, h, build)
    group = span._key
    if group is None or type(h) is not Hierarchy:
        return build(span, h, tag)
    memo = h._memo
    key = (kind, tag, group)
    hit = memo.get(key, _MISSING)
    if hit is _MISSING:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        hit = memo[key] = build(span, h, tag)
    return hit


def _batch_fixed(tag: str, span: GroupSpan, h: HierarchyBatch, build: Build) -> Any:
    """:func:`_fixed` of a batch view: built once per group object, or, for the rows of a
    batch (``HierarchyBatch.take``) read through a group taken the same way (``ops.TakeView``
    with the same rows), the rows of what the whole batch built. A part is per point, so
    its rows are what the rows would build: where a builder takes a branch for the whole
    batch (``ops.any_``), the branches give the same values to the points they do not concern
    (a one-domain point of a multi-domain batch pays no network step).
    """
    memo = h._fixed_memo
    key = (id(span), build, tag)
    hit = memo.get(key)
    if hit is not None and hit[0] is span:
        return hit[1]
    got = _MISSING
    parent = h._fixed_from
    if parent is not None and type(span) is ops.TakeView:
        whole, rows = ops.take_view_parts(span)
        if rows is parent[1]:
            found = parent[0].get((id(whole), build, tag))
            if found is not None and found[0] is whole:
                got = _take_part(found[1], rows)
    if got is _MISSING:
        got = build(span, h, tag)
    memo[key] = (span, got)
    return got


def _take_part(value: Any, rows: np.ndarray) -> Any:
    """``value`` (a built part: arrays per point, tuples of them, plain values) for ``rows``."""
    if type(value) is np.ndarray and value.ndim:
        return ops.gather(value, rows)
    if type(value) is tuple:
        return tuple(_take_part(v, rows) for v in value)
    return value


def _by_batch_view(tag: str, span: GroupSpan, h: HierarchyBatch, build: Build,
                   memo: dict[Any, Any] | None = None) -> Any:
    """``build(span, h, tag)``, kept in the batch view's own memo (``h._net_memo``, dropped
    with the view, or ``memo``) for this group: a batch's strategies ask the same of a group
    again. Each entry holds the group, so an id is never another object's.
    """
    if memo is None:
        memo = h._net_memo
    key = (id(span), build, tag)
    hit = memo.get(key)
    if hit is not None and hit[0] is span:
        return hit[1]
    got = build(span, h, tag)
    memo[key] = (span, got)
    return got


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
            times[0] = 1.0 / h.up_bw
        if span.m > 1:
            times[1] = _nic_seconds(span, h, pattern)
            for j, t in _uplink_seconds(span, h, pattern).items():
                times[j] = t
        return tuple(times)
    width = h.width
    times = np.zeros((len(np.asarray(span.n)), width))
    times[:, 0] = np.where(np.asarray(span.k) > 1, 1.0 / h.up_bw, 0.0)
    multi = np.asarray(span.m) > 1
    if multi.any() and width > 1:
        times[:, 1] = np.where(multi, _nic_seconds(span, h, pattern), 0.0)
        if width > 2:
            times[:, 2:] = np.where(multi[:, None], _uplink_seconds(span, h, pattern), 0.0)[:, 2:]
    return times


def _inter_bw(span: GroupSpan, h: AnyHierarchy, pattern: str) -> Any:
    """Per-group bandwidth across domains: k members' NIC shares, less taper and sharing."""
    return 1.0 / net_seconds_per_byte(span, h, pattern)


def _option(t: Any, algorithm: str, protocol: str, busbw: Any, available: Any = True) -> Option | None:
    """One (time, algorithm, protocol, busbw) candidate; points that cannot use it get inf."""
    if type(available) is np.ndarray:
        return (np.where(available, t, np.inf), algorithm, protocol, busbw)
    return (t, algorithm, protocol, busbw) if available else None


def _net_latency_us(span: GroupSpan, h: AnyHierarchy) -> Any:
    """The fabric's own latency of a step across the group's top tier, us: NCCL's per-step
    network latency (``nccl.HW_LAT_NET``) is the floor; a fabric whose hops are slower (deep
    trees, kernel TCP stacks) states more in its tiers (``Tier.latency_s``).
    """
    return ops.where(span.m > 1, h.latency_at(span.top) / US, 0.0)


def _nccl_nodes(span: GroupSpan) -> Any:
    """NCCL's nNodes for the group: its nodes, except that a multi-node NVLink domain (MNNVL,
    e.g. an NVL72 rack) counts as one node (tuning.cc: "MNNVL support - treat as a single
    NVLink connected node"), so the domains it spans.
    """
    return ops.minimum(span.m, span.nodes)


# Per protocol, the ring's step latencies, us (tuning.cc, ring model): NVLink step; how many
# network post overheads (``Hierarchy.net_overhead_us``, the hosts' CPU's) the intra-node step of
# an inter-node ring pays at least ("Inter-node rings still have to launch nsteps * net
# overhead", x3 for Simple); the network step, and with one rank per node the tree's network
# step instead ("With ppn=1 latencies are fully exposed, use the Tree network latency").
_RING_STEPS = tuple(
    (proto, pbw, nccl.BASE_LAT["ring"][proto], nccl.HW_LAT_NVLINK["ring"][proto], 3 if proto == "Simple" else 1,
     nccl.HW_LAT_NET["ring"][proto], nccl.HW_LAT_NET["tree"][proto])
    for proto, pbw in nccl.RING_PROTO_BW.items())


def _ring_times(op: str, size: Any, span: GroupSpan, h: AnyHierarchy) -> list[Option]:
    factor, multi, any_multi, ll_cap, steps = _fixed("ring", op, span, h, _ring_fixed)
    up = h.up_bw
    bw = ops.where(multi, ops.minimum(up, _inter_bw(span, h, "ring")), up) if any_multi else up
    out: list[Option] = []
    for proto, pbw, lat_s, available in steps:
        busbw = ops.minimum(bw * pbw, ll_cap) if proto == "LL" else bw * pbw  # LL: "busBw = min(llMaxBw, busBw * .5)"
        opt = _option(size * factor / busbw + lat_s, "ring", proto, busbw, available)
        if opt is not None:
            out.append(opt)
    return out


def _ring_fixed(span: GroupSpan, h: AnyHierarchy, op: str) -> tuple[Any, Any, bool, Any, tuple[Any, ...]]:
    """The ring's parts no link share changes: (bus factor, multi-domain, any point
    multi-domain, LL bandwidth cap, per protocol (protocol, its bandwidth factor, latency s,
    available)). An option's time is ``size * factor / busbw + latency`` (``_ring_times``).
    """
    n, m = span.n, _nccl_nodes(span)
    multi = span.m > 1
    nsteps = 2 * (n - 1) if op == "all_reduce" else (n - 1 if op in ("all_gather", "reduce_scatter") else n)
    factor = bus_factor(op, n)
    any_multi = ops.any_(multi)
    if any_multi:
        net_lat = _net_latency_us(span, h)
        ninter = 2 * (m - 1) if op == "all_reduce" else (m - 1 if op in ("all_gather", "reduce_scatter") else m)
        ninter = ops.where(multi, ops.minimum(ninter, nsteps), 0)  # a one-domain point of a batch: none
        low_latency = _low_latency_protocols(span, h)
        one_per_node = ops.logical_and(multi, n // ops.maximum(m, 1) <= 1)
    # LL: "busBw = min(llMaxBw, busBw * .5)"
    ll_cap = nccl.ll_max_bw(m, h.ll_max_bw, h.ll_max_bw_two_nodes, h.ll_max_bw_more_nodes)
    steps: list[tuple[str, Any, Any, Any]] = []
    for proto, pbw, base, nvlink, overheads, net_ring, net_tree in _RING_STEPS:
        if any_multi:
            intra_multi = ops.maximum(nvlink, overheads * h.net_overhead_us)
            net = ops.maximum(ops.where(one_per_node, net_tree, net_ring), net_lat)
            lat = base + (nsteps - ninter) * ops.where(multi, intra_multi, nvlink) + ninter * net
            if proto == "Simple" and op == "all_reduce":
                lat = ops.where(m > 1, lat * h.ring_plateau, lat)  # Hierarchy.ring_plateau
            steps.append((proto, pbw, lat * US, True if proto == "Simple" else _everywhere(low_latency)))
        else:  # one domain: no network step (the same formula with ninter = 0)
            steps.append((proto, pbw, (base + nsteps * nvlink) * US, True))
    return factor, multi, any_multi, ll_cap, tuple(steps)


def _everywhere(available: Any) -> Any:
    """``available`` (a bool or one per point), or True where every point has it: an option
    open to all points needs no mask (``_option``).
    """
    return True if type(available) is np.ndarray and available.all() else available


def _low_latency_protocols(span: GroupSpan, h: AnyHierarchy) -> Any:
    """Whether the group may run NCCL's LL and LL128 protocols: not where its traffic crosses a
    tier that carries only Simple (``Tier.simple_only``, e.g. EFA under aws-ofi-nccl).
    """
    return ops.logical_not(ops.logical_and(span.m > 1, h.simple_only_through(span.top)))


def _tree_times(size: Any, span: GroupSpan, h: AnyHierarchy) -> list[Option]:
    fixed = _fixed("tree", "", span, h, _tree_fixed)
    if fixed is None:
        return []
    ll_cap, bus, steps = fixed
    bw = nccl.TREE_BW * ops.minimum(h.up_bw, _inter_bw(span, h, "tree"))
    size_index = _tree_size_index(size)
    out: list[Option] = []
    for proto, pbw, lat_s, available in steps:
        # tuning.cc: trees move 2x the data per byte reduced; NCCL's medium-size correction
        correction = _TREE_CORRECTION_ARRAYS[proto][size_index] if type(size_index) is np.ndarray \
            else _TREE_CORRECTION_ROWS[proto][size_index]
        busbw = ops.minimum(bw * pbw, ll_cap) if proto == "LL" else bw * pbw  # LL: "min(busBw*1.0/3.8, llMaxBw)"
        algbw = 0.5 * busbw * correction
        t = size / algbw + lat_s
        opt = _option(t, "tree", proto, size * bus / t, available)
        if opt is not None:
            out.append(opt)
    return out


def _tree_fixed(span: GroupSpan, h: AnyHierarchy, tag: str) -> tuple[Any, Any, tuple[Any, ...]] | None:
    """The tree's parts no link share changes (None where no point spans NCCL nodes): (LL
    bandwidth cap, the all-reduce bus factor, per protocol (protocol, its bandwidth factor,
    latency s, available)).
    """
    multi = _nccl_nodes(span) > 1
    if not ops.any_(multi):
        return None
    nodes = ops.maximum(_nccl_nodes(span), 1)
    ppn = ops.maximum(1, span.n // nodes)
    log_nodes = _log2_nodes(span, h)
    net_lat = _net_latency_us(span, h)
    low_latency = ops.logical_and(multi, _low_latency_protocols(span, h))
    steps = []
    for proto, pbw in nccl.TREE_PROTO_BW.items():
        lat = nccl.BASE_LAT["tree"][proto] + 2 * ((ppn - 1) * nccl.HW_LAT_NVLINK["tree"][proto]
                                              + log_nodes * ops.maximum(nccl.HW_LAT_NET["tree"][proto], net_lat))
        steps.append((proto, pbw, lat * US, _everywhere(multi if proto == "Simple" else low_latency)))
    ll_cap = nccl.ll_max_bw(nodes, h.ll_max_bw, h.ll_max_bw_two_nodes, h.ll_max_bw_more_nodes)
    return ll_cap, bus_factor("all_reduce", span.n), tuple(steps)


def _tree_size_index(size: Any) -> Any:
    """The entry of ``nccl.TREE_CORRECTION`` for ``size`` bytes: log2i(bytes >> 6) as
    ncclTopoGetAlgoTime takes it, capped at the rows' trailing 1.0 (512 MiB and up).
    """
    cap = len(_TREE_CORRECTION_ROWS["Simple"]) - 1
    if type(size) is np.ndarray:
        blocks = np.floor(np.maximum(size, 64.0) / 64.0)
        return np.minimum(np.frexp(blocks)[1] - 1, cap)
    return min((int(max(size, 64.0)) >> 6).bit_length() - 1, cap)


def _log2_nodes(span: GroupSpan, h: AnyHierarchy) -> Any:
    """log2i of the group's NCCL nodes (``_nccl_nodes``; NCCL's integer log2, which tuning.cc's
    tree and NVLS-tree latencies use), once per span of a batch.
    """
    if not ops.is_batch(span.n):
        return ops.trunc(ops.log2(ops.maximum(_nccl_nodes(span), 1)))
    return _by_batch_view("log2_nodes", span, h, _log2_nodes_of)  # type: ignore[arg-type]


def _log2_nodes_of(span: GroupSpan, h: Any, tag: str) -> Any:
    return ops.trunc(ops.log2(ops.maximum(_nccl_nodes(span), 1)))


def _tree_depth(span: GroupSpan, h: AnyHierarchy) -> Any:
    """Levels between the root and the deepest leaf of NCCL's double binary tree over the group's
    NCCL nodes, ceil(log2(nodes)), once per span of a batch. ``src/graph/trees.cc`` ncclGetBtree:
    node 0 is the root and a node's parent clears its lowest set bit, so 4 nodes are 0 -> 2 ->
    {1, 3} (2 levels) and 3 nodes a chain 0 -> 2 -> 1 (2 levels, where log2i gives 1); 5 nodes
    0 -> 4 -> 2 -> {1, 3} (3). ncclGetDtree mirrors the tree (even counts) or shifts it by one (odd
    counts): the same depth.
    """
    if not ops.is_batch(span.n):
        return _tree_depth_of(span, h, "")
    return _by_batch_view("tree_depth", span, h, _tree_depth_of)  # type: ignore[arg-type]


def _tree_depth_of(span: GroupSpan, h: Any, tag: str) -> Any:
    return ops.ceil(ops.log2(ops.maximum(_nccl_nodes(span), 1)))


def dbtree_node_traffic(domains: Any) -> Any:
    """Bytes the busiest domain sends (and receives) across the network per byte of an
    all-reduce run as NCCL's double binary tree over ``domains`` (NVLS-tree's inter-node part).

    NCCL builds two binary trees over the nodes (``src/graph/trees.cc``, ``ncclGetBtree`` and
    ``ncclGetDtree``: the second tree mirrors the first for an even node count and shifts it by
    one for an odd count, so a node interior in one tree is a leaf in the other), each carrying
    half the buffer up (reduce) and back down (broadcast). Per tree a node sends half the
    buffer to its parent and half to each child: with 2 nodes each sends the buffer once; with
    3 both trees are chains and the busiest node sends 1.5x; from 4 on, rank 2 has a parent and
    two children in the first tree and is a leaf in the second: 2x. NCCL's own cost model says
    the same: NVLS-tree's ``interBw * ((nNodes <= 2 && a == NCCL_ALGO_NVLS_TREE) ? 2 : 1)``
    (``ncclTopoTuneModel``, tuning.cc of 2.28.3). A ring moves 2(m-1)/m, which undercounts the
    tree from 3 nodes on (1.5x against 2x at 4 nodes).
    """
    return ops.where(domains <= 1, 0.0, ops.where(domains == 2, 1.0, ops.where(domains == 3, 1.5, 2.0)))


def _nvls_time(size: Any, span: GroupSpan, h: AnyHierarchy) -> tuple[Option, Any] | None:
    """NVLS (one domain) or NVLS_TREE (across domains) all-reduce: the option as NCCL's tuning
    model times it (what NCCL ranks the algorithms by) and the pipeline fill that model leaves
    out (``_nvls_fill``), which the time taken adds.
    """
    nvls_bw = h.up_nvls_bw
    available = ops.logical_and(nvls_bw > 0, span.k >= nccl.NVLS_MIN_GPUS)
    if not ops.any_(available):
        return None
    multi, any_multi, across, lat_s, bus = _fixed("nvls", "", span, h, _nvls_fixed)
    t_intra = size / ops.where(nvls_bw > 0, nvls_bw, 1.0)  # points without NVLS are not available
    # NVLS-tree: in-switch reduction inside the domain, NCCL's double binary tree across.
    if any_multi:
        inter_bw = _inter_bw(span, h, "ring")
        t_inter = ops.where(multi, across * size / inter_bw, 0.0)
        hop_per_byte = ops.where(multi, 1.0 / inter_bw, 0.0)  # a tree edge carries each piece once
    else:
        t_inter, hop_per_byte = 0.0, 0.0
    t = ops.maximum(t_intra, t_inter) + lat_s
    fill = _nvls_fill(size, 1.0 / ops.where(nvls_bw > 0, nvls_bw, 1.0), hop_per_byte, span, h)
    option = _option(t, "nvls", "Simple", size * bus / (t + fill), available)
    return None if option is None else (option, fill)


def _nvls_fixed(span: GroupSpan, h: AnyHierarchy, tag: str) -> tuple[Any, bool, Any, Any, Any]:
    """NVLS's parts no link share changes: (multi-domain, any point multi-domain, the bytes the
    busiest domain sends across per byte of the buffer (``dbtree_node_traffic``), latency s,
    the all-reduce bus factor). NVLS-tree pays 2 log2(domains) network steps (tuning.cc,
    NVLS_TREE latency).
    """
    multi = span.m > 1
    any_multi = ops.any_(multi)
    if any_multi:
        net_steps = ops.where(multi, 2.0 * _log2_nodes(span, h), 0.0)
        lat = nccl.NVLS_LAT_US + net_steps * ops.maximum(nccl.NVLS_TREE_NET_LAT_US, _net_latency_us(span, h))
        across = dbtree_node_traffic(span.m)
    else:
        lat, across = nccl.NVLS_LAT_US, 0.0
    return multi, any_multi, across, lat * US, bus_factor("all_reduce", span.n)


def _nvls_fill(size: Any, nvls_per_byte: Any, hop_per_byte: Any, span: GroupSpan, h: AnyHierarchy) -> Any:
    """The fill of NCCL's NVLS pipeline, s: the first piece of a channel's work passes every
    stage before the last one is busy, so the collective takes the bandwidth time plus the
    piece's time through every stage but the slowest.

    Stages (``nccl.NVLS_STAGES``, ``nccl.NVLS_TREE_*_STAGES_PER_LEVEL``): one domain, 3 on the GPUs; across
    domains (NVLS_TREE), 3 + 2d on the GPUs and 2d network hops for the deepest leaf, at depth
    d = ceil(log2(nodes)) of NCCL's tree (``_tree_depth``; log2i, which NCCL's latency model counts,
    for a power of two).
    A GPU stage moves a piece at the NVLS rate (``nvls_per_byte`` s per byte of the
    collective); a network hop moves it once over the domain's NICs (``hop_per_byte``: each
    head sends its chunk up, or down, one tree edge).

    A piece is one loop of a channel: a chunk (``nccl.nvls_chunk`` / ``nvls_tree_chunk``) per
    NVLS head on each of the generation's NVLS channels, or the whole buffer when it is less.
    Heads: every GPU of the domain on one node; across nodes NCCL takes one per NIC with its
    own GPU, so the domain's GPUs where each has a NIC (DGX/HGX, NVL72); at most
    ``nccl.NVLS_MAX_ARITY``. NCCL's own NVLS latency (25 us and the tree's network steps) is
    the time of a message too small to fill a stage, so only the bandwidth part is added.
    """
    multi = span.m > 1
    heads = ops.minimum(span.k, nccl.NVLS_MAX_ARITY)
    channels = ops.where(multi, h.nvls_channels_multi, h.nvls_channels)
    per_channel = size / channels
    if ops.any_(multi):
        chunk = ops.where(multi, nccl.nvls_tree_chunk(per_channel, heads, _nccl_nodes(span)),
                          nccl.nvls_chunk(per_channel, heads))
        levels = ops.where(multi, _tree_depth(span, h), 0)
    else:
        chunk, levels = nccl.nvls_chunk(per_channel, heads), 0
    piece = ops.minimum(size, channels * heads * chunk)
    gpu_stages = nccl.NVLS_STAGES + nccl.NVLS_TREE_GPU_STAGES_PER_LEVEL * levels
    net_stages = nccl.NVLS_TREE_NET_STAGES_PER_LEVEL * levels
    through = gpu_stages * nvls_per_byte + net_stages * hop_per_byte
    return piece * (through - ops.maximum(nvls_per_byte, hop_per_byte))


def _sharp_time(op: str, size: Any, span: GroupSpan, h: AnyHierarchy) -> Option | None:
    """SHARP (CollNet) in-network reduction across domains: all-reduce, and reduce-scatter /
    all-gather as SHARP 3.5.2 runs them with NCCL >= 2.20 (NVIDIA SHARP Rev 3.5.2 LTS release
    notes: "Added support for Reduce-Scatter and All-Gather collective operations when using
    HPCX v2.18.1 concurrently with NCCL v2.20 or above"). The twin assumes such a NCCL.
    """
    available, intra, share, lat_s, bus = _fixed("sharp", op, span, h, _sharp_fixed)
    if not ops.any_(available):
        return None
    if op == "all_reduce":
        nvls_bw = h.up_nvls_bw
        nvls = ops.logical_and(nvls_bw > 0, span.k >= nccl.NVLS_MIN_GPUS)
        # Without NVLS, CollNet Direct: NCCL's model of it (``nccl.collnet_direct_bw``), the intra-node
        # bandwidth over the GPU/NIC factor, x.85 from sm90, half of it as algorithm bandwidth; at
        # most 8 GPUs of the communicator per node.
        direct_bw = nccl.COLLNET_DIRECT_RATIO * h.collnet_direct_bw * h.up_bw
        t_intra = ops.where(nvls, size / ops.where(nvls_bw > 0, nvls_bw, 1.0),
                            ops.where(intra, size / direct_bw, 0.0))
        available = ops.logical_and(available, ops.logical_or(nvls, span.k <= nccl.COLLNET_DIRECT_MAX_LOCAL_GPUS))
        if not ops.any_(available):
            return None
    else:  # the domain's part is a ring reduce-scatter / all-gather over NVLink
        t_intra = ops.where(intra, share * size / h.up_bw, 0.0)
    # In-network reduction: each GPU sends its 1/k share up once and receives it once
    # (reduce-scatter receives less, all-gather sends less: the up or down direction paces it).
    t_inter = size / _inter_bw(span, h, "sharp")
    t = ops.maximum(t_intra, t_inter) + lat_s
    return _option(t, "sharp", "Simple", size * bus / t, available)


def _sharp_fixed(span: GroupSpan, h: AnyHierarchy, op: str) -> tuple[Any, Any, Any, Any, Any]:
    """SHARP's parts no link share changes: (available: across domains through a reducing
    tier, more than one rank per domain, the share of the buffer each rank moves inside its
    domain for reduce-scatter / all-gather, a ring's (k-1)/k, latency s, the op's bus factor).
    """
    k = span.k
    share = (k - 1) / k
    # NCCL 2.28.3's CollNet Direct latency (``nccl_tuning.collnet_direct_latency_us``).
    return (ops.logical_and(span.m > 1, h.sharp_through(span.top)), k > 1, share,
            nccl.collnet_direct_latency_us(k) * US, bus_factor(op, span.n))


def _cross_domain_bw(span: GroupSpan, h: AnyHierarchy) -> Any:
    """Bandwidth per GPU of all-to-all traffic that leaves the domain (less taper and sharing;
    at most what the top tier states for all-to-all, e.g. a torus's bisection bound).
    """
    return ops.minimum(1.0 / net_seconds_per_byte(span, h, "a2a"), h.a2a_cap_at(span.top))


def _p2p_latency(n: Any, span: GroupSpan | None = None, h: AnyHierarchy | None = None) -> Any:
    """Per-peer p2p latency, plus one network step where the group leaves its domain."""
    lat = _P2P_BASE_US + (n - 1) * _P2P_PER_PEER_US
    if span is not None and h is not None:
        lat = lat + ops.where(span.m > 1, ops.maximum(nccl.HW_LAT_NET["ring"]["Simple"], _net_latency_us(span, h)), 0.0)
    return lat * US


def _flat_all_to_all(size: Any, span: GroupSpan, h: AnyHierarchy) -> CollectiveCost:
    """An all-to-all at the links' rates with the twin's p2p latency: the NVLink all-to-all
    bandwidth inside the domain, the NICs' across (DeepEP's and UCCL-EP's own kernels, which do
    not run NCCL's p2p schedule, and fabrics without NVLink channel figures).
    """
    a2a_up = h.up_a2a_bw
    t_intra, t_inter, inter_bw = _a2a_stages(size, span, h, a2a_up)
    t = ops.maximum(t_intra, t_inter) + _p2p_latency(span.n, span, h)
    bottleneck = ops.where(ops.logical_and(t_inter >= t_intra, span.m > 1), inter_bw, a2a_up)
    return CollectiveCost(t, "direct", "Simple", size * bus_factor("all_to_all", span.n) / t, bottleneck)


def _a2a_stages(size: Any, span: GroupSpan, h: AnyHierarchy, nvlink_bw: Any) -> tuple[Any, Any, Any]:
    """(NVLink time, network time, the network's rate per GPU) of an all-to-all of ``size`` per
    rank: (k-1)/n of it to the peers in the domain at ``nvlink_bw``, (n-k)/n to the others.
    """
    n, k = span.n, span.k
    t_intra = ops.where(k > 1, size * (k - 1) / n / nvlink_bw, 0.0)
    remote = span.m > 1
    if ops.any_(remote):
        inter_bw = ops.where(remote, _cross_domain_bw(span, h), 0.0)
        t_inter = ops.where(remote, size * (n - k) / n / ops.where(remote, inter_bw, 1.0), 0.0)
    else:
        inter_bw = t_inter = 0.0
    return t_intra, t_inter, inter_bw


def _a2a_fixed(span: GroupSpan, h: AnyHierarchy, tag: str) -> tuple[Any, ...]:
    """The share-free, size-free parts of an all-to-all on NCCL's p2p schedule (``twin.core.p2p``):
    whether the hierarchy has NVLink channel figures, whether the group spans NCCL nodes, the
    per-peer channel maximum and nChannelsMin, whether the transport carries LL, the comm's
    channels the k-1 peers behind NVLink get (their share of the n-1 peers'), the twin's
    latency, the bus factor.
    """
    channels = h.p2p_channels
    multi = _nccl_nodes(span) > 1
    per_peer, first = p2p.peer_channels(span.n, multi, span.k > 1, ops.maximum(channels, 1), h.p2p_peer_channels)
    ll_ok = ops.logical_not(ops.logical_and(span.m > 1, h.simple_only_through(span.top)))
    share = channels * (span.k - 1) / ops.maximum(span.n - 1, 1)
    return (channels > 0, multi, per_peer, first, ll_ok, share, _p2p_latency(span.n, span, h),
            bus_factor("all_to_all", span.n))


def _all_to_all(size: Any, span: GroupSpan, h: AnyHierarchy) -> CollectiveCost:
    """NCCL's all-to-all: a send and a receive per peer, each on its channels (``twin.core.p2p``).
    Its bandwidth time is the slowest of the NVLink links (all-to-all rate), the NVLink side's
    channels (each at NCCL's provisioned half link, ``Hierarchy.p2p_channel_bw``: fewer channels
    than the links need is a lower rate) and the NICs; each channel's pipeline adds a chunk per
    copy stage (``p2p.fill_s``); LL doubles both (half of each line is flags).
    """
    if not ops.any_(h.p2p_channels > 0):
        return _flat_all_to_all(size, span, h)
    on, multi, per_peer, first, ll_ok, share, lat, factor = _fixed("p2p", "all_to_all", span, h, _a2a_fixed)
    channels = ops.maximum(h.p2p_channels, 1)
    b = size / span.n  # to each peer
    ll = p2p.uses_ll(b, per_peer, ll_ok)
    step = p2p.step_bytes(ll, multi)
    c = p2p.send_channels(b, step, multi, per_peer, first)
    k = span.k
    nvl_bw = ops.minimum(h.up_a2a_bw, ops.where(ops.logical_and(on, k > 1),
                                                h.p2p_channel_bw * ops.minimum((k - 1) * c, share), math.inf))
    t_intra, t_inter, inter_bw = _a2a_stages(size, span, h, nvl_bw)
    inter = ops.logical_and(t_inter >= t_intra, span.m > 1)
    t_bw = ops.maximum(t_intra, t_inter)
    # The copies run at the channel's rate, shared where the (n-1) x c sends outnumber the channels.
    copy_bw = ops.where(on, h.p2p_channel_bw * ops.minimum(1.0, channels / ops.maximum((span.n - 1) * c, 1)), 1.0)
    fill = ops.where(on, p2p.fill_s(b / c, p2p.chunk_data(step, ll, b, inter), copy_bw, inter), 0.0)
    t = lat + (t_bw + fill) * ops.where(ops.logical_and(on, ll), 1.0 / nccl.LL_DATA_FRACTION, 1.0)
    return CollectiveCost(t, "direct", ops.where(ops.logical_and(on, ll), "LL", "Simple"), size * factor / t,
                          ops.where(inter, inter_bw, nvl_bw))


def dedup_dispatch_cost(token_bytes: Any, tokens: Any, top_k: int, span: GroupSpan,
                        hierarchy: AnyHierarchy, groups: Any = None, experts: int = 0,
                        routing: str = "random") -> CollectiveCost:
    """Expert dispatch that sends each token once per destination NVLink domain and, inside
    a domain, once per destination rank, which fans it out to its local experts (DeepEP
    normal kernels, deepseek-ai/DeepEP README and ``get_dispatch_layout``; DeepSeek-V3
    report §3.2.2). The distinct destination ranks and domains per token come from
    ``twin.core.moe_routing`` (``experts`` routed experts and the model's ``routing``;
    ``groups``: node-limited routing's limit, None for none; with no expert count, each of
    the top_k copies goes to its own rank and the domains are ``domains_per_token``), (m-1)/m
    of the domains remote. RDMA and NVLink forwarding are pipelined, so the slower of the
    two sets the time.
    """
    if experts:
        per_rank, per_domain = dispatch_fanout(experts, top_k, span.n, span.k, routing, groups)
    else:
        per_rank, per_domain = top_k, domains_per_token(span.m, top_k, groups)
    if not ops.is_batch(tokens, span.n, token_bytes):
        if span.n <= 1 or tokens <= 0:
            return ZERO_COST
        if span.m <= 1:
            return _flat_all_to_all(token_bytes * tokens * per_rank, span, hierarchy)
        return _dedup(token_bytes, tokens, per_rank, per_domain, span, hierarchy)
    flat = _flat_all_to_all(token_bytes * tokens * per_rank, span, hierarchy)
    multi = span.m > 1
    if not ops.any_(multi):
        return _zero_where(ops.logical_or(span.n <= 1, tokens <= 0), flat)
    dedup = _dedup(token_bytes, tokens, per_rank, per_domain, span, hierarchy)
    picked = CollectiveCost(*(np.where(multi, d, f) for d, f in zip(
        (dedup.time_s, dedup.algorithm, dedup.protocol, dedup.busbw_Bps, dedup.bottleneck_bw_Bps),
        (flat.time_s, flat.algorithm, flat.protocol, flat.busbw_Bps, flat.bottleneck_bw_Bps), strict=True)))
    return _zero_where(ops.logical_or(span.n <= 1, tokens <= 0), picked)


@dataclass(frozen=True, slots=True)
class DispatchStages:
    """The two pipelined stages of a cross-domain expert dispatch and its fixed latency, s:
    the RDMA stage (each token once per remote destination domain, at the cross-domain
    bandwidth) and the NVLink stage (each received token to its destination ranks).
    """

    rdma_s: Any
    nvlink_s: Any
    latency_s: Any
    rdma_bw_Bps: Any
    nvlink_bw_Bps: Any


def _dispatch_stages(token_bytes: Any, tokens: Any, per_rank: Any, per_domain: Any, span: GroupSpan,
                     h: AnyHierarchy) -> DispatchStages:
    m = ops.maximum(span.m, 1)
    a2a_up = h.up_a2a_bw
    # Every source rank routes alike, so a destination domain is its own one time in m.
    remote_copies = per_domain * (m - 1) / m
    inter_bw = _cross_domain_bw(span, h)
    t_inter = tokens * token_bytes * remote_copies / inter_bw
    # Inside each domain a received token goes once to each destination rank over NVLink.
    t_intra = ops.where(span.k > 1, tokens * token_bytes * per_rank * (span.k - 1) / span.k / a2a_up, 0.0)
    return DispatchStages(t_inter, t_intra, _p2p_latency(span.n, span, h), inter_bw, a2a_up)


def dispatch_stages(token_bytes: float, tokens: float, top_k: int, span: GroupSpan, hierarchy: AnyHierarchy,
                    groups: Any = None) -> DispatchStages:
    """The stages ``dedup_dispatch_cost`` weighs for a dispatch with no expert count (each
    of the ``top_k`` copies to its own rank), for an analysis to print each part.
    """
    return _dispatch_stages(token_bytes, tokens, top_k, domains_per_token(span.m, top_k, groups), span, hierarchy)


def _dedup(token_bytes: Any, tokens: Any, per_rank: Any, per_domain: Any, span: GroupSpan,
           h: AnyHierarchy) -> CollectiveCost:
    st = _dispatch_stages(token_bytes, tokens, per_rank, per_domain, span, h)
    t = ops.maximum(st.rdma_s, st.nvlink_s) + st.latency_s
    nbytes = tokens * token_bytes * per_rank
    bottleneck = ops.where(st.rdma_s >= st.nvlink_s, st.rdma_bw_Bps, st.nvlink_bw_Bps)
    return CollectiveCost(t, "deepep", "Simple", nbytes * bus_factor("all_to_all", span.n) / t, bottleneck)


def _send_recv(size: Any, span: GroupSpan, h: AnyHierarchy) -> CollectiveCost:
    """One send to one peer (a pipeline stage's activations): over NVLink inside the domain, the
    group's NIC share across, with the twin's p2p latency. (NCCL's p2p schedule, which the
    all-to-all follows, is not applied here: docs/fidelity.md, "looked at and not kept".)
    """
    multi = span.m > 1
    if ops.any_(multi):
        bw = ops.where(multi, 1.0 / net_seconds_per_byte(span, h, "p2p"), h.up_bw)
    else:
        bw = h.up_bw
    net_step = ops.maximum(nccl.HW_LAT_NET["ring"]["Simple"], _net_latency_us(span, h))
    lat = ops.where(multi, (_P2P_BASE_US + net_step) * US, (_P2P_BASE_US + nccl.HW_LAT_NVLINK["ring"]["Simple"]) * US)
    t = size / bw + lat
    return CollectiveCost(t, "direct", "Simple", size / t, bw)


def _zero_where(mask: Any, cost: CollectiveCost) -> CollectiveCost:
    """``cost`` with the points in ``mask`` (one rank, nothing to send) costing nothing."""
    if not ops.any_(mask):
        return cost
    return CollectiveCost(np.where(mask, 0.0, cost.time_s), _none_where(mask, cost.algorithm),
                          _none_where(mask, cost.protocol), np.where(mask, 0.0, cost.busbw_Bps),
                          np.where(mask, 0.0, cost.bottleneck_bw_Bps))


def _none_where(mask: np.ndarray, names: Any) -> np.ndarray:
    """``np.where(mask, "none", names)``: a copy of ``names`` written over at ``mask`` (np.where
    on str arrays costs 2-4x that, measured), with the dtype np.where gives.
    """
    mask, names = np.asarray(mask, bool), np.asarray(names)  # a mask of one value too, as np.where takes it
    out = np.array(np.broadcast_to(names, np.broadcast_shapes(mask.shape, names.shape)),
                   dtype=np.result_type(np.asarray("none"), names))
    out[mask] = "none"
    return out


def collective_options(op: str, size_bytes: Any, span: GroupSpan, hierarchy: AnyHierarchy) -> list[Option]:
    """Every (time s, algorithm, protocol, asymptotic busbw B/s) candidate NCCL would weigh
    for ``op`` (all-reduce, all-gather, reduce-scatter, broadcast); ``collective_cost`` picks
    the fastest. Exposed so an analysis can print each candidate's parts.
    """
    options, fill = _ranked_options(op, size_bytes, span, hierarchy)
    return [(o[0] + fill, *o[1:]) if o[1] == "nvls" else o for o in options] if fill is not None else options


def _ranked_options(op: str, size_bytes: Any, span: GroupSpan,
                    hierarchy: AnyHierarchy) -> tuple[list[Option], Any]:
    """The candidates as NCCL's tuning model times them, which is how NCCL picks one
    (tuning.cc ncclTopoGetAlgoTime: "time = lat * latCount + nBytes / (1000 * bw)", no term for
    chunks or pipelining), and the NVLS pipeline fill that model leaves out (None without NVLS):
    the time an NVLS option takes is its ranked time plus the fill.
    """
    options = _ring_times(op, size_bytes, span, hierarchy)
    fill: Any = None
    if op == "all_reduce":
        options += _tree_times(size_bytes, span, hierarchy)
        nvls = _nvls_time(size_bytes, span, hierarchy)
        if nvls is not None:
            options.append(nvls[0])
            fill = nvls[1]
    if op in ("all_reduce", "reduce_scatter", "all_gather"):
        sharp = _sharp_time(op, size_bytes, span, hierarchy)
        if sharp is not None:
            options.append(sharp)
    return options, fill


def collective_cost(op: str, size_bytes: Any, span: GroupSpan, hierarchy: AnyHierarchy,
                    algorithm: str | None = None) -> CollectiveCost:
    """Fastest (or forced-``algorithm``) way to run ``op`` on ``size_bytes`` per rank."""
    batch = ops.is_batch(size_bytes, span.n)
    if not batch and (span.n <= 1 or size_bytes <= 0):
        return ZERO_COST
    if op not in OPS:
        raise SpecError("op", f"must be one of {', '.join(OPS)} (got {op!r})")
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise SpecError("algorithm", f"must be one of {', '.join(ALGORITHMS)} (got {algorithm!r})")
    if op == "all_to_all":
        cost = _all_to_all(size_bytes, span, hierarchy)
    elif op == "send_recv":
        cost = _send_recv(size_bytes, span, hierarchy)
    else:
        options, fill = _ranked_options(op, size_bytes, span, hierarchy)
        if fill is not None:  # NCCL ranks by its model; the NVLS option then takes its fill too
            options = [(*o, fill if o[1] == "nvls" else 0.0) for o in options]
        best = ops.select_min(options)
        if algorithm is not None:
            forced = [o for o in options if o[1] == algorithm]
            if forced:
                chosen = ops.select_min(forced)
                # A point the forced algorithm cannot serve takes the fastest of all (as NCCL falls back).
                best = tuple(ops.where(np.isfinite(chosen[0]) if batch else True, c, b)
                             for c, b in zip(chosen, best, strict=True))
        t, algo, proto, busbw = best[:4]
        if len(best) > 4:
            t = t + best[4]
        # Reported: the bus bandwidth achieved at this size, latency included (nccl-tests'
        # busbw = size * bus_factor / time); the bottleneck: the chosen algorithm's asymptote.
        # (a batch's bus factor is the ring's, built with its other parts: _ring_fixed)
        factor = _fixed("ring", op, span, hierarchy, _ring_fixed)[0] if batch else bus_factor(op, span.n)
        cost = CollectiveCost(t, algo, proto, size_bytes * factor / t, busbw)
    if not batch:
        return cost
    return _zero_where(ops.logical_or(span.n <= 1, size_bytes <= 0), cost)
