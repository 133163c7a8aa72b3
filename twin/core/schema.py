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
inputs give one object (:func:`load` interns the classes whose fields are plain values, and
the preset caches of ``scenario_io`` the others), and no caller can change the shared copy
by mutating what it was handed.

One loader, fast without generated code. The service loads a plan per request
(``Engine.scenario(mapping)`` one by one), so loading must not inspect the class per call.
Per spec class, once, :func:`_loader_for` works out a :class:`_ClassLoader`: the field
names and their index, the default values, one converter per field (closures over what its
type and bounds say, built by :func:`_field_converter`), a quick test per field of the
common exact values that the converter would return unchanged (an int within its bounds, a
known choice: :func:`_quick_test`), how to build the object (:func:`_builder`) and, for
classes whose fields are plain hashable values, an :class:`Interner`. Loading a plain
``dict`` is then one pass over its items: index, test or convert, store; then the object is
found by its field values or built. Whatever stops that pass (an unknown key, a bad value,
a missing field, a value kept as a subclass such as an ``IntEnum``) sends the input through
the same converters once more: unknown keys first, then field by field in declaration order,
which raises the error that order meets first, whatever order the keys came in. Each rule is
written once, in its converter; a quick test, derived from the same type and bounds, only
lets a value through unconverted where the converter would return it unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import sys
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args, get_origin

from twin.core.errors import SpecError
from twin.core.frozen_values import FrozenDict, FrozenList, freeze, frozen_item, thaw
from twin.core.interning import Interner, Unkeyable, cache_sizes, clear_caches, set_interning, value_key

# The read-only containers and the interners are their own modules; their names stay importable here.
__all__ = ["FrozenDict", "FrozenList", "Interner", "Unkeyable", "cache_sizes", "clear_caches", "constructor",
           "dump", "freeze", "load", "loader", "set_interning", "spec_field", "thaw", "value_key"]

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


