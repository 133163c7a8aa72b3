"""Sweep rows to the wire from the batch's columns, many rows at a time.

Building a ``SweepRow`` message field by field costs ~16 us a row in Python (~45 fields set on
the message), six times what the sweep engine spends evaluating the point (2.6 us). The rows
of a batch share their shape, so their protobuf encoding is computed for all of them at once:

- an estimate (``twin.rpc.v1.Estimate``) whose every field is a number has a fixed layout
  (protobuf encoding, https://protobuf.dev/programming-guides/encoding/: a double is its key and
  8 little-endian bytes; an integer a varint, which may carry redundant continuation bytes,
  so a fixed 10-byte form holds any int64; a nested message its key, its length and its
  bytes; a map entry a nested message of key and value), so numpy writes every row's bytes
  in one pass, column by column (:class:`Layout`);
- what varies in shape (the axis values of a row's assignment, the error of an infeasible
  row) is encoded once per distinct value and joined per row.

The numbers are those :func:`twin.wire.convert.estimate_to_message` would write for the row's
:class:`~twin.core.estimate.Estimate` (``twin.core.results.estimate_of_row``): the same
arithmetic on the same columns (tested: each row's bytes parse to the message that function
builds, serialized identically). A chunk of rows is parsed into one ``SweepEvent`` (in C).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import struct_pb2

from twin.core.units import GIB
from twin.rpc.v1 import estimate_pb2
from twin.rpc.v1 import sweep_service_pb2 as sw

_VARINT, _FIXED64, _LENGTH = 0, 1, 2
# Dimensions a sweep row has a column of (twin.sweep.metrics.EXPOSED_DIMS and the rest together).
ROW_DIMS = ("tp", "cp", "ep", "dp", "pp", "other")
_MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "runtime")


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf varint."""
    if value < _SMALL:
        return _VARINTS[value]
    return _varint(value)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


# Varints of the small numbers (row indices, lengths, keys), made once.
_SMALL = 1 << 16
_VARINTS = [_varint(v) for v in range(_SMALL)]


def key(number: int, wire_type: int) -> bytes:
    """The key of field ``number`` with ``wire_type``."""
    return varint(number << 3 | wire_type)


def _number(message: Any, name: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number)


@dataclass(frozen=True)
class _Part:
    kind: str            # "const" | "f64" | "int" | "bool"
    data: Any            # the bytes, or the column's name
    size: int


