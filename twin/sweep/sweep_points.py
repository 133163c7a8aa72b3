"""Sweep points: ids -> axis values -> per-point columns for the step model's batch path.

Point ids are positions in the sweep's enumeration (grid: row-major over the axes, the
last axis fastest; zip: the i-th value of every axis; random: draws that are a pure
function of (seed, axis, id)), so any range of ids can be generated anywhere, in any
order, and a retried batch yields the same points.

A batch is columnar: per point the index of its model, cluster and calibration among the
distinct ones the batch uses (each built once from its axis values, interned by value so
equal sections are one object), and its plan as :class:`~twin.core.point_set.PlanColumns`
built straight from the axis codes: each axis value is converted (and checked by the
schema) once, then gathered per point. Nothing is built per point.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.errors import NotFoundError, SpecError
from twin.core.point_set import _NESTED, PlanColumns, PointSet, plan_column
from twin.core.results import Refusal
from twin.core.spec_keys import spec_key
from twin.core.specs import (
    DEFAULT_SOFTWARE,
    DEFAULT_STRATEGIES,
    Calibration,
    Cluster,
    Model,
    Plan,
    Scenario,
    Software,
    Strategies,
)
from twin.sweep.sweep_spec import Axis, SweepSpec, _from_unit, apply_values, build_section, get_path

_SECTIONS = ("cluster", "model", "calibration", "strategies", "plan")
# Sections built once per distinct combination of their axes' values, one object per point.
_OBJECT_SECTIONS = ("cluster", "model", "calibration", "strategies")


@dataclass
class PointBatch:
    """A contiguous range of points, as columns.

    ``models[model_ix[i]]``, ``clusters[cluster_ix[i]]``, ``calibrations[calibration_ix[i]]``,
    ``strategies[strategies_ix[i]]`` (the strategy selection; an axis may sweep it) and row
    ``i`` of ``plan`` make point ``i``; ``error_ix[i]`` (-1: none) indexes
    ``errors`` when its scenario could not be built (its other columns are then
    placeholders). ``columns``: the axis values per point, for result rows.
    """

    ids: np.ndarray
    models: list[Model]
    model_ix: np.ndarray
    clusters: list[Cluster]
    cluster_ix: np.ndarray
    calibrations: list[Calibration]
    calibration_ix: np.ndarray
    plan: PlanColumns
    error_ix: np.ndarray
    errors: list[str]
    columns: dict[str, Any] = field(default_factory=dict)
    # The typed refusal of each message in ``errors`` (twin.core.results.Refusal).
    refusals: dict[str, Refusal] = field(default_factory=dict)
    axis_codes: list[tuple[Axis, np.ndarray]] = field(default_factory=list)
    software: Software = DEFAULT_SOFTWARE   # one stack for the whole sweep (base.software)
    strategies: list[Strategies] = field(default_factory=lambda: [DEFAULT_STRATEGIES])
    strategies_ix: np.ndarray | None = None   # None: every point has strategies[0]

    def strategy_index(self) -> np.ndarray:
        """Per point, the index of its strategy selection in ``strategies``."""
        if self.strategies_ix is None:
            return np.zeros(len(self), np.int64)
        return self.strategies_ix

    def __len__(self) -> int:
        return len(self.ids)

    def axis_columns(self, sel: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The row columns (axis values, then ``columns``) of the points in ``sel`` (default: all)."""
        if sel is None:
            sel = np.arange(len(self))
        out: dict[str, np.ndarray] = {}
        for a, codes in self.axis_codes:
            picked = codes[sel]
            if a.continuous:
                out[a.column] = picked
            else:
                out[a.column] = np.asarray([_cell(v) for v in a.values], dtype=object)[picked]
        for name, values in self.columns.items():
            out[name] = np.asarray(values)[sel]
        return out

    def error(self, i: int) -> str | None:
        """Why point ``i``'s scenario could not be built (None if it could)."""
        k = int(self.error_ix[i])
        return None if k < 0 else self.errors[k]

    def scenario(self, i: int) -> Scenario:
        """Point ``i`` as a :class:`Scenario` (it must have no error)."""
        if self.error_ix[i] >= 0:
            raise SpecError("point", f"point {int(self.ids[i])} has no scenario: {self.errors[self.error_ix[i]]}")
        return Scenario(cluster=self.clusters[int(self.cluster_ix[i])], model=self.models[int(self.model_ix[i])],
                        plan=self.plan.plan(i), calibration=self.calibrations[int(self.calibration_ix[i])],
                        software=self.software, strategies=self.strategies[int(self.strategy_index()[i])])

    def point_set(self, idx: np.ndarray) -> PointSet:
        """The points in ``idx`` (which must share one model structure and one strategy selection,
        and have no error; models that differ in seq_len only: ``PointSet.models``).
        """
        # Every point (0 .. n-1, ascending): the columns as they are, not copied.
        whole = len(idx) == len(self) and idx[0] == 0 and bool((idx[1:] > idx[:-1]).all())
        mix = self.model_ix if whole else self.model_ix[idx]
        used, rows = ops.unique_ints(mix, len(self.models))  # no sort: few models
        several = len(used) > 1
        return PointSet(model=self.models[int(used[0])], clusters=self.clusters,
                        cluster_ix=self.cluster_ix if whole else self.cluster_ix[idx], calibrations=self.calibrations,
                        calibration_ix=self.calibration_ix if whole else self.calibration_ix[idx],
                        plan=self.plan if whole else self.plan.take(idx), software=self.software,
                        strategies=self.strategies[int(self.strategy_index()[idx[0]])],
                        models=[self.models[int(u)] for u in used] if several else None,
                        model_ix=rows.reshape(-1).astype(np.int64) if several else None)


