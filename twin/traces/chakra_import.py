"""A Chakra execution trace read in: what it adds up to, and a real run's step measured from it.

:func:`trace_totals` sums one trace by what ASTRA-sim reads of it: COMP_NODE ``duration_micros``;
per COMM_COLL_NODE its ``comm_type``, ``comm_size`` and group (``pg_name``, sized by an
ASTRA-sim comm-group file; a group it does not size counts no bytes sent), the bytes one
rank sends for it (``comm_size`` x the collective's bus factor, nccl-tests PERFORMANCE.md, as the
twin counts ``bytes_per_step``); per COMM_SEND_NODE its ``comm_size``. A node's dimension is its
``twin_dimension`` attribute (a trace the twin wrote) or, for a real run's trace, its process
group (``pg:<name>``; ``pg:all`` for the default group).

:func:`measured_from_chakra` turns a real run's Chakra trace (Chakra's PyTorch converter: a
host execution trace linked with the Kineto trace, one file per rank) into a
:class:`~twin.traces.kineto.MeasuredStep`, as the Chrome-trace reader does.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core.collective_types import bus_factor
from twin.core.errors import SpecError
from twin.traces import chakra_schema as cs
from twin.traces.kineto import COMM_CLASS, MeasuredStep, Span, classify_kernel


@dataclass
class TraceTotals:
    """One trace's sums (module docstring): seconds of compute, per dimension seconds and bytes
    sent, node counts by type.
    """

    compute_s: float = 0.0
    optimizer_s: float = 0.0
    comm_s: dict[str, float] = field(default_factory=dict)
    bytes_sent: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)


def load_groups(path: str | Path | None) -> dict[str, int]:
    """Group sizes by ``pg_name`` from an ASTRA-sim comm-group file ({"id": [ranks]}); {} for None."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SpecError(str(path), f"not a comm-group file (JSON of group id -> ranks): {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise SpecError(str(path), "not a comm-group file: expected a JSON object of group id -> list of ranks")
    return {str(k): len(v) for k, v in data.items()}


_TYPE_NAMES = {cs.COMP_NODE: "comp", cs.COMM_COLL_NODE: "coll", cs.COMM_SEND_NODE: "send",
               cs.COMM_RECV_NODE: "recv", cs.METADATA_NODE: "metadata"}


def _dimension(attrs: dict[str, Any]) -> str:
    dim = attrs.get("twin_dimension")
    if isinstance(dim, str) and dim:
        return dim
    pg = attrs.get("pg_name", "")
    return f"pg:{pg}" if pg not in ("", "0") else "pg:all"


def trace_totals(trace: cs.Trace, group_sizes: dict[str, int] | None = None) -> TraceTotals:
    """What ``trace`` adds up to (module docstring)."""
    sizes = group_sizes or {}
    out = TraceTotals()
    for node in trace.nodes:
        kind = _TYPE_NAMES.get(node.type, str(node.type))
        out.nodes[kind] = out.nodes.get(kind, 0) + 1
        secs = node.duration_micros * 1e-6
        attrs = cs.attributes(node)
        if node.type == cs.COMP_NODE:
            if node.name == "optimizer step":
                out.optimizer_s += secs
            else:
                out.compute_s += secs
            continue
        if node.type not in (cs.COMM_COLL_NODE, cs.COMM_SEND_NODE, cs.COMM_RECV_NODE):
            continue
        dim = _dimension(attrs)
        out.comm_s[dim] = out.comm_s.get(dim, 0.0) + secs
        size = float(attrs.get("comm_size", 0))
        if node.type == cs.COMM_COLL_NODE:
            op = cs.COMM_NAMES.get(int(attrs.get("comm_type", 0)), "all_reduce")
            n = sizes.get(str(attrs.get("pg_name", "")), 1)
            sent = size * float(bus_factor(op, n)) if n > 1 else 0.0
        else:
            sent = size if node.type == cs.COMM_SEND_NODE else 0.0
        out.bytes_sent[dim] = out.bytes_sent.get(dim, 0.0) + sent
    return out


def measured_from_chakra(path: str | Path) -> MeasuredStep:
    """A real run's Chakra trace (one rank) as a measured step: compute nodes by kernel class,
    collectives by type and group (``comm_size`` bytes each), the step's span from their start
    times and durations (a trace without start times, as the twin writes, spans their sum).
    """
    trace = cs.read_trace(path)
    classes: dict[str, Span] = defaultdict(Span)
    comm: dict[str, Span] = defaultdict(Span)
    comm_bytes: dict[str, float] = defaultdict(float)
    start, end = None, 0.0
    for node in trace.nodes:
        if node.type not in (cs.COMP_NODE, cs.COMM_COLL_NODE, cs.COMM_SEND_NODE, cs.COMM_RECV_NODE):
            continue
        attrs = cs.attributes(node)
        secs = node.duration_micros * 1e-6
        t0 = node.start_time_micros * 1e-6
        start = t0 if start is None else min(start, t0)
        end = max(end, t0 + secs)
        if node.type == cs.COMP_NODE:
            if attrs.get("is_cpu_op", False):
                continue
            classes[classify_kernel(node.name)].add(secs)
            continue
        if node.type == cs.COMM_COLL_NODE:
            op = cs.COMM_NAMES.get(int(attrs.get("comm_type", 0)), "all_reduce")
        else:
            op = "send" if node.type == cs.COMM_SEND_NODE else "recv"
        key = f"{op}@{_dimension(attrs)}"
        comm[key].add(secs)
        comm_bytes[key] += float(attrs.get("comm_size", 0))
        classes[COMM_CLASS].add(secs)
    if start is None:
        raise SpecError(str(path), "the trace has no compute or communication node to measure")
    timed = any(n.start_time_micros for n in trace.nodes)
    return MeasuredStep(source=str(path), kind="chakra", step_s=end - start if timed else critical_path_s(trace),
                        classes=dict(classes), comm=dict(comm), comm_bytes=dict(comm_bytes), steps=1,
                        notes=[] if timed else ["no start times: the step is the trace's longest dependency "
                                                "chain of durations (receives count as ready)"])


def critical_path_s(trace: cs.Trace) -> float:
    """The longest chain of ``duration_micros`` along the trace's dependencies, seconds: one rank's
    step replayed with every node started as soon as its dependencies finish.
    """
    by_id = {n.id: n for n in trace.nodes}
    done: dict[int, float] = {}
    for root in trace.nodes:
        stack = [root.id]
        while stack:
            nid = stack[-1]
            if nid in done:
                stack.pop()
                continue
            node = by_id[nid]
            deps = [d for d in (*node.data_deps, *node.ctrl_deps) if d not in done]
            if deps:
                if len(stack) > len(by_id):
                    raise SpecError(trace.path, f"node {nid} ({node.name}) depends on itself through its dependencies")
                stack += deps
                continue
            stack.pop()
            done[nid] = max((done[d] for d in (*node.data_deps, *node.ctrl_deps)), default=0.0) \
                + node.duration_micros * 1e-6
    return max(done.values(), default=0.0)


def replay(traces: list[cs.Trace]) -> dict[int, float]:
    """Each trace's step replayed together (the class traces of one export, one per pipeline rank):
    a node starts when its dependencies have finished and, for a receive, when its send has; it
    lasts its ``duration_micros``. Sends and receives match by (source, destination, tag) across the
    traces, and a ring step to a peer of the same class by its tag in the same trace (the peers run
    the same trace). Per trace (by its metadata's ``rank``), the time its last node finishes, s.

    No link is shared and no collective waits for its group: a dependency-only replay of the
    twin's own durations, which shows how the schedule's order and the pipeline's transfers add up
    (the bubble) without a network simulator.
    """
    sends: dict[tuple[int, int, int], tuple[int, int]] = {}
    ring: dict[tuple[int, int], tuple[int, int]] = {}
    nodes: list[dict[int, Any]] = [{n.id: n for n in t.nodes} for t in traces]
    for ti, t in enumerate(traces):
        for n in t.nodes:
            if n.type == cs.COMM_SEND_NODE:
                a = cs.attributes(n)
                sends[(a["comm_src"], a["comm_dst"], a["comm_tag"])] = (ti, n.id)
                ring[(ti, a["comm_tag"])] = (ti, n.id)
    done: dict[tuple[int, int], float] = {}

    def needs(ti: int, n: Any) -> list[tuple[int, int]]:
        out = [(ti, d) for d in (*n.data_deps, *n.ctrl_deps)]
        if n.type == cs.COMM_RECV_NODE:
            a = cs.attributes(n)
            match = sends.get((a["comm_src"], a["comm_dst"], a["comm_tag"])) or ring.get((ti, a["comm_tag"]))
            if match is None:
                raise SpecError(f"{traces[ti].path}: node {n.id} ({n.name})", "a receive no trace sends")
            out.append(match)
        return out

    for ti, t in enumerate(traces):
        for root in t.nodes:
            stack = [(ti, root.id)]
            while stack:
                key = stack[-1]
                if key in done:
                    stack.pop()
                    continue
                n = nodes[key[0]][key[1]]
                wait = [k for k in needs(key[0], n) if k not in done]
                if wait:
                    if len(stack) > sum(len(x) for x in nodes):
                        raise SpecError(traces[key[0]].path, f"node {n.id} ({n.name}): the traces' dependencies "
                                                             "and transfers form a cycle")
                    stack += wait
                    continue
                stack.pop()
                done[key] = max((done[k] for k in needs(key[0], n)), default=0.0) + n.duration_micros * 1e-6
    out = {}
    for ti, t in enumerate(traces):
        rank = int(cs.attributes(t.metadata).get("rank", ti))
        out[rank] = max((done[(ti, n.id)] for n in t.nodes), default=0.0)
    return out
