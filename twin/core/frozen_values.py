"""Read-only containers: what a loaded spec's mapping and list fields hold.

A loaded spec is shared (equal inputs give one object), so nothing handed out may be changed
in place: mapping fields come back as :class:`FrozenDict`, lists inside them as
:class:`FrozenList` (:func:`freeze`); :func:`thaw` gives plain, mutable copies back.
"""

from __future__ import annotations

import copy
from typing import Any


def _read_only(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise TypeError(f"a loaded spec is read-only ({type(self).__name__}); "
                    "build a changed copy, e.g. dataclasses.replace(spec, params={**spec.params, ...})")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that cannot change once built: the mapping fields of loaded specs.

    A subclass of ``dict`` rather than ``types.MappingProxyType`` because specs are pickled
    (Ray workers, copies): a mapping proxy cannot be pickled.
    It compares, prints and serialises (JSON, Struct) as the plain ``dict`` it holds, so
    code that reads specs sees no difference; every mutating method raises ``TypeError``.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> FrozenDict:
        self = dict.__new__(cls)
        dict.__init__(self, *args, **kwargs)
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Filled by __new__: a second __init__ call (which would refill a dict) does nothing.
        pass

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (dict(self),)

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return type(self)({k: copy.deepcopy(v, memo) for k, v in self.items()})


class FrozenList(list):  # type: ignore[type-arg]
    """A ``list`` that cannot change once built: lists inside free-form spec parameters.

    Equal to (and printed as) the plain list, so what a fabric plugin reads or reports in
    an error message is unchanged; every mutating method raises ``TypeError``.
    """

    __slots__ = ()

    def __new__(cls, *args: Any) -> FrozenList:
        self = list.__new__(cls)
        list.__init__(self, *args)
        return self

    def __init__(self, *args: Any) -> None:
        pass  # filled by __new__; list.__init__ would clear and refill

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = extend = insert = pop = remove = clear = sort = reverse = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (list(self),)

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return type(self)(copy.deepcopy(v, memo) for v in self)


def freeze(value: Any) -> Any:
    """``value`` with every ``dict`` made a :class:`FrozenDict` and every ``list`` a
    :class:`FrozenList`, recursively (tuples rebuilt around frozen items); other objects
    as they are. The plain-data parts of a spec become safe to share.
    """
    t = type(value)
    if t is dict or t is FrozenDict:
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if t is list or t is FrozenList:
        return FrozenList(freeze(v) for v in value)
    if t is tuple:
        items = tuple(freeze(v) for v in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def frozen_item(value: Any) -> Any:
    """:func:`freeze`, or ``value`` itself if it nests too deep to copy (no key can be made
    for such input either, so it is never served from a cache).
    """
    try:
        return freeze(value)
    except RecursionError:
        return value


def thaw(value: Any) -> Any:
    """A deep, mutable copy of plain data (what ``copy.deepcopy`` gives for mappings and
    lists of scalars, several times faster); other objects go through ``copy.deepcopy``.
    """
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if t is dict or t is FrozenDict:
        return {k: thaw(v) for k, v in value.items()}
    if t is list or t is FrozenList:
        return [thaw(v) for v in value]
    return copy.deepcopy(value)


# ------------------------------------------------------------ value keys and interning
