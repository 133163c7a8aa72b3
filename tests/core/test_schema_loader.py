"""The spec loader, ``twin.core.schema.load``: conversion, bounds, unknown and missing fields,
error paths and which error comes first, interning, and how the objects are built.

(Caches built on top of it, and Mapping -> Scenario as a whole: ``test_parse_cache.py``.)
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import importlib
import inspect
import math
import pickle
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.core import schema
from twin.core.errors import SpecError
from twin.core.schema import FrozenDict, FrozenList, load, spec_field
from twin.core.specs import Calibration, Offload, Overlap, Plan, Scenario


@dataclass(frozen=True, slots=True)
class Inner:
    flag: bool = True
    mode: Literal["a", "b"] = "a"


@dataclass(frozen=True, slots=True)
class Outer:
    """Every kind of field the loader knows; mapping fields: not interned."""

    n: int = spec_field(ge=1, le=10)
    x: float = spec_field(0.5, gt=0, lt=1)
    names: tuple[Literal["a", "b"], ...] = ()
    sizes: tuple[int, ...] = spec_field((), ge=1)
    opt: int | None = spec_field(None, ge=0)
    either: int | str = 0
    inner: Inner = field(default_factory=Inner)
    maybe: Inner | None = None
    params: dict[str, Any] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Point:
    """Plain hashable fields only: interned."""

    x: float = 0.0
    label: str = ""
    inner: Inner = field(default_factory=Inner)


@dataclass(frozen=True, slots=True)
class Checked:
    low: int = 0
    high: int = 1

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise SpecError("checked", "low must be <= high")


class Eight(enum.IntEnum):
    V = 8


class Mode(enum.StrEnum):
    A = "a"


def outcome(cls: type, data: object, path: str = "o") -> tuple:
    try:
        obj = load(cls, data, path)
        return ("ok", obj, repr(obj))
    except SpecError as err:
        return ("error", err.field, str(err))


# ------------------------------------------------------------------ conversion
def test_values_come_back_as_the_field_types() -> None:
    obj = load(Outer, {"n": 8.0, "x": 0.25, "names": ["a", "b"], "sizes": (1, 2), "opt": None, "either": "s",
                       "inner": {"flag": False}, "maybe": {"mode": "b"}, "params": {"k": [1, {"j": (2, [3])}]},
                       "rates": {"bf16": 1}}, "o")
    assert obj.n == 8 and type(obj.n) is int
    assert obj.names == ("a", "b") and obj.sizes == (1, 2) and type(obj.names) is tuple
    assert obj.either == "s" and obj.inner == Inner(flag=False) and obj.maybe == Inner(mode="b")
    assert obj.rates == {"bf16": 1.0} and type(obj.rates["bf16"]) is float and type(obj.rates) is FrozenDict
    assert type(obj.params) is FrozenDict and type(obj.params["k"]) is FrozenList
    assert type(obj.params["k"][1]) is FrozenDict and type(obj.params["k"][1]["j"][1]) is FrozenList
    assert type(load(Calibration, {"compute_efficiency": 1}, "c").compute_efficiency) is float


def test_defaults_fill_the_fields_not_given() -> None:
    a, b = load(Outer, {"n": 1}, "o"), load(Outer, {"n": 1}, "o")
    assert a == Outer(n=1) and a.inner == Inner() and a.params == {}
    assert a is not b and a.params is not b.params  # a class with mapping fields: built afresh, defaults too
    assert load(Plan, {"gbs": 8}, "plan") == Plan(gbs=8)


# ------------------------------------------------------------------ errors: field path and rule
ERRORS = [
    ({"n": 0}, "o.n", "must be >= 1 (got 0)"),
    ({"n": 11}, "o.n", "must be <= 10 (got 11)"),
    ({"n": True}, "o.n", "must be an integer (got True)"),
    ({"n": 2.5}, "o.n", "must be an integer (got 2.5)"),
    ({"n": math.inf}, "o.n", "must be an integer (got inf)"),
    ({"n": "8"}, "o.n", "must be an integer (got '8')"),
    ({"n": None}, "o.n", "must be an integer (got null)"),
    ({"n": 1, "x": 0}, "o.x", "must be > 0 (got 0.0)"),
    ({"n": 1, "x": 1}, "o.x", "must be < 1 (got 1.0)"),
    ({"n": 1, "x": math.nan}, "o.x", "must be a finite number (got nan)"),
    ({"n": 1, "x": False}, "o.x", "must be a number (got False)"),
    ({"n": 1, "names": "a"}, "o.names", "must be a list (got 'a')"),
    ({"n": 1, "names": ["a", "c"]}, "o.names[1]", "must be one of 'a', 'b' (got 'c')"),
    ({"n": 1, "sizes": [1, 0]}, "o.sizes[1]", "must be >= 1 (got 0)"),
    ({"n": 1, "sizes": [0, "x"]}, "o.sizes[1]", "must be an integer (got 'x')"),  # every item's type first
    ({"n": 1, "opt": -1}, "o.opt", "must be >= 0 (got -1)"),
    ({"n": 1, "either": 1.5}, "o.either", "must be an integer or a string (got 1.5)"),
    ({"n": 1, "either": None}, "o.either", "must be an integer or a string (got null)"),
    ({"n": 1, "inner": {"flag": 1}}, "o.inner.flag", "must be a boolean (got 1)"),
    ({"n": 1, "inner": []}, "o.inner", "must be a mapping (got list)"),
    ({"n": 1, "inner": None}, "o.inner", "must be a mapping (got null)"),
    ({"n": 1, "maybe": {"mode": "c"}}, "o.maybe.mode", "must be one of 'a', 'b' (got 'c')"),
    ({"n": 1, "maybe": {"bogus": 1}}, "o.maybe.bogus", "unknown field; expected one of: flag, mode"),
    ({"n": 1, "rates": {"bf16": "x"}}, "o.rates.bf16", "must be a number (got 'x')"),
    ({"n": 1, "rates": {1: 2.0}}, "o.rates", "keys must be strings (got 1)"),
    ({"n": 1, "params": [1]}, "o.params", "must be a mapping (got [1])"),
    ({}, "o.n", "is required"),
    ({"n": 1, "bogus": 1}, "o.bogus",
     "unknown field; expected one of: either, inner, maybe, n, names, opt, params, rates, sizes, x"),
]


@pytest.mark.parametrize(("data", "where", "rule"), ERRORS, ids=range(len(ERRORS)))
def test_errors_name_the_field_path_and_the_rule(data: dict, where: str, rule: str) -> None:
    for form in (data, types.MappingProxyType(data)):  # a dict and any other mapping alike
        with pytest.raises(SpecError) as err:
            load(Outer, form, "o")
        assert (err.value.field, err.value.rule, str(err.value)) == (where, rule, f"{where}: {rule}")


def test_errors_at_the_top_and_without_a_path() -> None:
    assert outcome(Outer, [1]) == ("error", "o", "o: must be a mapping (got list)")
    assert outcome(Outer, {}, "") == ("error", "n", "n: is required")
    assert outcome(Outer, {"n": 1, 5: 1}, "")[1:] == ("5", "5: unknown field; expected one of: either, inner, maybe, "
                                                           "n, names, opt, params, rates, sizes, x")
    assert outcome(Plan, {"gbs": 8, "overlap": {"p2p": 1}}, "plan")[1:] == (
        "plan.overlap.p2p", "plan.overlap.p2p: must be a boolean (got 1)")


def test_the_first_error_is_the_first_in_field_order_whatever_the_key_order() -> None:
    # n is declared before x and sizes; unknown keys come before any value's error
    bad = {"sizes": [0], "x": 5, "n": 0}
    for data in (bad, dict(reversed(bad.items())), types.MappingProxyType(bad)):
        assert outcome(Outer, data)[1] == "o.n"
    for data in ({"n": 0, "bogus": 1}, {"bogus": 1, "n": 0}):
        assert outcome(Outer, data)[1] == "o.bogus"
    assert outcome(Outer, {"n": 0, "b2": 1, "b1": 1})[1] == "o.b2"  # of unknown keys, the first in the mapping
    assert outcome(Outer, {"x": 0.5})[1:] == ("o.n", "o.n: is required")  # a missing field in its turn
    assert outcome(Outer, {"x": 5})[1] == "o.n"
    assert outcome(Outer, {"names": ["c"], "n": 1})[1] == "o.names[0]"


VALUES = st.one_of(
    st.sampled_from([0, 1, 2, 8, -1, 10**7, 2**63, True, False, None, 1.0, 2.5, 8.0, -0.0, math.inf, math.nan,
                     "bf16", "fp8", "full", "none", "host", "cxl", "8", "", [], [1], ["core_attn"], {}, Eight.V]),
    st.integers(-5, 2**40), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4))
PLAN_KEYS = st.sampled_from([f.name for f in dataclasses.fields(Plan)] + ["bogus", "Tp"])
NESTED = st.dictionaries(st.sampled_from(["grad_reduce", "param_gather", "tp_comm", "p2p", "ep_comm", "optimizer",
                                          "params", "activations", "x"]), VALUES, max_size=3)
PLANS = st.dictionaries(PLAN_KEYS, st.one_of(VALUES, NESTED), max_size=8)


def _same_whatever_the_form(cls: type, data: dict) -> tuple:
    """The outcome of ``data``, checked to be the same as another mapping type and, unless
    two keys are unknown (the first in the mapping's order is reported), with its keys reversed."""
    first = outcome(cls, data)
    forms: list[object] = [types.MappingProxyType(data)]
    if sum(k not in {f.name for f in dataclasses.fields(cls)} for k in data) < 2:
        forms.append(dict(reversed(data.items())))
    for other in forms:
        again = outcome(cls, other)
        assert again[1:] == first[1:] if first[0] == "error" else again[:2] == first[:2]
    return first


@settings(max_examples=600, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=PLANS, gbs=st.sampled_from([None, 8, 64.0, 0]))
def test_any_input_gives_one_outcome_whatever_its_key_order_or_mapping_type(data: dict, gbs: object) -> None:
    if gbs is not None:
        data = {"gbs": gbs, **data}
    for cls in (Plan, Overlap, Offload, Calibration):
        _same_whatever_the_form(cls, data)


def _field_values(tp: object) -> st.SearchStrategy:
    """Mostly valid values of a field of type ``tp``, with near misses (4.0 for 4, 1 for True)."""
    if tp is int:
        return st.sampled_from([1, 2, 4, 8, 64, 4.0, 0, True, 10**12, Eight.V])
    if tp == int | None:
        return st.sampled_from([None, 1, 4, 4.0, 0])
    if tp is bool:
        return st.sampled_from([True, False, 1, None])
    if tp == bool | None:
        return st.sampled_from([None, True, False, 0])
    if tp is float:
        return st.sampled_from([0.5, 1, 1.0, 0.0, -0.0, 1.5, math.nan, math.inf, True])
    if tp is str:
        return st.sampled_from(["", "x", 1])
    if get_origin(tp) is Literal:
        return st.sampled_from([*get_args(tp), "nope"])
    if get_origin(tp) is tuple:  # a list of choices: as a list or a tuple, with a bad name, or not a list
        names = list(get_args(get_args(tp)[0]))
        return st.one_of(st.lists(st.sampled_from([*names, "nope"]), max_size=3),
                         st.lists(st.sampled_from(names), max_size=3).map(tuple), st.sampled_from([names[0], None]))
    if dataclasses.is_dataclass(tp):
        hints = schema.field_types(tp)
        return st.fixed_dictionaries({}, optional={n: _field_values(hints[n]) for n in hints})
    raise AssertionError(tp)


def _plain_types(obj: object) -> bool:
    """Every field holds its declared type exactly (an int field an int, not 4.0 nor an IntEnum)."""
    hints = schema.field_types(type(obj))
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        v, tp = getattr(obj, f.name), hints[f.name]
        kinds = list(get_args(tp) if get_origin(tp) in (types.UnionType, typing.Union) else (tp,))
        kinds = [str if get_origin(k) is Literal else tuple if get_origin(k) is tuple else k for k in kinds]
        if type(v) not in kinds and not (v is None and type(None) in kinds):
            return False
    return True


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.sampled_from([Plan, Overlap, Offload, Calibration]).flatmap(
    lambda cls: st.tuples(st.just(cls), _field_values(cls))))
