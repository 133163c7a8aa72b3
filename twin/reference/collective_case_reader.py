"""Read one case of a ``twin-reference-collectives/v1`` document: its op and forced
algorithm in the twin's spelling, where the measured ranks sit in the cluster's hierarchy
(CASES.md, "Which GPUs took part") and its measured points (:class:`CollectiveSetup`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twin.core.collectives import OPS, bus_factor
from twin.core.errors import SpecError
from twin.core.specs import Cluster, Model, Plan, Scenario
from twin.core.topology import place_group
from twin.engine import Engine
from twin.reference.case_cluster import _cluster
from twin.reference.case_fields import _case_id, _mapping, _number

# Nodes assumed when a multi-node collective figure does not state its node count.
ASSUMED_NODES = 4
# Ops of twin-reference-collectives/v1 (CASES.md): the twin's collectives plus DeepEP-style
# expert dispatch/combine; files spell some the nccl-tests way (alltoall, sendrecv).
COLLECTIVE_OPS = (*OPS, "ep_dispatch", "ep_combine")
_OP_SPELLINGS = {"alltoall": "all_to_all", "sendrecv": "send_recv", "allreduce": "all_reduce",
                 "allgather": "all_gather", "reducescatter": "reduce_scatter"}
# NCCL algorithm names (NCCL_ALGO) -> the twin's: NVLSTree is NVLS inside the domain and a
# tree across (the twin's "nvls" on a multi-domain group); CollNet Direct/Chain are SHARP.
_ALGORITHM_SPELLINGS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls", "collnet": "sharp",
                        "collnetdirect": "sharp", "collnetchain": "sharp", "sharp": "sharp"}
_POINT_NUMBERS = ("bytes", "busbw_GBps", "algbw_GBps", "time_us")
_PER = (None, "gpu", "rank", "nic")


def collective_op(value: Any) -> str:
    """The twin's name of a reference file's op (``alltoall`` -> ``all_to_all``); SpecError if unknown."""
    v = str(value or "").strip().lower().replace("-", "_")
    if v in COLLECTIVE_OPS:
        return v
    op = _OP_SPELLINGS.get(v.replace("_", ""))
    if op is None:
        raise SpecError("op", f"must be one of {', '.join(COLLECTIVE_OPS)}, alltoall, sendrecv (got {value!r})")
    return op


def _collective_algorithm(value: Any) -> str | None:
    if value is None:
        return None
    algo = _ALGORITHM_SPELLINGS.get(str(value).strip().lower().replace("-", "").replace("_", ""))
    if algo is None:
        raise SpecError("algorithm", f"must be one of ring, tree, nvls, nvlstree, collnet or null (got {value!r})")
    return algo


@dataclass(frozen=True)
class _Layout:
    """How a measured group sits: ``n`` ranks, ``ranks_per_node`` of them on each of ``nodes``
    nodes, placed ``stride`` GPUs apart on a cluster of ``cluster_gpus`` GPUs.
    """

    n: int
    nodes: int
    ranks_per_node: int
    stride: int
    cluster_gpus: int


def _collective_layout(c: Mapping[str, Any], notes: list[str]) -> _Layout:
    """Ranks and their placement (CASES.md, "Which GPUs took part").

    ``num_gpus`` counts the ranks of the test; ``ranks_per_node`` (or ``num_gpus``/``nodes``)
    how many of each node's ``gpus_per_node`` GPUs took part. A run with fewer ranks than GPUs
    on each of several nodes (e.g. ``-N 1``: one GPU and its NIC per node) is placed one rank
    every ``gpus_per_node // ranks_per_node`` GPUs, so each rank keeps its own NICs.
    """
    per_node = _number(c.get("gpus_per_node"), "cluster.gpus_per_node", integer=True) or 8
    n = _number(c.get("num_gpus"), "cluster.num_gpus", integer=True)
    nodes = _number(c.get("nodes"), "cluster.nodes", integer=True)
    rpn = _number(c.get("ranks_per_node"), "cluster.ranks_per_node", integer=True)
    if n is None:
        nodes = nodes or ASSUMED_NODES
        n = nodes * (rpn or per_node)
        notes.append(f"rank count not published: {nodes} nodes ({n} GPUs) assumed")
    if rpn is None and nodes is not None:
        if n % nodes:
            raise SpecError("cluster.nodes", f"{n} ranks do not split evenly over {nodes} nodes")
        rpn = n // nodes
    if rpn is None:
        rpn = min(n, per_node)
    if rpn > per_node:
        raise SpecError("cluster.ranks_per_node", f"must be <= gpus_per_node ({per_node}) (got {rpn})")
    nodes_used = -(-n // rpn)
    if nodes is not None and nodes != nodes_used:
        raise SpecError("cluster.nodes", f"{nodes} nodes do not hold {n} ranks at {rpn} per node")
    if nodes_used > 1 and rpn < per_node:
        if per_node % rpn:
            raise SpecError("cluster.ranks_per_node", f"must divide gpus_per_node ({per_node}) (got {rpn})")
        return _Layout(n, nodes_used, rpn, per_node // rpn, nodes_used * per_node)
    return _Layout(n, nodes_used, rpn, 1, n)


@dataclass(frozen=True)
class _Point:
    size: float | None
    busbw: float            # GB/s, as published or derived from algbw or time
    published_busbw: bool   # False: derived from time (no rounding to 0.01 GB/s)
    per_nic: bool


def _collective_point(point: Any, i: int, op: str, n: int) -> _Point | None:
    """One measured point, its numbers checked (SpecError names the bad field); None if it
    carries no bandwidth (or only nccl-tests' rounding noise below 1 GB/s).
    """
    where = f"points[{i}]"
    point = _mapping(point, where)
    vals = {k: _number(point.get(k), f"{where}.{k}", minimum=-1.0) for k in _POINT_NUMBERS}
    rng = point.get("busbw_GBps_range")
    if rng is not None:
        if not isinstance(rng, list) or len(rng) != 2:
            raise SpecError(f"{where}.busbw_GBps_range", f"must be a [low, high] pair (got {rng!r})")
        rng = [_number(v, f"{where}.busbw_GBps_range[{j}]") for j, v in enumerate(rng)]
    per = point.get("per")
    if per not in _PER:
        raise SpecError(f"{where}.per", f"must be gpu, rank, nic or null (got {per!r})")
    if per == "nic" and op.startswith("ep_"):
        raise SpecError(f"{where}.per", "per: nic is defined for nccl-tests collectives, not expert dispatch/combine")
    size = vals["bytes"] or None
    factor = bus_factor("all_to_all" if op.startswith("ep_") else op, n)
    bw, published = vals["busbw_GBps"], True
    if not (bw and bw >= 1.0):
        if rng:
            bw = (rng[0] + rng[1]) / 2.0
        elif vals["algbw_GBps"] and vals["algbw_GBps"] * factor >= 1.0:
            bw = vals["algbw_GBps"] * factor
        elif size and vals["time_us"] and vals["time_us"] > 0:
            # nccl-tests: algbw = size / time; busbw = algbw * factor (PERFORMANCE.md)
            bw, published = size / (vals["time_us"] * 1e-6) / 1e9 * factor, False
        else:
            return None  # no figure, or only sub-GB/s rounding noise
    return _Point(size=size, busbw=float(bw), published_busbw=published, per_nic=per == "nic")


@dataclass(frozen=True)
class CollectiveSetup:
    """One collectives case as the twin sees it: the op (and forced algorithm), where the
    measured group sits in the cluster's hierarchy, and its measured points.
    """

    id: str
    op: str
    algorithm: str | None
    cluster: Cluster
    hierarchy: Any
    span: Any
    n: int
    points: tuple[_Point, ...]
    notes: tuple[str, ...]


def collective_setup(engine: Engine, case: Any) -> CollectiveSetup:
    """Read one collectives case (SpecError names a malformed field)."""
    case = _mapping(case, "case")
    cid = _case_id(case, "?")
    op = collective_op(case.get("op"))
    algorithm = _collective_algorithm(case.get("algorithm"))
    notes: list[str] = []
    c = _mapping(case.get("cluster"), "cluster")
    layout = _collective_layout(c, notes)
    cluster = _cluster(engine, c, notes, "cluster", num_gpus=layout.cluster_gpus)
    # The placeholder plan only builds the hierarchy; its precision must still be one the GPU
    # runs (a V100 has no bf16).
    precision = "bf16" if cluster.gpu.supports("bf16") else "fp16"
    scn = Scenario(cluster=cluster, model=_dummy_model(),
                   plan=Plan(gbs=cluster.num_gpus, dp=None, tp=1, precision=precision))
    engine.validate(scn)  # the fabric's own rules (e.g. rails per node)
    hierarchy = engine.hierarchy(scn)
    n = layout.n
    span = place_group(n, layout.stride, hierarchy)
    if algorithm == "sharp" and not any(t.reduction == "sharp" for t in hierarchy.tiers[1:]):
        sharp_tiers = tuple(dataclasses.replace(t, reduction="sharp") for t in hierarchy.tiers[1:])
        hierarchy = dataclasses.replace(hierarchy, tiers=(hierarchy.tiers[0], *sharp_tiers))
    parsed = tuple(p for p in (_collective_point(p, i, op, n) for i, p in enumerate(_points(case))) if p is not None)
    return CollectiveSetup(cid, op, algorithm, cluster, hierarchy, span, n, parsed, tuple(notes))


def _points(case: Mapping[str, Any]) -> list[Any]:
    pts = case.get("points")
    if pts is None:
        return []
    if not isinstance(pts, list):
        raise SpecError("points", f"must be a list (got {type(pts).__name__})")
    return pts


def _dummy_model() -> Model:
    """A placeholder model for scenarios used only to build a hierarchy."""
    return Model(layers=1, hidden=64, heads=1, vocab=64, seq_len=64)
