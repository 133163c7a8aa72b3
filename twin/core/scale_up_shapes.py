"""What a communication group gets of a scale-up domain that is not a switch: a fully
connected mesh (AMD Infinity Fabric xGMI, Intel Gaudi's on-die RoCE ports) or a torus
(Google TPU ICI, AWS NeuronLink).

A switched domain (NVLink/NVSwitch, UALink) gives any set of peers the GPU's whole scale-up
bandwidth (``Tier.bw_Bps``). A mesh or a torus gives a group only the links that join its
members, so what a collective gets depends on how many ranks of the group share the domain
(``GroupSpan.k``). A fabric plugin describes its domain's shape on tier 0
(``Tier.mesh_peer_share``, ``Tier.torus_axes``); this module turns it into the group's share
of ``bw_Bps``, the steps of a ring collective and the hops each step takes:

- **Mesh** (every pair of GPUs joined by its own links, a share ``s`` of ``bw_Bps`` each): a
  group of ``k`` ranks runs its rings over the ``k - 1`` peer links of each GPU (rings over
  edge-disjoint Hamiltonian cycles of the complete graph K_k, Walecki's decomposition; RCCL
  and HCCL build their channels so on the 8-GPU mesh), ``min(1, (k - 1) s)`` of ``bw_Bps``;
  each ring step is one direct hop, ``k - 1`` steps per pass. One send reaches one peer: ``s``.
- **Torus** (axes innermost first; a group of ``k`` consecutive ranks fills the first axis,
  then the second, ...): the group spans each axis with ``members = min(size, ceil(k /
  product of the axes before))`` ranks. An axis it fills completely and that wraps round is a
  ring both ways at once (two rings, each half the data); an axis it fills partly, or one
  without wraparound, is a line, into which a ring embeds with dilation 2 (Dally & Towles,
  "Principles and Practices of Interconnection Networks", 2004, ch. 5: a ring of a line's
  nodes in the order 0, 2, 4, ..., 5, 3, 1 uses every link once per direction), one ring and
  every step two hops. A collective over several axes runs them concurrently on different
  parts of the data (the bucket algorithm, Jain & Sabharwal, ICS 2010; the multi-dimensional
  all-reduce of TPU pods, Ying et al. 2018, arXiv:1811.06992), so the shares add up; it
  reduces (and gathers) axis by axis, ``sum(members - 1)`` steps per pass instead of a flat
  ring's ``k - 1`` (Jain & Sabharwal; "How to Scale Your Model", Austin et al. 2025, part 3:
  an all-gather over several ICI axes takes the sum of the axes' hop counts).
  All-to-all is bounded by the bisection of the group's sub-torus (Dally & Towles §3.3):
  cutting across its widest axis severs ``2 k / members`` links per direction where that axis
  is a ring (half as many on a line), and uniform traffic sends half of every rank's bytes
  across, so a rank moves at most ``8 s / members`` (``4 s / members`` on a line) of ``bw_Bps``.

Everything here is written once for one scenario (Python numbers) and for a batch (numpy
arrays, one row per point; ``UpShapeBatch``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Torus axes a batch's tables hold (a TPU torus has 3; padding axes have size 1).
MAX_AXES = 6


@dataclass(frozen=True, slots=True)
class UpShape:
    """One scale-up domain's shape: ``mesh`` (the share of ``bw_Bps`` one peer's links carry;
    0: not a mesh), or the torus ``sizes``, ``shares`` (of ``bw_Bps``, one direction of one
    axis's ring) and ``wraps`` per axis; ``hop_s``: the latency of one hop (the tier's).
    """

    mesh: float
    sizes: tuple[int, ...]
    shares: tuple[float, ...]
    wraps: tuple[bool, ...]
    hop_s: float


def up_shape_of(tier: Any) -> UpShape | None:
    """The shape tier 0 states (``Tier.mesh_peer_share``, ``Tier.torus_axes``); None: a switch."""
    axes = tuple(a for a in tier.torus_axes if a[0] > 1)
    if tier.mesh_peer_share <= 0 and not axes:
        return None
    return UpShape(mesh=float(tier.mesh_peer_share), sizes=tuple(int(a[0]) for a in axes),
                   shares=tuple(float(a[1]) for a in axes), wraps=tuple(bool(a[2]) for a in axes),
                   hop_s=float(tier.latency_s))


@dataclass(frozen=True, slots=True)
class UpShapeBatch:
    """The shapes of a batch's points: ``shaped`` per point (False: a switch), ``mesh`` per
    point, ``sizes`` / ``shares`` / ``wraps`` points x ``MAX_AXES`` (padding: size 1), ``hop_s``.
    """

    shaped: np.ndarray
    mesh: np.ndarray
    sizes: np.ndarray
    shares: np.ndarray
    wraps: np.ndarray
    hop_s: np.ndarray

    def take(self, index: np.ndarray) -> UpShapeBatch:
        """The shapes of the points in ``index``."""
        return UpShapeBatch(*(np.asarray(getattr(self, f))[index] for f in self.__slots__))


def batch_up_shape(shapes: Sequence[UpShape | None], rows: np.ndarray) -> UpShapeBatch | None:
    """The per-point tables of ``shapes`` (one per distinct hierarchy; ``rows``: each point's);
    None when no hierarchy has one (every point's domain is a switch).
    """
    if all(s is None for s in shapes):
        return None
    n = len(shapes)
    sizes = np.ones((n, MAX_AXES), np.float64)
    shares = np.zeros((n, MAX_AXES), np.float64)
    wraps = np.zeros((n, MAX_AXES), bool)
    mesh, hop, shaped = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    for i, s in enumerate(shapes):
        if s is None:
            continue
        if len(s.sizes) > MAX_AXES:
            raise ValueError(f"a torus of more than {MAX_AXES} axes")
        shaped[i], mesh[i], hop[i] = True, s.mesh, s.hop_s
        sizes[i, :len(s.sizes)], shares[i, :len(s.shares)], wraps[i, :len(s.wraps)] = s.sizes, s.shares, s.wraps
    return UpShapeBatch(shaped[rows], mesh[rows], sizes[rows], shares[rows], wraps[rows], hop[rows])


def _torus_one(k: int, s: UpShape) -> tuple[float, int, int, float]:
    """(share of bw_Bps, ring steps per pass, hops per step, all-to-all share) of ``k`` ranks."""
    prod, share, steps, hops, widest, widest_cap = 1, 0.0, 0, 1, 1, math.inf
    for size, axis_share, wrap in zip(s.sizes, s.shares, s.wraps, strict=True):
        if k <= prod:
            break
        members = min(size, math.ceil(k / prod))
        ring = wrap and members == size and size > 2  # two GPUs share one link pair: no second ring
        share += (2.0 if ring else 1.0) * axis_share
        steps += members - 1
        if not ring:
            hops = 2
        if members >= widest:
            widest, widest_cap = members, (8.0 if ring else 4.0) * axis_share / members
        prod *= size
    return min(1.0, share), steps, hops, min(share, widest_cap)


def _torus_batch(k: np.ndarray, s: UpShapeBatch) -> tuple[np.ndarray, ...]:
    prod = np.ones(len(k))
    share, steps, hops = np.zeros(len(k)), np.zeros(len(k)), np.ones(len(k))
    widest, cap = np.ones(len(k)), np.full(len(k), np.inf)
    for a in range(s.sizes.shape[1]):
        size, axis_share, wrap = s.sizes[:, a], s.shares[:, a], s.wraps[:, a]
        on = np.logical_and(k > prod, size > 1)
        members = np.minimum(size, np.ceil(k / prod))
        ring = np.logical_and(np.logical_and(wrap, members >= size), size > 2)
        share = share + np.where(on, np.where(ring, 2.0, 1.0) * axis_share, 0.0)
        steps = steps + np.where(on, members - 1, 0.0)
        hops = np.where(np.logical_and(on, ~ring), 2.0, hops)
        wider = np.logical_and(on, members >= widest)
        cap = np.where(wider, np.where(ring, 8.0, 4.0) * axis_share / np.maximum(members, 1.0), cap)
        widest = np.where(wider, members, widest)
        prod = prod * size
    return np.minimum(1.0, share), steps, hops, np.minimum(share, cap)


def group_terms(k: Any, shape: UpShape | UpShapeBatch) -> tuple[Any, Any, Any, Any]:
    """(share of ``bw_Bps``, ring steps per pass, hops per step, all-to-all share) of a group
    with ``k`` ranks in one domain of ``shape`` (module docstring). In a batch, points whose
    domain is a switch get (1, k - 1, 1, 1): the switch's own figures. A group with one rank
    per domain (``k`` 1) crosses none of the domain's links: (1, 0, 1, 1), as on a switch.
    """
    if isinstance(shape, UpShape):
        k = int(k)
        if k <= 1:
            return 1.0, 0, 1, 1.0
        if shape.mesh > 0:
            share = min(1.0, max(k - 1, 0) * shape.mesh)
            return share, max(k - 1, 0), 1, share
        return _torus_one(k, shape)
    k = np.asarray(k, np.float64) * np.ones(len(shape.shaped))
    share, steps, hops, a2a = _torus_batch(k, shape)
    mesh = shape.mesh > 0
    mesh_share = np.minimum(1.0, np.maximum(k - 1, 0.0) * shape.mesh)
    share = np.where(mesh, mesh_share, share)
    steps = np.where(mesh, np.maximum(k - 1, 0.0), steps)
    hops = np.where(mesh, 1.0, hops)
    a2a = np.where(mesh, mesh_share, a2a)
    switch = np.logical_or(~shape.shaped, k <= 1)
    return (np.where(switch, 1.0, share), np.where(switch, np.maximum(k - 1, 0.0), steps),
            np.where(switch, 1.0, hops), np.where(switch, 1.0, a2a))


def pair_share(shape: UpShape | UpShapeBatch) -> Any:
    """Share of ``bw_Bps`` one send to one peer gets: a mesh peer's links, or one direction of
    the innermost torus axis (switch points of a batch: 1).
    """
    if isinstance(shape, UpShape):
        return shape.mesh if shape.mesh > 0 else (shape.shares[0] if shape.shares else 1.0)
    first = np.where(shape.sizes[:, 0] > 1, shape.shares[:, 0], 1.0)
    return np.where(shape.shaped, np.where(shape.mesh > 0, shape.mesh, first), 1.0)


# ----------------------------------------------------------------- the group's bandwidths
def group_up_bw(span: Any, h: Any) -> Any:
    """The scale-up bandwidth per GPU per direction a group of ``span`` gets (``h.up_bw`` on a switch)."""
    shape = h.up_shape
    if shape is None:
        return h.up_bw
    return h.up_bw * group_terms(span.k, shape)[0]


def group_up_a2a_bw(span: Any, h: Any) -> Any:
    """The scale-up all-to-all bandwidth per GPU a group of ``span`` gets (``h.up_a2a_bw`` on a switch)."""
    shape = h.up_shape
    if shape is None:
        return h.up_a2a_bw
    return h.up_a2a_bw * group_terms(span.k, shape)[3]


def pair_up_bw(h: Any) -> Any:
    """The scale-up bandwidth one send to one peer gets (``h.up_bw`` on a switch)."""
    shape = h.up_shape
    if shape is None:
        return h.up_bw
    return h.up_bw * pair_share(shape)
