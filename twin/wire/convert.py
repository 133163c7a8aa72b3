"""Conversions between the wire messages (``twin.rpc.v1``) and the twin's plain data.

Scenarios cross the wire as structured messages whose fields mirror the scenario file
format (``twin/core/specs.py``), with units spelled out in the few names where the file
format is terse (``hbm_TBps`` -> ``hbm_tbytes_per_s``). Incoming messages become the same
mapping a YAML file gives, so the core's strict loader does every check and names every
field; nothing here re-implements a rule. Both directions are generic over the message
descriptors, driven by one rename table, so a field added to a .proto and to the spec
works without code here.

Used by the server (message -> mapping, estimate -> message) and by ``twin.client``
(mapping -> message, message -> estimate); it lives in ``twin.wire`` so the client needs
no part of the server.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from twin.core.errors import SpecError, TooLargeError
from twin.core.estimate import Breakdown, Cost, Energy, Estimate, LinkLoad, StepInterval
from twin.core.memory import MemoryBreakdown
from twin.core.schema import FrozenDict
from twin.core.units import GIB
from twin.rpc.v1 import estimate_pb2, scenario_pb2

# Wire name -> scenario-file key, per message. Everything not listed keeps its name.
RENAMES: dict[str, dict[str, str]] = {
    "twin.rpc.v1.Gpu": {"hbm_tbytes_per_s": "hbm_TBps", "nvlink_gbytes_per_s": "nvlink_GBps",
                        "efficiency_profile": "efficiency"},
    "twin.rpc.v1.ScaleUp": {"link_gbytes_per_s": "link_GBps"},
    "twin.rpc.v1.ScaleOut": {"nic_gbits_per_s": "nic_gbps", "tier_spans_gpus": "tier_spans"},
    "twin.rpc.v1.MemoryPool": {"bandwidth_gbytes_per_s_per_node": "bandwidth_GBps_per_node"},
}
_REVERSE: dict[str, dict[str, str]] = {msg: {v: k for k, v in table.items()} for msg, table in RENAMES.items()}
# Messages that also accept a bare preset name where the file format allows one.
# Messages a file may give as one string: the field that string fills (a preset, a strategy's name).
_PRESET_FIELD = {"twin.rpc.v1.Gpu": "preset", "twin.rpc.v1.Model": "preset", "twin.rpc.v1.Software": "preset",
                 "twin.rpc.v1.StrategySelection": "name"}
_STRUCT = "google.protobuf.Struct"
DEFAULT_MAX_ITEMS = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one message may carry (besides gRPC's byte limit)."""

    max_items: int = DEFAULT_MAX_ITEMS


def _too_many(path: str, n: int, limits: Limits) -> None:
    if n > limits.max_items:
        raise TooLargeError(path, f"has {n} entries; the server accepts at most {limits.max_items} "
                                  "(limits.max_list_items)")


# ------------------------------------------------------------------------- enums
_ENUM_PREFIX: dict[str, str] = {}


def _enum_prefix(enum: EnumDescriptor) -> str:
    prefix = _ENUM_PREFIX.get(enum.full_name)
    if prefix is None:
        prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"
        _ENUM_PREFIX[enum.full_name] = prefix
    return prefix


def enum_to_text(enum: EnumDescriptor, number: int, path: str) -> str | None:
    """``PRECISION_BF16`` -> ``"bf16"``; the zero value (unspecified) -> None."""
    if number == 0:
        return None
    value = enum.values_by_number.get(number)
    if value is None:
        raise SpecError(path, f"unknown {enum.name} value {number}; expected one of: "
                              + ", ".join(repr(t) for t in enum_choices(enum)))
    return value.name.removeprefix(_enum_prefix(enum)).lower()


def enum_choices(enum: EnumDescriptor) -> list[str]:
    """The text forms of every specified value of ``enum``."""
    prefix = _enum_prefix(enum)
    return [v.name.removeprefix(prefix).lower() for v in enum.values if v.number != 0]


def _enum_from_text(enum: EnumDescriptor, text: Any, path: str) -> int:
    if not isinstance(text, str):
        raise SpecError(path, f"must be one of {', '.join(repr(c) for c in enum_choices(enum))} (got {text!r})")
    value = enum.values_by_name.get(_enum_prefix(enum) + text.upper())
    if value is None or value.number == 0:
        raise SpecError(path, f"must be one of {', '.join(repr(c) for c in enum_choices(enum))} (got {text!r})")
    return value.number


