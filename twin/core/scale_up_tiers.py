"""Building tier 0 for a scale-up domain that is a fully connected mesh or a torus.

A fabric plugin gives its link figures; these build the :class:`Tier` the core costs
collectives on (``twin.core.scale_up_shapes`` says what a group gets of it). Both are in
``twin.api``, so a third-party fabric of either shape writes none of this arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

from twin.core.errors import SpecError
from twin.core.topology import Tier


def mesh_tier(name: str, fabric: str, gpus: int, peer_Bps: float, latency_s: float = 0.0) -> Tier:
    """Tier 0 of ``gpus`` accelerators joined pairwise, ``peer_Bps`` per direction between any
    two (every link already at its achievable rate): ``(gpus - 1) x peer_Bps`` per GPU in all,
    each peer's links ``1 / (gpus - 1)`` of it. ``latency_s``: one direct hop.
    """
    if gpus < 1 or peer_Bps <= 0:
        raise SpecError("cluster.scale_up", f"a mesh needs GPUs and a positive peer bandwidth (got {gpus}, {peer_Bps})")
    peers = max(gpus - 1, 1)
    return Tier(name=name, fabric=fabric, span_gpus=gpus, bw_Bps=peers * peer_Bps, latency_s=latency_s,
                mesh_peer_share=1.0 / peers)


def torus_tier(name: str, fabric: str, axes: Sequence[tuple[int, float, bool]], latency_s: float = 0.0) -> Tier:
    """Tier 0 of a torus: per axis, innermost first, (size, the bandwidth per direction a GPU
    has towards one neighbour along it, whether the axis wraps round), every link already at
    its achievable rate. A wrapping axis of more than two GPUs is a ring both ways (twice the
    per-direction bandwidth); two GPUs share one link pair, a ring of two is that pair (once).
    ``latency_s``: one hop.
    """
    kept = [(int(size), float(bw), bool(wrap) and size > 2) for size, bw, wrap in axes if size > 1]
    total = sum((2.0 if wrap else 1.0) * bw for _, bw, wrap in kept)
    span = 1
    for size, _, _ in kept:
        span *= size
    if not kept:  # one GPU: nothing to cross
        return Tier(name=name, fabric=fabric, span_gpus=1, bw_Bps=max((a[1] for a in axes), default=1.0),
                    latency_s=latency_s)
    return Tier(name=name, fabric=fabric, span_gpus=span, bw_Bps=total, latency_s=latency_s,
                torus_axes=tuple((size, bw / total, wrap) for size, bw, wrap in kept))
