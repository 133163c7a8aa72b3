"""Cost of one collective on a tier hierarchy: algorithm x protocol, NCCL-style.

The model follows NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc): for each
algorithm (ring, tree, NVLS, CollNet/SHARP) and protocol (LL, LL128, Simple) the time is
``latency + bytes / algorithm_bandwidth`` and the fastest is chosen, unless an algorithm
is forced. Bandwidths come from the tiers (``topology.py``), which fabric plugins build.

This module picks the fastest candidate and is the entry point of the collectives' costs;
the parts live in modules of one job each, re-exported here: ``collective_types`` (the
ops, :class:`CollectiveCost`, bus factors), ``collective_memo`` (the share-free parts kept
per group), ``link_profiles`` (traffic patterns and link classes), ``collective_algorithms``
(ring, tree, NVLS, SHARP) and ``p2p_collectives`` (all-to-all, send/recv, expert dispatch).

Conventions (nccl-tests PERFORMANCE.md): ``size`` is the per-rank buffer in bytes;
busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for all-gather, reduce-scatter and
all-to-all, * 1 for broadcast and send/recv.

Written once for one scenario and for a batch (``twin.core.ops``): sizes, group spans and
hierarchies may hold one value per point; an algorithm a point cannot use costs it
``inf`` and is never chosen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.core import ops
from twin.core.collective_algorithms import (
    _ranked_options,
    _ring_fixed,
    collective_options,
    dbtree_node_traffic,
)
from twin.core.collective_memo import _fixed
from twin.core.collective_types import (
    ALGORITHMS,
    OPS,
    ZERO_COST,
    AnyHierarchy,
    CollectiveCost,
    Option,
    _zero_where,
    bus_factor,
)
from twin.core.errors import SpecError
from twin.core.link_profiles import PATTERNS, link_profile, link_seconds_per_byte, net_seconds_per_byte
from twin.core.moe_routing import domains_per_token
from twin.core.p2p_collectives import (
    DispatchStages,
    _all_to_all,
    _send_recv,
    dedup_dispatch_cost,
    direct_dispatch_cost,
    dispatch_stages,
)
from twin.core.topology import GroupSpan

__all__ = ["ALGORITHMS", "OPS", "PATTERNS", "ZERO_COST", "AnyHierarchy", "CollectiveCost", "DispatchStages", "Option",
           "bus_factor", "collective_cost", "collective_options", "dbtree_node_traffic", "dedup_dispatch_cost",
           "direct_dispatch_cost", "dispatch_stages", "domains_per_token", "link_profile", "link_seconds_per_byte",
           "net_seconds_per_byte"]


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