# ------------------------------------------------------------------------ structs
def _plain_number(x: float) -> float | int:
    # Struct numbers are doubles; plugin parameters such as ecmp_flows_per_pair are counts.
    if math.isfinite(x) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


def value_to_python(value: struct_pb2.Value, path: str, limits: Limits) -> Any:
    """A ``google.protobuf.Value`` as plain Python (integral numbers become ints)."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_to_dict(value.struct_value, path, limits)
    if kind == "list_value":
        items = value.list_value.values
        _too_many(path, len(items), limits)
        return [value_to_python(v, f"{path}[{i}]", limits) for i, v in enumerate(items)]
    if kind == "number_value":
        return _plain_number(value.number_value)
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def struct_to_dict(struct: struct_pb2.Struct, path: str = "", limits: Limits = Limits()) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as a plain dict."""
    _too_many(path, len(struct.fields), limits)
    return {k: value_to_python(v, f"{path}.{k}" if path else k, limits) for k, v in struct.fields.items()}


_PLAIN = (str, float, bool, type(None))


def to_jsonable(obj: Any) -> Any:
    """Plain data for a Struct: dataclasses, tuples, paths and other objects made JSON-like."""
    # Hot path (the fabric report of every Predict): plain types first, dataclasses last.
    if isinstance(obj, _PLAIN):
        return obj
    if isinstance(obj, int):
        if abs(obj) < 2**53:
            return obj
        # Struct numbers are doubles; an integer past 1.8e308 has no double at all.
        return float(obj) if abs(obj) < 2**1023 else str(obj)
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return str(obj)


def dict_to_struct(data: Mapping[str, Any], out: struct_pb2.Struct | None = None) -> struct_pb2.Struct:
    """A plain mapping as a ``google.protobuf.Struct``."""
    out = out if out is not None else struct_pb2.Struct()
    out.update(to_jsonable(data))
    return out


class _NotPlain(Exception):
    """Raised by :func:`_fill_struct` on data that needs :func:`to_jsonable` first."""


def _fill_value(value: struct_pb2.Value, obj: Any) -> None:
    # The steps of protobuf's Struct.update (well_known_types._SetStructValue), in the same
    # order, for data that to_jsonable would return unchanged; anything else is _NotPlain.
    if obj is None:
        value.null_value = 0
    elif isinstance(obj, bool):
        value.bool_value = obj
    elif isinstance(obj, str):
        value.string_value = obj
    elif isinstance(obj, float) or (isinstance(obj, int) and abs(obj) < 2**53):
        value.number_value = obj
    elif isinstance(obj, dict):
        sub = value.struct_value
        sub.Clear()
        _fill_struct(sub, obj)
    elif isinstance(obj, list | tuple):
        items = value.list_value
        items.Clear()
        add = items.values.add
        for item in obj:
            _fill_value(add(), item)
    else:
        raise _NotPlain


def _fill_struct(out: struct_pb2.Struct, data: dict[str, Any]) -> None:
    fields = out.fields
    for key, item in data.items():
        if not isinstance(key, str):
            raise _NotPlain
        _fill_value(fields[key], item)


def struct_from_data(data: Mapping[str, Any], out: struct_pb2.Struct) -> struct_pb2.Struct:
    """``out`` (empty) filled as :func:`dict_to_struct` fills it, in one walk where ``data`` is
    plain JSON-like data (the estimate's ``details``), which skips to_jsonable's copy (~10 us a call).
    """
    if isinstance(data, dict):
        try:
            _fill_struct(out, data)
            return out
        except _NotPlain:  # a dataclass, a set, a big int, a non-string key: the general path
            out.Clear()
    return dict_to_struct(data, out)


_STRUCT_CACHE: OrderedDict[int | str, tuple[Any, bytes]] = OrderedDict()
_STRUCT_CACHE_SIZE = 512
_STRUCT_LOCK = threading.Lock()


