"""A batch of points for the step model: one model, many plans, clusters and calibrations.

A :class:`PointSet` is what ``TwinModel.evaluate_points`` takes: the model the points
share (its layer list is the batch's structure; the points may differ in sequence length,
see :func:`model_rows`), the distinct clusters and calibrations
with, per point, the index of its own, and the plan as :class:`PlanColumns` (one numpy
array per :class:`~twin.core.specs.Plan` field). Strategies read a batch's plan exactly as
they read one plan (``plan.tp``, ``plan.overlap.p2p``, ``plan.offload.optimizer``,
``plan.sp``, ``plan.expert_tp``); string fields are :class:`~twin.core.ops.Labels`
(``plan.recompute == "full"`` works), and so is ``recompute_modules`` (each point's
modules sorted and joined by commas: ``specs.recompute_module`` reads it); optional
fields hold a sentinel where the plan has
``None``: ``dp``, ``etp`` and ``recompute_layers`` 0, ``sequence_parallel`` and
``overlap.tp_comm`` -1.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.ops import Labels
from twin.core.specs import (
    DEFAULT_SOFTWARE,
    DEFAULT_STRATEGIES,
    Calibration,
    Cluster,
    Model,
    Offload,
    Overlap,
    Plan,
    Scenario,
    Software,
    Strategies,
)

# Plan fields that may be None, and what a column holds instead.
_NONE_AS = {"dp": 0, "etp": 0, "recompute_layers": 0, "pp_first_layers": 0, "pp_last_layers": 0,
            "sequence_parallel": -1, "tp_comm": -1}
# Plan fields holding a set of names: a column of Labels, each the sorted names joined by commas.
_TUPLE_FIELDS = ("recompute_modules",)


def plan_column(values: Sequence[Any], name: str) -> np.ndarray:
    """A plan field's values as a column (None as the field's sentinel, see the module docstring)."""
    if name in _TUPLE_FIELDS:
        return Labels.of([",".join(sorted(set(v))) for v in values])
    sentinel = _NONE_AS.get(name)
    if sentinel is not None:
        return np.asarray([sentinel if v is None else int(v) for v in values], dtype=np.int64)
    if values and all(map(isinstance, values, itertools.repeat(str))):  # all(isinstance(v, str)), in C
        return Labels.of(values)
    arr = np.asarray(values)
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else arr


def _value(arr: np.ndarray, i: int, name: str) -> Any:
    if isinstance(arr, Labels):
        if name in _TUPLE_FIELDS:
            text = arr.name(i)
            return tuple(text.split(",")) if text else ()
        return arr.name(i)
    v = arr[i].item()
    sentinel = _NONE_AS.get(name)
    if sentinel is not None:
        if v == sentinel:
            return None
        return bool(v) if name in ("sequence_parallel", "tp_comm") else v
    return v


@dataclass(frozen=True, slots=True)
class OverlapColumns:
    """:class:`~twin.core.specs.Overlap` per point (``tp_comm``: -1 None, 0 off, 1 on)."""

    grad_reduce: np.ndarray
    param_gather: np.ndarray
    tp_comm: np.ndarray
    p2p: np.ndarray
    ep_comm: np.ndarray


@dataclass(frozen=True, slots=True)
class OffloadColumns:
    """:class:`~twin.core.specs.Offload` per point."""

    optimizer: np.ndarray
    params: np.ndarray
    activations: np.ndarray


_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(Plan) if f.init)
_MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(Model))
_PLAN_GETTER = operator.attrgetter(*_PLAN_FIELDS)
_MODEL, _SOFTWARE, _STRATEGIES = (operator.attrgetter(a) for a in ("model", "software", "strategies"))
_CLUSTER, _CALIBRATION, _PLAN, _NAME = (operator.attrgetter(a) for a in ("cluster", "calibration", "plan", "name"))
_NESTED = {"overlap": (Overlap, OverlapColumns), "offload": (Offload, OffloadColumns)}
_NESTED_FIELDS = {name: tuple(f.name for f in dataclasses.fields(spec)) for name, (spec, _) in _NESTED.items()}


def _plan_field(values: Sequence[Any], name: str, index: np.ndarray | None, n: int) -> np.ndarray:
    """The column of one plan field's ``values`` (one per distinct plan), ``[index]`` per point
    when given, ``n`` points: a read-only broadcast view where every value is the same.
    """
    if values and (name in _NONE_AS or type(values[0]) is str) and values.count(values[0]) == len(values):
        # Equal values make equal columns here (a sentinel field's int(v), a string field's
        # labels); a plain number field is left to numpy (1, 1.0 and True compare equal but
        # make columns of different dtypes). tuple.count compares in C.
        return ops.broadcast_rows(plan_column(values[:1], name), n)
    col = plan_column(values, name)
    return col if index is None else col[index]


@dataclass(frozen=True, slots=True)
class PlanColumns:
    """A :class:`~twin.core.specs.Plan` per point: every field an array."""

    gbs: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    vp: np.ndarray
    schedule: np.ndarray
    pp_first_layers: np.ndarray
    pp_last_layers: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    mbs: np.ndarray
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray
    recompute_modules: np.ndarray
    precision: np.ndarray
    recipe: np.ndarray
    bf16_layers_start: np.ndarray
    bf16_layers_end: np.ndarray
    optimizer_sharding: np.ndarray
    fsdp_reshard_after_forward: np.ndarray
    dp_shard: np.ndarray
    grad_reduce_dtype: np.ndarray
    overlap: OverlapColumns
    offload: OffloadColumns
    moe_dispatcher: np.ndarray
    cp_comm_type: np.ndarray
    rank_order: np.ndarray
    trainable: np.ndarray
    lora_rank: np.ndarray

    @property
    def sp(self) -> np.ndarray:
        """Sequence parallelism in effect (as :attr:`Plan.sp`)."""
        return np.where(self.sequence_parallel < 0, self.tp > 1, (self.sequence_parallel == 1) & (self.tp > 1))

    @property
    def expert_tp(self) -> np.ndarray:
        """Tensor-parallel degree inside each expert (as :attr:`Plan.expert_tp`)."""
        return np.where(self.etp > 0, self.etp, self.tp)

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_plans(cls, plans: Sequence[Plan], index: np.ndarray | None = None) -> PlanColumns:
        """Columns of ``plans`` (then ``[index]`` per point, when given).

        A string field, or one that may be None, with one value in every plan (most of a
        batch's such fields) becomes a read-only broadcast view of that value, as :meth:`take`
        keeps such a column: built from one value instead of a Python pass over every plan,
        and read by the batch path's constant-column shortcuts (``ops.take_rows``,
        ``Labels.__eq__``).
        """
        rows = list(zip(*map(_PLAN_GETTER, plans), strict=True)) if plans else [()] * len(_PLAN_FIELDS)
        n = len(plans) if index is None else len(index)
        kw: dict[str, Any] = {}
        for name, values in zip(_PLAN_FIELDS, rows, strict=True):
            if name in _NESTED:
                cols = _NESTED[name][1]
                names = _NESTED_FIELDS[name]
                # Interned (schema.loader): a batch's plans share few of these objects, so
                # their fields are read from the distinct ones and indexed per plan.
                by_id = {id(v): v for v in values}
                if len(by_id) == 1:
                    one = next(iter(by_id.values()))
                    kw[name] = cols(**{k: ops.broadcast_rows(plan_column((getattr(one, k),), k), n)
                                       for k in names})
                    continue
                inner = list(zip(*map(operator.attrgetter(*names), values), strict=True))
                kw[name] = cols(**{k: _plan_field(v, k, index, n) for k, v in zip(names, inner, strict=True)})
            else:
                kw[name] = _plan_field(values, name, index, n)
        return cls(**kw)

    def take(self, index: np.ndarray) -> PlanColumns:
        """The columns of the points in ``index`` (a constant column stays a broadcast view)."""
        kw: dict[str, Any] = {}
        take_rows = ops.take_rows
        for name in _PLAN_FIELDS:
            v = getattr(self, name)
            if name in _NESTED:
                kw[name] = type(v)(**{f.name: take_rows(getattr(v, f.name), index) for f in dataclasses.fields(v)})
            else:
                kw[name] = take_rows(v, index)
        return PlanColumns(**kw)

    @classmethod
    def constant(cls, plan: Plan, n: int) -> PlanColumns:
        """``n`` points with the same plan (read-only broadcast columns)."""
        one = cls.from_plans([plan])
        return one.take(np.zeros(n, np.int64))

    def plan(self, i: int) -> Plan:
        """The :class:`Plan` of point ``i``."""
        kw: dict[str, Any] = {}
        for name in _PLAN_FIELDS:
            v = getattr(self, name)
            if name in _NESTED:
                spec, _ = _NESTED[name]
                kw[name] = spec(**{f.name: _value(getattr(v, f.name), i, f.name) for f in dataclasses.fields(spec)})
            else:
                kw[name] = _value(v, i, name)
        return Plan(**kw)


class ColumnView:
    """Attribute access over distinct objects, one value per point: ``view.num_gpus`` is
    ``array([objects[i].num_gpus for i in index])``; nested objects give nested views.
    """

    __slots__ = ("_cache", "_index", "_objects")

    def __init__(self, objects: Sequence[Any], index: np.ndarray) -> None:
        self._objects = tuple(objects)
        self._index = index
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        cache = self._cache
        if name in cache:
            return cache[name]
        values = [getattr(o, name) for o in self._objects]
        if all(dataclasses.is_dataclass(v) for v in values):
            out: Any = ColumnView(values, self._index)
        elif any(v is None for v in values) and not all(v is None for v in values):
            out = ops.take_rows(np.asarray([v is not None for v in values]), self._index)
        elif all(v is None for v in values):
            out = None
        else:
            out = ops.take_rows(np.asarray(values), self._index)
        cache[name] = out
        return out

    def distinct(self) -> tuple[tuple[Any, ...], np.ndarray]:
        """The distinct objects and, per point, the index of its own."""
        return self._objects, self._index


def model_rows(model: Model, seq_len: np.ndarray) -> Model:
    """``model`` with one sequence length per row: what the batch path hands the step model
    when its points differ in sequence length only.

    The sequence length is a number the step model computes with (tokens per micro-batch,
    attention pairs, activation bytes), like a plan field, so it can be a column like them;
    everything else of the model is the batch's structure. Such a view is for arithmetic
    only: it is never hashed or used as a cache key (its caches key on the real models).
    """
    view = object.__new__(Model)
    for name in _MODEL_FIELDS:
        object.__setattr__(view, name, getattr(model, name))
    object.__setattr__(view, "seq_len", seq_len)
    return view


def take_model_rows(model: Model, rows: Any) -> Model:
    """``model`` for the rows ``rows`` of a batch: the rows' own sequence lengths where
    ``model`` has one per row (:func:`model_rows`), else ``model`` itself.
    """
    return model_rows(model, model.seq_len[rows]) if type(model.seq_len) is np.ndarray else model


def model_structure(model: Model) -> Model:
    """``model`` without its sequence length (set to 1): models with equal structures can
    share a batch (:class:`PointSet` ``models``).
    """
    return model if model.seq_len == 1 else dataclasses.replace(model, seq_len=1)


@dataclass
class PointSet:
    """Points sharing one model, one software stack and one strategy selection: distinct
    clusters and calibrations, a plan per point. The software stack is structure, like the
    model: its numbers are plain numbers for the whole batch, and the selection decides which
    strategies run (``evaluate_many`` groups scenarios by both).

    ``cluster_ix[i]`` / ``calibration_ix[i]``: the cluster / calibration of point ``i``.
    ``names``: optional scenario names (one per point) for the estimates built from it.
    ``models`` / ``model_ix``: where the points differ in sequence length, the distinct
    models (equal but for ``seq_len``: :func:`model_structure`; ``model`` is the first) and,
    per point, the index of its own; None: every point has ``model``.
    """

    model: Model
    clusters: Sequence[Cluster]
    cluster_ix: np.ndarray
    calibrations: Sequence[Calibration]
    calibration_ix: np.ndarray
    plan: PlanColumns
    names: Sequence[str] | None = None
    software: Software = DEFAULT_SOFTWARE
    strategies: Strategies = DEFAULT_STRATEGIES
    models: Sequence[Model] | None = None
    model_ix: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.cluster_ix)

    def take(self, index: np.ndarray) -> PointSet:
        """The points in ``index`` (same distinct clusters, calibrations and models)."""
        names = None if self.names is None else [self.names[int(i)] for i in index]
        return PointSet(self.model, self.clusters, self.cluster_ix[index], self.calibrations,
                        self.calibration_ix[index], self.plan.take(index), names, self.software, self.strategies,
                        self.models, None if self.model_ix is None else self.model_ix[index])

    def seq_len(self) -> Any:
        """Per point, its sequence length (a plain int when every point has ``model``'s)."""
        if self.models is None or self.model_ix is None:
            return self.model.seq_len
        return np.asarray([m.seq_len for m in self.models], np.int64)[self.model_ix]

    def model_rows(self) -> Model:
        """The model with its sequence length per point (:func:`model_rows`), or ``model``
        itself when every point has it.
        """
        seq = self.seq_len()
        return model_rows(self.model, seq) if type(seq) is np.ndarray else self.model

    def scenario(self, i: int) -> Scenario:
        """Point ``i`` as a :class:`Scenario`."""
        model = self.model if self.models is None or self.model_ix is None else self.models[int(self.model_ix[i])]
        return Scenario(cluster=self.clusters[int(self.cluster_ix[i])], model=model,
                        plan=self.plan.plan(i), name="" if self.names is None else self.names[i],
                        calibration=self.calibrations[int(self.calibration_ix[i])], software=self.software,
                        strategies=self.strategies)

    @classmethod
    def from_scenarios(cls, scenarios: Sequence[Scenario]) -> PointSet:
        """The points of ``scenarios``, which must share one software stack, one strategy
        selection and one model (by value), or models that differ in sequence length only
        (``models`` / ``model_ix``).
        """
        if not scenarios:
            raise ValueError("a point set needs at least one scenario")
        model = scenarios[0].model
        software = scenarios[0].software
        strategies = scenarios[0].strategies
        n = len(scenarios)
        # Each check and index below runs in C (list.count compares by identity first, then
        # by value, as the per-scenario test it replaces did): ~1 us a point less, measured.
        for attr, shared, what in ((_SOFTWARE, software, "software stack"),
                                   (_STRATEGIES, strategies, "strategy selection")):
            if list(map(attr, scenarios)).count(shared) != n:
                raise ValueError(f"every scenario of a point set must have the same {what}")
        every_m = list(map(_MODEL, scenarios))
        models: list[Model] | None = None
        mix: np.ndarray | None = None
        if every_m.count(model) != n:
            structure = model_structure(model)
            models, mrow = [], {}
            by_value: dict[Model, int] = {}
            for m in {id(m): m for m in every_m}.values():
                if model_structure(m) != structure:
                    raise ValueError("every scenario of a point set must have the same model, "
                                     "or models that differ in seq_len only")
                k = by_value.setdefault(m, len(models))
                if k == len(models):
                    models.append(m)
                mrow[id(m)] = k
            mix = np.fromiter(map(mrow.__getitem__, map(id, every_m)), np.int64, n)
        every_c = list(map(_CLUSTER, scenarios))
        by_id_c = {id(c): c for c in every_c}
        clusters: list[Cluster] = list(by_id_c.values())
        crow = {k: j for j, k in enumerate(by_id_c)}
        cix = np.fromiter(map(crow.__getitem__, map(id, every_c)), np.int64, n)
        every_k = list(map(_CALIBRATION, scenarios))
        cals: list[Calibration] = []
        cal_by_value: dict[Calibration, int] = {}
        krow: dict[int, int] = {}
        for cal in {id(c): c for c in every_k}.values():  # calibrations are few; equal ones share a row
            k = cal_by_value.get(cal)
            if k is None:
                k = cal_by_value[cal] = len(cals)
                cals.append(cal)
            krow[id(cal)] = k
        kix = np.fromiter(map(krow.__getitem__, map(id, every_k)), np.int64, n)
        # Plans are interned by value (schema.loader), so a batch's points share few
        # plan objects: columns are built from the distinct ones (by identity: the same
        # object has the same fields), in first-seen order, and indexed per point.
        every = list(map(_PLAN, scenarios))
        distinct = {id(p): p for p in every}
        if len(distinct) == len(every):
            columns = PlanColumns.from_plans(every)
        else:
            row = {k: j for j, k in enumerate(distinct)}
            pix = np.fromiter(map(row.__getitem__, map(id, every)), np.int64, len(every))
            columns = PlanColumns.from_plans(list(distinct.values()), pix)
        return cls(model=model, clusters=clusters, cluster_ix=cix, calibrations=cals, calibration_ix=kix,
                   plan=columns, names=list(map(_NAME, scenarios)),
                   software=software, strategies=strategies, models=models, model_ix=mix)
