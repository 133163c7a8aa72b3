"""The reduction collectives' algorithms as NCCL's tuning model costs them (NVIDIA/nccl
src/graph/tuning.cc): ring, double binary tree, NVLS / NVLS-tree and SHARP (CollNet), per
protocol (LL, LL128, Simple), each ``latency + bytes / algorithm_bandwidth``, and the
candidates NCCL ranks for all-reduce, all-gather, reduce-scatter and broadcast
(``collective_options``; ``twin.core.collectives.collective_cost`` picks the fastest).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.core import nccl_tuning as nccl
from twin.core import ops
from twin.core.collective_memo import _by_batch_view, _fixed
from twin.core.collective_types import AnyHierarchy, Option, bus_factor
from twin.core.link_profiles import _inter_bw, _net_latency_us
from twin.core.scale_up_shapes import group_terms, group_up_bw
from twin.core.topology import GroupSpan
from twin.core.units import US

# NCCL's cost-model tables, all from one release (``twin.core.nccl_tuning``, which names each
# line); the tree-correction rows, with the trailing 1.0 from 512 MiB up, also as arrays.
_TREE_CORRECTION_ROWS = {p: (*row, 1.0) for p, row in nccl.TREE_CORRECTION.items()}
_TREE_CORRECTION_ARRAYS = {p: np.asarray(row) for p, row in _TREE_CORRECTION_ROWS.items()}


def _option(t: Any, algorithm: str, protocol: str, busbw: Any, available: Any = True) -> Option | None:
    """One (time, algorithm, protocol, busbw) candidate; points that cannot use it get inf."""
    if type(available) is np.ndarray:
        return (np.where(available, t, np.inf), algorithm, protocol, busbw)
    return (t, algorithm, protocol, busbw) if available else None


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
    up = group_up_bw(span, h)  # h.up_bw, or the group's links of a mesh / torus domain
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
    if h.up_shape is not None:
        return factor, multi, any_multi, ll_cap, _shaped_ring_steps(op, span, h, nsteps)
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


def _shaped_ring_steps(op: str, span: GroupSpan, h: AnyHierarchy, nsteps: Any) -> tuple[Any, ...]:
    """The ring's per-protocol (protocol, bandwidth factor, latency s, available) on a scale-up
    domain that is a mesh or a torus (``twin.core.scale_up_shapes``): the same model as a
    switch's, except that inside one domain a pass takes the shape's steps (a torus reduces
    axis by axis: the sum of its axes' steps, not ``n - 1``) and every step at least its hops'
    latency (``Tier.latency_s`` per hop, where the fabric states one); across domains NCCL's
    step count, each intra-domain step at least one hop's latency. Points of a batch whose
    domain is a switch get exactly the switch's figures.
    """
    n, m = span.n, _nccl_nodes(span)
    multi = span.m > 1
    any_multi = ops.any_(multi)
    _, per_pass, hops, _ = group_terms(span.k, h.up_shape)
    shaped_steps = per_pass * 2 if op == "all_reduce" else (per_pass if op in ("all_gather", "reduce_scatter")
                                                            else per_pass + 1)
    hop_us = hops * h.up_shape.hop_s / US
    if any_multi:
        net_lat = _net_latency_us(span, h)
        ninter = 2 * (m - 1) if op == "all_reduce" else (m - 1 if op in ("all_gather", "reduce_scatter") else m)
        ninter = ops.where(multi, ops.minimum(ninter, nsteps), 0)
        low_latency = _low_latency_protocols(span, h)
        one_per_node = ops.logical_and(multi, n // ops.maximum(m, 1) <= 1)
        intra_steps = ops.where(multi, nsteps - ninter, shaped_steps)
    steps: list[tuple[str, Any, Any, Any]] = []
    for proto, pbw, base, nvlink, overheads, net_ring, net_tree in _RING_STEPS:
        if any_multi:
            intra_multi = ops.maximum(nvlink, overheads * h.net_overhead_us)
            net = ops.maximum(ops.where(one_per_node, net_tree, net_ring), net_lat)
            intra = ops.maximum(ops.where(multi, intra_multi, nvlink), hop_us)
            lat = base + intra_steps * intra + ninter * net
            if proto == "Simple" and op == "all_reduce":
                lat = ops.where(m > 1, lat * h.ring_plateau, lat)
            steps.append((proto, pbw, lat * US, True if proto == "Simple" else _everywhere(low_latency)))
        else:
            steps.append((proto, pbw, (base + shaped_steps * ops.maximum(nvlink, hop_us)) * US, True))
    return tuple(steps)


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
    bw = nccl.TREE_BW * ops.minimum(group_up_bw(span, h), _inter_bw(span, h, "tree"))
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
        direct_bw = nccl.COLLNET_DIRECT_RATIO * h.collnet_direct_bw * group_up_bw(span, h)
        t_intra = ops.where(nvls, size / ops.where(nvls_bw > 0, nvls_bw, 1.0),
                            ops.where(intra, size / direct_bw, 0.0))
        available = ops.logical_and(available, ops.logical_or(nvls, span.k <= nccl.COLLNET_DIRECT_MAX_LOCAL_GPUS))
        if not ops.any_(available):
            return None
    else:  # the domain's part is a ring reduce-scatter / all-gather over NVLink
        t_intra = ops.where(intra, share * size / group_up_bw(span, h), 0.0)
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
