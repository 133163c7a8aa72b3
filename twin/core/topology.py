"""The interconnect as a hierarchy of tiers, and where a communication group sits in it.

Tier 0 is the scale-up domain (NVLink/NVSwitch); tiers 1.. are the scale-out network
(leaf, spine, core). Fabric plugins build the tiers from the cluster spec; the core's
collective algorithms (``collectives.py``) only see this description.

Placement follows Megatron-Core's rank order (``tp-cp-ep-dp-pp`` by default:
tensor-parallel ranks are adjacent, pipeline ranks farthest apart). A group of size ``n``
whose members are ``stride`` ranks apart occupies a contiguous block of ``n*stride`` GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Tier:
    """One level of the interconnect, as seen by one GPU.

    ``span_gpus``: GPUs reachable without leaving this tier (domain size, leaf span...).
    ``bw_Bps``: achievable bandwidth per GPU per direction for traffic that reaches this
    tier (already net of NIC efficiency, ECMP and congestion losses).
    ``latency_s``: per-step latency of a collective step that crosses this tier.
    ``oversubscription``: cumulative down:up ratio below this tier (1 = non-blocking).
    ``reduction``: in-network reduction available here: "nvls", "sharp" or "".
    ``nvls_bw_Bps``: NVLS all-reduce algorithm bandwidth per GPU (tier 0 only).
    """

    name: str
    fabric: str
    span_gpus: int
    bw_Bps: float
    latency_s: float
    oversubscription: float = 1.0
    reduction: str = ""
    nvls_bw_Bps: float = 0.0
    a2a_bw_Bps: float = 0.0


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Tiers from the scale-up domain outwards, plus per-node NIC sharing."""

    tiers: tuple[Tier, ...]
    gpus_per_node: int
    nic_share: float = 1.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def scale_up(self) -> Tier:
        """Tier 0, the NVLink/NVSwitch domain."""
        return self.tiers[0]

    @property
    def domain_gpus(self) -> int:
        """GPUs in one scale-up domain."""
        return self.tiers[0].span_gpus


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """Where one communication group sits.

    ``n``: ranks; ``k``: ranks per scale-up domain; ``m``: domains spanned;
    ``top``: index of the highest tier its traffic must reach; ``k_top``: ranks of the
    group under one subtree of the tier just below ``top`` (for oversubscription);
    ``nodes``: nodes spanned (NCCL's nNodes).
    """

    n: int
    k: int
    m: int
    top: int
    k_top: int
    nodes: int


def place_group(n: int, stride: int, hierarchy: Hierarchy) -> GroupSpan:
    """The span of a group of ``n`` ranks spaced ``stride`` apart (contiguous block)."""
    if n <= 1:
        return GroupSpan(n=1, k=1, m=1, top=0, k_top=1, nodes=1)
    dom = hierarchy.domain_gpus
    footprint = n * stride
    k = max(1, min(n, dom // stride)) if stride <= dom else 1
    m = math.ceil(n / k)
    per_node = hierarchy.gpus_per_node
    k_node = max(1, min(n, per_node // stride)) if stride <= per_node else 1
    nodes = math.ceil(n / k_node)
    if m == 1:
        return GroupSpan(n=n, k=k, m=1, top=0, k_top=n, nodes=nodes)
    top = len(hierarchy.tiers) - 1
    for i, tier in enumerate(hierarchy.tiers):
        if tier.span_gpus >= footprint:
            top = i
            break
    below = hierarchy.tiers[top - 1].span_gpus if top >= 1 else dom
    k_top = max(1, min(n, below // stride)) if stride <= below else 1
    return GroupSpan(n=n, k=k, m=m, top=top, k_top=k_top, nodes=nodes)
