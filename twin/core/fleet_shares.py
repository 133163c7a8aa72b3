"""Several jobs on one fabric: where each sits, and the link capacity each gets.

Jobs own whole nodes, anywhere on the shared cluster (``twin.core.fleet_placement``: stated
nodes, a first GPU, or a policy: packed, spread, random). Switches are aligned blocks: a tier-``t`` switch serves
``span_gpus`` consecutive GPUs (the fabric's hierarchy, ``topology``), so the uplinks that
leave a tier-``t`` subtree (link class ``t + 1``) are shared by exactly the jobs with GPUs
in that subtree.

A job costed on its own (``Engine.evaluate``) gets its GPUs' share of every link: the
fabric as if every GPU beside it ran the same traffic. On a shared fabric the share it
gets on link class ``j`` depends on its neighbours in the tier-``(j-1)`` subtrees it
occupies: max-min fair sharing gives each GPU's flows their own share when everyone is
busy, and lets a job use what its neighbours leave idle (Bertsekas & Gallager, "Data
Networks", §6.5.2). So, per link class, a job's capacity relative to its own share is

    1 + sum over neighbours (and idle GPUs) of  gpus_beside / gpus_own * (1 - utilisation)

"alone" is that with every neighbour idle (all of an empty subtree's links for the job),
"shared" with each neighbour's own utilisation of those links (from its estimate). NIC
links (class 1) and NVLink ports (class 0) belong to one node and are never shared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core.errors import SpecError
from twin.core.fleet_placement import node_ranges, place_nodes
from twin.core.topology import Hierarchy


@dataclass(frozen=True, slots=True)
class Placement:
    """The nodes one job holds on the shared cluster (``nodes``, ascending) and its GPU count
    (a job smaller than a node holds that one node).
    """

    nodes: tuple[int, ...]
    gpus: int
    gpus_per_node: int

    @property
    def first(self) -> int:
        """The job's first GPU."""
        return self.nodes[0] * self.gpus_per_node

    @property
    def last(self) -> int:
        """One past the job's last GPU."""
        return self.nodes[-1] * self.gpus_per_node + min(self.gpus, self.gpus_per_node)

    @property
    def contiguous(self) -> bool:
        """Whether the job's nodes are consecutive."""
        return self.nodes[-1] - self.nodes[0] + 1 == len(self.nodes)

    @property
    def per_node(self) -> float:
        """GPUs the job uses on each of its nodes."""
        return self.gpus / len(self.nodes)

    def describe(self) -> str:
        """Where the job runs: its GPU range if contiguous, else its node ranges."""
        if self.contiguous:
            return f"{self.first}..{self.last - 1}"
        return "nodes " + node_ranges(self.nodes)


def place_jobs(gpus: Sequence[int], starts: Sequence[int | None], gpus_per_node: int, total: int,
               path: str = "jobs") -> list[Placement]:
    """Where each job sits: at its stated first GPU, else packed on the lowest free nodes
    (``twin.core.fleet_placement.place_nodes`` for node lists and policies).
    """
    jobs = [{"gpus": n, "first_gpu": s} for n, s in zip(gpus, starts, strict=True)]
    return placements_of(jobs, gpus_per_node, total, path)