class Layout:
    """The fixed-size encoding of a message whose fields are numbers, nested such messages and
    maps with fixed keys: a list of parts (constant bytes, or a column's value per row).
    """

    def __init__(self) -> None:
        self.parts: list[_Part] = []

    @property
    def size(self) -> int:
        """Bytes of one row's encoding."""
        return sum(p.size for p in self.parts)

    def const(self, data: bytes) -> Layout:
        """Constant bytes."""
        if self.parts and self.parts[-1].kind == "const":
            last = self.parts.pop()
            data = last.data + data
        self.parts.append(_Part("const", data, len(data)))
        return self

    def double(self, number: int, column: str) -> Layout:
        """A double field from ``column``."""
        self.const(key(number, _FIXED64))
        self.parts.append(_Part("f64", column, 8))
        return self

    def integer(self, number: int, column: str) -> Layout:
        """An int64 field from ``column`` (>= 0), as a 10-byte varint."""
        self.const(key(number, _VARINT))
        self.parts.append(_Part("int", column, 10))
        return self

    def boolean(self, number: int, column: str) -> Layout:
        """A bool field from ``column``."""
        self.const(key(number, _VARINT))
        self.parts.append(_Part("bool", column, 1))
        return self

    def nested(self, number: int, inner: Layout) -> Layout:
        """A message field whose encoding is ``inner``."""
        self.const(key(number, _LENGTH) + varint(inner.size))
        for p in inner.parts:
            if p.kind == "const":
                self.const(p.data)
            else:
                self.parts.append(p)
        return self

    def map_entries(self, number: int, columns: Mapping[str, str]) -> Layout:
        """A map<string, double> field: one entry per (map key, column)."""
        for name, column in columns.items():
            entry = Layout().const(key(1, _LENGTH) + varint(len(name.encode())) + name.encode()).double(2, column)
            self.nested(number, entry)
        return self

    def encode(self, columns: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        """Every row's encoding: an (n, size) uint8 array."""
        out = np.empty((n, self.size), np.uint8)
        at = 0
        for p in self.parts:
            view = out[:, at:at + p.size]
            if p.kind == "const":
                view[:] = np.frombuffer(p.data, np.uint8)
            elif p.kind == "f64":
                view[:] = np.ascontiguousarray(columns[p.data], "<f8").view(np.uint8).reshape(n, 8)
            elif p.kind == "bool":
                view[:, 0] = np.asarray(columns[p.data], bool)
            else:
                values = np.asarray(columns[p.data], np.int64).astype(np.uint64)
                for j in range(10):  # 7 bits a byte, every byte but the last flagged "more"
                    view[:, j] = ((values >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8) | (
                        0x80 if j < 9 else 0)
            at += p.size
        return out


def _estimate_layout(priced: bool, interval: bool) -> Layout:
    """The layout of a row's ``Estimate`` (with its cost when ``priced``, its interval with ``interval``)."""
    e, b, m = estimate_pb2.Estimate, estimate_pb2.StepBreakdown, estimate_pb2.MemoryPerGpu
    en, c = estimate_pb2.StepEnergy, estimate_pb2.StepCost
    breakdown = Layout()
    for name, column in (("compute_s", "compute_s"), ("recompute_s", "recompute_s")):
        breakdown.double(_number(b, name), column)
    breakdown.map_entries(_number(b, "exposed_comm_s"), {d: f"exposed_{d}_s" for d in ROW_DIMS})
    for name, column in (("bubble_s", "bubble_s"), ("optimizer_s", "optimizer_s"), ("offload_s", "offload_s"),
                         ("overlap_interference_s", "interference_s"), ("total_s", "@total_s")):
        breakdown.double(_number(b, name), column)
    memory = Layout()
    for name in (*(f"{p}_gib" for p in _MEMORY_PARTS), "total_gib", "capacity_gib", "offloaded_gib",
                 "offload_capacity_gib", "offloaded_host_gib", "host_capacity_gib"):
        memory.double(_number(m, name), f"@{name}")
    memory.boolean(_number(m, "fits"), "@fits")
    energy = Layout()
    for name, column in (("gpu_j", "energy_gpu_j"), ("nic_j", "energy_nic_j"), ("switch_j", "energy_switch_j"),
                         ("optics_j", "energy_optics_j"), ("host_j", "energy_host_j"), ("cxl_j", "energy_cxl_j"),
                         ("facility_j", "energy_facility_j"), ("total_j", "energy_j"),
                         ("joules_per_token", "joules_per_token"), ("tokens_per_joule", "tokens_per_joule"),
                         ("average_power_w", "average_power_w"), ("gpu_busy_s", "gpu_busy_s"),
                         ("gpu_wait_s", "gpu_wait_s"), ("pue", "pue")):
        energy.double(_number(en, name), column)
    out = Layout().double(_number(e, "step_time_s"), "step_time_s").nested(_number(e, "breakdown"), breakdown)
    out.nested(_number(e, "memory"), memory)
    for name in ("tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "mfu_at_precision_peak",
                 "model_flops_per_step"):
        out.double(_number(e, name), name)
    out.integer(_number(e, "microbatches"), "microbatches").integer(_number(e, "dp"), "dp")
    out.map_entries(_number(e, "comm_issued_s"), {d: f"issued_{d}_s" for d in ROW_DIMS})
    out.nested(_number(e, "energy"), energy)
    if interval:
        iv, bounds = estimate_pb2.StepInterval, ("p80_low_s", "p80_high_s", "p95_low_s", "p95_high_s")
        out.nested(_number(e, "interval"), Layout().double(_number(iv, bounds[0]), f"step_time_{bounds[0]}")
                   .double(_number(iv, bounds[1]), f"step_time_{bounds[1]}")
                   .double(_number(iv, bounds[2]), f"step_time_{bounds[2]}")
                   .double(_number(iv, bounds[3]), f"step_time_{bounds[3]}"))
    if priced:
        cost = Layout()
        for name, column in (("usd_per_step", "cost_usd_per_step"),
                             ("usd_per_million_tokens", "usd_per_million_tokens"),
                             ("hardware_usd", "hardware_usd"), ("electricity_usd", "electricity_usd")):
            cost.double(_number(c, name), column)
        out.nested(_number(e, "cost"), cost)
    return out


_LAYOUTS = {(priced, interval): _estimate_layout(priced, interval) for priced in (False, True)
            for interval in (False, True)}


def _derived(rows: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of the rows ``idx`` an estimate's message holds, with what it derives
    (``@``: the breakdown's total, memory in GiB and its verdict) computed as the estimate does.
    """
    cols = {name: np.asarray(values)[idx] for name, values in rows.items()
            if getattr(values, "dtype", None) is not None and values.dtype.kind in "fiub"}
    parts = [cols[f"memory_{p}_bytes"] for p in _MEMORY_PARTS]
    total = parts[0] + parts[1] + parts[2] + parts[3] + parts[4] + parts[5]  # MemoryBreakdown.total's order
    for p, values in zip(_MEMORY_PARTS, parts, strict=True):
        cols[f"@{p}_gib"] = values / GIB
    cols["@total_gib"] = total / GIB
    cols["@capacity_gib"] = cols["memory_capacity_bytes"] / GIB
    cols["@offloaded_gib"] = cols["memory_offloaded_bytes"] / GIB
    cols["@offload_capacity_gib"] = cols["memory_pool_capacity_bytes"] / GIB
    host = cols["memory_offloaded_host_bytes"]
    cols["@offloaded_host_gib"] = host / GIB
    cols["@host_capacity_gib"] = cols["memory_host_capacity_bytes"] / GIB
    # MemoryBreakdown.fits: HBM, host DRAM and the CXL pool (what is offloaded but not to host).
    cols["@fits"] = ((total <= cols["memory_capacity_bytes"]) & (host <= cols["memory_host_capacity_bytes"])
                     & (cols["memory_offloaded_bytes"] - host <= cols["memory_pool_capacity_bytes"]))
    exposed = [cols[f"exposed_{d}_s"].tolist() for d in ROW_DIMS]
    # Breakdown.total_s: the exposed communication summed exactly (math.fsum), then the rest in order.
    fsum = np.asarray([math.fsum(v) for v in zip(*exposed, strict=True)], np.float64) if len(idx) else np.zeros(0)
    cols["@total_s"] = (cols["compute_s"] + cols["recompute_s"] + fsum + cols["bubble_s"] + cols["optimizer_s"]
                        + cols["offload_s"] + cols["interference_s"])
    return cols


def estimates(rows: Mapping[str, np.ndarray], idx: np.ndarray) -> list[bytes]:
    """The ``Estimate`` encoding of each row in ``idx`` (feasible rows with the detail columns)."""
    out: list[bytes] = [b""] * len(idx)
    if not len(idx):
        return out
    cols = _derived(rows, idx)
    priced = ~np.isnan(cols["cost_usd_per_step"])
    interval = "step_time_p80_low_s" in cols and bool((~np.isnan(cols["step_time_p80_low_s"])).all())
    for flag in (False, True):
        sel = np.flatnonzero(priced == flag)
        if not len(sel):
            continue
        layout = _LAYOUTS[(flag, interval)]
        block = layout.encode({k: v[sel] for k, v in cols.items()}, len(sel)).tobytes()
        size = layout.size
        for j, k in enumerate(sel.tolist()):
            out[k] = block[j * size:(j + 1) * size]
    return out


def assignment_entry(path: str, value: Any, to_struct: Callable[[Mapping[str, Any]], struct_pb2.Struct]) -> bytes:
    """One axis value as the encoding of a ``Struct`` holding it alone (Structs concatenate)."""
    return to_struct({path: value}).SerializeToString(deterministic=True)


def error_bytes(code: str, field: str, description: str) -> bytes:
    """A ``PointError``'s encoding."""
    return sw.PointError(code=code, field=field, description=description).SerializeToString(deterministic=True)


_ROW_INDEX = key(_number(sw.SweepRow, "index"), _VARINT)
_ROW_ASSIGNMENT = key(_number(sw.SweepRow, "assignment"), _LENGTH)
_ROW_ESTIMATE = key(_number(sw.SweepRow, "estimate"), _LENGTH)
_ROW_ERROR = key(_number(sw.SweepRow, "error"), _LENGTH)
_ROWS_ROW = key(_number(sw.SweepRows, "rows"), _LENGTH)
_EVENT_ROWS = key(_number(sw.SweepEvent, "rows"), _LENGTH)


def row(index: int, assignment: bytes, outcome: bytes, feasible: bool) -> bytes:
    """A ``SweepRow``'s encoding from its parts' encodings."""
    return b"".join((_ROW_INDEX, varint(index), _ROW_ASSIGNMENT, varint(len(assignment)), assignment,
                     _ROW_ESTIMATE if feasible else _ROW_ERROR, varint(len(outcome)), outcome))


def framed(row_bytes: bytes) -> bytes:
    """A row's encoding as one entry of ``SweepRows.rows``."""
    return b"".join((_ROWS_ROW, varint(len(row_bytes)), row_bytes))


def event(framed_rows: Sequence[bytes]) -> sw.SweepEvent:
    """A ``SweepEvent(rows=...)`` of rows already framed (:func:`framed`), parsed in one go."""
    inner = b"".join(framed_rows)
    return sw.SweepEvent.FromString(b"".join((_EVENT_ROWS, varint(len(inner)), inner)))
