"""A hashable key per spec value: equal spec objects (loaded or built in code) get equal keys."""

from __future__ import annotations

import dataclasses
from typing import Any


def spec_key(obj: Any) -> Any:
    """A hashable key equal for equal spec objects (dataclasses, dicts, lists, scalars).

    (``schema.value_key`` keys the plain-data *input* a spec is loaded from; this keys the
    loaded objects, e.g. a :class:`~twin.core.specs.Cluster` built in code.)
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, *(spec_key(getattr(obj, f.name)) for f in dataclasses.fields(obj)))
    if isinstance(obj, dict):
        return ("{}", *sorted((k, spec_key(v)) for k, v in obj.items()))
    if isinstance(obj, list | tuple):
        return ("[]", *(spec_key(v) for v in obj))
    return obj
