"""The interconnect as a hierarchy of tiers, and where a communication group sits in it.

Tier 0 is the scale-up domain (NVLink/NVSwitch); tiers 1.. are the scale-out network
(leaf, spine, core). Fabric plugins build the tiers from the cluster spec; the core's
collective algorithms (``collectives.py``) only see this description.

Placement follows Megatron-Core's rank order (``tp-cp-ep-dp-pp`` by default:
tensor-parallel ranks are adjacent, pipeline ranks farthest apart). A group of size ``n``
whose members are ``stride`` ranks apart occupies a contiguous block of ``n*stride`` GPUs.

One scenario has one :class:`Hierarchy`; a batch of points (``twin.core.ops``) has a
:class:`HierarchyBatch`: the distinct hierarchies of its clusters as tables, and per point
the row of its own. Both answer the same questions (``up_bw``, ``bw_at(tier)``, ...), so
collective costing is written once for either.

Links. Tier ``j`` of a hierarchy also names a class of links: for ``j >= 1`` the links that
enter a tier-``j`` switch from below (the NIC links for the leaf, the leaf uplinks for the
spine, ...), whose capacity per GPU is ``bw_at(j) / oversubscription_at(j)``; for ``j = 0``
a GPU's NVLink ports. By symmetry every GPU of a parallel group loads its links alike, so a
group's traffic is costed per GPU and per link class, never per GPU pair (O(1) in the GPU
count). ``shares`` (per link class, default all 1) is the fraction of each class's capacity
a group gets while other traffic shares it (``twin.core.contention``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.scale_up_shapes import UpShape, UpShapeBatch, batch_up_shape, up_shape_of

# Span of the padding tiers of a table (hierarchies with fewer tiers): spans no group.
_NO_SPAN = -1


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
    ``simple_only``: the transport across this tier carries only NCCL's Simple protocol
    (LL and LL128 need the network to deliver 8- and 128-byte stores in order; e.g. EFA
    under aws-ofi-nccl, which sets NCCL_PROTO=simple where the endpoint cannot).
    ``nvlink_links``: NVLink links per GPU into the domain's switches (tier 0 of an NVLink
    fabric; 0 otherwise), from which NCCL sizes its p2p channels (``nccl_tuning.p2p_channels``).
    ``mesh_peer_share`` / ``torus_axes``: a scale-up domain that is not a switch (tier 0 only;
    ``twin.core.scale_up_shapes``): a fully connected mesh, the share of ``bw_Bps`` the links to
    one peer carry; or a torus, per axis innermost first (size, the share of ``bw_Bps`` one
    direction of its ring carries, whether it wraps round). Either way a group gets only the
    links that join its members, and ``latency_s`` is one hop's; such a domain leaves
    ``a2a_bw_Bps`` unset (its shape bounds all-to-all).
    ``nested``: a direct network's tier whose ``bw_Bps`` already holds the links of the tiers
    below it (a torus's tier i: the rings of dimensions 1..i, run concurrently; Jain &
    Sabharwal, ICS 2010): a group whose top is this tier runs on all of them at once, so no tier
    below bounds it (in a switched tree each tier's uplinks are separate links, and do).
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
    simple_only: bool = False
    nvlink_links: int = 0
    mesh_peer_share: float = 0.0
    torus_axes: tuple[tuple[int, float, bool], ...] = ()
    nested: bool = False


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Tiers from the scale-up domain outwards, plus per-node NIC sharing."""

    tiers: tuple[Tier, ...]
    gpus_per_node: int
    nic_share: float = 1.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    shares: tuple[float, ...] = ()
    # NCCL's latency factor for a multi-node Simple-protocol ring all-reduce, which depends on
    # the GPUs' compute capability (tuning.cc, ncclTopoGetAlgoTime: "lat *= minCompCap < 80 ?
    # 1.9 : 1.4; // Plateau effect of ring"); the default is the pre-Ampere figure.
    ring_plateau: float = 1.9
    # NCCL's LL busBw cap on one node for the GPUs' generation, B/s (``nccl_tuning``,
    # llMaxBws N1: "for single node, we look at GPU type"); the default is Volta's, as above.
    ll_max_bw: float = 39.0e9
    # NCCL's NVLS channel (CTA) count for the GPUs' generation, for a group inside one NVLink
    # domain and for one across domains (``nccl_tuning.NVLS_CHANNELS``); the default is Hopper's.
    nvls_channels: int = 16
    nvls_channels_multi: int = 16
    # NCCL's CollNet Direct (SHARP) all-reduce busBw per unit of intra-node bandwidth: its GPU/NIC
    # factor and its sm90 discount (``nccl_tuning.collnet_direct_bw``); 1.0: a NIC per GPU, pre-Hopper.
    collnet_direct_bw: float = 1.0
    # What NCCL's model takes from the hosts' CPU (``Cluster.host_cpu``, ``nccl_tuning``): the network
    # post overhead per ring step across nodes, us, and the LL cap on 2 / more nodes, B/s; the
    # defaults are NCCL's Intel/other figures.
    net_overhead_us: float = 1.0
    ll_max_bw_two_nodes: float = 39.0e9
    ll_max_bw_more_nodes: float = 20.4e9
    # NCCL's p2p channels for the domain's GPUs (``nccl_tuning.p2p_channels``: p2pnChannels, and
    # the channels a peer behind NVLink asks for) and the bandwidth NCCL provisions per p2p channel,
    # half a link's (B/s); all 0 where the scale-up fabric is not NVLink: the flat p2p model.
    p2p_channels: int = 0
    p2p_peer_channels: int = 0
    p2p_channel_bw: float = 0.0
    # The parts of collective costs on these tiers that no link share changes, by value
    # (``collectives._fixed``): shared with its share views (``with_shares``), not part of
    # its value (equality, hash, repr, pickle); a copy made any other way starts empty.
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    # The scale-up domain's shape when it is not a switch (``scale_up_shapes.up_shape_of`` of
    # tier 0; None: a switch), derived from the tiers, so not part of the value either.
    up_shape: UpShape | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "up_shape", up_shape_of(self.tiers[0]) if self.tiers else None)

    def __getstate__(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self) if f.init]

    def __setstate__(self, state: list[Any]) -> None:
        for f, value in zip((f for f in fields(self) if f.init), state, strict=True):
            object.__setattr__(self, f.name, value)
        object.__setattr__(self, "_memo", {})
        self.__post_init__()

    def share_at(self, tier: Any) -> Any:
        """Fraction of link class ``tier``'s capacity this traffic gets (1: it has it alone)."""
        shares = self.shares
        return shares[tier] if tier < len(shares) else 1.0

    def with_shares(self, shares: Any) -> Hierarchy:
        """The same hierarchy as seen by traffic that gets ``shares`` of each link class
        (of what this view already gives it).
        """
        mine = self.shares
        # tuple([...]), not tuple(generator): one frame, not one resumption per tier (timeit)
        got = tuple([float(x) * (mine[j] if j < len(mine) else 1.0) for j, x in enumerate(shares)])
        # A copy of every slot, then the shares: ``dataclasses.replace`` less its per-call
        # field walk and ``__init__`` (half the time, measured with timeit: 3.7 us against
        # 6.9). The memo goes with the copy: the same tiers, the same share-free parts.
        view = object.__new__(Hierarchy)
        for name, value in zip(_SLOTS, _SLOT_VALUES(self), strict=True):
            _SET(view, name, value)
        _SET(view, "shares", got)
        return view

    @property
    def scale_up(self) -> Tier:
        """Tier 0, the NVLink/NVSwitch domain."""
        return self.tiers[0]

    @property
    def domain_gpus(self) -> int:
        """GPUs in one scale-up domain."""
        return self.tiers[0].span_gpus

    # The questions collective costing asks (the same on a HierarchyBatch).
    @property
    def up_bw(self) -> float:
        """Scale-up bandwidth per GPU per direction (the share this traffic gets of it)."""
        bw = self.tiers[0].bw_Bps
        return bw * self.shares[0] if self.shares else bw

    @property
    def up_a2a_bw(self) -> float:
        """Scale-up bandwidth for all-to-all traffic (the plain bandwidth when not stated)."""
        up = self.tiers[0]
        bw = up.a2a_bw_Bps or up.bw_Bps
        return bw * self.shares[0] if self.shares else bw

    @property
    def up_nvls_bw(self) -> float:
        """NVLS all-reduce bandwidth per GPU, 0 without in-switch reduction."""
        up = self.tiers[0]
        bw = up.nvls_bw_Bps if up.reduction == "nvls" and up.nvls_bw_Bps > 0 else 0.0
        return bw * self.shares[0] if self.shares else bw

    def bw_at(self, tier: Any) -> Any:
        """Bandwidth per GPU of ``tier`` (an index, or one per point)."""
        return self.tiers[tier].bw_Bps

    def oversubscription_at(self, tier: Any) -> Any:
        """Cumulative oversubscription below ``tier``."""
        return self.tiers[tier].oversubscription

    def latency_at(self, tier: Any) -> Any:
        """Per-step latency of a collective step that crosses ``tier``, seconds."""
        return self.tiers[tier].latency_s

    def a2a_cap_at(self, tier: Any) -> Any:
        """All-to-all bandwidth per GPU a scale-out tier states (inf where it states none)."""
        cap = self.tiers[tier].a2a_bw_Bps if tier else 0.0
        return cap * self.share_at(tier) if cap > 0 else math.inf

    def sharp_through(self, tier: Any) -> Any:
        """Whether a scale-out tier up to ``tier`` (inclusive) reduces in the network (SHARP)."""
        return any(t.reduction == "sharp" for t in self.tiers[1:tier + 1])

    def nested_at(self, tier: Any) -> Any:
        """Whether ``tier`` holds the links of the tiers below it (``Tier.nested``)."""
        return self.tiers[tier].nested

    def simple_only_through(self, tier: Any) -> Any:
        """Whether a scale-out tier up to ``tier`` (inclusive) carries only NCCL's Simple protocol."""
        for t in self.tiers[1:tier + 1]:  # noqa: SIM110 - a loop: this runs on every scalar call
            if t.simple_only:
                return True
        return False

    def link_capacity(self, tier: int) -> float:
        """Capacity per GPU of link class ``tier`` alone (NVLink for 0; links into tier ``j``)."""
        t = self.tiers[tier]
        return t.bw_Bps / t.oversubscription if tier else t.bw_Bps

    def top_tier(self, footprint: Any) -> Any:
        """The first tier spanning ``footprint`` GPUs (else the last)."""
        for i, tier in enumerate(self.tiers):
            if tier.span_gpus >= footprint:
                return i
        return len(self.tiers) - 1

    def span_below(self, tier: Any) -> Any:
        """GPUs under one switch of the tier just below ``tier`` (the domain for tier 0)."""
        return self.tiers[tier - 1].span_gpus if tier >= 1 else self.tiers[0].span_gpus


