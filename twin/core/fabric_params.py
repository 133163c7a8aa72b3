"""Checking a scale-out fabric's free-form parameters (``cluster.scale_out.params``).

Each scale-out fabric accepts its own parameters; what they share is the rule that an
unknown key is an error naming the field (a typo must not be silently ignored) and that
values are plain scalars, so a scenario stays plain data (YAML, JSON, protobuf).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.core.errors import SpecError

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