class _Interned:
    """Section objects by value: equal sections built from different axis values are one object.

    (The loaders already return one object for equal input; this also unites sections that
    are equal but were written differently, e.g. a preset and its spelled-out mapping.)
    """

    def __init__(self) -> None:
        self.objects: dict[Any, Any] = {}
        self._seen: dict[int, tuple[Any, Any]] = {}

    def __call__(self, obj: Any) -> Any:
        hit = self._seen.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        key = (type(obj).__name__, spec_key(obj))
        hit = self.objects.get(key)
        if hit is None:
            if len(self.objects) > 65536:
                self.objects.clear()
                self._seen.clear()
            hit = self.objects[key] = obj
        self._seen[id(obj)] = (obj, hit)
        return hit


# --------------------------------------------------------------- random draws
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (Steele, Lea & Flood 2014): a bijective 64-bit hash."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def unit_draws(seed: int, stream: int, ids: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) numbers, one per id: a pure function of (seed, stream, id)."""
    with np.errstate(over="ignore"):
        key = _mix(np.array([seed * 1_000_003 + stream * 7_919 + 1], dtype=np.uint64))[0]
        z = _mix(ids.astype(np.uint64) * _GOLDEN + key)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


# --------------------------------------------------------------- the sweep
class SweepSource:
    """Generates and materialises the points of a :class:`SweepSpec` (one per process)."""

    def __init__(self, spec: SweepSpec, catalog: Any) -> None:
        self.spec = spec
        self.catalog = catalog
        self.total = spec.total_points
        axes = spec.axes
        self.radix = [len(a.values) for a in axes]
        # Row-major strides: the last axis varies fastest.
        strides, acc = [], 1
        for n in reversed(self.radix):
            strides.append(acc)
            acc *= max(n, 1)
        self.strides = list(reversed(strides))
        self.sections: dict[str, list[int]] = {}
        for i, a in enumerate(axes):
            self.sections.setdefault(a.section, []).append(i)
        self.whole_plan = any(axes[i].path == "plan" for i in self.sections.get("plan", []))
        self._section_cache: dict[tuple[str, tuple[Any, ...]], Any] = {}
        self._intern = _Interned()
        self._plan_template: Plan | None = None
        self._plan_firsts: dict[int, Any] = {}
        self._converted: dict[tuple[int, Any], Any] = {}
        self.software: Software = build_section("software", spec.base.get("software") or {}, catalog)

    # ------------------------------------------------------------ values
    def codes(self, ids: np.ndarray) -> list[np.ndarray]:
        """Per axis: value index per point (float value for continuous random axes)."""
        spec = self.spec
        out: list[np.ndarray] = []
        contiguous = len(ids) > 1 and int(ids[-1]) - int(ids[0]) == len(ids) - 1
        for i, a in enumerate(spec.axes):
            if spec.mode == "grid":
                if contiguous:
                    out.append(_grid_codes(int(ids[0]), len(ids), self.strides[i], self.radix[i]))
                else:
                    out.append((ids // self.strides[i]) % self.radix[i])
            elif spec.mode == "zip":
                out.append(ids.copy())
            else:
                u = unit_draws(spec.seed, i, ids)
                if a.continuous and a.sample is not None:
                    out.append(_continuous(a, u))
                else:
                    out.append(np.minimum((u * len(a.values)).astype(np.int64), len(a.values) - 1))
        return out

    def value(self, i: int, code: Any) -> Any:
        """The value of axis ``i`` for a code from :meth:`codes`."""
        a = self.spec.axes[i]
        if a.continuous:
            return code.item() if hasattr(code, "item") else code
        return a.values[int(code)]

    # ------------------------------------------------------------ sections
    def _section(self, section: str, codes: tuple[Any, ...]) -> Any:
        """The section object for one combination of its axes' codes (cached; an error as SpecError)."""
        key = (section, codes)
        hit = self._section_cache.get(key)
        if hit is None:
            idx = self.sections.get(section, [])
            values = {i: self.value(i, c) for i, c in zip(idx, codes, strict=True)}
            try:
                hit = self._intern(build_section(section, apply_values(self.spec, section, values, self.catalog),
                                                 self.catalog))
            except (SpecError, NotFoundError) as err:
                hit = _Failed(Refusal.of(err))
            if len(self._section_cache) > 65536:
                self._section_cache.clear()
            self._section_cache[key] = hit
        return hit

    def _objects(self, section: str, codes: list[np.ndarray], n: int) -> tuple[list[Any], np.ndarray]:
        """The distinct section objects of the batch and each point's index (objects may be failures)."""
        idx = self.sections.get(section, [])
        if not idx:
            return [self._section(section, ())], np.zeros(n, np.int64)
        rows, inverse = _distinct_rows([codes[i] for i in idx], [self.spec.axes[i] for i in idx])
        return [self._section(section, row) for row in rows], inverse

    def _plan_columns(self, codes: list[np.ndarray], n: int) -> tuple[PlanColumns, list[Any], np.ndarray]:
        """The batch's plan columns (and, for a whole-plan axis, the plan objects and indices)."""
        if self.whole_plan:
            plans, inverse = self._objects("plan", codes, n)
            ok = [p if isinstance(p, Plan) else self._template() for p in plans]
            return PlanColumns.from_plans(ok, inverse), plans, inverse
        cols = PlanColumns.constant(self._template(), n)
        for i in self.sections.get("plan", []):
            a = self.spec.axes[i]
            if a.continuous:
                uniq, inv = np.unique(codes[i], return_inverse=True)
                values = [self._convert(i, c) for c in uniq.tolist()]
                inverse = inv.reshape(-1)
            else:  # a code is the value's index: convert every value once, index by code
                values = [self._convert(i, c) for c in range(len(a.values))]
                inverse = codes[i]
            cols = _set_column(cols, a.path.split(".")[1:], values, inverse)
        return cols, [], np.zeros(n, np.int64)

    def _template(self) -> Plan:
        """The base plan with each plan axis at its first value (what fields without an axis hold)."""
        if self._plan_template is None:
            idx = self.sections.get("plan", [])
            firsts = {i: self.value(i, 0 if not self.spec.axes[i].continuous else _probe(self.spec.axes[i]))
                      for i in idx}
            self._plan_firsts = firsts
            self._plan_template = build_section("plan", apply_values(self.spec, "plan", firsts, self.catalog),
                                                self.catalog)
        return self._plan_template

    def _convert(self, i: int, code: Any) -> Any:
        """Axis value converted to the field's type (checked by the schema once per value)."""
        key = (i, code)
        hit = self._converted.get(key, _MISSING)
        if hit is _MISSING:
            self._template()
            a = self.spec.axes[i]
            values = {**self._plan_firsts, i: self.value(i, code)}
            built = build_section("plan", apply_values(self.spec, "plan", values, self.catalog), self.catalog)
            hit = get_path(built, a.path.split("."))
            self._converted[key] = hit
        return hit

    def batch(self, start: int, stop: int) -> PointBatch:
        """Points ``start`` .. ``stop - 1``."""
        ids = np.arange(start, stop, dtype=np.int64)
        n = len(ids)
        codes = self.codes(ids)
        objects: dict[str, tuple[list[Any], np.ndarray]] = {
            s: self._objects(s, codes, n) for s in _OBJECT_SECTIONS}
        plan, plan_objects, plan_ix = self._plan_columns(codes, n)
        errors: list[str] = []
        refusals: dict[str, Refusal] = {}
        error_ix = np.full(n, -1, np.int64)
        # The first section that fails to build names the point's error (in _SECTIONS' order).
        for section in _SECTIONS:
            objs, ix = objects[section] if section != "plan" else (plan_objects, plan_ix)
            for k, obj in enumerate(objs):
                if isinstance(obj, _Failed):
                    if obj.reason not in errors:
                        errors.append(obj.reason)
                        refusals[obj.reason] = obj.refusal
                    error_ix[(ix == k) & (error_ix < 0)] = errors.index(obj.reason)
        lists: dict[str, list[Any]] = {}
        index: dict[str, np.ndarray] = {}
        for section in _OBJECT_SECTIONS:
            objs, ix = objects[section]
            # Distinct objects (interned: equal sections are one object) and each row's position.
            good: list[Any] = []
            pos: dict[int, int] = {}
            remap = np.full(len(objs), -1, np.int64)
            for k, o in enumerate(objs):
                if isinstance(o, _Failed):
                    continue
                j = pos.get(id(o))
                if j is None:
                    j = pos[id(o)] = len(good)
                    good.append(o)
                remap[k] = j
            lists[section], index[section] = good, np.where(error_ix < 0, remap[ix], -1)
        return PointBatch(ids=ids, models=lists["model"], model_ix=index["model"], clusters=lists["cluster"],
                          cluster_ix=index["cluster"], calibrations=lists["calibration"],
                          calibration_ix=index["calibration"], plan=plan, error_ix=error_ix, errors=errors,
                          refusals=refusals,
                          axis_codes=list(zip(self.spec.axes, codes, strict=True)), software=self.software,
                          strategies=lists["strategies"], strategies_ix=index["strategies"])


def _grid_codes(start: int, n: int, stride: int, radix: int) -> np.ndarray:
    """``(ids // stride) % radix`` for the contiguous ids ``start .. start+n-1``, without a division
    per point: the codes run in blocks of ``stride`` equal values cycling through ``0 .. radix-1``.
    """
    if stride == 1:
        return (np.arange(n, dtype=np.int64) + start) % radix
    first, last = start // stride, (start + n - 1) // stride
    blocks = np.arange(first, last + 1, dtype=np.int64)
    counts = np.full(len(blocks), stride, np.int64)
    counts[0] = min(stride - start % stride, n)
    if len(blocks) > 1:
        counts[-1] = (start + n) - last * stride
    return np.repeat(blocks % radix, counts)


@dataclass(frozen=True)
class _Failed:
    """A section that could not be built from its axis values."""

    refusal: Refusal

    @property
    def reason(self) -> str:
        """The refusal's message."""
        return self.refusal.message


def _distinct_rows(codes: Sequence[np.ndarray], axes: Sequence[Axis]) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """Distinct rows of per-axis codes (tuples of Python values) and each point's row."""
    if all(not a.continuous for a in axes):
        radix = [max(len(a.values), 1) for a in axes]
        if math.prod(radix) < 2**62:
            # One int64 key per point (mixed radix): a 1-D unique is fast.
            key = np.zeros(len(codes[0]), np.int64)
            mult = 1
            for c, r in zip(reversed(codes), reversed(radix), strict=True):
                key += c.astype(np.int64) * mult
                mult *= r
            uniq, inv = ops.unique_ints(key, mult)
            rows = []
            for key_value in uniq.tolist():
                digits = []
                rest = key_value
                for r in reversed(radix):
                    rest, d = divmod(rest, r)
                    digits.append(d)
                rows.append(tuple(reversed(digits)))
            return rows, inv.reshape(-1)
    mat = np.stack([np.asarray(c, np.float64) for c in codes], axis=1)
    uniq, inv = np.unique(mat, axis=0, return_inverse=True)
    rows = [tuple(_key_item(a, v) for a, v in zip(axes, row, strict=True)) for row in uniq]
    return rows, inv.reshape(-1)


def _set_column(cols: PlanColumns, parts: Sequence[str], values: Sequence[Any], inverse: np.ndarray) -> PlanColumns:
    """``cols`` with the plan field at ``parts`` set per point to ``values[inverse]``."""
    name = parts[0]
    if name in _NESTED:
        nested = getattr(cols, name)
        if len(parts) == 1:  # a whole Overlap/Offload value per point
            for f in dataclasses.fields(nested):
                nested = dataclasses.replace(nested, **{f.name: plan_column([getattr(v, f.name) for v in values],
                                                                            f.name)[inverse]})
        else:
            nested = dataclasses.replace(nested, **{parts[1]: plan_column(list(values), parts[1])[inverse]})
        return dataclasses.replace(cols, **{name: nested})
    return dataclasses.replace(cols, **{name: plan_column(list(values), name)[inverse]})


_MISSING = object()


def _probe(a: Axis) -> Any:
    assert a.sample is not None
    return _from_unit(a.sample, 0.0)


def _key_item(a: Axis, v: float) -> Hashable:
    return float(v) if a.continuous else int(v)


def _cell(v: Any) -> Any:
    """A value as a table cell: scalars as they are, anything else as compact text."""
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    import json

    return json.dumps(v, sort_keys=True, default=str)


def _continuous(a: Axis, u: np.ndarray) -> np.ndarray:
    s = a.sample
    assert s is not None and s.low is not None and s.high is not None
    if s.log:
        x = np.exp(np.log(s.low) + u * (np.log(s.high) - np.log(s.low)))
    else:
        x = s.low + u * (s.high - s.low)
    if s.integer:
        return np.clip(np.floor(x + 0.5), s.low, s.high).astype(np.int64)
    return x