def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each field of dataclass ``cls`` (looked up once per class)."""
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


# ------------------------------------------------------------ converters, one per field type
# A converter is ``conv(value, path) -> value``: the value the spec holds, or SpecError naming
# ``path`` and the rule. Each is built once per field type (closures over what the type says:
# its choices, its item converter, its messages), so converting does no reflection.
_Conv = Callable[[Any, str], Any]
_NONE = type(None)
_PLAIN = frozenset({bool, int, float, str, _NONE})
_FLOAT_MAX = sys.float_info.max


class _Kept(Exception):
    """A valid value kept as given although of a subclass (an ``IntEnum`` in an integer field,
    a ``str`` subclass for a choice): equal to the plain value, but a different input, so the
    object holding it is built but not interned (see :meth:`_ClassLoader.load`).
    """

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


def _converter(tp: Any, share: bool = False) -> _Conv:
    """The converter of type ``tp``. ``share``: nested specs passed as objects are replaced by
    their interned equal (the field belongs to an interned class, whose key holds their id).
    """
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _union_converter(tp, share)
    null = f"must be {_type_name(tp)} (got null)"
    if origin is Literal:
        return _literal_converter(tp, null)
    if tp in _SCALARS:
        return _SCALARS[tp](null)
    if origin is tuple:
        return _tuple_converter(get_args(tp)[0], null, share)
    if origin in (dict, Mapping):
        return _mapping_converter(get_args(tp)[1], null)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _spec_converter(tp, null, share)

    def other(v: Any, path: str) -> Any:
        if v is None:
            raise SpecError(path, null)
        if tp is Any:
            return v
        raise SpecError(path, f"unsupported field type {tp!r}")  # pragma: no cover - programming error

    return other


def _union_converter(tp: Any, share: bool) -> _Conv:
    """``X | Y | None``: None if allowed, else the first member type that takes the value; the
    one member's own error when there is one member, else the union's.
    """
    args = get_args(tp)
    nullable = _NONE in args
    convs = [_converter(a, share) for a in args if a is not _NONE]
    name = _type_name(tp)
    if nullable and len(convs) == 1:
        (inner,) = convs

        def optional(v: Any, path: str) -> Any:
            return None if v is None else inner(v, path)

        return optional

    def union(v: Any, path: str) -> Any:
        if v is None:
            if nullable:
                return None
            raise SpecError(path, f"must be {name} (got null)")
        errors: list[SpecError] = []
        for conv in convs:
            try:
                return conv(v, path)
            except SpecError as err:
                errors.append(err)
        if len(errors) == 1:
            raise errors[0]
        raise SpecError(path, f"must be {name} (got {v!r})")

    return union


def _literal_converter(tp: Any, null: str) -> _Conv:
    """One of the ``Literal`` choices; a bool only where a choice is a bool."""
    choices = get_args(tp)
    has_bool = any(isinstance(c, bool) for c in choices)
    name = _type_name(tp)

    def choice(v: Any, path: str) -> Any:
        if v is None:
            raise SpecError(path, null)
        if v not in choices or isinstance(v, bool) != has_bool:
            raise SpecError(path, f"must be {name} (got {v!r})")
        return v

    return choice


def _bool_converter(null: str) -> _Conv:
    def boolean(v: Any, path: str) -> Any:
        if v is True or v is False:
            return v
        raise SpecError(path, null if v is None else f"must be a boolean (got {v!r})")

    return boolean


def _int_converter(null: str) -> _Conv:
    def integer(v: Any, path: str) -> Any:
        if type(v) is int:
            return v
        if v is None:
            raise SpecError(path, null)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SpecError(path, f"must be an integer (got {v!r})")
        if isinstance(v, float):
            if not math.isfinite(v) or not v.is_integer():
                raise SpecError(path, f"must be an integer (got {v!r})")
            return int(v)
        return v

    return integer


def _float_converter(null: str) -> _Conv:
    def number(v: Any, path: str) -> Any:
        if type(v) is float and v - v == 0:  # finite (float(v) is v itself)
            return v
        if v is None:
            raise SpecError(path, null)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SpecError(path, f"must be a number (got {v!r})")
        v = float(v)
        if not math.isfinite(v):
            raise SpecError(path, f"must be a finite number (got {v!r})")
        return v

    return number


def _str_converter(null: str) -> _Conv:
    def string(v: Any, path: str) -> Any:
        if isinstance(v, str):
            return v
        raise SpecError(path, null if v is None else f"must be a string (got {v!r})")

    return string


_SCALARS: dict[Any, Callable[[str], _Conv]] = {
    bool: _bool_converter, int: _int_converter, float: _float_converter, str: _str_converter}


def _tuple_converter(item_tp: Any, null: str, share: bool) -> _Conv:
    """A list (or tuple) of items, as a tuple; a tuple whose every item converts to itself is
    returned as is.
    """
    item = _converter(item_tp, share)

    def sequence(v: Any, path: str) -> Any:
        if v is None:
            raise SpecError(path, null)
        if isinstance(v, str | bytes | Mapping) or not isinstance(v, list | tuple):
            raise SpecError(path, f"must be a list (got {v!r})")
        out = tuple([item(x, f"{path}[{i}]") for i, x in enumerate(v)])
        return v if type(v) is tuple and all(map(operator.is_, out, v)) else out

    return sequence


def _mapping_converter(val_tp: Any, null: str) -> _Conv:
    """A mapping with string keys, as a :class:`FrozenDict`; free-form (``Any``) values are
    copied frozen, so the spec shares none of the caller's lists.
    """
    free = val_tp is Any
    item = None if free else _converter(val_tp)

    def mapping(v: Any, path: str) -> Any:
        if v is None:
            raise SpecError(path, null)
        if not isinstance(v, Mapping):
            raise SpecError(path, f"must be a mapping (got {v!r})")
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise SpecError(path, f"keys must be strings (got {k!r})")
            out[k] = frozen_item(x) if item is None else item(x, f"{path}.{k}")
        return FrozenDict(out)

    return mapping


def _spec_converter(tp: type, null: str, share: bool) -> _Conv:
    """A nested spec: loaded from a mapping, or an object of the class taken as it is (with
    ``share``, its interned equal).
    """

    def spec(v: Any, path: str) -> Any:
        if type(v) is dict:
            return (_LOADERS.get(tp) or _loader_for(tp)).load(v, path)
        if isinstance(v, tp):
            return (_LOADERS.get(tp) or _loader_for(tp)).shared(v) if share else v
        if v is None:
            raise SpecError(path, null)
        return (_LOADERS.get(tp) or _loader_for(tp)).load(v, path)

    return spec


def _bounds_check(meta: Mapping[str, Any]) -> Callable[[Any, str], None] | None:
    """The field's numeric bounds (``gt``, ``ge``, ``lt``, ``le``) as a check of a converted
    number (other values pass); None if the field has none.
    """
    gt, ge, lt, le = meta.get("gt"), meta.get("ge"), meta.get("lt"), meta.get("le")
    if gt is None and ge is None and lt is None and le is None:
        return None

    def check(value: Any, path: str) -> None:
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return
        if gt is not None and not value > gt:
            raise SpecError(path, f"must be > {gt} (got {value})")
        if ge is not None and not value >= ge:
            raise SpecError(path, f"must be >= {ge} (got {value})")
        if lt is not None and not value < lt:
            raise SpecError(path, f"must be < {lt} (got {value})")
        if le is not None and not value <= le:
            raise SpecError(path, f"must be <= {le} (got {value})")

    return check


def _plain(value: Any) -> bool:
    """Whether a converted value is keyed exactly by ``==`` and its type (plain scalars, tuples
    of them) or by identity (nested specs, keyed by id): an interned object may hold it.
    """
    t = type(value)
    if t is tuple:
        return all(_plain(v) for v in value)
    return t in _PLAIN or dataclasses.is_dataclass(value)


def _field_converter(tp: Any, meta: Mapping[str, Any], interned: bool) -> _Conv:
    """The converter of one field: its type's, then its bounds (on a tuple's items too), then,
    in an interned class, :class:`_Kept` for a value kept as a subclass instance.
    """
    convert = _converter(tp, share=interned)
    bounds = _bounds_check(meta)
    if bounds is None and not interned:
        return convert

    def checked(v: Any, path: str) -> Any:
        out = convert(v, path)
        if bounds is not None:
            bounds(out, path)
            if isinstance(out, tuple):
                for i, item in enumerate(out):
                    bounds(item, f"{path}[{i}]")
        if interned and not _plain(out):
            raise _Kept(out)
        return out

    return checked


# A field's quick test: (exact type, None allowed, low, high, choices). A value of exactly that
# type, within [low, high] (numbers) or among the choices (strings), or None where allowed, is
# what the field's converter returns for it, unchanged; so :meth:`_ClassLoader.load` takes it
# without the call. Other values, and fields without a test, go through the converter.
_Quick = tuple[type, bool, Any, Any, "frozenset[str] | None"]


def _quick_test(tp: Any, meta: Mapping[str, Any]) -> _Quick | None:
    """The quick test of a field of type ``tp``: ``bool``, ``str``, string choices, and ``int``
    or ``float`` with no bound other than ``ge``/``le``, each optionally ``| None``.
    """
    args = get_args(tp) if get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    kinds = [a for a in args if a is not _NONE]
    if len(kinds) != 1:
        return None
    (kind,) = kinds
    nullable = _NONE in args
    if kind is int or kind is float:
        if meta.get("gt") is not None or meta.get("lt") is not None:
            return None
        ge, le = meta.get("ge"), meta.get("le")
        lo, hi = -math.inf if ge is None else ge, math.inf if le is None else le
        if kind is float:  # within these, a float is finite
            lo, hi = max(lo, -_FLOAT_MAX), min(hi, _FLOAT_MAX)
        return kind, nullable, lo, hi, None
    if kind is bool or kind is str:
        return kind, nullable, None, None, None
    if get_origin(kind) is Literal and all(type(c) is str for c in get_args(kind)):
        return str, nullable, None, None, frozenset(get_args(kind))
    return None


# ------------------------------------------------------------ building the object
def _builder(cls: type) -> Callable[[Sequence[Any]], Any]:
    """``values -> cls(*values)`` (every field, in order), faster where that is what
    ``cls.__init__`` does.

    The ``__init__`` that ``@dataclass(frozen=True, slots=True)`` writes (every field an init
    field, no ``__post_init__``) stores each value in its slot through ``object.__setattr__``,
    a call per field. A twin class with the same slots, not frozen (a dataclass too, its
    ``__init__`` written by ``dataclasses`` the same way), stores them with plain attribute
    assignments; the object then becomes a ``cls`` by ``__class__`` assignment, which Python
    allows only between classes of the same layout (it checks: same base, same slots) and
    which leaves the slots as they are. A Plan (31 fields): ~0.7 us instead of ~4 us for
    ``Plan(*values)`` (timeit, CPython 3.11 here). Any other class is called.
    """
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = tuple(f.name for f in fields)
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    written = getattr(init, "co_filename", "") == "<string>"  # by dataclasses, not by hand
    frozen = getattr(getattr(cls, "__dataclass_params__", None), "frozen", False)
    if written and frozen and not hasattr(cls, "__post_init__") and all(f.init for f in fields) and \
            cls.__dict__.get("__slots__") == names and cls.__bases__ == (object,):
        filler = dataclasses.make_dataclass(f"{cls.__name__}Filler", names, slots=True, eq=False)

        def build(values: Sequence[Any]) -> Any:
            obj = filler(*values)
            obj.__class__ = cls
            return obj

        try:
            if type(build([None] * len(names))) is cls:
                return build
        except TypeError:  # a layout Python does not take as the same
            pass
    if any(f.kw_only for f in fields):
        init_names = [f.name for f in fields if f.init]
        return lambda values: cls(**dict(zip(init_names, values, strict=True)))
    return lambda values: cls(*values)


def constructor(cls: type) -> Callable[..., Any]:
    """``cls(*values)`` with every init field given in order, built as :func:`load` builds
    specs (see :func:`_builder`).
    """
    build = _builder(cls)
    return lambda *values: build(values)


# ------------------------------------------------------------ the loader
# Objects kept per interned spec class: a sweep of distinct plans churns through this many
# before the oldest is rebuilt; a Plan and its key tuple are 200 + 208 bytes
# (sys.getsizeof, CPython 3.11), so ~1.7 MB for plans.
SPEC_INTERN_SIZE = 4096


class _PerObject:
    """A default made for each object by its ``default_factory`` (a mutable one: a dict)."""

    __slots__ = ("factory",)

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory


def _default(factory: Callable[[], Any], interned: bool) -> Any:
    """The default a field with ``default_factory`` starts from: in an interned class, made once
    (it is hashable, so immutable enough to share; a nested spec is its interned copy); in
    other classes, made per object, as ``cls()`` would.
    """
    if not interned:
        return _PerObject(factory)
    made = factory()
    if dataclasses.is_dataclass(made):
        made = _loader_for(type(made)).shared(made, pin=True)
    return made


class _ClassLoader:
    """How to load one spec class, worked out once (see the module docstring)."""

    __slots__ = ("build", "cls", "convs", "defaults", "expected", "factories", "floats", "index", "interner",
                 "names", "nested", "required", "tests")

    def __init__(self, cls: type, interned: bool) -> None:
        hints = field_types(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
        self.cls = cls
        self.names = tuple(f.name for f in fields)
        self.expected = ", ".join(sorted(self.names))
        self.index = {n: i for i, n in enumerate(self.names)}
        self.convs = tuple(_field_converter(hints[f.name], f.metadata, interned) for f in fields)
        self.tests = tuple(_quick_test(hints[f.name], f.metadata) for f in fields)
        self.defaults = [f.default for f in fields]
        self.factories = tuple(i for i, f in enumerate(fields) if f.default_factory is not _MISSING)
        self.required = tuple(i for i, d in enumerate(self.defaults) if d is _MISSING and i not in self.factories)
        for i in self.factories:
            self.defaults[i] = _default(fields[i].default_factory, interned)
        if interned:
            self.factories = ()  # made once, shared by every object: see _default
        self.build = _builder(cls)
        self.interner = Interner(SPEC_INTERN_SIZE, f"spec:{cls.__name__}") if interned else None
        self.floats = tuple(i for i, f in enumerate(fields) if float in (hints[f.name], *get_args(hints[f.name])))
        # Nested specs are keyed by their id (their hash is a Python-level dataclass __hash__):
        # sound, as the object kept for a key holds them, so they live, and keep their ids, as
        # long as the key.
        self.nested = tuple(i for i, f in enumerate(fields) if any(
            dataclasses.is_dataclass(a) for a in (hints[f.name], *get_args(hints[f.name]))))

    def load(self, data: Any, path: str) -> Any:
        """``cls`` from ``data``: see :func:`load`.

        A plain ``dict`` is converted in one pass in its own order; if anything stops that pass
        (an unknown key, an error, a missing field, a value kept as a subclass) or ``data`` is
        another mapping, :meth:`load_in_order` converts it field by field in declaration order,
        which raises the first error met in that order.
        """
        if type(data) is not dict:
            return self.load_in_order(data, path)
        values = self.defaults.copy()
        index, tests, convs = self.index, self.tests, self.convs
        try:
            for k, v in data.items():
                i = index[k]
                test = tests[i]
                if test is not None:  # see _quick_test
                    exact, nullable, lo, hi, choices = test
                    if v is None:
                        if nullable:
                            values[i] = v
                            continue
                    elif type(v) is exact and (v in choices if choices is not None else lo is None or lo <= v <= hi):
                        values[i] = v
                        continue
                values[i] = convs[i](v, path)  # path: only errors use it, and they are redone
            for i in self.required:
                if values[i] is _MISSING:
                    raise KeyError(self.names[i])
        except Exception:
            return self.load_in_order(data, path)
        interner = self.interner
        if interner is None or not Interner.enabled:
            return self.make(values)
        key = self.key(values)  # as in intern(), without the call
        if key is None:
            return self.build(values)
        hit = interner.get(key)
        return hit if hit is not None else interner.add(key, self.build(values))

    def load_in_order(self, data: Any, path: str) -> Any:
        """:meth:`load` field by field: unknown keys first, then each field in declaration order."""
        if not isinstance(data, Mapping):
            raise SpecError(path, f"must be a mapping (got {type(data).__name__})")
        index = self.index
        for key in data:
            if key not in index:
                where = f"{path}.{key}" if path else str(key)
                raise SpecError(where, f"unknown field; expected one of: {self.expected}")
        values = self.defaults.copy()
        plain = True
        for i, name in enumerate(self.names):
            where = f"{path}.{name}" if path else name
            if name in data:
                try:
                    values[i] = self.convs[i](data[name], where)
                except _Kept as kept:
                    values[i], plain = kept.value, False
            elif values[i] is _MISSING:
                raise SpecError(where, "is required")
        if plain and self.interner is not None and Interner.enabled:
            return self.intern(values)
        return self.make(values)

    def make(self, values: list[Any]) -> Any:
        """A new object of these converted values (defaults made per object made here)."""
        for i in self.factories:
            if type(values[i]) is _PerObject:
                values[i] = values[i].factory()
        return self.build(values)

    def intern(self, values: list[Any]) -> Any:
        """The one object of an interned class for these converted, plain values."""
        key = self.key(values)
        if key is None:
            return self.build(values)
        hit = self.interner.get(key)  # type: ignore[union-attr]
        return hit if hit is not None else self.interner.add(key, self.build(values))  # type: ignore[union-attr]

    def key(self, values: list[Any]) -> tuple[Any, ...] | None:
        """The interning key of an interned class's field values (None: not interned)."""
        for i in self.floats:
            if values[i] == 0:  # 0.0 and -0.0 hash alike but are different values
                return None
        if not self.nested:
            return tuple(values)
        keyed = values.copy()
        for i in self.nested:
            keyed[i] = id(keyed[i])
        return tuple(keyed)

    def shared(self, obj: Any, pin: bool = False) -> Any:
        """The interned equal of ``obj`` (an object of an interned class: a default, or one passed
        in a field) if its every field holds what loading gives; else ``obj`` itself. ``pin``:
        a default, kept across :func:`clear_caches` (see :meth:`Interner.pin`).
        """
        interner = self.interner
        if interner is None or type(obj) is not self.cls or not (Interner.enabled or pin):
            return obj
        values = [getattr(obj, n) for n in self.names]
        changed = False
        try:
            for i, v in enumerate(values):
                out = self.convs[i](v, "")
                if out is not v:
                    if type(out) is not type(v) or not dataclasses.is_dataclass(v):
                        return obj  # e.g. an int in a float field: equal, but not what loading gives
                    values[i], changed = out, True  # an equal nested spec: its interned copy
        except Exception:  # not a value loading gives
            return obj
        built = self.build(values) if changed else obj
        key = self.key(values)
        if key is None:
            return built
        hit = interner.get(key)
        return (interner.pin if pin else interner.add)(key, built if hit is None else hit)


