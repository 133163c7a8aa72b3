"""Sweep specs: a base scenario plus axes over any scenario field, checked up front.

A sweep spec is a YAML/JSON mapping::

    name: fabrics-vs-plans
    base: {cluster: {system: DGX-H100, num_gpus: 1024}, model: llama3.1-70b, plan: {gbs: 1024}}
    axes:
      - {path: plan.tp, values: [1, 2, 4, 8]}
      - {path: cluster.num_gpus, range: {start: 512, stop: 8192, factor: 2}}   # 512 .. 4096 (stop exclusive)
      - {path: cluster.scale_out.nic_gbps, sample: {low: 100, high: 800, n: 4, seed: 1}}
    mode: grid            # grid (cartesian) | zip (i-th value of every axis) | random
    samples: 10000        # random mode: how many points (without it: zip of each axis's n draws)
    seed: 0               # random mode: per-point draws are a pure function of (seed, point id)
    objective: {metric: step_time_s, top: 10}
    keep_rows: false

``base`` may also be a path to a scenario file (relative to the spec file).

Errors in the spec itself (an unknown path, a value of the wrong type, a bad range) are
:class:`SpecError` naming the field (``axes[2].values[1]``). Points whose combination
breaks a cross-field rule (degrees that do not divide, too little memory) are not errors:
the sweep counts them by reason.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

from twin.core import schema
from twin.core.catalog import Catalog
from twin.core.errors import NotFoundError, SpecError, TooLargeError, TwinError
from twin.core.failures.failure_spec import FailureSpec, load_failure_spec
from twin.core.scenario_io import load_strategies, read_mapping, resolve_cluster, resolve_model, resolve_software
from twin.core.specs import Calibration, Cluster, Model, Plan, Strategies
from twin.sweep.metrics import FLEET_METRICS, METRICS, default_order

MODES = ("grid", "zip", "random")
SECTIONS = ("cluster", "model", "plan", "calibration", "failures", "software", "strategies")
# Above this many points a sweep must be split (or the limit raised by the caller).
DEFAULT_MAX_POINTS = 100_000_000
# Values of one axis (a range, a sample's n, a list). An axis longer than the sweep's point
# limit is refused while parsing, before its values are built (a server's limit is small).
_MAX_RANGE = 10_000_000
_SPEC_KEYS = {"name", "description", "base", "axes", "mode", "samples", "seed", "objective", "keep_rows"}
_AXIS_KEYS = {"path", "values", "range", "sample", "name"}
# Fields whose value names a registered fabric model: checked against the engine's kinds.
_KIND_FIELDS = {("scale_up", "fabric"): "scale_up", ("scale_out", "fabric"): "scale_out",
                ("optics", "kind"): "optics", ("memory_pool", "fabric"): "memory"}
# ``strategies`` is keyed by dimension (free-form): its loader and the engine check it.
_ROOT_TYPES: dict[str, type] = {"cluster": Cluster, "model": Model, "plan": Plan, "calibration": Calibration,
                                 "failures": FailureSpec, "strategies": dict}


@dataclass(frozen=True)
class Sample:
    """Random values of one axis: from ``choices``, or uniform in [low, high] (log-uniform if ``log``)."""

    n: int | None
    seed: int
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False


@dataclass(frozen=True)
class Axis:
    """One swept field: its dotted path and its values (or how to sample them)."""

    path: str
    values: tuple[Any, ...]
    sample: Sample | None = None
    label: str = ""

    @property
    def section(self) -> str:
        """First path segment: cluster, model, plan or calibration."""
        return self.path.split(".", 1)[0]

    @property
    def continuous(self) -> bool:
        """Random mode draws a fresh number per point (no value table)."""
        return self.sample is not None and not self.sample.choices and not self.values

    @property
    def column(self) -> str:
        """Name of this axis's column in result rows."""
        return self.label or self.path


