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

Loaded specs are immutable all the way down: dataclasses are frozen, and mapping fields
(``GPU.peak_tflops``, ``ScaleUp.params`` ...) come back as :class:`FrozenDict` (lists
inside them as :class:`FrozenList`). That is what lets a loaded section be shared: equal
inputs give one object (:func:`fast_load`, and the preset caches of ``scenario_io``), and
no caller can change the shared copy by mutating what it was handed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
import types
import typing
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from twin.core.errors import SpecError

T = TypeVar("T")

_MISSING = dataclasses.MISSING


# ------------------------------------------------------------ read-only containers
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


def _frozen(value: Any) -> Any:
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

    def clear(self) -> None:
        """Forget every object."""
        self._items.clear()

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
            # Free-form values are copied frozen: the spec must not share the caller's lists.
            out[k] = _frozen(v) if val_tp is Any else _convert(v, val_tp, f"{path}.{k}")
        return FrozenDict(out)
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


_FIELDS: dict[type, tuple[dict[str, dataclasses.Field[Any]], str]] = {}


def _fields(cls: type) -> tuple[dict[str, dataclasses.Field[Any]], str]:
    """The init fields of ``cls`` by name, and their sorted names for error messages."""
    hit = _FIELDS.get(cls)
    if hit is None:
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        hit = _FIELDS[cls] = (fields, ", ".join(sorted(fields)))
    return hit


