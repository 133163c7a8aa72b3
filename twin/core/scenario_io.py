"""Scenario files: YAML/JSON mappings -> validated :class:`Scenario`, resolving presets.

A scenario may name presets instead of spelling everything out::

    cluster: {system: DGX-H100, num_gpus: 1024}      # any field may be overridden
    model: llama3.1-405b                              # or {preset: llama3.1-405b, seq_len: 4096}
    plan: {tp: 8, pp: 16, gbs: 2048, mbs: 1}
    software: megatron-core-te                        # or {preset: ..., dispatch_us: 12}; default
    strategies: {pp: my-schedule}                     # or {pp: {name: ..., config: {...}}}; default: built-ins

Nested mappings of a preset (``scale_out``, ``params`` ...) merge key by key with the
overrides; everything else replaces.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from twin.core import schema
from twin.core.catalog import Catalog
from twin.core.docload import MAX_DOCUMENT_CHARS, parse_document
from twin.core.errors import SpecError
from twin.core.specs import (
    DEFAULT_SOFTWARE,
    DEFAULT_STRATEGIES,
    GPU,
    Calibration,
    Cluster,
    ComputeEfficiency,
    MemoryPool,
    Model,
    Optics,
    Plan,
    Power,
    Prices,
    ScaleOut,
    ScaleUp,
    Scenario,
    Software,
    Strategies,
    StrategyChoice,
    validate_scenario,
)

_META_KEYS = ("source", "notes")


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


_T = TypeVar("_T")


_NO_KEY: Any = object()


def _cached(catalog: Catalog, kind: str, value: Any, path: str, build: Callable[[Any, Catalog, str], _T],
            key: Any = _NO_KEY) -> _T:
    """``build(value, catalog, path)``, or the object built before for an equal ``value``
    (see ``schema.value_key``; ``key``: ``value_key(value)`` when the caller has it).

    Only successes are kept: an input with an error is built (and fails) every time, so
    the error is the one the reference path raises. Input the key does not cover (spec
    objects, enum members, other mapping types) is built every time too.
    """
    if key is _NO_KEY:
        try:
            key = schema.value_key(value)
        except (schema.Unkeyable, RecursionError):  # RecursionError: nested too deep to key
            return build(value, catalog, path)
    cache = catalog.caches[kind]
    hit = cache.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    return cache.add(key, build(value, catalog, path))


def resolve_efficiency(value: Any, catalog: Catalog, path: str) -> ComputeEfficiency:
    """An efficiency profile by name or inline mapping (cached by value)."""
    return _cached(catalog, "efficiency", value, path, _build_efficiency)


def _build_efficiency(value: Any, catalog: Catalog, path: str) -> ComputeEfficiency:
    data = catalog.get("efficiency", value, path) if isinstance(value, str) else value
    eff = schema.load(ComputeEfficiency, data, path)
    for prec, frac in eff.gemm.items():
        if not 0.01 <= frac <= 1.0:
            raise SpecError(f"{path}.gemm.{prec}", f"must be between 0.01 and 1 (got {frac})")
    return eff


def resolve_gpu(value: Any, catalog: Catalog, path: str = "cluster.gpu") -> GPU:
    """A GPU by preset name, ``{preset: NAME, ...overrides}`` or a full inline mapping (cached by value)."""
    if isinstance(value, GPU):
        return value
    return _cached(catalog, "gpu", value, path, _build_gpu)


def _preset_mapping(value: Any, catalog: Catalog, kind: str, path: str, what: str) -> dict[str, Any]:
    """The mapping of a preset name, or of ``{preset: NAME, ...overrides}`` (the preset's
    fields under the overrides), or of a plain mapping; named after its preset.
    """
    if isinstance(value, str):
        data = catalog.get(kind, value, path)
        data["name"] = catalog.canonical(kind, value)
        return data
    if isinstance(value, Mapping):
        data = dict(value)
        preset = data.pop("preset", None)
        if preset is not None:
            data = _merge(catalog.get(kind, preset, f"{path}.preset"), data)
            data.setdefault("name", catalog.canonical(kind, preset))
        return data
    raise SpecError(path, f"must be a {what} preset name or a mapping (got {value!r})")


def _build_gpu(value: Any, catalog: Catalog, path: str) -> GPU:
    data = _preset_mapping(value, catalog, "gpus", path, "GPU")
    eff = data.get("efficiency")
    if eff is None:
        eff = data.get("generation")
    if eff is not None:
        data["efficiency"] = resolve_efficiency(eff, catalog, f"{path}.efficiency")
    gpu = schema.load(GPU, data, path)
    for prec, tflops in gpu.peak_tflops.items():
        if not 0.001 <= tflops <= 1e6:
            raise SpecError(f"{path}.peak_tflops.{prec}", f"must be between 0.001 and 1e6 TFLOP/s (got {tflops})")
    return gpu


def resolve_cluster(value: Any, catalog: Catalog, path: str = "cluster") -> Cluster:
    """A cluster from ``{system: NAME, num_gpus: N, ...overrides}`` or a full mapping (cached by value).

    Types and bounds only: the cross-field rules (``validate_cluster``) are the caller's.
    """
    return _cached(catalog, "cluster", value, path, _build_cluster)


def _build_cluster(value: Any, catalog: Catalog, path: str) -> Cluster:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be a mapping (got {value!r})")
    data = dict(value)
    system = data.pop("system", None)
    if system is not None:
        base = catalog.get("systems", system, f"{path}.system")
        for k in _META_KEYS:
            base.pop(k, None)
        base["name"] = catalog.canonical("systems", system)
        data = _merge(base, data)
    if "gpu" not in data:
        raise SpecError(f"{path}.gpu", "is required (or name a system)")
    data["gpu"] = resolve_gpu(data["gpu"], catalog, f"{path}.gpu")
    for key, cls in _CLUSTER_PARTS:
        value = data.get(key)
        if type(value) is dict:
            part = _loaded_part(catalog, cls, value, f"{path}.{key}")
            if part is not None:
                data[key] = part
    return schema.load(Cluster, data, path)


# Parts of a cluster that recur across clusters (a system's fabrics, with or without the
# same overrides, at every size): each distinct mapping is loaded once. The random points
# of validation/equivalence.py hold 3,869 distinct cluster mappings but 121 scale_out ones.
_CLUSTER_PARTS = (("scale_up", ScaleUp), ("scale_out", ScaleOut), ("optics", Optics), ("memory_pool", MemoryPool),
                  ("power", Power), ("prices", Prices))


def _loaded_part(catalog: Catalog, cls: type, value: dict[str, Any], path: str) -> Any:
    """``cls`` loaded from ``value`` (cached by value), or None if that fails.

    On None the caller leaves the mapping in place and the cluster's own load raises the
    error, in the order schema.load meets it (other fields may come first).
    """
    try:
        key = (cls, schema.value_key(value))
    except (schema.Unkeyable, RecursionError):
        return None
    cache = catalog.caches["part"]
    hit = cache.get(key)
    if hit is not None:
        return hit
    try:
        part = schema.load(cls, value, path)
    except Exception:  # reported by the cluster's load, in its order
        return None
    return cache.add(key, part)


def resolve_model(value: Any, catalog: Catalog, path: str = "model") -> Model:
    """A model by preset name, ``{preset: NAME, ...overrides}`` or a full mapping (cached by value).

    Types and bounds only: the cross-field rules (``validate_model``) are the caller's.
    """
    return _cached(catalog, "model", value, path, _build_model)


def _build_model(value: Any, catalog: Catalog, path: str) -> Model:
    if isinstance(value, str):
        data = catalog.get("models", value, path)
    elif isinstance(value, Mapping):
        data = dict(value)
        preset = data.pop("preset", None)
        if preset is not None:
            data = _merge(catalog.get("models", preset, f"{path}.preset"), data)
    else:
        raise SpecError(path, f"must be a model preset name or a mapping (got {value!r})")
    for k in _META_KEYS:
        data.pop(k, None)
    return schema.load(Model, data, path)


def resolve_software(value: Any, catalog: Catalog, path: str = "software") -> Software:
    """A software stack by preset name, ``{preset: NAME, ...overrides}`` or a mapping of
    overrides of the default stack (``megatron-core-te``) (cached by value).
    """
    if isinstance(value, Software):
        return value
    return _cached(catalog, "software", value, path, _build_software)


def _build_software(value: Any, catalog: Catalog, path: str) -> Software:
    data = _preset_mapping(value, catalog, "software", path, "software")
    data.pop("notes", None)
    return schema.load(Software, data, path)


_CHOICE_KEYS = ("name", "config")


def load_strategies(data: Any, path: str = "strategies") -> Strategies:
    """The ``strategies`` section: ``{DIMENSION: NAME}`` or ``{DIMENSION: {name: NAME, config: {...}}}``.

    Only the shape is checked here; whether NAME is registered for DIMENSION, and what its
    config may hold, is the engine's and the strategy's to say (``TwinModel.strategy_set``).
    """
    if data is None:
        return DEFAULT_STRATEGIES
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping of dimension to strategy name (got {data!r})")
    choices = []
    for dim, given in data.items():
        if not isinstance(dim, str) or not dim:
            raise SpecError(path, f"keys must be dimension names such as 'pp' (got {dim!r})")
        where = f"{path}.{dim}"
        value = {"name": given} if isinstance(given, str) else given
        if not isinstance(value, Mapping):
            raise SpecError(where, f"must be a strategy name or a mapping {{name, config}} (got {value!r})")
        for key in value:
            if key not in _CHOICE_KEYS:
                raise SpecError(f"{where}.{key}", f"unknown field; expected one of: {', '.join(_CHOICE_KEYS)}")
        name = value.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}.name", f"is required: the registered strategy's name (got {name!r})")
        config = value.get("config") or {}
        if not isinstance(config, Mapping):
            raise SpecError(f"{where}.config", f"must be a mapping (got {config!r})")
        choices.append(StrategyChoice(dimension=dim, name=name, config=copy.deepcopy(dict(config))))
    return Strategies(tuple(sorted(choices, key=lambda c: c.dimension)))


# "failures" is read by twin.core.failures.failure_spec (``twin failures``); other verbs ignore it.
_KNOWN = frozenset({"name", "cluster", "model", "plan", "calibration", "software", "strategies", "description",
                    "failures"})
_KNOWN_TEXT = ", ".join(sorted(_KNOWN))
_DEFAULT_CALIBRATION = Calibration()
_load_plan = schema.loader(Plan)
_load_calibration = schema.loader(Calibration)
# Scenario(...) with every field given, through the slots (see schema.constructor).
_new_scenario = schema.constructor(Scenario)


def scenario_from_dict(data: Any, catalog: Catalog, *, validate: bool = True) -> Scenario:
    """Build and validate a scenario; errors name the field and the rule.

    Sections are shared: equal cluster, model, plan or calibration mappings give the same
    (immutable) spec objects. ``validate=False`` leaves the cross-field rules
    (``validate_scenario``) to the caller, who must then run them before using it
    (``Engine.scenario`` does, once, with the fabrics' own rules).
    """
    if type(data) is not dict and not isinstance(data, Mapping):  # the exact test first: ABCs cost
        raise SpecError("", f"a scenario must be a mapping (got {type(data).__name__})")
    if not _KNOWN.issuperset(data):
        for key in data:
            if key not in _KNOWN:
                raise SpecError(str(key), f"unknown field; expected one of: {_KNOWN_TEXT}")
    for key in ("cluster", "model", "plan"):
        if key not in data:
            raise SpecError(key, "is required")
    # The whole scenario by the value of its mapping (what a client sending the same
    # request again, or a batch of copies, hits); only successes are kept, as per section.
    try:
        whole = schema.value_key(data)
    except (schema.Unkeyable, RecursionError):
        whole = None
    if whole is not None:
        hit = catalog.caches["scenario"].get(whole)
        if hit is not None:
            if validate:
                validate_scenario(hit)
            return hit  # type: ignore[no-any-return]
        # value_key(data) is (tag, key, value_key(value), ...): the sections' keys, computed once
        keys = dict(zip(whole[1::2], whole[2::2], strict=True))  # type: ignore[index]
        cluster = _cached(catalog, "cluster", data["cluster"], "cluster", _build_cluster, keys["cluster"])
        model = _cached(catalog, "model", data["model"], "model", _build_model, keys["model"])
    else:  # resolve_cluster / resolve_model without their own call layer (the hot path)
        cluster = _cached(catalog, "cluster", data["cluster"], "cluster", _build_cluster)
        model = _cached(catalog, "model", data["model"], "model", _build_model)
    plan = _load_plan(data["plan"], "plan")
    calibration = data.get("calibration")
    calibration = _DEFAULT_CALIBRATION if calibration is None else \
        _load_calibration(calibration, "calibration")
    software = data.get("software")
    software = DEFAULT_SOFTWARE if software is None else \
        _cached(catalog, "software", software, "software", _build_software)
    name = data.get("name", "")
    if not isinstance(name, str):
        raise SpecError("name", f"must be a string (got {name!r})")
    strategies = data.get("strategies")
    strategies = DEFAULT_STRATEGIES if strategies is None else load_strategies(strategies)
    scenario = _new_scenario(cluster, model, plan, name, calibration, software, strategies)
    if validate:
        validate_scenario(scenario)
    if whole is not None:
        catalog.caches["scenario"].add(whole, scenario)
    return scenario


def read_mapping(path: str | Path) -> Any:
    """Parse a YAML or JSON file (JSON is YAML, but a .json file gets JSON's errors)."""
    p = Path(path)
    limit = MAX_DOCUMENT_CHARS * 4  # bytes: UTF-8 takes at most 4 per character
    try:
        with p.open("rb") as f:  # read at most the limit: /dev/zero or a FIFO must not hang the reader
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise SpecError(str(path), f"is more than {limit:,} bytes; a scenario document is at most "
                                       f"{MAX_DOCUMENT_CHARS:,} characters")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(str(path), f"is not UTF-8 text (byte {err.start}): a YAML or JSON file is expected") from err
    except OSError as err:
        raise SpecError(str(path), f"cannot read file: {err.strerror or err}") from err
    # Files may use YAML anchors; their expansion is still bounded (twin.core.docload).
    return parse_document(text, str(path), allow_aliases=True, json_only=p.suffix.lower() == ".json")


def load_scenario_file(path: str | Path, catalog: Catalog) -> Scenario:
    """Read and validate a scenario file."""
    return scenario_from_dict(read_mapping(path), catalog)
