"""Several jobs on one fabric: where each sits, and the link capacity each gets.

Jobs own whole nodes, placed in GPU ranges of the shared cluster (in order, unless a job
says where it starts). Switches are aligned blocks: a tier-``t`` switch serves
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

from collections.abc import Sequence
from dataclasses import dataclass

from twin.core.errors import SpecError
from twin.core.topology import Hierarchy


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs ``[first, first + gpus)`` of the shared cluster belong to one job."""

    first: int
    gpus: int

    @property
    def last(self) -> int:
        """One past the job's last GPU."""
        return self.first + self.gpus


def place_jobs(gpus: Sequence[int], starts: Sequence[int | None], gpus_per_node: int, total: int,
               path: str = "jobs") -> list[Placement]:
    """Where each job sits: at its stated first GPU, else right after the previous job.

    Jobs own whole nodes and may not overlap or run past the cluster; errors name the job.
    """
    out: list[Placement] = []
    cursor = 0
    for i, (n, start) in enumerate(zip(gpus, starts, strict=True)):
        first = cursor if start is None else int(start)
        if first % gpus_per_node:
            raise SpecError(f"{path}[{i}].first_gpu",
                            f"must start a node (a multiple of {gpus_per_node}) (got {first})")
        if n % gpus_per_node and n > gpus_per_node:
            raise SpecError(f"{path}[{i}].gpus", f"a job owns whole nodes: a multiple of {gpus_per_node} (got {n})")
        here = Placement(first, n)
        if here.last > total:
            raise SpecError(f"{path}[{i}]", f"GPUs {first}..{here.last - 1} run past the cluster's {total} GPUs")
        for j, other in enumerate(out):
            if here.first < other.last and other.first < here.last:
                raise SpecError(f"{path}[{i}]", f"GPUs {first}..{here.last - 1} overlap job {j} "
                                                f"({other.first}..{other.last - 1})")
        out.append(here)
        cursor = max(cursor, -(-here.last // gpus_per_node) * gpus_per_node)
    return out


def neighbours(hierarchy: Hierarchy, placements: Sequence[Placement], job: int) -> list[dict[int, int]]:
    """Per link class ``j`` (index), the GPUs of each other job (key: its index; -1: GPUs no
    job uses) in the tier-``(j-1)`` subtrees job ``job`` occupies. Classes 0 and 1 are empty.
    """
    me = placements[job]
    out: list[dict[int, int]] = [{}, {}]
    total = max(p.last for p in placements)
    cluster_gpus = max(total, hierarchy.tiers[-1].span_gpus)
    for j in range(2, len(hierarchy.tiers)):
        span = max(1, hierarchy.tiers[j - 1].span_gpus)
        lo = (me.first // span) * span
        hi = min(cluster_gpus, -(-me.last // span) * span)
        beside: dict[int, int] = {}
        used = me.gpus
        for k, other in enumerate(placements):
            if k == job:
                continue
            overlap = max(0, min(hi, other.last) - max(lo, other.first))
            if overlap:
                beside[k] = overlap
                used += overlap
        if hi - lo > used:
            beside[-1] = hi - lo - used
        out.append(beside)
    return out


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