def _cached_struct_bytes(data: Mapping[str, Any]) -> bytes:
    # Struct.update walks the mapping in Python (~0.2 ms for a fabric report); the same
    # cluster gives the same report, so keep the encoded bytes of recent ones.
    # The core hands out one read-only FrozenDict per cluster (Evaluator.fabric_report), so
    # that object's identity is the key (repr of a report costs ~18 us); the entry holds the
    # object, so its id cannot be reused while cached. Other mappings may change: keyed by repr.
    key: int | str = id(data) if type(data) is FrozenDict else repr(data)
    with _STRUCT_LOCK:
        hit = _STRUCT_CACHE.get(key)
        if hit is not None and (hit[0] is data or isinstance(key, str)):
            _STRUCT_CACHE.move_to_end(key)
            return hit[1]
    encoded = dict_to_struct(data).SerializeToString()
    with _STRUCT_LOCK:
        _STRUCT_CACHE[key] = (data if isinstance(key, int) else None, encoded)  # a repr key holds no object
        if len(_STRUCT_CACHE) > _STRUCT_CACHE_SIZE:
            _STRUCT_CACHE.popitem(last=False)
    return encoded


# -------------------------------------------------------------- message -> mapping
# How message_to_mapping reads each field, per message type: (file key, kind, enum type).
_MAP, _MAP_OF_MESSAGES, _REPEATED_MESSAGES, _REPEATED_ENUMS, _REPEATED = range(5)
_STRUCT_FIELD, _MESSAGE, _ENUM, _SCALAR = range(5, 9)
_READ_PLAN: dict[str, dict[str, tuple[str, int, EnumDescriptor | None]]] = {}


def _read_plan(desc: Descriptor) -> dict[str, tuple[str, int, EnumDescriptor | None]]:
    # Worked out once per message type: looking up renames and map options per field of
    # every request cost about half of scenario_to_mapping (~5 us of ~11 us a scenario).
    plan = _READ_PLAN.get(desc.full_name)
    if plan is not None:
        return plan
    renames = RENAMES.get(desc.full_name, {})
    plan = {}
    for fd in desc.fields:
        mtype = fd.message_type
        if mtype is not None and mtype.GetOptions().map_entry:
            kind = _MAP_OF_MESSAGES if mtype.fields_by_name["value"].message_type else _MAP
        elif fd.is_repeated:
            kind = _REPEATED_MESSAGES if mtype is not None else _REPEATED_ENUMS if fd.enum_type else _REPEATED
        elif mtype is not None:
            kind = _STRUCT_FIELD if mtype.full_name == _STRUCT else _MESSAGE
        else:
            kind = _ENUM if fd.enum_type is not None else _SCALAR
        plan[fd.name] = (renames.get(fd.name, fd.name), kind, fd.enum_type)
    _READ_PLAN[desc.full_name] = plan
    return plan


def message_to_mapping(msg: Message, path: str = "", limits: Limits = Limits()) -> dict[str, Any]:
    """The fields that are set in ``msg``, as a scenario-file mapping (unset fields absent).

    ``path`` prefixes the dotted field names in errors (``plan.tp``).
    """
    plan = _read_plan(msg.DESCRIPTOR)
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        key, kind, enum = plan[fd.name]
        if kind == _SCALAR:
            out[key] = value
            continue
        fpath = f"{path}.{key}" if path else key
        if kind == _MESSAGE:
            out[key] = message_to_mapping(value, fpath, limits)
        elif kind == _ENUM:
            text = enum_to_text(enum, value, fpath)  # type: ignore[arg-type]
            if text is not None:
                out[key] = text
        elif kind == _STRUCT_FIELD:
            out[key] = struct_to_dict(value, fpath, limits)
        else:
            _too_many(fpath, len(value), limits)
            if kind == _MAP_OF_MESSAGES:
                out[key] = {k: message_to_mapping(v, f"{fpath}.{k}", limits) for k, v in value.items()}
            elif kind == _MAP:
                out[key] = dict(value.items())
            elif kind == _REPEATED_MESSAGES:
                out[key] = [message_to_mapping(v, f"{fpath}[{i}]", limits) for i, v in enumerate(value)]
            elif kind == _REPEATED_ENUMS:
                out[key] = [enum_to_text(enum, v, f"{fpath}[{i}]") for i, v in enumerate(value)]  # type: ignore[arg-type]
            else:
                out[key] = list(value)
    return out


def scenario_to_mapping(msg: scenario_pb2.Scenario, limits: Limits = Limits()) -> dict[str, Any]:
    """A wire scenario as the mapping a scenario file gives (presets still by name)."""
    data = message_to_mapping(msg, "", limits)
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and cluster.pop("scale_out_disabled", False):
        if "scale_out" in cluster:
            raise SpecError("cluster.scale_out_disabled", "cannot be true when cluster.scale_out is given")
        cluster["scale_out"] = None
    return data


