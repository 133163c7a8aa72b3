"""Which nodes each job of a fleet holds: stated (node lists, ranges, strides, a first GPU) or
chosen by a placement policy (packed, spread, random with a seed).

A busy cluster rarely hands a job a contiguous, switch-aligned block: schedulers place jobs on
whatever nodes are free (Slurm's ``--distribution``/topology plugin, Kubernetes' scheduler),
so jobs interleave under the same leaves and spines. ``twin.core.fleet_shares`` then prices
the links the jobs really share.

A job's ``nodes`` is a list whose items are node indices or strings ``"a-b"`` (a to b
inclusive) or ``"a-b:s"`` (every s-th node from a to b), Slurm's hostlist ranges in index form.
``placement`` is ``packed`` (the lowest free nodes, one after another: the placement a
topology-aware scheduler aims for), ``spread`` (evenly over the free nodes: a scheduler that
balances load across switches) or ``{policy: random, seed: N}`` (free nodes drawn with
``random.Random(seed)``: a fragmented cluster). A job that states nothing runs right after the
previous job (the contiguous default). Jobs with a policy are placed last, in their order,
on the nodes the others leave free.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from twin.core.errors import SpecError

POLICIES = ("packed", "spread", "random")
# At most this many nodes in one fleet (a stated range is expanded to its nodes).
MAX_NODES = 1_000_000
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*(?::\s*(\d+))?\s*$")


def parse_nodes(value: Any, path: str) -> tuple[int, ...]:
    """The sorted node indices a ``nodes`` list states (module docstring for its forms)."""
    if not isinstance(value, list) or not value:
        raise SpecError(path, f"must be a non-empty list of node indices or 'a-b[:s]' ranges (got {value!r})")
    out: set[int] = set()
    for i, item in enumerate(value):
        here = f"{path}[{i}]"
        if isinstance(item, bool):
            raise SpecError(here, f"must be a node index or an 'a-b[:s]' range (got {item!r})")
        if isinstance(item, int):
            if item < 0:
                raise SpecError(here, f"must be a non-negative node index (got {item})")
            new = [item]
        elif isinstance(item, str) and item.strip().isdigit():
            new = [int(item)]
        elif isinstance(item, str) and (m := _RANGE.match(item)):
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            if hi < lo or step < 1:
                raise SpecError(here, f"a range 'a-b:s' needs a <= b and s >= 1 (got {item!r})")
            if (hi - lo) // step + 1 > MAX_NODES:
                raise SpecError(here, f"at most {MAX_NODES:,} nodes (got {item!r})")
            new = list(range(lo, hi + 1, step))
        else:
            raise SpecError(here, f"must be a node index or an 'a-b[:s]' range such as '0-63' or '0-63:4' "
                                  f"(got {item!r})")
        dup = out.intersection(new)
        if dup:
            raise SpecError(here, f"node {min(dup)} is stated twice")
        out.update(new)
        if len(out) > MAX_NODES:
            raise SpecError(path, f"at most {MAX_NODES:,} nodes")
    return tuple(sorted(out))


def parse_policy(value: Any, path: str) -> tuple[str, int]:
    """(policy, seed) of a ``placement`` field: a policy name or ``{policy:, seed:}``."""
    if isinstance(value, str):
        policy, seed = value, 0
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"policy", "seed"})
        if unknown:
            raise SpecError(f"{path}.{unknown[0]}", "unknown field; expected one of: policy, seed")
        policy, seed = value.get("policy"), value.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise SpecError(f"{path}.seed", f"must be an integer (got {seed!r})")
        if "seed" in value and policy != "random":
            raise SpecError(f"{path}.seed", f"only a random placement draws nodes (policy {policy!r})")
        path = f"{path}.policy"
    else:
        raise SpecError(path, f"must be one of {', '.join(POLICIES)} or {{policy: random, seed: N}} (got {value!r})")
    if policy not in POLICIES:
        raise SpecError(path, f"must be one of {', '.join(POLICIES)} (got {policy!r})")
    return str(policy), int(seed)


def nodes_needed(gpus: int, gpus_per_node: int) -> int:
    """Whole nodes a job of ``gpus`` GPUs holds (a job smaller than a node holds one)."""
    return max(1, -(-gpus // gpus_per_node))


def choose(policy: str, seed: int, free: Sequence[int], count: int) -> tuple[int, ...]:
    """``count`` of the ``free`` nodes (ascending) as ``policy`` places them."""
    if policy == "packed":
        return tuple(free[:count])
    if policy == "spread":
        # Evenly over the free nodes: the i-th node at floor(i x free / count).
        n = len(free)
        return tuple(free[(i * n) // count] for i in range(count))
    return tuple(sorted(random.Random(seed).sample(list(free), count)))


def place_nodes(jobs: Sequence[Mapping[str, Any]], gpus_per_node: int, total_nodes: int,
                path: str = "jobs") -> list[tuple[int, ...]]:
    """Each job's nodes: ``nodes`` or ``first_gpu`` where stated, right after the previous job
    where nothing is (both in job order), then each ``placement`` policy over the nodes still
    free, in job order. Errors
    name the job's field: a node past the cluster, a node two jobs hold, a count that is not
    the job's, too few free nodes.
    """
    out: list[tuple[int, ...] | None] = [None] * len(jobs)
    owner: dict[int, int] = {}
    cursor = 0
    for i, job in enumerate(jobs):
        need = nodes_needed(int(job["gpus"]), gpus_per_node)
        if job.get("nodes") is not None:
            field = f"{path}[{i}].nodes"
            if job.get("first_gpu") is not None or job.get("placement") is not None:
                raise SpecError(field, "states where the job runs: first_gpu and placement must then be absent")
            nodes = parse_nodes(job["nodes"], field)
            if len(nodes) != need:
                raise SpecError(field, f"{len(nodes)} nodes for {job['gpus']} GPUs at {gpus_per_node} a node "
                                       f"(needs {need})")
        elif job.get("first_gpu") is not None:
            field = f"{path}[{i}].first_gpu"
            first = int(job["first_gpu"])
            if job.get("placement") is not None:
                raise SpecError(field, "states where the job runs: placement must then be absent")
            if first % gpus_per_node:
                raise SpecError(field, f"must start a node (a multiple of {gpus_per_node}) (got {first})")
            nodes = tuple(range(first // gpus_per_node, first // gpus_per_node + need))
        elif job.get("placement") is None:
            nodes = tuple(range(cursor, cursor + need))  # right after the previous job
        else:
            continue
        if nodes[-1] >= total_nodes:
            raise SpecError(f"{path}[{i}]", f"node {nodes[-1]} (GPUs {nodes[-1] * gpus_per_node}..) would run past "
                                            f"the cluster's {total_nodes} nodes")
        for node in nodes:
            if node in owner:
                raise SpecError(f"{path}[{i}]", f"node {node} overlaps job {owner[node]}")
            owner[node] = i
        out[i] = nodes
        cursor = max(cursor, nodes[-1] + 1)
    for i, job in enumerate(jobs):
        if out[i] is not None:
            continue
        policy, seed = parse_policy(job["placement"], f"{path}[{i}].placement")
        need = nodes_needed(int(job["gpus"]), gpus_per_node)
        free = [n for n in range(total_nodes) if n not in owner]
        if len(free) < need:
            raise SpecError(f"{path}[{i}]", f"needs {need} nodes, which would run past the cluster's {total_nodes} "
                                            f"nodes ({len(free)} free)")
        nodes = choose(policy, seed, free, need)
        for node in nodes:
            owner[node] = i
        out[i] = nodes
    return [n for n in out if n is not None]


def node_ranges(nodes: Sequence[int]) -> str:
    """``nodes`` (ascending) as compact ranges in the form ``nodes`` accepts: runs of three or
    more at one stride as ``a-b`` or ``a-b:s``, others one by one ("0-15,32-62:2,70").
    """
    parts: list[str] = []
    i, n = 0, len(nodes)
    while i < n:
        j = i + 1
        if j < n:
            step = nodes[j] - nodes[i]
            while j + 1 < n and nodes[j + 1] - nodes[j] == step:
                j += 1
        if j < n and j - i >= 2:  # three or more at one stride
            a, b = nodes[i], nodes[j]
            parts.append(f"{a}-{b}" if step == 1 else f"{a}-{b}:{step}")
            i = j + 1
        elif j < n and step == 1:
            parts.append(f"{nodes[i]}-{nodes[j]}")
            i = j + 1
        else:
            parts.append(str(nodes[i]))
            i += 1
    return ",".join(parts)
