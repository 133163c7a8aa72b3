"""Strict loading of frozen dataclasses from plain mappings (parsed YAML/JSON/protobuf).

Why not a generic library: the core must stay importable with the standard library only
(DESIGN.md dependency rule) and every error must name the dotted field path and the rule,
e.g. ``plan.tp: must be an integer >= 1 (got 0)``.

Rules enforced here, per field:
- unknown keys are rejected (typos never pass silently);
- required fields (no default) must be present;
- types are exact: ``bool`` is not an int, strings are not numbers, numbers are finite;
- numeric bounds from the field metadata (``gt``, ``ge``, ``le``, ``lt``);
- ``Literal`` choices.
Cross-field rules live next to each spec (see ``specs.py``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from twin.core.errors import SpecError

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def spec_field(
    default: Any = _MISSING,
    *,
    default_factory: Any = _MISSING,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    doc: str = "",
) -> Any:
    """A dataclass field with numeric bounds and a documentation string."""
    meta = {"gt": gt, "ge": ge, "lt": lt, "le": le, "doc": doc}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    return hints


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not type(None))
    if origin is tuple:
        return "a list"
    if origin in (dict, Mapping):
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _convert(value: Any, tp: Any, path: str) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise SpecError(path, f"must be {_type_name(tp)} (got null)")
        errors: list[SpecError] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path)
            except SpecError as err:
                errors.append(err)
        if len(errors) == 1:
            raise errors[0]
        raise SpecError(path, f"must be {_type_name(tp)} (got {value!r})")
    if value is None:
        raise SpecError(path, f"must be {_type_name(tp)} (got null)")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices or isinstance(value, bool) != any(isinstance(c, bool) for c in choices):
            raise SpecError(path, f"must be {_type_name(tp)} (got {value!r})")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(path, f"must be a boolean (got {value!r})")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(path, f"must be an integer (got {value!r})")
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                raise SpecError(path, f"must be an integer (got {value!r})")
            value = int(value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(path, f"must be a number (got {value!r})")
        value = float(value)
        if not math.isfinite(value):
            raise SpecError(path, f"must be a finite number (got {value!r})")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(path, f"must be a string (got {value!r})")
        return value
    if origin is tuple:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise SpecError(path, f"must be a list (got {value!r})")
        (item_tp, *_rest) = get_args(tp)
        return tuple(_convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise SpecError(path, f"must be a mapping (got {value!r})")
        _, val_tp = get_args(tp)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(path, f"keys must be strings (got {k!r})")
            out[k] = v if val_tp is Any else _convert(v, val_tp, f"{path}.{k}")
        return out
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return load(tp, value, path)
    if tp is Any:
        return value
    raise SpecError(path, f"unsupported field type {tp!r}")  # pragma: no cover - programming error


def _check_bounds(value: Any, meta: Mapping[str, Any], path: str) -> None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    gt, ge, lt, le = meta.get("gt"), meta.get("ge"), meta.get("lt"), meta.get("le")
    if gt is not None and not value > gt:
        raise SpecError(path, f"must be > {gt} (got {value})")
    if ge is not None and not value >= ge:
        raise SpecError(path, f"must be >= {ge} (got {value})")
    if lt is not None and not value < lt:
        raise SpecError(path, f"must be < {lt} (got {value})")
    if le is not None and not value <= le:
        raise SpecError(path, f"must be <= {le} (got {value})")


def load(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from ``data`` strictly; raise :class:`SpecError` naming the field."""
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping (got {type(data).__name__})")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        where = f"{path}.{key}" if path else str(key)
        raise SpecError(where, f"unknown field; expected one of: {', '.join(sorted(fields))}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name in data:
            value = _convert(data[name], hints[name], where)
            _check_bounds(value, f.metadata, where)
            if isinstance(value, tuple):
                for i, item in enumerate(value):
                    _check_bounds(item, f.metadata, f"{where}[{i}]")
            kwargs[name] = value
        elif f.default is _MISSING and f.default_factory is _MISSING:
            raise SpecError(where, "is required")
    return cls(**kwargs)


def dump(obj: Any) -> Any:
    """Plain-data form of a spec (mappings, lists, scalars), the inverse of :func:`load`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: dump(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, tuple | list):
        return [dump(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: dump(v) for k, v in obj.items()}
    return obj