# -------------------------------------------------------------- mapping -> message
def _checked_scalar(fd: FieldDescriptor, value: Any, path: str) -> Any:
    """``value`` checked against a scalar field's type (enums by their text form)."""
    if fd.enum_type is not None:
        return _enum_from_text(fd.enum_type, value, path)
    if fd.type == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise SpecError(path, f"must be a boolean (got {value!r})")
    elif fd.type == FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise SpecError(path, f"must be a string (got {value!r})")
    elif fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(path, f"must be a number (got {value!r})")
        value = float(value)
    else:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(path, f"must be an integer (got {value!r})")
    return value


def _assign(setter: Any, value: Any, path: str) -> None:
    try:
        setter(value)
    except (ValueError, TypeError) as err:  # e.g. an integer beyond int64
        raise SpecError(path, f"is out of range for the wire format (got {value!r})") from err


def mapping_to_message(data: Any, msg: Message, path: str = "") -> Message:
    """Fill ``msg`` from a scenario-file style mapping; unknown keys and bad types name the field."""
    desc: Descriptor = msg.DESCRIPTOR
    preset_field = _PRESET_FIELD.get(desc.full_name)
    if isinstance(data, str) and preset_field:
        data = {preset_field: data}
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping (got {data!r})")
    reverse = _REVERSE.get(desc.full_name, {})
    renamed = RENAMES.get(desc.full_name, {})
    for key, value in data.items():
        fpath = f"{path}.{key}" if path else str(key)
        if value is None:
            if desc.full_name == "twin.rpc.v1.Cluster" and key == "scale_out":
                msg.scale_out_disabled = True
            continue
        name = reverse.get(key, key)
        if desc.full_name == "twin.rpc.v1.Gpu" and key == "efficiency" and isinstance(value, Mapping):
            name = "efficiency"  # inline figures rather than a profile name
        fd = desc.fields_by_name.get(name) if isinstance(name, str) else None
        if fd is None or (name in renamed and name == key):  # wire-only spellings are not file keys
            known = sorted(renamed.get(f.name, f.name) for f in desc.fields)
            raise SpecError(fpath, f"unknown field; expected one of: {', '.join(known)}")
        mtype = fd.message_type
        if mtype is not None and mtype.GetOptions().map_entry:
            if not isinstance(value, Mapping):
                raise SpecError(fpath, f"must be a mapping (got {value!r})")
            target = getattr(msg, fd.name)
            vfd = mtype.fields_by_name["value"]
            for k, v in value.items():
                if not isinstance(k, str):
                    raise SpecError(fpath, f"keys must be strings (got {k!r})")
                if vfd.message_type is not None:  # a map of messages (strategies: {pp: {...}})
                    mapping_to_message(v, target[k], f"{fpath}.{k}")
                    continue
                _assign(lambda x, k=k, target=target: target.__setitem__(k, x),
                        _checked_scalar(vfd, v, f"{fpath}.{k}"), f"{fpath}.{k}")
        elif fd.is_repeated:
            if not isinstance(value, list | tuple):
                raise SpecError(fpath, f"must be a list (got {value!r})")
            target = getattr(msg, fd.name)
            for i, v in enumerate(value):
                if mtype is not None:
                    mapping_to_message(v, target.add(), f"{fpath}[{i}]")
                else:
                    _assign(target.append, _checked_scalar(fd, v, f"{fpath}[{i}]"), f"{fpath}[{i}]")
        elif mtype is not None:
            if mtype.full_name == _STRUCT:
                if not isinstance(value, Mapping):
                    raise SpecError(fpath, f"must be a mapping (got {value!r})")
                dict_to_struct(value, getattr(msg, fd.name))
            else:
                mapping_to_message(value, getattr(msg, fd.name), fpath)
        else:
            _assign(lambda x, fd=fd: setattr(msg, fd.name, x), _checked_scalar(fd, value, fpath), fpath)
    return msg


def scenario_from_mapping(data: Any) -> scenario_pb2.Scenario:
    """A scenario-file mapping (as parsed from examples/*.yaml) as a wire scenario."""
    msg = scenario_pb2.Scenario()
    mapping_to_message(data, msg)
    return msg