def test_mostly_valid_input_loads_to_exact_types_and_equal_input_to_one_object(data: tuple) -> None:
    cls, mapping = data
    result = _same_whatever_the_form(cls, mapping)
    if result[0] == "ok":
        obj = result[1]
        if _plain_types(obj):
            assert load(cls, copy.deepcopy(mapping), "plan") is obj
        else:  # a value kept as given (an IntEnum in an int field): built, never served to other input
            assert any(type(v) is Eight for v in mapping.values())
            assert load(cls, copy.deepcopy(mapping), "plan") is not obj


# ------------------------------------------------------------------ interning
def test_equal_input_gives_one_object_for_classes_of_plain_fields() -> None:
    a = load(Plan, {"gbs": 64, "tp": 8}, "plan")
    assert load(Plan, {"tp": 8, "gbs": 64}, "plan") is a  # key order does not matter
    assert load(Plan, {"gbs": 64.0, "tp": 8.0}, "plan") is a  # nor 8.0 for 8: both load as 8
    assert load(Plan, types.MappingProxyType({"gbs": 64, "tp": 8}), "plan") is a
    assert load(Plan, {"gbs": 64, "tp": 4}, "plan") is not a
    assert load(Plan, {"gbs": 8}, "plan").overlap is load(Plan, {"gbs": 16}, "plan").overlap  # defaults shared
    assert load(Plan, {"gbs": 64, "overlap": Overlap()}, "plan").overlap is load(Plan, {"gbs": 64}, "plan").overlap
    assert load(Plan, {"gbs": 64, "overlap": {}}, "plan") is load(Plan, {"gbs": 64}, "plan")
    schema.clear_caches()  # a default stays the object that equal input loads to
    assert load(Plan, {"gbs": 32, "overlap": {"p2p": True}}, "plan").overlap is load(Plan, {"gbs": 8}, "plan").overlap
    assert load(Point, {"x": 1.5}, "p") is load(Point, {"x": 1.5}, "p")
    assert load(Point, {"x": 0.0}, "p") is not load(Point, {"x": 0.0}, "p")  # a zero: 0.0 or -0.0, told apart
    assert load(Outer, {"n": 1}, "o") is not load(Outer, {"n": 1}, "o")  # mapping fields: never shared


