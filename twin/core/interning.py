"""One object per distinct input: value keys of plain data and the bounded interners that use them.

A service loads the same sections again and again (a plan per request, the same cluster and
model): :func:`value_key` keys plain data exactly (types that compare equal in Python are
different inputs), and an :class:`Interner` keeps the one object built for each key, so that
caches further down keyed on identity hit. :func:`set_interning` and :func:`clear_caches`
turn every interner off or empty it (benchmarks and tests).
"""

from __future__ import annotations

import math
import typing
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class Unkeyable(Exception):
    """The value holds something :func:`value_key` does not key (its section is not cached)."""


# Tags make the key injective across types that compare equal in Python (True == 1 == 1.0,
# a list and a tuple of the same items are different inputs to a free-form ``Any`` field).
# They are ``bytes``, which no plain data holds (value_key refuses bytes), so no input's key
# equals a tag; and plain, so a key of plain values stays one (the collector untracks such
# tuples: keys of cached inputs cost it nothing).
_TRUE, _FALSE, _FLOAT, _DICT, _LIST, _TUPLE = (b"<true>", b"<false>", b"<float>", b"<dict>", b"<list>", b"<tuple>")


def value_key(value: Any) -> Hashable:
    """A hashable key equal for two inputs exactly when they are the same plain data.

    Plain data is what YAML, JSON and the protobuf converters produce: ``dict`` (string
    keys), ``list``, ``tuple``, ``str``, ``int``, ``float``, ``bool`` and ``None``, of those
    exact types. Mappings are keyed in their order, because a mapping field's order shows
    (plugins name the first bad parameter they meet). Anything else raises
    :class:`Unkeyable`: subclasses (an ``IntEnum``, a ``StrEnum``) and spec objects, so such
    input is never served from a cache built for different input.
    """
    t = type(value)
    if t is str or t is int or value is None:
        return value
    if t is dict:
        items: list[Any] = [_DICT]
        for k, v in value.items():
            if type(k) is not str:
                raise Unkeyable(k)
            tv = type(v)
            items.append(k)
            items.append(v if tv is str or tv is int or v is None else value_key(v))
        return tuple(items)
    if t is bool:
        return _TRUE if value else _FALSE
    if t is float:
        if math.isnan(value):  # equal to nothing, not even itself
            raise Unkeyable(value)
        # -0.0 == 0.0 but is a different input (1/x, copysign): key zeros by their sign.
        return (_FLOAT, value) if value else (_FLOAT, repr(value))
    if t is list or t is tuple:
        return (_LIST if t is list else _TUPLE, *(value_key(v) for v in value))
    raise Unkeyable(value)


_INTERNERS: weakref.WeakSet[Interner] = weakref.WeakSet()


class Interner:
    """A bounded map from a value key to the one object built for it, safe across threads.

    Equal inputs then share one (immutable) object, so caches further down that are keyed
    on identity hit. Eviction is first-in first-out: a sweep of distinct plans churns the
    plan interner without touching the ones of clusters and models (one interner each).
    No lock: keys hash and compare in C (tuples of plain values, tags and ids), so each
    ``OrderedDict`` call below is atomic under the GIL; two threads racing on one key both
    get the object that ``setdefault`` kept.
    """

    enabled: typing.ClassVar[bool] = True  # see set_interning

    def __init__(self, maxsize: int, name: str = "") -> None:
        self.name = name
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._pinned: dict[Hashable, Any] = {}
        # The lookup is the hot path (every section of every call): the dict's own method.
        self.get: Callable[[Hashable], Any] = self._items.get
        _INTERNERS.add(self)

    def add(self, key: Hashable, obj: T) -> T:
        """Store ``obj`` for ``key`` unless one is there already; return the stored one."""
        if not Interner.enabled:
            return obj
        items = self._items
        kept = items.setdefault(key, obj)
        if kept is obj:
            while len(items) > self.maxsize:  # one at a time, unless maxsize was lowered
                try:
                    items.popitem(last=False)
                except KeyError:  # emptied meanwhile by clear() in another thread
                    break
        return kept  # type: ignore[no-any-return]

    def pin(self, key: Hashable, obj: T) -> T:
        """:meth:`add`, and store ``obj`` again after every :meth:`clear`: for the defaults that
        a spec class's loader hands out without a lookup, which must stay the ones found.
        """
        return self.add(key, self._pinned.setdefault(key, obj))

    def clear(self) -> None:
        """Forget every object (but the pinned ones, while interning is on)."""
        self._items.clear()
        if Interner.enabled:
            self._items.update(self._pinned)

    def __len__(self) -> int:
        return len(self._items)

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "maxsize": self.maxsize}  # a copy starts empty

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["maxsize"], state["name"])  # type: ignore[misc]


def set_interning(enabled: bool) -> None:
    """Turn every section cache on or off (off: each call builds afresh; benchmarks compare)."""
    Interner.enabled = enabled
    clear_caches()


def clear_caches() -> None:
    """Empty every section cache (the next calls build afresh, as a new process would)."""
    for interner in list(_INTERNERS):
        interner.clear()


def cache_sizes() -> dict[str, int]:
    """Entries held per interner, by name (for tests and diagnostics)."""
    out: dict[str, int] = {}
    for interner in list(_INTERNERS):
        out[interner.name] = out.get(interner.name, 0) + len(interner)
    return out