# ---------------------------------------------------------------------- estimates
def estimate_to_message(est: Estimate, *, fabric: bool = True,
                        out: estimate_pb2.Estimate | None = None) -> estimate_pb2.Estimate:
    """The core estimate as a wire message (TooLargeError if a count overflows int64).

    ``out``: an empty message to fill in place (``response.estimate``), which saves copying a
    built message into its parent (~25 us for a PredictResponse).
    """
    for name in ("dp", "microbatches"):
        value = getattr(est, name)
        if not -(2**63) <= value < 2**63:
            raise TooLargeError(f"estimate.{name}", f"{value:.3g} does not fit the wire format's 64-bit integer")
    msg = out if out is not None else estimate_pb2.Estimate()
    msg.SetInParent()  # present in its parent even if every field is at its default, as a built message is
    # Field by field rather than one constructor call with nested messages (each nested
    # message built apart and copied in): the same message, ~40% less CPU (benchmarks/bench_wire.py).
    msg.scenario_name = est.scenario
    msg.step_time_s = est.step_time_s
    bd = est.breakdown
    wb = msg.breakdown
    wb.SetInParent()
    wb.compute_s = bd.compute_s
    wb.recompute_s = bd.recompute_s
    wb.exposed_comm_s.update(bd.exposed_comm_s)
    wb.bubble_s = bd.bubble_s
    wb.optimizer_s = bd.optimizer_s
    wb.offload_s = bd.offload_s
    wb.overlap_interference_s = bd.overlap_interference_s
    wb.total_s = bd.total_s
    mem = est.memory
    wm = msg.memory
    wm.SetInParent()
    for key, gib in mem.as_gib().items():
        setattr(wm, key, gib)
    wm.offload_capacity_gib = mem.pool_capacity / GIB
    wm.fits = mem.fits
    msg.tokens_per_s = est.tokens_per_s
    msg.tokens_per_s_per_gpu = est.tokens_per_s_per_gpu
    msg.model_tflops_per_gpu = est.model_tflops_per_gpu
    msg.mfu = est.mfu
    msg.mfu_at_precision_peak = est.mfu_at_precision_peak
    msg.model_flops_per_step = est.model_flops_per_step
    msg.microbatches = est.microbatches
    msg.dp = est.dp
    msg.comm_issued_s.update(est.comm_issued_s)
    msg.bytes_per_step.update(est.bytes_per_step)
    msg.algorithms.update(est.algorithms)
    msg.notes.extend(est.notes)
    add_link = msg.links.add
    for link in est.links:
        wl = add_link()
        wl.tier = link.tier
        wl.name = link.name
        wl.capacity_GBps = link.capacity_GBps
        wl.utilisation.update(link.utilisation)
        wl.stretch.update(link.stretch)
    msg.contention_s = est.contention_s
    if est.energy is not None:
        _fill_fields(msg.energy, est.energy)
    if est.cost is not None:
        _fill_fields(msg.cost, est.cost)
    if fabric and est.fabric:
        msg.fabric.MergeFromString(_cached_struct_bytes(est.fabric))
    if est.details:
        struct_from_data(est.details, msg.details)
    if est.interval is not None:
        _fill_fields(msg.interval, est.interval)
    return msg


_FIELD_PLAN: dict[tuple[type, str], tuple[tuple[str, bool], ...]] = {}


def _fill_fields(out: Message, obj: Any) -> None:
    """``out`` (empty) set from a result dataclass with the same field names, as the message's
    constructor would set it (repeated fields extended); the names are looked up once per class.
    """
    key = (type(obj), out.DESCRIPTOR.full_name)
    plan = _FIELD_PLAN.get(key)
    if plan is None:
        by_name = out.DESCRIPTOR.fields_by_name
        plan = _FIELD_PLAN[key] = tuple((f.name, by_name[f.name].is_repeated) for f in dataclasses.fields(obj))
    out.SetInParent()
    for name, repeated in plan:
        if repeated:
            getattr(out, name).extend(getattr(obj, name))
        else:
            setattr(out, name, getattr(obj, name))


def _from_fields(cls: type, msg: Message) -> Any:
    """``cls`` from a wire message with the same field names (repeated fields as tuples)."""
    return cls(**{f.name: tuple(v) if not isinstance(v := getattr(msg, f.name), float | int | str) else v
                  for f in dataclasses.fields(cls)})


