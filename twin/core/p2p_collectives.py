"""Collectives made of point-to-point sends: all-to-all on NCCL's p2p schedule
(``twin.core.p2p``) or at the links' rates, one send to one peer (send/recv), and DeepEP's
expert dispatch, deduplicated per destination domain (``dedup_dispatch_cost``) or sent
directly per selected expert (``direct_dispatch_cost``: its low-latency kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import nccl_tuning as nccl
from twin.core import ops, p2p
from twin.core.collective_algorithms import _nccl_nodes
from twin.core.collective_memo import _fixed
from twin.core.collective_types import ZERO_COST, AnyHierarchy, CollectiveCost, _zero_where, bus_factor
from twin.core.link_profiles import _cross_domain_bw, _net_latency_us, net_seconds_per_byte
from twin.core.moe_routing import dispatch_fanout, domains_per_token
from twin.core.scale_up_shapes import group_up_a2a_bw, pair_up_bw
from twin.core.topology import GroupSpan
from twin.core.units import US

# All-to-all / send-recv latency: one message per peer, a per-operation base and a per-peer cost.
# Not NCCL's: tuning.cc costs collectives only (p2p operations never go through
# ncclTopoGetAlgoTime), and no source at hand gives these; the twin's own figures, a known gap
# (docs/fidelity.md). Their bandwidth side follows NCCL's p2p schedule (``twin.core.p2p``).
_P2P_BASE_US = 8.0
_P2P_PER_PEER_US = 0.5


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
    a2a_up = group_up_a2a_bw(span, h)  # h.up_a2a_bw, or a mesh / torus domain's share for the group
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
    nvl_bw = ops.minimum(group_up_a2a_bw(span, h), ops.where(ops.logical_and(on, k > 1),
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


def direct_dispatch_cost(token_bytes: Any, tokens: Any, top_k: int, span: GroupSpan,
                         hierarchy: AnyHierarchy) -> CollectiveCost:
    """Expert dispatch (or combine) that sends each token once per selected expert, straight to
    the expert's rank, with no forwarding or deduplication: DeepEP's low-latency kernels
    (deepseek-ai/DeepEP docs/legacy.md, "Low-latency kernels with pure RDMA"; its
    tests/test_low_latency.py counts one message per (token, selected expert)). The peers in
    the NVLink domain are written over NVLink (``allow_nvlink_for_low_latency_mode``, on by
    default), the others over RDMA, both at the links' all-to-all rates (``_a2a_stages``).

    Latency: one operation's base and one network step, without the per-peer term of NCCL-style
    p2p (``_p2p_latency``): every (token, expert) write is issued by its own warp through
    GPU-initiated RDMA (NVSHMEM IBGDA), so the messages to different peers are in flight together
    rather than posted peer by peer.
    """
    size = token_bytes * tokens * top_k
    if not ops.is_batch(tokens, span.n, token_bytes) and (span.n <= 1 or tokens <= 0):
        return ZERO_COST
    a2a_up = group_up_a2a_bw(span, hierarchy)
    t_intra, t_inter, inter_bw = _a2a_stages(size, span, hierarchy, a2a_up)
    net = ops.where(span.m > 1, ops.maximum(nccl.HW_LAT_NET["ring"]["Simple"], _net_latency_us(span, hierarchy)), 0.0)
    t = ops.maximum(t_intra, t_inter) + (_P2P_BASE_US + net) * US
    bottleneck = ops.where(ops.logical_and(t_inter >= t_intra, span.m > 1), inter_bw, a2a_up)
    cost = CollectiveCost(t, "deepep-ll", "Simple", size * bus_factor("all_to_all", span.n) / t, bottleneck)
    return _zero_where(ops.logical_or(span.n <= 1, tokens <= 0), cost)


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
    a2a_up = group_up_a2a_bw(span, h)
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
    up = pair_up_bw(h)  # h.up_bw, or the links to one peer of a mesh / torus domain
    if ops.any_(multi):
        bw = ops.where(multi, 1.0 / net_seconds_per_byte(span, h, "p2p"), up)
    else:
        bw = up
    net_step = ops.maximum(nccl.HW_LAT_NET["ring"]["Simple"], _net_latency_us(span, h))
    lat = ops.where(multi, (_P2P_BASE_US + net_step) * US, (_P2P_BASE_US + nccl.HW_LAT_NVLINK["ring"]["Simple"]) * US)
    t = size / bw + lat
    return CollectiveCost(t, "direct", "Simple", size / t, bw)
