"""Cost of one collective on a tier hierarchy: algorithm x protocol, NCCL-style.

The model follows NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc): for each
algorithm (ring, tree, NVLS, CollNet/SHARP) and protocol (LL, LL128, Simple) the time is
``latency + bytes / algorithm_bandwidth`` and the fastest is chosen, unless an algorithm
is forced. Bandwidths come from the tiers (``topology.py``), which fabric plugins build.

Conventions (nccl-tests PERFORMANCE.md): ``size`` is the per-rank buffer in bytes;
busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for all-gather, reduce-scatter and
all-to-all, * 1 for broadcast and send/recv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from twin.core.errors import SpecError
from twin.core.topology import GroupSpan, Hierarchy
from twin.core.units import US

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("ring", "tree", "nvls", "sharp", "direct")

# NCCL tuning.cc (v2.7, the last version with the full table inline): base latency per
# algorithm/protocol and per-step hardware latency for NVLink and network hops, in us.
_BASE_LAT = {"ring": {"LL": 3.6, "LL128": 10.0, "Simple": 8.4},
             "tree": {"LL": 4.4, "LL128": 4.4, "Simple": 0.0}}
_HW_LAT_NVLINK = {"ring": {"LL": 0.47, "LL128": 1.9, "Simple": 3.4},
                  "tree": {"LL": 0.52, "LL128": 1.2, "Simple": 28.0}}
_HW_LAT_NET = {"ring": {"LL": 2.7, "LL128": 4.0, "Simple": 9.6},
               "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 50.0}}
# Fraction of the link bandwidth each protocol delivers (tuning.cc: LL carries 8 bytes of
# payload per 16-byte line and NCCL models it at 1/4 for all-reduce; LL128 120/128).
_PROTO_BW = {"LL": 0.25, "LL128": 0.92, "Simple": 1.0}
# Simple-protocol multi-node ring all-reduce latency plateau factor (tuning.cc: "lat *= 1.9").
_RING_PLATEAU = 1.9
# Tree bandwidth factor (tuning.cc: busBw * 0.9 for trees).
_TREE_BW = 0.9
# NVLS and SHARP (CollNet) pipelines: chunked in-network reduction has a larger fixed cost
# than a ring step; fitted to the DGX H100 nccl-tests curve in validation/reference
# (mid-size all-reduce 8-64 MB) and NCCL >= 2.17 tuning.cc NVLS base latency (~25 us).
_NVLS_LAT_US = 50.0
_SHARP_LAT_US = 30.0
# All-to-all / send-recv: one message per peer; NCCL p2p base latency per peer operation.
_P2P_BASE_US = 8.0
_P2P_PER_PEER_US = 0.5


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """Time of one collective and how it was achieved."""

    time_s: float
    algorithm: str
    protocol: str
    busbw_Bps: float
    bottleneck_bw_Bps: float = 0.0


ZERO_COST = CollectiveCost(0.0, "none", "none", 0.0, 0.0)


def bus_factor(op: str, n: int) -> float:
    """Busbw / algbw for ``op`` on ``n`` ranks (nccl-tests PERFORMANCE.md)."""
    if n <= 1:
        return 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _inter_bw(span: GroupSpan, h: Hierarchy, crossing: float) -> float:
    """Per-group bandwidth across domains: k members' NIC shares, less oversubscription."""
    tier = h.tiers[span.top]
    penalty = max(1.0, tier.oversubscription * crossing)
    return tier.bw_Bps * span.k / penalty


