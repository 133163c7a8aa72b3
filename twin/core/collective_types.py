"""What every collective's costing shares: the ops and algorithms it names, the
:class:`CollectiveCost` it returns, the bus factor (nccl-tests PERFORMANCE.md) and the
points of a batch that cost nothing.

Conventions (nccl-tests PERFORMANCE.md): ``size`` is the per-rank buffer in bytes;
busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for all-gather, reduce-scatter and
all-to-all, * 1 for broadcast and send/recv.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.topology import Hierarchy, HierarchyBatch

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("ring", "tree", "nvls", "sharp", "direct")

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