def estimate_from_message(msg: estimate_pb2.Estimate) -> Estimate:
    """A wire estimate as the core's :class:`Estimate` (memory back in bytes)."""
    b, m = msg.breakdown, msg.memory
    breakdown = Breakdown(compute_s=b.compute_s, recompute_s=b.recompute_s, exposed_comm_s=dict(b.exposed_comm_s),
                          bubble_s=b.bubble_s, optimizer_s=b.optimizer_s, offload_s=b.offload_s,
                          overlap_interference_s=b.overlap_interference_s)
    memory = MemoryBreakdown(weights=m.weights_gib * GIB, gradients=m.gradients_gib * GIB,
                             optimizer=m.optimizer_gib * GIB, activations=m.activations_gib * GIB,
                             logits=m.logits_gib * GIB, runtime=m.runtime_gib * GIB,
                             offloaded=m.offloaded_gib * GIB, capacity=m.capacity_gib * GIB,
                             pool_capacity=m.offload_capacity_gib * GIB,
                             offloaded_host=m.offloaded_host_gib * GIB, host_capacity=m.host_capacity_gib * GIB)
    return Estimate(scenario=msg.scenario_name, step_time_s=msg.step_time_s, breakdown=breakdown, memory=memory,
                    tokens_per_s=msg.tokens_per_s, tokens_per_s_per_gpu=msg.tokens_per_s_per_gpu,
                    model_tflops_per_gpu=msg.model_tflops_per_gpu, mfu=msg.mfu,
                    mfu_at_precision_peak=msg.mfu_at_precision_peak, model_flops_per_step=msg.model_flops_per_step,
                    microbatches=msg.microbatches, dp=msg.dp, comm_issued_s=dict(msg.comm_issued_s),
                    bytes_per_step=dict(msg.bytes_per_step), algorithms=dict(msg.algorithms),
                    details=struct_to_dict(msg.details, "details", Limits(max_items=1 << 30)),
                    fabric=struct_to_dict(msg.fabric, "fabric", Limits(max_items=1 << 30)), notes=tuple(msg.notes),
                    links=tuple(LinkLoad(tier=link.tier, name=link.name, capacity_GBps=link.capacity_GBps,
                                         utilisation=dict(link.utilisation), stretch=dict(link.stretch))
                                for link in msg.links),
                    contention_s=msg.contention_s,
                    energy=_from_fields(Energy, msg.energy) if msg.HasField("energy") else None,
                    cost=_from_fields(Cost, msg.cost) if msg.HasField("cost") else None,
                    interval=_from_fields(StepInterval, msg.interval) if msg.HasField("interval") else None)


# ------------------------------------------------------------------------- sweeps
def sweep_spec_to_mapping(msg: Any, limits: Limits = Limits()) -> dict[str, Any]:
    """A wire SweepSpec as the sweep-file mapping :func:`twin.sweep.sweep_spec.parse_spec` reads."""
    out: dict[str, Any] = {"name": msg.name}
    if msg.HasField("base"):
        out["base"] = scenario_to_mapping(msg.base, limits)
    _too_many("spec.axes", len(msg.axes), limits)
    axes = []
    for i, axis in enumerate(msg.axes):
        path = f"spec.axes[{i}]"
        data: dict[str, Any] = {"path": axis.path}
        kind = axis.WhichOneof("domain")
        if kind == "values":
            _too_many(f"{path}.values", len(axis.values.values), limits)
            data["values"] = [value_to_python(v, f"{path}.values[{j}]", limits)
                              for j, v in enumerate(axis.values.values)]
        elif kind == "range":
            r = axis.range
            data["range"] = {"start": _plain_number(r.start), "stop": _plain_number(r.stop),
                             "step": _plain_number(r.step)}
        elif kind == "sample":
            s = axis.sample
            sample: dict[str, Any] = {"n": s.n}
            if s.HasField("seed"):
                sample["seed"] = s.seed
            if s.HasField("choices") and s.choices.values:
                _too_many(f"{path}.sample.choices", len(s.choices.values), limits)
                sample["choices"] = [value_to_python(v, f"{path}.sample.choices[{j}]", limits)
                                     for j, v in enumerate(s.choices.values)]
            if s.HasField("low"):
                sample["low"] = _plain_number(s.low)
            if s.HasField("high"):
                sample["high"] = _plain_number(s.high)
            data["sample"] = sample
        axes.append(data)
    out["axes"] = axes
    mode = enum_to_text(msg.DESCRIPTOR.fields_by_name["mode"].enum_type, msg.mode, "spec.mode")
    if mode:
        out["mode"] = mode
    if msg.HasField("objective"):
        objective: dict[str, Any] = {}
        if msg.objective.metric:
            objective["metric"] = msg.objective.metric
        if msg.objective.top:
            objective["top"] = msg.objective.top
        out["objective"] = objective
    if msg.HasField("keep_rows"):
        out["keep_rows"] = msg.keep_rows
    return out