_LOADERS: dict[type, _ClassLoader] = {}
_LOADERS_LOCK = threading.RLock()
_BUILDING: set[type] = set()


def _internable(cls: type) -> bool:
    """Whether equal loads of ``cls`` may share one object: every field an init, positional
    field of a plain hashable type (bool, int, float, str, string choices, a tuple of string
    choices, an interned spec; or None), with a hashable default.
    """
    hints = field_types(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only or not _internable_type(hints[f.name]):
            return False
        default = f.default if f.default_factory is _MISSING else f.default_factory()  # type: ignore[misc]
        try:
            hash(default)
        except TypeError:
            return False
    return True


def _internable_type(tp: Any) -> bool:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        return len(args) == 2 and _NONE in args and _internable_type(next(a for a in args if a is not _NONE))
    if origin is Literal:
        return all(type(c) is str for c in get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        return len(args) == 2 and args[1] is Ellipsis and get_origin(args[0]) is Literal and _internable_type(args[0])
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp not in _BUILDING and _loader_for(tp).interner is not None
    return tp in (bool, int, float, str)


def _loader_for(cls: type) -> _ClassLoader:
    """The loader of ``cls``, built on first use (under a lock: one per class)."""
    hit = _LOADERS.get(cls)
    if hit is not None:
        return hit
    with _LOADERS_LOCK:
        if cls in _LOADERS:
            return _LOADERS[cls]
        _BUILDING.add(cls)
        try:
            made = _ClassLoader(cls, _internable(cls))
        finally:
            _BUILDING.discard(cls)
        _LOADERS[cls] = made
        return made


def load(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from the mapping ``data`` strictly; raise :class:`SpecError` naming the
    field (``path`` and the dotted field names below it) and the rule.

    Equal ``data`` gives one object for classes whose fields are plain hashable values
    (``Plan``, ``Overlap``, ``Calibration``, ``Model`` ...: see :func:`_internable`);
    others are built afresh each time.
    """
    ld = _LOADERS.get(cls)
    if ld is None:
        ld = _loader_for(cls)
    return ld.load(data, path)  # type: ignore[no-any-return]


def loader(cls: type[T]) -> Callable[[Any, str], T]:
    """``lambda data, path: load(cls, data, path)``, with the class's loader looked up once
    (for hot paths: ``Engine.scenario`` loads every plan through one).
    """
    return _loader_for(cls).load


def dump(obj: Any) -> Any:
    """Plain-data form of a spec (mappings, lists, scalars), the inverse of :func:`load`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: dump(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, tuple | list):
        return [dump(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: dump(v) for k, v in obj.items()}
    return obj