def test_values_equal_in_python_but_different_inputs_are_not_shared() -> None:
    plain = load(Plan, {"gbs": 8}, "plan")
    enum_gbs = load(Plan, {"gbs": Eight.V}, "plan")  # == 8, kept as given
    assert enum_gbs == plain and enum_gbs is not plain and type(enum_gbs.gbs) is Eight
    assert load(Plan, {"gbs": 8}, "plan") is plain
    kept = load(Inner, {"mode": Mode.A}, "i")
    assert kept == Inner() and kept is not load(Inner, {}, "i") and type(kept.mode) is Mode
    zero, minus = load(Point, {"x": 0.0}, "p"), load(Point, {"x": -0.0}, "p")
    assert repr(minus) == "Point(x=-0.0, label='', inner=Inner(flag=True, mode='a'))" and zero is not minus
    assert math.copysign(1, load(Point, {"x": -0.0}, "p").x) == -1
    odd = Overlap(grad_reduce=1)  # type: ignore[arg-type] # built by hand, unchecked: taken as it is
    assert load(Plan, {"gbs": 8, "overlap": odd}, "plan").overlap is odd


def test_interning_can_be_switched_off() -> None:
    try:
        schema.set_interning(False)
        assert load(Plan, {"gbs": 8}, "plan") is not load(Plan, {"gbs": 8}, "plan")
        assert load(Plan, {"gbs": 8}, "plan") == load(Plan, {"gbs": 8}, "plan")
    finally:
        schema.set_interning(True)
    assert load(Plan, {"gbs": 8}, "plan") is load(Plan, {"gbs": 8}, "plan")