def _ring_times(op: str, size: float, span: GroupSpan, h: Hierarchy) -> list[tuple[float, str, str, float]]:
    n, m = span.n, span.nodes
    up = h.scale_up.bw_Bps
    if span.m > 1:
        bw = min(up, _inter_bw(span, h, crossing=span.k / max(span.k_top, 1)))
    else:
        bw = up
    nsteps = 2 * (n - 1) if op == "all_reduce" else (n - 1 if op in ("all_gather", "reduce_scatter") else n)
    ninter = 2 * (m - 1) if op == "all_reduce" else (m - 1 if op in ("all_gather", "reduce_scatter") else m)
    ninter = min(ninter, nsteps)
    factor = bus_factor(op, n)
    out = []
    for proto, pbw in _PROTO_BW.items():
        lat = _BASE_LAT["ring"][proto] + (nsteps - ninter) * _HW_LAT_NVLINK["ring"][proto] \
            + ninter * _HW_LAT_NET["ring"][proto]
        if proto == "Simple" and m > 1 and op == "all_reduce":
            lat *= _RING_PLATEAU
        busbw = bw * pbw
        out.append((size * factor / busbw + lat * US, "ring", proto, busbw))
    return out


def _tree_times(size: float, span: GroupSpan, h: Hierarchy) -> list[tuple[float, str, str, float]]:
    if span.nodes <= 1:
        return []
    up = h.scale_up.bw_Bps
    bw = _TREE_BW * min(up, _inter_bw(span, h, crossing=1.0))
    ppn = max(1, span.n // span.nodes)
    out = []
    for proto, pbw in _PROTO_BW.items():
        lat = _BASE_LAT["tree"][proto] + 2 * ((ppn - 1) * _HW_LAT_NVLINK["tree"][proto]
                                              + math.log2(span.nodes) * _HW_LAT_NET["tree"][proto])
        algbw = 0.5 * bw * pbw  # tuning.cc: trees move 2x the data per byte reduced
        t = size / algbw + lat * US
        out.append((t, "tree", proto, size * bus_factor("all_reduce", span.n) / t))
    return out


def _nvls_time(size: float, span: GroupSpan, h: Hierarchy) -> tuple[float, str, str, float] | None:
    up = h.scale_up
    if up.reduction != "nvls" or up.nvls_bw_Bps <= 0 or span.k < 2:
        return None
    t_intra = size / up.nvls_bw_Bps
    t_inter = 0.0
    if span.m > 1:  # NVLS-tree: in-switch reduction inside the domain, ring/tree across
        t_inter = 2.0 * (span.m - 1) / span.m * size / _inter_bw(span, h, crossing=span.k / max(span.k_top, 1))
    t = max(t_intra, t_inter) + _NVLS_LAT_US * US
    return (t, "nvls", "Simple", size * bus_factor("all_reduce", span.n) / t)


def _sharp_time(size: float, span: GroupSpan, h: Hierarchy) -> tuple[float, str, str, float] | None:
    if span.m <= 1 or not any(t.reduction == "sharp" for t in h.tiers[1:span.top + 1]):
        return None
    up = h.scale_up
    if up.reduction == "nvls" and up.nvls_bw_Bps > 0 and span.k > 1:
        t_intra = size / up.nvls_bw_Bps
    elif span.k > 1:
        t_intra = 2.0 * (span.k - 1) / span.k * size / up.bw_Bps
    else:
        t_intra = 0.0
    # In-network reduction: each GPU sends its 1/k share up once and receives it once.
    t_inter = size / _inter_bw(span, h, crossing=1.0 / max(span.k_top, 1))
    t = max(t_intra, t_inter) + _SHARP_LAT_US * US
    return (t, "sharp", "Simple", size * bus_factor("all_reduce", span.n) / t)


def _all_to_all(size: float, span: GroupSpan, h: Hierarchy) -> CollectiveCost:
    n, k = span.n, span.k
    up = h.scale_up
    a2a_up = up.a2a_bw_Bps or up.bw_Bps
    t_intra = size * (k - 1) / n / a2a_up if k > 1 else 0.0
    t_inter = 0.0
    inter_bw = 0.0
    if span.m > 1:
        tier = h.tiers[span.top]
        crossing = 1.0 - span.k_top / n
        inter_bw = tier.bw_Bps / max(1.0, tier.oversubscription * crossing)
        t_inter = size * (n - k) / n / inter_bw
    lat = (_P2P_BASE_US + (n - 1) * _P2P_PER_PEER_US) * US
    t = max(t_intra, t_inter) + lat
    bottleneck = inter_bw if t_inter >= t_intra and span.m > 1 else a2a_up
    return CollectiveCost(t, "direct", "Simple", size * bus_factor("all_to_all", n) / t, bottleneck)


def dedup_dispatch_cost(token_bytes: float, tokens: float, top_k: int, span: GroupSpan,
                        hierarchy: Hierarchy) -> CollectiveCost:
    """Expert dispatch that sends each token once per destination NVLink domain and
    forwards it to the chosen experts inside the domain over NVLink (DeepEP normal kernels,
    deepseek-ai/DeepEP README; DeepSeek-V3 report §3.2.2). With experts chosen uniformly,
    a token reaches each of the other m-1 domains with probability 1-(1-1/m)^top_k.
    RDMA and NVLink forwarding are pipelined, so the slower of the two sets the time.
    """
    if span.n <= 1 or tokens <= 0:
        return ZERO_COST
    up = hierarchy.scale_up
    a2a_up = up.a2a_bw_Bps or up.bw_Bps
    per_token = token_bytes
    m = span.m
    if m <= 1:
        return _all_to_all(per_token * tokens * top_k, span, hierarchy)
    remote_copies = (m - 1) * (1.0 - (1.0 - 1.0 / m) ** top_k)
    tier = hierarchy.tiers[span.top]
    crossing = 1.0 - span.k_top / span.n
    inter_bw = tier.bw_Bps / max(1.0, tier.oversubscription * crossing)
    t_inter = tokens * per_token * remote_copies / inter_bw
    # Inside each domain every received token is fanned out to its local experts.
    t_intra = tokens * per_token * top_k * (span.k - 1) / span.k / a2a_up if span.k > 1 else 0.0
    lat = (_P2P_BASE_US + (span.n - 1) * _P2P_PER_PEER_US) * US
    t = max(t_inter, t_intra) + lat
    nbytes = tokens * per_token * top_k
    bottleneck = inter_bw if t_inter >= t_intra else a2a_up
    return CollectiveCost(t, "deepep", "Simple", nbytes * bus_factor("all_to_all", span.n) / t, bottleneck)


def _send_recv(size: float, span: GroupSpan, h: Hierarchy) -> CollectiveCost:
    if span.m > 1:
        bw = h.tiers[span.top].bw_Bps
        lat = (_P2P_BASE_US + _HW_LAT_NET["ring"]["Simple"]) * US
    else:
        bw = h.scale_up.bw_Bps
        lat = (_P2P_BASE_US + _HW_LAT_NVLINK["ring"]["Simple"]) * US
    t = size / bw + lat
    return CollectiveCost(t, "direct", "Simple", size / t, bw)


def collective_cost(op: str, size_bytes: float, span: GroupSpan, hierarchy: Hierarchy,
                    algorithm: str | None = None) -> CollectiveCost:
    """Fastest (or forced-``algorithm``) way to run ``op`` on ``size_bytes`` per rank."""
    if span.n <= 1 or size_bytes <= 0:
        return ZERO_COST
    if op == "all_to_all":
        return _all_to_all(size_bytes, span, hierarchy)
    if op == "send_recv":
        return _send_recv(size_bytes, span, hierarchy)
    if op not in OPS:
        raise SpecError("op", f"must be one of {', '.join(OPS)} (got {op!r})")
    options = _ring_times(op, size_bytes, span, hierarchy)
    if op == "all_reduce":
        options += _tree_times(size_bytes, span, hierarchy)
        for extra in (_nvls_time(size_bytes, span, hierarchy), _sharp_time(size_bytes, span, hierarchy)):
            if extra is not None:
                options.append(extra)
    if algorithm is not None:
        if algorithm not in ALGORITHMS:
            raise SpecError("algorithm", f"must be one of {', '.join(ALGORITHMS)} (got {algorithm!r})")
        forced = [o for o in options if o[1] == algorithm]
        options = forced or options
    best = min(options, key=lambda o: o[0])
    t, algo, proto, busbw = best
    return CollectiveCost(t, algo, proto, busbw, busbw)
