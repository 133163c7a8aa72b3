"""A Chakra execution trace read in: what it adds up to, and a real run's step measured from it.

:func:`trace_totals` sums one trace by what ASTRA-sim reads of it: COMP_NODE ``duration_micros``;
per COMM_COLL_NODE its ``comm_type``, ``comm_size`` and group (``pg_name``, sized by an
ASTRA-sim comm-group file, else the node's ``twin_group_size``-free guess of 1), the bytes one
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


def measured_from_chakra(path: str | Path, group_sizes: dict[str, int] | None = None) -> MeasuredStep:
    """A real run's Chakra trace (one rank) as a measured step: compute nodes by kernel class,
    collectives by type and group, the step's span from their start times and durations.
    """
    trace = cs.read_trace(path)
    sizes = group_sizes or {}
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
            n = sizes.get(str(attrs.get("pg_name", "")), 0)
        else:
            op, n = ("send" if node.type == cs.COMM_SEND_NODE else "recv"), 2
        key = f"{op}@{_dimension(attrs)}"
        comm[key].add(secs)
        comm_bytes[key] += float(attrs.get("comm_size", 0))
        classes[COMM_CLASS].add(secs)
        del n
    if start is None:
        raise SpecError(str(path), "the trace has no compute or communication node to measure")
    return MeasuredStep(source=str(path), kind="chakra", step_s=end - start, classes=dict(classes), comm=dict(comm),
                        comm_bytes=dict(comm_bytes), steps=1)