# ------------------------------------------------------------------ building
@pytest.mark.parametrize("cls", [Plan, Scenario, Outer, Inner, Checked])
def test_objects_are_built_as_their_init_builds_them(cls: type) -> None:
    example = {Plan: Plan(gbs=64, tp=2), Outer: Outer(n=3, params={"a": 1}), Inner: Inner(flag=False),
               Checked: Checked(0, 2), Scenario: None}[cls]
    if example is None:
        from tests.conftest import base_scenario
        from twin.engine import Engine

        example = Engine(autoload=False).scenario(base_scenario())
    values = [getattr(example, f.name) for f in dataclasses.fields(cls)]
    built = schema.constructor(cls)(*values)
    assert type(built) is cls and built == example and repr(built) == repr(example)
    assert pickle.loads(pickle.dumps(built)) == built and copy.deepcopy(built) == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.__setattr__(dataclasses.fields(cls)[0].name, None)
    with pytest.raises(TypeError):
        schema.constructor(cls)(*values, None)  # one value too many


def test_a_post_init_still_runs() -> None:
    assert load(Checked, {"low": 1, "high": 2}, "c") == Checked(1, 2)
    with pytest.raises(SpecError, match="low must be <= high"):
        load(Checked, {"low": 3}, "c")


# ------------------------------------------------------------------ the quick test
def _spec_classes() -> list[type]:
    out: list[type] = [Outer, Inner, Point]
    for name in ("twin.core.specs", "twin.core.failures.failure_spec", "twin.server.server_config"):
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if dataclasses.is_dataclass(cls) and cls not in out:
                out.append(cls)
    return out


