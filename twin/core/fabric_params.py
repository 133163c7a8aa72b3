"""Checking a fabric's free-form parameters and the scale-out / scale-up fields it does not model.

Each scale-out fabric accepts its own parameters; what they share is the rule that an
unknown key is an error naming the field (a typo must not be silently ignored) and that
values are plain scalars, so a scenario stays plain data (YAML, JSON, protobuf). A fabric
that has no use for a field of ``cluster.scale_out`` (a torus has no switch tiers, TCP no
SHARP) rejects it when a scenario sets it, for the same reason (``reject_scale_out_fields``).
Numbers arrive as YAML ints, or as floats from the wire (``google.protobuf.Struct``), so
``read_param`` accepts an integral float where an integer is asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from twin.core.errors import SpecError
from twin.core.specs import ScaleOut, ScaleUp

if TYPE_CHECKING:
    from twin.core.specs import Cluster


def check_scale_out_params(cluster: Cluster, path: str, allowed: set[str], kind: str) -> None:
    """Reject unknown or non-scalar ``scale_out.params`` of fabric ``kind``, naming the field.

    ``path`` is the cluster's field path (``cluster``); errors name
    ``{path}.scale_out.params.{key}``.
    """
    so = cluster.scale_out
    assert so is not None
    unknown = sorted(set(so.params) - allowed)
    if unknown:
        raise SpecError(f"{path}.scale_out.params.{unknown[0]}",
                        f"unknown parameter for {kind}; expected one of: {', '.join(sorted(allowed)) or 'none'}")
    for key, value in so.params.items():
        if not isinstance(value, (bool, int, float, str)):
            raise SpecError(f"{path}.scale_out.params.{key}",
                            f"must be a number, a boolean or a string (got {value!r})")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


_SCALE_OUT_DEFAULTS = {f.name: _default(f) for f in dataclasses.fields(ScaleOut)}


def reject_scale_out_fields(cluster: Cluster, path: str, kind: str, fields: Mapping[str, str]) -> None:
    """Reject the ``scale_out`` fields ``kind`` does not model when a scenario sets them.

    ``fields`` maps a field name (``sharp``, ``tier_spans``, ...) to the reason it does not
    apply; a field left at its default passes. Errors name ``{path}.scale_out.{field}``.
    """
    so = cluster.scale_out
    assert so is not None
    for name, why in fields.items():
        value = getattr(so, name)
        if value != _SCALE_OUT_DEFAULTS[name]:
            raise SpecError(f"{path}.scale_out.{name}", f"does not apply to {kind}: {why} (got {value!r})")


_SCALE_UP_DEFAULTS = {f.name: _default(f) for f in dataclasses.fields(ScaleUp)}


def check_scale_up_params(cluster: Cluster, path: str, allowed: set[str], kind: str) -> None:
    """Reject unknown or non-scalar ``scale_up.params`` of fabric ``kind``, naming the field
    (``{path}.scale_up.params.{key}``), as :func:`check_scale_out_params` does for scale-out.
    """
    params = cluster.scale_up.params
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise SpecError(f"{path}.scale_up.params.{unknown[0]}",
                        f"unknown parameter for {kind}; expected one of: {', '.join(sorted(allowed)) or 'none'}")
    for key, value in params.items():
        if not isinstance(value, (bool, int, float, str)):
            raise SpecError(f"{path}.scale_up.params.{key}", f"must be a number, a boolean or a string (got {value!r})")


def reject_scale_up_fields(cluster: Cluster, path: str, kind: str, fields: Mapping[str, str]) -> None:
    """Reject the ``scale_up`` fields ``kind`` does not model when a scenario sets them
    (``fields``: name -> why it does not apply; a field left at its default passes).
    Errors name ``{path}.scale_up.{field}``.
    """
    up = cluster.scale_up
    for name, why in fields.items():
        value = getattr(up, name)
        if value != _SCALE_UP_DEFAULTS[name]:
            raise SpecError(f"{path}.scale_up.{name}", f"does not apply to {kind}: {why} (got {value!r})")


def read_param(params: Mapping[str, Any], field: str, default: Any, *, integer: bool = False,
               minimum: float | None = None, maximum: float | None = None,
               choices: Sequence[Any] | None = None) -> Any:
    """The parameter named by the last segment of ``field`` in ``params``, checked.

    ``field`` is the full path for errors (``cluster.scale_up.params.lanes``). Absent: the
    ``default``. ``choices``: the value must be one of them (strings, booleans, numbers);
    otherwise it must be a number (not a boolean), an integer when ``integer`` (an integral
    float counts), within ``minimum`` / ``maximum`` inclusive.
    """
    key = field.rsplit(".", 1)[-1]
    if key not in params:
        return default
    value = params[key]
    if choices is not None:
        if isinstance(value, bool) and not any(isinstance(c, bool) for c in choices):
            value = None  # True == 1: a boolean never matches a numeric choice
        if value is None or value not in choices:
            raise SpecError(field, f"must be one of {', '.join(repr(c) for c in choices)} (got {params[key]!r})")
        return int(value) if integer else value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number (got {value!r})")
    if integer:
        if value != int(value):
            raise SpecError(field, f"must be a whole number (got {value!r})")
        value = int(value)
    if minimum is not None and value < minimum:
        raise SpecError(field, f"must be >= {minimum:g} (got {value!r})")
    if maximum is not None and value > maximum:
        raise SpecError(field, f"must be <= {maximum:g} (got {value!r})")
    return value