# Every slot of a Hierarchy (its fields, the memo included) and a reader of them all at once,
# for its share views (``Hierarchy.with_shares``); a frozen dataclass's slots are set through
# ``object.__setattr__``.
_SLOTS = tuple(f.name for f in fields(Hierarchy))
_SLOT_VALUES = operator.attrgetter(*_SLOTS)
_SET = object.__setattr__

# What a batch reads per point of each point's hierarchy (name, dtype), expanded to the points
# when the batch is built and taken with them (``HierarchyBatch.take``).
_PER_POINT: tuple[tuple[str, Any], ...] = (
    ("gpus_per_node", np.int64), ("domain_gpus", np.int64), ("up_bw", np.float64), ("up_a2a_bw", np.float64),
    ("up_nvls_bw", np.float64), ("ring_plateau", np.float64), ("ll_max_bw", np.float64),
    ("nvls_channels", np.int64), ("nvls_channels_multi", np.int64), ("collnet_direct_bw", np.float64),
    ("net_overhead_us", np.float64), ("ll_max_bw_two_nodes", np.float64), ("ll_max_bw_more_nodes", np.float64),
    ("p2p_channels", np.int64), ("p2p_peer_channels", np.int64), ("p2p_channel_bw", np.float64),
)


class HierarchyBatch:
    """The hierarchies of a batch of points: per distinct hierarchy a row of tables.

    ``rows`` is, per point, the index of its hierarchy in ``hierarchies``. Tables are
    padded to the longest hierarchy; padded tiers span no GPUs and are never the top.
    """

    def __init__(self, hierarchies: Sequence[Hierarchy], rows: np.ndarray) -> None:
        self.hierarchies = tuple(hierarchies)
        self.rows = rows
        # Per point and link class, the share of capacity the traffic gets (None: all of it).
        self.shares: np.ndarray | None = None
        self._per_point: dict[str, np.ndarray] = {}  # tables expanded to the points, when read
        # Per group span and pattern, its link-class costing (collectives.net_seconds_per_byte).
        self._net_memo: dict[Any, Any] = {}
        # Per group span, the parts of its costing no link share changes (collectives._fixed),
        # shared with the share views of these points (with_shares), not with subsets (take),
        # which read the rows of their batch's (_fixed_from: its memo and the rows taken).
        self._fixed_memo: dict[Any, Any] = {}
        self._fixed_from: tuple[dict[Any, Any], np.ndarray] | None = None
        width = max(len(h.tiers) for h in self.hierarchies)
        n = len(self.hierarchies)

        def table(attr: str, pad: float, dtype: type = np.float64) -> np.ndarray:
            out = np.full((n, width), pad, dtype=dtype)
            for i, h in enumerate(self.hierarchies):
                out[i, :len(h.tiers)] = [getattr(t, attr) for t in h.tiers]
            return out

        self._bw = table("bw_Bps", 0.0)
        self._over = table("oversubscription", 1.0)
        self._lat = table("latency_s", 0.0)
        a2a = table("a2a_bw_Bps", 0.0)
        a2a[:, 0] = 0.0  # tier 0's is the scale-up all-to-all bandwidth (up_a2a_bw)
        self._a2a_cap = np.where(a2a > 0, a2a, np.inf)
        self._span = table("span_gpus", _NO_SPAN, np.int64)
        # Cumulative "some tier in 1..i reduces in the network" / "carries only Simple".
        self._sharp = self._cumulative(lambda t: t.reduction == "sharp", width)
        self._simple_only = self._cumulative(lambda t: t.simple_only, width)
        self._nested = table("nested", False, bool)
        self._last = np.asarray([len(h.tiers) - 1 for h in self.hierarchies], np.int64)
        for name, dtype in _PER_POINT:  # each point's hierarchy's figure (up_bw from the table above)
            setattr(self, name, self._bw[rows, 0] if name == "up_bw" else
                    np.asarray([getattr(h, name) for h in self.hierarchies], dtype)[rows])
        # Each point's scale-up shape (None when every domain is a switch: scale_up_shapes).
        self.up_shape: UpShapeBatch | None = batch_up_shape([h.up_shape for h in self.hierarchies], rows)

    def _cumulative(self, test: Any, width: int) -> np.ndarray:
        """Per hierarchy and tier i, whether ``test`` holds for some scale-out tier in 1..i."""
        out = np.zeros((len(self.hierarchies), width), dtype=bool)
        for i, h in enumerate(self.hierarchies):
            acc = False
            for j, t in enumerate(h.tiers):
                acc = acc or (j >= 1 and bool(test(t)))
                out[i, j] = acc
        return out

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        """Tiers of the longest hierarchy (the tables' width)."""
        return int(self._bw.shape[1])

    def bw_table(self) -> np.ndarray:
        """Bandwidth per GPU of every tier, per point (points x width)."""
        got = self._per_point.get("bw")
        if got is None:
            got = self._per_point["bw"] = ops.gather(self._bw, self.rows)
        return got

    def oversubscription_table(self) -> np.ndarray:
        """Cumulative oversubscription below every tier, per point (points x width)."""
        got = self._per_point.get("over")
        if got is None:
            got = self._per_point["over"] = ops.gather(self._over, self.rows)
        return got

    def share_at(self, tier: Any) -> Any:
        """Share of link class ``tier`` per point (1 where the traffic has it alone)."""
        if self.shares is None:
            return 1.0
        return self.shares[np.arange(len(self.rows)), np.asarray(tier)] if np.ndim(tier) else self.shares[:, tier]

    def with_shares(self, shares: np.ndarray) -> HierarchyBatch:
        """The same points as seen by traffic that gets ``shares`` (points x width) of each link
        class (of what this view already gives it, as ``Hierarchy.with_shares``).
        """
        out = object.__new__(HierarchyBatch)
        out.__dict__.update(self.__dict__)
        out._net_memo = {}
        out.shares = shares if self.shares is None else shares * self.shares
        s0 = shares[:, 0]
        out.up_bw, out.up_a2a_bw, out.up_nvls_bw = self.up_bw * s0, self.up_a2a_bw * s0, self.up_nvls_bw * s0
        return out

    def bw_at(self, tier: Any) -> np.ndarray:
        """Bandwidth per GPU of ``tier`` per point."""
        return self._bw[self.rows, tier]

    def oversubscription_at(self, tier: Any) -> np.ndarray:
        """Cumulative oversubscription below ``tier`` per point."""
        return self._over[self.rows, tier]

    def latency_at(self, tier: Any) -> np.ndarray:
        """Per-step latency of a collective step that crosses ``tier``, per point."""
        return self._lat[self.rows, tier]

    def a2a_cap_at(self, tier: Any) -> np.ndarray:
        """All-to-all bandwidth per GPU a scale-out tier states, per point (inf where none)."""
        cap = self._a2a_cap[self.rows, tier]
        return cap if self.shares is None else cap * self.share_at(tier)

    def sharp_through(self, tier: Any) -> np.ndarray:
        """In-network reduction in a scale-out tier up to ``tier``, per point."""
        return self._sharp[self.rows, tier]

    def nested_at(self, tier: Any) -> np.ndarray:
        """Whether ``tier`` holds the links of the tiers below it (``Tier.nested``), per point."""
        return self._nested[self.rows, tier]

    def simple_only_through(self, tier: Any) -> np.ndarray:
        """A scale-out tier up to ``tier`` carries only NCCL's Simple protocol, per point."""
        return self._simple_only[self.rows, tier]

    def top_tier(self, footprint: Any) -> np.ndarray:
        """Per point, the first tier spanning ``footprint`` GPUs (else the last)."""
        spans = ops.gather(self._span, self.rows)
        ok = spans >= np.asarray(footprint).reshape(-1, 1)
        # The first column that holds, found column by column from the last (numpy's
        # any/argmax along short rows cost ~10x more: ops.row_max).
        first = ops.gather(self._last, self.rows)
        for j in range(ok.shape[1] - 1, -1, -1):
            first = np.where(ok[:, j], j, first)
        return first

    def span_below(self, tier: Any) -> np.ndarray:
        """GPUs under one switch of the tier below ``tier`` (the domain for tier 0), per point."""
        below = np.maximum(np.asarray(tier) - 1, 0)
        return np.where(np.asarray(tier) >= 1, self._span[self.rows, below], self._span[self.rows, 0])

    def point(self, i: int) -> Hierarchy:
        """The hierarchy of point ``i`` (with its contention shares, if any)."""
        h = self.hierarchies[int(self.rows[i])]
        if self.shares is None:
            return h
        shares = self.shares[i, :len(h.tiers)]
        return h if bool((shares == 1.0).all()) else h.with_shares(shares)

    def take(self, index: np.ndarray) -> HierarchyBatch:
        """The same hierarchies for the points in ``index``."""
        out = object.__new__(HierarchyBatch)
        out.__dict__.update(self.__dict__)
        out._per_point = {}
        out._net_memo = {}
        out._fixed_memo = {}
        out._fixed_from = (self._fixed_memo, index)
        out.rows = ops.gather(self.rows, index)
        for name, _ in _PER_POINT:
            setattr(out, name, ops.gather(getattr(self, name), index))
        if self.up_shape is not None:
            out.up_shape = self.up_shape.take(np.asarray(index))
        if self.shares is not None:
            out.shares = ops.gather(self.shares, index)
        return out


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """Where one communication group sits.

    ``n``: ranks; ``k``: ranks per scale-up domain; ``m``: domains spanned;
    ``top``: index of the highest tier its traffic must reach; ``k_top``: ranks of the
    group under one subtree of the tier just below ``top`` (for oversubscription);
    ``nodes``: nodes spanned (NCCL's nNodes); ``per_tier``: ranks of the group under one
    switch of each tier (index = tier; ``per_tier[0] == k``), which sets how much of its
    traffic leaves each subtree. For a batch each is an array (``per_tier``: points x tiers).
    """

    n: Any
    k: Any
    m: Any
    top: Any
    k_top: Any
    nodes: Any
    per_tier: Any = ()
    # One scenario's fields as one plain tuple (None for a batch's): what caches key a group
    # by, hashed and compared in C (a dataclass's own __hash__ and __eq__ run in Python).
    _key: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = (self.n, self.k, self.m, self.top, self.k_top, self.nodes, self.per_tier)
        if not ops.is_batch(*key):
            object.__setattr__(self, "_key", key)

    def point(self, i: int) -> GroupSpan:
        """Point ``i`` of a batch's spans, as one scenario's span."""
        def at(v: Any) -> int:
            return int(np.asarray(v).reshape(-1)[i]) if np.ndim(v) else int(v)
        per = self.per_tier
        tiers = tuple(int(x) for x in (per[i] if np.ndim(per) == 2 else per))
        return GroupSpan(n=at(self.n), k=at(self.k), m=at(self.m), top=at(self.top), k_top=at(self.k_top),
                         nodes=at(self.nodes), per_tier=tiers)