@dataclass(frozen=True)
class Objective:
    """What the sweep ranks by."""

    metric: str = "step_time_s"
    top: int = 10
    order: str = "min"


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, checked sweep: plain data, picklable, shipped once to every worker."""

    name: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    mode: str = "grid"
    samples: int = 0
    seed: int = 0
    objective: Objective = field(default_factory=Objective)
    keep_rows: bool = False
    # ``base.fleet``: the other jobs on the same fabric (twin.sweep.fleetmetrics); None: alone.
    fleet: dict[str, Any] | None = None

    @property
    def total_points(self) -> int:
        """How many points the sweep has."""
        if self.mode == "random":
            return self.samples
        if not self.axes:
            return 1
        if self.mode == "zip":
            return len(self.axes[0].values)
        return math.prod(len(a.values) for a in self.axes)


# --------------------------------------------------------------------- paths
def _unwrap(tp: Any) -> Any:
    """``X | None`` -> X."""
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def check_path(path: Any, where: str) -> list[str]:
    """Split and check a dotted scenario path; SpecError naming ``where`` if it is unknown."""
    if not isinstance(path, str) or not path:
        raise SpecError(where, f"must be a dotted field path such as 'plan.tp' (got {path!r})")
    parts = path.split(".")
    if parts[0] not in SECTIONS:
        raise SpecError(where, f"unknown field {path!r}; a path starts with one of: {', '.join(SECTIONS)}")
    tp: Any = _ROOT_TYPES[parts[0]]
    for i, seg in enumerate(parts[1:], start=1):
        here = ".".join(parts[: i + 1])
        if tp is dict or get_origin(tp) in (dict, Mapping):
            return parts  # free-form parameters (fabric params): the fabric model checks the keys
        if not dataclasses.is_dataclass(tp):
            raise SpecError(where, f"unknown field {here!r}: {'.'.join(parts[:i])} has no sub-fields")
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        extra = {"system"} if tp is Cluster else ({"preset"} if tp in (Model, _gpu_type()) else set())
        if seg in extra:
            if i != len(parts) - 1:
                raise SpecError(where, f"unknown field {here + '.' + parts[i + 1]!r}")
            return parts
        if seg not in names:
            known = ", ".join(sorted(names | extra))
            raise SpecError(where, f"unknown field {here!r}; expected one of: {known}")
        tp = _unwrap(schema.field_types(tp)[seg])
    return parts


def _gpu_type() -> type:
    from twin.core.specs import GPU

    return GPU


def _preset_value(catalog: Catalog, section: str, data: Mapping[str, Any], key: str) -> Any:
    """The value a preset named in ``data`` gives ``key`` (None if no preset or no such key)."""
    try:
        if section == "cluster" and "system" in data:
            return catalog.get("systems", data["system"], "cluster.system").get(key)
        if section == "model" and "preset" in data:
            return catalog.get("models", data["preset"], "model.preset").get(key)
        if section == "gpu" and "preset" in data:
            return catalog.get("gpus", data["preset"], "cluster.gpu.preset").get(key)
    except TwinError:
        return None
    return None


def set_path(root: dict[str, Any], parts: Sequence[str], value: Any, catalog: Catalog) -> None:
    """Set ``value`` at ``parts`` inside a scenario mapping, in place.

    A preset name met on the way (``model: llama3.1-70b`` with a path ``model.seq_len``)
    becomes ``{preset: NAME}`` so the override merges with the preset; a sub-mapping a
    system preset supplies (``cluster.scale_out`` of ``DGX-H100``) merges the same way.
    """
    node: Any = root
    for i, seg in enumerate(parts[:-1]):
        child = node.get(seg)
        if isinstance(child, str) and seg in ("model", "gpu"):
            child = {"preset": child}
        elif child is None:
            child = {}
            if seg == "gpu":  # the GPU comes from the system preset: override that preset
                name = _preset_value(catalog, "cluster", node, "gpu")
                if isinstance(name, str):
                    child = {"preset": name}
        elif not isinstance(child, dict):
            child = dict(child) if isinstance(child, Mapping) else child
        if not isinstance(child, dict):
            raise SpecError(".".join(parts[: i + 1]), f"is not a mapping (got {child!r}); cannot set {'.'.join(parts)}")
        node[seg] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)


# -------------------------------------------------------------- building
def build_section(section: str, data: Any, catalog: Catalog) -> Any:
    """One scenario section from its mapping: strict types and bounds, no cross-field rules."""
    if section == "cluster":
        return resolve_cluster(data, catalog)
    if section == "model":
        return resolve_model(data, catalog)
    if section == "plan":
        return _PLAN_LOADER(data, "plan")
    if section == "calibration":
        return _CALIBRATION_LOADER(data or {}, "calibration")
    if section == "failures":
        # Failure rates, checkpointing, spares: only failure metrics use it (twin.sweep.failmetrics).
        return load_failure_spec(data, "failures")
    if section == "software":
        # One stack for the whole sweep (a batch shares its software, like its model).
        return resolve_software(data.get("preset") if set(data) == {"preset"} else data, catalog)
    if section == "strategies":
        # A selection per point (an axis may sweep it); the engine resolves the names.
        return load_strategies(data)
    raise SpecError(section, "unknown section")  # pragma: no cover - paths are checked first


# schema.load with the class's loader looked up once (equal input -> one object).
_PLAN_LOADER = schema.loader(Plan)
_CALIBRATION_LOADER = schema.loader(Calibration)


def get_path(obj: Any, parts: Sequence[str]) -> Any:
    """The attribute at ``parts[1:]`` of a built section object (mapping keys for params)."""
    for seg in parts[1:]:
        obj = obj.get(seg) if isinstance(obj, Mapping) else getattr(obj, seg)
    return obj


# ---------------------------------------------------------------- parsing
def _int(value: Any, where: str, *, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float)
                                                                        and not value.is_integer()):
        raise SpecError(where, f"must be an integer (got {value!r})")
    value = int(value)
    if low is not None and value < low:
        raise SpecError(where, f"must be >= {low} (got {value})")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(where, f"must be a finite number (got {value!r})")
    return float(value)


def _axis_limit(max_points: int) -> int:
    return min(_MAX_RANGE, max_points)


def _too_long(where: str, count: int, limit: int) -> TooLargeError:
    return TooLargeError(where, f"has {count:,} values; an axis may have at most {limit:,} (the sweep's point limit)")


def _range_values(rng: Any, where: str, limit: int = _MAX_RANGE) -> list[Any]:
    if not isinstance(rng, Mapping):
        raise SpecError(where, f"must be a mapping {{start, stop, step | factor}} (got {rng!r})")
    unknown = sorted(set(rng) - {"start", "stop", "step", "factor"})
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", "unknown field; expected one of: factor, start, step, stop")
    for key in ("start", "stop"):
        if key not in rng:
            raise SpecError(f"{where}.{key}", "is required")
    start, stop = _number(rng["start"], f"{where}.start"), _number(rng["stop"], f"{where}.stop")
    integral = all(isinstance(rng.get(k), int) and not isinstance(rng.get(k), bool)
                   for k in ("start", "stop", "step") if k in rng)
    if "step" in rng and "factor" in rng:
        raise SpecError(where, "give either step or factor, not both")
    out: list[Any] = []
    # stop is exclusive, as in Python's range() (and the proto's Range)
    if "factor" in rng:
        factor = _number(rng["factor"], f"{where}.factor")
        if factor <= 1 or start <= 0:
            raise SpecError(f"{where}.factor", f"must be > 1 with start > 0 (got factor {factor}, start {start})")
        x = start
        while x < stop * (1 - 1e-12) and len(out) <= limit:
            out.append(round(x) if integral else x)
            x *= factor
    else:
        step = _number(rng.get("step", 1), f"{where}.step")
        if step <= 0:
            raise SpecError(f"{where}.step", f"must be > 0 (got {step})")
        span = (stop - start) / step
        if not math.isfinite(span):  # e.g. start -1e308, stop 1e308: the span overflows a double
            raise TooLargeError(where, f"spans more values than a double can count; an axis may have at most "
                                       f"{limit:,}")
        count = math.ceil(span - 1e-9)
        if count > limit:
            raise _too_long(where, count, limit)
        out = [round(start + k * step) if integral else start + k * step for k in range(max(0, count))]
    if len(out) > limit:
        raise TooLargeError(where, f"has more than {limit:,} values; an axis may have at most {limit:,} (the "
                                   "sweep's point limit)")
    if not out:
        raise SpecError(where, f"is empty (stop {stop} must be above start {start}; stop is exclusive)")
    return out


def _sample(data: Any, where: str, mode: str, limit: int = _MAX_RANGE) -> Sample:
    if not isinstance(data, Mapping):
        raise SpecError(where, f"must be a mapping {{choices | low, high; n; seed}} (got {data!r})")
    unknown = sorted(set(data) - {"choices", "low", "high", "n", "seed", "log", "integer"})
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", "unknown field; expected one of: choices, high, integer, log, low, n, "
                                                 "seed")
    n = data.get("n")
    if n is not None:
        n = _int(n, f"{where}.n", low=1)
        if n > limit:  # drawn up front in grid/zip mode: refuse before allocating n values
            raise _too_long(f"{where}.n", n, limit)
    elif mode != "random":
        raise SpecError(f"{where}.n", "is required: how many values to draw (only random mode with samples: N "
                                      "draws per point)")
    seed = _int(data.get("seed", 0), f"{where}.seed", low=0)
    log = data.get("log", False)
    if not isinstance(log, bool):
        raise SpecError(f"{where}.log", f"must be a boolean (got {log!r})")
    if "choices" in data:
        if "low" in data or "high" in data:
            raise SpecError(where, "give either choices or low/high, not both")
        choices = data["choices"]
        if not isinstance(choices, list) or not choices:
            raise SpecError(f"{where}.choices", f"must be a non-empty list (got {choices!r})")
        return Sample(n=n, seed=seed, choices=tuple(choices))
    for key in ("low", "high"):
        if key not in data:
            raise SpecError(f"{where}.{key}", "is required (or give choices)")
    low, high = _number(data["low"], f"{where}.low"), _number(data["high"], f"{where}.high")
    if not low <= high:
        raise SpecError(f"{where}.high", f"must be >= low ({low}) (got {high})")
    if log and low <= 0:
        raise SpecError(f"{where}.low", f"must be > 0 for log sampling (got {low})")
    integer = data.get("integer")
    if integer is None:
        integer = isinstance(data["low"], int) and isinstance(data["high"], int)
    if not isinstance(integer, bool):
        raise SpecError(f"{where}.integer", f"must be a boolean (got {integer!r})")
    return Sample(n=n, seed=seed, low=low, high=high, log=log, integer=integer)


def draw_values(s: Sample) -> list[Any]:
    """The ``n`` values of a sampled axis in grid/zip mode (seeded, reproducible)."""
    import numpy as np

    assert s.n is not None
    rng = np.random.default_rng(s.seed)
    if s.choices:
        idx = rng.integers(0, len(s.choices), size=s.n)
        return [s.choices[int(i)] for i in idx]
    assert s.low is not None and s.high is not None
    u = rng.random(s.n)
    return [_from_unit(s, float(x)) for x in u]


def _from_unit(s: Sample, u: float) -> Any:
    assert s.low is not None and s.high is not None
    if s.log:
        x = math.exp(math.log(s.low) + u * (math.log(s.high) - math.log(s.low)))
    else:
        x = s.low + u * (s.high - s.low)
    if s.integer:
        return int(min(s.high, max(s.low, math.floor(x + 0.5))))
    return x


def _axis(data: Any, i: int, mode: str, limit: int = _MAX_RANGE) -> Axis:
    where = f"axes[{i}]"
    if not isinstance(data, Mapping):
        raise SpecError(where, f"must be a mapping {{path, values | range | sample}} (got {data!r})")
    unknown = sorted(set(data) - _AXIS_KEYS)
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", f"unknown field; expected one of: {', '.join(sorted(_AXIS_KEYS))}")
    if "path" not in data:
        raise SpecError(f"{where}.path", "is required")
    if str(data["path"]).split(".")[0] == "software":
        raise SpecError(f"{where}.path", "a sweep runs one software stack: set base.software (it cannot be an axis)")
    check_path(data["path"], f"{where}.path")
    given = [k for k in ("values", "range", "sample") if k in data]
    if len(given) != 1:
        raise SpecError(where, f"needs exactly one of values, range, sample (got {', '.join(given) or 'none'})")
    label = data.get("name", "")
    if not isinstance(label, str):
        raise SpecError(f"{where}.name", f"must be a string (got {label!r})")
    sample = None
    if "values" in data:
        values = data["values"]
        if not isinstance(values, list) or not values:
            raise SpecError(f"{where}.values", f"must be a non-empty list (got {values!r})")
        if len(values) > limit:
            raise _too_long(f"{where}.values", len(values), limit)
    elif "range" in data:
        values = _range_values(data["range"], f"{where}.range", limit)
    else:
        sample = _sample(data["sample"], f"{where}.sample", mode, limit)
        values = draw_values(sample) if mode != "random" else list(sample.choices)
    return Axis(path=data["path"], values=tuple(values), sample=sample, label=label)


def parse_spec(data: Any, *, base_dir: Path | None = None, max_points: int = DEFAULT_MAX_POINTS) -> SweepSpec:
    """Parse a sweep mapping (no engine needed); see :func:`check_values` for value checks.

    ``max_points``: an axis with more values than this is :class:`TooLargeError` here,
    before its values are built (the total is checked against it by :func:`check_values`).
    """
    if not isinstance(data, Mapping):
        raise SpecError("", f"a sweep spec must be a mapping (got {type(data).__name__})")
    unknown = sorted(set(data) - _SPEC_KEYS)
    if unknown:
        raise SpecError(unknown[0], f"unknown field; expected one of: {', '.join(sorted(_SPEC_KEYS))}")
    name = data.get("name", "sweep")
    if not isinstance(name, str):
        raise SpecError("name", f"must be a string (got {name!r})")
    mode = data.get("mode", "grid")
    if mode not in MODES:
        raise SpecError("mode", f"must be one of {', '.join(MODES)} (got {mode!r})")
    if "base" not in data:
        raise SpecError("base", "is required (a scenario mapping or a scenario file path)")
    base = data["base"]
    if isinstance(base, str):
        p = Path(base)
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        base = read_mapping(p)
    if not isinstance(base, Mapping):
        raise SpecError("base", f"must be a scenario mapping (got {type(base).__name__})")
    for key in base:
        if key not in (*SECTIONS, "name", "description", "fleet"):
            raise SpecError(f"base.{key}", f"unknown field; expected one of: "
                                           f"{', '.join((*SECTIONS, 'name', 'fleet'))}")
    fleet = base.get("fleet")
    if fleet is not None:
        fleet = check_fleet_section(fleet)
        base = {k: v for k, v in base.items() if k != "fleet"}
    if isinstance(base.get("software"), str):
        base = {**base, "software": {"preset": base["software"]}}
    axes_data = data.get("axes", [])
    if not isinstance(axes_data, list):
        raise SpecError("axes", f"must be a list (got {axes_data!r})")
    # random without `samples`: every axis draws its own n values and the i-th draws go
    # together (all a structured gRPC SweepSpec can say); with `samples`, each point draws afresh.
    zipped_random = mode == "random" and "samples" not in data
    if zipped_random and not axes_data:
        raise SpecError("axes", "random mode needs at least one axis")
    limit = _axis_limit(max_points)
    axes = tuple(_axis(a, i, "zip" if zipped_random else mode, limit) for i, a in enumerate(axes_data))
    if zipped_random:
        for i, a in enumerate(axes):
            if a.sample is None:
                raise SpecError(f"axes[{i}]", "random mode needs every axis to use sample (or give samples: N "
                                              "for per-point draws)")
        mode = "zip"
    paths = [a.path for a in axes]
    for i, p in enumerate(paths):
        for j, q in enumerate(paths[:i]):
            if p == q or p.startswith(q + ".") or q.startswith(p + "."):
                raise SpecError(f"axes[{i}].path", f"{p!r} overlaps axes[{j}].path {q!r}")
    samples = 0
    seed = _int(data.get("seed", 0), "seed", low=0)
    if mode == "random":
        samples = _int(data["samples"], "samples", low=1)
        if not axes:
            raise SpecError("axes", "random mode needs at least one axis")
    elif "samples" in data:
        raise SpecError("samples", f"only applies to random mode (mode is {mode!r})")
    if mode == "zip" and axes:
        n0 = len(axes[0].values)
        for i, a in enumerate(axes):
            if len(a.values) != n0:
                raise SpecError(f"axes[{i}]", f"{'random' if zipped_random else 'zip'} mode needs every axis to "
                                              f"have {n0} values (got {len(a.values)})")
    obj = data.get("objective", {}) or {}
    if not isinstance(obj, Mapping):
        raise SpecError("objective", f"must be a mapping {{metric, top, order}} (got {obj!r})")
    unknown = sorted(set(obj) - {"metric", "top", "order"})
    if unknown:
        raise SpecError(f"objective.{unknown[0]}", "unknown field; expected one of: metric, order, top")
    metric = obj.get("metric", "step_time_s")
    if metric not in METRICS:
        raise SpecError("objective.metric", f"must be one of {', '.join(METRICS)} (got {metric!r})")
    if metric in FLEET_METRICS and fleet is None:
        raise SpecError("objective.metric", f"{metric} needs base.fleet (the neighbours on the fabric)")
    top = _int(obj.get("top", 10), "objective.top", low=1)
    order = obj.get("order", default_order(metric))
    if order not in ("min", "max"):
        raise SpecError("objective.order", f"must be 'min' or 'max' (got {order!r})")
    keep_rows = data.get("keep_rows", False)
    if not isinstance(keep_rows, bool):
        raise SpecError("keep_rows", f"must be a boolean (got {keep_rows!r})")
    return SweepSpec(name=name, base=copy.deepcopy(dict(base)), axes=axes, mode=mode, samples=samples, seed=seed,
                     objective=Objective(metric=metric, top=top, order=order), keep_rows=keep_rows, fleet=fleet)


_FLEET_KEYS = {"cluster_gpus", "first_gpu", "neighbours"}


def check_fleet_section(data: Any) -> dict[str, Any]:
    """``base.fleet``: the shared cluster's size, where the swept job starts, its neighbours."""
    if not isinstance(data, Mapping):
        raise SpecError("base.fleet", f"must be a mapping (got {type(data).__name__})")
    for key in data:
        if key not in _FLEET_KEYS:
            raise SpecError(f"base.fleet.{key}", f"unknown field; expected one of: {', '.join(sorted(_FLEET_KEYS))}")
    gpus = data.get("cluster_gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError("base.fleet.cluster_gpus", f"is required: the shared cluster's GPUs (got {gpus!r})")
    start = data.get("first_gpu", 0)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise SpecError("base.fleet.first_gpu", f"must be a non-negative integer (got {start!r})")
    neighbours = data.get("neighbours")
    if not isinstance(neighbours, list) or not neighbours:
        raise SpecError("base.fleet.neighbours", "must be a non-empty list of jobs (as in a fleet file)")
    return {"cluster_gpus": gpus, "first_gpu": start, "neighbours": copy.deepcopy(neighbours)}


def load_spec(source: Any) -> SweepSpec:
    """A :class:`SweepSpec` from a mapping, a spec object or a YAML/JSON file path."""
    if isinstance(source, SweepSpec):
        return source
    if isinstance(source, str | Path):
        return parse_spec(read_mapping(source), base_dir=Path(source).resolve().parent)
    return parse_spec(source)


# ---------------------------------------------------------------- checking
def section_mapping(spec: SweepSpec, section: str) -> Any:
    """The base mapping of one section (a deep copy), ``{}`` when absent."""
    value = spec.base.get(section)
    if value is None:
        return {} if section != "model" else None
    return copy.deepcopy(value)


def apply_values(spec: SweepSpec, section: str, values: Mapping[int, Any], catalog: Catalog) -> Any:
    """The mapping of ``section`` with the given axis values (axis index -> value) applied."""
    data = section_mapping(spec, section)
    root = {section: data}
    for i, value in sorted(values.items()):
        parts = spec.axes[i].path.split(".")
        if len(parts) == 1:
            root[section] = copy.deepcopy(value)
        else:
            if root[section] is None:
                root[section] = {}
            set_path(root, parts, value, catalog)
    return root[section]


def check_values(spec: SweepSpec, catalog: Catalog, fabric_kinds: Mapping[str, Sequence[str]],
                 max_points: int = DEFAULT_MAX_POINTS,
                 strategies: Callable[[Strategies], Any] | None = None) -> None:
    """Check every axis value against its field's type and bounds (and fabric kinds; and,
    with ``strategies`` (the engine's resolver, raising ``SpecError``), strategy selections).

    Each value is applied to the base together with the first value of every other axis
    of the same section, so a field the base leaves to an axis (``plan.gbs``) is present.
    Cross-field rules are not checked here: breaking them makes a point infeasible.
    """
    total = spec.total_points
    if total > max_points:
        raise TooLargeError("axes", f"the sweep has {total:,} points; the limit is {max_points:,} "
                                    "(split it, or raise the limit)")
    by_section: dict[str, list[int]] = {}
    for i, a in enumerate(spec.axes):
        by_section.setdefault(a.section, []).append(i)
    for section in SECTIONS:
        idx = by_section.get(section, [])
        firsts = {i: _probe_value(spec.axes[i]) for i in idx}
        try:
            built = build_section(section, apply_values(spec, section, firsts, catalog), catalog)
            if section == "strategies" and strategies is not None:
                strategies(built)
        except (SpecError, NotFoundError) as err:
            if section == "model" and spec.base.get("model") is None and not idx:
                raise SpecError("base.model", "is required") from err
            raise SpecError(_blame(spec, idx, err, section), str(err)) from err
        for i in idx:
            axis = spec.axes[i]
            probes = list(enumerate(axis.values))
            if axis.continuous and axis.sample is not None:
                probes = [(-1, _from_unit(axis.sample, 0.0)), (-2, _from_unit(axis.sample, 1.0))]
            checked: set[Any] = set()
            for j, value in probes:
                try:  # a value equal to one checked before passes the same way (plain data only)
                    key = schema.value_key(value)
                except schema.Unkeyable:
                    key = None
                if key is not None:
                    if key in checked:
                        continue
                    checked.add(key)
                where = f"axes[{i}].values[{j}]" if j >= 0 else f"axes[{i}].sample.{'low' if j == -1 else 'high'}"
                try:
                    built = build_section(section, apply_values(spec, section, {**firsts, i: value}, catalog), catalog)
                    if section == "strategies" and strategies is not None:
                        strategies(built)
                except (SpecError, NotFoundError) as err:
                    raise SpecError(where, str(err)) from err
                _check_kind(axis, value, fabric_kinds, where)


def _blame(spec: SweepSpec, idx: Sequence[int], err: SpecError | NotFoundError, section: str) -> str:
    """Which axis value (or the base) a failure with every axis at its first value comes from."""
    field_path = err.field
    for i in idx:
        path = spec.axes[i].path
        if field_path == path or field_path.startswith(path + ".") or path.startswith(field_path + "."):
            return f"axes[{i}].sample.low" if spec.axes[i].continuous else f"axes[{i}].values[0]"
    return f"base.{section}"


def _probe_value(axis: Axis) -> Any:
    if axis.continuous and axis.sample is not None:
        return _from_unit(axis.sample, 0.0)
    return axis.values[0]


def _check_kind(axis: Axis, value: Any, fabric_kinds: Mapping[str, Sequence[str]], where: str) -> None:
    parts = axis.path.split(".")
    if parts[0] != "cluster" or len(parts) != 3:
        return
    role = _KIND_FIELDS.get((parts[1], parts[2]))
    if role is None or role not in fabric_kinds:
        return
    if value not in fabric_kinds[role]:
        raise SpecError(where, f"{axis.path}: unknown {role} fabric {value!r}; known: "
                               f"{', '.join(sorted(fabric_kinds[role]))}")