def placements_of(jobs: Sequence[Mapping[str, Any]], gpus_per_node: int, total: int,
                  path: str = "jobs") -> list[Placement]:
    """Each job's :class:`Placement` from its ``gpus`` and ``nodes`` / ``first_gpu`` /
    ``placement`` (``twin.core.fleet_placement``); ``total``: the cluster's GPUs.
    """
    for i, job in enumerate(jobs):
        n = int(job["gpus"])
        if n % gpus_per_node and n > gpus_per_node:
            raise SpecError(f"{path}[{i}].gpus", f"a job owns whole nodes: a multiple of {gpus_per_node} (got {n})")
    nodes = place_nodes(jobs, gpus_per_node, -(-total // gpus_per_node), path)
    return [Placement(ns, int(job["gpus"]), gpus_per_node) for ns, job in zip(nodes, jobs, strict=True)]


def neighbours(hierarchy: Hierarchy, placements: Sequence[Placement], job: int) -> list[dict[int, int]]:
    """Per link class ``j`` (index), the GPUs of each other job (key: its index; -1: GPUs no
    job uses) in the tier-``(j-1)`` subtrees job ``job`` occupies. Classes 0 and 1 are empty.
    """
    me = placements[job]
    gpn = me.gpus_per_node
    top_nodes = -(-hierarchy.tiers[-1].span_gpus // gpn)
    cluster_nodes = max(top_nodes, *(p.nodes[-1] + 1 for p in placements))
    owner = np.full(cluster_nodes, -1, np.int64)
    for k, p in enumerate(placements):
        owner[list(p.nodes)] = k
    per_node = np.asarray([p.per_node for p in placements] + [float(gpn)])  # index -1: an idle node's GPUs
    mine = np.asarray(me.nodes)
    out: list[dict[int, int]] = [{}, {}]
    for j in range(2, len(hierarchy.tiers)):
        span = max(1, hierarchy.tiers[j - 1].span_gpus // gpn)  # nodes under one tier-(j-1) switch
        subtrees = np.unique(mine // span)
        idx = (subtrees[:, None] * span + np.arange(span)[None, :]).ravel()
        held = owner[idx[idx < cluster_nodes]]  # a partial top subtree's missing nodes do not exist
        beside: dict[int, int] = {}
        for k in np.unique(held):
            if int(k) == job:
                continue
            gpus = float((held == k).sum()) * per_node[int(k)]
            if gpus:
                beside[int(k)] = round(gpus)
        out.append(beside)
    return out


def job_tier_spans(hierarchy: Hierarchy, placement: Placement) -> list[int]:
    """The job's GPUs under one switch of each scale-out tier below the top, as the fleet
    places it, then the job itself (the top). A job on consecutive nodes has the fleet's
    switch sizes (capped at the job); a job on scattered nodes has its GPUs over the tier's
    subtrees it occupies (a job spread over more switches crosses each tier's uplinks between
    more of them), never fewer than the tier below nor more than the switch serves.
    """
    gpus = placement.gpus
    fleet = [min(t.span_gpus, gpus) for t in hierarchy.tiers[1:-1]]
    if placement.contiguous:
        return [*fleet, gpus]
    gpn = placement.gpus_per_node
    nodes = np.asarray(placement.nodes)
    spans: list[int] = []
    floor = max(1, min(gpus, gpn))
    for tier, cap in zip(hierarchy.tiers[1:-1], fleet, strict=True):
        occupied = len(np.unique(nodes // max(1, tier.span_gpus // gpn)))
        floor = min(cap, max(floor, gpus // occupied))
        spans.append(floor)
    return [*spans, gpus]


def capacity(hierarchy: Hierarchy, placements: Sequence[Placement], job: int,
             utilisation: Sequence[Sequence[float]] | None = None) -> tuple[float, ...]:
    """Per link class, the capacity job ``job`` gets relative to its own share (see the
    module). ``utilisation[k][j]``: job ``k``'s utilisation of link class ``j`` (0..1); None:
    every other job idle (the job alone on the fabric).
    """
    me = placements[job].gpus
    out = []
    for j, beside in enumerate(neighbours(hierarchy, placements, job)):
        extra = 0.0
        for k, gpus in beside.items():
            busy = 0.0 if utilisation is None or k < 0 else min(1.0, max(0.0, _at(utilisation[k], j)))
            extra += gpus / me * (1.0 - busy)
        out.append(1.0 + extra if j >= 2 else 1.0)
    return tuple(out)


def _at(values: Sequence[float], j: int) -> float:
    return float(values[j]) if j < len(values) else 0.0