SINGLE = GroupSpan(n=1, k=1, m=1, top=0, k_top=1, nodes=1)


def _per_unit(n: Any, stride: Any, span: Any) -> Any:
    """Ranks of a group (``n`` ranks, ``stride`` apart) under one unit of ``span`` GPUs.

    ``span // stride`` is 0 when the stride exceeds the span, which the floor of 1 covers.
    """
    return ops.maximum(1, ops.minimum(n, span // stride))


def place_group(n: Any, stride: Any, hierarchy: Hierarchy | HierarchyBatch) -> GroupSpan:
    """The span of a group of ``n`` ranks spaced ``stride`` apart (contiguous block)."""
    if not ops.is_batch(n, stride):
        return _place_one(n, stride, hierarchy)  # type: ignore[arg-type]
    n = np.asarray(n, np.int64)
    stride = np.broadcast_to(np.asarray(stride, np.int64), n.shape)
    h = hierarchy
    k = _per_unit(n, stride, h.domain_gpus)
    m = -(-n // k)
    k_node = _per_unit(n, stride, h.gpus_per_node)
    nodes = -(-n // k_node)
    multi = m > 1
    top = np.where(multi, h.top_tier(n * stride), 0)
    k_top = np.where(multi, _per_unit(n, stride, h.span_below(top)), n)
    alone = n <= 1
    spans = h._span[h.rows]
    per_tier = np.maximum(1, np.minimum(n[:, None], spans // stride[:, None]))
    return GroupSpan(n=np.where(alone, 1, n), k=np.where(alone, 1, k), m=np.where(alone, 1, m),
                     top=np.where(alone, 0, top), k_top=np.where(alone, 1, k_top),
                     nodes=np.where(alone, 1, nodes), per_tier=per_tier)


def _place_one(n: int, stride: int, hierarchy: Hierarchy) -> GroupSpan:
    if n <= 1:
        return SINGLE
    dom = hierarchy.domain_gpus
    k = _per_unit(n, stride, dom)
    m = math.ceil(n / k)
    nodes = math.ceil(n / _per_unit(n, stride, hierarchy.gpus_per_node))
    per_tier = tuple([_per_unit(n, stride, t.span_gpus) for t in hierarchy.tiers])  # as in with_shares
    if m == 1:
        return GroupSpan(n=n, k=k, m=1, top=0, k_top=n, nodes=nodes, per_tier=per_tier)
    top = hierarchy.top_tier(n * stride)
    k_top = _per_unit(n, stride, hierarchy.span_below(top))
    return GroupSpan(n=n, k=k, m=m, top=top, k_top=k_top, nodes=nodes, per_tier=per_tier)