def load(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from ``data`` strictly; raise :class:`SpecError` naming the field.

    The reference loader: every section that the fast path (:func:`fast_load`) or a cache
    does not serve comes here, and so does every input with an error, which is why errors
    are the same whichever way a section is loaded.
    """
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping (got {type(data).__name__})")
    hints = _hints(cls)
    fields, expected = _fields(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        where = f"{path}.{key}" if path else str(key)
        raise SpecError(where, f"unknown field; expected one of: {expected}")
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


# ------------------------------------------------------------ the fast path
# Objects kept per interned spec class: a sweep of distinct plans churns through this many
# before the oldest is rebuilt; a Plan and its key tuple are 200 + 208 bytes
# (sys.getsizeof, CPython 3.11), so ~1.7 MB for plans.
FAST_INTERN_SIZE = 4096


class _Slow(Exception):
    """The fast path cannot vouch for a value: the reference loader decides."""


_Conv = Callable[[Any], Any]


def _bounds(meta: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """The test :func:`_check_bounds` applies to a number, as a predicate (None: no bounds)."""
    gt, ge, lt, le = meta.get("gt"), meta.get("ge"), meta.get("lt"), meta.get("le")
    if gt is None and ge is None and lt is None and le is None:
        return None

    def ok(v: Any) -> bool:
        return (gt is None or v > gt) and (ge is None or v >= ge) and (lt is None or v < lt) \
            and (le is None or v <= le)

    return ok


def _fast_conv(tp: Any, ok: Callable[[Any], bool] | None) -> _Conv | None:
    """A converter that returns exactly what ``_convert`` + ``_check_bounds`` return for the
    plain, valid values it accepts, and raises for anything else (None: type not handled).
    """
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if len(args) != 2 or type(None) not in args:
            return None
        inner = _fast_conv(next(a for a in args if a is not type(None)), ok)
        if inner is None:
            return None

        def optional(v: Any) -> Any:
            return None if v is None else inner(v)  # type: ignore[misc]

        return optional
    if origin is Literal:
        choices = get_args(tp)
        if not all(type(c) is str for c in choices):
            return None
        allowed = frozenset(choices)

        def literal(v: Any) -> Any:
            if type(v) is str and v in allowed:
                return v
            raise _Slow

        return literal
    if origin is tuple:
        args = get_args(tp)
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else None
        if item is None or get_origin(item) is not Literal or not all(type(c) is str for c in get_args(item)):
            return None
        names = frozenset(get_args(item))

        def names_tuple(v: Any) -> Any:
            # a tuple of choices is returned as is (interning an equal spec keeps it)
            t = type(v)
            if (t is tuple or t is list) and all(type(x) is str and x in names for x in v):
                return v if t is tuple else tuple(v)
            raise _Slow

        return names_tuple
    if tp is bool or tp is str:
        def exact(v: Any) -> Any:
            if type(v) is tp:
                return v
            raise _Slow

        return exact
    if tp is int:
        def integer(v: Any) -> Any:
            if type(v) is int and (ok is None or ok(v)):
                return v
            raise _Slow

        return integer
    if tp is float:
        def number(v: Any) -> Any:
            t = type(v)
            x = v if t is float else float(v) if t is int else None
            if x is not None and x - x == 0 and (ok is None or ok(x)):  # x - x == 0: finite
                return x
            raise _Slow

        return number
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        fast = _compiled(tp)
        if fast is None:
            return None

        def nested(v: Any) -> Any:
            if type(v) is dict:
                return fast.build(v)  # type: ignore[union-attr]
            if type(v) is tp:
                return fast.intern_obj(v)  # type: ignore[union-attr]
            raise _Slow

        return nested
    return None


# How the build loop checks a field without a call (the common plan fields), else _GENERIC.
_INT, _OPT_INT, _CHOICE, _BOOL, _OPT_BOOL, _GENERIC = range(6)


def _inline_check(tp: Any, meta: Mapping[str, Any]) -> tuple[int, Any, Any]:
    """(kind, low or choices, high) of the loop's own test of a field of type ``tp``."""
    if meta.get("gt") is None and meta.get("lt") is None:
        lo = meta.get("ge")
        hi = meta.get("le")
        lo, hi = -math.inf if lo is None else lo, math.inf if hi is None else hi
        if tp is int:
            return _INT, lo, hi
        if tp == int | None:
            return _OPT_INT, lo, hi
    if tp is bool:
        return _BOOL, None, None
    if tp == bool | None:
        return _OPT_BOOL, None, None
    if get_origin(tp) is Literal and all(type(c) is str for c in get_args(tp)):
        return _CHOICE, frozenset(get_args(tp)), None
    return _GENERIC, None, None


def constructor(cls: type) -> Callable[..., Any]:
    """``cls(*values)`` with every init field given in order, as fast as it can be built.

    For the frozen slotted specs: see :func:`_constructor`.
    """
    return _constructor(cls, tuple(f.name for f in dataclasses.fields(cls) if f.init))


def _constructor(cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """``cls(*values)``, faster where that is exactly what ``cls.__init__`` does.

    The ``__init__`` that ``@dataclass(frozen=True, slots=True)`` writes (no
    ``__post_init__``, every field passed) sets each slot with ``object.__setattr__``; the
    same stores straight through the slot descriptors skip its per-field global lookups
    (a 24-field Plan: 1.7 us instead of 3.4 us, timeit on CPython 3.11 here). Any other
    class gets ``cls`` itself.
    """
    init = getattr(cls, "__init__", None)
    generated = getattr(getattr(init, "__code__", None), "co_filename", "") == "<string>"
    slots = [cls.__dict__.get(n) for n in names]
    every_field = [f.name for f in dataclasses.fields(cls)] == list(names)
    if not generated or not every_field or hasattr(cls, "__post_init__") or not all(
            type(s) is types.MemberDescriptorType for s in slots):
        return cls
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"    s{i}(o, v{i})\n" for i in range(len(names)))
    src = f"def make({args}):\n    o = new(cls)\n{body}    return o\n"
    ns: dict[str, Any] = {"new": object.__new__, "cls": cls, **{f"s{i}": s.__set__ for i, s in enumerate(slots)}}
    exec(src, ns)  # generated from field positions only, as dataclasses writes __init__
    return ns["make"]  # type: ignore[no-any-return]


class _Fast:
    """The fast loader of one spec class whose every field is a plain, hashable value."""

    __slots__ = ("checks", "cls", "convs", "defaults", "floats", "index", "interner", "make", "names", "nested",
                 "required")

    def __init__(self, cls: type, names: tuple[str, ...], convs: tuple[_Conv, ...],
                 checks: tuple[tuple[int, Any, Any], ...], defaults: list[Any]) -> None:
        hints = _hints(cls)
        self.cls = cls
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.convs = convs
        self.checks = checks
        self.defaults = defaults
        self.required = tuple(i for i, d in enumerate(defaults) if d is _MISSING)
        self.floats = tuple(i for i, n in enumerate(names) if hints[n] is float or float in get_args(hints[n]))
        # Nested specs are interned too: the key holds their id (their hash is a Python-level
        # dataclass __hash__ per call). Sound because the object built for a key refers to
        # those nested objects, so they stay alive, and their ids unique, while the key exists.
        self.nested = tuple(i for i, c in enumerate(checks) if c[0] == _GENERIC and any(
            dataclasses.is_dataclass(a) for a in (hints[names[i]], *get_args(hints[names[i]]))))
        self.make = _constructor(cls, names)
        self.interner = Interner(FAST_INTERN_SIZE, f"spec:{cls.__name__}")

    def build(self, data: dict[str, Any]) -> Any:
        """The interned spec for plain, valid ``data``; raises on anything else."""
        values = self.defaults.copy()
        index, checks = self.index, self.checks
        for k, v in data.items():
            i = index[k]
            kind, a, b = checks[i]
            if kind == _INT:
                if type(v) is not int or not a <= v <= b:
                    raise _Slow
            elif kind == _CHOICE:
                if type(v) is not str or v not in a:
                    raise _Slow
            elif kind == _BOOL:
                if type(v) is not bool:
                    raise _Slow
            elif kind == _OPT_INT:
                if v is not None and (type(v) is not int or not a <= v <= b):
                    raise _Slow
            elif kind == _OPT_BOOL:
                if v is not None and type(v) is not bool:
                    raise _Slow
            else:
                values[i] = self.convs[i](v)
                continue
            values[i] = v
        for i in self.required:
            if values[i] is _MISSING:
                raise _Slow
        return self.intern(values)

    def intern(self, values: list[Any]) -> Any:
        """The one object for these (checked, exactly typed) field values."""
        for i in self.floats:
            if values[i] == 0:  # 0.0 and -0.0 hash alike but are different values: not interned
                return self.make(*values)
        if self.nested:
            keyed = values.copy()
            for i in self.nested:
                keyed[i] = id(keyed[i])
            key = tuple(keyed)
        else:
            key = tuple(values)
        hit = self.interner.get(key)
        if hit is not None:
            return hit
        return self.interner.add(key, self.make(*values))

    def intern_obj(self, obj: Any) -> Any:
        """The interned equal of a spec the reference loader built (or a caller passed), if
        every field holds what the fast path would have produced; raises otherwise.
        """
        values = [getattr(obj, n) for n in self.names]
        for i, v in enumerate(values):
            r = self.convs[i](v)
            if r is not v:
                if type(r) is not type(v) or not dataclasses.is_dataclass(v):
                    raise _Slow  # e.g. an int in a float field: equal, but not the same value
                values[i] = r  # an equal nested spec: its interned copy
        return self.intern(values)


_FAST: dict[type, _Fast | None] = {}
_FAST_LOCK = threading.RLock()


def _compiled(cls: type) -> _Fast | None:
    """The fast loader of ``cls``, or None if some field is not a plain hashable value."""
    try:
        return _FAST[cls]
    except KeyError:
        pass
    with _FAST_LOCK:
        if cls in _FAST:
            return _FAST[cls]
        hints = _hints(cls)
        names: list[str] = []
        convs: list[_Conv] = []
        checks: list[tuple[int, Any, Any]] = []
        defaults: list[Any] = []
        fast: _Fast | None = None
        for f in dataclasses.fields(cls):
            if not f.init or f.kw_only:
                break
            conv = _fast_conv(hints[f.name], _bounds(f.metadata))
            if conv is None:
                break
            if f.default is not _MISSING:
                default = f.default
            elif f.default_factory is not _MISSING:
                default = f.default_factory()
                if dataclasses.is_dataclass(default):
                    default = conv(default)  # the interned instance
            else:
                default = _MISSING
            try:
                hash(default)
            except TypeError:
                break
            names.append(f.name)
            convs.append(conv)
            checks.append(_inline_check(hints[f.name], f.metadata))
            defaults.append(default)
        else:
            fast = _Fast(cls, tuple(names), tuple(convs), tuple(checks), defaults)
        _FAST[cls] = fast
        return fast


def fast_load(cls: type[T], data: Any, path: str) -> T:
    """:func:`load`, fast and interned: equal ``data`` gives the same object.

    For spec classes whose fields are all plain hashable values (``Plan``, ``Overlap``,
    ``Offload``, ``Calibration`` ...): a plain mapping whose every value is already of the
    field's exact type and within bounds is checked in one pass, and the result is looked
    up by its field values. Anything else (an error, a float for an integer field, another
    mapping type, a class with mapping fields) goes through :func:`load`, so results and
    errors are exactly :func:`load`'s.
    """
    return fast_loader(cls)(data, path)


def fast_loader(cls: type[T]) -> Callable[[Any, str], T]:
    """``lambda data, path: fast_load(cls, data, path)``, with the class's loader looked up once."""
    fast = _compiled(cls)
    if fast is None:
        return lambda data, path: load(cls, data, path)
    build, intern_obj = fast.build, fast.intern_obj

    def loader(data: Any, path: str) -> T:
        if type(data) is dict:
            try:
                return build(data)  # type: ignore[no-any-return]
            except Exception:  # anything unusual: the reference loader decides
                pass
        obj = load(cls, data, path)
        try:
            return intern_obj(obj)  # type: ignore[no-any-return]
        except Exception:  # a value the fast path does not produce: not interned
            return obj

    return loader


def dump(obj: Any) -> Any:
    """Plain-data form of a spec (mappings, lists, scalars), the inverse of :func:`load`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: dump(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, tuple | list):
        return [dump(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: dump(v) for k, v in obj.items()}
    return obj
