"""A PyTorch profiler trace read in: Kineto's Chrome-trace JSON, as ``torch.profiler`` exports it
(``prof.export_chrome_trace(path)``; ``.json`` or gzipped ``.json.gz``).

What is read (the Chrome Trace Event Format: complete events ``"ph": "X"`` with ``ts`` and
``dur`` in microseconds; Kineto's categories):

- the steps: ``ProfilerStep#N`` annotations (``torch.profiler.profile.step()``); the measured step
  is their mean; without them the trace's span is one step (a note says so);
- on a GPU trace, device time: ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events, each kernel
  classed by its name (:func:`classify_kernel`); NCCL kernels (``ncclDevKernel_AllReduce...``)
  are communication, sized by the ``In msg nelems`` / ``dtype`` / ``Group size`` / ``Process
  Group Name`` arguments PyTorch records (``record_param_comms``) where the trace has them;
- on a CPU-only trace, host time: ``cpu_op`` events inside the steps, each counted by its
  self time (its duration less its children's on the same thread), classed by name, ops under
  an ``Optimizer.step#...`` annotation as the optimizer; ``c10d::`` calls are communication,
  sized by their tensors' dimensions (``record_shapes=True``) and element type.

Per class and per step: seconds and count. Bad input (not JSON, no ``traceEvents``, an event
without its times, no event to measure) is a :class:`~twin.core.errors.SpecError` naming the
file and what is wrong.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core.errors import SpecError

COMM_CLASS = "communication"
# Kernel and op classes by name, first match wins (lower-cased names).
_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (COMM_CLASS, re.compile(r"nccl|c10d::|record_param_comms|allreduce|all_reduce|allgather|reduce_scatter|alltoall")),
    ("optimizer", re.compile(r"multi_tensor_apply|adam|optimizer|_foreach_")),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|scaled_dot_product|cudnn_mha|_efficient_attention")),
    ("gemm", re.compile(r"gemm|cutlass|cublas|xmma|nvjet|matmul|aten::(mm|addmm|bmm|baddbmm|linear)\b|sm\d+_.*_tn")),
    ("memory", re.compile(r"memcpy|memset|aten::(copy_|to|_to_copy|empty|empty_strided|fill_|zero_|clone"
                          r"|contiguous)\b")),
    ("framework", re.compile(r"autograd::|backward0|accumulategrad|reducer|ddp|profilerstep|^detach")),
)
# NCCL kernel / c10d call names -> the twin's collective names.
_COMM_OPS = (("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("reducescatter", "reduce_scatter"),
             ("reduce_scatter", "reduce_scatter"), ("allgather", "all_gather"), ("all_gather", "all_gather"),
             ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("sendrecv", "send_recv"),
             ("send", "send_recv"), ("recv", "send_recv"), ("broadcast", "broadcast"), ("reduce", "reduce"))
# Bytes per element of the dtypes PyTorch writes in traces ("Input type" / "dtype" arguments).
DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "c10::half": 2, "c10::bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "bool": 1,
               "byte": 1, "uint8": 1, "char": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
# An element type the trace does not name (a TensorList's): fp32, gradient buckets' usual type.
DEFAULT_ELEMENT_BYTES = 4


@dataclass
class Span:
    """Time and count of one class of events."""

    count: int = 0
    total_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds


@dataclass
class MeasuredStep:
    """A real run's step as a trace shows it: per class of kernels or ops, per collective (``op@group``)
    and its bytes, all per step (totals over the trace's steps divided by ``steps``); ``step_s`` the
    mean step.
    """

    source: str
    kind: str
    step_s: float
    classes: dict[str, Span]
    comm: dict[str, Span]
    comm_bytes: dict[str, float]
    steps: int
    world_size: int | None = None
    notes: list[str] = field(default_factory=list)

    def per_step(self, seconds: float) -> float:
        return seconds / max(1, self.steps)


def classify_kernel(name: str) -> str:
    """The class of a kernel or op by its name (``_CLASSES``; else ``elementwise``)."""
    low = name.lower()
    for cls, pattern in _CLASSES:
        if pattern.search(low):
            return cls
    return "elementwise"


def comm_op(name: str, args: dict[str, Any]) -> str:
    """The collective of an NCCL kernel or c10d call (its ``Collective name`` argument first)."""
    given = str(args.get("Collective name", "")).lower()
    low = (given or name).lower().replace("c10d::", "").replace("_base_", "")
    for key, op in _COMM_OPS:
        if key in low:
            return op
    return "unknown"


def load_events(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``traceEvents`` of a Chrome-trace JSON file (gzipped or not) and the document."""
    path = Path(path)
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SpecError(where, f"cannot read the trace: {err.strerror or err}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as err:
        raise SpecError(where, f"not a Chrome-trace JSON file ({type(err).__name__}: {err})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise SpecError(where, "no traceEvents list: not a PyTorch profiler (Chrome-trace) file")
    return events, doc if isinstance(doc, dict) else {}


def _complete(events: list[Any], where: str) -> list[dict[str, Any]]:
    """The complete ("X") events, each checked for a name and numeric ts and dur."""
    out = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise SpecError(f"{where}: traceEvents[{i}]", f"an event must be an object (got {type(ev).__name__})")
        if ev.get("ph") != "X":
            continue
        ts, dur = ev.get("ts"), ev.get("dur")
        if not isinstance(ts, int | float) or not isinstance(dur, int | float) or isinstance(ts, bool) or dur < 0:
            raise SpecError(f"{where}: traceEvents[{i}] ({ev.get('name', '?')})",
                            f"a complete event needs numeric ts and dur >= 0 (got ts={ts!r}, dur={dur!r})")
        if not isinstance(ev.get("name"), str):
            raise SpecError(f"{where}: traceEvents[{i}]", "an event needs a name")
        out.append(ev)
    return out


def _steps(xs: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in xs
                  if e["name"].startswith("ProfilerStep#"))


def _inside(ts: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= ts <= b for a, b in windows)


def _comm_bytes(ev: dict[str, Any]) -> float:
    """Bytes of one communication call: ``In msg nelems`` x its dtype (record_param_comms), else
    the first tensor argument's dimensions x its element type (``record_shapes``).
    """
    args = ev.get("args") or {}
    nelems = args.get("In msg nelems")
    if isinstance(nelems, int | float):
        return float(nelems) * DTYPE_BYTES.get(str(args.get("dtype", "")).lower(), DEFAULT_ELEMENT_BYTES)
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    for k, d in enumerate(dims):
        shapes = d if d and isinstance(d[0], list) else [d]
        n = sum(_prod(s) for s in shapes if s)
        if n:
            kind = str(types[k]).lower() if k < len(types) else ""
            return n * DTYPE_BYTES.get(kind, DEFAULT_ELEMENT_BYTES)
    return 0.0


def _prod(shape: list[Any]) -> float:
    out = 1.0
    for s in shape:
        out *= float(s) if isinstance(s, int | float) else 0.0
    return out


def _group(ev: dict[str, Any], default: str) -> str:
    args = ev.get("args") or {}
    name = args.get("Process Group Name") or args.get("Process Group Description")
    return f"pg:{name}" if name not in (None, "") else default


def measured_from_kineto(path: str | Path) -> MeasuredStep:
    """A PyTorch profiler trace as a :class:`MeasuredStep` (module docstring)."""
    where = str(path)
    events, doc = load_events(path)
    xs = _complete(events, where)
    steps = _steps(xs)
    notes: list[str] = []
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    world = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
    default_pg = "pg:default"
    device = [e for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not steps:
        span = [e for e in (device or xs)]
        if not span:
            raise SpecError(where, "no complete (\"X\") event to measure")
        t0, t1 = min(float(e["ts"]) for e in span), max(float(e["ts"]) + float(e["dur"]) for e in span)
        steps = [(t0, t1)]
        notes.append("no ProfilerStep# annotations (profile.step()): the whole trace is taken as one step")
    classes: dict[str, Span] = defaultdict(Span)
    comm: dict[str, Span] = defaultdict(Span)
    comm_bytes: dict[str, float] = defaultdict(float)
    if device:
        kind = "kineto-gpu"
        for ev in device:
            cls = "memory" if ev.get("cat") != "kernel" else classify_kernel(ev["name"])
            secs = float(ev["dur"]) * 1e-6
            classes[cls].add(secs)
            if cls == COMM_CLASS:
                key = f"{comm_op(ev['name'], ev.get('args') or {})}@{_group(ev, default_pg)}"
                comm[key].add(secs)
                comm_bytes[key] += _comm_bytes(ev)
    else:
        kind = "kineto-cpu"
        notes.append("a CPU-only trace: host time of the ops (self time), no device kernels")
        _host_classes(xs, steps, classes, comm, comm_bytes, default_pg)
    if not classes:
        raise SpecError(where, "no kernel or op inside the profiled steps to measure")
    n = len(steps)
    step_s = sum(b - a for a, b in steps) / n * 1e-6
    scale = 1.0 / n
    return MeasuredStep(where, kind, step_s,
                        {k: Span(round(v.count * scale), v.total_s * scale) for k, v in classes.items()},
                        {k: Span(round(v.count * scale), v.total_s * scale) for k, v in comm.items()},
                        {k: v * scale for k, v in comm_bytes.items()}, n, world, notes)


def _host_classes(xs: list[dict[str, Any]], steps: list[tuple[float, float]], classes: dict[str, Span],
                  comm: dict[str, Span], comm_bytes: dict[str, float], default_pg: str) -> None:
    """CPU ops inside the steps by self time (module docstring)."""
    optimizer = [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("tid")) for e in xs
                 if e["name"].startswith("Optimizer.step#")]
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in xs:
        if e.get("cat") == "cpu_op" and _inside(float(e["ts"]), steps):
            by_tid[(e.get("pid"), e.get("tid"))].append(e)
    for (_, tid), evs in by_tid.items():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[list[Any]] = []   # [end, event, children's time]
        selfs: list[tuple[dict[str, Any], float]] = []
        for e in evs:
            ts, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            while stack and stack[-1][0] <= ts:
                done = stack.pop()
                selfs.append((done[1], float(done[1]["dur"]) - done[2]))
            if stack:
                stack[-1][2] += float(e["dur"])
            stack.append([end, e, 0.0])
        selfs += [(s[1], float(s[1]["dur"]) - s[2]) for s in stack]
        for e, own in selfs:
            ts = float(e["ts"])
            cls = classify_kernel(e["name"])
            if cls != COMM_CLASS and any(a <= ts <= b and t == tid for a, b, t in optimizer):
                cls = "optimizer"
            secs = max(0.0, own) * 1e-6
            classes[cls].add(secs)
            if cls == COMM_CLASS:
                key = f"{comm_op(e['name'], e.get('args') or {})}@{_group(e, default_pg)}"
                comm[key].add(float(e["dur"]) * 1e-6)
                comm_bytes[key] += _comm_bytes(e)
