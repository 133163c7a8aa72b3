"""Sweep points: ids -> axis values -> groups of points sharing everything but gbs and vp.

Point ids are positions in the sweep's enumeration (grid: row-major over the axes, the
last axis fastest; zip: the i-th value of every axis; random: draws that are a pure
function of (seed, axis, id)), so any range of ids can be generated anywhere, in any
order, and a retried batch yields the same points.

The evaluator works on *groups*: points that share the cluster, model, calibration and
every plan field except the global batch size and the virtual-pipeline degree. Those
two vary per point inside a group (numpy arrays), everything else is computed once per
group (see ``fastpath.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core.errors import NotFoundError, SpecError
from twin.core.specs import Calibration, Cluster, Model, Plan
from twin.sweep.metrics import reason_of
from twin.sweep.spec import Axis, SweepSpec, _from_unit, apply_values, build_section, get_path

POINT_FIELDS = ("plan.gbs", "plan.vp")  # vary per point inside a group
_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(Plan) if f.init)


@dataclass
class GroupSpec:
    """Everything points of one group share. ``error``: the group's scenario does not build.

    ``plan``'s own gbs and vp are placeholders; points take theirs from the batch, or
    ``gbs``/``vp`` here when the batch has none.
    """

    cluster: Cluster | None
    model: Model | None
    plan: Plan | None
    calibration: Calibration
    gbs: int = 1
    vp: int = 1
    error: str | None = None


@dataclass
class PointBatch:
    """A contiguous range of points, grouped."""

    ids: np.ndarray                         # int64, ascending
    groups: list[GroupSpec]
    gix: np.ndarray                         # int64: group of each point
    gbs: np.ndarray | None = None           # int64 per point; None: the group plan's
    vp: np.ndarray | None = None
    columns: dict[str, Any] = field(default_factory=dict)   # axis columns (values per point)

    def __len__(self) -> int:
        return len(self.ids)


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
        self.point_axes = [i for i, a in enumerate(axes) if a.path in POINT_FIELDS]
        self.group_axes = [i for i, a in enumerate(axes) if a.path not in POINT_FIELDS]
        self.sections: dict[str, list[int]] = {}
        for i in self.group_axes:
            self.sections.setdefault(axes[i].section, []).append(i)
        self._section_cache: dict[tuple[str, tuple[Any, ...]], Any] = {}
        self._plan_template: Plan | None = None
        self._plan_firsts: dict[int, Any] = {}
        self._converted: dict[tuple[int, Any], Any] = {}
        self._groups: dict[tuple[Any, ...], GroupSpec] = {}

    # ------------------------------------------------------------ values
    def codes(self, ids: np.ndarray) -> list[np.ndarray]:
        """Per axis: value index per point (float value for continuous random axes)."""
        spec = self.spec
        out: list[np.ndarray] = []
        for i, a in enumerate(spec.axes):
            if spec.mode == "grid":
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

    # ------------------------------------------------------------ groups
    def _section(self, section: str, codes: tuple[Any, ...]) -> Any:
        key = (section, codes)
        hit = self._section_cache.get(key)
        if hit is None:
            idx = self.sections.get(section, [])
            values = {i: self.value(i, c) for i, c in zip(idx, codes, strict=True)}
            hit = build_section(section, apply_values(self.spec, section, values, self.catalog), self.catalog)
            if len(self._section_cache) > 65536:
                self._section_cache.clear()
            self._section_cache[key] = hit
        return hit

    def _plan(self, codes: tuple[Any, ...], cluster: Cluster) -> tuple[Plan, int, int]:
        """The group's plan (at gbs = mbs*dp, vp = 1) and its own gbs and vp."""
        idx = self.sections.get("plan", [])
        if any(self.spec.axes[i].path == "plan" for i in idx):
            plan = self._section("plan", codes)
            return plan, plan.gbs, plan.vp
        if self._plan_template is None:
            firsts = {i: self.value(i, 0 if not self.spec.axes[i].continuous else _probe(self.spec.axes[i]))
                      for i in idx}
            for i in self.point_axes:
                a = self.spec.axes[i]
                firsts[i] = _probe(a) if a.continuous else a.values[0]
            self._plan_firsts = firsts
            self._plan_template = build_section("plan", apply_values(self.spec, "plan", firsts, self.catalog),
                                                self.catalog)
        template = self._plan_template
        kw = {name: getattr(template, name) for name in _PLAN_FIELDS}
        for i, c in zip(idx, codes, strict=True):
            parts = self.spec.axes[i].path.split(".")[1:]
            value = self._convert(i, c)
            kw[parts[0]] = value if len(parts) == 1 else _replace_path(kw[parts[0]], parts[1:], value)
        gbs, vp = kw["gbs"], kw["vp"]
        dp = kw["dp"] if kw["dp"] is not None else cluster.num_gpus // (kw["tp"] * kw["pp"] * kw["cp"])
        kw["gbs"], kw["vp"] = max(1, kw["mbs"] * dp), 1
        return Plan(**kw), gbs, vp

    def _convert(self, i: int, code: Any) -> Any:
        """Axis value converted to the field's type (checked by the schema once per value)."""
        key = (i, code.item() if hasattr(code, "item") else code)
        hit = self._converted.get(key, _MISSING)
        if hit is _MISSING:
            a = self.spec.axes[i]
            values = {**self._plan_firsts, i: self.value(i, code)}
            built = build_section("plan", apply_values(self.spec, "plan", values, self.catalog), self.catalog)
            hit = get_path(built, a.path.split("."))
            self._converted[key] = hit
        return hit

    def group(self, key: tuple[Any, ...]) -> GroupSpec:
        """Materialise one group (cached): cluster, model, plan and calibration objects."""
        hit = self._groups.get(key)
        if hit is not None:
            return hit
        codes = dict(zip(self.group_axes, key, strict=True))
        try:
            parts = {s: tuple(codes[i] for i in self.sections.get(s, [])) for s in ("cluster", "model", "calibration")}
            cluster = self._section("cluster", parts["cluster"])
            model = self._section("model", parts["model"])
            cal = self._section("calibration", parts["calibration"])
            plan, gbs, vp = self._plan(tuple(codes[i] for i in self.sections.get("plan", [])), cluster)
            g = GroupSpec(cluster=cluster, model=model, plan=plan, calibration=cal, gbs=gbs, vp=vp)
        except (SpecError, NotFoundError) as err:
            g = GroupSpec(cluster=None, model=None, plan=None, calibration=Calibration(), error=reason_of(err))
        if len(self._groups) > 262144:
            self._groups.clear()
        self._groups[key] = g
        return g

    def batch(self, start: int, stop: int) -> PointBatch:
        """Points ``start`` .. ``stop - 1``."""
        ids = np.arange(start, stop, dtype=np.int64)
        codes = self.codes(ids)
        discrete = all(not self.spec.axes[i].continuous for i in self.group_axes)
        span = math.prod(self.radix[i] for i in self.group_axes) if discrete else 0
        if self.group_axes and discrete and span < 2**62:
            # One int64 key per point (mixed radix over the group axes): a 1-D unique is fast.
            key = np.zeros(len(ids), dtype=np.int64)
            mults = []
            mult = 1
            for i in reversed(self.group_axes):
                key += codes[i] * mult
                mults.append(mult)
                mult *= self.radix[i]
            uniq, gix = np.unique(key, return_inverse=True)
            digits = [((uniq // mu) % self.radix[i]).tolist()
                      for i, mu in zip(reversed(self.group_axes), mults, strict=True)]
            keys = list(zip(*reversed(digits), strict=True))
            gix = gix.reshape(-1)
        elif self.group_axes:
            mat = np.stack([codes[i].astype(np.float64) for i in self.group_axes], axis=1)
            uniq, gix = np.unique(mat, axis=0, return_inverse=True)
            gix = gix.reshape(-1)
            keys = [tuple(_key_item(self.spec.axes[i], v) for i, v in zip(self.group_axes, row, strict=True))
                    for row in uniq]
        else:
            gix = np.zeros(len(ids), dtype=np.int64)
            keys = [()]
        groups = [self.group(k) for k in keys]
        gbs = vp = None
        for i in self.point_axes:
            a = self.spec.axes[i]
            vals = codes[i] if a.continuous else np.asarray([int(v) for v in a.values], dtype=np.int64)[codes[i]]
            arr = np.asarray(vals).astype(np.int64)
            if a.path == "plan.gbs":
                gbs = arr
            else:
                vp = arr
        columns: dict[str, Any] = {}
        for i, a in enumerate(self.spec.axes):
            if a.continuous:
                columns[a.column] = codes[i]
            else:
                table = np.asarray([_cell(v) for v in a.values], dtype=object)
                columns[a.column] = table[codes[i]]
        return PointBatch(ids=ids, groups=groups, gix=gix.astype(np.int64), gbs=gbs, vp=vp, columns=columns)


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


def _replace_path(obj: Any, parts: Sequence[str], value: Any) -> Any:
    """``obj`` with the (nested) dataclass field at ``parts`` replaced."""
    if not parts:
        return value
    head = parts[0]
    if len(parts) == 1:
        return dataclasses.replace(obj, **{head: value})
    return dataclasses.replace(obj, **{head: _replace_path(getattr(obj, head), parts[1:], value)})