def test_the_quick_test_takes_only_values_its_converter_returns_unchanged() -> None:
    """The loader takes a value that passes a field's quick test without calling the converter:
    for every field of every spec, the converter must return each such value as it is."""
    probes = [0, 1, -1, 2, 7, 10**6, 10**9, 2**63, 0.0, -0.0, 0.05, 0.5, 1.0, 2.0, 1e6, 1e300, math.inf, -math.inf,
              math.nan, True, False, None, "", "x", "bf16", "fp8", "full", "auto", Eight.V, Mode.A]
    tested = 0
    for cls in _spec_classes():
        ld = schema._loader_for(cls)
        for name, test, conv, f in zip(ld.names, ld.tests, ld.convs, dataclasses.fields(cls), strict=True):
            if test is None:
                continue
            exact, nullable, lo, hi, choices = test
            bounds = [b + d for b in (f.metadata.get("ge"), f.metadata.get("le")) if b is not None for d in (-1, 0, 1)]
            for v in [*probes, *bounds, *(choices or ())]:
                quick = (v is None and nullable) or (type(v) is exact and (
                    v in choices if choices is not None else lo is None or lo <= v <= hi))
                if quick:
                    tested += 1
                    assert conv(v, name) is v, (cls.__name__, name, v)
    assert tested > 500
